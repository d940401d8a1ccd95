//! The goal matrix and the sensitivity grid (docs/simulate.md): many independent
//! evaluations ("cells": a trace, a GPU model, a drain scope, a seed and model parameters),
//! run in parallel on all cores, then summarised per group of cells over their seeds.
//! Tables: [`crate::matrix_report`].

use crate::evaluate::{evaluate, EvalOptions};
use anyhow::{anyhow, Result};
use dynmig_core::geometry::GpuModel;
use dynmig_sim::backfill::WhatIfs;
use dynmig_sim::engine::{DrainScope, SimConfig};
use dynmig_sim::metrics::Metrics;
use dynmig_sim::model::{ModelParams, SpeedCurve};
use dynmig_sim::workload::alibaba::Pod;
use dynmig_sim::workload::families::Family;
use dynmig_sim::workload::{build_workload, Load, Source};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// The name of the synthetic source among the traces of a matrix; `synthetic:FAMILY` names
/// a family of it ([`dynmig_sim::workload::families`]).
pub const SYNTHETIC: &str = "synthetic";

/// Whether a matrix trace name is the synthetic source: `Some(None)` for `synthetic`,
/// `Some(Some(family))` for `synthetic:FAMILY`, `None` for a trace.
///
/// # Errors
/// `synthetic:` with an unknown family (the message lists the known ones).
pub fn synthetic_family(name: &str) -> Result<Option<Option<Family>>> {
    if name == SYNTHETIC {
        return Ok(Some(None));
    }
    match name.strip_prefix("synthetic:") {
        Some(f) => Ok(Some(Some(f.parse()?))),
        None => Ok(None),
    }
}

/// One evaluation of a matrix or grid.
#[derive(Debug, Clone)]
pub struct Cell {
    /// `default`, `gpushare40`, a path (keys of the pods map) or [`SYNTHETIC`].
    pub trace: String,
    /// GPU model.
    pub model: &'static GpuModel,
    /// What a repartition drains.
    pub drain: DrainScope,
    /// Seed of the workload draws and the random placement.
    pub seed: u64,
    /// Model parameters (due dates, gammas, time limits).
    pub params: ModelParams,
    /// Grid point, e.g. `due 1-1.5, gamma 0.5, f 1` (empty in the matrix).
    pub point: String,
    /// The power model's variant (the fitted model in the matrix).
    pub power: PowerVariant,
}

/// A what-if of the power model for the sensitivity grid (docs/model.md, "Constants").
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PowerVariant {
    /// The fitted model ([`dynmig_sim::power::PowerModel::for_model`]).
    Fit,
    /// The fitted model with another concavity exponent `k` (the fit's is 0.599).
    Exponent(f64),
    /// A busy 7g instance draws the board's TDP (scale = TDP - idle): what a dense bf16
    /// matmul drew on the H100 and H200 (docs/results/hardware-2026-11-26.md), the fit's
    /// exponent kept.
    FullAtTdp,
}

impl PowerVariant {
    /// Applies the variant to `cfg`'s power model.
    pub fn apply(self, cfg: &mut SimConfig) {
        match self {
            PowerVariant::Fit => {}
            PowerVariant::Exponent(k) => cfg.power.exponent = k,
            PowerVariant::FullAtTdp => cfg.power.scale_w = cfg.power.tdp_w - cfg.power.idle_w,
        }
    }

    /// The variant in words, for grid points.
    pub fn label(self) -> String {
        match self {
            PowerVariant::Fit => "power fit".into(),
            PowerVariant::Exponent(k) => format!("power k {k}"),
            PowerVariant::FullAtTdp => "power 7g at TDP".into(),
        }
    }
}

impl Cell {
    /// The group the cell is summarised in: everything but the seed.
    pub fn group(&self) -> String {
        let drain = drain_name(self.drain);
        if self.point.is_empty() {
            format!("{} / {} / drain {drain}", self.trace, self.model.name)
        } else {
            format!("{} / {} / drain {drain} / {}", self.trace, self.model.name, self.point)
        }
    }
}

/// The drain scope in lower case (`node`, `gpu`).
pub fn drain_name(d: DrainScope) -> String {
    format!("{d:?}").to_ascii_lowercase()
}

/// What every cell shares: the cluster, the workload's length and load, the engine's knobs
/// and the evaluation's options.
#[derive(Debug, Clone)]
pub struct Setup {
    /// Nodes.
    pub nodes: usize,
    /// GPUs per node.
    pub gpus_per_node: usize,
    /// Days of the workload (`None`: 30, the trace's default, for traces and synthetic alike).
    pub days: Option<f64>,
    /// Load.
    pub load: Load,
    /// Seconds per instance create or destroy.
    pub reconfig_cost_s: f64,
    /// Seconds between calls of the dynamic policy.
    pub policy_interval_s: f64,
    /// The evaluation's options (policies, windows, ...); warnings are collected, not printed.
    pub opts: EvalOptions,
    /// Scheduling what-ifs of every cell ([`SimConfig::what_if`]; default: Slurm's rules).
    pub what_if: WhatIfs,
    /// Slurm's `bf_window` of every cell, s ([`SimConfig::bf_window_s`]).
    pub bf_window_s: f64,
    /// Slurm's `bf_resolution` of every cell, s ([`SimConfig::bf_resolution_s`]).
    pub bf_resolution_s: f64,
}

/// What one cell gave.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CellOutcome {
    /// The cell's group ([`Cell::group`]).
    pub group: String,
    /// Trace.
    pub trace: String,
    /// GPU model.
    pub model: String,
    /// `node` or `gpu`.
    pub drain: String,
    /// Grid point (empty in the matrix).
    pub point: String,
    /// Seed.
    pub seed: u64,
    /// The workload.
    pub workload: String,
    /// Jobs of the workload.
    pub jobs: usize,
    /// Load factor.
    pub load: f64,
    /// One row per policy (Slurm-like placement unless the options say otherwise).
    pub rows: Vec<Metrics>,
    /// Candidates skipped and rows omitted.
    pub skipped: Vec<String>,
    /// Wall time of the cell, s.
    pub wall_s: f64,
}

/// Runs one cell.
///
/// # Errors
/// The workload cannot be built or the evaluation failed.
pub fn run_cell(cell: &Cell, setup: &Setup, pods: &BTreeMap<String, Vec<Pod>>) -> Result<CellOutcome> {
    let t0 = Instant::now();
    let source = if let Some(family) = synthetic_family(&cell.trace)? {
        Source::Synthetic(family)
    } else {
        Source::Trace(
            pods.get(&cell.trace)
                .ok_or_else(|| anyhow!("trace '{}' was not read", cell.trace))?,
        )
    };
    // Synthetic arrivals run as long as the trace's window, so every cell has the same
    // search and evaluation windows.
    let days = match source {
        Source::Synthetic(_) => setup.days.or(Some(30.0)),
        Source::Trace(_) => setup.days,
    };
    let (wl, load) = build_workload(source, days, setup.load, cell.seed, &cell.params)?;
    let mut cfg = SimConfig::new(cell.model, setup.nodes, setup.gpus_per_node);
    cfg.drain = cell.drain;
    cfg.seed = cell.seed;
    cfg.reconfig_cost_s = setup.reconfig_cost_s;
    cfg.policy_interval_s = setup.policy_interval_s;
    cfg.what_if = setup.what_if;
    cfg.bf_window_s = setup.bf_window_s;
    cfg.bf_resolution_s = setup.bf_resolution_s;
    cell.power.apply(&mut cfg);
    let mut opts = setup.opts.clone();
    opts.warn = false;
    // The cells already run on the matrix's threads: one thread per cell's evaluation.
    opts.threads = 1;
    let ev = evaluate(&wl, &cfg, &opts, &|_, _| {})?;
    Ok(CellOutcome {
        group: cell.group(),
        trace: cell.trace.clone(),
        model: cell.model.name.to_string(),
        drain: drain_name(cell.drain),
        point: cell.point.clone(),
        seed: cell.seed,
        workload: wl.description.clone(),
        jobs: wl.jobs.len(),
        load,
        rows: ev.rows,
        skipped: ev.skipped,
        wall_s: t0.elapsed().as_secs_f64(),
    })
}

/// Runs `cells` on `threads` threads (at least 1), each taking the next cell not yet taken;
/// prints a progress line per finished cell to stderr. Results in the order of `cells`.
pub fn run_cells(
    cells: &[Cell],
    setup: &Setup,
    pods: &BTreeMap<String, Vec<Pod>>,
    threads: usize,
) -> Vec<Result<CellOutcome>> {
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let out: Mutex<Vec<Option<Result<CellOutcome>>>> = Mutex::new((0..cells.len()).map(|_| None).collect());
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads.max(1).min(cells.len().max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(cell) = cells.get(i) else { break };
                let r = run_cell(cell, setup, pods);
                let k = done.fetch_add(1, Ordering::SeqCst) + 1;
                let what = match &r {
                    Ok(o) => {
                        let et = |p: &str| {
                            o.rows
                                .iter()
                                .find(|m| m.policy == p)
                                .map_or("-".to_string(), |m| format!("{:.3}", m.et_vs_static))
                        };
                        format!(
                            "{} jobs, {:.1} s, ET/static: dynamic {}, static-oracle {}",
                            o.jobs,
                            o.wall_s,
                            et("dynamic"),
                            et("static-oracle")
                        )
                    }
                    Err(e) => format!("failed: {e:#}"),
                };
                eprintln!(
                    "[{k}/{}] {:.0} s: {} / seed {}: {what}",
                    cells.len(),
                    t0.elapsed().as_secs_f64(),
                    cell.group(),
                    cell.seed
                );
                if let Ok(mut v) = out.lock() {
                    v[i] = Some(r);
                }
            });
        }
    });
    out.into_inner()
        .unwrap_or_default()
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(anyhow!("cell not run"))))
        .collect()
}

/// Mean, least and greatest of a figure over seeds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Stat {
    /// Mean.
    pub mean: f64,
    /// Least.
    pub min: f64,
    /// Greatest.
    pub max: f64,
}

impl Stat {
    /// No value (NaN).
    pub fn none() -> Self {
        Self::of([])
    }

    /// Of the finite values of `v` (NaN when there is none).
    pub fn of(v: impl IntoIterator<Item = f64>) -> Self {
        let v: Vec<f64> = v.into_iter().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return Self {
                mean: f64::NAN,
                min: f64::NAN,
                max: f64::NAN,
            };
        }
        Self {
            mean: v.iter().sum::<f64>() / v.len() as f64,
            min: v.iter().copied().fold(f64::INFINITY, f64::min),
            max: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        }
    }
}

/// One policy over the seeds of a group.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PolicySummary {
    /// Policy (row name).
    pub policy: String,
    /// Seeds with this row.
    pub seeds: usize,
    /// ET ([`dynmig_sim::metrics::Norm::et`]: fixed references of the workload).
    pub et: Stat,
    /// ET over fair static's.
    pub et_vs_static: Stat,
    /// ET over static-oracle's.
    pub et_vs_oracle: Stat,
    /// Energy per judged job, MJ.
    pub energy_per_job_mj: Stat,
    /// Mean tardiness, s.
    pub tardiness_s: Stat,
    /// Share of judged jobs late.
    pub late_share: Stat,
    /// Median wait, s.
    pub wait_p50_s: Stat,
    /// 99th-percentile wait, s.
    pub wait_p99_s: Stat,
    /// Drain waste from the window start, GPU-hours.
    pub drain_waste_gpu_h: Stat,
    /// Repartitions.
    pub reconfigs: Stat,
    /// Judged jobs that never started ([`dynmig_sim::metrics::Metrics::never_started`]).
    #[serde(default = "Stat::none")]
    pub never_started: Stat,
    /// The figures a site reads per job class, means over the seeds
    /// ([`dynmig_sim::metrics::mean_site_figures`]).
    #[serde(default)]
    pub classes: Vec<dynmig_sim::metrics::ClassFigures>,
    /// Repartitions per node and day and drain waste per repartition, means over the seeds.
    #[serde(default)]
    pub repartitions: dynmig_sim::metrics::Repartitions,
    /// The energy price ET's weights imply, MJ per hour of mean tardiness
    /// ([`dynmig_sim::metrics::Norm::mj_per_tardiness_hour`]), over the seeds.
    #[serde(default = "Stat::none")]
    pub mj_per_tardiness_h: Stat,
    /// ET over the ET of its own `-frozen` row (the static layout of its mean node mix over
    /// the judged days), per seed; NaN without one ([`crate::evaluate::FROZEN_SUFFIX`]).
    #[serde(default = "Stat::none")]
    pub et_vs_frozen: Stat,
}

/// A group of cells (all but the seed equal) summarised over seeds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Group {
    /// [`Cell::group`].
    pub group: String,
    /// Trace.
    pub trace: String,
    /// GPU model.
    pub model: String,
    /// Drain scope.
    pub drain: String,
    /// Grid point (empty in the matrix).
    pub point: String,
    /// Seeds that ran.
    pub seeds: Vec<u64>,
    /// Jobs per seed, mean.
    pub jobs: f64,
    /// Candidates skipped or rows omitted over all seeds.
    pub skipped: usize,
    /// One entry per policy, in row order.
    pub policies: Vec<PolicySummary>,
}

impl Group {
    /// Policies by mean ET, best first.
    pub fn ranking(&self) -> Vec<&PolicySummary> {
        let mut v: Vec<&PolicySummary> = self.policies.iter().collect();
        v.sort_by(|a, b| a.et.mean.total_cmp(&b.et.mean));
        v
    }
}

/// Summarises the outcomes that ran, per group, in the order the groups first appear.
pub fn summarise(outcomes: &[&CellOutcome]) -> Vec<Group> {
    let mut order: Vec<String> = Vec::new();
    let mut by: BTreeMap<String, Vec<&CellOutcome>> = BTreeMap::new();
    for o in outcomes {
        if !by.contains_key(&o.group) {
            order.push(o.group.clone());
        }
        by.entry(o.group.clone()).or_default().push(o);
    }
    order
        .into_iter()
        .map(|g| {
            let cells = &by[&g];
            let first = cells[0];
            let mut names: Vec<String> = Vec::new();
            for c in cells {
                for m in &c.rows {
                    if !names.contains(&m.policy) {
                        names.push(m.policy.clone());
                    }
                }
            }
            let policies = names
                .into_iter()
                .map(|p| {
                    let rows: Vec<&Metrics> = cells
                        .iter()
                        .filter_map(|c| c.rows.iter().find(|m| m.policy == p))
                        .collect();
                    let st = |f: &dyn Fn(&Metrics) -> f64| Stat::of(rows.iter().map(|m| f(m)));
                    let (classes, repartitions) = dynmig_sim::metrics::mean_site_figures(&rows);
                    let frozen = format!("{p}{}", crate::evaluate::FROZEN_SUFFIX);
                    let et_vs_frozen = Stat::of(cells.iter().filter_map(|c| {
                        let own = c.rows.iter().find(|m| m.policy == p)?;
                        let f = c.rows.iter().find(|m| m.policy == frozen)?;
                        Some(own.et / f.et)
                    }));
                    PolicySummary {
                        et_vs_frozen,
                        classes,
                        repartitions,
                        mj_per_tardiness_h: st(&|m| m.norm().mj_per_tardiness_hour()),
                        seeds: rows.len(),
                        et: st(&|m| m.et),
                        et_vs_static: st(&|m| m.et_vs_static),
                        et_vs_oracle: st(&|m| m.et_vs_oracle),
                        energy_per_job_mj: st(&|m| m.energy_per_job_j / 1e6),
                        tardiness_s: st(&|m| m.mean_tardiness_s),
                        late_share: st(&|m| m.late_share),
                        wait_p50_s: st(&|m| m.wait_p50_s),
                        wait_p99_s: st(&|m| m.wait_p99_s),
                        never_started: st(&|m| m.never_started as f64),
                        drain_waste_gpu_h: st(&|m| m.drain_waste_gpu_s / 3600.0),
                        reconfigs: st(&|m| m.reconfigs as f64),
                        policy: p,
                    }
                })
                .collect();
            Group {
                group: g.clone(),
                trace: first.trace.clone(),
                model: first.model.clone(),
                drain: first.drain.clone(),
                point: first.point.clone(),
                seeds: cells.iter().map(|c| c.seed).collect(),
                jobs: cells.iter().map(|c| c.jobs as f64).sum::<f64>() / cells.len() as f64,
                skipped: cells.iter().map(|c| c.skipped.len()).sum(),
                policies,
            }
        })
        .collect()
}

/// Parses seeds: `A-B` (inclusive) or a comma-separated list.
///
/// # Errors
/// Not a range or list of integers, or an empty range.
pub fn parse_seeds(s: &str) -> Result<Vec<u64>> {
    let bad = || anyhow!("--seeds {s}: allowed A-B (A <= B) or a comma-separated list of integers");
    if let Some((a, b)) = s.split_once('-') {
        let (a, b): (u64, u64) = (
            a.trim().parse().map_err(|_| bad())?,
            b.trim().parse().map_err(|_| bad())?,
        );
        if a > b {
            return Err(bad());
        }
        return Ok((a..=b).collect());
    }
    let v: Vec<u64> = s
        .split(',')
        .map(|x| x.trim().parse().map_err(|_| bad()))
        .collect::<Result<_>>()?;
    if v.is_empty() {
        return Err(bad());
    }
    Ok(v)
}

/// The due-date ranges of the sensitivity grid.
pub const GRID_DUE: [(f64, f64); 2] = [(1.0, 1.5), (2.0, 4.0)];
/// The speed models of the grid: `None` is the measured MISO table for training jobs (the
/// default, inference at its default exponent); each `Some(g)` sets the exponent of every
/// job, training included, to `g` (docs/model.md, "Constants").
pub const GRID_SPEED: [Option<f64>; 4] = [None, Some(0.5), Some(0.7), Some(0.9)];
/// The time-limit factors of the grid.
pub const GRID_F: [f64; 2] = [1.0, 5.0];

/// The power variants of the grid, each at the default due range, speed and time limits.
pub const GRID_POWER: [PowerVariant; 3] = [
    PowerVariant::Exponent(0.8),
    PowerVariant::Exponent(1.0),
    PowerVariant::FullAtTdp,
];

/// The sensitivity grid's cells: every due range x speed model x time-limit factor x seed,
/// then each of [`GRID_POWER`] x seed at `base`'s due range, speed and time limits, on
/// `trace` with `model` and `drain`; other parameters from `base`.
pub fn grid_cells(
    trace: &str,
    model: &'static GpuModel,
    drain: DrainScope,
    seeds: &[u64],
    base: &ModelParams,
) -> Vec<Cell> {
    let mut cells = Vec::new();
    for (lo, hi) in GRID_DUE {
        for speed in GRID_SPEED {
            for f in GRID_F {
                let mut params = ModelParams {
                    due_lo: lo,
                    due_hi: hi,
                    time_limit_f: f,
                    ..base.clone()
                };
                let label = match speed {
                    None => {
                        params.speed_training = SpeedCurve::MisoTraining;
                        "speed miso".to_string()
                    }
                    Some(g) => {
                        params.speed_training = SpeedCurve::Exponent;
                        params.gamma_training = g;
                        params.gamma_inference = g;
                        format!("gamma {g}")
                    }
                };
                for &seed in seeds {
                    cells.push(Cell {
                        trace: trace.to_string(),
                        model,
                        drain,
                        seed,
                        params: params.clone(),
                        point: format!("due {lo}-{hi}, {label}, f {f}"),
                        power: PowerVariant::Fit,
                    });
                }
            }
        }
    }
    for power in GRID_POWER {
        for &seed in seeds {
            cells.push(Cell {
                trace: trace.to_string(),
                model,
                drain,
                seed,
                params: base.clone(),
                point: format!("defaults, {}", power.label()),
                power,
            });
        }
    }
    cells
}

/// The matrix's cells: every trace x model x drain x seed with `params`.
pub fn matrix_cells(
    traces: &[String],
    models: &[&'static GpuModel],
    drains: &[DrainScope],
    seeds: &[u64],
    params: &ModelParams,
) -> Vec<Cell> {
    let mut cells = Vec::new();
    for t in traces {
        for &m in models {
            for &d in drains {
                for &seed in seeds {
                    cells.push(Cell {
                        trace: t.clone(),
                        model: m,
                        drain: d,
                        seed,
                        params: params.clone(),
                        point: String::new(),
                        power: PowerVariant::Fit,
                    });
                }
            }
        }
    }
    cells
}

#[cfg(test)]
mod tests;
