//! Fair baselines: the search sees only the search window's jobs; every row is judged on the
//! evaluation window; a candidate that cannot run a job is skipped, naming the job.

use dynmig_core::geometry::{ProfileCounts, A100_40GB};
use dynmig_lab::evaluate::{evaluate, EvalOptions, Evaluation, PolicyName};
use dynmig_lab::window::windows;
use dynmig_sim::engine::SimConfig;
use dynmig_sim::model::{Job, JobKind};
use dynmig_sim::policies::mix::uniform;
use dynmig_sim::search::unrunnable;
use dynmig_sim::workload::Workload;

fn job(release: f64, work: f64, gamma: f64, mem_mib: u64, gpus: u32) -> Job {
    Job {
        id: 0,
        release,
        work,
        mem_mib,
        gpus,
        kind: JobKind::Inference,
        gamma,
        curve: Default::default(),
        due: release + work,
        limit_factor: 1.0,
        exact_slices: None,
    }
}

/// Day 0 (the search window): batches of seven small jobs that barely speed up with more
/// compute, best on seven 1g instances. Day 1 (judged): lone jobs that scale linearly and are
/// due as soon as a whole GPU can end them, best on a whole GPU. `eval_work` is their work.
fn two_days(eval_work: f64) -> Workload {
    let mut jobs = Vec::new();
    for b in 0..3 {
        for _ in 0..7 {
            jobs.push(job(f64::from(b) * 20_000.0, 700.0, 0.1, 4000, 1));
        }
    }
    for k in 0..5 {
        jobs.push(job(86_400.0 + f64::from(k) * 10_000.0, eval_work, 1.0, 4000, 1));
    }
    Workload::new(jobs, "two days".into())
}

fn opts(policies: &[PolicyName]) -> EvalOptions {
    EvalOptions {
        policies: policies.to_vec(),
        search_days: Some((0.0, 1.0)),
        eval_from_days: Some(1.0),
        warn: false,
        ..Default::default()
    }
}

fn row<'a>(e: &'a Evaluation, p: &str) -> &'a dynmig_sim::metrics::Metrics {
    e.rows
        .iter()
        .find(|m| m.policy == p)
        .unwrap_or_else(|| panic!("no row {p}"))
}

#[test]
fn fair_search_never_looks_at_judged_jobs() {
    let cfg = SimConfig::new(&A100_40GB, 1, 1);
    let o = opts(&[PolicyName::None, PolicyName::Static, PolicyName::StaticOracle]);
    let e = evaluate(&two_days(1000.0), &cfg, &o, &|_, _| {}).unwrap();
    let fair = &row(&e, "static").detail;
    let oracle = &row(&e, "static-oracle").detail;
    assert!(fair.contains("7x1g.5gb"), "fair: {fair}");
    assert!(
        oracle.contains("7g.40gb") && !oracle.contains("1g.5gb"),
        "oracle: {oracle}"
    );
    // Only day-1 jobs are judged.
    assert!(e.rows.iter().all(|m| m.jobs == 5));
    assert!(row(&e, "static-oracle").et < row(&e, "static").et);
    // Other judged jobs: the fair search (candidates and ETs) is the same, the oracle's not.
    let e2 = evaluate(&two_days(3000.0), &cfg, &o, &|_, _| {}).unwrap();
    let fair_of = |e: &Evaluation| -> Vec<(String, f64)> {
        e.candidates
            .iter()
            .filter(|c| c.1.starts_with("fair "))
            .map(|c| (c.1.clone(), c.2))
            .collect()
    };
    assert!(!fair_of(&e).is_empty());
    assert_eq!(fair_of(&e), fair_of(&e2));
    assert_eq!(row(&e, "static").detail, row(&e2, "static").detail);
    let oracle_of = |e: &Evaluation| -> Vec<f64> {
        e.candidates
            .iter()
            .filter(|c| c.1.starts_with("oracle "))
            .map(|c| c.2)
            .collect()
    };
    assert_ne!(oracle_of(&e), oracle_of(&e2));
}

#[test]
fn a_layout_that_cannot_run_a_job_is_skipped_naming_the_job() {
    // One job needs 30,000 MiB: only a 7g.40gb instance holds it.
    let mut jobs: Vec<Job> = (0..6)
        .map(|i| job(f64::from(i) * 3600.0, 600.0, 0.5, 4000, 1))
        .collect();
    jobs.push(job(1800.0, 600.0, 0.5, 30_000, 1));
    let wl = Workload::new(jobs, "one big job".into());
    let big = wl.jobs.iter().find(|j| j.mem_mib == 30_000).unwrap().id;
    let cfg = SimConfig::new(&A100_40GB, 1, 1);
    let mut o = opts(&[PolicyName::None, PolicyName::Static, PolicyName::StaticOracle]);
    o.search_days = Some((0.0, 0.1));
    o.eval_from_days = Some(0.1);
    let e = evaluate(&wl, &cfg, &o, &|_, _| {}).unwrap();
    let needle = format!("cannot run job {big} (1 GPU, 30000 MiB per GPU");
    assert!(
        e.skipped
            .iter()
            .any(|w| w.contains("'0 whole nodes, rest 7x1g.5gb'") && w.contains(&needle)),
        "{:#?}",
        e.skipped
    );
    // The rows still come: the layouts holding the job.
    assert!(row(&e, "static-oracle").detail.contains("7g.40gb"));
    assert!(row(&e, "static").detail.contains("7g.40gb"));
}

#[test]
fn a_multi_gpu_job_needs_a_node_of_whole_gpus() {
    let wl = Workload::new(vec![job(0.0, 60.0, 1.0, 1000, 2)], "two GPUs".into());
    let split = uniform(
        &A100_40GB,
        2,
        2,
        &ProfileCounts::parse(&A100_40GB, "7x1g.5gb").unwrap(),
        0,
    );
    assert_eq!(unrunnable(&[&split], &A100_40GB, &wl).map(|j| j.gpus), Some(2));
    let one_whole = uniform(
        &A100_40GB,
        2,
        2,
        &ProfileCounts::parse(&A100_40GB, "7x1g.5gb").unwrap(),
        1,
    );
    assert!(unrunnable(&[&one_whole], &A100_40GB, &wl).is_none());
}

#[test]
fn a_short_workload_is_halved_and_says_so() {
    let jobs = (0..8)
        .map(|d| job(f64::from(d) * 86_400.0, 60.0, 1.0, 1000, 1))
        .collect();
    let wl = Workload::new(jobs, "a week".into());
    let w = windows(&wl, None, None).unwrap();
    assert_eq!(w.search_days, (0.0, 3.5));
    assert_eq!(w.eval_from_days, 3.5);
    assert!(w.note.contains("first half"), "{}", w.note);
    assert!(windows(&wl, None, Some(9.0)).is_err());
}
