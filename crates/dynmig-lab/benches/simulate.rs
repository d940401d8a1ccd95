//! Simulator speed: simulated events per second on one core (synthetic workload, demand-driven
//! policy), and the wall time of one run over the 30-day Alibaba trace at load x20.
//!
//! `cargo bench -p dynmig-sim` prints criterion's timings and, once per benchmark, the events
//! per second of one run; `cargo bench -p dynmig-sim -- goals` prints only issue 10's figures
//! (the five-policy comparison's wall time, a 1,000-node week's events per second).

use criterion::{criterion_group, criterion_main, Criterion};
use dynmig_core::geometry::A100_40GB;
use dynmig_sim::engine::{simulate, SimConfig};
use dynmig_sim::model::ModelParams;
use dynmig_sim::policies::{PolicyLimits, PolicySpec};
use dynmig_sim::workload::synthetic::{synthetic_workload, SyntheticParams};
use dynmig_sim::workload::trace::{trace_workload, TraceParams};
use std::time::Instant;

fn events_per_second(c: &mut Criterion) {
    if std::env::var_os("GOALS").is_some() {
        return;
    }
    let wl = synthetic_workload(
        &SyntheticParams {
            days: 1.0,
            jobs_per_hour: 2000.0,
            ..Default::default()
        },
        &ModelParams::default(),
    )
    .unwrap();
    let cfg = SimConfig::new(&A100_40GB, 64, 8);
    let spec = PolicySpec::Dynamic(PolicyLimits {
        max_concurrent: 8,
        ..Default::default()
    });
    let t = Instant::now();
    let r = simulate(&wl, &spec, &cfg, &|_| {}).unwrap();
    let s = t.elapsed().as_secs_f64();
    println!(
        "synthetic 1 day, {} jobs, 64x8 GPUs, dynamic: {} events in {s:.3} s = {:.0} events/s",
        wl.jobs.len(),
        r.events,
        r.events as f64 / s
    );
    let none = PolicySpec::None;
    let r = simulate(&wl, &none, &cfg, &|_| {}).unwrap();
    let t = Instant::now();
    simulate(&wl, &none, &cfg, &|_| {}).unwrap();
    let s = t.elapsed().as_secs_f64();
    println!(
        "  same, none: {} events in {s:.3} s = {:.0} events/s",
        r.events,
        r.events as f64 / s
    );
    let mut g = c.benchmark_group("engine");
    g.sample_size(10);
    g.bench_function("synthetic_day_64x8_dynamic", |b| {
        b.iter(|| simulate(&wl, &spec, &cfg, &|_| {}).unwrap())
    });
    g.bench_function("synthetic_day_64x8_none", |b| {
        b.iter(|| simulate(&wl, &none, &cfg, &|_| {}).unwrap())
    });
    g.finish();
}

fn trace_x20(c: &mut Criterion) {
    if std::env::var_os("GOALS").is_some() {
        return;
    }
    let pods = dynmig_sim::workload::alibaba::embedded_pods().expect("the embedded trace parses");
    let p = TraceParams {
        load: 20.0,
        ..Default::default()
    };
    let wl = trace_workload(&pods, &p, &ModelParams::default()).unwrap();
    // 32 nodes x 8: busy at the day's peak at x20 (the CLI's --load auto gives ~x22 for 256 GPUs).
    let cfg = SimConfig::new(&A100_40GB, 32, 8);
    let spec = PolicySpec::Dynamic(PolicyLimits {
        max_concurrent: 4,
        ..Default::default()
    });
    let t = Instant::now();
    let r = simulate(&wl, &spec, &cfg, &|_| {}).unwrap();
    let s = t.elapsed().as_secs_f64();
    println!(
        "trace 30 days x20: {} jobs, 32x8 GPUs, dynamic: {} events in {s:.3} s = {:.0} events/s",
        wl.jobs.len(),
        r.events,
        r.events as f64 / s
    );
    let mut g = c.benchmark_group("trace");
    g.sample_size(10);
    g.bench_function("alibaba_30d_x20_dynamic", |b| {
        b.iter(|| simulate(&wl, &spec, &cfg, &|_| {}).unwrap())
    });
    g.finish();
}

/// The figures issue 10 asks for, printed once (no criterion loop: each takes seconds):
/// the five-policy comparison (none, static, twice-daily, dynamic, plan; fair searches) on the
/// 30-day default trace at load auto (16 x 8 A100-40GB), and a 1,000-node synthetic week at
/// load x120 under none, dynamic and plan, in events per second.
///
/// `GOALS=compare` runs only the comparison, `GOALS=week` only the week, and
/// `GOALS=week:dynamic` (or `none`, `plan`) only that policy's week (for profiling).
fn goals(_: &mut Criterion) {
    let only = std::env::var("GOALS").unwrap_or_default();
    if only.is_empty() || only == "compare" {
        compare_goal();
    }
    if only.is_empty() || only.starts_with("week") {
        week_goal(only.strip_prefix("week:"));
    }
}

/// The five-policy comparison of [`goals`].
fn compare_goal() {
    use dynmig_lab::evaluate::{evaluate, EvalOptions, PolicyName};
    let pods = dynmig_sim::workload::alibaba::embedded_pods().expect("the embedded trace parses");
    let m = ModelParams::default();
    let base = trace_workload(&pods, &TraceParams::default(), &m).unwrap();
    let load = 128.0 / base.peak_gpu_demand();
    let wl = trace_workload(
        &pods,
        &TraceParams {
            load,
            ..Default::default()
        },
        &m,
    )
    .unwrap();
    let mut cfg = SimConfig::new(&A100_40GB, 16, 8);
    cfg.sample_interval_s = 0.0;
    let opts = EvalOptions {
        policies: vec![
            PolicyName::None,
            PolicyName::Static,
            PolicyName::TwiceDaily,
            PolicyName::Dynamic,
            PolicyName::Plan,
        ],
        limits: PolicyLimits {
            max_concurrent: 2,
            min_layout_lifetime: std::time::Duration::from_secs(600),
            min_gain: 1,
        },
        warn: false,
        ..Default::default()
    };
    let t = Instant::now();
    let ev = evaluate(&wl, &cfg, &opts, &|_, _| {}).unwrap();
    println!(
        "five-policy comparison, 30-day default trace ({} jobs, load x{load:.2}, 16x8 A100-40GB): {:.2} s (goal: under 3 s); per row: {}",
        wl.jobs.len(),
        t.elapsed().as_secs_f64(),
        ev.rows
            .iter()
            .map(|r| format!("{} {:.2} s", r.policy, r.wall_s))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// The 1,000-node week of [`goals`], under every policy or only the one named `only`.
fn week_goal(only: Option<&str>) {
    let m = ModelParams::default();
    let week = synthetic_workload(
        &SyntheticParams {
            days: 7.0,
            jobs_per_hour: SyntheticParams::default().jobs_per_hour * 120.0,
            ..Default::default()
        },
        &m,
    )
    .unwrap();
    let cfg = SimConfig::new(&A100_40GB, 1000, 8);
    let limits = PolicyLimits {
        max_concurrent: 125,
        min_layout_lifetime: std::time::Duration::from_secs(600),
        min_gain: 1,
    };
    for spec in [
        PolicySpec::None,
        PolicySpec::Dynamic(limits.clone()),
        PolicySpec::Plan(dynmig_sim::policies::PlannerSettings::new(
            limits.clone(),
            dynmig_sim::policies::Objective::Speed,
        )),
    ] {
        if only.is_some_and(|o| o != spec.name()) {
            continue;
        }
        let t = Instant::now();
        let r = simulate(&week, &spec, &cfg, &|_| {}).unwrap();
        let s = t.elapsed().as_secs_f64();
        println!(
            "synthetic week, 1000x8 A100-40GB, load x120 ({} jobs), {}: {} events in {s:.1} s = {:.0} events/s (goal: 1,000,000)",
            week.jobs.len(),
            spec.name(),
            r.events,
            r.events as f64 / s
        );
    }
}

criterion_group!(benches, events_per_second, trace_x20, goals);
criterion_main!(benches);
