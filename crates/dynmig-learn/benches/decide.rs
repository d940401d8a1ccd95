//! Inference time of the learned policy: one call on 1,000 nodes x 8 A100-80GB GPUs (every
//! node a candidate, so that the model decides for each until the concurrency limit, set to
//! 1,000 here so that all are decided), per node decision; and one call on a 16-node cluster.
//! An untrained model of the default size (the time does not depend on the weights).
//!
//! `cargo bench -p dynmig-learn --bench decide`

use criterion::{black_box, Criterion};
use dynmig_core::demand::Demand;
use dynmig_core::geometry::{all_layouts, NodeLayout, A100_80GB};
use dynmig_core::policy::{NodeSnapshot, Policy, PolicyLimits};
use dynmig_learn::catalogue::Catalogue;
use dynmig_learn::policy::{LearnedPolicy, Mode, MAX_WAIT};
use dynmig_learn::Model;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn nodes(n: usize) -> Vec<NodeSnapshot> {
    let allowed: Arc<[_]> = all_layouts(&A100_80GB).into();
    (0..n)
        .map(|i| NodeSnapshot {
            name: format!("gpu{i:04}"),
            model: &A100_80GB,
            layout: NodeLayout::parse(
                &A100_80GB,
                8,
                &[if i % 2 == 0 { "1x7g.80gb" } else { "3x2g.20gb+1x1g.10gb" }; 8].join(","),
            )
            .expect("layout"),
            allowed: allowed.clone(),
            busy: Default::default(),
            running: Default::default(),
            unavailable: false,
            repartitioning: false,
            layout_age: Duration::from_secs(3600),
            incoming: Default::default(),
            schedulable_free: Default::default(),
            work_ends_in: Duration::from_secs((i as u64 % 60) * 60),
            planned: None,
            version: 0,
        })
        .collect()
}

fn main() {
    let model = Model::fresh(Catalogue::for_model(&A100_80GB), 32, "bench".into(), 1);
    let mut demand = Demand::default();
    demand.add_pending("2g.20gb", 400);
    demand.add_pending("3g.40gb", 100);
    let mut c = Criterion::default().sample_size(20).configure_from_args();
    for (n, limit) in [(1000usize, 1000usize), (16, 2)] {
        let snap = nodes(n);
        let limits = PolicyLimits {
            max_concurrent: limit,
            min_layout_lifetime: Duration::ZERO,
            min_gain: 1,
        };
        // A new policy per call: it decides at most every 10 min of its clock.
        let fresh = || LearnedPolicy::new(model.clone(), limits.clone(), MAX_WAIT, Mode::Greedy);
        c.bench_function(&format!("learned policy, one call, {n} candidate nodes"), |b| {
            b.iter(|| black_box(fresh().plan_at(Duration::from_secs(36_000), &snap, &demand)))
        });
        let mut times: Vec<Duration> = (0..200)
            .map(|_| {
                let mut p = fresh();
                let t = Instant::now();
                black_box(p.plan_at(Duration::from_secs(36_000), &snap, &demand));
                t.elapsed()
            })
            .collect();
        times.sort();
        let decided = n.min(limit.max(1));
        println!(
            "learned policy, {n} candidate nodes x 8 GPUs: one call median {:.3} ms, p99 {:.3} ms; per node decision {:.2} us (median / {n} nodes observed, up to {decided} decided)",
            times[100].as_secs_f64() * 1e3,
            times[197].as_secs_f64() * 1e3,
            times[100].as_secs_f64() * 1e6 / n as f64
        );
    }
    c.final_summary();
}
