//! `job_submit/dynmig`: Slurm's job_submit plugin for dynamic MIG.
//!
//! Built as `libjob_submit_dynmig.so`; install it into one of slurmctld's `PluginDir`
//! directories as `job_submit_dynmig.so` and set `JobSubmitPlugins=dynmig` in slurm.conf.
//! It must be rebuilt for each Slurm release (`plugin_version` is checked against
//! major.minor.micro).
//!
//! On every submit it reads the GPU request (`tres_per_node`, `tres_per_job`,
//! `tres_per_socket`, `tres_per_task`) and the `--mig-*` hints that the SPANK plugin
//! forwarded in `spank_job_env`, asks [`dynmig_core::submit::decide_with`] what to do, and
//! then:
//! - rewrites the GPU request to a MIG profile (`gres:gpu:1` -> `gres:gpu:2g.20gb:1`),
//!   writes the decision into the job's `admin_comment` as a
//!   [`dynmig_core::protocol::decision::DecisionRecord`] when that comment is empty (an
//!   operator's comment is left as it is), and logs it at info level; or
//! - rejects the job with the core's message in `err_msg` (sbatch prints it) and
//!   `ESLURM_INVALID_GRES`.
//!
//! On an update that sets a GPU request (`scontrol update jobid=N gres=...`) it calls
//! [`dynmig_core::modify::decide_update`]: a typed request is checked, an untyped
//! multi-GPU request becomes whole-GPU profiles, an untyped single GPU is refused with the
//! typed form to use. An update never writes `admin_comment` (Slurm refuses that from a
//! normal user); the decision goes to slurmctld's log.
//!
//! Configuration: the file named by `DYNMIG_CONFIG` in slurmctld's environment, else
//! `/etc/slurm/dynmig.toml`, else built-in defaults (with a logged warning); it is read in
//! `init`, which never fails. A file that cannot be read or parsed is logged as an error and
//! slurmctld starts anyway: jobs then pass through unchanged (untyped GPU requests may land
//! on any MIG instance), and jobs with `--mig-*` options are refused with a message that
//! says why. The history snapshot is re-read by one thread that `init` starts and `fini`
//! stops and joins.
//!
//! Modules: [`xalloc`] (Slurm-owned strings), [`log`] (Slurm's log), [`glue`] (job_desc <->
//! core types), [`state`] (the policy), [`entry`] (the exported C symbols), [`timing`] (the
//! plugin's own time per submit, summarised in the log every 1000 calls).

pub mod entry;
pub mod glue;
pub mod log;
pub mod state;
pub mod timing;
pub mod xalloc;
