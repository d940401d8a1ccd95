//! The clairvoyant planner (`crates/dynmig-sim/src/policies/clairvoyant.rs`): it judges the
//! planners' proposals on the true future jobs.

mod common;
use dynmig_core::geometry::A100_40GB;
use dynmig_sim::engine::{simulate, SimConfig};
use dynmig_sim::model::{Job, JobKind};
use dynmig_sim::policies::clairvoyant::ClairvoyantSettings;
use dynmig_sim::policies::{Objective, PlannerSettings, PolicyLimits, PolicySpec};
use dynmig_sim::workload::Workload;

fn limits() -> PolicyLimits {
    PolicyLimits {
        max_concurrent: 2,
        min_layout_lifetime: std::time::Duration::from_secs(600),
        min_gain: 1,
    }
}

fn clairvoyant() -> PolicySpec {
    PolicySpec::Clairvoyant(ClairvoyantSettings::new(PlannerSettings::new(
        limits(),
        Objective::Speed,
    )))
}

/// Whole GPUs and small jobs whose type (1g.5gb) no node has: keeping the layouts leaves
/// them unserved for good, so the change a planner proposes is made and every job runs.
#[test]
fn the_clairvoyant_planner_serves_jobs_whose_type_no_node_has() {
    let jobs: Vec<Job> = (0..4)
        .map(|i| Job {
            id: 0,
            release: f64::from(i) * 60.0,
            work: 60.0,
            mem_mib: 4_000,
            gpus: 1,
            kind: JobKind::Training,
            gamma: 1.0,
            curve: Default::default(),
            due: f64::from(i) * 60.0 + 86_400.0,
            limit_factor: 2.0,
            exact_slices: None,
        })
        .collect();
    let wl = Workload::new(jobs, "small".into());
    let cfg = SimConfig::new(&A100_40GB, 1, 2);
    let r = simulate(&wl, &clairvoyant(), &cfg, &|_| {}).unwrap();
    assert!(r.reconfigs >= 1, "no change made");
    assert!(r.never_started.is_empty(), "never started: {:?}", r.never_started);
}

/// On the synthetic workload with the `spill-up` what-if whole GPUs serve everything, and
/// the planner partitions at daily peaks anyway: judging its proposals (and the consolidating
/// planner's) on the true jobs, the clairvoyant planner's jobs are less late, for about the
/// same energy (within 1%).
#[test]
fn knowing_the_future_it_is_less_late_than_the_planner_for_the_same_energy() {
    let (wl, cfg) = common::spill_up_three_days();
    let plan = PolicySpec::Plan(PlannerSettings::new(limits(), Objective::Speed));
    let plan = simulate(&wl, &plan, &cfg, &|_| {}).unwrap();
    let cv = simulate(&wl, &clairvoyant(), &cfg, &|_| {}).unwrap();
    assert!(plan.reconfigs > 0, "the planner alone partitions here");
    let (t_cv, t_plan) = (
        common::total_tardiness_s(&cv, &wl),
        common::total_tardiness_s(&plan, &wl),
    );
    eprintln!("clairvoyant {t_cv} s late, plan {t_plan} s");
    assert!(t_cv < t_plan, "clairvoyant {t_cv} s late, plan {t_plan} s");
    assert!(
        cv.energy_j < plan.energy_j * 1.01,
        "clairvoyant {} J, plan {} J",
        cv.energy_j,
        plan.energy_j
    );
}
