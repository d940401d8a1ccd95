//! The commands run on a GPU node: `init-node`, the Prolog and Epilog, `oom-restart` and the
//! simulated backend's `fake-job`.

use super::load_config;
use anyhow::{anyhow, Result};
use dynmig_node::hooks::HookEnv;
use dynmig_slurm::SlurmCommands;
use std::path::Path;

/// `dynmig init-node`: gives `node` its initial layout and prints its `Gres=` string.
///
/// # Errors
/// The config is refused, or the node's GPUs cannot be set up.
pub fn init_node(explicit: Option<&Path>, node: &str) -> Result<()> {
    let (config, _) = load_config(explicit)?;
    println!("{}", dynmig_node::setup::init_node(&config, node)?);
    Ok(())
}

/// `dynmig prolog`: Slurm's Prolog, from its environment.
///
/// # Errors
/// The config is refused, or the job's MIG device is missing (Slurm requeues the job).
pub fn prolog(explicit: Option<&Path>) -> Result<()> {
    let (config, _) = load_config(explicit)?;
    dynmig_node::hooks::prolog(&config, &HookEnv::read(|k| std::env::var(k).ok())?)
}

/// `dynmig epilog`: Slurm's Epilog, from its environment.
///
/// # Errors
/// The config is refused, or the Epilog's work failed.
pub fn epilog(explicit: Option<&Path>) -> Result<()> {
    let (config, _) = load_config(explicit)?;
    let exe = std::env::current_exe().unwrap_or_else(|_| "dynmig".into());
    let get = |k: &str| std::env::var(k).ok();
    dynmig_node::hooks::epilog(
        &config,
        &HookEnv::read(get)?,
        dynmig_node::hooks::EndedJob::read(get),
        &exe,
    )
}

/// `dynmig oom-restart`: requeues `job` (which ran out of memory on `node`) on profile `to`,
/// or only tells the user why not; `message` is what the user is told.
///
/// # Errors
/// The config is refused, or Slurm refused the change.
pub fn oom_restart(explicit: Option<&Path>, node: &str, job: u32, to: Option<String>, message: String) -> Result<()> {
    let (config, _) = load_config(explicit)?;
    let req = dynmig_node::oom::RestartRequest {
        job,
        to,
        message,
        requeue_for: std::time::Duration::from_secs(60),
    };
    Ok(dynmig_node::oom::restart(
        &SlurmCommands::from_config(&config),
        &req,
        node,
    )?)
}

/// `dynmig fake-job`: "allocates" `mem` on the job's MIG instance for `seconds`; exits with
/// the fake job's status.
///
/// # Errors
/// `mem` does not parse, the config is refused, or the instance cannot be found.
pub fn fake_job(explicit: Option<&Path>, mem: &str, seconds: f64) -> Result<()> {
    let bytes = dynmig_core::size::parse_size(mem).map_err(|e| anyhow!("--mem={mem}: {e}"))?;
    let (config, _) = load_config(explicit)?;
    let code = crate::dev::fake_job::run(&config, bytes, seconds)?;
    std::process::exit(code)
}
