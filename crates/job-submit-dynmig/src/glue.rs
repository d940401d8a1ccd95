//! `job_desc_msg_t` <-> core types: reads the GPU request and the SPANK hints out of the job
//! description, calls the core ([`dynmig_core::submit`] for a submit,
//! [`dynmig_core::modify`] for an update), and writes the outcome back.
//!
//! Every string written into `job_desc` or `*err_msg` is allocated with Slurm's allocator
//! ([`crate::xalloc`]); every string replaced is freed with it. The job's `admin_comment`
//! is written only at submit, only when it is empty, and only as a
//! [`DecisionRecord::encode`] text; an update never touches it.

use std::borrow::Cow;
use std::ffi::c_char;

use dynmig_core::hints::{shorten, MAX_QUOTED};
use dynmig_core::modify::{check_release, decide_update, UpdateError};
use dynmig_core::protocol::decision::DecisionRecord;
use dynmig_core::submit::{JobRequest, Outcome, Rewrite, SubmitError};
use slurm_sys::job_desc_msg_t;

use crate::state::{self, Ready};
use crate::xalloc;

/// Separator used when a message is appended to an `err_msg` set by an earlier plugin.
pub const SEP: &str = "; ";

/// What [`submit`] or [`update`] did to a job description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handled {
    /// The job asks for no GPU.
    NoGpu,
    /// The GPU request was left as it is, for the given reason (for the log).
    Unchanged(String),
    /// The GPU request was rewritten as `record` says.
    Rewritten {
        /// The decision.
        record: DecisionRecord,
        /// Whether the record was written into `admin_comment` (only at submit, and only
        /// when the comment was empty).
        in_admin_comment: bool,
    },
}

/// Why a job (or an update) is refused. Display is the complete message for the user,
/// starting `dynmig: `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Refused by the submit decision.
    #[error(transparent)]
    Submit(#[from] SubmitError),
    /// Refused by the update decision.
    #[error(transparent)]
    Update(#[from] UpdateError),
    /// A TRES field holds bytes that are not UTF-8 and the job asks for a GPU.
    #[error(
        "dynmig: {option}: the request '{shown}' holds bytes that are not UTF-8 text; write \
         GPU requests in ASCII, e.g. {option}=gpu:1"
    )]
    NotUtf8 {
        /// The option behind the field, e.g. `--gres`.
        option: &'static str,
        /// The field, invalid bytes shown as U+FFFD, cut to 100 characters.
        shown: String,
    },
}

/// The TRES fields and SPANK environment of a job description, borrowed for one call.
/// A field that is not UTF-8 is read lossily and remembered, so that it is never treated
/// as absent.
#[derive(Debug)]
pub struct Fields<'a> {
    tres: [Option<Cow<'a, str>>; 4],
    not_utf8: Option<&'static str>,
    spank_env: Vec<&'a str>,
}

/// The options behind `tres_per_node`, `tres_per_job`, `tres_per_socket`, `tres_per_task`.
const OPTIONS: [&str; 4] = ["--gres", "--gpus", "--gpus-per-socket", "--gpus-per-task"];

impl Fields<'_> {
    /// The request the core reads.
    pub fn request(&self) -> JobRequest<'_> {
        JobRequest {
            tres_per_node: self.tres[0].as_deref(),
            tres_per_job: self.tres[1].as_deref(),
            tres_per_socket: self.tres[2].as_deref(),
            tres_per_task: self.tres[3].as_deref(),
            spank_env: self.spank_env.clone(),
        }
    }

    /// A refusal if a field is not UTF-8 and `outcome` involves a GPU.
    fn check_utf8(&self, outcome: &Outcome) -> Result<(), Refusal> {
        match (self.not_utf8, outcome) {
            (Some(option), o) if *o != Outcome::NoGpu => {
                let i = OPTIONS.iter().position(|o| *o == option).unwrap_or(0);
                Err(Refusal::NotUtf8 {
                    option,
                    shown: shorten(self.tres[i].as_deref().unwrap_or(""), MAX_QUOTED),
                })
            }
            _ => Ok(()),
        }
    }
}

/// Borrows the `spank_job_env` entries (`NAME=VALUE`) of `desc`; skips NULL and non-UTF-8
/// entries (dynmig's own entries are ASCII).
///
/// # Safety
/// `desc.spank_job_env` is NULL or holds `spank_job_env_size` valid C string pointers.
pub unsafe fn spank_env(desc: &job_desc_msg_t) -> Vec<&str> {
    if desc.spank_job_env.is_null() {
        return Vec::new();
    }
    let n = desc.spank_job_env_size as usize;
    std::slice::from_raw_parts(desc.spank_job_env, n)
        .iter()
        .filter_map(|&p| xalloc::borrow(p))
        .collect()
}

/// Reads the fields of `desc`.
///
/// # Safety
/// The string fields of `desc` are NULL or valid C strings; see also [`spank_env`].
pub unsafe fn fields(desc: &job_desc_msg_t) -> Fields<'_> {
    let raw = [
        desc.tres_per_node,
        desc.tres_per_job,
        desc.tres_per_socket,
        desc.tres_per_task,
    ];
    let mut not_utf8 = None;
    let tres = std::array::from_fn(|i| {
        let text = xalloc::borrow_lossy(raw[i]);
        if matches!(text, Some(Cow::Owned(_))) && not_utf8.is_none() {
            not_utf8 = Some(OPTIONS[i]);
        }
        text
    });
    Fields {
        tres,
        not_utf8,
        spank_env: spank_env(desc),
    }
}

/// Writes the TRES fields of `rewrite` into `desc`: each `Some` field replaces the old
/// string (`Some("")` frees it and leaves NULL, as when `--gpus=1` moves to
/// `tres_per_node`).
///
/// # Safety
/// The string fields of `desc` are NULL or allocated by Slurm's xmalloc, and nothing
/// borrowed from them is alive; needs Slurm's allocator at run time.
pub unsafe fn apply_tres(desc: &mut job_desc_msg_t, rewrite: &Rewrite) {
    let fields = [
        (&mut desc.tres_per_node, &rewrite.tres_per_node),
        (&mut desc.tres_per_job, &rewrite.tres_per_job),
        (&mut desc.tres_per_socket, &rewrite.tres_per_socket),
        (&mut desc.tres_per_task, &rewrite.tres_per_task),
    ];
    for (field, new) in fields {
        match new.as_deref() {
            Some("") => xalloc::xfree(field),
            Some(new) => xalloc::replace(field, new),
            None => {}
        }
    }
}

/// Decides on a submitted job under `ready` and applies the outcome: the TRES fields are
/// rewritten, and the [`DecisionRecord`] is written into `admin_comment` if that is empty
/// (an operator's `--admin-comment` is left as it is).
///
/// # Errors
/// [`Refusal`]; `desc` is then unchanged.
///
/// # Safety
/// As [`fields`] and [`apply_tres`].
pub unsafe fn submit(desc: &mut job_desc_msg_t, ready: &Ready) -> Result<Handled, Refusal> {
    let outcome = {
        let f = fields(desc);
        let req = f.request();
        // slurm.h's NO_VAL (0xfffffffe): not a heterogeneous job.
        let het = (desc.het_job_offset != 0xffff_fffe).then_some(desc.het_job_offset);
        let outcome = match state::decide(ready, &req, desc.user_id, xalloc::borrow(desc.name)) {
            // sbatch hands a heterogeneous job's --mig-* options to the components after the
            // one that named them too: a later component without GPU has none of its own.
            Err(SubmitError::HintWithoutGpu { .. }) if het.is_some_and(|o| o > 0) => Outcome::NoGpu,
            other => other?,
        };
        f.check_utf8(&outcome)?;
        dynmig_core::submit::check_het_component(het, &req, &outcome)?;
        outcome
    };
    Ok(apply(desc, outcome, true))
}

/// Decides on a job update under `ready` ([`decide_update`]) and applies the outcome to
/// the TRES fields only; `admin_comment` is never touched.
///
/// # Errors
/// [`Refusal`]; `desc` is then unchanged.
///
/// # Safety
/// As [`fields`] and [`apply_tres`].
pub unsafe fn update(desc: &mut job_desc_msg_t, ready: &Ready) -> Result<Handled, Refusal> {
    let outcome = {
        let f = fields(desc);
        let req = f.request();
        check_release(&req, slurm_sys::SLURM_VERSION_NUMBER)?;
        let outcome = decide_update(&req, &ready.policy)?;
        f.check_utf8(&outcome)?;
        outcome
    };
    Ok(apply(desc, outcome, false))
}

/// Applies an outcome: the TRES fields are rewritten and, with `record` (submit only), the
/// [`DecisionRecord`] goes into an empty `admin_comment`.
///
/// # Safety
/// As [`apply_tres`].
unsafe fn apply(desc: &mut job_desc_msg_t, outcome: Outcome, record: bool) -> Handled {
    match outcome {
        Outcome::NoGpu => Handled::NoGpu,
        Outcome::Unchanged { reason } => Handled::Unchanged(reason),
        Outcome::Rewrite(rewrite) => {
            apply_tres(desc, &rewrite);
            let decision = DecisionRecord::from_decision(&rewrite.decision);
            let write = record && (desc.admin_comment.is_null() || *desc.admin_comment == 0);
            if write {
                xalloc::replace(&mut desc.admin_comment, &decision.encode());
            }
            Handled::Rewritten {
                record: decision,
                in_admin_comment: write,
            }
        }
    }
}

/// Hands `msg` to the user through `*err_msg`, appending it to a message that an earlier
/// plugin may have set. Does nothing when `err_msg` is NULL.
///
/// # Safety
/// `err_msg` is NULL or points to a NULL or xmalloc'd string.
pub unsafe fn set_err_msg(err_msg: *mut *mut c_char, msg: &str) {
    if let Some(slot) = err_msg.as_mut() {
        xalloc::append(slot, SEP, msg);
    }
}

#[cfg(test)]
#[path = "glue_tests.rs"]
mod tests;
