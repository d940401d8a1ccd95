//! The `adaptive` policy: the best static layout searched again every day on the jobs of the
//! days just past, the nodes moved to it at their time limits (docs/policy.md).

use dynmig_core::geometry::A100_40GB;
use dynmig_sim::engine::{simulate, SimConfig};
use dynmig_sim::model::{Job, JobKind};
use dynmig_sim::policies::adaptive::AdaptiveSettings;
use dynmig_sim::policies::{PolicyLimits, PolicySpec};
use dynmig_sim::workload::Workload;

/// One job every 300 s for `days` days, each `work` s on a whole GPU, `mem_mib` of memory.
fn stream(days: f64, work: f64, mem_mib: u64, gamma: f64) -> Workload {
    let n = (days * 86_400.0 / 300.0) as u32;
    let jobs = (0..n)
        .map(|i| Job {
            id: i,
            release: f64::from(i) * 300.0,
            work,
            mem_mib,
            gpus: 1,
            kind: JobKind::Inference,
            gamma,
            curve: Default::default(),
            due: f64::from(i) * 300.0 + 2.0 * work,
            limit_factor: 2.0,
            exact_slices: None,
        })
        .collect();
    Workload::new(jobs, "stream".into())
}

fn cfg() -> SimConfig {
    let mut c = SimConfig::new(&A100_40GB, 2, 2);
    c.audit = true;
    c
}

/// The policy with nodes changing whenever their work ends: in these overloads every node
/// always runs a job whose time limit (that of a 1g.5gb run, 5.3 h) is beyond `max_wait`.
fn adaptive() -> PolicySpec {
    PolicySpec::Adaptive(AdaptiveSettings {
        max_wait: std::time::Duration::MAX,
        ..AdaptiveSettings::new(PolicyLimits {
            max_concurrent: 1,
            min_layout_lifetime: std::time::Duration::from_secs(600),
            min_gain: 1,
        })
    })
}

/// Small jobs that scale poorly (gamma 0.5) overload 4 whole GPUs (12 an hour of 1 h each);
/// once a day of them has been seen, the search finds that partitioned GPUs serve them
/// better, and the nodes change.
#[test]
fn small_jobs_that_overload_whole_gpus_make_the_nodes_partition_after_a_day() {
    let wl = stream(4.0, 3_600.0, 4_000, 0.5);
    let c = cfg();
    let none = simulate(&wl, &PolicySpec::None, &c, &|_| {}).unwrap();
    let r = simulate(&wl, &adaptive(), &c, &|_| {}).unwrap();
    assert!(r.reconfigs >= 1, "the nodes repartition: {} reconfigs", r.reconfigs);
    let first_day_small = r
        .jobs
        .iter()
        .filter(|o| o.start_ms < 86_400_000 && o.slices < 7)
        .count();
    assert_eq!(
        first_day_small, 0,
        "no search before a day of history: whole GPUs meanwhile"
    );
    let late_small = r
        .jobs
        .iter()
        .filter(|o| o.start_ms > 3 * 86_400_000 && o.slices < 7)
        .count();
    assert!(late_small > 0, "jobs of the last day run on partitions");
    let tardiness = |x: &dynmig_sim::engine::RunResult| -> f64 {
        x.jobs
            .iter()
            .zip(&wl.jobs)
            .map(|(o, j)| (o.end_ms as f64 / 1000.0 - j.due).max(0.0))
            .sum::<f64>()
    };
    assert!(
        tardiness(&r) < 0.5 * tardiness(&none),
        "partitions cut the tardiness of whole GPUs: {} s against {} s",
        tardiness(&r),
        tardiness(&none)
    );
}

/// Jobs that need a whole A100-40GB's memory: every partitioned candidate cannot run them
/// and is skipped, whole GPUs stay, nothing changes.
#[test]
fn jobs_that_need_whole_gpus_keep_whole_gpus() {
    let wl = stream(3.0, 600.0, 39_000, 0.5);
    let r = simulate(&wl, &adaptive(), &cfg(), &|_| {}).unwrap();
    assert_eq!(r.reconfigs, 0);
    assert!(r.jobs.iter().all(|o| o.slices == 7));
}
