//! Adaptation or a better static? (issue 27, item 6): beside each policy whose layouts
//! change, the static layout of its own mean node mix over the judged days.

// The helpers the engine's tests share, from their crate.
#[path = "../../dynmig-sim/tests/common/mod.rs"]
mod common;

use dynmig_core::geometry::{NodeLayout, ProfileCounts, A100_40GB};
use dynmig_lab::evaluate::{evaluate, EvalOptions, PolicyName};
use dynmig_sim::engine::{simulate, SimConfig};
use dynmig_sim::policies::mix::{frozen_mix, uniform};
use dynmig_sim::policies::{Objective, PlannerSettings, PolicyLimits, PolicySpec};
use dynmig_sim::workload::Workload;
use std::time::Duration;

fn node(text: &str) -> NodeLayout {
    let l = ProfileCounts::parse(&A100_40GB, text).unwrap();
    uniform(&A100_40GB, 1, 2, &l, 0).remove(0)
}

use common::training_job as job;

/// Whole-GPU jobs on day 0, then small ones on days 1-2: the planner repartitions.
fn shifting() -> Workload {
    let mut jobs = Vec::new();
    for i in 0..72 {
        jobs.push(job(f64::from(i) * 1200.0, 3600.0, 30_000));
    }
    for i in 0..(2 * 864) {
        jobs.push(job(86_400.0 + f64::from(i) * 100.0, 3600.0, 4_000));
    }
    Workload::new(jobs, "whole then small".into())
}

#[test]
fn the_mean_mix_gives_each_layout_its_share_of_the_nodes_by_largest_remainder() {
    let (a, b, c) = (node("1x7g.40gb"), node("7x1g.5gb"), node("2x3g.20gb"));
    // Shares 0.55, 0.30, 0.15 of 4 nodes: quotas 2.2, 1.2, 0.6; floors 2 + 1 + 0, the one
    // node left to the largest remainder (c's 0.6).
    let mix = frozen_mix(&[(a.clone(), 55.0), (b.clone(), 30.0), (c.clone(), 15.0)], 4).unwrap();
    assert_eq!(mix, vec![a.clone(), a.clone(), b.clone(), c.clone()]);
    // One layout all the time: every node.
    assert_eq!(frozen_mix(&[(b.clone(), 10.0)], 3).unwrap(), vec![b.clone(); 3]);
    // Nothing counted: no mix.
    assert!(frozen_mix(&[], 3).is_none());
    assert!(frozen_mix(&[(a, 0.0)], 3).is_none());
}

#[test]
fn a_run_counts_the_node_seconds_of_each_layout_from_the_window_start() {
    let wl = shifting();
    let mut cfg = SimConfig::new(&A100_40GB, 2, 2);
    cfg.window_start_s = 86_400.0;
    let limits = PolicyLimits {
        max_concurrent: 1,
        min_layout_lifetime: Duration::from_secs(600),
        min_gain: 1,
    };
    let spec = PolicySpec::Plan(PlannerSettings::new(limits, Objective::Speed));
    let r = simulate(&wl, &spec, &cfg, &|_| {}).unwrap();
    assert!(r.reconfigs > 0, "the planner never repartitioned");
    assert!(r.layout_time.len() >= 2, "{:?}", r.layout_time);
    let counted: f64 = r.layout_time.iter().map(|(_, s)| s).sum();
    let expected = 2.0 * (r.makespan_s - cfg.window_start_s);
    assert!(
        (counted - expected).abs() < 1e-3,
        "{counted} node-s counted, {expected} held"
    );
    // Longest first.
    assert!(r.layout_time.windows(2).all(|w| w[0].1 >= w[1].1));
    // A static run holds its one layout from the window start to the makespan.
    let fixed = simulate(&wl, &PolicySpec::Static(vec![node("7x1g.5gb"); 2]), &cfg, &|_| {}).unwrap();
    assert_eq!(fixed.layout_time.len(), 1);
    assert_eq!(fixed.layout_time[0].0, node("7x1g.5gb"));
}

#[test]
fn each_changing_policy_gets_a_frozen_row_and_fixed_layouts_none() {
    let wl = shifting();
    let cfg = SimConfig::new(&A100_40GB, 2, 2);
    let opts = EvalOptions {
        policies: vec![PolicyName::None, PolicyName::Static, PolicyName::Plan],
        search_days: Some((0.0, 1.0)),
        eval_from_days: Some(1.0),
        warn: false,
        threads: 1,
        ..Default::default()
    };
    let e = evaluate(&wl, &cfg, &opts, &|_, _| {}).unwrap();
    let names: Vec<&str> = e.rows.iter().map(|m| m.policy.as_str()).collect();
    assert_eq!(names, ["none", "static", "plan", "plan-frozen"]);
    let frozen = &e.rows[3];
    assert!(frozen.detail.contains("plan's mean node mix"), "{}", frozen.detail);
    assert_eq!(frozen.reconfigs, 0);
    let plain = evaluate(&wl, &cfg, &EvalOptions { frozen: false, ..opts }, &|_, _| {}).unwrap();
    let names: Vec<&str> = plain.rows.iter().map(|m| m.policy.as_str()).collect();
    assert_eq!(names, ["none", "static", "plan"]);
}

/// The `guarded-residual` row (issue 27, item 4) runs the guarded default with the residual
/// given; an untrained residual follows the guard, so its row is the guard's; without a
/// residual the row is omitted with a warning.
#[test]
fn the_guarded_residual_row_needs_a_model_and_an_untrained_one_is_the_guard() {
    use dynmig_sim::policies::residual::{Residual, ResidualUse};
    let wl = shifting();
    let cfg = SimConfig::new(&A100_40GB, 2, 2);
    let opts = EvalOptions {
        policies: vec![PolicyName::Guarded, PolicyName::GuardedResidual],
        search_days: Some((0.0, 1.0)),
        eval_from_days: Some(1.0),
        warn: false,
        threads: 1,
        frozen: false,
        residual: Some(ResidualUse::greedy(Residual::initial())),
        ..Default::default()
    };
    let e = evaluate(&wl, &cfg, &opts, &|_, _| {}).unwrap();
    let names: Vec<&str> = e.rows.iter().map(|m| m.policy.as_str()).collect();
    assert_eq!(names, ["guarded", "guarded-residual"]);
    assert_eq!(e.rows[0].et, e.rows[1].et);
    assert!(
        e.rows[1].detail.contains("learned residual (untrained)"),
        "{}",
        e.rows[1].detail
    );
    let without = evaluate(&wl, &cfg, &EvalOptions { residual: None, ..opts }, &|_, _| {}).unwrap();
    let names: Vec<&str> = without.rows.iter().map(|m| m.policy.as_str()).collect();
    assert_eq!(names, ["guarded"]);
    assert!(
        without
            .skipped
            .iter()
            .any(|w| w.contains("guarded-residual row omitted: no residual model")),
        "{:?}",
        without.skipped
    );
}
