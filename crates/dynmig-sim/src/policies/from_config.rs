//! The one policy factory: dynmig.toml's `[policy]` to a [`PolicySpec`], and a spec to the
//! policy that plans. The controller and the simulator both come here, so that the policy the
//! controller runs is the one the simulator judged, with the same settings:
//!
//! ```text
//! Config --spec_from_config(host)--> PolicySpec --PolicySpec::policy(cfg, typed)--> Box<dyn Policy>
//! ```
//!
//! The engine asks [`PolicySpec::policy`] for the policy of every run (through
//! [`crate::engine::RunSpec::driver`]); the controller asks [`controller_policy`], which
//! models the managed nodes with [`sim_config`] for the policies that run the engine
//! (`mpc`, `adaptive`, `guarded`).
//!
//! What differs between the two hosts is said once, in [`Host`].

use super::mpc::MpcSettings;
use super::settings::{AdaptiveSettings, GuardedSettings};
use super::{adaptive, clairvoyant, guarded, mpc, DemandDriven, Planner, Policy, PolicySpec, Scheduled};
use super::{PlannerSettings, PolicyLimits};
use crate::engine::{DrainTiming, SimConfig};
use crate::model::Job;
use anyhow::{bail, Context, Result};
use dynmig_core::config::{Config, PolicyConfig};
use dynmig_core::policy::NoChange;
use dynmig_core::types::DrainMode;

/// Who runs the policy a config names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Host {
    /// The simulator (`dynmig simulate`, the demo's prediction): every search runs inside the
    /// call, so that a run in virtual time is reproducible, and the engine types the jobs.
    Simulator,
    /// The controller daemon: Slurm runs a job only on an instance of the GRES type it asked
    /// for (every planner and the learned policy count a job's own profile only), the
    /// searches of `adaptive` and `guarded` run on a thread of their own (no pass waits for
    /// them), and where Slurm cannot change a submitted job's GPU type (`retype` false,
    /// before 23.02.6) the guarded default never leaves a type a waiting job asks for
    /// ([`GuardedSettings::pending_types_fixed`]).
    Controller {
        /// Whether Slurm can change a submitted job's GPU type.
        retype: bool,
    },
}

/// The simulator's model of `config`'s cluster: every node group's nodes, with the first
/// group's GPU model and GPUs per node (the config allows `mpc`, `adaptive` and `guarded`
/// only when every group has one GPU model and count), drained as `[controller] drain` says.
/// The other settings are [`SimConfig::new`]'s: in particular the policy is asked every 60 s
/// of simulated time in the lookahead runs of `mpc`, whatever the controller's own interval
/// (a run that asks every 5 s costs twelve times as many calls).
///
/// # Errors
/// The config has no node group.
pub fn sim_config(config: &Config) -> Result<SimConfig> {
    let g = config.node_groups.first().context("the config has no node group")?;
    let nodes = config.node_groups.iter().map(|g| g.nodes.len()).sum();
    let mut cfg = SimConfig::new(g.gpu_model, nodes, g.gpus as usize);
    cfg.timing = match config.controller.drain {
        DrainMode::Reservation => DrainTiming::Reservation,
        DrainMode::Immediate => DrainTiming::Immediate,
    };
    Ok(cfg)
}

/// The [`PolicySpec`] of `config`'s `[policy]` for `host`, with its initial layouts (node
/// order: the node groups' order). `static` is the config's layouts, kept; a planner whose
/// settings the config cannot give (no node group) plans nothing.
///
/// # Errors
/// A learned policy whose model file cannot be read or was trained for other GPUs (the message
/// says which file and what it was trained for); `guarded` or `learned` without a node group.
pub fn spec_from_config(config: &Config, host: Host) -> Result<PolicySpec> {
    let controller = matches!(host, Host::Controller { .. });
    Ok(match &config.policy {
        PolicyConfig::Learned { model } => {
            let g = config
                .node_groups
                .first()
                .context("the learned policy needs a node group")?;
            PolicySpec::External(super::learned_model::from_file(
                model,
                g.gpu_model,
                &PolicyLimits::from_config(config, 1),
                controller,
            )?)
        }
        PolicyConfig::Demand { min_gain, .. } => PolicySpec::Dynamic(PolicyLimits::from_config(config, *min_gain)),
        PolicyConfig::Plan { lookahead, .. } => match PlannerSettings::from_config(config) {
            None => PolicySpec::None,
            Some(s) => match lookahead {
                Some(horizon) => PolicySpec::Mpc(MpcSettings {
                    horizon: *horizon,
                    ..MpcSettings::new(s)
                }),
                None => PolicySpec::Plan(s),
            },
        },
        PolicyConfig::Adaptive => {
            let mut s = AdaptiveSettings::new(PolicyLimits::from_config(config, 1));
            s.exact_profiles = controller;
            s.background = controller;
            PolicySpec::Adaptive(s)
        }
        PolicyConfig::Guarded { .. } => {
            let mut s = GuardedSettings::from_config(config).context("the guarded policy needs a node group")?;
            if let Host::Controller { retype } = host {
                s.pending_types_fixed = !retype;
                s.background = true;
            }
            PolicySpec::Guarded(s)
        }
        PolicyConfig::Static => PolicySpec::Static(config.initial_node_layouts()),
        PolicyConfig::None => PolicySpec::None,
    })
}

/// The policy the controller runs for `config` on a Slurm that can (`retype`) or cannot
/// change a submitted job's GPU type: [`spec_from_config`] for [`Host::Controller`], made by
/// [`PolicySpec::policy`] on the [`sim_config`] model of the managed nodes, typed as Slurm
/// places. A policy that never changes layouts (`none`, `static`) and a config without node
/// groups give [`NoChange`].
///
/// # Errors
/// As [`spec_from_config`].
pub fn controller_policy(config: &Config, retype: bool) -> Result<Box<dyn Policy>> {
    if config.node_groups.is_empty() {
        return Ok(Box::new(NoChange));
    }
    let spec = spec_from_config(config, Host::Controller { retype })?;
    Ok(spec
        .policy(&sim_config(config)?, true, &[])?
        .unwrap_or_else(|| Box::new(NoChange)))
}

impl PolicySpec {
    /// The policy that plans under this spec on a cluster modelled by `cfg`; `None` for one
    /// that never changes layouts (`none`, `static`). `typed`: jobs run only on the GRES type
    /// they asked for, as Slurm places them, so the planners count a job's own profile only
    /// (the simulator's `spill-up` what-if alone says false). `jobs`: every job of the run,
    /// which only the clairvoyant planner reads.
    ///
    /// # Errors
    /// An external policy's maker refuses the cluster (a learned model for other GPUs); the
    /// time-of-day policy, which learns from the engine's arrivals, runs only inside the
    /// engine.
    pub fn policy(&self, cfg: &SimConfig, typed: bool, jobs: &[Job]) -> Result<Option<Box<dyn Policy>>> {
        Ok(Some(match self {
            PolicySpec::None | PolicySpec::Static(_) => return Ok(None),
            PolicySpec::Scheduled(p) => Box::new(Scheduled { periods: p.clone() }),
            PolicySpec::Dynamic(limits) => Box::new(DemandDriven::new(limits.clone())),
            PolicySpec::Plan(s) => {
                let mut s = s.clone();
                s.exact_profiles |= typed;
                Box::new(Planner::new(s))
            }
            PolicySpec::Mpc(s) => {
                let mut s = s.clone();
                s.planner.exact_profiles |= typed;
                Box::new(mpc::Mpc::new(s, cfg))
            }
            PolicySpec::Adaptive(s) => {
                // Its searches run the engine, which types the jobs itself.
                let mut s = s.clone();
                if let Some(p) = s.planner.as_mut() {
                    p.exact_profiles |= typed;
                }
                Box::new(adaptive::Adaptive::new(s, cfg))
            }
            PolicySpec::Guarded(s) => Box::new(guarded::Guarded::new(s.clone(), cfg)),
            PolicySpec::Clairvoyant(s) => {
                let mut s = s.clone();
                s.planner.exact_profiles |= typed;
                Box::new(clairvoyant::Clairvoyant::new(s, cfg, jobs))
            }
            PolicySpec::External(e) => (e.make)(cfg)?,
            PolicySpec::Learned { .. } => {
                bail!("the time-of-day policy learns from the simulator's arrivals: it runs only in the engine")
            }
        }))
    }
}

#[cfg(test)]
mod tests;
