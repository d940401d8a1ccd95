//! `dynmig status` and the summary of `dynmig config check`.

use crate::snapshot::{build_snapshot, ManagedNode, NodeRole};
use dynmig_core::config::{expand_hostlist, Config};
use dynmig_core::geometry::place;
use dynmig_core::protocol::event::Event;
use dynmig_core::protocol::intent::NodeIntent;
use dynmig_slurm::{JobState, SlurmApi, SlurmError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
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

/// Version of [`ClusterStatus`]'s JSON form (`dynmig status --json`); a reader refuses
/// another.
pub const STATUS_VERSION: u32 = 1;

/// The cluster as `dynmig status` shows it, and its `--json` form (one object, pretty
/// printed; fields are added only with a new [`STATUS_VERSION`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterStatus {
    /// [`STATUS_VERSION`].
    pub version: u32,
    /// When it was read, seconds since the epoch.
    pub time: i64,
    /// Every managed node, in the config's order.
    pub nodes: Vec<NodeStatus>,
    /// Pending demand: instances per profile that pending jobs ask for.
    pub pending: BTreeMap<String, u32>,
    /// Instances idle on nodes drained for a repartition whose jobs still run (drain waste).
    pub held_idle_instances: u32,
    /// The last 10 events of `<state_dir>/events.jsonl`, oldest first.
    pub events: Vec<Event>,
}

/// One managed node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeStatus {
    /// Slurm node name.
    pub name: String,
    /// GPU model, e.g. `A100-80GB`.
    pub model: String,
    /// What the node is doing.
    pub state: NodeState,
    /// Why, where Slurm or dynmig says: the drain reason, a failure, an admin's reason.
    pub reason: String,
    /// The layout of each GPU, in index order (none while the layout is unknown: no
    /// published layout matching the GRES, or the node is not registered).
    pub gpus: Vec<GpuStatus>,
    /// Jobs running or completing on the node.
    pub jobs: Vec<NodeJob>,
    /// A repartition planned or under way.
    pub plan: Option<PendingPlan>,
}

/// What a node is doing, as `dynmig status` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeState {
    /// In service, no job.
    Idle,
    /// In service, jobs running.
    Busy,
    /// Drained by dynmig for a repartition; its jobs still run.
    Draining,
    /// Drained by dynmig and free of jobs, or deleted for re-registration: its agent applies
    /// the target.
    Repartitioning,
    /// A repartition failed; waits for an administrator.
    Failed,
    /// Drained or down by an administrator (or not responding): dynmig leaves it alone.
    DrainedByAdmin,
    /// Registered, but its agent has published no layout that matches its GRES.
    LayoutUnknown,
}

impl NodeState {
    /// The name in the text table and the JSON form: `idle`, `busy`, `draining`,
    /// `repartitioning`, `failed`, `drained_by_admin`, `layout_unknown`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Busy => "busy",
            Self::Draining => "draining",
            Self::Repartitioning => "repartitioning",
            Self::Failed => "failed",
            Self::DrainedByAdmin => "drained_by_admin",
            Self::LayoutUnknown => "layout_unknown",
        }
    }
}

/// One GPU's layout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuStatus {
    /// GPU index on the node.
    pub index: usize,
    /// The layout, e.g. `3x2g.20gb+1x1g.10gb` (`empty` for none).
    pub layout: String,
    /// The instances at a valid placement as dynmig's placer computes it (agents publish
    /// counts, not placements: the hardware may hold another valid one).
    pub instances: Vec<InstanceStatus>,
}

/// One GPU instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceStatus {
    /// Profile, e.g. `2g.20gb`.
    pub profile: String,
    /// First memory slice.
    pub start: u8,
    /// Memory slices covered.
    pub slices: u8,
}

/// A job on a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeJob {
    /// Job id.
    pub id: u32,
    /// User name.
    pub user: String,
    /// Job name.
    pub name: String,
    /// Its GPU request per node, e.g. `gres:gpu:2g.20gb:1`.
    pub gres: String,
    /// When its time limit ends, seconds since the epoch.
    pub end_time: i64,
}

/// A repartition planned (a reservation from the end of the node's jobs) or under way (the
/// node drained with its target).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PendingPlan {
    /// The target layout, one per GPU, `,` between GPUs.
    pub target: String,
    /// The maintenance reservation of a planned repartition (`None` once drained).
    pub reservation: Option<String>,
    /// When the reservation starts, seconds since the epoch (`None` once drained).
    pub start: Option<i64>,
}

/// Reads the cluster's status: nodes and jobs from Slurm (the controller's readers and
/// snapshot), plans from `<state_dir>/controller-plans.json`, the last 10 events of
/// `<state_dir>/events.jsonl` (read with a 16 MiB bound; a missing log shows none).
///
/// # Errors
/// Slurm cannot be read.
pub fn read_status(
    slurm: &dyn SlurmApi,
    managed: &[ManagedNode],
    state_dir: &Path,
    now: i64,
) -> Result<ClusterStatus, SlurmError> {
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
    let mut held_idle = 0u32;
    let mut out = Vec::with_capacity(managed.len());
    for (m, (name, role)) in managed.iter().zip(&roles) {
        let info = nodes.iter().find(|n| &n.name == name);
        let node_snap = snap.nodes.iter().find(|n| &n.name == name);
        let slurm_reason = info.map_or(String::new(), |n| n.reason.clone());
        let busy = info.is_some_and(dynmig_slurm::NodeInfo::has_jobs);
        let (state, reason) = match role {
            NodeRole::InService if busy => (NodeState::Busy, slurm_reason),
            NodeRole::InService => (NodeState::Idle, slurm_reason),
            NodeRole::Draining { .. } => {
                held_idle += node_snap.map_or(0, |n| n.free().values().sum());
                (NodeState::Draining, slurm_reason)
            }
            NodeRole::Applying => (NodeState::Repartitioning, slurm_reason),
            NodeRole::Unregistered => (
                NodeState::Repartitioning,
                "not registered with Slurm (deleted for re-registration)".to_string(),
            ),
            NodeRole::Failed(w) => (NodeState::Failed, w.clone()),
            NodeRole::Unavailable(w) => (NodeState::DrainedByAdmin, w.clone()),
            NodeRole::LayoutUnknown => (NodeState::LayoutUnknown, slurm_reason),
        };
        // A layout is shown where it is known: a published one matching the GRES (the
        // snapshot's layout is all empty otherwise, and for a node Slurm does not list).
        let known = !matches!(role, NodeRole::Unregistered | NodeRole::LayoutUnknown);
        let gpus = match node_snap {
            Some(n) if known && n.layout.gpus.iter().any(|g| !g.is_empty()) => n
                .layout
                .gpus
                .iter()
                .enumerate()
                .map(|(index, counts)| GpuStatus {
                    index,
                    layout: counts.to_string(),
                    instances: place(m.model, counts)
                        .unwrap_or_default()
                        .iter()
                        .map(|p| InstanceStatus {
                            profile: p.profile.name.to_string(),
                            start: p.start,
                            slices: p.profile.memory_slices,
                        })
                        .collect(),
                })
                .collect(),
            _ => Vec::new(),
        };
        let plan = match (
            plans.get(name),
            info.map(|n| NodeIntent::parse(&n.reason, m.model, m.gpus)),
        ) {
            (_, Some(Ok(Some(NodeIntent::Repartition(target))))) => Some(PendingPlan {
                target: target.to_string(),
                reservation: None,
                start: None,
            }),
            (Some(p), _) => Some(PendingPlan {
                target: p.target.to_string(),
                reservation: Some(p.reservation.clone()),
                start: Some(p.start),
            }),
            _ => None,
        };
        let on_node: Vec<NodeJob> = jobs
            .iter()
            .filter(|j| matches!(j.state, JobState::Running | JobState::Completing))
            .filter(|j| expand_hostlist(&j.nodes).is_ok_and(|l| l.iter().any(|n| n == name)))
            .map(|j| NodeJob {
                id: j.id,
                user: j.user.clone(),
                name: j.name.clone(),
                gres: j.tres_per_node.to_string(),
                end_time: j.end_time,
            })
            .collect();
        out.push(NodeStatus {
            name: name.clone(),
            model: m.model.name.to_string(),
            state,
            reason,
            gpus,
            jobs: on_node,
            plan,
        });
    }
    let text = dynmig_host::fs::read_text_bounded(&state_dir.join("events.jsonl"), 16 << 20)
        .ok()
        .flatten()
        .unwrap_or_default();
    let events = Event::parse_lines(&text);
    let events = events[events.len().saturating_sub(10)..].to_vec();
    Ok(ClusterStatus {
        version: STATUS_VERSION,
        time: now,
        nodes: out,
        pending: snap.demand().pending,
        held_idle_instances: held_idle,
        events,
    })
}

/// Text for a terminal: control characters (a job or reason may hold escape sequences)
/// become `?`.
fn printable(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { '?' } else { c }).collect()
}

impl ClusterStatus {
    /// The table `dynmig status` prints: per node its state, layout per GPU (`,` between
    /// GPUs), jobs, pending plan and reason; then pending demand, drain waste, last events.
    pub fn render_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{:<10} {:<16} {:<34} {:<14} REASON",
            "NODE", "STATE", "LAYOUT (per GPU)", "JOBS"
        );
        for n in &self.nodes {
            let layout = if n.gpus.is_empty() {
                "-".to_string()
            } else {
                n.gpus.iter().map(|g| g.layout.as_str()).collect::<Vec<_>>().join(",")
            };
            let jobs = if n.jobs.is_empty() {
                "-".to_string()
            } else {
                n.jobs.iter().map(|j| j.id.to_string()).collect::<Vec<_>>().join(",")
            };
            let _ = writeln!(
                s,
                "{:<10} {:<16} {layout:<34} {jobs:<14} {}",
                printable(&n.name),
                n.state.name(),
                printable(&n.reason)
            );
            if let Some(p) = &n.plan {
                match (&p.reservation, p.start) {
                    (Some(r), Some(start)) => {
                        let _ = writeln!(
                            s,
                            "{:<10} planned: repartition to {} when reservation {r} starts in {} s (or the node is idle)",
                            "",
                            p.target,
                            (start - self.time).max(0)
                        );
                    }
                    _ => {
                        let _ = writeln!(s, "{:<10} repartition to {}", "", p.target);
                    }
                }
            }
        }
        let _ = writeln!(s, "pending demand (instances per profile): {:?}", self.pending);
        let _ = writeln!(
            s,
            "instances held idle by drains for a repartition (drain waste): {}",
            self.held_idle_instances
        );
        let _ = writeln!(s, "last events:");
        for e in &self.events {
            let _ = writeln!(
                s,
                "  {:.1} {:?} {} {} {}",
                e.time,
                e.kind,
                printable(&e.node),
                e.layout.as_deref().unwrap_or(""),
                printable(e.detail.as_deref().unwrap_or(""))
            );
        }
        s
    }

    /// The JSON form: pretty printed, with a final newline.
    pub fn render_json(&self) -> String {
        // Plain structs of strings, numbers and maps with string keys always serialise.
        serde_json::to_string_pretty(self).expect("a status always serialises") + "\n"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dynmig_core::geometry::{all_layouts, NodeLayout, A100_80GB};

    use dynmig_slurm::fake::{pending_job, published_node, running_job, FakeSlurm};

    fn managed(name: &str) -> ManagedNode {
        ManagedNode {
            name: name.into(),
            model: &A100_80GB,
            gpus: 2,
            allowed: all_layouts(&A100_80GB),
        }
    }

    fn published(name: &str, layout: &str) -> dynmig_slurm::NodeInfo {
        published_node(name, &NodeLayout::parse(&A100_80GB, 2, layout).unwrap())
    }

    #[test]
    fn each_node_has_its_state_layout_per_gpu_jobs_and_plan() {
        let idle = published("a", "7x1g.10gb,1x7g.80gb");
        let mut busy = published("b", "2x3g.40gb,1x7g.80gb");
        busy.state = dynmig_slurm::NodeState::Mixed;
        busy.alloc_cpus = 1;
        let mut draining = published("c", "1x7g.80gb,1x7g.80gb");
        draining.state = dynmig_slurm::NodeState::Mixed;
        draining.alloc_cpus = 1;
        draining.gres_used = "gpu:7g.80gb:1(IDX:1)".into();
        draining.flags.push("DRAIN".into());
        draining.reason =
            NodeIntent::Repartition(NodeLayout::parse(&A100_80GB, 2, "7x1g.10gb,1x7g.80gb").unwrap()).encode();
        let mut admin = published("d", "1x7g.80gb,1x7g.80gb");
        admin.flags.push("DRAIN".into());
        admin.reason = "bad fan".into();
        let mut failed = published("e", "1x7g.80gb,1x7g.80gb");
        failed.flags.push("DRAIN".into());
        failed.reason = NodeIntent::Failed("GPU 0: boom".into()).encode();
        let slurm = FakeSlurm::new(
            vec![idle, busy, draining, admin, failed],
            vec![
                running_job(7, "b", "gres:gpu:3g.40gb:1", 500),
                running_job(8, "c", "gres:gpu:7g.80gb:1", 600),
                pending_job(9, "gres:gpu:1g.10gb:2"),
            ],
        );
        let m: Vec<ManagedNode> = ["a", "b", "c", "d", "e", "f"].iter().map(|n| managed(n)).collect();
        let dir = tempfile::tempdir().unwrap();
        let st = read_status(&slurm, &m, dir.path(), 100).unwrap();
        let states: Vec<&str> = st.nodes.iter().map(|n| n.state.name()).collect();
        assert_eq!(
            states,
            [
                "idle",
                "busy",
                "draining",
                "drained_by_admin",
                "failed",
                "repartitioning"
            ]
        );
        assert_eq!(st.nodes[0].gpus[0].layout, "7x1g.10gb");
        assert_eq!(st.nodes[0].gpus[0].instances.len(), 7);
        assert_eq!(st.nodes[0].gpus[1].instances[0].slices, 8);
        assert_eq!(st.nodes[1].jobs.iter().map(|j| j.id).collect::<Vec<_>>(), [7]);
        assert_eq!(st.nodes[2].plan.as_ref().unwrap().target, "7x1g.10gb,1x7g.80gb");
        assert_eq!(st.nodes[3].reason, "bad fan");
        assert_eq!(st.nodes[4].reason, "GPU 0: boom");
        assert!(st.nodes[5].gpus.is_empty(), "an unregistered node's layout is unknown");
        assert_eq!(st.pending, [("1g.10gb".to_string(), 2)].into());
        // The draining node's second GPU (its 7g.80gb) is busy, the first idle: 1 held idle.
        assert_eq!(st.held_idle_instances, 1);
        let text = st.render_text();
        assert!(text.contains("repartition to 7x1g.10gb,1x7g.80gb"), "{text}");
        assert!(
            text.lines()
                .any(|l| l.starts_with("b ") && l.contains("busy") && l.contains(" 7 ")),
            "{text}"
        );
        let back: ClusterStatus = serde_json::from_str(&st.render_json()).unwrap();
        assert_eq!(back, st);
        assert!(st.render_json().contains("\"state\": \"drained_by_admin\""));
    }
}
