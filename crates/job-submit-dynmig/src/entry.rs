//! The C symbols slurmctld looks up in a job_submit plugin.
//!
//! Every `extern "C"` function runs its body under `catch_unwind`: a panic is logged and
//! turned into `SLURM_ERROR`, never unwound into slurmctld.

use std::ffi::{c_char, c_int, c_void};
use std::panic::{catch_unwind, UnwindSafe};
use std::path::Path;

use dynmig_core::hints::{shorten, SPANK_ENV_PREFIX};

use slurm_sys::{job_desc_msg_t, slurm_err_t, SLURM_ERROR, SLURM_SUCCESS};

use crate::glue::{self, Handled};
use crate::{log, state, timing, xalloc};

/// Human-readable plugin name.
#[no_mangle]
pub static plugin_name: [u8; 41] = *b"dynmig: rewrite GPU requests to MIG GRES\0";

/// `job_submit/<name>`: the file must be `job_submit_dynmig.so`.
#[no_mangle]
pub static plugin_type: [u8; 18] = *b"job_submit/dynmig\0";

/// The Slurm release of the headers this was built against (0xAABBCC).
#[no_mangle]
pub static plugin_version: u32 = slurm_sys::SLURM_VERSION_NUMBER;

/// The return code of a rejected job: sbatch prints `*err_msg` and then this code's text,
/// "Invalid generic resource (gres) specification".
pub const REJECT: c_int = slurm_err_t::ESLURM_INVALID_GRES as c_int;

/// The return code of a refusal that is about the Slurm release, not the request: without an
/// `err_msg` (22.05's job_modify) the user sees this code's text, "Requested operation not
/// supported on this system", rather than a GRES syntax error.
pub const NOT_SUPPORTED: c_int = slurm_err_t::ESLURM_NOT_SUPPORTED as c_int;

/// [`NOT_SUPPORTED`] for a refusal caused by the release, [`REJECT`] for every other.
fn refusal_code(e: &glue::Refusal) -> c_int {
    match e {
        glue::Refusal::Update(dynmig_core::modify::UpdateError::ReleaseKeepsOldRequest { .. }) => NOT_SUPPORTED,
        _ => REJECT,
    }
}

/// Runs `body`, turning a panic into a logged `SLURM_ERROR`.
pub fn guarded(what: &str, body: impl FnOnce() -> c_int + UnwindSafe) -> c_int {
    catch_unwind(body).unwrap_or_else(|panic| {
        let text = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "non-string panic".into());
        // Logging itself must not unwind out of here.
        let _ = catch_unwind(|| log::error(&format!("dynmig: panic in {what}: {text}")));
        SLURM_ERROR
    })
}

/// Reads the configuration, installs the state and starts the history snapshot thread.
/// Never fails: a configuration that cannot be read or parsed is logged and installed as
/// [`state::State::Broken`] (jobs pass through, hinted jobs are told why), so that a
/// broken dynmig.toml never stops slurmctld.
#[no_mangle]
pub extern "C" fn init() -> c_int {
    guarded("init", || {
        state::stop_refresher();
        let env = std::env::var_os(state::CONFIG_ENV);
        match state::load(env.as_deref(), Path::new(state::DEFAULT_CONFIG_PATH)) {
            Ok(ready) => {
                match &ready.source {
                    state::Source::File(p) => log::info(&format!("dynmig: job_submit loaded {}", p.display())),
                    state::Source::Embedded => log::info(&format!(
                        "dynmig: warning: {} not found and {} not set; using built-in defaults",
                        state::DEFAULT_CONFIG_PATH,
                        state::CONFIG_ENV
                    )),
                }
                state::install(state::State::Ready(ready));
                if let Err(e) = state::start_refresher() {
                    log::error(&format!("{e}; history estimates use the snapshot read at init"));
                }
            }
            Err(reason) => {
                log::error(&format!(
                    "{reason}; job_submit/dynmig passes jobs through unchanged and refuses only jobs \
                     with --mig-* options until the config is fixed (check it with: dynmig config check)"
                ));
                state::install(state::State::Broken { reason });
            }
        }
        SLURM_SUCCESS
    })
}

/// Logs the last window of submit times, stops the snapshot thread and drops the state.
#[no_mangle]
pub extern "C" fn fini() -> c_int {
    guarded("fini", || {
        timing::flush();
        state::clear();
        SLURM_SUCCESS
    })
}

/// Which call slurmctld made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    Submit,
    Update,
}

/// slurm.h's `NO_VAL` (`0xfffffffe`): a numeric field that is not set.
const NO_VAL: u32 = 0xffff_fffe;

/// The job id of an update as the user named it, escaped and cut: `scontrol update jobid=N`
/// sends it as `job_id_str` (`"12"`, `"12_3"` for an array task, `"12+1"` for a
/// heterogeneous component) and leaves the numeric `job_id` at `NO_VAL`; 26.05 moved the
/// numeric id into `step_id`. `?` when neither is set.
///
/// # Safety
/// `desc.job_id_str` is NULL or a NUL-terminated string.
unsafe fn job_id(desc: &job_desc_msg_t) -> String {
    if let Some(text) = xalloc::borrow_lossy(desc.job_id_str) {
        if !text.is_empty() {
            return shorten(&text, 40);
        }
    }
    #[cfg(slurm_2605_plus)]
    let id = desc.step_id.job_id;
    #[cfg(not(slurm_2605_plus))]
    let id = desc.job_id;
    if id == 0 || id >= NO_VAL {
        "?".into()
    } else {
        id.to_string()
    }
}

/// Decode -> core -> encode -> log, for `job_submit` and `job_modify`.
///
/// # Safety
/// `desc` is NULL or a valid job description from slurmctld; `err_msg` is NULL or valid.
unsafe fn run(call: Call, desc: *mut job_desc_msg_t, uid: u32, err_msg: *mut *mut c_char) -> c_int {
    let Some(desc) = desc.as_mut() else {
        return SLURM_SUCCESS;
    };
    let what = match call {
        Call::Submit => format!("job {}", shorten(xalloc::borrow(desc.name).unwrap_or("(no name)"), 100)),
        Call::Update => format!("update of job {}", job_id(desc)),
    };
    let ready = match state::current().as_deref() {
        Some(state::State::Ready(ready)) => ready.clone(),
        other => {
            // No usable config. Jobs without dynmig hints go through untouched; a job that
            // asks dynmig for something is told why it cannot be served.
            let hinted = glue::spank_env(desc).iter().any(|e| e.starts_with(SPANK_ENV_PREFIX));
            if call == Call::Update || !hinted {
                return SLURM_SUCCESS;
            }
            let why = match other {
                Some(state::State::Broken { reason }) => reason.clone(),
                _ => "the plugin is not initialised".into(),
            };
            glue::set_err_msg(
                err_msg,
                &format!(
                    "dynmig: --mig-* options cannot be used now: {why}; submit without them or ask an administrator"
                ),
            );
            return REJECT;
        }
    };
    let result = match call {
        Call::Submit => glue::submit(desc, &ready),
        Call::Update => glue::update(desc, &ready),
    };
    match result {
        Ok(Handled::Rewritten {
            record,
            in_admin_comment,
        }) => {
            let note = match (call, in_admin_comment) {
                (Call::Update, _) => " (update: AdminComment left as it is)",
                (Call::Submit, true) => "",
                (Call::Submit, false) => " (AdminComment already set: left as it is)",
            };
            log::info(&format!("dynmig: {what} uid {uid}: {}{note}", record.encode()));
            SLURM_SUCCESS
        }
        Ok(Handled::Unchanged(reason)) => {
            log::debug(&format!("dynmig: {what} uid {uid}: unchanged: {reason}"));
            SLURM_SUCCESS
        }
        Ok(Handled::NoGpu) => SLURM_SUCCESS,
        Err(e) => {
            let msg = e.to_string();
            log::info(&format!("dynmig: {what} uid {uid}: rejected: {msg}"));
            glue::set_err_msg(err_msg, &msg);
            refusal_code(&e)
        }
    }
}

/// `int job_submit(job_desc_msg_t *job_desc, uint32_t submit_uid, char **err_msg)`.
///
/// # Safety
/// Called by slurmctld with valid pointers.
#[no_mangle]
pub unsafe extern "C" fn job_submit(
    job_desc: *mut job_desc_msg_t,
    submit_uid: u32,
    err_msg: *mut *mut c_char,
) -> c_int {
    let started = std::time::Instant::now();
    let rc = guarded("job_submit", || run(Call::Submit, job_desc, submit_uid, err_msg));
    // Recording must not unwind into slurmctld either.
    let _ = catch_unwind(|| timing::record(started.elapsed()));
    rc
}

/// Slurm 22.05: `int job_modify(job_desc_msg_t *, job_record_t *, uint32_t submit_uid)`.
/// Only an update that sets a GPU request is looked at; a refusal has no `err_msg` to go
/// to in this release, so the user sees Slurm's text for [`REJECT`] and the reason is
/// logged.
///
/// # Safety
/// Called by slurmctld with valid pointers; `job_ptr` is opaque and unused.
#[cfg(not(slurm_2302_plus))]
#[no_mangle]
pub unsafe extern "C" fn job_modify(job_desc: *mut job_desc_msg_t, _job_ptr: *mut c_void, submit_uid: u32) -> c_int {
    guarded("job_modify", || modify(job_desc, submit_uid, std::ptr::null_mut()))
}

/// Slurm 23.02+: `int job_modify(job_desc_msg_t *, job_record_t *, uint32_t submit_uid,
/// char **err_msg)`.
///
/// # Safety
/// Called by slurmctld with valid pointers; `job_ptr` is opaque and unused.
#[cfg(slurm_2302_plus)]
#[no_mangle]
pub unsafe extern "C" fn job_modify(
    job_desc: *mut job_desc_msg_t,
    _job_ptr: *mut c_void,
    submit_uid: u32,
    err_msg: *mut *mut c_char,
) -> c_int {
    guarded("job_modify", || modify(job_desc, submit_uid, err_msg))
}

/// An update that touches no GPU request field is left alone.
unsafe fn modify(desc: *mut job_desc_msg_t, uid: u32, err_msg: *mut *mut c_char) -> c_int {
    let Some(d) = desc.as_ref() else {
        return SLURM_SUCCESS;
    };
    let touches_gpu = [d.tres_per_node, d.tres_per_job, d.tres_per_socket, d.tres_per_task]
        .iter()
        .any(|p| !p.is_null());
    if touches_gpu {
        run(Call::Update, desc, uid, err_msg)
    } else {
        SLURM_SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_slurm_error() {
        assert_eq!(guarded("test", || panic!("boom")), SLURM_ERROR);
        assert_eq!(guarded("test", || 7), 7);
    }

    #[test]
    fn exported_strings_are_nul_terminated() {
        assert_eq!(&plugin_type[..], b"job_submit/dynmig\0");
        assert_eq!(plugin_name.iter().filter(|&&b| b == 0).count(), 1);
        assert_eq!(plugin_name.last(), Some(&0));
    }
}
