//! A SMART-MIG-like synthetic workload: Poisson arrivals with a day-varying rate, lognormal
//! training and exponential inference durations, memory shares drawn from the trace's own
//! mix. Parameters and sources in docs/model.md ("Synthetic workload").

use super::families::Family;
use super::Workload;
use crate::model::{Job, JobKind, ModelParams};
use anyhow::{bail, Result};
use rand::distributions::WeightedIndex;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp, LogNormal};
use std::f64::consts::PI;

/// Single-GPU memory shares (`gpu_milli`) and how many pods of the trace's default list ask
/// each (the eight most common values, traces/README.md and a count over the last 30 days).
pub const TRACE_SHARES: [(u32, u32); 8] = [
    (1000, 3128),
    (810, 968),
    (470, 403),
    (320, 265),
    (650, 212),
    (460, 101),
    (230, 64),
    (160, 62),
];

/// Parameters of the generator.
#[derive(Debug, Clone, PartialEq)]
pub struct SyntheticParams {
    /// Simulated days of arrivals.
    pub days: f64,
    /// Mean arrival rate over the day, jobs per hour.
    pub jobs_per_hour: f64,
    /// Relative amplitude of the day cycle: `rate(t) = mean x (1 + a sin(...))`; 0.56 gives the
    /// trace's 3.5x between busiest and quietest hour.
    pub amplitude: f64,
    /// Hour of the day with the highest rate (18, as in the trace).
    pub peak_hour: f64,
    /// Share of multi-GPU jobs (0.012: 75 of 6,400 GPU pods in the trace), each asking 2, 4 or
    /// 8 GPUs with equal chance.
    pub multi_gpu_share: f64,
    /// Training durations on a full GPU: lognormal with this median, s (1800).
    pub training_median_s: f64,
    /// ... and this sigma of the underlying normal (1.2).
    pub training_sigma: f64,
    /// Inference durations on a full GPU: exponential with this mean, s (300).
    pub inference_mean_s: f64,
    /// Seed.
    pub seed: u64,
    /// A family whose rate and mix move over time ([`Family`]); `None`: the steady mix.
    pub family: Option<Family>,
}

impl Default for SyntheticParams {
    fn default() -> Self {
        Self {
            days: 7.0,
            jobs_per_hour: 100.0,
            amplitude: 0.56,
            peak_hour: 18.0,
            multi_gpu_share: 0.012,
            training_median_s: 1800.0,
            training_sigma: 1.2,
            inference_mean_s: 300.0,
            seed: 1,
            family: None,
        }
    }
}

/// Arrival rate at time `t` (s), jobs per second.
pub fn rate_at(p: &SyntheticParams, t: f64) -> f64 {
    let phase = 2.0 * PI * (t / 86400.0 - p.peak_hour / 24.0 + 0.25);
    p.jobs_per_hour / 3600.0 * (1.0 + p.amplitude * phase.sin())
}

/// Generates the workload: a non-homogeneous Poisson process by thinning; each job draws its
/// memory share from [`TRACE_SHARES`] (share >= 0.65: training, else inference; memory =
/// share x `trace_gpu_memory_mib`) or is multi-GPU, then its duration by kind.
///
/// # Errors
/// Parameters out of range (the message names which and what is allowed).
pub fn synthetic_workload(p: &SyntheticParams, m: &ModelParams) -> Result<Workload> {
    if !(p.days > 0.0 && p.jobs_per_hour > 0.0) {
        bail!(
            "days and jobs_per_hour must be > 0 (got {} and {})",
            p.days,
            p.jobs_per_hour
        );
    }
    if !(0.0..1.0).contains(&p.amplitude) || !(0.0..=1.0).contains(&p.multi_gpu_share) {
        bail!("amplitude must be in [0, 1) and multi_gpu_share in [0, 1]");
    }
    let mut rng = ChaCha8Rng::seed_from_u64(p.seed);
    // A stream of its own, so that time limits leave every other draw as it was.
    let mut limits = ChaCha8Rng::seed_from_u64(p.seed ^ 0x7153_11e1);
    let max_rate = p.jobs_per_hour / 3600.0 * (1.0 + p.amplitude) * p.family.map_or(1.0, Family::max_rate);
    let gap = Exp::new(max_rate)?;
    let shares = WeightedIndex::new(TRACE_SHARES.iter().map(|s| s.1))?;
    let train = LogNormal::new(p.training_median_s.ln(), p.training_sigma)?;
    let infer = Exp::new(1.0 / p.inference_mean_s)?;
    let end = p.days * 86400.0;
    let mut t = 0.0;
    let mut jobs = Vec::new();
    loop {
        t += gap.sample(&mut rng);
        if t >= end {
            break;
        }
        let shape = p.family.map(|f| f.shape(t, p.days, p.multi_gpu_share));
        let rate = rate_at(p, t) * shape.map_or(1.0, |s| s.rate);
        if rng.gen::<f64>() * max_rate > rate {
            continue;
        }
        let multi = shape.map_or(p.multi_gpu_share, |s| s.multi_share);
        let (gpus, share) = if rng.gen::<f64>() < multi {
            ([2, 4, 8][rng.gen_range(0..3)], 1.0)
        } else {
            let i = match shape {
                None => shares.sample(&mut rng),
                Some(s) => {
                    let w = TRACE_SHARES.map(|(milli, n)| f64::from(n) * if milli >= 650 { s.large } else { s.small });
                    WeightedIndex::new(w)?.sample(&mut rng)
                }
            };
            (1, f64::from(TRACE_SHARES[i].0) / 1000.0)
        };
        let kind = if share >= 0.65 {
            JobKind::Training
        } else {
            JobKind::Inference
        };
        let work = match kind {
            JobKind::Training => train.sample(&mut rng),
            JobKind::Inference => infer.sample(&mut rng),
        }
        .clamp(m.min_run_s, m.max_run_s);
        let due = t + rng.gen_range(m.due_lo..=m.due_hi) * work;
        jobs.push(Job {
            id: jobs.len() as u32,
            release: t,
            work,
            mem_mib: ((m.trace_gpu_memory_mib as f64) * share).ceil() as u64,
            gpus,
            kind,
            gamma: m.gamma(kind),
            curve: m.curve(kind),
            due,
            limit_factor: m.draw_limit_factor(&mut limits),
            exact_slices: None,
        });
    }
    if jobs.is_empty() {
        bail!("the synthetic workload has no job; raise jobs_per_hour or days");
    }
    let family = p.family.map_or(String::new(), |f| format!(", family {f}"));
    Ok(Workload::new(
        jobs,
        format!("synthetic{family}, {} days, {:.0} jobs/h", p.days, p.jobs_per_hour),
    ))
}
