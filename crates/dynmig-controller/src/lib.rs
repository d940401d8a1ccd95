//! dynmig-controller: one per cluster. Each [`pass`] reads jobs and nodes from Slurm (through
//! [`SlurmApi`]), builds the [`ClusterSnapshot`] (each node's real per-GPU layout as its agent
//! published it), asks the policy which nodes should change layout, and drains those nodes
//! with a [`NodeIntent`] as the reason — which is how the target reaches the node's agent,
//! through Slurm itself.
//!
//! The controller keeps no state of its own: what is under way is in Slurm (the intents in
//! the drain reasons, and dynamic nodes deleted for re-registration), and a layout's age is
//! the node's `slurmd_start_time`. A restarted controller picks up where it was.
#![deny(missing_docs)]

mod snapshot;
pub mod status;

pub use snapshot::{build_snapshot, managed_nodes, ManagedNode, NodeRole};

use dynmig_core::config::{Config, PolicyConfig};
use dynmig_core::demand::Demand;
use dynmig_core::policy::{DemandDriven, NoChange, Policy, PolicyLimits, Repartition};
use dynmig_core::protocol::event::{Event, EventKind};
use dynmig_core::protocol::intent::NodeIntent;
use dynmig_host::fs::LineLog;
use dynmig_slurm::{SlurmApi, SlurmError};
use std::time::Duration;

/// The configured policy.
pub fn policy_from_config(config: &Config) -> Box<dyn Policy> {
    let c = &config.controller;
    match config.policy {
        PolicyConfig::Demand { min_gain, .. } => Box::new(DemandDriven::new(PolicyLimits {
            max_concurrent: c.max_concurrent_repartitions as usize,
            min_layout_lifetime: c.min_layout_lifetime,
            min_gain,
        })),
        PolicyConfig::Static | PolicyConfig::None => Box::new(NoChange),
    }
}

/// The outcome of one pass.
#[derive(Debug, Clone, Default)]
pub struct PassReport {
    /// Demand the policy planned against.
    pub demand: Demand,
    /// Nodes drained for repartitioning in this pass (or that would be, in a dry run).
    pub drained: Vec<Repartition>,
    /// Nodes whose repartition was dropped because their jobs outlived `drain_timeout`.
    pub timed_out: Vec<String>,
}

/// What one pass needs besides Slurm and the policy.
#[derive(Debug, Clone)]
pub struct PassSettings {
    /// A node drained for a repartition whose jobs have not ended within this time is given
    /// back to service with its old layout.
    pub drain_timeout: Duration,
    /// Decide, but change nothing in Slurm.
    pub dry_run: bool,
    /// Now, seconds since the Unix epoch.
    pub now: i64,
}

/// One controller pass.
///
/// # Errors
/// Slurm cannot be read, or a drain or resume is refused.
pub fn pass(
    slurm: &dyn SlurmApi,
    managed: &[ManagedNode],
    policy: &mut dyn Policy,
    events: &LineLog,
    settings: &PassSettings,
) -> Result<PassReport, SlurmError> {
    let jobs = slurm.jobs()?;
    let nodes = slurm.nodes()?;
    let now = settings.now;
    let (snapshot, roles) = build_snapshot(&jobs, &nodes, managed, now);
    let mut timed_out = Vec::new();
    for (name, role) in &roles {
        if let NodeRole::Draining { since } = role {
            let waited = now - since;
            if *since > 0 && waited > settings.drain_timeout.as_secs() as i64 {
                if !settings.dry_run {
                    slurm.resume(name)?;
                    events.append(
                        &Event::at(now as f64, EventKind::DrainTimeout, name)
                            .detail(&format!("jobs still ran after {waited} s; repartition dropped"))
                            .encode(),
                    );
                }
                timed_out.push(name.clone());
            }
        }
    }
    // A node whose repartition was just dropped is back in service next pass.
    let mut snapshot = snapshot;
    snapshot.nodes.retain(|n| !timed_out.contains(&n.name));
    let demand = snapshot.demand();
    let plan = policy.plan(&snapshot.nodes, &demand);
    if !settings.dry_run {
        for r in &plan {
            slurm.drain(&r.node, &NodeIntent::Repartition(r.target.clone()))?;
            let serves: Vec<String> = r.serves.iter().map(|(p, n)| format!("{n}x{p}")).collect();
            events.append(
                &Event::at(now as f64, EventKind::Drain, &r.node)
                    .layout(&r.target)
                    .detail(&format!("serves {}", serves.join("+")))
                    .encode(),
            );
        }
    }
    Ok(PassReport {
        demand,
        drained: plan,
        timed_out,
    })
}
