//! The trace workload and the synthetic generator.

use dynmig_sim::model::{JobKind, ModelParams};
use dynmig_sim::workload::alibaba::parse_pods;
use dynmig_sim::workload::synthetic::{rate_at, synthetic_workload, SyntheticParams};
use dynmig_sim::workload::trace::{trace_workload, TraceParams};

const CSV: &str =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
p0,1,1,1,1000,,LS,Succeeded,0,100,0
p1,1,1,1,250,,LS,Succeeded,864000,865000,864000
p2,1,1,0,0,,LS,Succeeded,864100,865000,864100
p3,1,1,8,1000,,BE,Succeeded,900000,903600,900100
p4,1,1,1,500,,BE,Pending,950000,,
";

#[test]
fn trace_pods_become_jobs() {
    let pods = parse_pods(CSV).unwrap();
    let m = ModelParams::default();
    let p = TraceParams {
        days: 2.0,
        ..Default::default()
    };
    let wl = trace_workload(&pods, &p, &m).unwrap();
    // p0 is older than 2 days before the last creation, p2 has no GPU, p4 never ran.
    assert_eq!(wl.jobs.len(), 2);
    let (a, b) = (&wl.jobs[0], &wl.jobs[1]);
    // The window starts at the trace midnight at or before 950000 - 172800 = 777200: 691200.
    assert_eq!(a.release, 864000.0 - 691200.0);
    assert_eq!(a.kind, JobKind::Inference);
    assert_eq!(a.mem_mib, 4096, "a quarter of 16 GiB");
    assert!((a.work - 1000.0 * 0.25f64.powf(m.gamma_inference)).abs() < 1e-9);
    assert!(a.due >= a.release + a.work && a.due <= a.release + 1.5 * a.work);
    assert_eq!((b.gpus, b.work, b.kind), (8, 3500.0, JobKind::Training));
}

#[test]
fn load_factor_copies_pods() {
    let pods = parse_pods(CSV).unwrap();
    let m = ModelParams::default();
    let p = TraceParams {
        days: 2.0,
        load: 3.0,
        ..Default::default()
    };
    let wl = trace_workload(&pods, &p, &m).unwrap();
    assert_eq!(wl.jobs.len(), 6);
    assert!(
        wl.jobs.windows(2).all(|w| w[0].release <= w[1].release),
        "sorted by release"
    );
    let e = trace_workload(&pods, &TraceParams { load: 0.0, ..p }, &m).unwrap_err();
    assert!(e.to_string().contains("allowed"), "{e}");
}

#[test]
fn synthetic_arrivals_follow_the_day() {
    let p = SyntheticParams {
        days: 20.0,
        jobs_per_hour: 50.0,
        ..Default::default()
    };
    assert!((rate_at(&p, 18.0 * 3600.0) / rate_at(&p, 6.0 * 3600.0) - 1.56 / 0.44).abs() < 1e-9);
    let wl = synthetic_workload(&p, &ModelParams::default()).unwrap();
    let mut by_hour = [0usize; 24];
    for j in &wl.jobs {
        by_hour[((j.release / 3600.0) as usize) % 24] += 1;
    }
    assert!(by_hour[18] > 2 * by_hour[6], "peak at 18:00: {by_hour:?}");
    let n = wl.jobs.len() as f64;
    assert!(
        (n / (20.0 * 24.0) - 50.0).abs() < 5.0,
        "mean rate near 50/h: {}",
        n / 480.0
    );
    let inference: Vec<_> = wl.jobs.iter().filter(|j| j.kind == JobKind::Inference).collect();
    let mean = inference.iter().map(|j| j.work).sum::<f64>() / inference.len() as f64;
    assert!(
        (mean - 300.0).abs() < 40.0,
        "exponential inference durations of mean 300 s: {mean}"
    );
}

/// The workload families (`workload::families`) move the mix where they say, on the
/// generator's own draws.
#[test]
fn workload_families_move_the_mix_where_they_say() {
    use dynmig_sim::workload::families::Family;
    let m = ModelParams::default();
    let make = |family| {
        synthetic_workload(
            &SyntheticParams {
                days: 30.0,
                family: Some(family),
                ..Default::default()
            },
            &m,
        )
        .unwrap()
    };
    let day = 86_400.0;
    let in_days = |wl: &dynmig_sim::workload::Workload, a: f64, b: f64| -> Vec<dynmig_sim::model::Job> {
        wl.jobs
            .iter()
            .filter(|j| j.release >= a * day && j.release < b * day)
            .cloned()
            .collect()
    };
    let small_share = |jobs: &[dynmig_sim::model::Job]| {
        let single: Vec<_> = jobs.iter().filter(|j| j.gpus == 1).collect();
        single.iter().filter(|j| j.kind == JobKind::Inference).count() as f64 / single.len() as f64
    };
    let drift = make(Family::Drift);
    let (early, late) = (
        small_share(&in_days(&drift, 0.0, 5.0)),
        small_share(&in_days(&drift, 25.0, 30.0)),
    );
    assert!(
        late > 2.5 * early,
        "drift: small share {early:.2} in days 0-5, {late:.2} in 25-30"
    );
    let surge = make(Family::MultiSurge);
    let multi = |jobs: &[dynmig_sim::model::Job]| jobs.iter().filter(|j| j.gpus > 1).count() as f64 / jobs.len() as f64;
    let (during, before) = (multi(&in_days(&surge, 18.0, 23.0)), multi(&in_days(&surge, 0.0, 18.0)));
    assert!(
        during > 0.07 && before < 0.03,
        "multi-surge: {during:.3} in days 18-22, {before:.3} before"
    );
    let burst = make(Family::Burst);
    let hours = |wl: &dynmig_sim::workload::Workload, d: f64| in_days(wl, d + 9.0 / 24.0, d + 21.0 / 24.0).len() as f64;
    let ratio = hours(&burst, 16.0) / hours(&burst, 15.0);
    assert!(
        (2.3..3.8).contains(&ratio),
        "burst: day 16 has {ratio:.2}x day 15's arrivals in 09-21 h"
    );
    let weekly = make(Family::Weekly);
    let ratio = in_days(&weekly, 5.0, 6.0).len() as f64 / in_days(&weekly, 4.0, 5.0).len() as f64;
    assert!(
        (0.35..0.65).contains(&ratio),
        "weekly: Saturday has {ratio:.2}x Friday's arrivals"
    );
    let dn = make(Family::DayNight);
    let hour = |j: &&dynmig_sim::model::Job| (j.release / 3600.0).rem_euclid(24.0);
    let (work, night): (Vec<_>, Vec<_>) = dn.jobs.iter().partition(|j| (8.0..20.0).contains(&hour(j)));
    let work: Vec<_> = work.into_iter().cloned().collect();
    let night: Vec<_> = night.into_iter().cloned().collect();
    assert!(
        small_share(&work) > 2.5 * small_share(&night),
        "day-night: small share {:.2} by day, {:.2} by night",
        small_share(&work),
        small_share(&night)
    );
}
