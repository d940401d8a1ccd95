//! `dynmig status` and `dynmig config check`'s summary.

use crate::context::Ctx;
use crate::controller::{node_view, pending_demand};
use crate::events::EventLog;
use anyhow::Result;
use std::fmt::Write;

/// A summary of the config: node groups, policy, job handling.
pub fn config_summary(ctx: &Ctx) -> String {
    let c = &ctx.config;
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

/// Nodes with their layouts and states, pending demand, and the last events.
///
/// # Errors
/// Slurm cannot be read.
pub fn status(ctx: &Ctx) -> Result<String> {
    let slurm = ctx.slurm();
    let nodes = slurm.nodes()?;
    let jobs = slurm.jobs()?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs() as i64;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<10} {:<10} {:<34} {}",
        "NODE", "STATE", "LAYOUT (per GPU)", "REASON"
    );
    for m in ctx.managed_nodes() {
        let info = nodes.iter().find(|n| n.name == m.name);
        let v = node_view(&m, info, now);
        let state = info.map_or("(not registered)".to_string(), |n| {
            let mut st = n.state.clone();
            if n.is_drain() {
                st.push_str("+drain");
            }
            st
        });
        let _ = writeln!(
            s,
            "{:<10} {:<10} {:<34} {}",
            m.name,
            state,
            v.layout.to_string(),
            info.map_or("", |n| n.reason.as_str())
        );
    }
    let d = pending_demand(&jobs);
    let _ = writeln!(s, "pending demand (instances per profile): {:?}", d.pending);
    let events = EventLog::read(&ctx.config.paths.state_dir.join("events.jsonl"));
    let _ = writeln!(s, "last events:");
    for e in events.iter().rev().take(10).rev() {
        let _ = writeln!(
            s,
            "  {:.1} {} {} {} {}",
            e.time,
            e.kind,
            e.node,
            e.layout.as_deref().unwrap_or(""),
            e.detail.as_deref().unwrap_or("")
        );
    }
    Ok(s)
}
