//! `dynmig simulate --compare-requests`: the same workload and policies under the three
//! request modes ([`dynmig_sim::requests`]), with throughput and energy per job against whole-GPU
//! requests, beside the published figures of arXiv 2508.18556.

use crate::evaluate::{evaluate, EvalOptions};
use anyhow::Result;
use dynmig_core::types::EstimateSource;
use dynmig_sim::engine::SimConfig;
use dynmig_sim::metrics::Metrics;
use dynmig_sim::requests::{RequestMode, ALL_REQUEST_MODES};
use dynmig_sim::workload::Workload;
use serde::{Deserialize, Serialize};

/// Throughput gain over whole-GPU requests that arXiv 2508.18556 (Georgia Tech, "Managing
/// MIG for throughput and energy") reports for ML workloads on an A100 with dynamic memory
/// estimation, out-of-memory restart and early restart (arXiv 2508.18556).
pub const PUBLISHED_THROUGHPUT_GAIN: f64 = 1.59;
/// Energy-efficiency gain (jobs per joule) of the same paper and workloads.
pub const PUBLISHED_ENERGY_GAIN: f64 = 1.12;

/// One policy under one request mode.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CompareRow {
    /// Request mode.
    pub mode: RequestMode,
    /// The run's metrics (policy, energy, waits, restarts, throughput).
    pub metrics: Metrics,
    /// Throughput (jobs per hour of makespan) over the same policy's with whole-GPU requests.
    pub throughput_vs_whole: f64,
    /// Energy efficiency (jobs per joule) over the same policy's with whole-GPU requests.
    pub energy_gain_vs_whole: f64,
}

/// The comparison.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Comparison {
    /// What was run.
    pub workload: String,
    /// Rows, by policy, then mode (whole, estimated, exact).
    pub rows: Vec<CompareRow>,
    /// The estimate sources of the estimated mode: (source, share, median |error|, worst
    /// |error|, share of underestimates); errors `NaN` for sources without relative errors.
    pub sources: Vec<(String, f64, f64, f64, f64)>,
}

/// Runs `opts.policies` (for each, `evaluate` also runs `none` as its reference, not shown)
/// under each request mode on `wl`; everything else as in `cfg` (its `requests` settings
/// other than the mode are kept).
///
/// # Errors
/// A run failed (see [`dynmig_sim::engine::simulate`]).
pub fn compare_requests(
    wl: &Workload,
    cfg: &SimConfig,
    opts: &EvalOptions,
    progress: &dyn Fn(&str, u64),
) -> Result<Comparison> {
    let mut by_mode = Vec::new();
    for mode in ALL_REQUEST_MODES {
        let mut c = cfg.clone();
        c.requests.mode = mode;
        let ev = evaluate(wl, &c, opts, &|l, d| progress(&format!("{mode}/{l}"), d))?;
        by_mode.push((mode, ev.rows));
    }
    let mut rows = Vec::new();
    let whole = &by_mode[0].1;
    for w in whole {
        for (mode, ms) in &by_mode {
            // Rows matched by name: a row omitted in one mode (every candidate skipped)
            // leaves the others in place.
            let Some(m) = ms
                .iter()
                .find(|m| m.policy == w.policy && m.placement == w.placement)
                .cloned()
            else {
                continue;
            };
            rows.push(CompareRow {
                mode: *mode,
                throughput_vs_whole: m.jobs_per_hour / w.jobs_per_hour,
                energy_gain_vs_whole: w.energy_per_job_j / m.energy_per_job_j,
                metrics: m,
            });
        }
    }
    let r = &cfg.requests;
    let total: f64 = r.shares.weights().iter().map(|x| x.1).sum();
    let sources = r
        .shares
        .weights()
        .iter()
        .map(|(s, w)| {
            let sum = r.errors.summary(*s);
            let (med, worst, under) = match (s, sum) {
                (_, Some(x)) => (x.median_abs, x.worst_abs, x.under_rate),
                (EstimateSource::WholeGpu, None) => (f64::NAN, f64::NAN, 0.0),
                _ => (f64::NAN, f64::NAN, f64::NAN),
            };
            (s.to_string(), w / total, med, worst, under)
        })
        .collect();
    Ok(Comparison {
        workload: wl.description.clone(),
        rows,
        sources,
    })
}

const HEAD: [&str; 16] = [
    "policy",
    "requests",
    "jobs/h",
    "work GPU-h/h",
    "makespan h",
    "energy/job MJ",
    "wait p50 s",
    "tardiness s",
    "OOM restarts",
    "restarted %",
    "wasted GPU-h",
    "wasted MJ",
    "oversize GPU-h",
    "util %",
    "throughput x whole",
    "energy eff. x whole",
];

fn cells(r: &CompareRow) -> Vec<String> {
    let m = &r.metrics;
    vec![
        m.policy.clone(),
        r.mode.to_string(),
        format!("{:.1}", m.jobs_per_hour),
        format!("{:.2}", m.work_per_hour),
        format!("{:.1}", m.makespan_s / 3600.0),
        format!("{:.3}", m.energy_per_job_j / 1e6),
        format!("{:.0}", m.wait_p50_s),
        format!("{:.0}", m.mean_tardiness_s),
        m.oom_restarts.to_string(),
        format!("{:.2}", 100.0 * m.restarted_share),
        format!("{:.1}", m.wasted_gpu_s / 3600.0),
        format!("{:.2}", m.wasted_j / 1e6),
        format!("{:.1}", m.oversize_gpu_s / 3600.0),
        format!("{:.1}", 100.0 * m.utilisation),
        format!("{:.3}x", r.throughput_vs_whole),
        format!("{:.3}x", r.energy_gain_vs_whole),
    ]
}

fn footer(c: &Comparison) -> String {
    let mut s = format!(
        "published (arXiv 2508.18556, ML workloads, A100): {PUBLISHED_THROUGHPUT_GAIN:.2}x throughput, \
         {PUBLISHED_ENERGY_GAIN:.2}x energy efficiency over whole-GPU requests\n\
         estimated requests, sources (share, median |error|, worst |error|, underestimates):"
    );
    for (name, share, med, worst, under) in &c.sources {
        let pct = |x: f64| {
            if x.is_nan() {
                "-".to_string()
            } else {
                format!("{:.1}%", 100.0 * x)
            }
        };
        s.push_str(&format!(
            " {name} {:.0}% ({}, {}, {});",
            100.0 * share,
            pct(*med),
            pct(*worst),
            pct(*under)
        ));
    }
    s.pop();
    s.push('\n');
    for r in &c.rows {
        s.push_str(&format!("  {} / {}: {}\n", r.metrics.policy, r.mode, r.metrics.detail));
    }
    s
}

/// Aligned text for a terminal.
pub fn terminal(c: &Comparison) -> String {
    let rows: Vec<Vec<String>> = c.rows.iter().map(cells).collect();
    let mut s = format!("{}\n", c.workload);
    s.push_str(&crate::report::aligned(&HEAD, &rows));
    s.push_str(&footer(c));
    s
}

/// Markdown table.
pub fn markdown(c: &Comparison) -> String {
    let mut s = format!("| {} |\n|{}\n", HEAD.join(" | "), "---|".repeat(HEAD.len()));
    for r in &c.rows {
        s.push_str(&format!("| {} |\n", cells(r).join(" | ")));
    }
    s.push('\n');
    s.push_str(&footer(c));
    s
}

/// JSON.
///
/// # Errors
/// Serialisation failed.
pub fn json(c: &Comparison) -> Result<String> {
    Ok(serde_json::to_string_pretty(c)?)
}
