//! `dynmig why JOBID`: why a job waits ([`dynmig_controller::why`]), for its user or root.

use crate::cli::load_config;
use anyhow::{anyhow, Result};
use dynmig_controller::why::{explain, WhyInputs};
use dynmig_controller::{managed_nodes, policy_from_config, PassSettings};
use dynmig_core::policy::PolicyLimits;
use dynmig_slurm::SlurmCommands;
use std::path::Path;

/// Prints why job `id` waits (JSON with `json`). The caller is the process's real uid: root
/// may ask of any job, another user only of their own.
///
/// # Errors
/// The config, Slurm or the policy cannot be read; no such job; another user's job.
pub fn why(config: Option<&Path>, id: u32, json: bool) -> Result<()> {
    let (config, _) = load_config(config)?;
    let mut policy = policy_from_config(&config).map_err(|e| anyhow!("[policy]: {e}"))?;
    let managed = managed_nodes(&config);
    // SAFETY: getuid has no preconditions and cannot fail.
    let caller = unsafe { libc::getuid() };
    let report = explain(
        &SlurmCommands::from_config(&config),
        WhyInputs {
            managed: &managed,
            policy: policy.as_mut(),
            limits: PolicyLimits::from_config(&config, 1),
            settings: PassSettings {
                dry_run: true,
                ..PassSettings::from_config(&config, dynmig_host::clock::now_secs())
            },
        },
        id,
        caller,
    )?;
    print!(
        "{}",
        if json {
            report.render_json()
        } else {
            report.render_text()
        }
    );
    Ok(())
}
