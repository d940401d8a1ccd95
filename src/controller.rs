//! The controller: one per cluster. Each pass reads jobs and nodes from Slurm, computes the
//! pending demand per MIG profile, asks the policy which nodes should change layout, and
//! drains those nodes with the reason `dynmig: repartition to <layout>` — which is how the
//! target reaches the node's agent, through Slurm itself.
//!
//! The controller keeps no state of its own: what is under way is in Slurm (the drain reasons
//! of the nodes, and dynamic nodes deleted for re-registration), and a layout's age is the
//! node's `slurmd_start_time`. A restarted controller therefore picks up where it was.

use crate::agent::{FAILED_PREFIX, REASON_PREFIX};
use crate::events::{Event, EventLog};
use crate::slurm::{parse_node_gres, JobInfo, NodeInfo, SlurmCommands};
use anyhow::Result;
use dynmig_core::demand::Demand;
use dynmig_core::geometry::{all_layouts, GpuModel, NodeLayout, ProfileCounts};
use dynmig_core::gres::TresList;
use dynmig_core::policy::{NodeView, Policy, Repartition};
use std::collections::BTreeMap;
use std::time::Duration;

/// A node dynmig manages, as the config describes it.
#[derive(Debug, Clone)]
pub struct ManagedNode {
    /// Slurm node name.
    pub name: String,
    /// GPU model.
    pub model: &'static GpuModel,
    /// Number of GPUs.
    pub gpus: usize,
    /// Layouts each GPU may take.
    pub allowed: Vec<ProfileCounts>,
}

/// Pending demand per profile from Slurm's pending jobs (their typed GPU requests).
pub fn pending_demand(jobs: &[JobInfo]) -> Demand {
    let mut d = Demand::default();
    for j in jobs.iter().filter(|j| j.state == "PENDING") {
        let Ok(list) = TresList::parse(&j.tres_per_node) else {
            continue;
        };
        for g in list.gpu_entries() {
            if let Some(t) = &g.gres_type {
                d.add_pending(t, u32::try_from(g.count).unwrap_or(u32::MAX));
            }
        }
    }
    d
}

/// Per profile, the most instances one pending job asks for on a node.
pub fn widest_pending(jobs: &[JobInfo]) -> BTreeMap<String, u32> {
    let mut w: BTreeMap<String, u32> = BTreeMap::new();
    for j in jobs.iter().filter(|j| j.state == "PENDING") {
        let Ok(list) = TresList::parse(&j.tres_per_node) else {
            continue;
        };
        for g in list.gpu_entries() {
            if let Some(t) = &g.gres_type {
                let n = u32::try_from(g.count).unwrap_or(u32::MAX);
                let e = w.entry(t.clone()).or_insert(0);
                *e = (*e).max(n);
            }
        }
    }
    w
}

/// Splits a node's GRES totals into one layout per GPU, choosing among `candidates`
/// (non-increasing order, so each split is tried once). `None` if no split exists.
pub fn split_per_gpu(totals: &BTreeMap<String, u32>, gpus: usize, candidates: &[ProfileCounts]) -> Option<NodeLayout> {
    fn go(
        left: &mut BTreeMap<String, u32>,
        gpus: usize,
        from: usize,
        cands: &[ProfileCounts],
        acc: &mut Vec<ProfileCounts>,
    ) -> bool {
        if acc.len() == gpus {
            return left.values().all(|n| *n == 0);
        }
        for (i, c) in cands.iter().enumerate().skip(from) {
            if c.iter().all(|(p, n)| left.get(p).copied().unwrap_or(0) >= n) {
                for (p, n) in c.iter() {
                    *left.get_mut(p).expect("checked") -= n;
                }
                acc.push(c.clone());
                if go(left, gpus, i, cands, acc) {
                    return true;
                }
                acc.pop();
                for (p, n) in c.iter() {
                    *left.get_mut(p).expect("checked") += n;
                }
            }
        }
        false
    }
    let mut cands: Vec<ProfileCounts> = candidates.to_vec();
    if !cands.iter().any(ProfileCounts::is_empty) {
        cands.push(ProfileCounts::empty());
    }
    // Fullest layouts first, so that the common case (every GPU fully partitioned) is found fast.
    cands.sort_by_key(|c| std::cmp::Reverse(c.total()));
    let mut left = totals.clone();
    let mut acc = Vec::new();
    go(&mut left, gpus, 0, &cands, &mut acc).then_some(NodeLayout { gpus: acc })
}

/// Builds the policy's view of one managed node from Slurm's report (`None`: not registered,
/// e.g. a dynamic node between delete and re-registration).
pub fn node_view(m: &ManagedNode, info: Option<&NodeInfo>, now: i64) -> NodeView {
    let Some(n) = info else {
        return NodeView {
            name: m.name.clone(),
            model: m.model,
            layout: NodeLayout {
                gpus: vec![ProfileCounts::empty(); m.gpus],
            },
            allowed: m.allowed.clone(),
            busy: BTreeMap::new(),
            unavailable: true,
            repartitioning: true,
            layout_age: Duration::ZERO,
        };
    };
    let mut totals: BTreeMap<String, u32> = BTreeMap::new();
    for (t, c) in parse_node_gres(&n.gres) {
        *totals.entry(t).or_insert(0) += c;
    }
    let layout = split_per_gpu(&totals, m.gpus, &all_layouts(m.model)).unwrap_or_else(|| NodeLayout {
        gpus: vec![ProfileCounts::empty(); m.gpus],
    });
    let mut busy = BTreeMap::new();
    for (t, c) in parse_node_gres(&n.gres_used) {
        *busy.entry(t).or_insert(0) += c;
    }
    let repartitioning = n.reason.starts_with(REASON_PREFIX);
    let down = matches!(n.state.as_str(), "down" | "unknown" | "future" | "inval");
    NodeView {
        name: m.name.clone(),
        model: m.model,
        layout,
        allowed: m.allowed.clone(),
        busy,
        unavailable: n.is_drain() || down,
        repartitioning,
        layout_age: Duration::from_secs(u64::try_from(now - n.slurmd_start_time).unwrap_or(0)),
    }
}

/// The outcome of one pass.
#[derive(Debug, Clone, Default)]
pub struct PassReport {
    /// Pending demand seen.
    pub demand: Demand,
    /// Nodes drained for repartitioning in this pass.
    pub drained: Vec<Repartition>,
}

/// One controller pass. With `dry_run`, decides but changes nothing in Slurm.
///
/// A node drained for a repartition whose jobs have not ended within `drain_timeout` is
/// given back to service with its old layout (the repartition is dropped; the policy may
/// choose again later).
///
/// # Errors
/// Slurm cannot be read, or a drain is refused.
pub fn pass(
    slurm: &SlurmCommands,
    managed: &[ManagedNode],
    policy: &mut dyn Policy,
    events: &EventLog,
    drain_timeout: Duration,
    dry_run: bool,
) -> Result<PassReport> {
    let jobs = slurm.jobs()?;
    let nodes = slurm.nodes()?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs() as i64;
    let mut demand = pending_demand(&jobs);
    let mut views = Vec::new();
    for m in managed {
        let info = nodes.iter().find(|n| n.name == m.name);
        // A failed repartition waits for an administrator: not ours to touch.
        if info.is_some_and(|n| n.reason.starts_with(FAILED_PREFIX)) {
            continue;
        }
        if let Some(n) = info.filter(|n| n.reason.starts_with(REASON_PREFIX) && n.has_jobs()) {
            let waited = now - n.reason_changed_at;
            if n.reason_changed_at > 0 && waited > drain_timeout.as_secs() as i64 {
                if !dry_run {
                    slurm.resume(&n.name)?;
                    events.log(
                        &Event::new("drain_timeout", &n.name)
                            .detail(&format!("jobs still ran after {waited} s; repartition dropped")),
                    );
                }
                continue;
            }
        }
        if let Some(target) = info.and_then(|n| n.reason.strip_prefix(REASON_PREFIX)) {
            if let Ok(t) = NodeLayout::parse(m.model, m.gpus, target.trim()) {
                for (p, c) in t.totals() {
                    demand.add_incoming(p, c);
                }
            }
        }
        views.push(node_view(m, info, now));
    }
    demand.add_stranded(
        &widest_pending(&jobs),
        views
            .iter()
            .filter(|v| !v.unavailable)
            .map(|v| v.free())
            .collect::<Vec<_>>()
            .iter(),
    );
    let plan = policy.plan(&views, &demand);
    for r in &plan {
        let reason = format!("{REASON_PREFIX}{}", r.target);
        if !dry_run {
            slurm.drain(&r.node, &reason)?;
            let serves: Vec<String> = r.serves.iter().map(|(p, n)| format!("{n}x{p}")).collect();
            events.log(
                &Event::new("drain", &r.node)
                    .layout(&r.target.to_string())
                    .detail(&format!("serves {}", serves.join("+"))),
            );
        }
    }
    Ok(PassReport { demand, drained: plan })
}

#[cfg(test)]
mod tests {
    use super::*;
    use dynmig_core::geometry::A100_80GB;

    #[test]
    fn splits_totals_per_gpu() {
        let totals: BTreeMap<String, u32> = [("3g.40gb".to_string(), 2), ("7g.80gb".to_string(), 1)].into();
        let l = split_per_gpu(&totals, 2, &all_layouts(&A100_80GB)).unwrap();
        assert_eq!(l.to_string(), "2x3g.40gb,1x7g.80gb");
        let odd: BTreeMap<String, u32> = [("7g.80gb".to_string(), 3)].into();
        assert!(split_per_gpu(&odd, 2, &all_layouts(&A100_80GB)).is_none());
        assert_eq!(
            split_per_gpu(&BTreeMap::new(), 2, &all_layouts(&A100_80GB))
                .unwrap()
                .to_string(),
            "empty,empty"
        );
    }

    #[test]
    fn demand_from_typed_pending_jobs_only() {
        let job = |state: &str, tres: &str| JobInfo {
            id: 1,
            name: "j".into(),
            state: state.into(),
            reason: String::new(),
            tres_per_node: tres.into(),
            nodes: String::new(),
            submit_time: 0,
            start_time: 0,
            end_time: 0,
            admin_comment: String::new(),
            exit_code: 0,
        };
        let d = pending_demand(&[
            job("PENDING", "gres:gpu:2g.20gb:2"),
            job("PENDING", "gres/gpu:2g.20gb:1"),
            job("RUNNING", "gres:gpu:3g.40gb:1"),
            job("PENDING", "gres:gpu:1"),
        ]);
        assert_eq!(d.pending, [("2g.20gb".to_string(), 3)].into());
    }
}
