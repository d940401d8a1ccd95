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
