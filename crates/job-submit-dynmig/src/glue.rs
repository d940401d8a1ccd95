//! `job_desc_msg_t` <-> [`JobRequest`]: reads the GPU request and the SPANK hints out of
//! the job description, and writes a [`Rewrite`] back into it.
//!
//! Every string written into `job_desc` or `*err_msg` is allocated with Slurm's allocator
//! ([`crate::xalloc`]); every string replaced is freed with it.

use std::ffi::c_char;

use dynmig_core::submit::{JobRequest, Outcome, Rewrite, SubmitError, SubmitPolicy};
use slurm_sys::job_desc_msg_t;

use crate::xalloc;

/// Separator used when the decision is appended to an existing `admin_comment` or a
/// message to an `err_msg` set by an earlier plugin.
pub const SEP: &str = "; ";

/// What [`handle`] did to a job description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handled {
    /// The job asks for no GPU.
    NoGpu,
    /// The GPU request was left as it is, for the given reason.
    Unchanged(String),
    /// The GPU request was rewritten; the decision text (also put in `admin_comment`).
    Rewritten(String),
}

/// Borrows the `spank_job_env` entries (`NAME=VALUE`) of `desc`; skips NULL and non-UTF-8
/// entries.
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

/// The [`JobRequest`] that `desc` makes.
///
/// # Safety
/// The string fields of `desc` are NULL or valid C strings; see also [`spank_env`].
pub unsafe fn request(desc: &job_desc_msg_t) -> JobRequest<'_> {
    JobRequest {
        tres_per_node: xalloc::borrow(desc.tres_per_node),
        tres_per_job: xalloc::borrow(desc.tres_per_job),
        tres_per_socket: xalloc::borrow(desc.tres_per_socket),
        tres_per_task: xalloc::borrow(desc.tres_per_task),
        spank_env: spank_env(desc),
    }
}

/// Writes `rewrite` into `desc`: each `Some` field replaces the old string (`Some("")`
/// frees it and leaves NULL, as when `--gpus=1` moves to `tres_per_node`), and the
/// decision text is appended to `admin_comment`. Returns the decision text.
///
/// # Safety
/// The string fields of `desc` are NULL or allocated by Slurm's xmalloc; needs Slurm's
/// allocator at run time.
pub unsafe fn apply(desc: &mut job_desc_msg_t, rewrite: &Rewrite) -> String {
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
    let note = rewrite.decision.to_string();
    xalloc::append(&mut desc.admin_comment, SEP, &note);
    note
}

/// Decides on `desc` under `policy` and applies the outcome.
///
/// # Errors
/// The [`SubmitError`] of [`decide`]; `desc` is then unchanged.
///
/// # Safety
/// As [`request`] and [`apply`].
pub unsafe fn handle(desc: &mut job_desc_msg_t, policy: &SubmitPolicy) -> Result<Handled, SubmitError> {
    let outcome = crate::state::decide(&request(desc), desc.user_id, xalloc::borrow(desc.name), policy)?;
    Ok(match outcome {
        Outcome::NoGpu => Handled::NoGpu,
        Outcome::Unchanged { reason } => Handled::Unchanged(reason),
        Outcome::Rewrite(rewrite) => Handled::Rewritten(apply(desc, &rewrite)),
    })
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
