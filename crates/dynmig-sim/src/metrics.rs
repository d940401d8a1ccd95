//! Metrics of a run: the figures a site reads per job class ([`ClassFigures`]: waits,
//! Feitelson's bounded slowdown, work served, slice utilisation; [`Repartitions`]) and the ET
//! objective with fixed references ([`Norm`]), the one ranking metric of the static searches
//! and the judgement. Definitions in docs/model.md ("Metrics").
//!
//! A run is judged on an evaluation window (docs/simulate.md, "Fair baselines"): energy per
//! job, tardiness, the late share and waits count only the jobs released at or after the
//! window start ([`crate::engine::SimConfig::window_start_s`]), and energy per job is the
//! energy from the window start to the makespan over those jobs. With a window start of 0
//! every job counts.

use crate::bounds::Bounds;
use crate::engine::{RunResult, SimConfig};
use crate::model::Job;
use crate::workload::Workload;
use dynmig_core::geometry::{classic_profiles, GpuModel};
use serde::{Deserialize, Serialize};

/// The threshold of the bounded slowdown, s: runs shorter than this count as this long
/// (D. G. Feitelson, "Metrics for parallel job scheduling and their convergence", JSSPP 2001,
/// LNCS 2221, uses 10 s).
pub const BSLD_THRESHOLD_S: f64 = 10.0;

/// Feitelson's bounded slowdown of a job that waited `wait_s` and ran `run_s`:
/// `max(1, (wait + run) / max(run, threshold))` (D. G. Feitelson, "Metrics for parallel job
/// scheduling and their convergence", JSSPP 2001). A job shorter than the threshold is not
/// charged a huge slowdown for a short wait.
pub fn bounded_slowdown(wait_s: f64, run_s: f64, threshold_s: f64) -> f64 {
    ((wait_s + run_s) / run_s.max(threshold_s)).max(1.0)
}

/// What a job asks for, as a site reads its queue: a slice (the profile it fits has at most 3
/// compute slices: 1g, 2g, 3g), one whole GPU (4g to 7g, or a whole-GPU job), or several GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobClass {
    /// A slice of 3g or smaller.
    Slice,
    /// One GPU: 4g to 7g.
    Gpu,
    /// Several GPUs.
    MultiGpu,
}

/// The classes in report order.
pub const CLASSES: [JobClass; 3] = [JobClass::Slice, JobClass::Gpu, JobClass::MultiGpu];

impl JobClass {
    /// The class of `job` on GPUs of `model`: several GPUs; else by the compute slices of the
    /// profile it asks for (`exact_slices`) or, when any instance with enough memory does,
    /// of its smallest fitting classic profile (fewest compute slices among those whose
    /// memory holds it); a job no profile holds counts as one GPU.
    pub fn of(job: &Job, model: &GpuModel) -> JobClass {
        if job.gpus > 1 {
            return JobClass::MultiGpu;
        }
        let slices = job.exact_slices.or_else(|| {
            classic_profiles(model)
                .iter()
                .filter(|p| p.memory_mib >= job.mem_mib)
                .map(|p| p.compute_slices)
                .min()
        });
        match slices {
            Some(c) if c <= 3 => JobClass::Slice,
            _ => JobClass::Gpu,
        }
    }

    /// The name in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            JobClass::Slice => "slice<=3g",
            JobClass::Gpu => "1 GPU",
            JobClass::MultiGpu => "multi-GPU",
        }
    }
}

/// The figures a site reads, for the judged jobs of one class (or all of them): waits,
/// bounded slowdown, work served and the compute slices it kept busy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassFigures {
    /// `slice<=3g`, `1 GPU`, `multi-GPU` ([`JobClass::as_str`]) or `all`.
    pub class: String,
    /// Judged jobs of the class.
    pub jobs: usize,
    /// Queue wait (start of the last attempt - release), median, s.
    pub wait_p50_s: f64,
    /// Queue wait, 95th percentile, s.
    pub wait_p95_s: f64,
    /// Queue wait, 99th percentile, s.
    pub wait_p99_s: f64,
    /// The longest queue wait, s.
    pub wait_max_s: f64,
    /// Mean bounded slowdown ([`bounded_slowdown`], threshold [`BSLD_THRESHOLD_S`]; run =
    /// the last attempt's run time on the instance it got).
    pub bsld_mean: f64,
    /// Bounded slowdown, 95th percentile.
    pub bsld_p95: f64,
    /// Work served: full-GPU hours (GPUs x run time on a full GPU) of the class's judged jobs,
    /// per day from the window start to the makespan.
    pub gpu_h_per_day: f64,
    /// Compute-slice seconds the class's judged jobs held (their last attempt) over the
    /// cluster's compute slices x the time from the window start to the makespan.
    pub slice_util: f64,
}

/// The cluster-wide figures of the judged window beside the per-class ones.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Repartitions {
    /// Repartitions (that changed an instance) ordered from the window start on, per node and
    /// per day from the window start to the makespan.
    pub per_node_day: f64,
    /// Drain waste per repartition: GPU-hours of compute slices held idle for repartitions
    /// ([`RunResult::drain_waste_gpu_s`]) over the repartitions, both from the window start
    /// (0 without repartitions).
    pub idle_gpu_h_per_repartition: f64,
}

/// The fixed references of ET: taken from the workload and the cluster alone, never from a
/// run, so that the static search, the judgement and the adaptive policy's search rank with
/// one function and one exchange rate between energy and tardiness (docs/model.md,
/// "Metrics").
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Norm {
    /// `e_ref`: the energy lower bound per job of the workload ([`Bounds::energy_per_job_j`]), J.
    pub e_ref_j: f64,
    /// `t_ref`: the mean run time on a full GPU of the judged jobs, s.
    pub t_ref_s: f64,
}

impl Norm {
    /// References not known (NaN), e.g. of results saved before they were recorded.
    pub fn unset() -> Norm {
        Norm {
            e_ref_j: f64::NAN,
            t_ref_s: f64::NAN,
        }
    }

    /// The references of `wl` judged from `window_start_s` on, with bounds `b` of `wl` on the
    /// cluster.
    pub fn of(wl: &Workload, b: &Bounds, window_start_s: f64) -> Norm {
        let judged: Vec<f64> = wl
            .jobs
            .iter()
            .filter(|j| j.release >= window_start_s)
            .map(|j| j.work)
            .collect();
        Norm {
            e_ref_j: b.energy_per_job_j.max(1e-9),
            t_ref_s: (judged.iter().sum::<f64>() / judged.len().max(1) as f64).max(1e-9),
        }
    }

    /// ET = (e / e_ref + a t / t_ref) / (1 + a), a = 1: `e` energy per judged job (J), `t`
    /// mean tardiness (s). The one ranking metric of the static searches and the judgement.
    pub fn et(&self, energy_per_job_j: f64, mean_tardiness_s: f64) -> f64 {
        let alpha = 1.0;
        (energy_per_job_j / self.e_ref_j + alpha * mean_tardiness_s / self.t_ref_s) / (1.0 + alpha)
    }

    /// The energy price the weights imply: the energy per job ET trades for one hour of mean
    /// tardiness (equal changes of ET: `Δe = Δt · e_ref / t_ref`), MJ per hour.
    pub fn mj_per_tardiness_hour(&self) -> f64 {
        self.e_ref_j / self.t_ref_s * 3600.0 / 1e6
    }
}

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
    /// Judged jobs that never started (their type was on no node until the run ended; see
    /// [`RunResult::never_started`]). Each counts as ending when the run ended, and its work
    /// on whole GPUs at full busy power is added to the energy per job.
    #[serde(default)]
    pub never_started: usize,
    /// Mean tardiness `max(0, completion - due)` of the jobs judged, s.
    pub mean_tardiness_s: f64,
    /// Share of the jobs judged that end after their due date.
    pub late_share: f64,
    /// ET = (e/e_ref + a t/t_ref) / (1 + a), a = 1, with the fixed references of [`Norm`];
    /// see [`normalise`].
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
    /// GPU-seconds held beyond need by completed single-GPU attempts (instance slices beyond
    /// the exact request's profile, [`crate::engine::RunResult::oversize_gpu_s`]).
    pub oversize_gpu_s: f64,
    /// Energy of failed attempts above idle, J (docs/model.md).
    pub wasted_j: f64,
    /// Throughput: jobs completed per hour of makespan.
    pub jobs_per_hour: f64,
    /// Throughput: job work (GPUs x run time on a full GPU) completed per hour of makespan,
    /// in full-GPU hours per hour.
    pub work_per_hour: f64,
    /// Repartitions per node and day from the window start ([`Repartitions::per_node_day`]).
    #[serde(default)]
    pub reparts_per_node_day: f64,
    /// Drain waste per repartition from the window start, GPU-hours
    /// ([`Repartitions::idle_gpu_h_per_repartition`]).
    #[serde(default)]
    pub idle_gpu_h_per_repartition: f64,
    /// ET's energy reference ([`Norm::e_ref_j`]), J.
    #[serde(default)]
    pub e_ref_j: f64,
    /// ET's tardiness reference ([`Norm::t_ref_s`]), s.
    #[serde(default)]
    pub t_ref_s: f64,
    /// The figures a site reads, for all judged jobs first, then per [`JobClass`] (classes
    /// without judged jobs left out). Not in the CSV's own columns (see
    /// `dynmig_lab::report::csv`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<ClassFigures>,
}

impl Metrics {
    /// The references ET was normalised with.
    pub fn norm(&self) -> Norm {
        Norm {
            e_ref_j: self.e_ref_j,
            t_ref_s: self.t_ref_s,
        }
    }

    /// The repartition figures.
    pub fn repartitions(&self) -> Repartitions {
        Repartitions {
            per_node_day: self.reparts_per_node_day,
            idle_gpu_h_per_repartition: self.idle_gpu_h_per_repartition,
        }
    }
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i]
}

/// The per-class figures of `rows` (several runs of one policy, e.g. seeds), each field the
/// mean over the rows that have the class (`jobs` rounded), in the order the classes first
/// appear; and the mean [`Repartitions`].
pub fn mean_site_figures(rows: &[&Metrics]) -> (Vec<ClassFigures>, Repartitions) {
    let mut names: Vec<&str> = Vec::new();
    for m in rows {
        for c in &m.classes {
            if !names.contains(&c.class.as_str()) {
                names.push(&c.class);
            }
        }
    }
    let classes = names
        .iter()
        .map(|name| {
            let v: Vec<&ClassFigures> = rows
                .iter()
                .filter_map(|m| m.classes.iter().find(|c| c.class == *name))
                .collect();
            let n = v.len().max(1) as f64;
            let mean = |f: &dyn Fn(&ClassFigures) -> f64| v.iter().map(|c| f(c)).sum::<f64>() / n;
            ClassFigures {
                class: name.to_string(),
                jobs: mean(&|c| c.jobs as f64).round() as usize,
                wait_p50_s: mean(&|c| c.wait_p50_s),
                wait_p95_s: mean(&|c| c.wait_p95_s),
                wait_p99_s: mean(&|c| c.wait_p99_s),
                wait_max_s: mean(&|c| c.wait_max_s),
                bsld_mean: mean(&|c| c.bsld_mean),
                bsld_p95: mean(&|c| c.bsld_p95),
                gpu_h_per_day: mean(&|c| c.gpu_h_per_day),
                slice_util: mean(&|c| c.slice_util),
            }
        })
        .collect();
    let n = rows.len().max(1) as f64;
    let rep = Repartitions {
        per_node_day: rows.iter().map(|m| m.reparts_per_node_day).sum::<f64>() / n,
        idle_gpu_h_per_repartition: rows.iter().map(|m| m.idle_gpu_h_per_repartition).sum::<f64>() / n,
    };
    (classes, rep)
}

/// Jobs of `wl` released at or after `window_start_s`.
pub fn judged_jobs(wl: &Workload, window_start_s: f64) -> usize {
    wl.jobs.iter().filter(|j| j.release >= window_start_s).count()
}

/// Metrics of `r`, a run of `wl` with `cfg`, judged on the jobs released at or after
/// `cfg.window_start_s` (ET fields are left at 0 until [`normalise`]). Throughput,
/// utilisation, makespan, reconfigurations and the energy bound cover the whole run; the
/// per-class figures and [`Repartitions`] the judged window.
pub fn metrics(wl: &Workload, r: &RunResult, b: &Bounds, detail: &str, wall_s: f64, cfg: &SimConfig) -> Metrics {
    let window_start_s = cfg.window_start_s;
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
    // A judged job that never started is charged its work on whole GPUs at full busy power
    // (the energy it would have cost; its tardiness already runs to the end of the run), so
    // leaving a type unserved never looks cheap.
    let mut never = 0usize;
    let mut never_j = 0.0;
    for &id in &r.never_started {
        let j = &wl.jobs[id as usize];
        if j.release >= window_start_s {
            never += 1;
            never_j += f64::from(j.gpus) * cfg.power.instance_w(cfg.model.compute_slices) * j.work;
        }
    }
    let epj = (window_energy + never_j) / n;
    let hours = (r.makespan_s / 3600.0).max(1e-9);
    let work_h: f64 = wl.jobs.iter().map(|j| f64::from(j.gpus) * j.work).sum::<f64>() / 3600.0;
    let (classes, repartitions) = site_figures(wl, r, cfg);

    Metrics {
        policy: r.policy.clone(),
        placement: r.placement.to_string(),
        detail: detail.to_string(),
        jobs: judged,
        window_start_s,
        energy_j: r.energy_j,
        window_energy_j: window_energy,
        energy_per_job_j: epj,
        never_started: never,
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
        oversize_gpu_s: r.oversize_gpu_s,
        wasted_j: r.wasted_j,
        jobs_per_hour: wl.jobs.len() as f64 / hours,
        work_per_hour: work_h / hours,
        reparts_per_node_day: repartitions.per_node_day,
        idle_gpu_h_per_repartition: repartitions.idle_gpu_h_per_repartition,
        e_ref_j: f64::NAN,
        t_ref_s: f64::NAN,
        classes,
    }
}

/// The figures of one class from its judged jobs' `(wait, run, full-GPU work, slice-seconds)`
/// over a window of `span_s` seconds on `capacity` compute slices.
fn class_figures(class: &str, mut jobs: Vec<(f64, f64, f64, f64)>, span_s: f64, capacity: f64) -> ClassFigures {
    let span_s = span_s.max(1e-9);
    let mut waits: Vec<f64> = jobs.iter().map(|x| x.0).collect();
    waits.sort_by(f64::total_cmp);
    let mut bsld: Vec<f64> = jobs
        .iter()
        .map(|x| bounded_slowdown(x.0, x.1, BSLD_THRESHOLD_S))
        .collect();
    bsld.sort_by(f64::total_cmp);
    let n = jobs.len().max(1) as f64;
    let work_s: f64 = jobs.iter().map(|x| x.2).sum();
    let slice_s: f64 = jobs.drain(..).map(|x| x.3).sum();
    ClassFigures {
        class: class.to_string(),
        jobs: waits.len(),
        wait_p50_s: quantile(&waits, 0.5),
        wait_p95_s: quantile(&waits, 0.95),
        wait_p99_s: quantile(&waits, 0.99),
        wait_max_s: waits.last().copied().unwrap_or(0.0),
        bsld_mean: bsld.iter().sum::<f64>() / n,
        bsld_p95: quantile(&bsld, 0.95),
        gpu_h_per_day: work_s / 3600.0 / (span_s / 86400.0),
        slice_util: slice_s / (capacity * span_s),
    }
}

/// The per-class figures (all judged jobs first, then each class with judged jobs) and the
/// repartition figures of run `r` of `wl` with `cfg`, over the window from
/// `cfg.window_start_s` to the makespan.
pub fn site_figures(wl: &Workload, r: &RunResult, cfg: &SimConfig) -> (Vec<ClassFigures>, Repartitions) {
    let from = cfg.window_start_s;
    let span_s = (r.makespan_s - from).max(0.0);
    let capacity = f64::from(r.capacity_slices).max(1.0);
    let mut per: Vec<Vec<(f64, f64, f64, f64)>> = vec![Vec::new(); CLASSES.len()];
    for (j, o) in wl.jobs.iter().zip(&r.jobs) {
        if j.release < from {
            continue;
        }
        let (start, end) = (o.start_ms as f64 / 1000.0, o.end_ms as f64 / 1000.0);
        let run = (end - start).max(0.0);
        let g = f64::from(j.gpus);
        let x = (
            (start - j.release).max(0.0),
            run,
            g * j.work,
            g * f64::from(o.slices) * run,
        );
        let c = JobClass::of(j, cfg.model);
        per[CLASSES.iter().position(|k| *k == c).expect("every class is listed")].push(x);
    }
    let all: Vec<_> = per.iter().flatten().copied().collect();
    let mut out = vec![class_figures("all", all, span_s, capacity)];
    for (c, jobs) in CLASSES.iter().zip(per) {
        if !jobs.is_empty() {
            out.push(class_figures(c.as_str(), jobs, span_s, capacity));
        }
    }
    let days = (span_s / 86400.0).max(1e-9);
    let reps = r.window_reconfigs as f64;
    let rep = Repartitions {
        per_node_day: reps / cfg.nodes.max(1) as f64 / days,
        idle_gpu_h_per_repartition: if reps > 0.0 {
            r.drain_waste_gpu_s / 3600.0 / reps
        } else {
            0.0
        },
    };
    (out, rep)
}

/// Fills in ET (with the fixed references `norm`, [`Norm::et`]) and its ratios to `none`,
/// `static` and `static-oracle` of the same placement (NaN where that row is absent).
pub fn normalise(rows: &mut [Metrics], norm: &Norm) {
    for r in rows.iter_mut() {
        r.et = norm.et(r.energy_per_job_j, r.mean_tardiness_s);
        r.e_ref_j = norm.e_ref_j;
        r.t_ref_s = norm.t_ref_s;
    }
    let placements: Vec<String> = rows.iter().map(|r| r.placement.clone()).collect();
    for pl in placements {
        let idx: Vec<usize> = (0..rows.len()).filter(|i| rows[*i].placement == pl).collect();
        let of = |name: &str| idx.iter().find(|i| rows[**i].policy == name).map(|i| rows[*i].et);
        let (none, stat, oracle) = (of("none"), of("static"), of("static-oracle"));
        for &i in &idx {
            let et = rows[i].et;
            rows[i].et_vs_none = none.map_or(f64::NAN, |x| et / x);
            rows[i].et_vs_static = stat.map_or(f64::NAN, |x| et / x);
            rows[i].et_vs_oracle = oracle.map_or(f64::NAN, |x| et / x);
        }
    }
}
