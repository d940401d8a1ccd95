//! Messages to slurmctld's log through Slurm's own log functions.
//!
//! The message is always passed as the argument of a `"%s"` format, never as the format,
//! so a `%` in a job name cannot be read as a conversion.

use std::ffi::CStr;

use crate::xalloc::c_string;

const FMT: &CStr = c"%s";

/// Logs at `info` level (shown at slurmctld's default SlurmctldDebug=info).
pub fn info(msg: &str) {
    let c = c_string(msg);
    // SAFETY: "%s" with one C string argument.
    unsafe { slurm_sys::slurm_info(FMT.as_ptr(), c.as_ptr()) }
}

/// Logs at `debug` level.
pub fn debug(msg: &str) {
    let c = c_string(msg);
    // SAFETY: as in `info`.
    unsafe { slurm_sys::slurm_debug(FMT.as_ptr(), c.as_ptr()) }
}

/// Logs at `error` level.
pub fn error(msg: &str) {
    let c = c_string(msg);
    // SAFETY: as in `info`.
    unsafe { slurm_sys::slurm_error(FMT.as_ptr(), c.as_ptr()) }
}
