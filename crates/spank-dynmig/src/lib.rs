//! SPANK plugin `dynmig`: adds `--mig-mem=<size>`, `--mig-profile=<name>` and the model
//! description options (`--mig-model-params`, `--mig-dtype`, `--mig-phase`, `--mig-batch`,
//! `--mig-seq`) to sbatch, salloc and srun.
//!
//! Built as `libspank_dynmig.so`; list it in plugstack.conf on login and compute nodes:
//! `optional /usr/lib/x86_64-linux-gnu/slurm-wlm/libspank_dynmig.so`.
//!
//! The values are checked with [`dynmig_core::hints::parse_hint`] (and the pair with
//! [`dynmig_core::hints::Hints::check`]) in the allocator (sbatch/salloc) and local (srun)
//! contexts, so a bad hint fails on the login node with the core's message. Slurm then
//! forwards each option set to slurmctld in `job_desc->spank_job_env` as
//! `_SLURM_SPANK_OPTION_dynmig_mig_mem=VALUE`, where job_submit/dynmig reads it.
//!
//! Each value is checked alone in Slurm's option callback ([`VALIDATORS`]): a callback that
//! fails makes sbatch/salloc/srun stop while parsing the command line, so the job is not
//! sent and the user sees the message once. The pair checks (a profile smaller than
//! `--mig-mem`, model options without `--mig-model-params`) run in `init_post_opt`; with
//! `optional` in plugstack.conf Slurm may go on after that failure, and job_submit/dynmig
//! then refuses the job with the same message.
//!
//! The plugin does not read dynmig.toml, so it does not know the cluster's GPU models
//! ([`dynmig_core::hints::parse_hint`]): it refuses what is wrong on every cluster (not a
//! size, not a profile name, a `+me` profile, an unknown number format) and lets a profile
//! of the right shape (`5g.50gb`) and `--mig-dtype=fp8` through. job_submit/dynmig in
//! slurmctld checks them against the configured models and refuses the job at sbatch time
//! with a message that lists only those models' profiles and formats. A login node's copy of
//! the configuration may be missing, unreadable or older than slurmctld's, and the
//! `DYNMIG_CONFIG` variable there is the user's: one list, slurmctld's, is never wrong
//! (docs/architecture.md, "Where a hint is checked").

use std::error::Error;
use std::ffi::OsStr;

use dynmig_core::geometry::MODELS;
use dynmig_core::hints::{
    parse_hint, Hints, MIG_ACT_PER_SAMPLE, MIG_ATTENTION, MIG_BATCH, MIG_DTYPE, MIG_KV_HEADS, MIG_LORA_RANK, MIG_MEM,
    MIG_MODEL_PARAMS, MIG_OPTIMIZER, MIG_PHASE, MIG_PROFILE, MIG_SEQ, MIG_VOCAB, OPTIONS,
};
use slurm_spank::{
    spank_log_error, Context, OptionValidator, Plugin, SpankHandle, SpankOption, SLURM_VERSION_NUMBER, SPANK_PLUGIN,
};

SPANK_PLUGIN!(b"dynmig", SLURM_VERSION_NUMBER, DynMig);

/// Usage text of `--mig-mem` in `sbatch --help`.
pub const MIG_MEM_USAGE: &str = "GPU memory the job needs (e.g. 18G; K/M/G/T, binary units, \
    bare number = MiB); dynmig runs it on the smallest MIG instance that fits";
/// Usage text of `--mig-profile` in `sbatch --help`.
pub const MIG_PROFILE_USAGE: &str =
    "MIG profile to run on (e.g. 2g.20gb; checked against this cluster's GPUs at submission); overrides --mig-mem";

/// Usage text and value name of every option, in [`OPTIONS`] order.
pub fn usage(option: &str) -> (&'static str, &'static str) {
    match option {
        MIG_MEM => ("size", MIG_MEM_USAGE),
        MIG_PROFILE => ("name", MIG_PROFILE_USAGE),
        MIG_MODEL_PARAMS => ("count", "model parameters for dynmig's memory estimate (e.g. 7B, 350M)"),
        MIG_DTYPE => (
            "type",
            "model number format: fp32, fp16, bf16 (default), fp8 (Hopper and later GPUs), int8, int4",
        ),
        MIG_PHASE => ("phase", "train (default; Adam) or infer"),
        MIG_BATCH => ("n", "batch size for the memory estimate (default 1)"),
        MIG_SEQ => ("n", "sequence length for the memory estimate (default 2048)"),
        MIG_OPTIMIZER => (
            "name",
            "optimizer of a training job: adamw (default), sgd, adam8bit, none (state off the GPU)",
        ),
        MIG_ATTENTION => ("kind", "attention: fused (default; FlashAttention, SDPA) or eager"),
        MIG_VOCAB => ("n", "vocabulary size in tokens for the logits (default 32000)"),
        MIG_KV_HEADS => (
            "n",
            "key/value heads, for grouped-query attention (default: as many as attention heads)",
        ),
        MIG_LORA_RANK => ("r", "LoRA rank of a fine-tuning job (default: every weight trained)"),
        MIG_ACT_PER_SAMPLE => (
            "size",
            "activations one sample keeps, for a model that is not a transformer (e.g. a CNN: 100M)",
        ),
        _ => ("value", "dynmig option"),
    }
}

/// Checks every option given, as (name without `--`, value) pairs.
///
/// # Errors
/// The core's [`dynmig_core::hints::HintError`].
pub fn check_all(values: &[(&str, Option<String>)]) -> Result<Hints, Box<dyn Error>> {
    let mut hints = Hints::default();
    for (option, value) in values {
        if let Some(value) = value {
            hints.set(parse_hint(option, value)?);
        }
    }
    hints.check(MODELS)?;
    Ok(hints)
}

/// Checks the value of `--OPTIONS[I]` alone, as Slurm parses the command line.
///
/// # Errors
/// The core's message (the user's value cut to 100 characters): not UTF-8, missing, or
/// not a valid value for the option.
pub fn check_value<const I: usize>(value: Option<&OsStr>) -> Result<(), String> {
    let option = OPTIONS[I];
    let Some(value) = value else {
        return Err(format!("dynmig: --{option} needs a value"));
    };
    let Some(text) = value.to_str() else {
        return Err(format!("dynmig: --{option}: the value is not UTF-8 text"));
    };
    parse_hint(option, text).map(|_| ()).map_err(|e| e.to_string())
}

/// The validator of each option, in [`OPTIONS`] order.
pub const VALIDATORS: [OptionValidator; 13] = [
    check_value::<0>,
    check_value::<1>,
    check_value::<2>,
    check_value::<3>,
    check_value::<4>,
    check_value::<5>,
    check_value::<6>,
    check_value::<7>,
    check_value::<8>,
    check_value::<9>,
    check_value::<10>,
    check_value::<11>,
    check_value::<12>,
];

/// The plugin; holds nothing between callbacks.
#[derive(Default)]
pub struct DynMig;

/// Checks the values the user gave; `None` = option not given.
///
/// # Errors
/// The core's [`dynmig_core::hints::HintError`]: a bad size, an unknown profile, or a
/// profile smaller than `--mig-mem`.
pub fn check_options(mem: Option<&str>, profile: Option<&str>) -> Result<Hints, Box<dyn Error>> {
    let mut hints = Hints::default();
    for (option, value) in [(MIG_MEM, mem), (MIG_PROFILE, profile)] {
        if let Some(value) = value {
            hints.set(parse_hint(option, value)?);
        }
    }
    hints.check(MODELS)?;
    Ok(hints)
}

// SAFETY: the plugin starts no threads and keeps no state across fork.
unsafe impl Plugin for DynMig {
    fn init(&mut self, spank: &mut SpankHandle) -> Result<(), Box<dyn Error>> {
        if matches!(spank.context()?, Context::Allocator | Context::Local | Context::Remote) {
            for (option, check) in OPTIONS.into_iter().zip(VALIDATORS) {
                let (value, text) = usage(option);
                // The validator runs in Slurm's option callback: a bad value makes sbatch,
                // salloc or srun fail there, before the job is sent, whether the plugin is
                // `required` or `optional` in plugstack.conf.
                spank.register_option(SpankOption::new(option).takes_value(value).usage(text).validate(check))?;
            }
        }
        Ok(())
    }

    fn init_post_opt(&mut self, spank: &mut SpankHandle) -> Result<(), Box<dyn Error>> {
        if !matches!(spank.context()?, Context::Allocator | Context::Local) {
            return Ok(());
        }
        let mut values = Vec::new();
        for option in OPTIONS {
            values.push((option, spank.get_option_value(option)?.map(|v| v.into_owned())));
        }
        check_all(&values)?;
        Ok(())
    }

    /// The core's messages are complete; the default would repeat their source after ": ".
    fn report_error(&self, _spank: &mut SpankHandle, error: &dyn Error) {
        spank_log_error!("{}", error);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_good_hints() {
        let h = check_options(Some("18G"), None).unwrap();
        assert_eq!(h.mem_bytes, Some(18 << 30));
        let h = check_options(None, Some("2G.20GB")).unwrap();
        assert_eq!(h.profile.as_deref(), Some("2g.20gb"));
        assert!(check_options(None, None).unwrap().is_empty());
    }

    #[test]
    fn model_options_use_the_same_parser() {
        let ok = check_all(&[(MIG_MODEL_PARAMS, Some("7B".into())), (MIG_PHASE, Some("infer".into()))]).unwrap();
        assert_eq!(ok.model.params, Some(7_000_000_000));
        let e = check_all(&[(MIG_SEQ, Some("512".into()))]).unwrap_err().to_string();
        assert!(e.contains("give --mig-model-params too"), "{e}");
        assert_eq!(OPTIONS.iter().filter(|o| usage(o).1 == "dynmig option").count(), 0);
    }

    #[test]
    fn a_bad_value_fails_in_the_option_callback_validator() {
        let check = VALIDATORS[OPTIONS.iter().position(|o| *o == MIG_MEM).unwrap()];
        assert_eq!(check(Some(OsStr::new("18G"))), Ok(()));
        let e = check(Some(OsStr::new("18Q"))).unwrap_err();
        assert!(e.starts_with("dynmig: --mig-mem=18Q"), "{e}");
        let long = format!("1{}", "Q".repeat(10_000));
        assert!(check(Some(OsStr::new(&long))).unwrap_err().len() < 500);
        assert!(check(None).unwrap_err().contains("needs a value"));
        use std::os::unix::ffi::OsStrExt;
        assert!(check(Some(OsStr::from_bytes(b"1\xff")))
            .unwrap_err()
            .contains("not UTF-8"));
        for (i, option) in OPTIONS.iter().enumerate() {
            let e = VALIDATORS[i](Some(OsStr::new("bogus!"))).unwrap_err();
            assert!(e.contains(&format!("--{option}")), "validator {i} checks {option}: {e}");
        }
    }

    #[test]
    fn rejects_bad_hints_with_core_message() {
        let e = check_options(Some("18Q"), None).unwrap_err().to_string();
        assert!(e.starts_with("dynmig: --mig-mem=18Q"), "{e}");
        let e = check_options(None, Some("9gb")).unwrap_err().to_string();
        assert!(e.contains("unknown MIG profile"), "{e}");
        let e = check_options(Some("30G"), Some("1g.10gb")).unwrap_err();
        assert!(e.to_string().starts_with("dynmig: "), "{e}");
    }

    /// Issue 25: the login node does not know the cluster's models, so it never lists
    /// profiles (it listed ~40 of every model); a profile of the right shape and fp8 are
    /// left to job_submit/dynmig, which checks them against the configuration.
    #[test]
    fn the_login_node_checks_the_shape_and_lists_no_profiles() {
        let profile = VALIDATORS[OPTIONS.iter().position(|o| *o == MIG_PROFILE).unwrap()];
        assert_eq!(profile(Some(OsStr::new("5g.50gb"))), Ok(()));
        assert_eq!(
            check_options(None, Some("5G.50GB")).unwrap().profile.as_deref(),
            Some("5g.50gb")
        );
        for bad in ["big", "1g.10gb+me", "5g"] {
            let e = profile(Some(OsStr::new(bad))).unwrap_err();
            assert!(
                e.starts_with(&format!("dynmig: --mig-profile={bad}: unknown MIG profile")),
                "{e}"
            );
            assert!(!e.contains("allowed") && !e.contains("1g.5gb"), "{e}");
        }
        let dtype = VALIDATORS[OPTIONS.iter().position(|o| *o == MIG_DTYPE).unwrap()];
        assert_eq!(dtype(Some(OsStr::new("fp8"))), Ok(()));
        let e = dtype(Some(OsStr::new("fp4"))).unwrap_err();
        assert!(e.ends_with("allowed: fp32, fp16, bf16, fp8, int8, int4"), "{e}");
        assert!(usage(MIG_DTYPE).1.contains("fp8"));
    }

    /// Issue 25: the value quoted in a message has its control characters escaped.
    #[test]
    fn a_quoted_value_has_its_control_characters_escaped() {
        let mem = VALIDATORS[OPTIONS.iter().position(|o| *o == MIG_MEM).unwrap()];
        let e = mem(Some(OsStr::new("18\n\x1b[2JQ"))).unwrap_err();
        assert!(e.starts_with("dynmig: --mig-mem=18\\n\\x1b[2JQ:"), "{e}");
        assert!(!e.chars().any(char::is_control), "{e}");
    }
}
