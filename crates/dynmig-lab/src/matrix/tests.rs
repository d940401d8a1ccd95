//! Unit tests of [`super`].

use super::*;
use dynmig_core::geometry::A100_40GB;

#[test]
fn the_grid_sweeps_speed_and_power_and_each_variant_reaches_the_engine() {
    let base = ModelParams::default();
    let cells = grid_cells("default", &A100_40GB, DrainScope::Node, &[1, 2], &base);
    // 2 due ranges x 4 speed models x 2 time-limit factors + 3 power variants, x 2 seeds.
    assert_eq!(cells.len(), (2 * 4 * 2 + 3) * 2);
    let miso = cells.iter().filter(|c| c.point.contains("speed miso")).count();
    assert_eq!(miso, 2 * 2 * 2);
    assert!(cells
        .iter()
        .filter(|c| c.point.contains("gamma"))
        .all(|c| c.params.speed_training == SpeedCurve::Exponent));
    let mut cfg = SimConfig::new(&A100_40GB, 1, 8);
    let fit = cfg.power.clone();
    PowerVariant::FullAtTdp.apply(&mut cfg);
    assert_eq!(cfg.power.scale_w, fit.tdp_w - fit.idle_w);
    PowerVariant::Exponent(1.0).apply(&mut cfg);
    assert_eq!(cfg.power.exponent, 1.0);
    let groups: std::collections::BTreeSet<String> = cells.iter().map(Cell::group).collect();
    assert_eq!(groups.len(), 2 * 4 * 2 + 3, "one group per grid point");
}

#[test]
fn a_cell_schedules_with_the_setups_what_ifs() {
    use crate::evaluate::{EvalOptions, PolicyName};
    use dynmig_sim::workload::Load;
    let setup = |what_if: &str| Setup {
        nodes: 2,
        gpus_per_node: 8,
        days: Some(2.0),
        load: Load::Factor(0.5),
        reconfig_cost_s: 4.0,
        policy_interval_s: 60.0,
        opts: EvalOptions {
            policies: vec![PolicyName::None, PolicyName::Static],
            ..EvalOptions::default()
        },
        what_if: what_if.parse().unwrap(),
        bf_window_s: 1440.0 * 60.0,
        bf_resolution_s: 60.0,
    };
    let cell = Cell {
        trace: SYNTHETIC.to_string(),
        model: &A100_40GB,
        drain: DrainScope::Node,
        seed: 1,
        params: ModelParams::default(),
        point: String::new(),
        power: PowerVariant::Fit,
    };
    let pods = BTreeMap::new();
    let slurm = run_cell(&cell, &setup(""), &pods).unwrap();
    let spill = run_cell(&cell, &setup("spill-up"), &pods).unwrap();
    // The what-if reaches the cells' engine: the same workload and policies end
    // otherwise.
    let row = |o: &CellOutcome, p: &str| o.rows.iter().find(|r| r.policy == p).unwrap().mean_tardiness_s;
    assert_ne!(
        (row(&slurm, "none"), row(&slurm, "static")),
        (row(&spill, "none"), row(&spill, "static")),
        "the what-if reached the cells' engine"
    );
}
