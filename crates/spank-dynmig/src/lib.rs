//! SPANK plugin `dynmig`: adds `--mig-mem=<size>` and `--mig-profile=<name>` to sbatch,
//! salloc and srun.
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
//! With `required` in plugstack.conf a bad value stops sbatch before anything is sent;
//! with `optional`, Slurm ignores the plugin's failure, prints the message and submits,
//! and job_submit/dynmig then rejects the job with the same message.

use std::error::Error;

use dynmig_core::geometry::MODELS;
use dynmig_core::hints::{parse_hint, Hints, MIG_MEM, MIG_PROFILE};
use slurm_spank::{spank_log_error, Context, Plugin, SpankHandle, SpankOption, SLURM_VERSION_NUMBER, SPANK_PLUGIN};

SPANK_PLUGIN!(b"dynmig", SLURM_VERSION_NUMBER, DynMig);

/// Usage text of `--mig-mem` in `sbatch --help`.
pub const MIG_MEM_USAGE: &str = "GPU memory the job needs (e.g. 18G; K/M/G/T, binary units, \
    bare number = MiB); dynmig runs it on the smallest MIG instance that fits";
/// Usage text of `--mig-profile` in `sbatch --help`.
pub const MIG_PROFILE_USAGE: &str = "MIG profile to run on (e.g. 2g.20gb); overrides --mig-mem";

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
            spank.register_option(SpankOption::new(MIG_MEM).takes_value("size").usage(MIG_MEM_USAGE))?;
            spank.register_option(
                SpankOption::new(MIG_PROFILE)
                    .takes_value("name")
                    .usage(MIG_PROFILE_USAGE),
            )?;
        }
        Ok(())
    }

    fn init_post_opt(&mut self, spank: &mut SpankHandle) -> Result<(), Box<dyn Error>> {
        if !matches!(spank.context()?, Context::Allocator | Context::Local) {
            return Ok(());
        }
        let mem = spank.get_option_value(MIG_MEM)?.map(|v| v.into_owned());
        let profile = spank.get_option_value(MIG_PROFILE)?.map(|v| v.into_owned());
        check_options(mem.as_deref(), profile.as_deref())?;
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
    fn rejects_bad_hints_with_core_message() {
        let e = check_options(Some("18Q"), None).unwrap_err().to_string();
        assert!(e.starts_with("dynmig: --mig-mem=18Q"), "{e}");
        let e = check_options(None, Some("9g.99gb")).unwrap_err().to_string();
        assert!(e.contains("unknown MIG profile"), "{e}");
        let e = check_options(Some("30G"), Some("1g.10gb")).unwrap_err();
        assert!(e.to_string().starts_with("dynmig: "), "{e}");
    }
}
