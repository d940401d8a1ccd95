//! Raw bindings to the few parts of Slurm's C API that dynmig's job_submit plugin uses.
//!
//! Generated at build time by bindgen from this crate's `wrapper.h` and the installed
//! Slurm headers (`SLURM_INCLUDE_DIR`, which must then hold every Slurm header used;
//! unset: `/usr/include`, with a build warning), because `job_desc_msg_t`
//! changes layout in every Slurm release. What is bound:
//! - [`job_desc_msg_t`] (and the types it needs),
//! - [`SLURM_VERSION_NUMBER`], [`SLURM_SUCCESS`], [`SLURM_ERROR`] and the `ESLURM_*` codes,
//! - Slurm's allocator (`slurm_xstrdup`, `slurm_xfree`, `slurm_xsize`): every string handed
//!   to Slurm must come from it, every string taken from Slurm must go back to it,
//! - Slurm's log (`slurm_info`, `slurm_verbose`, `slurm_debug`, `slurm_error`),
//! - [`job_info_msg_t`] and [`slurm_job_info_t`] (what `slurm_load_job` answers), with
//!   `SHOW_ALL`, `SHOW_DETAIL`, `SHOW_LOCAL`, `NO_VAL` and `INFINITE`, for crates/slurm-job-reader.
//!
//! Nothing is linked by default: inside slurmctld the symbols resolve from libslurmfull.so
//! when the plugin is loaded. The `link` feature links libslurm.so for tests and benches.
//!
//! cfgs for Slurm releases are set by this crate's build script (`slurm_2302_plus`,
//! `slurm_2311_plus`); dependents get the version as `DEP_SLURM_VERSION_NUMBER` in their
//! own build scripts.
#![allow(non_upper_case_globals, non_camel_case_types, non_snake_case)]
#![allow(missing_docs, clippy::all)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));

/// Slurm's major.minor.micro, as in `SLURM_VERSION_NUMBER` (0xAABBCC).
pub const fn version() -> (u32, u32, u32) {
    let v = SLURM_VERSION_NUMBER;
    ((v >> 16) & 0xff, (v >> 8) & 0xff, v & 0xff)
}
