//! The ceilings (issue 26, item 5; `dynmig simulate --ceilings`): how much better than the
//! fair static each design could do on a workload, judged with the one ET normaliser and
//! the figures a site reads.
//!
//! - **node drain**: the best policy evaluated with whole-node drains (what dynmig does);
//! - **per-GPU drain**: the best policy evaluated with only the changing GPUs drained (a
//!   Slurm that could change one GPU's GRES in place);
//! - **per-allocation**: [`crate::per_allocation`], each job's instance created at its start;
//! - **clairvoyant**: [`dynmig_sim::policies::clairvoyant`], node drains chosen knowing every
//!   future job: what foresight adds to the planners (greedy, not an optimum);
//! - **floor** ([`floor`]): the least ET any schedule of the judged jobs could reach, online
//!   or offline, with any layouts and no drains: the bound every design above stays above.

use crate::evaluate::{evaluate, EvalOptions, Evaluation, PolicyName};
use crate::per_allocation::{simulate_per_allocation, InstanceCosts};
use crate::report::p99_hours;
use anyhow::Result;
use dynmig_sim::bounds::least_per_profile;
use dynmig_sim::engine::{DrainScope, SimConfig};
use dynmig_sim::metrics::{metrics, normalise, Metrics, Norm};
use dynmig_sim::workload::Workload;
use std::fmt::Write;
use std::time::Instant;

/// One ceiling: its name, its best row, and its headroom over the fair static.
#[derive(Debug, Clone)]
pub struct Ceiling {
    /// What it models.
    pub name: String,
    /// The row it reached (the best policy's, by ET).
    pub row: Metrics,
    /// `1 - ET / ET of the fair static (node drain)`: the share of the fair static's ET the
    /// design could remove (negative: worse).
    pub headroom: f64,
}

/// The floor of ET on the judged jobs: no schedule, online or offline, does better. Its
/// energy and tardiness are those of the relaxed schedule that reaches it: only their ET is
/// a bound (a design may spend less energy and be later, or the reverse).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Floor {
    /// Energy per judged job, J: the idle power of every GPU from the window start until the
    /// last judged job could end on whole GPUs, plus each judged job's least busy energy on
    /// the profile chosen for it.
    pub energy_per_job_j: f64,
    /// Mean tardiness of the judged jobs, s: each starts at its release on the profile chosen
    /// for it.
    pub mean_tardiness_s: f64,
    /// [`Norm::et`] of the two.
    pub et: f64,
}

/// The ET floor of the jobs of `wl` released from `window_start_s` on, on `cfg`'s cluster,
/// with the references `norm` (docs/model.md, "Lower bounds", "ET floor").
///
/// A relaxation of every design: capacity is dropped (each job starts at its release) and
/// each job gets the fitting profile that minimises its own share of ET. ET is affine in the
/// energy per job and the mean tardiness and both are sums over jobs, so these choices
/// together minimise the relaxed ET; every real schedule pays at least the idle energy, each
/// job's least busy energy on the profile it ran on ([`dynmig_sim::bounds`]) and a tardiness of at
/// least `release + run time - due date`. `None` when no job is judged or a judged job
/// fits no profile.
pub fn floor(wl: &Workload, cfg: &SimConfig, norm: &Norm, window_start_s: f64) -> Option<Floor> {
    let gpus = (cfg.nodes * cfg.gpus_per_node) as f64;
    let full = cfg.model.compute_slices;
    let (mut n, mut busy_j, mut tard_s, mut end_s) = (0usize, 0.0, 0.0, window_start_s);
    for j in wl.jobs.iter().filter(|j| j.release >= window_start_s) {
        let tardiness = |t: f64| (j.release + t - j.due).max(0.0);
        let (e, t) = least_per_profile(j, cfg.model, &cfg.power)
            .into_iter()
            .map(|(e, t)| (e, tardiness(t)))
            .min_by(|a, b| norm.et(a.0, a.1).total_cmp(&norm.et(b.0, b.1)))?;
        n += 1;
        busy_j += e;
        tard_s += t;
        end_s = end_s.max(j.release + j.time_on(full, full));
    }
    if n == 0 {
        return None;
    }
    let energy_per_job_j = (cfg.power.idle_w * gpus * (end_s - window_start_s) + busy_j) / n as f64;
    let mean_tardiness_s = tard_s / n as f64;
    Some(Floor {
        energy_per_job_j,
        mean_tardiness_s,
        et: norm.et(energy_per_job_j, mean_tardiness_s),
    })
}

/// The ceilings of `wl` on `cfg`'s cluster, the fair static of a node-drain evaluation as
/// the reference, the ET [`floor`] of the judged jobs, and the node-drain evaluation.
///
/// # Errors
/// An evaluation fails ([`evaluate`]) or the per-allocation run does.
pub fn ceilings(
    wl: &Workload,
    cfg: &SimConfig,
    opts: &EvalOptions,
) -> Result<(Vec<Ceiling>, Option<Floor>, Evaluation)> {
    let mut node_cfg = cfg.clone();
    node_cfg.drain = DrainScope::Node;
    let mut node_opts = opts.clone();
    if !node_opts.policies.contains(&PolicyName::Clairvoyant) {
        node_opts.policies.push(PolicyName::Clairvoyant);
    }
    let node = evaluate(wl, &node_cfg, &node_opts, &|_, _| {})?;
    let mut opts = opts.clone();
    opts.policies.retain(|p| *p != PolicyName::Clairvoyant);
    let opts = &opts;
    let mut gpu_cfg = cfg.clone();
    gpu_cfg.drain = DrainScope::Gpu;
    let gpu = evaluate(wl, &gpu_cfg, opts, &|_, _| {})?;
    let fair = node
        .rows
        .iter()
        .find(|r| r.policy == "static")
        .map(|r| r.et)
        .unwrap_or(f64::NAN);
    let norm = node.rows.first().map(Metrics::norm);
    // Oracles see the judged jobs, the clairvoyant planner every job: they are no design a
    // site can run.
    let best = |ev: &Evaluation| {
        ev.rows
            .iter()
            .filter(|r| !r.policy.ends_with("oracle") && r.policy != "clairvoyant")
            .min_by(|a, b| a.et.total_cmp(&b.et))
            .cloned()
    };
    let mut out = Vec::new();
    if let Some(r) = best(&node) {
        out.push(Ceiling {
            name: format!("node drain (best: {})", r.policy),
            headroom: 1.0 - r.et / fair,
            row: r,
        });
    }
    if let Some(r) = node.rows.iter().find(|r| r.policy == "clairvoyant") {
        out.push(Ceiling {
            name: "clairvoyant planner (node drain)".to_string(),
            headroom: 1.0 - r.et / fair,
            row: r.clone(),
        });
    }
    if let Some(r) = best(&gpu) {
        out.push(Ceiling {
            name: format!("per-GPU drain (best: {})", r.policy),
            headroom: 1.0 - r.et / fair,
            row: r,
        });
    }
    let mut pa_cfg = cfg.clone();
    pa_cfg.window_start_s = node.windows.eval_from_s();
    let t0 = Instant::now();
    let run = simulate_per_allocation(wl, &pa_cfg, InstanceCosts::default())?;
    let mut row = metrics(
        wl,
        &run,
        &node.bounds,
        "instances created per job (0.16 s) and destroyed at its end (0.11 s)",
        t0.elapsed().as_secs_f64(),
        &pa_cfg,
    );
    if let Some(n) = norm {
        normalise(std::slice::from_mut(&mut row), &n);
    }
    out.push(Ceiling {
        name: "per-allocation".to_string(),
        headroom: 1.0 - row.et / fair,
        row,
    });
    let floor = floor(wl, cfg, &node.norm, node.windows.eval_from_s());
    Ok((out, floor, node))
}

/// The ceilings as a markdown table: the figures a site reads for all judged jobs, then ET
/// and the headroom over the fair static; the floor last (its energy, tardiness and ET only).
pub fn markdown(cs: &[Ceiling], floor: Option<&Floor>, ev: &Evaluation) -> String {
    let mut s = String::new();
    let fair = ev.rows.iter().find(|r| r.policy == "static");
    let _ = writeln!(
        s,
        "| design | wait p50 h | wait p95 h | wait p99 h | multi-GPU wait p99 h | bsld mean | bsld p95 | GPU-h/day | slice util % | E/job MJ | tardiness s | ET | headroom over fair static |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let line = |s: &mut String, name: &str, r: &Metrics, headroom: f64| {
        let all = r.classes.iter().find(|c| c.class == "all");
        let multi = r.classes.iter().find(|c| c.class == "multi-GPU");
        let h = |x: f64| format!("{:.2}", x / 3600.0);
        let _ = writeln!(
            s,
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {} | {:.3} | {:.0} | {:.3} | {:.1}% |",
            all.map_or("-".into(), |c| h(c.wait_p50_s)),
            all.map_or("-".into(), |c| h(c.wait_p95_s)),
            all.map_or("-".into(), |c| p99_hours(c.wait_p99_s)),
            multi.map_or("-".into(), |c| p99_hours(c.wait_p99_s)),
            all.map_or("-".into(), |c| format!("{:.1}", c.bsld_mean)),
            all.map_or("-".into(), |c| format!("{:.1}", c.bsld_p95)),
            all.map_or("-".into(), |c| format!("{:.0}", c.gpu_h_per_day)),
            all.map_or("-".into(), |c| format!("{:.1}", c.slice_util * 100.0)),
            r.energy_per_job_j / 1e6,
            r.mean_tardiness_s,
            r.et,
            headroom * 100.0,
        );
    };
    if let Some(f) = fair {
        line(&mut s, "fair static (reference)", f, 0.0);
    }
    for c in cs {
        line(&mut s, &c.name, &c.row, c.headroom);
    }
    if let Some(f) = floor {
        let headroom = fair.map_or(f64::NAN, |r| 1.0 - f.et / r.et);
        let _ = writeln!(
            s,
            "| floor (no schedule has a lower ET; E and tardiness: the relaxation's) | - | - | - | - | - | - | - | - | {:.3} | {:.0} | {:.3} | {:.1}% |",
            f.energy_per_job_j / 1e6,
            f.mean_tardiness_s,
            f.et,
            headroom * 100.0,
        );
    }
    s
}
