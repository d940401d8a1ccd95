//! `job_submit/dynmig`: Slurm's job_submit plugin for dynamic MIG.
//!
//! Built as `libjob_submit_dynmig.so`; install it into one of slurmctld's `PluginDir`
//! directories as `job_submit_dynmig.so` and set `JobSubmitPlugins=dynmig` in slurm.conf.
//! It must be rebuilt for each Slurm release (`plugin_version` is checked against
//! major.minor.micro).
//!
//! On every submit (and on every modify that touches a GPU request) it reads the GPU
//! request (`tres_per_node`, `tres_per_job`, `tres_per_socket`, `tres_per_task`) and the
//! `--mig-mem`/`--mig-profile` hints that the SPANK plugin forwarded in `spank_job_env`,
//! asks [`dynmig_core::submit::decide`] what to do, and then:
//! - rewrites the GPU request to a MIG profile (`gres:gpu:1` -> `gres:gpu:2g.20gb:1`) and
//!   appends the decision to the job's `admin_comment`, logging it at info level; or
//! - rejects the job with the core's message in `err_msg` (sbatch prints it) and
//!   `ESLURM_INVALID_GRES`.
//!
//! Configuration: the file named by `DYNMIG_CONFIG` in slurmctld's environment, else
//! `/etc/slurm/dynmig.toml`, else built-in defaults (with a logged warning). A file that
//! exists but does not parse makes `init` fail, and slurmctld refuses to start.
//!
//! Modules: [`xalloc`] (Slurm-owned strings), [`log`] (Slurm's log), [`glue`] (job_desc <->
//! core types), [`state`] (the policy), [`entry`] (the exported C symbols).

pub mod entry;
pub mod glue;
pub mod log;
pub mod state;
pub mod xalloc;
