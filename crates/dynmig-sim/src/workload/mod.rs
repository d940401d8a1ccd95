//! Workloads: the real Alibaba trace ([`trace`]) and a SMART-MIG-like synthetic generator
//! ([`synthetic`]), both turned into [`Job`]s; and the load measure used to size a cluster.

pub mod alibaba;
pub mod families;
pub mod synthetic;
pub mod trace;

use crate::model::{Job, ModelParams};
use alibaba::Pod;
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use synthetic::{synthetic_workload, SyntheticParams};
use trace::{trace_workload, TraceParams};

/// Where a workload comes from.
#[derive(Debug, Clone, Copy)]
pub enum Source<'p> {
    /// Pods of an Alibaba pod list ([`trace`]): the last `days` days (default 30).
    Trace(&'p [Pod]),
    /// The SMART-MIG-like generator ([`synthetic`]): `days` days (default 7), its 100 jobs/h
    /// scaled by the load; with a family ([`families::Family`]), its mix moves.
    Synthetic(Option<families::Family>),
}

/// How heavy a workload is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Load {
    /// This factor (trace copies; synthetic: jobs per hour x factor).
    Factor(f64),
    /// The factor at which the whole-GPU demand of the day's busiest hour equals `gpus`
    /// (measured on the workload at factor 1): [`Load::Level`] 1 (kept as it was).
    Auto {
        /// GPUs of the cluster.
        gpus: usize,
    },
    /// A load a site runs at: the factor at which the whole-GPU demand of the day's busiest
    /// hour ([`Workload::peak_gpu_demand`]: GPUs x run time on a full GPU of the jobs, each
    /// from its release, per hour of the day averaged over the days) is `level` x `gpus`,
    /// the work a cluster of `gpus` GPUs sustains in that hour (measured on the workload at
    /// factor 1, the factor scaling the demand linearly; trace copies are jittered, so the
    /// level is met within a few percent, see docs/simulate.md). Level 1 is `auto`.
    Level {
        /// GPUs of the cluster.
        gpus: usize,
        /// Share of the busiest hour's sustainable throughput, e.g. 0.6, 0.8, 0.95.
        level: f64,
    },
}

/// Builds a workload from `source`, `days` (`None`: 30 for a trace, 7 synthetic), `load` and
/// `seed`; returns it and the load factor used.
///
/// # Errors
/// Parameters out of range, no job left, or no GPU demand (auto load).
pub fn build_workload(
    source: Source<'_>,
    days: Option<f64>,
    load: Load,
    seed: u64,
    m: &ModelParams,
) -> Result<(Workload, f64)> {
    let make = |factor: f64| match source {
        Source::Synthetic(family) => {
            let p = SyntheticParams {
                days: days.unwrap_or(7.0),
                jobs_per_hour: SyntheticParams::default().jobs_per_hour * factor,
                seed,
                family,
                ..Default::default()
            };
            synthetic_workload(&p, m)
        }
        Source::Trace(pods) => {
            let p = TraceParams {
                days: days.unwrap_or(30.0),
                load: factor,
                seed,
                ..Default::default()
            };
            trace_workload(pods, &p, m)
        }
    };
    let factor = match load {
        Load::Factor(f) => f,
        Load::Auto { gpus } | Load::Level { gpus, .. } => {
            let level = match load {
                Load::Level { level, .. } => level,
                _ => 1.0,
            };
            let peak = make(1.0)?.peak_gpu_demand();
            if peak <= 0.0 {
                bail!("the workload has no GPU demand");
            }
            level * gpus as f64 / peak
        }
    };
    Ok((make(factor)?, factor))
}

/// Jobs sorted by release time, with ids equal to their index.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Workload {
    /// The jobs.
    pub jobs: Vec<Job>,
    /// What it is, e.g. `alibaba openb, last 30 days, load x10.0`.
    pub description: String,
}

impl Workload {
    /// Sorts by release and renumbers.
    pub fn new(mut jobs: Vec<Job>, description: String) -> Self {
        jobs.sort_by(|a, b| a.release.total_cmp(&b.release).then(a.id.cmp(&b.id)));
        for (i, j) in jobs.iter_mut().enumerate() {
            j.id = i as u32;
        }
        Self { jobs, description }
    }

    /// Whole-GPU concurrency per hour of the day: the mean number of GPUs busy in each hour if
    /// every job started at its release on whole GPUs (`gpus` x `work`), averaged over the days
    /// the workload spans. Its maximum is the offered load at the day's peak.
    pub fn hourly_gpu_demand(&self) -> [f64; 24] {
        let mut h = [0.0f64; 24];
        let mut end = 0.0f64;
        for j in &self.jobs {
            let (s, e) = (j.release, j.release + j.work);
            end = end.max(j.release);
            let mut t = s;
            while t < e {
                let next = ((t / 3600.0).floor() + 1.0) * 3600.0;
                let stop = next.min(e);
                h[((t / 3600.0) as usize) % 24] += (stop - t) * f64::from(j.gpus);
                t = stop;
            }
        }
        let days = (end / 86400.0).ceil().max(1.0);
        h.map(|x| x / (3600.0 * days))
    }

    /// The same jobs all released at time 0, each due as long after 0 as it was after its
    /// release: a batch to be worked off, as in throughput experiments that time a fixed set
    /// of jobs (arXiv 2508.18556).
    pub fn all_at_once(&self) -> Workload {
        let jobs = self
            .jobs
            .iter()
            .map(|j| Job {
                release: 0.0,
                due: j.due - j.release,
                ..j.clone()
            })
            .collect();
        Workload::new(jobs, format!("{}, all released at 0", self.description))
    }

    /// The peak of [`Workload::hourly_gpu_demand`], in GPUs.
    pub fn peak_gpu_demand(&self) -> f64 {
        self.hourly_gpu_demand().into_iter().fold(0.0, f64::max)
    }
}
