//! Sim-to-real: what the simulator predicts for the demo's jobs on the demo's cluster.
//!
//! The demo jobs ([`DemoJob`], already compressed) become simulator [`Job`]s one for one:
//! release = submit offset, work = the `sleep` seconds with a speed exponent of 0 (a `sleep`
//! takes as long on any instance), memory = the `--mig-mem` hint (whole and multi-GPU jobs:
//! the full profile's memory), due date = release + U(due_lo, due_hi) x work (the model's
//! default factors), time limit = the demo's `sbatch --time` ([`time_limit_s`]) as
//! [`Job::limit_factor`]. The cluster, the policy and its limits come from the demo's own
//! dynmig.toml (the one factory's [`from_config::spec_from_config`], [`sim_config`]), so that the prediction runs the same policy
//! code with the same settings as the controller did (docs/demo.md, "Simulator vs. real").

use crate::dev::trace::DemoJob;
use anyhow::{bail, Context, Result};
use dynmig_core::config::{Config, PolicyConfig};
use dynmig_core::geometry::{distinct_multisets, GpuModel, NodeLayout};
use dynmig_sim::engine::{simulate, SimConfig};
use dynmig_sim::model::{Job, JobKind, ModelParams};
use dynmig_sim::policies::{from_config, PolicySpec};
use dynmig_sim::search::{describe, Searcher};
use dynmig_sim::workload::Workload;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::fmt::Write;
use std::time::Duration;

/// The demo job's time limit, s: its run time x `factor` rounded up to whole minutes (Slurm's
/// unit), at least one minute.
pub fn time_limit_s(run: Duration, factor: f64) -> u64 {
    let min = (run.as_secs_f64() * factor / 60.0).ceil().max(1.0);
    min as u64 * 60
}

/// The simulator workload of the demo jobs (module docs); `limit_factor`: the demo's
/// `--time` factor; `seed` draws the due dates.
pub fn workload(jobs: &[DemoJob], model: &GpuModel, limit_factor: f64, seed: u64) -> Workload {
    let m = ModelParams::default();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let full_mib = model.full_profile().memory_mib;
    let jobs = jobs
        .iter()
        .enumerate()
        .map(|(i, j)| {
            let work = j.run.as_secs_f64();
            let release = j.submit_at.as_secs_f64();
            let mem_mib = j.mig_mem.map_or(full_mib, |b| b.div_ceil(1 << 20));
            Job {
                id: i as u32,
                release,
                work,
                mem_mib,
                gpus: j.gpus,
                kind: if j.mig_mem.is_some() {
                    JobKind::Inference
                } else {
                    JobKind::Training
                },
                gamma: 0.0,
                curve: Default::default(),
                due: release + rng.gen_range(m.due_lo..=m.due_hi) * work,
                limit_factor: time_limit_s(j.run, limit_factor) as f64 / work.max(1e-3),
                exact_slices: None,
            }
        })
        .collect();
    Workload::new(jobs, "demo trace slice, compressed".into())
}

/// The simulator's settings for the cluster of `config` (the one factory's model of it,
/// [`dynmig_sim::policies::from_config::sim_config`]: its nodes, GPUs and model, the
/// controller's drain mode), asked every `[controller] interval` as the demo's controller
/// asks, with `reconfig_cost_s` per instance create or destroy.
///
/// # Errors
/// The config has no node group, or its groups differ in GPU model or count.
pub fn sim_config(config: &Config, reconfig_cost_s: f64) -> Result<SimConfig> {
    let mut c = from_config::sim_config(config)?;
    if config
        .node_groups
        .iter()
        .any(|x| x.gpu_model.name != c.model.name || x.gpus as usize != c.gpus_per_node)
    {
        bail!("the comparison needs every node group to have the same GPU model and count");
    }
    c.reconfig_cost_s = reconfig_cost_s;
    // The demo's controller asks its policy every `[controller] interval`.
    c.policy_interval_s = config.controller.interval.as_secs_f64().max(0.001);
    Ok(c)
}

/// The `[policy] kind` of a policy config.
pub fn policy_kind(p: &PolicyConfig) -> &'static str {
    match p {
        PolicyConfig::Demand { .. } => "demand",
        PolicyConfig::Plan { lookahead: Some(_), .. } => "mpc",
        PolicyConfig::Plan { consolidate: false, .. } => "plan",
        PolicyConfig::Plan { consolidate: true, .. } => "consolidate",
        PolicyConfig::Adaptive => "adaptive",
        PolicyConfig::Guarded { .. } => "guarded",
        PolicyConfig::Learned { .. } => "learned",
        PolicyConfig::Static => "static",
        PolicyConfig::None => "none",
    }
}

/// The best static layout the simulator's search finds for `wl` on `cfg`'s cluster (ranked by
/// ET, [`Searcher::statics`]), among those a dynmig.toml can state (every GPU of a node with
/// the same layout: one node group per node) and that Slurm can serve: job_submit/dynmig types
/// each job to exactly one profile (its smallest fitting one; whole and multi-GPU jobs the
/// full profile), and a typed job runs only on an instance of that type, whereas the
/// simulator lets a job use any larger free instance. So every profile the jobs are typed to
/// must be in the layout (and a node must have as many full GPUs as the widest job asks).
/// Returns its name and the layout of each node.
///
/// # Errors
/// No candidate could run the workload.
pub fn searched_static(wl: &Workload, cfg: &SimConfig) -> Result<(String, Vec<NodeLayout>)> {
    let mut s = Searcher::new(wl, cfg, "demo", false, &|_, _| {})?;
    let (ranked, _) = s.statics(&|_, _| {});
    for r in &ranked {
        eprintln!("demo-compare: static candidate ET {:.3}: {}", r.et, r.name);
    }
    for r in ranked {
        if let PolicySpec::Static(l) = &r.spec {
            if l.iter().all(|n| n.gpus.windows(2).all(|w| w[0] == w[1])) && serves_typed(wl, cfg.model, l) {
                return Ok((format!("{} ({}, ET {:.3})", r.name, describe(l), r.et), l.clone()));
            }
        }
    }
    bail!("no static layout of the search can run every job of the slice")
}

/// Whether `layouts` offer every job of `wl` the instance type job_submit/dynmig types it to.
fn serves_typed(wl: &Workload, model: &GpuModel, layouts: &[NodeLayout]) -> bool {
    let classic = dynmig_core::geometry::classic_profiles(model);
    let mut by_mem = classic.clone();
    by_mem.sort_by_key(|p| (p.memory_mib, p.compute_slices));
    let full = model.full_profile().name;
    let has = |name: &str| {
        layouts
            .iter()
            .any(|n| n.gpus.iter().any(|g| g.iter().any(|(p, c)| p == name && c > 0)))
    };
    let full_per_node = |n: &NodeLayout| {
        n.gpus
            .iter()
            .map(|g| g.iter().filter(|(p, _)| *p == full).map(|(_, c)| c).sum::<u32>())
            .sum::<u32>()
    };
    wl.jobs.iter().all(|j| {
        if j.gpus > 1 {
            layouts.iter().any(|n| full_per_node(n) >= j.gpus)
        } else {
            by_mem
                .iter()
                .find(|p| p.memory_mib >= j.mem_mib)
                .is_some_and(|p| has(p.name))
        }
    })
}

/// Every layout the simulator may give a GPU of `model` (for the demo's `allowed_layouts`, so
/// that the controller chooses among the same ones).
pub fn sim_layouts(model: &GpuModel) -> Vec<String> {
    distinct_multisets(model).iter().map(ToString::to_string).collect()
}

/// Queue waits, makespan and repartitions of one run, measured or predicted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    /// Median queue wait, s (nearest rank).
    pub wait_p50_s: f64,
    /// 95th percentile queue wait, s (nearest rank).
    pub wait_p95_s: f64,
    /// Longest queue wait, s.
    pub wait_max_s: f64,
    /// From the first submit to the last job's end, s.
    pub makespan_s: f64,
    /// Repartitions carried out.
    pub repartitions: u64,
    /// Jobs.
    pub jobs: usize,
}

impl Figures {
    /// Figures from per-job waits.
    pub fn from_waits(waits: &[f64], makespan_s: f64, repartitions: u64) -> Self {
        Self {
            wait_p50_s: quantile(waits, 0.5),
            wait_p95_s: quantile(waits, 0.95),
            wait_max_s: quantile(waits, 1.0),
            makespan_s,
            repartitions,
            jobs: waits.len(),
        }
    }
}

/// One policy's run on the real cluster and the simulator's prediction for it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Comparison {
    /// The policy kind of the demo's dynmig.toml.
    pub policy: String,
    /// The initial layouts, one per node.
    pub layouts: Vec<String>,
    /// Measured on the real cluster.
    pub measured: Figures,
    /// Predicted by the simulator.
    pub predicted: Figures,
    /// Seconds per instance create or destroy given to the simulator.
    pub reconfig_cost_s: f64,
}

/// What the simulator predicts for `wl` under `spec` on `cfg`.
///
/// # Errors
/// The simulation failed.
pub fn predict(wl: &Workload, spec: &PolicySpec, cfg: &SimConfig) -> Result<Figures> {
    let r = simulate(wl, spec, cfg, &|_| {})?;
    let waits: Vec<f64> = wl
        .jobs
        .iter()
        .zip(&r.jobs)
        .map(|(j, o)| (o.start_ms as f64 / 1000.0 - j.release).max(0.0))
        .collect();
    Ok(Figures::from_waits(&waits, r.makespan_s, r.reconfigs))
}

fn ratio(m: f64, p: f64) -> String {
    if p > 0.0 {
        format!("{:.2}", m / p)
    } else if m == 0.0 {
        "= (0)".into()
    } else {
        "- (sim 0)".into()
    }
}

/// The side-by-side table (Markdown) of `rows`.
pub fn table(rows: &[Comparison]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| policy | figure | measured | simulated | measured / simulated |\n|---|---|---|---|---|"
    );
    for c in rows {
        let (m, p) = (&c.measured, &c.predicted);
        let lines = [
            ("queue wait p50 (s)", m.wait_p50_s, p.wait_p50_s),
            ("queue wait p95 (s)", m.wait_p95_s, p.wait_p95_s),
            ("queue wait max (s)", m.wait_max_s, p.wait_max_s),
            ("makespan (s)", m.makespan_s, p.makespan_s),
            ("repartitions", m.repartitions as f64, p.repartitions as f64),
        ];
        for (name, mv, pv) in lines {
            let _ = writeln!(s, "| {} | {name} | {mv:.1} | {pv:.1} | {} |", c.policy, ratio(mv, pv));
        }
    }
    let _ = writeln!(s);
    for c in rows {
        let _ = writeln!(
            s,
            "- {}: {} jobs; initial layouts {}; simulator reconfiguration cost {} s per instance change",
            c.policy,
            c.measured.jobs,
            c.layouts.join(", "),
            c.reconfig_cost_s
        );
    }
    s
}

/// `dynmig demo-compare` subcommands.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum CompareCmd {
    /// Print, as shell assignments, what the demo's dynmig.toml needs for the comparison:
    /// `DYNMIG_ALLOWED_LAYOUTS` (the simulator's layouts of one GPU) and
    /// `DYNMIG_STATIC_LAYOUTS` (the simulator's searched static layout for the slice, one
    /// per node); what was chosen goes to stderr.
    Setup {
        /// The slice and its compression.
        #[command(flatten)]
        slice: crate::dev::trace::SliceArgs,
        /// Nodes of the demo cluster.
        #[arg(long, default_value_t = 2)]
        nodes: usize,
        /// GPUs per node.
        #[arg(long, default_value_t = 2)]
        gpus: usize,
        /// GPU model.
        #[arg(long, default_value = "A100-80GB")]
        gpu_model: String,
        /// Seed of the due dates.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Print the side-by-side table of the JSON files `dynmig demo --compare` wrote.
    Table {
        /// The files, one per policy, in table order.
        files: Vec<std::path::PathBuf>,
    },
}

/// Runs `dynmig demo-compare`.
///
/// # Errors
/// The slice cannot be read, no static layout runs it, or a file cannot be read.
pub fn run(cmd: &CompareCmd) -> Result<()> {
    match cmd {
        CompareCmd::Setup {
            slice,
            nodes,
            gpus,
            gpu_model,
            seed,
        } => {
            let model = dynmig_core::geometry::model_by_name(gpu_model)
                .with_context(|| format!("unknown GPU model {gpu_model}"))?;
            let jobs = slice.jobs()?;
            let wl = workload(&jobs, model, slice.time_limit_factor, *seed);
            let cfg = SimConfig::new(model, *nodes, *gpus);
            let (name, layouts) = searched_static(&wl, &cfg)?;
            eprintln!("demo-compare: searched static layout: {name}");
            println!("DYNMIG_ALLOWED_LAYOUTS='{}'", sim_layouts(model).join(" "));
            let per_node: Vec<String> = layouts.iter().map(|n| n.gpus[0].to_string()).collect();
            println!("DYNMIG_STATIC_LAYOUTS='{}'", per_node.join(" "));
            Ok(())
        }
        CompareCmd::Table { files } => {
            let mut rows = Vec::new();
            for f in files {
                let text = std::fs::read_to_string(f).with_context(|| format!("cannot read {}", f.display()))?;
                rows.push(serde_json::from_str::<Comparison>(&text).with_context(|| format!("in {}", f.display()))?);
            }
            print!("{}", table(&rows));
            Ok(())
        }
    }
}

/// The `p`-quantile (0..=1) of `v` by the nearest-rank method; 0 for an empty list.
pub fn quantile(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = ((p * s.len() as f64).ceil() as usize).clamp(1, s.len());
    s[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;
    use dynmig_core::geometry::A100_80GB;

    #[test]
    fn limits_are_whole_minutes_and_jobs_map_one_for_one() {
        assert_eq!(time_limit_s(Duration::from_secs(2), 2.0), 60);
        assert_eq!(time_limit_s(Duration::from_secs(31), 2.0), 120);
        let jobs = vec![
            DemoJob {
                pod: "a".into(),
                submit_at: Duration::from_secs(3),
                run: Duration::from_secs(10),
                gpus: 1,
                mig_mem: Some(18 << 30),
            },
            DemoJob {
                pod: "b".into(),
                submit_at: Duration::from_secs(5),
                run: Duration::from_secs(4),
                gpus: 2,
                mig_mem: None,
            },
        ];
        let wl = workload(&jobs, &A100_80GB, 2.0, 1);
        assert_eq!(wl.jobs[0].mem_mib, 18 * 1024);
        assert_eq!(wl.jobs[1].mem_mib, A100_80GB.full_profile().memory_mib);
        assert_eq!(wl.jobs[0].time_on(2, 7), 10.0, "a sleep takes as long on any instance");
        assert!((wl.jobs[0].work * wl.jobs[0].limit_factor - 60.0).abs() < 1e-9);
        assert!(wl.jobs[1].due >= 5.0 + 4.0 && wl.jobs[1].due <= 5.0 + 6.0);
    }
}

#[cfg(test)]
mod demo_slice {
    use super::*;

    /// The demo's slice under the demand-driven policy, as `slurm/demo-compare.sh` sets it up
    /// (2 nodes x 2 A100-80GB, 1 s interval, 10 s lifetime, the simulator's layouts): every
    /// job starts. Found by demo-compare on 2026-11-27: the simulator stopped asking the
    /// policy once it had said no while its payback rule held a layout, and the 2-GPU job 49
    /// never started (simulated makespan 172,919 s against 119 s measured).
    #[test]
    fn under_the_demand_policy_every_job_of_the_demo_slice_starts_in_the_simulator() {
        let layouts = sim_layouts(&dynmig_core::geometry::A100_80GB)
            .iter()
            .map(|l| format!("\"{l}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let toml = format!(
            "version = 1\n[controller]\ninterval = \"1s\"\nmax_concurrent_repartitions = 1\nmin_layout_lifetime = \"10s\"\n\
             [policy]\nkind = \"demand\"\n[[node_group]]\nname = \"a100\"\nnodes = [\"n1\", \"n2\"]\ngpu_model = \"A100-80GB\"\n\
             gpus = 2\nbackend = \"simulated\"\ninitial_layout = \"1x7g.80gb\"\nallowed_layouts = [{layouts}]\n"
        );
        let config = dynmig_core::config::parse_config(&toml).unwrap();
        let slice = crate::dev::trace::SliceArgs {
            trace: concat!(env!("CARGO_MANIFEST_DIR"), "/slurm/demo/trace-slice.csv").into(),
            time_compression: 90.0,
            duration_compression: 240.0,
            max_run: 15.0,
            limit: None,
            time_limit_factor: 2.0,
        };
        let jobs = slice.jobs().unwrap();
        let cfg = sim_config(&config, 0.5).unwrap();
        let wl = workload(&jobs, cfg.model, 2.0, 1);
        let r = simulate(
            &wl,
            &from_config::spec_from_config(&config, from_config::Host::Simulator).unwrap(),
            &cfg,
            &|_| {},
        )
        .unwrap();
        assert!(r.never_started.is_empty(), "never started: {:?}", r.never_started);
        assert!(r.makespan_s < 600.0, "makespan {} s", r.makespan_s);
    }
}
