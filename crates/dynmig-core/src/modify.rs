//! The job_submit decision for a job update (`scontrol update jobid=N gres=...`,
//! `job_modify` in the plugin).
//!
//! An update differs from a submit in two ways that decide the rules:
//! - its `job_desc` carries no `--mig-*` hint (the hints live in the job's SPANK
//!   environment, which the update does not send), and the job's own record is opaque to a
//!   plugin, so the hints the job was submitted with cannot be seen;
//! - the job's `AdminComment` is not the plugin's to change on an update: Slurm refuses an
//!   update that sets it from a user who is not an operator (Slurm's `_update_job` in
//!   `src/slurmctld/job_mgr.c`), and an operator's update would replace the whole comment.
//!   So an update never writes it; the plugin logs the decision instead.
//!
//! Rules ([`decide_update`]):
//! 1. A TRES field of the update with no GPU entry, or only `gpu:0`: nothing to do.
//! 2. A typed request (`gpu:2g.20gb:1`) is checked as at submit: a MIG profile of a
//!    configured model passes, a profile-shaped type no configured model has is refused, and
//!    another type (`a100`) is left to Slurm.
//! 3. An untyped request of more than one GPU is rewritten as at submit (whole-GPU profiles,
//!    or refused under `multi_gpu = "reject"`): whole GPUs do not depend on a memory hint.
//! 4. An untyped request of one GPU is refused ([`UpdateError::UntypedSingleGpu`]): at
//!    submit it would be sized by the job's hints, which the update cannot see, and a whole
//!    GPU would silently replace them. The message gives the typed form to use.
//! 5. On a Slurm release older than 23.02.6 ([`update_replaces_gpu_request`]), every update
//!    that names a GPU is refused ([`UpdateError::ReleaseKeepsOldRequest`], checked by
//!    [`check_release`] before the rules above): those releases merge the update into the
//!    job's old GRES request instead of replacing it (SchedMD bug 17184, fixed in 23.02.6:
//!    "Fix unintentional gres removal when validating the gres job state", Slurm's NEWS), so
//!    a job moved from `gpu:2g.20gb:1` to `gpu:3g.40gb:1` keeps asking for a 2g.20gb too,
//!    shows the new request in `TresPerNode`, and never starts on a node without both types.
//!    A plugin cannot see the job's old request (the job record is opaque to it), so it
//!    cannot tell a count change from a type change and refuses both; the message says to
//!    cancel and submit again.
//!
//! ```
//! use dynmig_core::config::Config;
//! use dynmig_core::modify::{decide_update, UpdateError};
//! use dynmig_core::submit::{JobRequest, Outcome};
//! let policy = dynmig_core::submit::SubmitPolicy::from_config(&Config::default_embedded());
//! let typed = JobRequest { tres_per_node: Some("gres:gpu:2g.20gb:1"), ..Default::default() };
//! assert!(matches!(decide_update(&typed, &policy), Ok(Outcome::Unchanged { .. })));
//! let single = JobRequest { tres_per_node: Some("gres:gpu:1"), ..Default::default() };
//! let e = decide_update(&single, &policy).unwrap_err();
//! assert!(matches!(e, UpdateError::UntypedSingleGpu { .. }));
//! assert!(e.to_string().contains("gres=gpu:2g.20gb:1"));
//! ```

use crate::gres::TresList;
use crate::submit::{decide, JobRequest, Outcome, SubmitError, SubmitPolicy};

/// An update dynmig refuses. Display is the complete message, starting `dynmig: `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UpdateError {
    /// Refused as a submit would be (a bad entry, an unknown profile, multi-GPU rejected).
    #[error(transparent)]
    Submit(#[from] SubmitError),
    /// One untyped GPU: the job's hints cannot be seen by an update.
    #[error(
        "dynmig: a job update cannot size an untyped GPU request ({option} {entry}): the job's \
         --mig-* hints are not visible to an update; name the MIG profile instead, e.g. \
         scontrol update jobid=<id> gres=gpu:{example}:1 (profiles: {available})"
    )]
    UntypedSingleGpu {
        /// The option behind the field, e.g. `--gres`.
        option: &'static str,
        /// The entry as read, e.g. `gres:gpu:1`.
        entry: String,
        /// A profile for the example.
        example: &'static str,
        /// Profiles of the configured models, smallest first.
        available: String,
    },
    /// Slurm before 23.02.6 would keep the job's old GPU request beside the new one (rule 5).
    #[error(
        "dynmig: Slurm {release} cannot change the GPU request of a submitted job ({option} {entry}): \
         it keeps the old request beside the new one and the job would never start (SchedMD bug \
         17184, fixed in Slurm 23.02.6); cancel the job and submit it again with the request you \
         want, e.g. sbatch --gres=gpu:3g.40gb:1 or --mig-mem=30G"
    )]
    ReleaseKeepsOldRequest {
        /// The running release, e.g. `22.05.8`.
        release: String,
        /// The option behind the field, e.g. `--gres`.
        option: &'static str,
        /// The GPU entry of the update, as read, cut.
        entry: String,
    },
}

/// The first Slurm release whose job update replaces a pending job's GRES request instead of
/// merging into it: 23.02.6 (`0xAABBCC` as in `SLURM_VERSION_NUMBER`). Source: SchedMD bug
/// 17184 and Slurm's NEWS for 23.02.6 ("Fix unintentional gres removal when validating the
/// gres job state"); seen on Debian's 22.05.8, where the merged job stays PENDING with
/// `ReqNodeNotAvail` for good (docs/architecture.md, "Job updates per release").
pub const GRES_UPDATE_REPLACES_SINCE: u32 = 0x17_02_06;

/// Whether a job update on Slurm `version` (`0xAABBCC`) replaces the job's GPU request, so
/// that a pending job can move to another MIG profile.
pub const fn update_replaces_gpu_request(version: u32) -> bool {
    version >= GRES_UPDATE_REPLACES_SINCE
}

/// `0xAABBCC` as `AA.BB.CC`.
pub fn release_name(version: u32) -> String {
    format!("{}.{:02}.{}", version >> 16, (version >> 8) & 0xff, version & 0xff)
}

/// Refuses an update that names a GPU on a Slurm release that would merge it into the job's
/// old request (rule 5 of the [module docs](self)); `Ok` for an update without a GPU entry
/// and on every release from [`GRES_UPDATE_REPLACES_SINCE`] on.
///
/// # Errors
/// [`UpdateError::ReleaseKeepsOldRequest`], with the entry and what to do instead.
pub fn check_release(req: &JobRequest, slurm_version: u32) -> Result<(), UpdateError> {
    if update_replaces_gpu_request(slurm_version) {
        return Ok(());
    }
    let fields = [
        ("--gres", req.tres_per_node),
        ("--gpus", req.tres_per_job),
        ("--gpus-per-socket", req.tres_per_socket),
        ("--gpus-per-task", req.tres_per_task),
    ];
    for (option, text) in fields {
        let Some(list) = text.and_then(|t| TresList::parse(t).ok()) else {
            continue;
        };
        let first = list.gpu_entries().next().map(|g| g.to_string());
        if let Some(entry) = first {
            return Err(UpdateError::ReleaseKeepsOldRequest {
                release: release_name(slurm_version),
                option,
                entry: crate::hints::shorten(&entry, 60),
            });
        }
    }
    Ok(())
}

/// Decides what happens to the GPU request of a job update. `req.spank_env` is ignored
/// (an update carries no hints). See the [module docs](self) for the rules.
///
/// # Errors
/// [`UpdateError`], whose Display is the message for the user and the log.
pub fn decide_update(req: &JobRequest, policy: &SubmitPolicy) -> Result<Outcome, UpdateError> {
    let bare = JobRequest {
        spank_env: Vec::new(),
        ..req.clone()
    };
    let fields = [
        ("--gres", bare.tres_per_node),
        ("--gpus", bare.tres_per_job),
        ("--gpus-per-socket", bare.tres_per_socket),
        ("--gpus-per-task", bare.tres_per_task),
    ];
    let mut untyped_single = None;
    let mut gpu_entries = 0;
    for (option, text) in fields {
        // A field that does not parse is reported by `decide` below.
        let Some(list) = text.and_then(|t| TresList::parse(t).ok()) else {
            continue;
        };
        for g in list.gpu_entries().filter(|g| g.count > 0) {
            gpu_entries += 1;
            if g.gres_type.is_none() && g.count == 1 {
                untyped_single = Some((option, g.to_string()));
            }
        }
    }
    // Several GPU entries are a conflict that `decide` reports as at submit.
    if let (Some((option, entry)), 1) = (untyped_single, gpu_entries) {
        if !policy.models.is_empty() {
            return Err(UpdateError::UntypedSingleGpu {
                option,
                entry,
                example: example_profile(policy),
                available: crate::submit::available_profiles(policy),
            });
        }
    }
    Ok(decide(&bare, policy)?)
}

/// A mid-sized profile for the example: the smallest holding 18 GiB, else the first model's
/// full profile.
fn example_profile(policy: &SubmitPolicy) -> &'static str {
    crate::hints::smallest_fitting(&policy.models, 18 << 30)
        .map(|(_, p)| p.name)
        .unwrap_or_else(|| policy.models[0].full_profile().name)
}

#[cfg(test)]
mod release_tests {
    use super::*;

    #[test]
    fn releases_before_23_02_6_refuse_every_gpu_update_and_later_ones_none() {
        let typed = JobRequest {
            tres_per_node: Some("gres:gpu:3g.40gb:1"),
            ..Default::default()
        };
        let e = check_release(&typed, 0x16_05_08).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("Slurm 22.05.8 cannot change"), "{msg}");
        assert!(msg.contains("--gres gres:gpu:3g.40gb:1"), "{msg}");
        assert!(msg.contains("cancel the job and submit it again"), "{msg}");
        let gpus = JobRequest {
            tres_per_job: Some("gres:gpu:2"),
            ..Default::default()
        };
        assert!(check_release(&gpus, 0x17_02_05).is_err());
        // A GPU count of zero is still merged (the old type stays): refused too.
        let zero = JobRequest {
            tres_per_node: Some("gres:gpu:0"),
            ..Default::default()
        };
        assert!(check_release(&zero, 0x16_05_08).is_err());
        // No GPU entry: Slurm's business.
        let other = JobRequest {
            tres_per_node: Some("gres:shard:2"),
            ..Default::default()
        };
        assert!(check_release(&other, 0x16_05_08).is_ok());
        for v in [0x17_02_06, 0x18_0b_05, 0x1a_05_05] {
            assert!(check_release(&typed, v).is_ok(), "{v:#x}");
        }
        assert_eq!(release_name(0x18_0b_05), "24.11.5");
    }
}
