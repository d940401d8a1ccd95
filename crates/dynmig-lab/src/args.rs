//! The arguments of `dynmig simulate` (docs/simulate.md) and what they build: the workload,
//! the simulator's configuration, the evaluation's options. [`crate::cli`] runs them; the
//! matrix ([`crate::matrix_cli`]) reads them too.

use crate::evaluate::{EvalOptions, PolicyName};
use anyhow::{bail, Context, Result};
use dynmig_core::geometry::{model_by_name, model_names, GpuModel};
use dynmig_sim::engine::{DrainScope, DrainTiming, SimConfig};
use dynmig_sim::model::{ModelParams, SpeedCurve};
use dynmig_sim::placement::{Placement, ALL_PLACEMENTS};
use dynmig_sim::policies::PolicyLimits;
use dynmig_sim::requests::{RequestParams, SourceShares};
use dynmig_sim::workload::alibaba::{pods_of, Pod};
use dynmig_sim::workload::{build_workload, Load, Source};
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `dynmig simulate`.
#[derive(Debug, Clone, clap::Args)]
pub struct SimulateArgs {
    /// The Alibaba trace: `default` (development), or `gpushare20`, `gpushare40`,
    /// `gpushare60` (validation only), `gpushare80`, `gpushare100` (test only, held out:
    /// crates/dynmig-sim/data/README.md, "Splits"), or the path of a v2023 pod-list CSV.
    #[arg(long, default_value = "default")]
    pub trace: String,
    /// Use the synthetic SMART-MIG-like generator instead of the trace.
    #[arg(long)]
    pub synthetic: bool,
    /// With --synthetic: a family whose mix moves (day-night, weekly, burst, drift,
    /// multi-surge; docs/model.md, "Workload families") instead of the steady mix.
    #[arg(long, requires = "synthetic")]
    pub family: Option<dynmig_sim::workload::families::Family>,
    /// Days: the last N days of the trace, or N days of synthetic arrivals.
    #[arg(long)]
    pub days: Option<f64>,
    /// Load factor (trace copies; synthetic: mean jobs per hour x this / 100); `auto`: the
    /// factor at which the whole-GPU demand of the day's busiest hour equals the cluster's
    /// GPUs; or a level a site runs at, `P%` (e.g. `60%`, `80%`, `95%`): that share of the
    /// busiest hour's sustainable throughput (`auto` is `100%`; docs/simulate.md, "Load").
    #[arg(long, default_value = "auto")]
    pub load: String,
    /// GPU model.
    #[arg(long, default_value = "A100-40GB")]
    pub model: String,
    /// Nodes.
    #[arg(long, default_value_t = 16)]
    pub nodes: usize,
    /// GPUs per node.
    #[arg(long, default_value_t = 8)]
    pub gpus_per_node: usize,
    /// Policies, comma-separated: none, static, static-oracle, twice-daily,
    /// twice-daily-oracle, dynamic, time-of-day, plan, consolidate, mpc, adaptive, guarded
    /// (the fair static's layout, left when the engine's runs on the last days say a change
    /// pays; docs/policy.md), learned (with --learned-model), clairvoyant.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "none,static,static-oracle,twice-daily,twice-daily-oracle,dynamic,time-of-day,plan,consolidate"
    )]
    pub policies: Vec<PolicyName>,
    /// Search window `A,B` in days of the workload: static and twice-daily are searched on
    /// the jobs released in `[A, B)` [default: 0,14, or the first half of a workload shorter
    /// than 15 days].
    #[arg(long, value_delimiter = ',')]
    pub search_days: Option<Vec<f64>>,
    /// Evaluation window start, days: every policy is judged on the jobs released from day D
    /// on [default: 14, or the second half of a workload shorter than 15 days].
    #[arg(long)]
    pub eval_from: Option<f64>,
    /// How training jobs' speed depends on their instance: `miso` (the measured MISO SoCC'22
    /// medians per profile) or `exponent` (`work x (7/c)^0.85`, the what-if of before
    /// 2026-11-27); inference jobs always use their exponent (docs/model.md).
    #[arg(long, default_value = "miso")]
    pub speed: String,
    /// Print the ceilings instead: the best policy with whole-node drains, with per-GPU
    /// drains, and the per-allocation design (an instance created per job), each as headroom
    /// over the fair static (docs/simulate.md, "Ceilings").
    #[arg(long)]
    pub ceilings: bool,
    /// Run the goal matrix instead: traces x models x seeds x drain scopes, every policy;
    /// per (trace, model, drain) the mean and range over seeds (docs/simulate.md).
    #[arg(long)]
    pub matrix: bool,
    /// Run the sensitivity grid instead: due-date ranges x gamma x time-limit factor on the
    /// default trace, A100-40GB; the ranking of the policies at each point.
    #[arg(long)]
    pub sensitivity: bool,
    /// Seeds of --matrix and --sensitivity: `A-B` or a comma-separated list [default: 1-8
    /// for --matrix, 1-2 for --sensitivity].
    #[arg(long)]
    pub seeds: Option<String>,
    /// Traces of --matrix, comma-separated: default, synthetic, synthetic:FAMILY (development; FAMILY one of --family's), gpushare20,
    /// gpushare40, gpushare60 (validation), gpushare80, gpushare100 (test, held out), or paths.
    #[arg(long, value_delimiter = ',', default_value = "default,gpushare40,synthetic")]
    pub matrix_traces: Vec<String>,
    /// GPU models of --matrix, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "A100-40GB,H100-80GB")]
    pub matrix_models: Vec<String>,
    /// Drain scopes of --matrix, comma-separated (node, gpu).
    #[arg(long, value_delimiter = ',', default_value = "node,gpu")]
    pub matrix_drains: Vec<String>,
    /// Threads of --matrix and --sensitivity [default: available parallelism].
    #[arg(long)]
    pub threads: Option<usize>,
    /// Placement rules, comma-separated (slurm, edf, eft, largest-first, smallest-first,
    /// random), or `all`.
    #[arg(long, value_delimiter = ',', default_value = "slurm")]
    pub placements: Vec<String>,
    /// Seconds per GPU-instance create or destroy.
    #[arg(long, default_value_t = 4.0)]
    pub reconfig_cost: f64,
    /// What a repartition drains: node (Slurm 22.05, as the controller does) or gpu.
    #[arg(long, default_value = "node")]
    pub drain: String,
    /// When a repartition takes its GPUs away: reservation (at the time limit of their running
    /// jobs, backfill meanwhile) or immediate (a drain at once).
    #[arg(long, default_value = "reservation")]
    pub drain_timing: String,
    /// Departures from Slurm's scheduling, comma-separated (none by default): `spill-up` (a
    /// job may run on a larger free instance than its type) and `clairvoyant-backfill`
    /// (backfill plans with true run times instead of time limits). Neither is Slurm.
    #[arg(long, default_value = "none")]
    pub what_if: String,
    /// Slurm's `bf_window`, minutes: a blocked job whose reservation would start later gets
    /// none (slurm.conf's default, 1440).
    #[arg(long, default_value_t = 1440.0)]
    pub bf_window: f64,
    /// Slurm's `bf_resolution`, seconds: backfill's times are rounded down to it (slurm.conf's
    /// default, 60).
    #[arg(long, default_value_t = 60.0)]
    pub bf_resolution: f64,
    /// Due-date factor range `LO,HI`: due = release + U(LO, HI) x time on a full GPU.
    #[arg(long, value_delimiter = ',', default_values_t = [1.0, 1.5])]
    pub due: Vec<f64>,
    /// Seconds between calls of the dynamic policy while jobs wait.
    #[arg(long, default_value_t = 60.0)]
    pub policy_interval: f64,
    /// Most nodes repartitioning at once under the dynamic policy [default: nodes / 8, at least 1].
    #[arg(long)]
    pub max_concurrent: Option<usize>,
    /// Seconds a layout lives at least under the dynamic policy.
    #[arg(long, default_value_t = 600.0)]
    pub min_layout_lifetime: f64,
    /// Periods per day of the learned time-of-day schedule.
    #[arg(long, default_value_t = 4)]
    pub periods: u32,
    /// Runs the local search over mixed node layouts may take in each static search (0: the
    /// uniform layouts and the demand mix only; docs/simulate.md, "Fair baselines").
    #[arg(long, default_value_t = dynmig_sim::search::LOCAL_SEARCH_RUNS)]
    pub static_local_runs: usize,
    /// Leave out the `<policy>-frozen` rows: beside each policy whose layouts change, the
    /// static layout of its mean node mix over the judged days (docs/simulate.md, "Frozen
    /// mix").
    #[arg(long)]
    pub no_frozen: bool,
    /// Seed (workload draws and random placement).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write table.md, table.csv, results.json, et.svg and `day-<policy>.svg` here (--matrix:
    /// matrix.md and matrix.json; --sensitivity: sensitivity.md and sensitivity.json).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Day to chart, counted from 0 [default: the middle day].
    #[arg(long)]
    pub chart_day: Option<u32>,
    /// What to print: table, markdown, csv or json.
    #[arg(long, default_value = "table")]
    pub format: String,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// What jobs ask for: exact (the smallest profile that holds the true need), whole (a
    /// whole GPU) or estimated (the estimator's error model, with out-of-memory restarts).
    #[arg(long, default_value = "exact")]
    pub requests: String,
    /// Estimated requests: weights of the estimate sources (mig-mem, model, history, default,
    /// whole-gpu); unnamed sources get 0.
    #[arg(long, default_value = "mig-mem=0.1,model=0.3,history=0.4,default=0.2")]
    pub estimate_shares: String,
    /// A job that ran out of memory is requeued only when a full run would have ended, not
    /// when the failure happens.
    #[arg(long)]
    pub no_early_restart: bool,
    /// Seconds from an attempt's start to its out-of-memory failure with early restart.
    #[arg(long, default_value_t = 60.0)]
    pub oom_after: f64,
    /// Out-of-memory restarts per job (the last one goes to a whole GPU; 0 counts as 1)
    /// [default: estimator.max_oom_restarts, 2].
    #[arg(long)]
    pub max_oom_restarts: Option<u32>,
    /// Run the policies of --compare-policies under whole, estimated and exact requests and
    /// print throughput and energy against whole-GPU requests.
    #[arg(long)]
    pub compare_requests: bool,
    /// Release every job at time 0 (a batch; due dates keep their distance from release):
    /// throughput is then the rate at which the cluster works the batch off.
    #[arg(long)]
    pub batch: bool,
    /// Policies of --compare-requests, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "static,dynamic")]
    pub compare_policies: Vec<PolicyName>,
    /// Trained models (`dynmig train`), comma-separated, at most one per GPU model: the
    /// `learned` policy runs the one for the cluster's GPUs, and is added to --policies
    /// (`--matrix`: cells of a GPU model with no model have no learned row).
    #[arg(long, value_delimiter = ',')]
    pub learned_model: Vec<PathBuf>,
    /// The policies `learned` runs, made from `learned_model` by the caller (the `dynmig`
    /// binary, through `dynmig-train`).
    #[arg(skip)]
    pub learned: Vec<dynmig_sim::policies::ExternalPolicy>,
    /// A learned residual on the guarded default (`dynmig train-residual`, docs/learned.md
    /// "Residual"): the `guarded-residual` row runs it, and is added to --policies.
    #[arg(long)]
    pub residual: Option<PathBuf>,
}

fn request_params(a: &SimulateArgs) -> Result<RequestParams> {
    let mut r = RequestParams {
        mode: a.requests.parse().map_err(anyhow::Error::msg)?,
        shares: SourceShares::parse(&a.estimate_shares)?,
        early_restart: !a.no_early_restart,
        ..Default::default()
    };
    if !(a.oom_after.is_finite() && a.oom_after > 0.0) {
        bail!("--oom-after {}: allowed a number of seconds > 0", a.oom_after);
    }
    r.oom_after_s = a.oom_after;
    if let Some(n) = a.max_oom_restarts {
        if n > 10 {
            bail!("--max-oom-restarts {n}: allowed 0 to 10");
        }
        r.estimator.max_oom_restarts = n;
    }
    Ok(r)
}

/// The source of the workload of `a` (`pods` holds the trace's pods, read by the caller).
fn source<'p>(a: &SimulateArgs, pods: &'p Option<Vec<Pod>>) -> Source<'p> {
    match pods {
        Some(p) if !a.synthetic => Source::Trace(p),
        _ => Source::Synthetic(a.family),
    }
}

/// `--load`: a factor, `auto` or a level `P%` ([`Load::Level`] P / 100), for a cluster of
/// `gpus` GPUs.
///
/// # Errors
/// Neither a number > 0, nor `auto`, nor a percentage > 0.
pub fn parse_load(load: &str, gpus: usize) -> Result<Load> {
    if load == "auto" {
        return Ok(Load::Auto { gpus });
    }
    if let Some(p) = load.strip_suffix('%') {
        return match p.trim().parse::<f64>() {
            Ok(p) if p > 0.0 && p.is_finite() => Ok(Load::Level { gpus, level: p / 100.0 }),
            _ => bail!("--load {load}: a level is a percentage > 0, e.g. 80%"),
        };
    }
    match load.parse::<f64>() {
        Ok(f) if f > 0.0 && f.is_finite() => Ok(Load::Factor(f)),
        _ => bail!("--load {load}: allowed a number > 0, auto, or a level such as 80%"),
    }
}

/// A GPU model by name.
///
/// # Errors
/// Unknown (the message lists the known ones).
pub fn parse_model(name: &str) -> Result<&'static GpuModel> {
    model_by_name(name).with_context(|| format!("unknown GPU model '{name}'; allowed: {}", model_names().join(", ")))
}

/// A drain scope by name.
///
/// # Errors
/// Neither `node` nor `gpu`.
pub fn parse_drain(name: &str) -> Result<DrainScope> {
    Ok(match name {
        "node" => DrainScope::Node,
        "gpu" => DrainScope::Gpu,
        d => bail!("unknown drain scope '{d}'; allowed: node, gpu"),
    })
}

/// The model parameters of `a` (`--due`).
///
/// # Errors
/// A due range out of range.
pub fn model_params(a: &SimulateArgs) -> Result<ModelParams> {
    let [lo, hi] = a.due[..] else {
        bail!("--due {:?}: allowed two factors LO,HI, e.g. 1,1.5", a.due);
    };
    if !(lo >= 1.0 && hi >= lo) {
        bail!("--due {lo},{hi}: allowed LO >= 1 and HI >= LO");
    }
    let speed_training = match a.speed.as_str() {
        "miso" => SpeedCurve::MisoTraining,
        "exponent" => SpeedCurve::Exponent,
        other => bail!(
            "--speed {other}: allowed miso (the measured MISO SoCC'22 table for training jobs, the default) or exponent (work x (7/c)^0.85 for training, a what-if; docs/model.md)"
        ),
    };
    Ok(ModelParams {
        due_lo: lo,
        due_hi: hi,
        speed_training,
        ..Default::default()
    })
}

/// The evaluation options of `a`: policies, placements, dynamic limits, periods, windows.
///
/// # Errors
/// An unknown placement.
pub fn eval_options(a: &SimulateArgs) -> Result<EvalOptions> {
    let placements: Vec<Placement> = if a.placements.iter().any(|p| p == "all") {
        ALL_PLACEMENTS.to_vec()
    } else {
        a.placements
            .iter()
            .map(|p| p.parse())
            .collect::<Result<_, String>>()
            .map_err(anyhow::Error::msg)?
    };
    Ok(EvalOptions {
        policies: {
            let mut p = a.policies.clone();
            if !a.learned.is_empty() && !p.contains(&PolicyName::Learned) {
                p.push(PolicyName::Learned);
            }
            if a.residual.is_some() && !p.contains(&PolicyName::GuardedResidual) {
                p.push(PolicyName::GuardedResidual);
            }
            p
        },
        placements,
        limits: PolicyLimits {
            max_concurrent: a.max_concurrent.unwrap_or((a.nodes / 8).max(1)),
            min_layout_lifetime: Duration::from_secs_f64(a.min_layout_lifetime),
            min_gain: 1,
        },
        periods: a.periods,
        search_days: match a.search_days.as_deref() {
            None => None,
            Some([from, to]) => Some((*from, *to)),
            Some(v) => bail!("--search-days {v:?}: allowed two days A,B, e.g. 0,14"),
        },
        eval_from_days: a.eval_from,
        learned: a.learned.clone(),
        static_local_runs: a.static_local_runs,
        frozen: !a.no_frozen,
        residual: match &a.residual {
            None => None,
            Some(p) => {
                let text = std::fs::read_to_string(p).with_context(|| format!("--residual {}", p.display()))?;
                let model = dynmig_sim::policies::residual::Residual::parse(&text)
                    .map_err(|e| anyhow::anyhow!("--residual {}: {e}", p.display()))?;
                Some(dynmig_sim::policies::residual::ResidualUse::greedy(model))
            }
        },
        ..Default::default()
    })
}

/// The workload and engine settings `a` asks for (not the matrix's), and the load factor used.
///
/// # Errors
/// Bad arguments (the message says what is allowed) or an unreadable trace.
pub fn workload_and_config(a: &SimulateArgs) -> Result<(dynmig_sim::workload::Workload, SimConfig, f64)> {
    let model = parse_model(&a.model)?;
    let drain = parse_drain(&a.drain)?;
    if a.nodes == 0 || a.gpus_per_node == 0 || a.gpus_per_node > 64 {
        bail!("nodes must be >= 1 and gpus-per-node 1 to 64");
    }
    let m = model_params(a)?;
    let load = parse_load(&a.load, a.nodes * a.gpus_per_node)?;
    let pods = if a.synthetic { None } else { Some(pods_of(&a.trace)?) };
    let (mut wl, load) = build_workload(source(a, &pods), a.days, load, a.seed, &m)?;
    if a.batch {
        wl = wl.all_at_once();
    }
    let mut cfg = SimConfig::new(model, a.nodes, a.gpus_per_node);
    cfg.reconfig_cost_s = a.reconfig_cost;
    cfg.drain = drain;
    cfg.timing = match a.drain_timing.as_str() {
        "reservation" => DrainTiming::Reservation,
        "immediate" => DrainTiming::Immediate,
        t => bail!("unknown drain timing '{t}'; allowed: reservation, immediate"),
    };
    cfg.policy_interval_s = a.policy_interval;
    cfg.seed = a.seed;
    cfg.requests = request_params(a)?;
    scheduling(a, &mut cfg)?;
    Ok((wl, cfg, load))
}

/// Sets `cfg`'s backfill settings and what-ifs from `a` (`--bf-window`, `--bf-resolution`,
/// `--what-if`).
///
/// # Errors
/// An unknown what-if, or a window or resolution that is not a number >= 0.
pub fn scheduling(a: &SimulateArgs, cfg: &mut SimConfig) -> Result<()> {
    cfg.what_if = a.what_if.parse().map_err(|e: String| anyhow::anyhow!(e))?;
    let ok = a.bf_window >= 0.0 && a.bf_resolution >= 0.0 && a.bf_resolution.is_finite();
    if !ok {
        bail!("--bf-window and --bf-resolution must be numbers >= 0");
    }
    cfg.bf_window_s = a.bf_window * 60.0;
    cfg.bf_resolution_s = a.bf_resolution;
    Ok(())
}
