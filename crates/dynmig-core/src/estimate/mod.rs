//! The memory estimator: how much GPU memory a job needs, and where that figure came from.
//!
//! Sources, in order; the first that applies gives the estimate ([`Estimate::source`]):
//! 1. `--mig-mem`: the user's figure ([`EstimateSource::MigMemHint`]).
//! 2. A model description (`--mig-model-params`, `--mig-dtype`, `--mig-phase`,
//!    `--mig-batch`, `--mig-seq`) turned into bytes by [`model_formula`]
//!    ([`EstimateSource::Model`]), times `estimator.model_margin`.
//! 3. The history of the same user (uid) and job name: a high quantile of past peaks times a
//!    margin, once there are `estimator.history_min_samples` jobs ([`history`],
//!    [`EstimateSource::History`]).
//! 4. `estimator.default_mem` ([`EstimateSource::Default`]), applied by
//!    [`crate::submit`] as `[jobs] whole_gpu` says.
//!
//! [`error_model::ErrorModel`] gives each source's relative error as a distribution, for the
//! simulator. [`next_larger_profile`] is the profile a job that ran out of memory is requeued
//! on. docs/estimator.md explains the formula and its sources.

pub mod error_model;
pub mod history;
pub mod measured;
pub mod model_formula;
pub mod published;
pub mod reference;

pub use error_model::{ErrorModel, ErrorSummary};
pub use history::{HistoryEntry, HistorySnapshot};

use crate::geometry::{GpuModel, ProfileSpec};
use crate::hints::{auto_selectable, Hints};
use crate::size::{format_size, MIB};
use crate::types::EstimateSource;
use model_formula::{breakdown, Breakdown};

/// The estimator's settings: dynmig.toml's `[estimator]` ([`crate::config::Config::estimator`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EstimatorConfig {
    /// `default_mem`: GPU memory assumed for a job without a hint, in bytes. Default 8 GiB.
    pub default_mem_bytes: u64,
    /// `cuda_context`: bytes the model formula adds for the CUDA context: a size, or `"cudaN"`
    /// for CUDA major version N ([`model_formula::CUDA_CONTEXT_BY_MAJOR`]). Default CUDA 12's,
    /// 621 MiB.
    pub cuda_context_bytes: u64,
    /// `model_margin`: factor on the model formula's total for a training job (1 to 4).
    /// PyTorch's caching allocator reserves more than the tensors hold (blocks rounded up,
    /// freed blocks kept), NVML counts what is reserved, and the formula's terms are
    /// approximate. Default 1.34: the least margin with which no training row of the fit half
    /// of the published measurements gets a profile too small for its peak
    /// (docs/estimator-data/split.md, step 3).
    pub model_margin: f64,
    /// `model_margin_infer`: the same for an inference job (1 to 4). Default 1.29, fitted
    /// likewise on the inference rows.
    pub model_margin_infer: f64,
    /// `history_quantile`: quantile of past peaks (0.5 to 1). Default 0.95.
    pub history_quantile: f64,
    /// `history_margin`: factor on that quantile (1 to 4). Default 1.1.
    pub history_margin: f64,
    /// `history_min_samples`: past jobs needed before the history is used (1 to 1000).
    /// Default 3.
    pub history_min_samples: u32,
    /// `history_window`: most recent jobs per (user, job name) that count (1 to 100000).
    /// Default 50.
    pub history_window: u32,
    /// `max_oom_restarts`: times a job that ran out of memory is requeued on a larger profile
    /// (0 to 10; 0 = never). Default 2.
    pub max_oom_restarts: u32,
    /// `oom_peak_fraction`: a job whose peak reached this fraction of its instance's memory
    /// and that failed counts as out of memory (0.5 to 1). Default 0.98.
    pub oom_peak_fraction: f64,
}

impl Eq for EstimatorConfig {}

impl EstimatorConfig {
    /// The model formula's margin for a job of `phase`: `model_margin` for training,
    /// `model_margin_infer` for inference.
    pub fn margin_for(&self, phase: model_formula::Phase) -> f64 {
        match phase {
            model_formula::Phase::Train => self.model_margin,
            model_formula::Phase::Infer => self.model_margin_infer,
        }
    }

    /// The model formula's estimate from the sum of its terms, bytes: `sum_bytes` times the
    /// margin of `phase` ([`Self::margin_for`]), rounded up.
    pub fn with_margin(&self, sum_bytes: u64, phase: model_formula::Phase) -> u64 {
        (sum_bytes as f64 * self.margin_for(phase)).ceil() as u64
    }
}

impl Default for EstimatorConfig {
    fn default() -> Self {
        Self {
            default_mem_bytes: 8 << 30,
            cuda_context_bytes: model_formula::DEFAULT_CUDA_CONTEXT_BYTES,
            model_margin: 1.34,
            model_margin_infer: 1.29,
            history_quantile: 0.95,
            history_margin: 1.1,
            history_min_samples: 3,
            history_window: 50,
            max_oom_restarts: 2,
            oom_peak_fraction: 0.98,
        }
    }
}

/// A job's estimated GPU memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Estimate {
    /// Bytes.
    pub bytes: u64,
    /// Where the figure came from.
    pub source: EstimateSource,
    /// The terms, for [`EstimateSource::Model`].
    pub breakdown: Option<Breakdown>,
}

/// Who submits the job: the history is kept per user id and job name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobIdentity<'a> {
    /// The submitting user's numeric id.
    pub uid: u32,
    /// The job name (`--job-name`, else the script's name).
    pub job_name: &'a str,
}

/// What the estimator may use besides the hints.
#[derive(Debug, Clone, Copy, Default)]
pub struct EstimateContext<'a> {
    /// `[estimator]` settings; `None`: the defaults.
    pub settings: Option<&'a EstimatorConfig>,
    /// The job's user and name; `None`: no history lookup.
    pub job: Option<JobIdentity<'a>>,
    /// The history snapshot; `None`: no history.
    pub history: Option<&'a HistorySnapshot>,
}

/// The estimate of sources 1-3 (module docs), or `None` when none applies (the caller then
/// uses the default or a whole GPU).
///
/// Hints must have been checked ([`Hints::check`]); a model the formula refuses
/// (training in int8) gives `None` here because the check has already reported it.
pub fn estimate(hints: &Hints, cx: &EstimateContext) -> Option<Estimate> {
    let defaults = EstimatorConfig::default();
    let cfg = cx.settings.unwrap_or(&defaults);
    if let Some(b) = hints.mem_bytes {
        return Some(Estimate {
            bytes: b,
            source: EstimateSource::MigMemHint,
            breakdown: None,
        });
    }
    if let Some(spec) = hints.model.spec() {
        let terms = breakdown(&spec, cfg.cuda_context_bytes).ok()?;
        return Some(Estimate {
            bytes: cfg.with_margin(terms.total(), spec.phase),
            source: EstimateSource::Model,
            breakdown: Some(terms),
        });
    }
    let (job, snap) = (cx.job?, cx.history?);
    let entry = snap.lookup(job.uid, job.job_name)?;
    let bytes = history::history_estimate(entry, cfg.history_margin, cfg.history_min_samples)?;
    Some(Estimate {
        bytes,
        source: EstimateSource::History,
        breakdown: None,
    })
}

/// Describes a model estimate for messages: `weights 13.0GiB + gradients ... = 120.3GiB`.
pub fn describe_breakdown(b: &Breakdown) -> String {
    let mut parts = Vec::new();
    for (name, v) in [
        ("weights", b.weights),
        ("gradients", b.gradients),
        ("optimizer", b.optimizer),
        ("activations", b.activations),
        ("KV cache", b.kv_cache),
        ("logits", b.logits),
        ("CUDA context", b.cuda_context),
    ] {
        if v > 0 {
            parts.push(format!("{name} {}", format_size(v)));
        }
    }
    format!("{} = {}", parts.join(" + "), format_size(b.total()))
}

/// The profile a job that ran out of memory on `current` is requeued on: the smallest
/// auto-selectable profile of `models` with more memory than `current` has (by memory, then
/// compute slices). `None` when `current` is already the largest.
///
/// ```
/// use dynmig_core::estimate::next_larger_profile;
/// use dynmig_core::geometry::A100_80GB;
/// assert_eq!(next_larger_profile(&[&A100_80GB], "1g.10gb").unwrap().name, "2g.20gb");
/// assert_eq!(next_larger_profile(&[&A100_80GB], "3g.40gb").unwrap().name, "7g.80gb");
/// assert!(next_larger_profile(&[&A100_80GB], "7g.80gb").is_none());
/// ```
pub fn next_larger_profile(models: &[&'static GpuModel], current: &str) -> Option<&'static ProfileSpec> {
    let cur = models
        .iter()
        .filter_map(|m| m.profile(current))
        .map(|p| p.memory_mib)
        .max()?;
    models
        .iter()
        .flat_map(|m| m.schedulable_profiles())
        .filter(|p| auto_selectable(p) && p.memory_mib > cur)
        .min_by_key(|p| (p.memory_mib, p.compute_slices))
}

/// Memory of `profile` on the first of `models` that has it, bytes.
pub fn profile_bytes(models: &[&'static GpuModel], profile: &str) -> Option<u64> {
    models
        .iter()
        .find_map(|m| m.profile(profile))
        .map(|p| p.memory_mib * MIB)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hints::hints_from_spank_env;
    use crate::size::GIB;

    fn hints(env: &[&str]) -> Hints {
        hints_from_spank_env(env).unwrap()
    }

    #[test]
    fn sources_in_order() {
        let snap = HistorySnapshot::parse("1000\t5\t10737418240\t10737418240\t0\ttrain\n").unwrap();
        let job = JobIdentity {
            uid: 1000,
            job_name: "train",
        };
        let cx = EstimateContext {
            settings: None,
            job: Some(job),
            history: Some(&snap),
        };
        let mem = hints(&[
            "_SLURM_SPANK_OPTION_dynmig_mig_mem=18G",
            "_SLURM_SPANK_OPTION_dynmig_mig_model_params=7B",
        ]);
        assert_eq!(estimate(&mem, &cx).unwrap().source, EstimateSource::MigMemHint);
        let model = hints(&["_SLURM_SPANK_OPTION_dynmig_mig_model_params=1B"]);
        let e = estimate(&model, &cx).unwrap();
        assert_eq!(e.source, EstimateSource::Model);
        assert!(e.bytes > 16_000_000_000, "{e:?}");
        let none = Hints::default();
        let e = estimate(&none, &cx).unwrap();
        assert_eq!(
            (e.source, e.bytes),
            (EstimateSource::History, ((10 * GIB) as f64 * 1.1).ceil() as u64)
        );
        let other = EstimateContext {
            job: Some(JobIdentity {
                uid: 1001,
                job_name: "train",
            }),
            ..cx
        };
        assert!(estimate(&none, &other).is_none());
        assert!(estimate(&none, &EstimateContext::default()).is_none());
    }

    #[test]
    fn describe_lists_nonzero_terms() {
        let b = Breakdown {
            weights: GIB,
            cuda_context: 500 * MIB,
            ..Breakdown::default()
        };
        assert_eq!(
            describe_breakdown(&b),
            "weights 1.0GiB + CUDA context 500.0MiB = 1.4GiB"
        );
    }
}
