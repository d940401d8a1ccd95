// One piece: the table of every `--mig-*` option (`OPTIONS`) with the parser and the check of each, which must stay in step with the table; its tests are in hints/.
//! The users' hints: `--mig-mem=<size>`, `--mig-profile=<name>`, and a model description
//! for the estimator: `--mig-model-params=7B --mig-dtype=bf16 --mig-phase=train|infer
//! --mig-batch=N --mig-seq=N` ([`crate::estimate::model_formula`]).
//!
//! The SPANK plugin registers both options and checks each value with [`parse_hint`] on the
//! login node, so a typo fails at `sbatch` time. Slurm then hands the values to slurmctld in
//! `job_desc->spank_job_env` as `_SLURM_SPANK_OPTION_dynmig_mig_mem=18G` and
//! `_SLURM_SPANK_OPTION_dynmig_mig_profile=2g.20gb` (Slurm's spank(8) manual page: options
//! of allocator plugins reach the job's SPANK environment); the job_submit plugin reads
//! them back with [`hints_from_spank_env`].
//!
//! - `--mig-mem` is the GPU memory the job needs, a size as [`crate::size::parse_size`] reads
//!   it (binary units; a bare number is MiB).
//! - `--mig-profile` names a MIG profile, case-insensitively; media-extension profiles
//!   (`+me`) are not scheduled by dynmig and are refused.
//! - `--mig-model-params` is the model's parameter count (`7B`, `350M`; 1M to 2T);
//!   `--mig-dtype` one of fp32, fp16, bf16, fp8, int8, int4 (default bf16; fp8 only where a
//!   configured GPU model runs it, [`crate::geometry::GpuModel::fp8`]); `--mig-phase` train
//!   or infer (default train); `--mig-batch` 1 to 65536 (default 1); `--mig-seq` 1 to 1Mi
//!   tokens (default 2048). The last four need `--mig-model-params`; int8/int4 are for
//!   inference.
//!
//! What a check knows of the cluster decides what it refuses and what its message lists
//! ([`parse_hint_for`]): job_submit/dynmig in slurmctld knows the configured GPU models, so a
//! profile or dtype none of them has is refused there and the message lists exactly the
//! configured models' profiles and dtypes. The SPANK plugin on the login node does not read
//! dynmig.toml ([`parse_hint`], docs/architecture.md "Where a hint is checked"): it refuses
//! what is wrong on every cluster (a value that is not a profile name, an unknown dtype) and
//! leaves the cluster check to slurmctld, so it never lists another cluster's profiles.
//!
//! Every [`HintError`] displays as the complete message for the user, starting `dynmig: `;
//! the user's value is quoted cut to [`MAX_QUOTED`] characters with its control characters
//! escaped ([`shorten`], [`escape_control`]), as it may reach slurmctld's log.

use crate::estimate::model_formula::{
    kv_heads_for, parse_params, shape_for, Attention, Dtype, ModelError, ModelOptions, ModelSpec, Optimizer, Phase,
    DEFAULT_BATCH, DEFAULT_SEQ, MAX_BATCH, MAX_HEADS_OR_RANK, MAX_SEQ, MAX_VOCAB,
};
use crate::geometry::{GpuModel, ProfileSpec, MODELS};
use crate::size::{format_size, parse_size, SizeError, MIB};
use crate::types::{clip, Controls};

pub use crate::types::MAX_QUOTED;

/// `text` for quoting in a message or a log line: its control characters escaped
/// ([`escape_control`]), then cut to at most `max` characters (escapes included, never
/// inside one), with `...` appended when something was cut ([`clip`] with
/// [`Controls::Escape`]). Every user string that a message or log line quotes (job names,
/// hint values, GRES strings) goes through it.
///
/// ```
/// use dynmig_core::hints::shorten;
/// assert_eq!(shorten("abcdef", 3), "abc...");
/// assert_eq!(shorten("abc", 3), "abc");
/// assert_eq!(shorten("a\nb", 10), "a\\nb");
/// ```
pub fn shorten(text: &str, max: usize) -> String {
    clip(text, max, Controls::Escape)
}

pub use crate::types::escape_control;

/// Prefix of the SPANK option variables of the plugin named `dynmig` in `spank_job_env`.
pub const SPANK_ENV_PREFIX: &str = "_SLURM_SPANK_OPTION_dynmig_";

/// Option name (without `--`) of the memory hint.
pub const MIG_MEM: &str = "mig-mem";
/// Option name (without `--`) of the profile hint.
pub const MIG_PROFILE: &str = "mig-profile";
/// Option name (without `--`) of the model's parameter count.
pub const MIG_MODEL_PARAMS: &str = "mig-model-params";
/// Option name (without `--`) of the model's number format.
pub const MIG_DTYPE: &str = "mig-dtype";
/// Option name (without `--`) of the phase (train or infer).
pub const MIG_PHASE: &str = "mig-phase";
/// Option name (without `--`) of the batch size.
pub const MIG_BATCH: &str = "mig-batch";
/// Option name (without `--`) of the sequence length.
pub const MIG_SEQ: &str = "mig-seq";
/// Option name (without `--`) of the optimizer (training).
pub const MIG_OPTIMIZER: &str = "mig-optimizer";
/// Option name (without `--`) of the attention implementation.
pub const MIG_ATTENTION: &str = "mig-attention";
/// Option name (without `--`) of the vocabulary size.
pub const MIG_VOCAB: &str = "mig-vocab";
/// Option name (without `--`) of the key/value heads (grouped-query attention).
pub const MIG_KV_HEADS: &str = "mig-kv-heads";
/// Option name (without `--`) of the LoRA rank.
pub const MIG_LORA_RANK: &str = "mig-lora-rank";
/// Option name (without `--`) of the activations per sample (a model that is not a
/// transformer).
pub const MIG_ACT_PER_SAMPLE: &str = "mig-act-per-sample";
/// Every option of dynmig, without `--`, in the order `sbatch --help` lists them.
pub const OPTIONS: [&str; 13] = [
    MIG_MEM,
    MIG_PROFILE,
    MIG_MODEL_PARAMS,
    MIG_DTYPE,
    MIG_PHASE,
    MIG_BATCH,
    MIG_SEQ,
    MIG_OPTIMIZER,
    MIG_ATTENTION,
    MIG_VOCAB,
    MIG_KV_HEADS,
    MIG_LORA_RANK,
    MIG_ACT_PER_SAMPLE,
];

/// One hint, as read from one option.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hint {
    /// `--mig-mem`: GPU memory needed, in bytes.
    MigMem(u64),
    /// `--mig-profile`: a profile name, in the canonical (table) spelling, e.g. `"2g.20gb"`.
    MigProfile(String),
    /// `--mig-model-params`: parameters.
    ModelParams(u64),
    /// `--mig-dtype`.
    Dtype(Dtype),
    /// `--mig-phase`.
    Phase(Phase),
    /// `--mig-batch`.
    Batch(u32),
    /// `--mig-seq`.
    Seq(u32),
    /// `--mig-optimizer`.
    Optimizer(Optimizer),
    /// `--mig-attention`.
    Attention(Attention),
    /// `--mig-vocab`.
    Vocab(u32),
    /// `--mig-kv-heads`.
    KvHeads(u32),
    /// `--mig-lora-rank`.
    LoraRank(u32),
    /// `--mig-act-per-sample`, bytes.
    ActPerSample(u64),
}

/// The model description hints; all `None` when not given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ModelHints {
    /// `--mig-model-params`.
    pub params: Option<u64>,
    /// `--mig-dtype`.
    pub dtype: Option<Dtype>,
    /// `--mig-phase`.
    pub phase: Option<Phase>,
    /// `--mig-batch`.
    pub batch: Option<u32>,
    /// `--mig-seq`.
    pub seq: Option<u32>,
    /// `--mig-optimizer`.
    pub optimizer: Option<Optimizer>,
    /// `--mig-attention`.
    pub attention: Option<Attention>,
    /// `--mig-vocab`.
    pub vocab: Option<u32>,
    /// `--mig-kv-heads`.
    pub kv_heads: Option<u32>,
    /// `--mig-lora-rank`.
    pub lora_rank: Option<u32>,
    /// `--mig-act-per-sample`, bytes.
    pub act_per_sample: Option<u64>,
}

impl ModelHints {
    /// Whether any model option was given.
    pub fn any(&self) -> bool {
        self.params.is_some() || self.given_without_params().is_some()
    }

    /// The first model option given (in [`OPTIONS`] order) other than `--mig-model-params`.
    fn given_without_params(&self) -> Option<&'static str> {
        [
            (MIG_DTYPE, self.dtype.is_some()),
            (MIG_PHASE, self.phase.is_some()),
            (MIG_BATCH, self.batch.is_some()),
            (MIG_SEQ, self.seq.is_some()),
            (MIG_OPTIMIZER, self.optimizer.is_some()),
            (MIG_ATTENTION, self.attention.is_some()),
            (MIG_VOCAB, self.vocab.is_some()),
            (MIG_KV_HEADS, self.kv_heads.is_some()),
            (MIG_LORA_RANK, self.lora_rank.is_some()),
            (MIG_ACT_PER_SAMPLE, self.act_per_sample.is_some()),
        ]
        .into_iter()
        .find_map(|(o, given)| given.then_some(o))
    }

    /// The model with the defaults filled in (bf16, train, batch 1, seq 2048,
    /// [`ModelOptions::DEFAULT`]), when `--mig-model-params` was given.
    pub fn spec(&self) -> Option<ModelSpec> {
        let d = ModelOptions::DEFAULT;
        Some(ModelSpec {
            params: self.params?,
            dtype: self.dtype.unwrap_or(Dtype::Bf16),
            phase: self.phase.unwrap_or(Phase::Train),
            batch: self.batch.unwrap_or(DEFAULT_BATCH),
            seq: self.seq.unwrap_or(DEFAULT_SEQ),
            options: ModelOptions {
                optimizer: self.optimizer.unwrap_or(d.optimizer),
                attention: self.attention.unwrap_or(d.attention),
                vocab: self.vocab.unwrap_or(d.vocab),
                kv_heads: self.kv_heads,
                lora_rank: self.lora_rank,
                act_per_sample: self.act_per_sample,
            },
        })
    }
}

/// The hints of one job. Both may be given; see [`Hints::check`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hints {
    /// `--mig-mem` in bytes.
    pub mem_bytes: Option<u64>,
    /// `--mig-profile`, canonical spelling.
    pub profile: Option<String>,
    /// The model description.
    pub model: ModelHints,
}

/// A hint that cannot be used. Display is the complete user-facing message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HintError {
    /// `--mig-mem` is not a valid size.
    #[error("dynmig: --mig-mem={value}: {source}, e.g. --mig-mem=18G")]
    BadSize {
        /// The value as given.
        value: String,
        /// Why it is not a size.
        source: SizeError,
    },
    /// `--mig-profile` names no profile of the cluster's GPU models (or, where the models are
    /// not known, is not a profile name at all).
    #[error("dynmig: --mig-profile={value}: unknown MIG profile; {help}")]
    UnknownProfile {
        /// The value as given, cut and escaped ([`shorten`]).
        value: String,
        /// `allowed: ` and the profiles of the cluster's GPU models ([`profile_names`]), or,
        /// where the models are not known, how a profile is named.
        help: String,
    },
    /// `--mig-dtype` names a format no GPU model of the cluster runs (fp8 on Ampere).
    #[error("dynmig: --mig-dtype={dtype}: no GPU model of this cluster runs {dtype} ({models}); allowed: {allowed}")]
    DtypeNotOnCluster {
        /// The format asked for.
        dtype: Dtype,
        /// The cluster's GPU models, comma separated.
        models: String,
        /// The formats the cluster runs, comma separated ([`dtypes_on`]).
        allowed: String,
    },
    /// A model option's value cannot be used.
    #[error("dynmig: --{option}={value}: {reason}")]
    BadModelValue {
        /// The option, without `--`.
        option: &'static str,
        /// The value as given.
        value: String,
        /// What is wrong and what is allowed.
        reason: String,
    },
    /// A model option without `--mig-model-params`.
    #[error("dynmig: --{option} describes a model: give --mig-model-params too (e.g. --mig-model-params=7B)")]
    ModelWithoutParams {
        /// The option, without `--`.
        option: &'static str,
    },
    /// Training with an integer format.
    #[error(
        "dynmig: --mig-dtype={dtype} with --mig-phase=train: training in {dtype} is not supported; train in {formats}"
    )]
    IntegerTraining {
        /// The dtype.
        dtype: Dtype,
        /// The formats the cluster trains in, e.g. `fp32, fp16 or bf16` (with fp8 where a
        /// GPU model runs it).
        formats: String,
    },
    /// The option is not one of dynmig's.
    #[error("dynmig: unknown option --{option}; dynmig's options are --mig-mem, --mig-profile, --mig-model-params, --mig-dtype, --mig-phase, --mig-batch, --mig-seq, --mig-optimizer, --mig-attention, --mig-vocab, --mig-kv-heads, --mig-lora-rank and --mig-act-per-sample")]
    UnknownOption {
        /// The option name.
        option: String,
    },
    /// Both hints were given and the profile is smaller than the memory hint.
    #[error(
        "dynmig: --mig-profile={profile} has {profile_mem} of GPU memory, less than \
         --mig-mem={mem}; drop one of the two or name a larger profile{larger}"
    )]
    ProfileTooSmall {
        /// The profile hint.
        profile: String,
        /// Its usable memory (largest over the models that have it).
        profile_mem: String,
        /// The memory hint, formatted.
        mem: String,
        /// ` (e.g. 3g.40gb)` or empty.
        larger: String,
    },
}

/// Checks one option's value where the cluster's GPU models are not known (the SPANK plugin
/// on the login node): [`parse_hint_for`] with `cluster` `None`. A `--mig-profile` of the
/// right shape (`5g.50gb`) passes here and is checked against the configured models by
/// job_submit/dynmig.
///
/// # Errors
/// [`HintError`] with the user-facing message.
///
/// ```
/// use dynmig_core::hints::{parse_hint, Hint};
/// assert_eq!(parse_hint("mig-mem", "1G").unwrap(), Hint::MigMem(1 << 30));
/// let err = parse_hint("mig-mem", "18Q").unwrap_err().to_string();
/// assert_eq!(err, "dynmig: --mig-mem=18Q: unknown unit 'Q'; use a number with K, M, G or T (binary units), e.g. --mig-mem=18G");
/// ```
pub fn parse_hint(option: &str, value: &str) -> Result<Hint, HintError> {
    parse_hint_for(option, value, None)
}

/// Checks one option's value: `option` is the name without `--` (`"mig-mem"`,
/// `"mig-profile"`; the underscore forms of the SPANK variables are accepted too).
/// `cluster` is the cluster's GPU models when known (job_submit/dynmig: the configured
/// node groups' models), else `None`:
/// - `--mig-profile`: with the models, a profile one of them has (else refused, listing
///   their profiles); without, a profile of any known model or a name of the profile shape
///   (`<compute slices>g.<memory>gb`), never `+me`.
/// - `--mig-dtype`: fp8 only if one of the models runs it ([`GpuModel::fp8`]); without the
///   models, every format. An unknown format's message lists the formats the models run.
///
/// # Errors
/// [`HintError`] with the user-facing message.
///
/// ```
/// use dynmig_core::geometry::{A100_80GB, H100_80GB};
/// use dynmig_core::hints::{parse_hint_for, Hint};
/// let e = parse_hint_for("mig-profile", "5g.50gb", Some(&[&A100_80GB])).unwrap_err();
/// assert_eq!(
///     e.to_string(),
///     "dynmig: --mig-profile=5g.50gb: unknown MIG profile; allowed: 1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb"
/// );
/// assert!(parse_hint_for("mig-dtype", "fp8", Some(&[&A100_80GB])).is_err());
/// assert!(parse_hint_for("mig-dtype", "fp8", Some(&[&A100_80GB, &H100_80GB])).is_ok());
/// ```
pub fn parse_hint_for(option: &str, value: &str, cluster: Option<&[&'static GpuModel]>) -> Result<Hint, HintError> {
    match option.replace('_', "-").as_str() {
        MIG_MEM => parse_size(value)
            .map(Hint::MigMem)
            .map_err(|source| HintError::BadSize {
                value: shorten(value, MAX_QUOTED),
                source: shorten_size_error(source),
            }),
        MIG_PROFILE => parse_profile(value, cluster),
        MIG_MODEL_PARAMS => parse_params(value)
            .map(Hint::ModelParams)
            .map_err(|reason| bad_model(MIG_MODEL_PARAMS, value, reason)),
        MIG_DTYPE => parse_dtype(value, cluster),
        MIG_PHASE => Phase::parse(value)
            .map(Hint::Phase)
            .ok_or_else(|| bad_model(MIG_PHASE, value, "unknown phase; allowed: train, infer".into())),
        MIG_BATCH => count(MIG_BATCH, value, MAX_BATCH).map(Hint::Batch),
        MIG_SEQ => count(MIG_SEQ, value, MAX_SEQ).map(Hint::Seq),
        MIG_OPTIMIZER => Optimizer::parse(value).map(Hint::Optimizer).ok_or_else(|| {
            let all: Vec<String> = Optimizer::ALL.iter().map(ToString::to_string).collect();
            bad_model(
                MIG_OPTIMIZER,
                value,
                format!("unknown optimizer; allowed: {}", all.join(", ")),
            )
        }),
        MIG_ATTENTION => Attention::parse(value).map(Hint::Attention).ok_or_else(|| {
            bad_model(
                MIG_ATTENTION,
                value,
                "unknown attention; allowed: fused (FlashAttention, SDPA), eager".into(),
            )
        }),
        // 0: no logits over a vocabulary (an encoder, a classifier).
        MIG_VOCAB => match value.trim().parse::<u32>() {
            Ok(0) => Ok(Hint::Vocab(0)),
            _ => count(MIG_VOCAB, value, MAX_VOCAB).map(Hint::Vocab).map_err(|_| {
                bad_model(
                    MIG_VOCAB,
                    value,
                    format!("not a whole number from 0 (no vocabulary: an encoder or a classifier) to {MAX_VOCAB}"),
                )
            }),
        },
        MIG_KV_HEADS => count(MIG_KV_HEADS, value, MAX_HEADS_OR_RANK).map(Hint::KvHeads),
        MIG_LORA_RANK => count(MIG_LORA_RANK, value, MAX_HEADS_OR_RANK).map(Hint::LoraRank),
        MIG_ACT_PER_SAMPLE => parse_size(value)
            .map_err(|e| e.to_string())
            .and_then(|b| {
                if b == 0 {
                    Err("must be more than 0".into())
                } else {
                    Ok(b)
                }
            })
            .map(Hint::ActPerSample)
            .map_err(|why| {
                bad_model(
                    MIG_ACT_PER_SAMPLE,
                    value,
                    format!("{why}; give the activations one sample keeps, e.g. 100M (K/M/G, binary units)"),
                )
            }),
        _ => Err(HintError::UnknownOption {
            option: shorten(option, MAX_QUOTED),
        }),
    }
}

/// `--mig-profile`: see [`parse_hint_for`].
fn parse_profile(value: &str, cluster: Option<&[&'static GpuModel]>) -> Result<Hint, HintError> {
    let name = value.trim();
    if let Some(p) = find_profile(cluster.unwrap_or(MODELS), name) {
        return Ok(Hint::MigProfile(p.name.to_string()));
    }
    let help = match cluster {
        None if is_profile_name(name) && !name.to_ascii_lowercase().ends_with("+me") => {
            return Ok(Hint::MigProfile(name.to_ascii_lowercase()));
        }
        None => "a MIG profile is named <compute slices>g.<memory>gb as nvidia-smi lists it, e.g. \
                 3g.40gb (media-extension +me profiles are not scheduled)"
            .to_string(),
        Some(models) => format!("allowed: {}", profile_names(models).join(", ")),
    };
    Err(HintError::UnknownProfile {
        value: shorten(value, MAX_QUOTED),
        help,
    })
}

/// `--mig-dtype`: see [`parse_hint_for`].
fn parse_dtype(value: &str, cluster: Option<&[&'static GpuModel]>) -> Result<Hint, HintError> {
    let models = cluster.unwrap_or(MODELS);
    let list = |d: Vec<Dtype>| d.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
    match Dtype::parse(value) {
        Some(d) if !dtypes_on(models).contains(&d) => Err(HintError::DtypeNotOnCluster {
            dtype: d,
            models: models.iter().map(|m| m.name).collect::<Vec<_>>().join(", "),
            allowed: list(dtypes_on(models)),
        }),
        Some(d) => Ok(Hint::Dtype(d)),
        None => Err(bad_model(
            MIG_DTYPE,
            value,
            format!("unknown number format; allowed: {}", list(dtypes_on(models))),
        )),
    }
}

/// The number formats a job may ask for on a cluster of `models`, in [`Dtype::ALL`] order:
/// fp8 only when one of them runs it ([`GpuModel::fp8`]).
///
/// ```
/// use dynmig_core::geometry::{A100_80GB, H100_80GB};
/// use dynmig_core::hints::dtypes_on;
/// assert_eq!(dtypes_on(&[&A100_80GB]).len(), 5);
/// assert_eq!(dtypes_on(&[&A100_80GB, &H100_80GB]).len(), 6);
/// ```
pub fn dtypes_on(models: &[&'static GpuModel]) -> Vec<Dtype> {
    let fp8 = models.iter().any(|m| m.fp8);
    Dtype::ALL.into_iter().filter(|d| fp8 || !d.needs_fp8()).collect()
}

/// `Ng.Mgb` or `Ng.Mgb+me` (any case): the shape of a MIG profile name.
pub(crate) fn is_profile_name(t: &str) -> bool {
    let t = t.to_ascii_lowercase();
    let t = t.strip_suffix("+me").unwrap_or(&t);
    let Some((g, m)) = t.split_once("g.") else {
        return false;
    };
    let Some(m) = m.strip_suffix("gb") else {
        return false;
    };
    !g.is_empty() && !m.is_empty() && g.bytes().all(|b| b.is_ascii_digit()) && m.bytes().all(|b| b.is_ascii_digit())
}

fn bad_model(option: &'static str, value: &str, reason: String) -> HintError {
    // Some reasons quote the (trimmed) value: cut and escape it there too.
    let mut reason = reason;
    for v in [value, value.trim()] {
        let shown = shorten(v, MAX_QUOTED);
        if shown != v {
            reason = reason.replace(v, &shown);
        }
    }
    HintError::BadModelValue {
        option,
        value: shorten(value, MAX_QUOTED),
        reason,
    }
}

/// A [`SizeError`] whose quoted part of the user's text is cut to [`MAX_QUOTED`].
fn shorten_size_error(e: SizeError) -> SizeError {
    match e {
        SizeError::BadNumber(t) => SizeError::BadNumber(shorten(&t, MAX_QUOTED)),
        SizeError::UnknownUnit(t) => SizeError::UnknownUnit(shorten(&t, MAX_QUOTED)),
        SizeError::TooLarge(t) => SizeError::TooLarge(shorten(&t, MAX_QUOTED)),
        other => other,
    }
}

/// A whole number from 1 to `max`.
fn count(option: &'static str, value: &str, max: u32) -> Result<u32, HintError> {
    match value.trim().parse::<u64>() {
        Ok(n) if n >= 1 && n <= u64::from(max) => Ok(n as u32),
        _ => Err(bad_model(option, value, format!("not a whole number from 1 to {max}"))),
    }
}

/// Reads dynmig's hints out of `spank_job_env` entries (`NAME=VALUE`). Entries of other
/// plugins, entries without `=`, and dynmig options this version does not know are ignored
/// (so that a newer SPANK plugin does not break submission); a later entry of the same
/// option replaces an earlier one, as in an environment. Checks the pair with
/// [`Hints::check`]. The cluster's models are not known here ([`parse_hint`]); job_submit/
/// dynmig uses [`hints_from_spank_env_for`].
///
/// # Errors
/// The first bad value, or a profile smaller than the memory hint.
pub fn hints_from_spank_env(entries: &[&str]) -> Result<Hints, HintError> {
    hints_from_spank_env_for(entries, None)
}

/// [`hints_from_spank_env`] on a cluster of `cluster`'s GPU models: each value is checked
/// with [`parse_hint_for`] and the pair with [`Hints::check`] on those models, so every
/// message lists only their profiles and formats.
///
/// # Errors
/// The first bad value (a profile or format none of the models has), or a profile smaller
/// than the memory hint.
pub fn hints_from_spank_env_for(entries: &[&str], cluster: Option<&[&'static GpuModel]>) -> Result<Hints, HintError> {
    let mut hints = Hints::default();
    for entry in entries {
        let Some((name, value)) = entry.split_once('=') else {
            continue;
        };
        let Some(option) = name.strip_prefix(SPANK_ENV_PREFIX) else {
            continue;
        };
        match parse_hint_for(option, value, cluster) {
            Ok(hint) => hints.set(hint),
            Err(HintError::UnknownOption { .. }) => continue,
            Err(e) => return Err(e),
        }
    }
    hints.check(cluster.unwrap_or(MODELS))?;
    Ok(hints)
}

impl Hints {
    /// Records one hint, replacing an earlier one of the same option.
    pub fn set(&mut self, hint: Hint) {
        match hint {
            Hint::MigMem(b) => self.mem_bytes = Some(b),
            Hint::MigProfile(p) => self.profile = Some(p),
            Hint::ModelParams(n) => self.model.params = Some(n),
            Hint::Dtype(d) => self.model.dtype = Some(d),
            Hint::Phase(p) => self.model.phase = Some(p),
            Hint::Batch(n) => self.model.batch = Some(n),
            Hint::Seq(n) => self.model.seq = Some(n),
            Hint::Optimizer(o) => self.model.optimizer = Some(o),
            Hint::Attention(a) => self.model.attention = Some(a),
            Hint::Vocab(n) => self.model.vocab = Some(n),
            Hint::KvHeads(n) => self.model.kv_heads = Some(n),
            Hint::LoraRank(n) => self.model.lora_rank = Some(n),
            Hint::ActPerSample(b) => self.model.act_per_sample = Some(b),
        }
    }

    /// Whether no hint was given.
    pub fn is_empty(&self) -> bool {
        self.mem_bytes.is_none() && self.profile.is_none() && !self.model.any()
    }

    /// The option the user gave, as `--mig-mem=18.0GiB` or `--mig-profile=2g.20gb` (the
    /// profile when both are given), for messages.
    pub fn describe(&self) -> Option<String> {
        match (&self.profile, self.mem_bytes) {
            (Some(p), _) => Some(format!("--{MIG_PROFILE}={p}")),
            (None, Some(b)) => Some(format!("--{MIG_MEM}={}", format_size(b))),
            (None, None) => self.model.params.map(|p| format!("--{MIG_MODEL_PARAMS}={p}")),
        }
    }

    /// When both hints are given, checks that the profile has at least the hinted memory on
    /// one of `models` that has the profile (the profile then wins).
    ///
    /// # Errors
    /// [`HintError::ProfileTooSmall`], suggesting the smallest profile that fits on the
    /// models that have the named one (the GPUs the job would run on), if any.
    /// Also checks the model options: the others need `--mig-model-params`, and int8/int4
    /// are for inference only.
    pub fn check(&self, models: &[&'static GpuModel]) -> Result<(), HintError> {
        self.check_model(models)?;
        let (Some(profile), Some(mem)) = (&self.profile, self.mem_bytes) else {
            return Ok(());
        };
        let having: Vec<&'static GpuModel> = models
            .iter()
            .copied()
            .filter(|m| m.profile(profile).is_some())
            .collect();
        let Some(best) = having
            .iter()
            .filter_map(|m| m.profile(profile))
            .map(|p| p.memory_mib * MIB)
            .max()
        else {
            return Ok(()); // the caller reports a profile missing from these models
        };
        if best >= mem {
            return Ok(());
        }
        let larger = smallest_fitting(&having, mem)
            .map(|(_, p)| format!(" (e.g. {})", p.name))
            .unwrap_or_default();
        Err(HintError::ProfileTooSmall {
            profile: profile.clone(),
            profile_mem: format_size(best),
            mem: format_size(mem),
            larger,
        })
    }
}

impl Hints {
    fn check_model(&self, models: &[&'static GpuModel]) -> Result<(), HintError> {
        let m = &self.model;
        if m.params.is_none() {
            if let Some(option) = m.given_without_params() {
                return Err(HintError::ModelWithoutParams { option });
            }
        }
        if let Some(spec) = m.spec() {
            // The count alone, not the whole estimate: job_submit estimates once, later.
            if let Err(e @ ModelError::KvHeads { kv_heads, .. }) =
                kv_heads_for(&shape_for(spec.params), spec.options.kv_heads)
            {
                return Err(bad_model(MIG_KV_HEADS, &kv_heads.to_string(), e.to_string()));
            }
            if spec.phase == Phase::Train && !spec.dtype.trainable() {
                let mut formats: Vec<String> = dtypes_on(models)
                    .into_iter()
                    .filter(|d| d.trainable())
                    .map(|d| d.to_string())
                    .collect();
                let last = formats.pop().unwrap_or_default();
                return Err(HintError::IntegerTraining {
                    dtype: spec.dtype,
                    formats: format!("{} or {last}", formats.join(", ")),
                });
            }
        }
        Ok(())
    }
}

/// The profile named `name` (case-insensitive) on one of `models`, excluding `+me`.
fn find_profile(models: &[&'static GpuModel], name: &str) -> Option<&'static ProfileSpec> {
    models
        .iter()
        .filter_map(|m| m.profile(name))
        .find(|p| !p.media_extensions)
}

/// Names of every profile dynmig schedules on `models` (their
/// [`GpuModel::schedulable_profiles`]: no `+me`), model by model, each smallest first,
/// without repeats: the "allowed" list of the messages.
///
/// ```
/// use dynmig_core::geometry::A100_80GB;
/// let names = dynmig_core::hints::profile_names(&[&A100_80GB]);
/// assert_eq!(names, ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]);
/// ```
pub fn profile_names(models: &[&'static GpuModel]) -> Vec<&'static str> {
    let mut names = Vec::new();
    for m in models {
        for p in m.schedulable_profiles() {
            if !names.contains(&p.name) {
                names.push(p.name);
            }
        }
    }
    names
}

/// Whether a profile is one that "smallest profile that fits" may pick: a classic profile
/// ([`ProfileSpec::is_classic`]: not `+me` nor another variant, not the 1-compute-slice
/// double-memory profile, ID [`crate::geometry::DOUBLE_MEMORY_1G_PROFILE_ID`] on the
/// seven-slice boards, e.g. `1g.20gb` on A100-80GB, which Slurm sites rarely create); users
/// get the others only by naming them.
pub fn auto_selectable(p: &ProfileSpec) -> bool {
    p.is_classic()
}

/// The one rule of "which profile serves `mem_bytes`": among `candidates` (each with a tag
/// the caller gets back: a model, an index), the [`auto_selectable`] profile whose usable
/// memory is at least `mem_bytes`, smallest by memory then compute slices; a tie goes to the
/// earlier candidate. job_submit ([`smallest_fitting`], [`smallest_fitting_where`]) and the
/// simulator (its cluster's profile indices) both ask it.
pub fn smallest_fitting_in<'p, T>(
    candidates: impl IntoIterator<Item = (T, &'p ProfileSpec)>,
    mem_bytes: u64,
) -> Option<(T, &'p ProfileSpec)> {
    candidates
        .into_iter()
        .filter(|(_, p)| auto_selectable(p) && p.memory_mib.saturating_mul(MIB) >= mem_bytes)
        .min_by_key(|(_, p)| (p.memory_mib, p.compute_slices))
}

/// [`smallest_fitting_in`] over the profiles of `models`. Ties between models go to the
/// earlier model.
pub fn smallest_fitting(
    models: &[&'static GpuModel],
    mem_bytes: u64,
) -> Option<(&'static GpuModel, &'static ProfileSpec)> {
    smallest_fitting_where(models, mem_bytes, |_, _| true)
}

/// [`smallest_fitting`] among the profiles `allowed` says yes to (the guarded default's
/// catalog, [`crate::protocol::catalog::Catalog::allows`]).
pub fn smallest_fitting_where(
    models: &[&'static GpuModel],
    mem_bytes: u64,
    allowed: impl Fn(&GpuModel, &ProfileSpec) -> bool,
) -> Option<(&'static GpuModel, &'static ProfileSpec)> {
    let candidates = models
        .iter()
        .flat_map(|m| m.profiles.iter().map(move |p| (*m, p)))
        .filter(|(m, p)| allowed(m, p));
    smallest_fitting_in(candidates, mem_bytes)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod model_tests;
