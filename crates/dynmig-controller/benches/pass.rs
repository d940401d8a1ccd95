//! The controller pass on 1,000 nodes x 8 A100-80GB GPUs with 50,000 pending jobs (and about
//! 2,000 running), through the fake Slurm (so this times dynmig's work, not slurmctld's), for
//! the demand, plan, mpc and adaptive policies (adaptive's daily search on its own thread, as
//! in `dynmig controller`; the 200 timed passes span 33 h of the pass clock): the first pass
//! (the job feed sees every job it has read), the passes until the whole queue is read (at
//! most `READS_PER_PASS` jobs a pass), criterion's estimate, then the median, p99 and slowest
//! of 200 timed passes, printed, with the jobs read per pass (what `squeue --json` would
//! write: about 8.4 KB a job on 26.05). Between timed passes 1% of the pending jobs change
//! (their time limit, so that each is read as JSON; until 2026-11-28 their reason flipped
//! between `Priority` and `Resources`, which was then a read too and is now taken from the
//! listing).
//!
//! `cargo bench -p dynmig-controller --bench pass`

use criterion::{black_box, Criterion};
use dynmig_controller::{pass, JobFeed, ManagedNode, PassSettings};
use dynmig_core::geometry::{all_layouts, NodeLayout, A100_80GB};
use dynmig_core::policy::planner::{Objective, Planner, PlannerSettings};
use dynmig_core::policy::{DemandDriven, Policy, PolicyLimits};
use dynmig_core::protocol::layout::PublishedLayout;
use dynmig_host::fs::LineLog;
use dynmig_sim::engine::{DrainTiming, SimConfig};
use dynmig_sim::policies::adaptive::{Adaptive, AdaptiveSettings};
use dynmig_sim::policies::mpc::{Mpc, MpcSettings};
use dynmig_slurm::fake::{idle_node, pending_job, running_job, FakeSlurm};
use dynmig_slurm::NodeState;
use std::time::{Duration, Instant};

const NODES: usize = 1000;
const GPUS: usize = 8;
const JOBS: u32 = 50_000;
/// Pending jobs whose listed reason changes between timed passes (1%).
const CHURN: u32 = 500;
/// The pass's clock, s since the epoch.
const NOW: i64 = 1_000_000;

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
    let mut running = Vec::new();
    for i in 0..NODES {
        let text: Vec<&str> = (0..GPUS).map(|g| per_gpu[(i + g) % per_gpu.len()]).collect();
        let layout = NodeLayout::parse(&A100_80GB, GPUS, &text.join(",")).expect("valid");
        let name = format!("gpu{i:04}");
        let mut n = idle_node(&name, &layout.gres());
        n.extra = PublishedLayout(layout.clone()).encode();
        if i % 3 != 0 {
            // Two thirds of the nodes run jobs on one instance of each of their profiles,
            // started in the last hours, with time limits of 1 to 8 h.
            n.state = NodeState::Mixed;
            n.alloc_cpus = 4;
            n.gres_used = layout
                .totals()
                .keys()
                .map(|p| format!("gpu:{p}:1(IDX:0)"))
                .collect::<Vec<_>>()
                .join(",");
            for p in layout.totals().keys() {
                let id = JOBS + 1 + running.len() as u32;
                let limit = 3600 * (1 + i64::from(id % 8));
                let start = NOW - 60 * i64::from(id % 120);
                let mut j = running_job(id, &name, &format!("gres:gpu:{p}:1"), start + limit);
                j.start_time = start;
                j.submit_time = start - 600;
                j.time_limit_s = Some(limit);
                running.push(j);
            }
        }
        nodes.push(n);
        managed.push(ManagedNode {
            name,
            model: &A100_80GB,
            gpus: GPUS,
            allowed: allowed.clone(),
        });
    }
    // Pending jobs submitted over the last day, with time limits of 1 to 4 h; every tenth has a
    // deadline.
    let mut jobs: Vec<_> = (0..JOBS)
        .map(|j| {
            let mut p = pending_job(j + 1, &format!("gres:gpu:{}:{}", profiles[j as usize % 5], 1 + j % 2));
            p.submit_time = NOW - 86_400 + i64::from(j) * 8;
            p.time_limit_s = Some(3600 * (1 + i64::from(j % 4)));
            if j % 10 == 0 {
                p.deadline = NOW + 6 * 3600;
            }
            p
        })
        .collect();
    jobs.extend(running);
    (FakeSlurm::new(nodes, jobs), managed)
}

fn main() {
    let (slurm, managed) = cluster();
    let settings = PassSettings {
        drain_timeout: Duration::from_secs(3600),
        dry_run: true,
        now: NOW,
        drain: dynmig_core::types::DrainMode::Reservation,
        reservation_duration: Duration::from_secs(600),
        plans: None,
        sweep: false,
        catalog: None,
        retype: false,
    };
    let limits = PolicyLimits {
        max_concurrent: 10,
        min_layout_lifetime: Duration::ZERO,
        min_gain: 1,
    };
    let log = LineLog::none();
    let mut c = Criterion::default().sample_size(20).configure_from_args();
    // As the controller configures them: Slurm runs a job only on its GRES type.
    let mut planner = PlannerSettings::new(limits.clone(), Objective::Speed);
    planner.exact_profiles = true;
    // As `dynmig controller` configures it: exact GRES types, the search on its own thread.
    let mut adaptive = AdaptiveSettings::new(limits.clone());
    adaptive.exact_profiles = true;
    adaptive.background = true;
    let mut engine = SimConfig::new(&A100_80GB, NODES, GPUS);
    engine.timing = DrainTiming::Reservation;
    let policies: Vec<(&str, Box<dyn Policy>)> = vec![
        ("demand", Box::new(DemandDriven::new(limits.clone()))),
        ("plan", Box::new(Planner::new(planner.clone()))),
        ("mpc", Box::new(Mpc::new(MpcSettings::new(planner), &engine))),
        ("adaptive", Box::new(Adaptive::new(adaptive, &engine))),
    ];
    for (name, mut policy) in policies {
        // One feed per controller, as in `dynmig controller`; the clock moves on by more than
        // mpc's cooldown each pass, so that every pass whose planner proposes a change runs
        // the two lookaheads (nothing is applied: a dry run proposes the same again).
        let mut feed = JobFeed::new();
        let mut now = NOW;
        let at = |now: i64| PassSettings {
            now,
            ..settings.clone()
        };
        let t = Instant::now();
        let first = pass(&slurm, &managed, policy.as_mut(), &mut feed, &log, &at(now)).expect("pass");
        let first_ms = t.elapsed().as_secs_f64() * 1e3;
        let mut warmup = 1;
        let mut warmup_worst = first_ms;
        let mut left = first.queue.deferred;
        while left > 0 {
            now += 601;
            let t = Instant::now();
            left = pass(&slurm, &managed, policy.as_mut(), &mut feed, &log, &at(now))
                .expect("pass")
                .queue
                .deferred;
            warmup_worst = warmup_worst.max(t.elapsed().as_secs_f64() * 1e3);
            warmup += 1;
        }
        let mut flip = 0u32;
        let mut churn = || {
            let mut s = slurm.state.lock().expect("fake");
            for k in 0..CHURN {
                let j = &mut s.jobs[((flip * CHURN + k) % JOBS) as usize];
                // A new time limit (an update) is read as JSON; a reason alone would be taken
                // from the listing without a read (dynmig_controller::queue).
                j.time_limit_s = Some(if j.time_limit_s == Some(3600) { 7200 } else { 3600 });
            }
            flip += 1;
        };
        c.bench_function(
            &format!("controller pass ({name}), 1000 nodes x 8 GPUs, {JOBS} pending jobs, 1% changed"),
            |b| {
                b.iter(|| {
                    churn();
                    now += 601;
                    black_box(pass(&slurm, &managed, policy.as_mut(), &mut feed, &log, &at(now)).expect("pass"))
                })
            },
        );
        let mut planned = 0;
        let mut reads = Vec::new();
        let mut times: Vec<Duration> = (0..200)
            .map(|_| {
                churn();
                now += 601;
                let s = at(now);
                let t = Instant::now();
                let r = black_box(pass(&slurm, &managed, policy.as_mut(), &mut feed, &log, &s).expect("pass"));
                let e = t.elapsed();
                planned += r.drained.len() + r.planned.len();
                reads.push(r.queue.read);
                e
            })
            .collect();
        times.sort();
        reads.sort_unstable();
        let running = slurm.state.lock().expect("fake").jobs.len() - JOBS as usize;
        println!(
            "controller pass, policy {name} (1000 nodes x 8 GPUs, {JOBS} pending and {running} running jobs, fake Slurm, dry run): first pass {first_ms:.2} ms ({} jobs read, {} left for later passes, {} repartitions); whole queue read after {warmup} passes (slowest {warmup_worst:.2} ms); then with 1% of pending jobs changed between passes: median {:.2} ms, p99 {:.2} ms, slowest {:.2} ms over 200 passes, median {} jobs read a pass (about {:.1} MB of squeue JSON at 8.4 KB a job), {:.1} repartitions per pass",
            first.queue.read,
            first.queue.deferred,
            first.drained.len() + first.planned.len(),
            times[100].as_secs_f64() * 1e3,
            times[197].as_secs_f64() * 1e3,
            times[199].as_secs_f64() * 1e3,
            reads[100],
            reads[100] as f64 * 8.4 / 1000.0,
            planned as f64 / 200.0
        );
    }
    c.final_summary();
}
