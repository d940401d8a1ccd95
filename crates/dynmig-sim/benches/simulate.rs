//! Simulator speed: simulated events per second on one core (synthetic workload, demand-driven
//! policy), and the wall time of one run over the 30-day Alibaba trace at load x20.
//!
//! `cargo bench -p dynmig-sim` prints criterion's timings and, once per benchmark, the events
//! per second of one run.

use criterion::{criterion_group, criterion_main, Criterion};
use dynmig_core::geometry::A100_40GB;
use dynmig_sim::engine::{simulate, SimConfig};
use dynmig_sim::model::ModelParams;
use dynmig_sim::policies::{PolicyLimits, PolicySpec};
use dynmig_sim::workload::synthetic::{synthetic_workload, SyntheticParams};
use dynmig_sim::workload::trace::{trace_workload, TraceParams};
use std::time::Instant;

fn events_per_second(c: &mut Criterion) {
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

criterion_group!(benches, events_per_second, trace_x20);
criterion_main!(benches);
