//! Repartitions at the running jobs' time limit (a maintenance reservation) against an
//! immediate drain (docs/model.md, "Reconfiguration").

mod common;
use common::linear_power;
use dynmig_core::geometry::{NodeLayout, ProfileCounts, A100_40GB};
use dynmig_sim::engine::{simulate, DrainTiming, RunResult, SimConfig};
use dynmig_sim::model::{Job, JobKind};
use dynmig_sim::policies::PolicySpec;
use dynmig_sim::workload::Workload;
use std::time::Duration;

fn job(release: f64, work: f64, mem_mib: u64) -> Job {
    Job {
        id: 0,
        release,
        work,
        mem_mib,
        gpus: 1,
        kind: JobKind::Training,
        gamma: 1.0,
        curve: Default::default(),
        due: release + work,
        limit_factor: 1.0,
        exact_slices: None,
    }
}

fn node(s: &str) -> Vec<NodeLayout> {
    let g = ProfileCounts::parse(&A100_40GB, s).unwrap();
    vec![NodeLayout { gpus: vec![g; 2] }]
}

/// One node of two GPUs, whole until 01:00, then 7x1g.5gb on both. Job A (3 h, asks a
/// whole GPU, limit = run time) runs from 0; B (1,000 s, whole GPU, released at 4,000 s) ends
/// before A's time limit; C (a 1g job released at 4,100 s, limit 7 x 5,000 s) would not.
fn run(timing: DrainTiming) -> RunResult {
    let wl = Workload::new(
        vec![
            job(0.0, 10_800.0, 30_000),
            job(4_000.0, 1_000.0, 30_000),
            job(4_100.0, 5_000.0, 1_000),
        ],
        "reservation".into(),
    );
    let mut c = SimConfig::new(&A100_40GB, 1, 2);
    c.power = linear_power();
    c.audit = true;
    c.timing = timing;
    let spec = PolicySpec::Scheduled(vec![
        (Duration::ZERO, node("1x7g.40gb")),
        (Duration::from_secs(3600), node("7x1g.5gb")),
    ]);
    simulate(&wl, &spec, &c, &|_| {}).unwrap()
}

#[test]
fn a_reservation_keeps_the_node_busy_with_jobs_that_end_in_time() {
    let r = run(DrainTiming::Reservation);
    assert_eq!(
        r.jobs[1].start_ms, 4_000_000,
        "B ends before A's limit: backfilled at once"
    );
    assert!(
        r.jobs[2].start_ms >= 10_800_000,
        "C would run past the reservation: it waits for the new layout ({})",
        r.jobs[2].start_ms
    );
    assert_eq!(r.jobs[2].slices, 1, "C runs on a 1g instance of the new layout");
    // GPU 1 idles from 3,600 s to 4,000 s and from 5,000 s to 10,800 s while held.
    assert!(
        (r.drain_waste_gpu_s - 6_200.0).abs() < 1.0,
        "drain waste {} GPU-s",
        r.drain_waste_gpu_s
    );
}

#[test]
fn an_immediate_drain_leaves_the_node_idle_until_its_jobs_end() {
    let r = run(DrainTiming::Immediate);
    assert!(
        r.jobs[1].start_ms >= 10_800_000,
        "B waits for the drain ({})",
        r.jobs[1].start_ms
    );
    assert!(
        r.drain_waste_gpu_s > 7_100.0,
        "GPU 1 idles 3,600 s to 10,800 s: {}",
        r.drain_waste_gpu_s
    );
}
