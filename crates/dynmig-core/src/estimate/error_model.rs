//! How wrong each estimate source is, as a distribution the simulator samples from.
//!
//! A relative error `r` means `estimate = actual x (1 + r)`: `r < 0` underestimates (the
//! job runs out of memory if the profile chosen for the estimate is smaller than `actual`),
//! `r > 0` wastes memory.
//!
//! [`ErrorModel::reference`] holds:
//! - [`EstimateSource::Model`]: the errors of the model formula against the published table
//!   ([`super::reference::REFERENCE`]), the table measured on an H100
//!   ([`super::measured::MEASURED`], transformers only) and the published peaks of kind
//!   `nvml` that count ([`super::published::nvml_errors`], fit and judged halves alike),
//!   computed here, so they change with the formula;
//! - [`EstimateSource::History`]: `margin - 1` (the configured margin over a quantile of past
//!   peaks of the same job; assumes a job's peak repeats from run to run);
//! - [`EstimateSource::MigMemHint`]: `0` (the user's number is taken as the need).
//!
//! Other sources ([`EstimateSource::Default`], [`EstimateSource::WholeGpu`],
//! [`EstimateSource::MigProfileHint`]) do not depend on the job's need, so they have no
//! relative error: the simulator uses their bytes as they are. [`ErrorModel::set`] replaces a
//! source's samples (e.g. with a measured table).

use super::measured::MEASURED;
use super::model_formula::breakdown;
use super::reference::{ReferencePoint, REFERENCE};
use super::EstimatorConfig;
use crate::types::EstimateSource;

/// Empirical relative errors per source.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ErrorModel {
    sources: Vec<(EstimateSource, Vec<f64>)>,
}

/// Summary of a source's errors.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ErrorSummary {
    /// Samples.
    pub n: usize,
    /// Median of `|r|`.
    pub median_abs: f64,
    /// Largest `|r|`.
    pub worst_abs: f64,
    /// Share of samples with `r < 0` (0 to 1).
    pub under_rate: f64,
}

/// The model formula's relative error on each reference row, in table order.
pub fn model_errors(cfg: &EstimatorConfig) -> Vec<(&'static str, u64, u64, f64)> {
    point_errors(&REFERENCE, cfg)
}

/// The model formula's estimate ([`EstimatorConfig::with_margin`], with `cfg.cuda_context_bytes`)
/// against each of `points`: `(name, estimate, measured, estimate / measured - 1)`, in order;
/// rows the formula refuses are left out.
pub fn point_errors(points: &[ReferencePoint], cfg: &EstimatorConfig) -> Vec<(&'static str, u64, u64, f64)> {
    points
        .iter()
        .filter_map(|p| {
            let est = breakdown(&p.spec, cfg.cuda_context_bytes).ok()?.total();
            let est = cfg.with_margin(est, p.spec.phase);
            Some((
                p.name,
                est,
                p.measured_bytes,
                est as f64 / p.measured_bytes as f64 - 1.0,
            ))
        })
        .collect()
}

impl ErrorModel {
    /// The reference model (module docs) under the estimator settings `cfg`.
    pub fn reference(cfg: &EstimatorConfig) -> Self {
        let mut m = Self::default();
        let measured = point_errors(&MEASURED, cfg);
        let published = super::published::nvml_errors(cfg);
        m.set(
            EstimateSource::Model,
            model_errors(cfg)
                .iter()
                .chain(measured.iter())
                .map(|r| r.3)
                .chain(published.iter().map(|r| r.1))
                .collect(),
        );
        m.set(EstimateSource::History, vec![cfg.history_margin - 1.0]);
        m.set(EstimateSource::MigMemHint, vec![0.0]);
        m
    }

    /// Replaces the samples of `source` (non-finite values are dropped; `r` is at least -0.99).
    pub fn set(&mut self, source: EstimateSource, mut samples: Vec<f64>) {
        samples.retain(|r| r.is_finite());
        for r in &mut samples {
            *r = r.max(-0.99);
        }
        samples.sort_by(f64::total_cmp);
        self.sources.retain(|(s, _)| *s != source);
        if !samples.is_empty() {
            self.sources.push((source, samples));
        }
    }

    /// The sorted samples of `source`, if it has any.
    pub fn relative_errors(&self, source: EstimateSource) -> Option<&[f64]> {
        self.sources
            .iter()
            .find(|(s, _)| *s == source)
            .map(|(_, v)| v.as_slice())
    }

    /// The relative error at quantile `u` (0 <= u < 1, e.g. a uniform random number) of the
    /// empirical distribution of `source`, interpolated linearly between samples; `None` if
    /// the source has no relative error.
    pub fn sample(&self, source: EstimateSource, u: f64) -> Option<f64> {
        let v = self.relative_errors(source)?;
        if v.len() == 1 {
            return Some(v[0]);
        }
        let x = u.clamp(0.0, 1.0) * (v.len() - 1) as f64;
        let i = (x.floor() as usize).min(v.len() - 2);
        let f = x - i as f64;
        Some(v[i] + (v[i + 1] - v[i]) * f)
    }

    /// The estimate, in bytes, that `source` gives a job that really needs `actual_bytes`,
    /// drawn at quantile `u`: `actual x (1 + r)`, at least 1 byte.
    pub fn estimate_bytes(&self, source: EstimateSource, actual_bytes: u64, u: f64) -> Option<u64> {
        let r = self.sample(source, u)?;
        Some(((actual_bytes as f64) * (1.0 + r)).round().max(1.0) as u64)
    }

    /// Median and worst absolute error and the underestimation rate of `source`.
    pub fn summary(&self, source: EstimateSource) -> Option<ErrorSummary> {
        let v = self.relative_errors(source)?;
        let mut abs: Vec<f64> = v.iter().map(|r| r.abs()).collect();
        abs.sort_by(f64::total_cmp);
        let n = abs.len();
        let median_abs = if n % 2 == 1 {
            abs[n / 2]
        } else {
            (abs[n / 2 - 1] + abs[n / 2]) / 2.0
        };
        Some(ErrorSummary {
            n,
            median_abs,
            worst_abs: abs[n - 1],
            under_rate: v.iter().filter(|r| **r < 0.0).count() as f64 / n as f64,
        })
    }
}
