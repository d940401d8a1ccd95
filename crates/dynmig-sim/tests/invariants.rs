//! Invariants on every policy and placement over small synthetic runs, with the engine's
//! audit on (no two instances overlap and no GPU over capacity after every event), plus:
//! each job completes exactly once (or is reported as never started), after its release, for
//! its modelled run time; energy is
//! at least its lower bound; the same seed gives the same result.

use dynmig_core::geometry::{distinct_multisets, A100_40GB, H100_80GB};
use dynmig_sim::bounds::bounds;
use dynmig_sim::engine::{simulate, DrainScope, RunResult, SimConfig};
use dynmig_sim::model::ModelParams;
use dynmig_sim::placement::ALL_PLACEMENTS;
use dynmig_sim::policies::mix::uniform;
use dynmig_sim::policies::{PolicyLimits, PolicySpec};
use dynmig_sim::workload::synthetic::{synthetic_workload, SyntheticParams};
use dynmig_sim::workload::Workload;
use std::time::Duration;

fn workload(seed: u64) -> Workload {
    let p = SyntheticParams {
        days: 1.5,
        jobs_per_hour: 25.0,
        multi_gpu_share: 0.05,
        training_median_s: 1200.0,
        seed,
        ..Default::default()
    };
    synthetic_workload(&p, &ModelParams::default()).unwrap()
}

fn specs(cfg: &SimConfig) -> Vec<PolicySpec> {
    let l = &distinct_multisets(cfg.model)[6];
    let night = &distinct_multisets(cfg.model)[10];
    let day_l = uniform(cfg.model, cfg.nodes, cfg.gpus_per_node, l, 1);
    let night_l = uniform(cfg.model, cfg.nodes, cfg.gpus_per_node, night, 1);
    vec![
        PolicySpec::None,
        PolicySpec::Static(day_l.clone()),
        PolicySpec::Scheduled(vec![
            (Duration::from_secs(8 * 3600), day_l),
            (Duration::from_secs(20 * 3600), night_l),
        ]),
        PolicySpec::Dynamic(PolicyLimits {
            max_concurrent: 1,
            min_layout_lifetime: Duration::from_secs(300),
            min_gain: 1,
        }),
        PolicySpec::Learned { periods: 4 },
    ]
}

fn check(wl: &Workload, r: &RunResult, cfg: &SimConfig) {
    assert_eq!(r.jobs.len(), wl.jobs.len(), "every job completes or is reported");
    // Typed placement: time-of-day starts from whole GPUs and runs a small job only once a
    // learned layout has its type; its mixes may never have some types. Every other policy
    // here runs every job.
    if r.policy != "time-of-day" {
        assert!(
            r.never_started.is_empty(),
            "{}: {:?} never started",
            r.policy,
            r.never_started
        );
    }
    for (j, o) in wl.jobs.iter().zip(&r.jobs) {
        if r.never_started.binary_search(&j.id).is_ok() {
            assert_eq!(
                (o.slices, o.start_ms),
                (0, o.end_ms),
                "a job never started runs nowhere"
            );
            continue;
        }
        assert!(
            o.start_ms as f64 >= (j.release * 1000.0).round(),
            "job {} starts before release",
            j.id
        );
        let run = ((j.time_on(o.slices, 7) * 1000.0).ceil() as i64).max(1);
        assert_eq!(o.end_ms - o.start_ms, run, "job {} runs its modelled time", j.id);
        if j.gpus > 1 {
            assert_eq!(o.slices, 7, "multi-GPU jobs run on whole GPUs");
        }
    }
    let b = bounds(wl, cfg.model, cfg.nodes * cfg.gpus_per_node, &cfg.power);
    assert!(
        r.energy_j >= b.energy_j * (1.0 - 1e-9),
        "{}: energy {} below bound {}",
        r.policy,
        r.energy_j,
        b.energy_j
    );
    assert!(
        r.makespan_s >= b.makespan_s - 1e-3,
        "{}: makespan below bound",
        r.policy
    );
    let mean_t: f64 = wl
        .jobs
        .iter()
        .zip(&r.jobs)
        .map(|(j, o)| (o.end_ms as f64 / 1000.0 - j.due).max(0.0))
        .sum::<f64>()
        / wl.jobs.len() as f64;
    assert!(
        mean_t >= b.mean_tardiness_s - 1e-3,
        "{}: tardiness {mean_t} below bound {}",
        r.policy,
        b.mean_tardiness_s
    );
}

#[test]
fn every_policy_and_placement_keeps_the_invariants() {
    let wl = workload(3);
    for model in [&A100_40GB, &H100_80GB] {
        let mut cfg = SimConfig::new(model, 2, 8);
        cfg.audit = true;
        for pl in ALL_PLACEMENTS {
            cfg.placement = pl;
            for spec in specs(&cfg) {
                let r = simulate(&wl, &spec, &cfg, &|_| {}).unwrap_or_else(|e| panic!("{} {pl}: {e:#}", spec.name()));
                check(&wl, &r, &cfg);
            }
        }
    }
}

#[test]
fn gpu_drain_scope_keeps_the_invariants_and_repartitions() {
    let wl = workload(4);
    let mut cfg = SimConfig::new(&A100_40GB, 2, 8);
    cfg.audit = true;
    cfg.drain = DrainScope::Gpu;
    for spec in specs(&cfg) {
        let r = simulate(&wl, &spec, &cfg, &|_| {}).unwrap();
        check(&wl, &r, &cfg);
        if matches!(spec, PolicySpec::Scheduled(_)) {
            assert!(r.reconfigs > 0, "the twice-daily schedule changes layouts");
        }
    }
}

#[test]
fn same_seed_same_result() {
    let wl = workload(5);
    let mut cfg = SimConfig::new(&A100_40GB, 2, 8);
    cfg.sample_interval_s = 600.0;
    for pl in ALL_PLACEMENTS {
        cfg.placement = pl;
        for spec in specs(&cfg) {
            let a = serde_json::to_string(&simulate(&wl, &spec, &cfg, &|_| {}).unwrap()).unwrap();
            let b = serde_json::to_string(&simulate(&workload(5), &spec, &cfg, &|_| {}).unwrap()).unwrap();
            assert_eq!(a, b, "{} {pl} is not deterministic", spec.name());
        }
    }
    assert_ne!(
        workload(5).jobs,
        workload(6).jobs,
        "another seed gives another workload"
    );
}

#[test]
fn a_job_that_fits_nothing_is_an_error() {
    let mut wl = workload(7);
    wl.jobs[0].mem_mib = 1 << 30;
    let cfg = SimConfig::new(&A100_40GB, 1, 8);
    let e = simulate(&wl, &PolicySpec::None, &cfg, &|_| {}).unwrap_err().to_string();
    assert!(e.contains("no A100-40GB profile has that much"), "{e}");
}
