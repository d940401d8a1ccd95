//! The users' hints: `--mig-mem=<size>` and `--mig-profile=<name>`.
//!
//! The SPANK plugin registers both options and checks each value with [`parse_hint`] on the
//! login node, so a typo fails at `sbatch` time. Slurm then hands the values to slurmctld in
//! `job_desc->spank_job_env` as `_SLURM_SPANK_OPTION_dynmig_mig_mem=18G` and
//! `_SLURM_SPANK_OPTION_dynmig_mig_profile=2g.20gb` (notes/slurm.md); the job_submit plugin
//! reads them back with [`hints_from_spank_env`].
//!
//! - `--mig-mem` is the GPU memory the job needs, a size as [`crate::size::parse_size`] reads
//!   it (binary units; a bare number is MiB).
//! - `--mig-profile` names a MIG profile of a GPU model dynmig knows
//!   ([`crate::geometry::MODELS`]), case-insensitively; media-extension profiles (`+me`) are
//!   not scheduled by dynmig and are refused.
//!
//! Every [`HintError`] displays as the complete message for the user, starting `dynmig: `.

use crate::geometry::{GpuModel, ProfileSpec, MODELS};
use crate::size::{format_size, parse_size, SizeError, MIB};

/// Prefix of the SPANK option variables of the plugin named `dynmig` in `spank_job_env`.
pub const SPANK_ENV_PREFIX: &str = "_SLURM_SPANK_OPTION_dynmig_";

/// Option name (without `--`) of the memory hint.
pub const MIG_MEM: &str = "mig-mem";
/// Option name (without `--`) of the profile hint.
pub const MIG_PROFILE: &str = "mig-profile";

/// One hint, as read from one option.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hint {
    /// `--mig-mem`: GPU memory needed, in bytes.
    MigMem(u64),
    /// `--mig-profile`: a profile name, in the canonical (table) spelling, e.g. `"2g.20gb"`.
    MigProfile(String),
}

/// The hints of one job. Both may be given; see [`Hints::check`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hints {
    /// `--mig-mem` in bytes.
    pub mem_bytes: Option<u64>,
    /// `--mig-profile`, canonical spelling.
    pub profile: Option<String>,
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
    /// The option is not one of dynmig's.
    #[error("dynmig: unknown option --{option}; dynmig's options are --mig-mem and --mig-profile")]
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
                value: value.to_string(),
                source,
            }),
        MIG_PROFILE => find_profile(value.trim())
            .map(|p| Hint::MigProfile(p.name.to_string()))
            .ok_or_else(|| HintError::UnknownProfile {
                value: value.to_string(),
                allowed: all_profile_names().join(", "),
            }),
        _ => Err(HintError::UnknownOption {
            option: option.to_string(),
        }),
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
        }
    }

    /// Whether no hint was given.
    pub fn is_empty(&self) -> bool {
        self.mem_bytes.is_none() && self.profile.is_none()
    }

    /// The option the user gave, as `--mig-mem=18.0GiB` or `--mig-profile=2g.20gb` (the
    /// profile when both are given), for messages.
    pub fn describe(&self) -> Option<String> {
        match (&self.profile, self.mem_bytes) {
            (Some(p), _) => Some(format!("--{MIG_PROFILE}={p}")),
            (None, Some(b)) => Some(format!("--{MIG_MEM}={}", format_size(b))),
            (None, None) => None,
        }
    }

    /// When both hints are given, checks that the profile has at least the hinted memory on
    /// one of `models` that has the profile (the profile then wins).
    ///
    /// # Errors
    /// [`HintError::ProfileTooSmall`], suggesting the smallest profile that fits if any.
    pub fn check(&self, models: &[&'static GpuModel]) -> Result<(), HintError> {
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
    use crate::geometry::{A100_40GB, A100_80GB};
    use crate::size::GIB;

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
                profile: Some("3g.40gb".into())
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
        assert!(e.contains("--mig-profile=2g.20gb has 19.5GiB"), "{e}");
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
}
