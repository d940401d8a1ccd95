//! The controller pass on 1,000 nodes x 8 A100-80GB GPUs with 10,000 pending jobs, through the
//! fake Slurm (so this times dynmig's work, not slurmctld's): criterion's estimate, then the
//! median and p99 of 200 timed passes, printed.
//!
//! `cargo bench -p dynmig-controller --bench pass`

use criterion::{black_box, Criterion};
use dynmig_controller::{pass, JobFeed, ManagedNode, PassSettings};
use dynmig_core::geometry::{all_layouts, NodeLayout, A100_80GB};
use dynmig_core::policy::planner::{Objective, Planner, PlannerSettings};
use dynmig_core::policy::{DemandDriven, Policy, PolicyLimits};
use dynmig_core::protocol::layout::PublishedLayout;
use dynmig_host::fs::LineLog;
use dynmig_slurm::fake::{idle_node, pending_job, FakeSlurm};
use dynmig_slurm::NodeState;
use std::time::{Duration, Instant};

const NODES: usize = 1000;
const GPUS: usize = 8;
const JOBS: u32 = 10_000;

fn cluster() -> (FakeSlurm, Vec<ManagedNode>) {
    let per_gpu = [
        "1x7g.80gb",
        "2x3g.40gb",
        "1x4g.40gb+1x3g.40gb",
        "3x2g.20gb+1x1g.10gb",
        "7x1g.10gb",
    ];
    let profiles = ["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"];
    let allowed = all_layouts(&A100_80GB);
    let mut nodes = Vec::new();
    let mut managed = Vec::new();
    for i in 0..NODES {
        let text: Vec<&str> = (0..GPUS).map(|g| per_gpu[(i + g) % per_gpu.len()]).collect();
        let layout = NodeLayout::parse(&A100_80GB, GPUS, &text.join(",")).expect("valid");
        let name = format!("gpu{i:04}");
        let mut n = idle_node(&name, &layout.gres());
        n.extra = PublishedLayout(layout.clone()).encode();
        if i % 3 != 0 {
            // Two thirds of the nodes run jobs on one instance of each of their profiles.
            n.state = NodeState::Mixed;
            n.alloc_cpus = 4;
            n.gres_used = layout
                .totals()
                .keys()
                .map(|p| format!("gpu:{p}:1(IDX:0)"))
                .collect::<Vec<_>>()
                .join(",");
        }
        nodes.push(n);
        managed.push(ManagedNode {
            name,
            model: &A100_80GB,
            gpus: GPUS,
            allowed: allowed.clone(),
        });
    }
    let jobs = (0..JOBS)
        .map(|j| pending_job(j + 1, &format!("gres:gpu:{}:{}", profiles[j as usize % 5], 1 + j % 2)))
        .collect();
    (FakeSlurm::new(nodes, jobs), managed)
}

fn main() {
    let (slurm, managed) = cluster();
    let settings = PassSettings {
        drain_timeout: Duration::from_secs(3600),
        dry_run: true,
        now: 1_000_000,
        drain: dynmig_core::types::DrainMode::Reservation,
        reservation_duration: Duration::from_secs(600),
        plans: None,
        sweep: false,
    };
    let limits = PolicyLimits {
        max_concurrent: 10,
        min_layout_lifetime: Duration::ZERO,
        min_gain: 1,
    };
    let log = LineLog::none();
    let mut c = Criterion::default().sample_size(20).configure_from_args();
    let policies: Vec<(&str, Box<dyn Policy>)> = vec![
        ("demand", Box::new(DemandDriven::new(limits.clone()))),
        (
            "plan",
            Box::new(Planner::new(PlannerSettings::new(limits.clone(), Objective::Speed))),
        ),
    ];
    for (name, mut policy) in policies {
        c.bench_function(
            &format!("controller pass ({name}), 1000 nodes x 8 GPUs, 10000 pending jobs"),
            |b| b.iter(|| black_box(pass(&slurm, &managed, policy.as_mut(), &mut JobFeed::new(), &log, &settings).expect("pass"))),
        );
        let mut times: Vec<Duration> = (0..200)
            .map(|_| {
                let t = Instant::now();
                black_box(pass(&slurm, &managed, policy.as_mut(), &mut JobFeed::new(), &log, &settings).expect("pass"));
                t.elapsed()
            })
            .collect();
        times.sort();
        let r = pass(&slurm, &managed, policy.as_mut(), &mut JobFeed::new(), &log, &settings).expect("pass");
        println!(
            "controller pass, policy {name} (1000 nodes x 8 GPUs, 10000 pending jobs, fake Slurm, dry run): median {:.2} ms, p99 {:.2} ms over 200 passes; {} repartitions planned",
            times[100].as_secs_f64() * 1e3,
            times[197].as_secs_f64() * 1e3,
            r.drained.len() + r.planned.len()
        );
    }
    c.final_summary();
}
