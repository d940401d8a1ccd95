//! Request modes and out-of-memory restarts (docs/model.md, "Requests and out-of-memory
//! restarts"): restarts only when the estimate is below the need, each restarted job ends on
//! a larger profile, never more restarts than the limit, determinism, and a hand-computed case.

mod common;
use common::linear_power;
use dynmig_core::geometry::{NodeLayout, ProfileCounts, A100_40GB};
use dynmig_core::size::GIB;
use dynmig_core::types::EstimateSource;
use dynmig_sim::cluster::Cluster;
use dynmig_sim::engine::{simulate, RunResult, SimConfig};
use dynmig_sim::model::{Job, JobKind, ModelParams};
use dynmig_sim::policies::{PolicyLimits, PolicySpec};
use dynmig_sim::requests::{plan_requests, JobRequest, RequestMode, SourceShares};
use dynmig_sim::workload::synthetic::{synthetic_workload, SyntheticParams};
use dynmig_sim::workload::Workload;

fn workload() -> Workload {
    let p = SyntheticParams {
        days: 1.0,
        jobs_per_hour: 30.0,
        multi_gpu_share: 0.03,
        training_median_s: 900.0,
        seed: 3,
        ..Default::default()
    };
    synthetic_workload(&p, &ModelParams::default()).unwrap()
}

fn estimated(shares: &str, max_restarts: u32) -> SimConfig {
    let mut c = SimConfig::new(&A100_40GB, 2, 8);
    c.audit = true;
    c.requests.mode = RequestMode::Estimated;
    c.requests.shares = SourceShares::parse(shares).unwrap();
    c.requests.estimator.max_oom_restarts = max_restarts;
    c
}

fn plan(wl: &Workload, c: &SimConfig) -> (Vec<JobRequest>, Cluster) {
    let probe = Cluster::new(c.model, c.gpus_per_node, &[], c.power.clone()).unwrap();
    (
        plan_requests(&wl.jobs, c.model, &probe.profiles, &c.requests, c.seed).unwrap(),
        probe,
    )
}

fn run(wl: &Workload, c: &SimConfig) -> RunResult {
    simulate(wl, &PolicySpec::Dynamic(PolicyLimits::default()), c, &|_| {}).unwrap()
}

#[test]
fn restarts_only_below_the_need_and_end_larger() {
    let wl = workload();
    let c = estimated("mig-mem=1,model=3,history=4,default=2", 2);
    let r = run(&wl, &c);
    let (req, probe) = plan(&wl, &c);
    let mut restarted = 0;
    for ((j, o), q) in wl.jobs.iter().zip(&r.jobs).zip(&req) {
        if o.restarts > 0 {
            restarted += 1;
            assert!(
                q.estimate_mib < j.mem_mib,
                "job {} restarted with estimate {q:?} >= need",
                j.id
            );
            let asked = probe.profiles[q.profile.unwrap() as usize].memory_mib;
            let got = probe.profiles[o.profile as usize].memory_mib;
            assert!(
                got > asked && got >= j.mem_mib,
                "job {}: asked {asked} MiB, ended on {got} MiB",
                j.id
            );
        }
        if q.estimate_mib >= j.mem_mib {
            assert_eq!(o.restarts, 0, "job {} had enough and still restarted", j.id);
        }
        assert!(probe.profiles[o.profile as usize].memory_mib >= j.mem_mib);
    }
    assert!(
        restarted > 0,
        "the default source (8 GiB) must under-estimate some jobs"
    );
    assert_eq!(r.restarted_jobs, restarted);
    assert!(r.oom_restarts >= restarted && r.wasted_j > 0.0 && r.wasted_gpu_s > 0.0);
}

#[test]
fn never_more_restarts_than_the_limit() {
    let wl = workload();
    for limit in [0u32, 1, 2] {
        let mut c = estimated("default=1", limit);
        c.requests.estimator.default_mem_bytes = GIB; // every job above 1 GiB fails first
        let r = run(&wl, &c);
        let most = r.jobs.iter().map(|o| u32::from(o.restarts)).max().unwrap();
        assert!(most <= limit.max(1), "limit {limit}: a job restarted {most} times");
        assert_eq!(most, limit.max(1), "limit {limit}: some job should reach it");
        let total: u64 = r.jobs.iter().map(|o| u64::from(o.restarts)).sum();
        assert_eq!(total, r.oom_restarts);
    }
}

#[test]
fn whole_and_exact_never_restart_and_same_seed_same_result() {
    let wl = workload();
    for mode in [RequestMode::Whole, RequestMode::Exact] {
        let mut c = estimated("default=1", 2);
        c.requests.mode = mode;
        let r = run(&wl, &c);
        assert_eq!(r.oom_restarts, 0, "{mode}");
    }
    let c = estimated("model=1,default=1", 2);
    let (a, b) = (run(&wl, &c), run(&wl, &c));
    assert_eq!(a.jobs, b.jobs);
    assert_eq!(
        (a.energy_j, a.oom_restarts, a.wasted_j),
        (b.energy_j, b.oom_restarts, b.wasted_j)
    );
    let mut c2 = c.clone();
    c2.seed = 2;
    assert_ne!(plan(&wl, &c).0, plan(&wl, &c2).0, "another seed draws other estimates");
}

/// One job needing 8000 MiB, 70 s on a full GPU, linear scaling; its model estimate is half
/// that (relative error -0.5), so it asks for a 1g.5gb (4864 MiB), runs out of memory, and is
/// restarted on a 2g.10gb (9856 MiB) where it takes 70 x 7/2 = 245 s.
fn one_oom(early: bool) -> RunResult {
    let job = Job {
        id: 0,
        release: 0.0,
        work: 70.0,
        mem_mib: 8000,
        gpus: 1,
        kind: JobKind::Training,
        gamma: 1.0,
        curve: Default::default(),
        due: 70.0,
        limit_factor: 1.0,
        exact_slices: None,
    };
    let wl = Workload::new(vec![job], "one".into());
    let mut c = estimated("model=1", 2);
    c.nodes = 1;
    c.gpus_per_node = 1;
    c.power = linear_power();
    c.requests.errors.set(EstimateSource::Model, vec![-0.5]);
    c.requests.early_restart = early;
    c.requests.oom_after_s = 10.0;
    let layout = vec![NodeLayout {
        gpus: vec![ProfileCounts::parse(&A100_40GB, "1x3g.20gb+1x2g.10gb+2x1g.5gb").unwrap()],
    }];
    simulate(&wl, &PolicySpec::Static(layout), &c, &|_| {}).unwrap()
}

#[test]
fn golden_one_out_of_memory() {
    // Early restart: fails at 10 s on 1g.5gb (100/7 W above idle), restarts on 2g.10gb
    // (200/7 W) from 10 s to 255 s. Energy = 50 W x 255 s + 100/7 x 10 + 200/7 x 245.
    let r = one_oom(true);
    let o = r.jobs[0];
    assert_eq!((o.start_ms, o.end_ms, o.slices, o.restarts), (10_000, 255_000, 2, 1));
    assert_eq!(r.profiles[o.profile as usize], "2g.10gb");
    let wasted = 100.0 / 7.0 * 10.0;
    assert!((r.wasted_j - wasted).abs() < 1e-6, "{}", r.wasted_j);
    assert!((r.wasted_gpu_s - 10.0 / 7.0).abs() < 1e-9, "{}", r.wasted_gpu_s);
    let energy = 50.0 * 255.0 + wasted + 200.0 / 7.0 * 245.0;
    assert!((r.energy_j - energy).abs() < 1e-6, "{} vs {energy}", r.energy_j);
    // Without early restart the failed attempt lasts a full run on 1g.5gb: 70 x 7 = 490 s.
    let r = one_oom(false);
    let o = r.jobs[0];
    assert_eq!((o.start_ms, o.end_ms, o.restarts), (490_000, 735_000, 1));
    let wasted = 100.0 / 7.0 * 490.0;
    assert!((r.wasted_j - wasted).abs() < 1e-6, "{}", r.wasted_j);
    let energy = 50.0 * 735.0 + wasted + 200.0 / 7.0 * 245.0;
    assert!((r.energy_j - energy).abs() < 1e-6, "{} vs {energy}", r.energy_j);
}

#[test]
fn shares_parse_and_refuse_nonsense() {
    let s = SourceShares::parse("model=1,history=3").unwrap();
    assert_eq!(s.pick(0.1), EstimateSource::Model);
    assert_eq!(s.pick(0.3), EstimateSource::History);
    assert_eq!(s.pick(0.99), EstimateSource::History);
    for bad in ["model=-1", "guess=1", "model", "model=0", "model=x"] {
        assert!(SourceShares::parse(bad).is_err(), "{bad}");
    }
    let e = SourceShares::parse("guess=1").unwrap_err().to_string();
    assert!(
        e.contains("allowed: mig-mem, model, history, default, whole-gpu"),
        "{e}"
    );
}
