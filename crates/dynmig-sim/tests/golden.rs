//! Golden checks on small hand-computed cases (docs/model.md gives the formulas).

mod common;
use common::linear_power;
use dynmig_core::geometry::{NodeLayout, ProfileCounts, A100_40GB};
use dynmig_sim::bounds::bounds;
use dynmig_sim::engine::{simulate, SimConfig};
use dynmig_sim::model::{Job, JobKind};
use dynmig_sim::policies::{PolicyLimits, PolicySpec};
use dynmig_sim::power::PowerModel;
use dynmig_sim::workload::Workload;
use std::time::Duration;

/// Seven jobs released at 0, 70 s each on a full GPU, linear scaling, due at 70 s.
fn seven_jobs() -> Workload {
    let jobs = (0..7)
        .map(|i| Job {
            id: i,
            release: 0.0,
            work: 70.0,
            mem_mib: 1000,
            gpus: 1,
            kind: JobKind::Training,
            gamma: 1.0,
            curve: Default::default(),
            due: 70.0,
            limit_factor: 1.0,
            exact_slices: None,
        })
        .collect();
    Workload::new(jobs, "seven".into())
}

fn cfg() -> SimConfig {
    let mut c = SimConfig::new(&A100_40GB, 1, 1);
    c.power = linear_power();
    c.audit = true;
    c
}

fn layout(s: &str) -> Vec<NodeLayout> {
    vec![NodeLayout {
        gpus: vec![ProfileCounts::parse(&A100_40GB, s).unwrap()],
    }]
}

#[test]
fn whole_gpu_runs_jobs_one_after_another() {
    let wl = seven_jobs();
    let r = simulate(&wl, &PolicySpec::None, &cfg(), &|_| {}).unwrap();
    let ends: Vec<i64> = r.jobs.iter().map(|o| o.end_ms).collect();
    assert_eq!(ends, [70_000, 140_000, 210_000, 280_000, 350_000, 420_000, 490_000]);
    // 150 W for 490 s.
    assert!((r.energy_j - 73_500.0).abs() < 1e-6, "{}", r.energy_j);
    assert_eq!(r.makespan_s, 490.0);
    assert_eq!(r.reconfigs, 0);
}

#[test]
fn seven_small_instances_run_jobs_side_by_side() {
    let wl = seven_jobs();
    let r = simulate(&wl, &PolicySpec::Static(layout("7x1g.5gb")), &cfg(), &|_| {}).unwrap();
    // Each job takes 70 x 7 / 1 = 490 s on a 1g; all start at 0.
    assert!(r
        .jobs
        .iter()
        .all(|o| o.start_ms == 0 && o.end_ms == 490_000 && o.slices == 1));
    // 50 W + 7 x 100/7 W for 490 s.
    assert!((r.energy_j - 73_500.0).abs() < 1e-6, "{}", r.energy_j);
}

#[test]
fn dynamic_repartitions_then_runs() {
    let wl = seven_jobs();
    let limits = PolicyLimits {
        max_concurrent: 1,
        min_layout_lifetime: Duration::ZERO,
        min_gain: 1,
    };
    let r = simulate(&wl, &PolicySpec::Dynamic(limits), &cfg(), &|_| {}).unwrap();
    // At 0 the demand-driven policy sees 7 pending 1g.5gb jobs and one free 7g: 7x1g serves
    // them all. Destroy the 7g and create seven 1g: 8 changes x 4 s = 32 s, idle power only.
    assert_eq!(r.reconfigs, 1);
    assert_eq!(r.instance_changes, 8);
    assert!(r
        .jobs
        .iter()
        .all(|o| o.start_ms == 32_000 && o.end_ms == 522_000 && o.slices == 1));
    assert!((r.energy_j - (50.0 * 32.0 + 73_500.0)).abs() < 1e-6, "{}", r.energy_j);
}

#[test]
fn bounds_of_seven_jobs() {
    let wl = seven_jobs();
    let b = bounds(&wl, &A100_40GB, 1, &linear_power());
    // Fluid: 7 jobs x 490 slice-s on 7 slices = 490 s.
    assert!((b.makespan_s - 490.0).abs() < 1e-9);
    // Idle 50 W x 490 s + 7 x 7000 J of busy energy (any profile, linear power).
    assert!((b.energy_j - 73_500.0).abs() < 1e-6, "{}", b.energy_j);
    // SRPT completions 70, 140, ..., 490 against due dates all 70: 0 + 70 + ... + 420.
    assert!((b.mean_tardiness_s - 210.0).abs() < 1e-9, "{}", b.mean_tardiness_s);
}

#[test]
fn multi_gpu_job_waits_for_whole_gpus_on_one_node() {
    let mut jobs = vec![Job {
        id: 0,
        release: 0.0,
        work: 100.0,
        mem_mib: 1000,
        gpus: 1,
        kind: JobKind::Training,
        gamma: 1.0,
        curve: Default::default(),
        due: 100.0,
        limit_factor: 1.0,
        exact_slices: None,
    }];
    jobs.push(Job {
        id: 1,
        release: 1.0,
        gpus: 2,
        ..jobs[0].clone()
    });
    let wl = Workload::new(jobs, "multi".into());
    let mut c = cfg();
    c.gpus_per_node = 2;
    let r = simulate(&wl, &PolicySpec::None, &c, &|_| {}).unwrap();
    assert_eq!(
        r.jobs[1].start_ms, 100_000,
        "the 2-GPU job waits for the first job's GPU"
    );
    assert_eq!(r.jobs[1].end_ms, 200_000);
}

#[test]
fn power_fit_matches_the_a100_measurements() {
    let p = PowerModel::a100();
    for (c, w) in dynmig_sim::power::A100_BURN_W {
        let model = p.idle_w + p.instance_w(c);
        assert!((model - w).abs() < 3.0, "{c}g: fit {model:.1} W vs measured {w} W");
    }
    assert!(p.exponent > 0.0 && p.exponent < 1.0, "concave: {}", p.exponent);
    assert!(p.gpu_w(10_000.0) <= p.tdp_w);
}
