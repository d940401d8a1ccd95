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
//! - `--mig-profile` names a MIG profile of a GPU model dynmig knows
//!   ([`crate::geometry::MODELS`]), case-insensitively; media-extension profiles (`+me`) are
//!   not scheduled by dynmig and are refused.
//! - `--mig-model-params` is the model's parameter count (`7B`, `350M`; 1M to 2T);
//!   `--mig-dtype` one of fp32, fp16, bf16, int8, int4 (default bf16); `--mig-phase` train or
//!   infer (default train); `--mig-batch` 1 to 65536 (default 1); `--mig-seq` 1 to 1Mi tokens
//!   (default 2048). The last four need `--mig-model-params`; int8/int4 are for inference.
//!
//! Every [`HintError`] displays as the complete message for the user, starting `dynmig: `;
//! the user's value is quoted cut to [`MAX_QUOTED`] characters.

use crate::estimate::model_formula::{
    parse_params, Dtype, ModelSpec, Phase, DEFAULT_BATCH, DEFAULT_SEQ, MAX_BATCH, MAX_SEQ,
};
use crate::geometry::{GpuModel, ProfileSpec, MODELS};
use crate::size::{format_size, parse_size, SizeError, MIB};

/// The most characters of a user's value that a message quotes; longer values are cut and
/// end in `...`.
pub const MAX_QUOTED: usize = 100;

/// `text` cut to at most `max` characters (at a character boundary), with `...` appended
/// when something was cut; for quoting user strings in messages.
///
/// ```
/// assert_eq!(dynmig_core::hints::shorten("abcdef", 3), "abc...");
/// assert_eq!(dynmig_core::hints::shorten("abc", 3), "abc");
/// ```
pub fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_string(),
    }
}

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
/// Every option of dynmig, without `--`, in the order `sbatch --help` lists them.
pub const OPTIONS: [&str; 7] = [
    MIG_MEM,
    MIG_PROFILE,
    MIG_MODEL_PARAMS,
    MIG_DTYPE,
    MIG_PHASE,
    MIG_BATCH,
    MIG_SEQ,
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
}

impl ModelHints {
    /// Whether any model option was given.
    pub fn any(&self) -> bool {
        self.params.is_some()
            || self.dtype.is_some()
            || self.phase.is_some()
            || self.batch.is_some()
            || self.seq.is_some()
    }

    /// The model with the defaults filled in (bf16, train, batch 1, seq 2048), when
    /// `--mig-model-params` was given.
    pub fn spec(&self) -> Option<ModelSpec> {
        Some(ModelSpec {
            params: self.params?,
            dtype: self.dtype.unwrap_or(Dtype::Bf16),
            phase: self.phase.unwrap_or(Phase::Train),
            batch: self.batch.unwrap_or(DEFAULT_BATCH),
            seq: self.seq.unwrap_or(DEFAULT_SEQ),
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
    /// `--mig-profile` names no profile of a known GPU model.
    #[error("dynmig: --mig-profile={value}: unknown MIG profile; allowed: {allowed}")]
    UnknownProfile {
        /// The value as given.
        value: String,
        /// Every profile name dynmig schedules, comma separated.
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
    #[error("dynmig: --mig-dtype={dtype} with --mig-phase=train: training in {dtype} is not supported; train in fp32, fp16 or bf16")]
    IntegerTraining {
        /// The dtype.
        dtype: Dtype,
    },
    /// The option is not one of dynmig's.
    #[error("dynmig: unknown option --{option}; dynmig's options are --mig-mem, --mig-profile, --mig-model-params, --mig-dtype, --mig-phase, --mig-batch and --mig-seq")]
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

/// Checks one option's value: `option` is the name without `--` (`"mig-mem"`,
/// `"mig-profile"`; the underscore forms of the SPANK variables are accepted too).
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
    match option.replace('_', "-").as_str() {
        MIG_MEM => parse_size(value)
            .map(Hint::MigMem)
            .map_err(|source| HintError::BadSize {
                value: shorten(value, MAX_QUOTED),
                source: shorten_size_error(source),
            }),
        MIG_PROFILE => find_profile(value.trim())
            .map(|p| Hint::MigProfile(p.name.to_string()))
            .ok_or_else(|| HintError::UnknownProfile {
                value: shorten(value, MAX_QUOTED),
                allowed: all_profile_names().join(", "),
            }),
        MIG_MODEL_PARAMS => parse_params(value)
            .map(Hint::ModelParams)
            .map_err(|reason| bad_model(MIG_MODEL_PARAMS, value, reason)),
        MIG_DTYPE => Dtype::parse(value).map(Hint::Dtype).ok_or_else(|| {
            let allowed: Vec<String> = Dtype::ALL.iter().map(|d| d.to_string()).collect();
            bad_model(
                MIG_DTYPE,
                value,
                format!("unknown number format; allowed: {}", allowed.join(", ")),
            )
        }),
        MIG_PHASE => Phase::parse(value)
            .map(Hint::Phase)
            .ok_or_else(|| bad_model(MIG_PHASE, value, "unknown phase; allowed: train, infer".into())),
        MIG_BATCH => count(MIG_BATCH, value, MAX_BATCH).map(Hint::Batch),
        MIG_SEQ => count(MIG_SEQ, value, MAX_SEQ).map(Hint::Seq),
        _ => Err(HintError::UnknownOption {
            option: shorten(option, MAX_QUOTED),
        }),
    }
}

fn bad_model(option: &'static str, value: &str, reason: String) -> HintError {
    // Some reasons quote the (trimmed) value: cut it there too.
    let mut reason = reason;
    for v in [value, value.trim()] {
        if v.chars().count() > MAX_QUOTED {
            reason = reason.replace(v, &shorten(v, MAX_QUOTED));
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
/// [`Hints::check`].
///
/// # Errors
/// The first bad value, or a profile smaller than the memory hint.
pub fn hints_from_spank_env(entries: &[&str]) -> Result<Hints, HintError> {
    let mut hints = Hints::default();
    for entry in entries {
        let Some((name, value)) = entry.split_once('=') else {
            continue;
        };
        let Some(option) = name.strip_prefix(SPANK_ENV_PREFIX) else {
            continue;
        };
        match parse_hint(option, value) {
            Ok(hint) => hints.set(hint),
            Err(HintError::UnknownOption { .. }) => continue,
            Err(e) => return Err(e),
        }
    }
    hints.check(MODELS)?;
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
    /// [`HintError::ProfileTooSmall`], suggesting the smallest profile that fits if any.
    /// Also checks the model options: the others need `--mig-model-params`, and int8/int4
    /// are for inference only.
    pub fn check(&self, models: &[&'static GpuModel]) -> Result<(), HintError> {
        self.check_model()?;
        let (Some(profile), Some(mem)) = (&self.profile, self.mem_bytes) else {
            return Ok(());
        };
        let specs: Vec<_> = models.iter().filter_map(|m| m.profile(profile)).collect();
        let Some(best) = specs.iter().map(|p| p.memory_mib * MIB).max() else {
            return Ok(()); // the caller reports a profile missing from these models
        };
        if best >= mem {
            return Ok(());
        }
        let larger = smallest_fitting(models, mem)
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
    fn check_model(&self) -> Result<(), HintError> {
        let m = &self.model;
        if m.params.is_none() {
            let given = [
                (MIG_DTYPE, m.dtype.is_some()),
                (MIG_PHASE, m.phase.is_some()),
                (MIG_BATCH, m.batch.is_some()),
                (MIG_SEQ, m.seq.is_some()),
            ];
            if let Some((option, _)) = given.iter().find(|(_, g)| *g) {
                return Err(HintError::ModelWithoutParams { option });
            }
        }
        if let Some(spec) = m.spec() {
            if spec.phase == Phase::Train && matches!(spec.dtype, Dtype::Int8 | Dtype::Int4) {
                return Err(HintError::IntegerTraining { dtype: spec.dtype });
            }
        }
        Ok(())
    }
}

/// The profile named `name` (case-insensitive) on any known model, excluding `+me`.
fn find_profile(name: &str) -> Option<&'static ProfileSpec> {
    MODELS
        .iter()
        .filter_map(|m| m.profile(name))
        .find(|p| !p.media_extensions)
}

/// Names of every profile dynmig schedules on any known model, smallest first, without
/// repeats.
pub fn all_profile_names() -> Vec<&'static str> {
    let mut names = Vec::new();
    for m in MODELS {
        for p in m.schedulable_profiles() {
            if !names.contains(&p.name) {
                names.push(p.name);
            }
        }
    }
    names
}

/// Whether a profile is one that "smallest profile that fits" may pick: not `+me`, and not
/// the 1-compute-slice double-memory profile (ID 15, e.g. `1g.20gb` on A100-80GB), which
/// Slurm sites rarely create; users get it only by naming it.
pub fn auto_selectable(p: &ProfileSpec) -> bool {
    !p.media_extensions && p.id != 15
}

/// The smallest [`auto_selectable`] profile, by memory then compute slices, over `models`
/// whose usable memory is at least `mem_bytes`. Ties between models go to the earlier model.
pub fn smallest_fitting(
    models: &[&'static GpuModel],
    mem_bytes: u64,
) -> Option<(&'static GpuModel, &'static ProfileSpec)> {
    models
        .iter()
        .flat_map(|m| m.schedulable_profiles().into_iter().map(move |p| (*m, p)))
        .filter(|(_, p)| auto_selectable(p) && p.memory_mib * MIB >= mem_bytes)
        .min_by_key(|(_, p)| (p.memory_mib, p.compute_slices))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::{A100_40GB, A100_80GB, H200_141GB};
    use crate::size::{GIB, MIB};

    #[test]
    fn parses_both_options() {
        assert_eq!(parse_hint("mig-mem", "18G"), Ok(Hint::MigMem(18 * GIB)));
        assert_eq!(parse_hint("mig_mem", "18G"), Ok(Hint::MigMem(18 * GIB)));
        assert_eq!(
            parse_hint("mig-profile", "2G.20GB"),
            Ok(Hint::MigProfile("2g.20gb".into()))
        );
    }

    #[test]
    fn messages_say_what_is_wrong_and_allowed() {
        let e = parse_hint("mig-profile", "9g.1gb").unwrap_err().to_string();
        assert!(
            e.starts_with("dynmig: --mig-profile=9g.1gb: unknown MIG profile; allowed: 1g.5gb,"),
            "{e}"
        );
        assert!(e.contains("2g.20gb") && e.contains("7g.80gb"), "{e}");
        assert!(!e.contains("+me"), "{e}");
        let e = parse_hint("mig-profile", "1g.10gb+me").unwrap_err();
        assert!(matches!(e, HintError::UnknownProfile { .. }));
        let e = parse_hint("mig-mem", "-1G").unwrap_err().to_string();
        assert_eq!(
            e,
            "dynmig: --mig-mem=-1G: a size cannot be negative, e.g. --mig-mem=18G"
        );
        let e = parse_hint("mig-model", "x").unwrap_err().to_string();
        assert!(e.contains("unknown option --mig-model"), "{e}");
    }

    #[test]
    fn spank_env_entries() {
        let env = [
            "OTHER=1",
            "_SLURM_SPANK_OPTION_other_mig_mem=99Q",
            "_SLURM_SPANK_OPTION_dynmig_mig_mem=4G",
            "_SLURM_SPANK_OPTION_dynmig_future_option=1",
            "_SLURM_SPANK_OPTION_dynmig_mig_mem=18G",
            "_SLURM_SPANK_OPTION_dynmig_mig_profile=3g.40gb",
        ];
        let h = hints_from_spank_env(&env).unwrap();
        assert_eq!(
            h,
            Hints {
                mem_bytes: Some(18 * GIB),
                profile: Some("3g.40gb".into()),
                model: ModelHints::default(),
            }
        );
        assert!(hints_from_spank_env(&[]).unwrap().is_empty());
        let bad = ["_SLURM_SPANK_OPTION_dynmig_mig_mem=18Q"];
        assert!(hints_from_spank_env(&bad)
            .unwrap_err()
            .to_string()
            .contains("unknown unit 'Q'"));
    }

    #[test]
    fn profile_must_hold_the_memory_hint() {
        let env = [
            "_SLURM_SPANK_OPTION_dynmig_mig_mem=30G",
            "_SLURM_SPANK_OPTION_dynmig_mig_profile=2g.20gb",
        ];
        let e = hints_from_spank_env(&env).unwrap_err().to_string();
        // The largest 2g.20gb of the known models: the H100's 20096 MiB (NVML).
        assert!(e.contains("--mig-profile=2g.20gb has 19.6GiB"), "{e}");
        // The smallest profile holding 30G over every known model (H200's 2g.35gb).
        assert!(e.contains("(e.g. 2g.35gb)"), "{e}");
    }

    #[test]
    fn smallest_fitting_skips_double_memory_1g() {
        let m = [&A100_80GB];
        assert_eq!(smallest_fitting(&m, 18 * GIB).unwrap().1.name, "2g.20gb");
        assert_eq!(smallest_fitting(&m, 9 * GIB).unwrap().1.name, "1g.10gb");
        assert_eq!(smallest_fitting(&m, 20 * GIB).unwrap().1.name, "3g.40gb");
        assert!(smallest_fitting(&m, 80 * GIB).is_none());
        let both = [&A100_40GB, &A100_80GB];
        assert_eq!(smallest_fitting(&both, 4 * GIB).unwrap().1.name, "1g.5gb");
        assert_eq!(smallest_fitting(&both, 18 * GIB).unwrap().1.name, "2g.20gb");
    }

    /// The H200's 1g.18gb holds 16384 MiB as NVML reports it (docs/results/hardware-2026-11-26.md),
    /// not the nominal 17472 the table held before: a job between the two needs a 2g.35gb.
    #[test]
    fn h200_one_slice_holds_what_nvml_reports() {
        let m = [&H200_141GB];
        assert_eq!(smallest_fitting(&m, 16384 * MIB).unwrap().1.name, "1g.18gb");
        assert_eq!(smallest_fitting(&m, 17000 * MIB).unwrap().1.name, "2g.35gb");
        assert_eq!(smallest_fitting(&m, 33281 * MIB).unwrap().1.name, "3g.71gb");
    }
}

#[cfg(test)]
mod model_tests {
    use super::*;

    #[test]
    fn model_options() {
        let env = [
            "_SLURM_SPANK_OPTION_dynmig_mig_model_params=7B",
            "_SLURM_SPANK_OPTION_dynmig_mig_dtype=BF16",
            "_SLURM_SPANK_OPTION_dynmig_mig_phase=infer",
            "_SLURM_SPANK_OPTION_dynmig_mig_batch=4",
            "_SLURM_SPANK_OPTION_dynmig_mig_seq=4096",
        ];
        let h = hints_from_spank_env(&env).unwrap();
        let spec = h.model.spec().unwrap();
        assert_eq!(
            (spec.params, spec.dtype, spec.phase, spec.batch, spec.seq),
            (7_000_000_000, Dtype::Bf16, Phase::Infer, 4, 4096)
        );
        assert!(!h.is_empty());
        assert_eq!(h.describe().as_deref(), Some("--mig-model-params=7000000000"));
    }

    #[test]
    fn bad_model_options_say_what_is_allowed() {
        let e = parse_hint("mig-dtype", "fp8").unwrap_err().to_string();
        assert_eq!(
            e,
            "dynmig: --mig-dtype=fp8: unknown number format; allowed: fp32, fp16, bf16, int8, int4"
        );
        let e = parse_hint("mig-phase", "serve").unwrap_err().to_string();
        assert!(e.ends_with("allowed: train, infer"), "{e}");
        let e = parse_hint("mig-batch", "0").unwrap_err().to_string();
        assert_eq!(e, "dynmig: --mig-batch=0: not a whole number from 1 to 65536");
        assert!(parse_hint("mig-seq", "99999999").is_err());
        let e = parse_hint("mig-model-params", "5000T").unwrap_err().to_string();
        assert!(e.contains("more than any GPU holds"), "{e}");
        let e = hints_from_spank_env(&["_SLURM_SPANK_OPTION_dynmig_mig_seq=128"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--mig-seq describes a model: give --mig-model-params too"),
            "{e}"
        );
        let env = [
            "_SLURM_SPANK_OPTION_dynmig_mig_model_params=7B",
            "_SLURM_SPANK_OPTION_dynmig_mig_dtype=int4",
        ];
        let e = hints_from_spank_env(&env).unwrap_err().to_string();
        assert!(e.contains("training in int4 is not supported"), "{e}");
    }
}
