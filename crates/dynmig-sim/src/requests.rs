//! What each job asks for, and what happens when that is too little: the request modes of
//! docs/model.md ("Requests and out-of-memory restarts").
//!
//! - [`RequestMode::Exact`]: every job asks for the smallest profile that holds its true need
//!   (the simulator's behaviour before request modes existed; the default).
//! - [`RequestMode::Whole`]: every job asks for a whole GPU.
//! - [`RequestMode::Estimated`]: each job gets an estimate source drawn with
//!   [`SourceShares`], an estimate drawn from the estimator's error distribution
//!   ([`dynmig_core::estimate::ErrorModel`]), and the smallest profile holding the estimate. A
//!   job whose true need exceeds its profile's memory runs out of memory and is restarted on
//!   [`dynmig_core::estimate::next_larger_profile`]; its last allowed restart goes to a whole GPU.
//!
//! [`plan_requests`] decides every job's request before the run, from its own seeded RNG, so
//! every policy sees the same estimates. Whether an attempt fails is decided when it starts:
//! a job runs out of memory when its true need exceeds the memory of the instance it got
//! (which may be larger than the one it asked for); [`restart_profile`] gives the next one.

use crate::model::Job;
use anyhow::{anyhow, bail, Result};
use dynmig_core::estimate::{next_larger_profile, ErrorModel, EstimatorConfig};
use dynmig_core::geometry::{GpuModel, ProfileSpec};
use dynmig_core::hints::smallest_fitting_in;
use dynmig_core::size::MIB;
use dynmig_core::types::EstimateSource;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::fmt;

/// How jobs choose the profile they ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RequestMode {
    /// Every single-GPU job asks for a whole GPU.
    Whole,
    /// Every job asks for the smallest profile that holds its true need (an oracle).
    Exact,
    /// Every job asks for what the estimator says; out-of-memory restarts fix underestimates.
    Estimated,
}

/// The three modes in the order of the comparison table.
pub const ALL_REQUEST_MODES: [RequestMode; 3] = [RequestMode::Whole, RequestMode::Estimated, RequestMode::Exact];

impl fmt::Display for RequestMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RequestMode::Whole => "whole",
            RequestMode::Exact => "exact",
            RequestMode::Estimated => "estimated",
        })
    }
}

impl std::str::FromStr for RequestMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "whole" => Ok(RequestMode::Whole),
            "exact" => Ok(RequestMode::Exact),
            "estimated" => Ok(RequestMode::Estimated),
            _ => Err(format!("unknown request mode '{s}'; allowed: whole, exact, estimated")),
        }
    }
}

/// Share of single-GPU jobs whose estimate comes from each source, in
/// [`RequestMode::Estimated`]. Shares are weights: they are divided by their sum.
/// Defaults are *assumed* (docs/model.md): no survey of how users hint is known.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SourceShares {
    /// `--mig-mem` (0.10).
    pub mig_mem: f64,
    /// A model description, estimated by the formula (0.30).
    pub model: f64,
    /// The history of the same user and job name (0.40: batch ML work is mostly recurring).
    pub history: f64,
    /// No hint and no history: `estimator.default_mem` (0.20).
    pub default: f64,
    /// No hint and no history, `[jobs] whole_gpu = "full-profile"`: a whole GPU (0).
    pub whole_gpu: f64,
}

impl Default for SourceShares {
    fn default() -> Self {
        Self {
            mig_mem: 0.10,
            model: 0.30,
            history: 0.40,
            default: 0.20,
            whole_gpu: 0.0,
        }
    }
}

impl SourceShares {
    /// The sources and their weights, in a fixed order.
    pub fn weights(&self) -> [(EstimateSource, f64); 5] {
        [
            (EstimateSource::MigMemHint, self.mig_mem),
            (EstimateSource::Model, self.model),
            (EstimateSource::History, self.history),
            (EstimateSource::Default, self.default),
            (EstimateSource::WholeGpu, self.whole_gpu),
        ]
    }

    /// Parses `mig-mem=0.1,model=0.3,history=0.4,default=0.2,whole-gpu=0`; sources not named
    /// get 0.
    ///
    /// # Errors
    /// An unknown source, a value that is not a finite number >= 0, or all shares 0.
    pub fn parse(s: &str) -> Result<Self> {
        let mut out = SourceShares {
            mig_mem: 0.0,
            model: 0.0,
            history: 0.0,
            default: 0.0,
            whole_gpu: 0.0,
        };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| anyhow!("estimate share '{part}': expected SOURCE=WEIGHT"))?;
            let v: f64 = v
                .trim()
                .parse()
                .ok()
                .filter(|x: &f64| x.is_finite() && *x >= 0.0)
                .ok_or_else(|| anyhow!("estimate share '{part}': the weight must be a number >= 0"))?;
            let slot = match k.trim() {
                "mig-mem" => &mut out.mig_mem,
                "model" => &mut out.model,
                "history" => &mut out.history,
                "default" => &mut out.default,
                "whole-gpu" => &mut out.whole_gpu,
                o => bail!("unknown estimate source '{o}'; allowed: mig-mem, model, history, default, whole-gpu"),
            };
            *slot = v;
        }
        out.check()?;
        Ok(out)
    }

    /// Checks the weights.
    ///
    /// # Errors
    /// A weight negative or not finite, or all 0.
    pub fn check(&self) -> Result<()> {
        let w = self.weights();
        if w.iter().any(|(_, x)| !x.is_finite() || *x < 0.0) || w.iter().map(|x| x.1).sum::<f64>() <= 0.0 {
            bail!("estimate shares must be numbers >= 0, not all 0 (got {self:?})");
        }
        Ok(())
    }

    /// The source at quantile `u` (0 <= u < 1) of the normalised shares.
    pub fn pick(&self, u: f64) -> EstimateSource {
        let w = self.weights();
        let total: f64 = w.iter().map(|x| x.1).sum();
        let mut acc = 0.0;
        for (s, x) in w {
            acc += x / total;
            if u < acc && x > 0.0 {
                return s;
            }
        }
        w.iter()
            .rev()
            .find(|x| x.1 > 0.0)
            .map_or(EstimateSource::Default, |x| x.0)
    }
}

/// The request settings of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestParams {
    /// The mode.
    pub mode: RequestMode,
    /// Source shares ([`RequestMode::Estimated`]).
    pub shares: SourceShares,
    /// Relative errors per source (default: `ErrorModel::reference` of the default
    /// `[estimator]`).
    pub errors: ErrorModel,
    /// `[estimator]`: `default_mem_bytes` and `max_oom_restarts` are used.
    pub estimator: EstimatorConfig,
    /// Early restart: a job that ran out of memory is requeued when the failure happens,
    /// `oom_after_s` after its start. Off: the failed run lasts as long as a full run on
    /// that instance (the failure is noticed when the job's time is up).
    pub early_restart: bool,
    /// Seconds from the start of an attempt to its out-of-memory failure with early restart
    /// (capped at the attempt's full run time). 60: process start, CUDA context, model load and
    /// the first step's allocations; *assumed*.
    pub oom_after_s: f64,
}

impl Default for RequestParams {
    fn default() -> Self {
        let estimator = EstimatorConfig::default();
        Self {
            mode: RequestMode::Exact,
            shares: SourceShares::default(),
            errors: ErrorModel::reference(&estimator),
            estimator,
            early_restart: true,
            oom_after_s: 60.0,
        }
    }
}

impl RequestParams {
    /// Restarts a job may have: `max_oom_restarts`, at least 1 (every simulated job must end;
    /// with 0 the real controller leaves the job failed and its user resubmits it on a whole GPU,
    /// which is what the one restart models).
    pub fn restart_limit(&self) -> u32 {
        self.estimator.max_oom_restarts.max(1)
    }
}

/// What one job asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobRequest {
    /// Where the estimate came from (`None`: whole or exact mode, or a multi-GPU job).
    pub source: Option<EstimateSource>,
    /// The estimate (or the request), MiB.
    pub estimate_mib: u64,
    /// Profile index (into the cluster's profiles) it asks for first; `None` for multi-GPU
    /// jobs (whole GPUs, no estimate).
    pub profile: Option<u16>,
}

/// The profile (index into `profiles`, smallest first, the full GPU last by memory) a job
/// that ran out of memory on `current` is requeued on, for its restart number `restart`
/// (1 for the first): [`next_larger_profile`] (mapped to `profiles`; else the next one with
/// more memory), but the full GPU once `restart` reaches [`RequestParams::restart_limit`], so
/// that no job restarts more often than that.
pub fn restart_profile(
    model: &'static GpuModel,
    profiles: &[&'static ProfileSpec],
    current: usize,
    restart: u32,
    p: &RequestParams,
) -> usize {
    let full = full_index(profiles);
    if restart >= p.restart_limit() {
        return full;
    }
    next_larger_profile(&[model], profiles[current].name)
        .and_then(|n| profiles.iter().position(|x| x.name == n.name))
        .or_else(|| (0..profiles.len()).find(|i| profiles[*i].memory_mib > profiles[current].memory_mib))
        .unwrap_or(full)
}

fn full_index(profiles: &[&'static ProfileSpec]) -> usize {
    profiles
        .iter()
        .enumerate()
        .max_by_key(|(_, x)| (x.memory_mib, x.compute_slices))
        .map_or(0, |x| x.0)
}

/// Decides each job's request. `profiles` are the cluster's profiles, smallest (by memory,
/// then compute slices) first; `seed` seeds the draws (two per
/// single-GPU job in estimated mode: the source, then the error quantile).
///
/// # Errors
/// A job needs more memory than a whole GPU has; a source drawn has no error samples.
pub fn plan_requests(
    jobs: &[Job],
    model: &'static GpuModel,
    profiles: &[&'static ProfileSpec],
    p: &RequestParams,
    seed: u64,
) -> Result<Vec<JobRequest>> {
    if profiles.is_empty() {
        bail!("{} has no profiles", model.name);
    }
    let full = full_index(profiles);
    let fit =
        |mib: u64| smallest_fitting_in(profiles.iter().copied().enumerate(), mib.saturating_mul(MIB)).map(|(i, _)| i);
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0e57_1a7e);
    let mut out = Vec::with_capacity(jobs.len());
    for j in jobs {
        if j.mem_mib > profiles[full].memory_mib {
            bail!(
                "job {} needs {} MiB of GPU memory per GPU; a {} has {}",
                j.id,
                j.mem_mib,
                model.name,
                profiles[full].memory_mib
            );
        }
        if j.gpus > 1 {
            out.push(JobRequest {
                source: None,
                estimate_mib: j.mem_mib,
                profile: None,
            });
            continue;
        }
        let (source, estimate_mib) = match p.mode {
            RequestMode::Exact => (None, j.mem_mib),
            RequestMode::Whole => (None, profiles[full].memory_mib),
            RequestMode::Estimated => {
                let source = p.shares.pick(rng.gen::<f64>());
                let u = rng.gen::<f64>();
                let bytes = match source {
                    EstimateSource::Default => p.estimator.default_mem_bytes,
                    EstimateSource::WholeGpu | EstimateSource::MigProfileHint => profiles[full].memory_mib * MIB,
                    s => p
                        .errors
                        .estimate_bytes(s, j.mem_mib * MIB, u)
                        .ok_or_else(|| anyhow!("the error model has no samples for source {s}"))?,
                };
                (Some(source), bytes.div_ceil(MIB))
            }
        };
        out.push(JobRequest {
            source,
            estimate_mib,
            profile: Some(fit(estimate_mib).unwrap_or(full) as u16),
        });
    }
    Ok(out)
}
