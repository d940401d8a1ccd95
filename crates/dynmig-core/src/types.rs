//! Small enums shared by the config, the estimator and the submit decision, and the rule
//! for echoing user text in messages.
//!
//! They live here, below all three, so that [`crate::config`] can name the `[jobs]` choices
//! and [`crate::estimate`] can name where a figure came from without either importing
//! [`crate::submit`] (which uses both).

use std::fmt;

/// `[jobs] whole_gpu`: what to do with a job that asks for one GPU and gives no hint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WholeGpu {
    /// `"full-profile"`: `gpu:1` with no hint gets the first configured model's full profile
    /// (`7g.80gb`).
    #[default]
    FullProfile,
    /// `"estimate"`: use `estimator.default_mem`
    /// ([`crate::submit::SubmitPolicy::default_mem_bytes`]) as if it were `--mig-mem`.
    Estimate,
    /// `"reject"`: refuse the job and tell the user to give `--mig-mem` or `--mig-profile`.
    Reject,
}

/// `[jobs] multi_gpu`: what to do with a job that asks for more than one GPU (per node, job,
/// socket or task).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MultiGpu {
    /// `"full-profile"`: `gpu:N` becomes N instances of a full profile, in the same field.
    #[default]
    FullProfile,
    /// `"reject"`: refuse the job.
    Reject,
}

/// `[controller] drain`: how the controller takes a busy node out of service for a
/// repartition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DrainMode {
    /// `"reservation"`: a maintenance reservation starting when the node's running jobs must
    /// end (their time limits); backfill keeps the node busy until then with jobs that end in
    /// time, and the node is drained when the reservation starts or the node is idle. An idle
    /// node is drained at once.
    #[default]
    Reservation,
    /// `"immediate"`: drain the node at once; every instance idles until its last job ends.
    Immediate,
}

/// Where a job's memory figure came from (`source=` in the AdminComment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EstimateSource {
    /// The user's `--mig-mem`.
    MigMemHint,
    /// The user's `--mig-profile` (memory is the profile's).
    MigProfileHint,
    /// `estimator.default_mem`.
    Default,
    /// A whole GPU, from [`WholeGpu::FullProfile`] or [`MultiGpu::FullProfile`].
    WholeGpu,
    /// The model formula, from `--mig-model-params` and its companions.
    Model,
    /// The history of the same user and job name.
    History,
}

impl fmt::Display for EstimateSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EstimateSource::MigMemHint => "mig-mem",
            EstimateSource::MigProfileHint => "mig-profile",
            EstimateSource::Default => "default",
            EstimateSource::WholeGpu => "whole-gpu",
            EstimateSource::Model => "model",
            EstimateSource::History => "history",
        })
    }
}

/// `text` cut to at most `max_chars` characters, with `...` appended when it was longer: user
/// text echoed in an error message stays readable whatever its length.
///
/// ```
/// assert_eq!(dynmig_core::types::cut("abcdef", 3), "abc...");
/// assert_eq!(dynmig_core::types::cut("abc", 3), "abc");
/// ```
pub fn cut(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_string(),
    }
}
