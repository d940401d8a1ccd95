//! `dynmig status` and the summary of `dynmig config check`.

use crate::snapshot::{build_snapshot, ManagedNode, NodeRole};
use dynmig_core::config::Config;
use dynmig_core::protocol::event::Event;
use dynmig_slurm::{SlurmApi, SlurmError};
use std::fmt::Write;
use std::path::Path;

/// A summary of the config: node groups, policy, job handling.
pub fn config_summary(c: &Config) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "policy: {:?}", c.policy);
    let _ = writeln!(
        s,
        "controller: every {:?}, at most {} repartitions at once, layouts live at least {:?}",
        c.controller.interval, c.controller.max_concurrent_repartitions, c.controller.min_layout_lifetime
    );
    let _ = writeln!(
        s,
        "jobs: whole GPU -> {:?}, multi-GPU -> {:?}, default memory {} bytes",
        c.jobs.whole_gpu, c.jobs.multi_gpu, c.estimator.default_mem_bytes
    );
    for g in &c.node_groups {
        let _ = writeln!(
            s,
            "node group {}: {} x {} {} ({:?} backend), initial layout {} per GPU",
            g.name,
            g.nodes.join(","),
            g.gpus,
            g.gpu_model.name,
            g.backend,
            g.initial_layout
        );
    }
    s
}

/// Nodes with their layouts and roles (a planned repartition with its target and when its
/// reservation starts), pending demand, instances held idle by drains, and the last 10 events
/// of `<state_dir>/events.jsonl` (read with a 16 MiB bound; a missing log shows none).
///
/// # Errors
/// Slurm cannot be read.
pub fn status(slurm: &dyn SlurmApi, managed: &[ManagedNode], state_dir: &Path, now: i64) -> Result<String, SlurmError> {
    let nodes = slurm.nodes()?;
    let jobs = slurm.jobs()?;
    let (snap, roles) = build_snapshot(&jobs, &nodes, managed, now);
    let plans = crate::plans::load_plans(
        &state_dir.join("controller-plans.json"),
        managed,
        &dynmig_host::fs::LineLog::none(),
        now,
        false,
    )
    .plans;
    let events = state_dir.join("events.jsonl");
    let mut held_idle = 0u32;
    let mut s = String::new();
    let _ = writeln!(s, "{:<10} {:<16} {:<34} REASON", "NODE", "ROLE", "LAYOUT (per GPU)");
    for (name, role) in &roles {
        let layout = snap
            .nodes
            .iter()
            .find(|n| &n.name == name)
            .map_or("-".to_string(), |n| n.layout.to_string());
        let (role, reason) = match role {
            NodeRole::InService | NodeRole::LayoutUnknown if plans.get(name).is_some() => {
                let p = plans.get(name).expect("checked");
                (
                    "planned",
                    format!(
                        "repartition to {} when reservation {} starts in {} s (or the node is idle)",
                        p.target,
                        p.reservation,
                        (p.start - now).max(0)
                    ),
                )
            }
            NodeRole::InService => ("in service", String::new()),
            NodeRole::Draining { .. } => {
                let idle: u32 = snap
                    .nodes
                    .iter()
                    .find(|n| &n.name == name)
                    .map_or(0, |n| n.free().values().sum());
                held_idle += idle;
                ("draining", String::new())
            }
            NodeRole::Applying => ("applying", String::new()),
            NodeRole::Failed(w) => ("failed", w.clone()),
            NodeRole::Unavailable(w) => ("unavailable", w.clone()),
            NodeRole::Unregistered => ("not registered", String::new()),
            NodeRole::LayoutUnknown => ("layout unknown", String::new()),
        };
        let reason = if reason.is_empty() {
            nodes
                .iter()
                .find(|n| &n.name == name)
                .map_or(String::new(), |n| n.reason.clone())
        } else {
            reason
        };
        let _ = writeln!(s, "{name:<10} {role:<16} {layout:<34} {reason}");
    }
    let _ = writeln!(s, "pending demand (instances per profile): {:?}", snap.demand().pending);
    let _ = writeln!(
        s,
        "instances held idle by drains for a repartition (drain waste): {held_idle}"
    );
    let text = dynmig_host::fs::read_text_bounded(&events, 16 << 20)
        .ok()
        .flatten()
        .unwrap_or_default();
    let events = Event::parse_lines(&text);
    let _ = writeln!(s, "last events:");
    for e in events.iter().rev().take(10).rev() {
        let _ = writeln!(
            s,
            "  {:.1} {:?} {} {} {}",
            e.time,
            e.kind,
            e.node,
            e.layout.as_deref().unwrap_or(""),
            e.detail.as_deref().unwrap_or("")
        );
    }
    Ok(s)
}
