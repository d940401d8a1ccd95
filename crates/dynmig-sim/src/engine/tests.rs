//! Slurm's scheduling in the engine: typed placement, backfill on time limits, `bf_window`,
//! `bf_resolution`, the EASY reservation of a single-GPU head, jobs of a type no node has,
//! and the what-ifs that restore the older rules.

use super::*;
use crate::model::JobKind;
use crate::policies::PolicySpec;
use dynmig_core::geometry::A100_40GB;

/// A single-GPU job released at `release` s, `work` s long on any instance (gamma 0), with
/// `mem_mib` of memory and a time limit of `factor` x its run time.
fn job(release: f64, work: f64, mem_mib: u64, factor: f64) -> Job {
    Job {
        id: 0,
        release,
        work,
        mem_mib,
        gpus: 1,
        kind: JobKind::Training,
        gamma: 0.0,
        curve: Default::default(),
        due: release + work,
        limit_factor: factor,
        exact_slices: None,
    }
}

fn multi(release: f64, work: f64, gpus: u32) -> Job {
    Job {
        gpus,
        ..job(release, work, 30_000, 1.0)
    }
}

fn layout(gpus: usize, s: &str) -> Vec<NodeLayout> {
    let g = ProfileCounts::parse(&A100_40GB, s).unwrap();
    vec![NodeLayout { gpus: vec![g; gpus] }]
}

fn cfg(gpus: usize) -> SimConfig {
    let mut c = SimConfig::new(&A100_40GB, 1, gpus);
    c.audit = true;
    c
}

fn run(jobs: Vec<Job>, spec: &PolicySpec, c: &SimConfig) -> RunResult {
    simulate(&Workload::new(jobs, "test".into()), spec, c, &|_| {}).unwrap()
}

const S: i64 = 1000;

#[test]
fn a_typed_job_never_runs_on_a_larger_instance_but_does_with_spill_up() {
    // One GPU of a 4g.20gb and a 3g.20gb; two 16,000 MiB jobs ask for 3g.20gb.
    let spec = PolicySpec::Static(layout(1, "1x4g.20gb+1x3g.20gb"));
    let jobs = vec![job(0.0, 1000.0, 16_000, 1.0), job(0.0, 1000.0, 16_000, 1.0)];
    let r = run(jobs.clone(), &spec, &cfg(1));
    assert_eq!((r.jobs[0].slices, r.jobs[1].slices), (3, 3), "both on the 3g instance");
    assert_eq!(
        r.jobs[1].start_ms, r.jobs[0].end_ms,
        "the second waits while the 4g idles"
    );
    let mut c = cfg(1);
    c.what_if.spill_up = true;
    let r = run(jobs, &spec, &c);
    assert_eq!(r.jobs[1].start_ms, 0, "spill-up: the second takes the 4g at once");
    assert_eq!(r.jobs[1].slices, 4);
}

/// One node of two whole GPUs: A (limit `a_limit` s, run `a_run` s) from 0; B, two GPUs,
/// released at 1 s, blocked until A ends; C, one GPU, released at 2 s, `c_run` s long with a
/// limit of `c_limit` s, could take the free GPU.
fn backfill_case(a_run: f64, a_limit: f64, c_run: f64, c_limit: f64, c: &SimConfig) -> RunResult {
    let jobs = vec![
        job(0.0, a_run, 30_000, a_limit / a_run),
        multi(1.0, 100.0, 2),
        job(2.0, c_run, 30_000, c_limit / c_run),
    ];
    run(jobs, &PolicySpec::Static(layout(2, "1x7g.40gb")), c)
}

#[test]
fn backfill_plans_with_time_limits_not_true_run_times() {
    // C's true run (ends at 502 s) fits before B's shadow (A's limit, 1,000 s); its limit
    // (2,002 s) does not: Slurm does not backfill it.
    let r = backfill_case(1000.0, 1000.0, 500.0, 2000.0, &cfg(2));
    assert_eq!(r.jobs[1].start_ms, 1000 * S, "B starts when A ends");
    assert_eq!(r.jobs[2].start_ms, 1100 * S, "C waits for B");
    let mut c = cfg(2);
    c.what_if.clairvoyant_backfill = true;
    let r = backfill_case(1000.0, 1000.0, 500.0, 2000.0, &c);
    assert_eq!(r.jobs[2].start_ms, 2 * S, "clairvoyant-backfill: C is backfilled");
    assert_eq!(r.jobs[1].start_ms, 1000 * S, "and B is not delayed");
}

#[test]
fn the_shadow_time_comes_from_running_jobs_time_limits() {
    // A ends at 1,000 s but its limit is 3,000 s: C (limit 2,000 s, ends by 2,002 s) fits
    // before that shadow and is backfilled although B could have started at 1,000 s.
    let r = backfill_case(1000.0, 3000.0, 2000.0, 2000.0, &cfg(2));
    assert_eq!(r.jobs[2].start_ms, 2 * S, "C backfilled before A's limit");
    assert_eq!(r.jobs[1].start_ms, 2002 * S, "B starts when C ends");
    let mut c = cfg(2);
    c.what_if.clairvoyant_backfill = true;
    let r = backfill_case(1000.0, 3000.0, 2000.0, 2000.0, &c);
    assert_eq!(r.jobs[1].start_ms, 1000 * S, "clairvoyant: the shadow is A's true end");
}

#[test]
fn bf_window_gives_no_reservation_beyond_it() {
    // A's limit is 48 h, beyond the default 24 h window: B gets no reservation and C (run
    // and limit 200,000 s, past A's limit) starts at once on the free GPU.
    let day2 = 48.0 * 3600.0;
    let r = backfill_case(1000.0, day2, 200_000.0, 200_000.0, &cfg(2));
    assert_eq!(r.jobs[2].start_ms, 2 * S, "no reservation within the window");
    let mut c = cfg(2);
    c.bf_window_s = 3.0 * 86_400.0;
    let r = backfill_case(1000.0, day2, 200_000.0, 200_000.0, &c);
    assert!(
        r.jobs[2].start_ms > 1000 * S,
        "a 3-day window reserves: C waits ({})",
        r.jobs[2].start_ms
    );
}

#[test]
fn bf_resolution_rounds_backfill_times_down() {
    // B's shadow is 1,010 s; C would end at 1,015 s. Exact times: C waits. At 60 s both are
    // in the minute from 960 s: C is backfilled and B starts when C ends.
    let mut c = cfg(2);
    c.bf_resolution_s = 0.0;
    let r = backfill_case(1010.0, 1010.0, 1013.0, 1013.0, &c);
    assert_eq!(r.jobs[2].start_ms, 1110 * S, "exact: C waits for B");
    let r = backfill_case(1010.0, 1010.0, 1013.0, 1013.0, &cfg(2));
    assert_eq!(r.jobs[2].start_ms, 2 * S, "60 s resolution: C backfilled");
    assert_eq!(r.jobs[1].start_ms, 1015 * S);
}

#[test]
fn a_single_gpu_head_holds_the_reservation_on_the_instance_of_its_type_freeing_first_by_limit() {
    // Four 3g.20gb instances, each busy: ends (true, limit) in s: (1000, 3000), (2000, 2000),
    // (5000, 5000), (4000, 4000). A fifth 3g job waits: its reservation is the instance whose
    // limit ends first (the second, at 2,000 s, rounded to 1,980 s), not the first to end.
    let wl = Workload::new(
        vec![
            job(0.0, 1000.0, 16_000, 3.0),
            job(0.0, 2000.0, 16_000, 1.0),
            job(0.0, 5000.0, 16_000, 1.0),
            job(0.0, 4000.0, 16_000, 1.0),
            job(0.0, 100.0, 16_000, 1.0),
        ],
        "test".into(),
    );
    for (clairvoyant, want_job, shadow) in [(false, 1, 1980 * S), (true, 0, 960 * S)] {
        let mut c = cfg(2);
        c.what_if.clairvoyant_backfill = clairvoyant;
        let l = layout(2, "2x3g.20gb");
        let cluster = Cluster::new(c.model, 2, &l, c.power.clone()).unwrap();
        let every = vec![true; cluster.profiles.len()];
        let mut sim = Sim::new(&wl, &c, cluster, &every).unwrap();
        for j in 0..4 {
            sim.start_on(j, 0);
        }
        sim.enqueue(4);
        let key = (0..sim.c.insts.len())
            .flat_map(|g| sim.c.insts[g].iter().map(move |i| (g, i)))
            .find(|(_, i)| i.job == Some(want_job))
            .map(|(g, i)| Cluster::key(g, i.placed.start))
            .unwrap();
        assert_eq!(
            sim.reservation().map(|r| r.0),
            Some(Resv::Inst { key, shadow_ms: shadow }),
            "clairvoyant {clairvoyant}"
        );
    }
}

#[test]
fn a_job_of_a_type_no_node_has_waits_and_passes_the_reservation_on() {
    // Two whole GPUs, never changed. H asks for 2g.10gb by name: no node has it, it waits and
    // the run ends with it never started. Behind it B (two GPUs, released after the first
    // backfill interval) is the first blocked job that can have a reservation: C (limit
    // 2,000 s) may not take the free GPU before it.
    let p = A100_40GB.profile("2g.10gb").unwrap();
    let h = Job {
        exact_slices: Some(p.compute_slices),
        ..job(0.5, 100.0, p.memory_mib, 1.0)
    };
    let jobs = vec![
        job(0.0, 1000.0, 30_000, 1.0),
        h,
        multi(40.0, 100.0, 2),
        job(41.0, 500.0, 30_000, 4.0),
    ];
    let r = run(jobs, &PolicySpec::Static(layout(2, "1x7g.40gb")), &cfg(2));
    assert_eq!(r.never_started, vec![1], "H never starts");
    assert_eq!(r.jobs[1].slices, 0);
    assert_eq!(r.jobs[2].start_ms, 1000 * S, "B's reservation holds");
    assert_eq!(r.jobs[3].start_ms, 1100 * S, "C is not backfilled past B's shadow");
}

#[test]
fn a_job_of_a_type_no_node_has_yet_runs_once_a_repartition_creates_it() {
    // Whole GPUs until 1 h, then 2x3g.20gb: a 16,000 MiB job asks for 3g.20gb (the
    // smallest type of the schedule's layouts that holds it) and waits for it.
    let spec = PolicySpec::Scheduled(vec![
        (Duration::ZERO, layout(1, "1x7g.40gb")),
        (Duration::from_secs(3600), layout(1, "2x3g.20gb")),
    ]);
    let jobs = vec![job(0.0, 1000.0, 16_000, 1.0)];
    let r = run(jobs.clone(), &spec, &cfg(1));
    assert!(
        r.jobs[0].start_ms >= 3600 * S,
        "waits for the repartition ({})",
        r.jobs[0].start_ms
    );
    assert_eq!(r.jobs[0].slices, 3);
    assert!(r.never_started.is_empty());
    let mut c = cfg(1);
    c.what_if.spill_up = true;
    let r = run(jobs, &spec, &c);
    assert_eq!(
        (r.jobs[0].start_ms, r.jobs[0].slices),
        (0, 7),
        "spill-up: on the whole GPU at once"
    );
}

#[test]
fn under_a_fixed_layout_jobs_ask_for_the_types_it_has() {
    // Whole GPUs only (the `none` policy): every job asks for one, as on a cluster without
    // MIG, and none is left waiting.
    let jobs = vec![job(0.0, 100.0, 1000, 1.0), job(0.0, 100.0, 16_000, 1.0)];
    let r = run(jobs, &PolicySpec::None, &cfg(2));
    assert!(r.never_started.is_empty());
    assert_eq!((r.jobs[0].slices, r.jobs[1].slices), (7, 7));
    assert_eq!(r.jobs[1].start_ms, 0);
}

#[test]
fn backfill_tries_the_jobs_behind_a_blocked_job_of_the_same_type() {
    // One node of two whole GPUs. A runs on one to 1,000 s (its limit); B (two GPUs, released
    // at 1 s) holds the reservation at 1,000 s; H (one GPU, limit 2,000 s, released at 2 s)
    // would end past it and waits; C (one GPU, the same type, limit 500 s, released at 3 s)
    // ends before it. Slurm's backfill plan (every bf_interval, 30 s) tries C behind H and
    // starts it on the free GPU; with bf_max_job_test 0 only each type's first job is tried
    // and C waits behind H.
    let jobs = vec![
        job(0.0, 1000.0, 30_000, 1.0),
        multi(1.0, 100.0, 2),
        job(2.0, 2000.0, 30_000, 1.0),
        job(3.0, 500.0, 30_000, 1.0),
    ];
    let spec = PolicySpec::Static(layout(2, "1x7g.40gb"));
    let r = run(jobs.clone(), &spec, &cfg(2));
    assert_eq!(
        r.jobs[3].start_ms,
        30 * S,
        "C starts at the first backfill plan after it came"
    );
    assert_eq!(r.jobs[1].start_ms, 1000 * S, "B keeps its reservation");
    let mut heads_only = cfg(2);
    heads_only.bf_max_job_test = 0;
    let r = run(jobs, &spec, &heads_only);
    assert!(
        r.jobs[3].start_ms >= 1000 * S,
        "heads only: C waits behind H ({} ms)",
        r.jobs[3].start_ms
    );
}

#[test]
fn a_job_on_a_larger_instance_than_its_memory_needs_counts_the_extra_slices_as_oversize() {
    // 4,000 MiB fits a 1g.5gb (1 slice); on a whole 7g.40gb it holds 6 slices too many for
    // 1,000 s: 6/7 x 1,000 GPU-s.
    let whole = run(
        vec![job(0.0, 1000.0, 4_000, 1.0)],
        &PolicySpec::Static(layout(1, "1x7g.40gb")),
        &cfg(1),
    );
    assert!(
        (whole.oversize_gpu_s - 6.0 / 7.0 * 1000.0).abs() < 1.0,
        "{}",
        whole.oversize_gpu_s
    );
    let exact = run(
        vec![job(0.0, 1000.0, 4_000, 1.0)],
        &PolicySpec::Static(layout(1, "7x1g.5gb")),
        &cfg(1),
    );
    assert_eq!(exact.oversize_gpu_s, 0.0);
}
