//! Metrics of a run and the ET objective. Definitions in docs/model.md ("Metrics").
//!
//! A run is judged on an evaluation window (docs/simulate.md, "Fair baselines"): energy per
//! job, tardiness, the late share and waits count only the jobs released at or after the
//! window start ([`crate::engine::SimConfig::window_start_s`]), and energy per job is the
//! energy from the window start to the makespan over those jobs. With a window start of 0
//! every job counts.

use crate::bounds::Bounds;
use crate::engine::RunResult;
use crate::workload::Workload;
use serde::{Deserialize, Serialize};

/// One row of the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// Policy.
    pub policy: String,
    /// Placement rule.
    pub placement: String,
    /// What the policy ran with (e.g. the static layout chosen).
    pub detail: String,
    /// Jobs judged: those released in the evaluation window.
    pub jobs: usize,
    /// Start of the evaluation window, s (0: the whole run).
    #[serde(default)]
    pub window_start_s: f64,
    /// Energy of every GPU over the run, J.
    pub energy_j: f64,
    /// Energy of every GPU from the window start to the makespan, J.
    #[serde(default)]
    pub window_energy_j: f64,
    /// Mean energy per job judged: window energy / jobs released in the window, J.
    pub energy_per_job_j: f64,
    /// Mean tardiness `max(0, completion - due)` of the jobs judged, s.
    pub mean_tardiness_s: f64,
    /// Share of the jobs judged that end after their due date.
    pub late_share: f64,
    /// ET = (e/e_ref + a t/t_ref) / (1 + a), a = 1; see [`normalise`].
    pub et: f64,
    /// ET over the `none` policy's.
    pub et_vs_none: f64,
    /// ET over the (fair) `static` policy's.
    pub et_vs_static: f64,
    /// ET over the `static-oracle` policy's (the static layout searched on the judged jobs).
    #[serde(default)]
    pub et_vs_oracle: f64,
    /// Last completion, s.
    pub makespan_s: f64,
    /// Busy compute-slice seconds over capacity x makespan.
    pub utilisation: f64,
    /// Queue wait (start - release) of the jobs judged, median, s.
    pub wait_p50_s: f64,
    /// Queue wait of the jobs judged, 99th percentile, s.
    pub wait_p99_s: f64,
    /// Repartitions that changed an instance (whole run).
    pub reconfigs: u64,
    /// Drain waste from the window start: GPU-seconds of compute slices held idle for a
    /// repartition ([`RunResult::drain_waste_gpu_s`]).
    #[serde(default)]
    pub drain_waste_gpu_s: f64,
    /// GPU-hours, from the window start, of GPUs that ran no job ([`RunResult::idle_gpu_s`]):
    /// what could be powered down or lent to whole-GPU work.
    pub idle_gpu_h: f64,
    /// Energy per judged job if those idle GPUs had been powered off (their idle power not
    /// drawn; waking them is not modelled), J.
    pub energy_per_job_off_j: f64,
    /// GPU-instance creates and destroys.
    pub instance_changes: u64,
    /// Energy lower bound per job, J.
    pub energy_lb_per_job_j: f64,
    /// Energy over its lower bound.
    pub energy_over_lb: f64,
    /// Mean tardiness lower bound, s.
    pub tardiness_lb_s: f64,
    /// Events processed.
    pub events: u64,
    /// Wall time of the run, s.
    pub wall_s: f64,
    /// Out-of-memory restarts (failed attempts).
    pub oom_restarts: u64,
    /// Share of jobs restarted at least once.
    pub restarted_share: f64,
    /// GPU-seconds of failed attempts (compute slices / the GPU's slices x seconds).
    pub wasted_gpu_s: f64,
    /// Energy of failed attempts above idle, J (docs/model.md).
    pub wasted_j: f64,
    /// Throughput: jobs completed per hour of makespan.
    pub jobs_per_hour: f64,
    /// Throughput: job work (GPUs x run time on a full GPU) completed per hour of makespan,
    /// in full-GPU hours per hour.
    pub work_per_hour: f64,
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i]
}

/// Jobs of `wl` released at or after `window_start_s`.
pub fn judged_jobs(wl: &Workload, window_start_s: f64) -> usize {
    wl.jobs.iter().filter(|j| j.release >= window_start_s).count()
}

/// Metrics of `r`, judged on the jobs released at or after `window_start_s` (the
/// [`crate::engine::SimConfig::window_start_s`] `r` ran with; ET fields are left at 0 until
/// [`normalise`]). Throughput, utilisation, makespan, reconfigurations and the energy bound
/// cover the whole run.
pub fn metrics(wl: &Workload, r: &RunResult, b: &Bounds, detail: &str, wall_s: f64, window_start_s: f64) -> Metrics {
    let judged = judged_jobs(wl, window_start_s);
    let n = judged.max(1) as f64;
    let mut tard = 0.0;
    let mut late = 0usize;
    let mut waits = Vec::with_capacity(judged);
    for (j, o) in wl.jobs.iter().zip(&r.jobs) {
        if j.release < window_start_s {
            continue;
        }
        let end = o.end_ms as f64 / 1000.0;
        let t = (end - j.due).max(0.0);
        if t > 1e-3 {
            late += 1;
        }
        tard += t;
        waits.push((o.start_ms as f64 / 1000.0 - j.release).max(0.0));
    }
    waits.sort_by(f64::total_cmp);
    // A run without a window (start 0) has the whole energy as its window energy.
    let window_energy = if window_start_s > 0.0 {
        r.window_energy_j
    } else {
        r.energy_j
    };
    let epj = window_energy / n;
    let hours = (r.makespan_s / 3600.0).max(1e-9);
    let work_h: f64 = wl.jobs.iter().map(|j| f64::from(j.gpus) * j.work).sum::<f64>() / 3600.0;

    Metrics {
        policy: r.policy.clone(),
        placement: r.placement.to_string(),
        detail: detail.to_string(),
        jobs: judged,
        window_start_s,
        energy_j: r.energy_j,
        window_energy_j: window_energy,
        energy_per_job_j: epj,
        mean_tardiness_s: tard / n,
        late_share: late as f64 / n,
        et: 0.0,
        et_vs_none: 0.0,
        et_vs_static: 0.0,
        et_vs_oracle: 0.0,
        makespan_s: r.makespan_s,
        utilisation: if r.makespan_s > 0.0 {
            r.busy_slice_s / (f64::from(r.capacity_slices) * r.makespan_s)
        } else {
            0.0
        },
        wait_p50_s: quantile(&waits, 0.5),
        wait_p99_s: quantile(&waits, 0.99),
        reconfigs: r.reconfigs,
        drain_waste_gpu_s: r.drain_waste_gpu_s,
        idle_gpu_h: r.idle_gpu_s / 3600.0,
        energy_per_job_off_j: (window_energy - r.idle_w * r.idle_gpu_s).max(0.0) / n,
        instance_changes: r.instance_changes,
        energy_lb_per_job_j: b.energy_per_job_j,
        energy_over_lb: r.energy_j / b.energy_j - 1.0,
        tardiness_lb_s: b.mean_tardiness_s,
        events: r.events,
        wall_s,
        oom_restarts: r.oom_restarts,
        restarted_share: r.restarted_jobs as f64 / wl.jobs.len().max(1) as f64,
        wasted_gpu_s: r.wasted_gpu_s,
        wasted_j: r.wasted_j,
        jobs_per_hour: wl.jobs.len() as f64 / hours,
        work_per_hour: work_h / hours,
    }
}

/// Fills in ET and its ratios (to `none`, `static` and `static-oracle` of the same
/// placement; NaN where that row is absent). Energy and tardiness are normalised by the reference row's
/// (the `none` row with the same placement, else the first row): `e = energy per job /
/// e_ref`, `t = mean tardiness / t_ref`, with `t_ref` the larger of the reference's mean
/// tardiness and the mean run time of a job on a full GPU (`mean_work_s`): a reference that is
/// almost never late would otherwise blow every other row's tardiness term up (a nearly idle
/// cluster). ET = (e + a t) / (1 + a), a = 1, so the reference's ET is 1 when it is late by
/// more than a mean run time.
pub fn normalise(rows: &mut [Metrics], mean_work_s: f64) {
    let alpha = 1.0;
    let placements: Vec<String> = rows.iter().map(|r| r.placement.clone()).collect();
    for pl in placements {
        let idx: Vec<usize> = (0..rows.len()).filter(|i| rows[*i].placement == pl).collect();
        let Some(&first) = idx.first() else { continue };
        let rf = idx.iter().copied().find(|i| rows[*i].policy == "none").unwrap_or(first);
        let e_ref = rows[rf].energy_per_job_j.max(1e-9);
        let t_ref = rows[rf].mean_tardiness_s.max(mean_work_s).max(1e-9);
        for &i in &idx {
            let r = &mut rows[i];
            r.et = (r.energy_per_job_j / e_ref + alpha * r.mean_tardiness_s / t_ref) / (1.0 + alpha);
        }
        let none = idx.iter().find(|i| rows[**i].policy == "none").map(|i| rows[*i].et);
        let of = |name: &str| idx.iter().find(|i| rows[**i].policy == name).map(|i| rows[*i].et);
        let (stat, oracle) = (of("static"), of("static-oracle"));
        for &i in &idx {
            let et = rows[i].et;
            rows[i].et_vs_none = none.map_or(f64::NAN, |x| et / x);
            rows[i].et_vs_static = stat.map_or(f64::NAN, |x| et / x);
            rows[i].et_vs_oracle = oracle.map_or(f64::NAN, |x| et / x);
        }
    }
}
