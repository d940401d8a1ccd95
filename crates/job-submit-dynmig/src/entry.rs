//! The C symbols slurmctld looks up in a job_submit plugin.
//!
//! Every `extern "C"` function runs its body under `catch_unwind`: a panic is logged and
//! turned into `SLURM_ERROR`, never unwound into slurmctld.

use std::ffi::{c_char, c_int, c_void};
use std::panic::{catch_unwind, UnwindSafe};

use slurm_sys::{job_desc_msg_t, slurm_err_t, SLURM_ERROR, SLURM_SUCCESS};

use crate::glue::{self, Handled};
use crate::{log, state, xalloc};

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

/// Loads the configuration and installs the policy.
#[no_mangle]
pub extern "C" fn init() -> c_int {
    guarded("init", || {
        let env = std::env::var(state::CONFIG_ENV).ok();
        match state::load(env.as_deref()) {
            Ok((policy, source)) => {
                match source {
                    state::Source::File(p) => log::info(&format!("dynmig: job_submit loaded {}", p.display())),
                    state::Source::Embedded => log::info(&format!(
                        "dynmig: warning: {} not found and {} not set; using built-in defaults",
                        state::DEFAULT_CONFIG_PATH,
                        state::CONFIG_ENV
                    )),
                }
                state::install(policy);
                SLURM_SUCCESS
            }
            Err(msg) => {
                // A broken dynmig.toml must not stop slurmctld: log it, and pass jobs through
                // unchanged (rejecting only those that carry dynmig hints) until it is fixed.
                log::error(&format!(
                    "{msg}; job_submit/dynmig passes jobs through unchanged until the config is fixed (dynmig config check)"
                ));
                state::set_broken(msg);
                SLURM_SUCCESS
            }
        }
    })
}

/// Drops the policy.
#[no_mangle]
pub extern "C" fn fini() -> c_int {
    guarded("fini", || {
        state::clear();
        SLURM_SUCCESS
    })
}

/// Decides on one job description; shared by `job_submit` and `job_modify`.
///
/// # Safety
/// `desc` is a valid job description from slurmctld; `err_msg` is NULL or valid.
unsafe fn run(desc: *mut job_desc_msg_t, uid: u32, err_msg: *mut *mut c_char) -> c_int {
    let Some(desc) = desc.as_mut() else {
        return SLURM_SUCCESS;
    };
    let result = state::with_policy(|policy| glue::handle(desc, policy));
    let name = xalloc::borrow(desc.name).unwrap_or("(null)").to_string();
    match result {
        // No policy: the config is broken (or init has not run). Jobs without dynmig hints
        // go through untouched; a job that asks dynmig for something is told why it cannot.
        None => {
            let hinted = glue::spank_env(desc)
                .iter()
                .any(|e| e.starts_with("_SLURM_SPANK_OPTION_dynmig_"));
            if !hinted {
                return SLURM_SUCCESS;
            }
            let why = state::broken_reason().unwrap_or_else(|| "the plugin is not initialised".into());
            glue::set_err_msg(
                err_msg,
                &format!(
                    "dynmig: --mig-* options cannot be used now: {why}; submit without them or ask an administrator"
                ),
            );
            REJECT
        }
        Some(Ok(Handled::Rewritten(note))) => {
            let note = note.strip_prefix("dynmig: ").unwrap_or(&note);
            log::info(&format!("dynmig: job {name} uid {uid}: {note}"));
            SLURM_SUCCESS
        }
        Some(Ok(Handled::Unchanged(reason))) => {
            log::debug(&format!("dynmig: job {name} uid {uid}: unchanged: {reason}"));
            SLURM_SUCCESS
        }
        Some(Ok(Handled::NoGpu)) => SLURM_SUCCESS,
        Some(Err(e)) => {
            let msg = e.to_string();
            log::info(&format!("dynmig: job {name} uid {uid}: rejected: {msg}"));
            glue::set_err_msg(err_msg, &msg);
            REJECT
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
    guarded("job_submit", || run(job_desc, submit_uid, err_msg))
}

/// Slurm 22.05: `int job_modify(job_desc_msg_t *, job_record_t *, uint32_t submit_uid)`.
/// Only a modify that sets a GPU request is looked at; an error has no `err_msg` to go to
/// in this release, so it is only logged.
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

/// A modify that touches no GPU request field is left alone.
unsafe fn modify(desc: *mut job_desc_msg_t, uid: u32, err_msg: *mut *mut c_char) -> c_int {
    let Some(d) = desc.as_ref() else {
        return SLURM_SUCCESS;
    };
    let touches_gpu = [d.tres_per_node, d.tres_per_job, d.tres_per_socket, d.tres_per_task]
        .iter()
        .any(|p| !p.is_null());
    if touches_gpu {
        run(desc, uid, err_msg)
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
    fn a_broken_config_does_not_stop_slurmctld_and_only_hinted_jobs_are_refused() {
        let _g = crate::state::tests::GLOBAL
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let bad = std::env::temp_dir().join(format!("dynmig-broken-{}.toml", std::process::id()));
        std::fs::write(&bad, "version = 1\nbogus_key = 3\n").unwrap();
        std::env::set_var(state::CONFIG_ENV, &bad);
        assert_eq!(init(), SLURM_SUCCESS, "a bad config must not make slurmctld fail");
        assert!(
            state::broken_reason().is_some_and(|r| r.contains("bogus_key")),
            "{:?}",
            state::broken_reason()
        );
        let env = [std::ffi::CString::new("_SLURM_SPANK_OPTION_dynmig_mig_mem=18G").unwrap()];
        let mut ptrs: Vec<*mut c_char> = env.iter().map(|c| c.as_ptr() as *mut c_char).collect();
        // SAFETY: job_desc_msg_t is plain C data; all-zero = every pointer NULL.
        let mut d: job_desc_msg_t = unsafe { std::mem::zeroed() };
        let mut err: *mut c_char = std::ptr::null_mut();
        unsafe {
            d.tres_per_node = xalloc::xstrdup("gres:gpu:1");
            assert_eq!(
                job_submit(&mut d, 0, &mut err),
                SLURM_SUCCESS,
                "no hint: passed through"
            );
            assert!(err.is_null());
            assert_eq!(xalloc::borrow(d.tres_per_node), Some("gres:gpu:1"), "left unchanged");
            d.spank_job_env = ptrs.as_mut_ptr();
            d.spank_job_env_size = 1;
            assert_eq!(job_submit(&mut d, 0, &mut err), REJECT, "a hinted job is told why");
            let msg = xalloc::borrow(err).unwrap_or("").to_string();
            assert!(msg.contains("cannot be used now") && msg.contains("bogus_key"), "{msg}");
            d.spank_job_env = std::ptr::null_mut();
            xalloc::xfree(&mut err);
            xalloc::xfree(&mut d.tres_per_node);
        }
        std::env::remove_var(state::CONFIG_ENV);
        std::fs::remove_file(&bad).unwrap();
        assert_eq!(fini(), SLURM_SUCCESS);
    }

    #[test]
    fn exported_strings_are_nul_terminated() {
        assert_eq!(&plugin_type[..], b"job_submit/dynmig\0");
        assert_eq!(plugin_name.iter().filter(|&&b| b == 0).count(), 1);
        assert_eq!(plugin_name.last(), Some(&0));
    }
}
