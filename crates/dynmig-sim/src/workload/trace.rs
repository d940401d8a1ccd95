//! The real trace as a workload: the last `days` days of GPU pods of the Alibaba trace, with
//! a load-scaling factor. The mapping is documented in docs/model.md ("Trace workload").

use super::alibaba::Pod;
use super::Workload;
use crate::model::{Job, JobKind, ModelParams};
use anyhow::{bail, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// How the trace is cut and scaled.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceParams {
    /// Days at the end of the trace to keep (30: 7,483 of its 8,152 pods were created then).
    pub days: f64,
    /// Load factor: each pod appears `floor(load)` times, plus once more with probability
    /// `load - floor(load)`; copies after the first are released `U(-jitter, +jitter)` from
    /// the original (not before 0), so the day/night cycle is kept.
    pub load: f64,
    /// Release jitter of the copies, s (1800).
    pub jitter_s: f64,
    /// Seed of the copies' draws and of the due dates.
    pub seed: u64,
}

impl Default for TraceParams {
    fn default() -> Self {
        Self {
            days: 30.0,
            load: 1.0,
            jitter_s: 1800.0,
            seed: 1,
        }
    }
}

/// Turns trace pods into jobs.
///
/// - Kept: pods with at least one GPU that ran (scheduled and deleted), created in the last
///   `days` days before the latest creation in the trace, the window starting at the trace
///   midnight before. Release = creation time, from the start of that window.
/// - Duration in the trace `d = deletion - scheduled`, clamped to `[min_run_s, max_run_s]`.
/// - Single-GPU pods with a share `s = gpu_milli / 1000 < 1` are inference-like, others
///   training-like. The pod ran `d` on `s` of a GPU; with the sublinear model
///   (`time = work x (1/s)^gamma`) its time on a full GPU is `work = d x s^gamma`.
///   Multi-GPU pods: `work = d` on each of their GPUs.
/// - Memory: `s x trace_gpu_memory_mib` per GPU.
/// - Due date: `release + U(due_lo, due_hi) x work`.
///
/// # Errors
/// No pod is left, or the parameters are out of range.
pub fn trace_workload(pods: &[Pod], p: &TraceParams, m: &ModelParams) -> Result<Workload> {
    if !(p.load > 0.0 && p.load <= 1000.0) {
        bail!("load factor {} is out of range; allowed: > 0 and <= 1000", p.load);
    }
    if p.days.is_nan() || p.days <= 0.0 {
        bail!("days {} is out of range; allowed: > 0", p.days);
    }
    let Some(last) = pods.iter().map(|p| p.creation_time).max() else {
        bail!("the trace has no pods");
    };
    // The window starts at a trace midnight, so that times of day stay the trace's own.
    let from = (last - (p.days * 86400.0) as i64).div_euclid(86400) * 86400;
    let mut rng = ChaCha8Rng::seed_from_u64(p.seed);
    // A stream of its own, so that time limits leave every other draw as it was.
    let mut limits = ChaCha8Rng::seed_from_u64(p.seed ^ 0x7153_11e1);
    let mut jobs = Vec::new();
    let mut kept: Vec<&Pod> = pods
        .iter()
        .filter(|q| q.num_gpu >= 1 && q.duration().is_some() && q.creation_time >= from)
        .collect();
    kept.sort_by(|a, b| (a.creation_time, &a.name).cmp(&(b.creation_time, &b.name)));
    for pod in kept {
        let d = pod
            .duration()
            .unwrap_or_default()
            .as_secs_f64()
            .clamp(m.min_run_s, m.max_run_s);
        let share = if pod.num_gpu == 1 {
            (f64::from(pod.gpu_milli) / 1000.0).clamp(0.001, 1.0)
        } else {
            1.0
        };
        let kind = if share < 1.0 {
            JobKind::Inference
        } else {
            JobKind::Training
        };
        let gamma = m.gamma(kind);
        let work = d * share.powf(gamma);
        let mem_mib = ((m.trace_gpu_memory_mib as f64) * share).ceil() as u64;
        let release0 = (pod.creation_time - from) as f64;
        let copies = p.load.floor() as u32 + u32::from(rng.gen::<f64>() < p.load.fract());
        for k in 0..copies {
            let release = if k == 0 {
                release0
            } else {
                (release0 + rng.gen_range(-p.jitter_s..=p.jitter_s)).max(0.0)
            };
            let due = release + rng.gen_range(m.due_lo..=m.due_hi) * work;
            jobs.push(Job {
                id: jobs.len() as u32,
                release,
                work,
                mem_mib,
                gpus: pod.num_gpu,
                kind,
                gamma,
                curve: m.curve(kind),
                due,
                limit_factor: m.draw_limit_factor(&mut limits),
                exact_slices: None,
            });
        }
    }
    if jobs.is_empty() {
        bail!(
            "no GPU pod that ran was created in the last {} days of the trace",
            p.days
        );
    }
    Ok(Workload::new(
        jobs,
        format!("alibaba openb, last {} days, load x{:.2}", p.days, p.load),
    ))
}
