//! Slurm's jobs and nodes -> the [`ClusterSnapshot`] the policy sees.

use dynmig_core::config::{expand_hostlist, AllowedLayouts, Config};
use dynmig_core::geometry::{all_layouts, GpuModel, NodeLayout, ProfileCounts};
use dynmig_core::gres::shows_totals;
use dynmig_core::protocol::intent::NodeIntent;
use dynmig_core::protocol::layout::PublishedLayout;
use dynmig_core::snapshot::{ClusterSnapshot, NodeSnapshot, Pending};
use dynmig_slurm::json::parse_node_gres;
use dynmig_slurm::{JobInfo, JobState, NodeInfo};
use std::collections::{BTreeMap, HashMap};
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

/// Every node the config's node groups list, with the layouts its GPUs may take.
pub fn managed_nodes(config: &Config) -> Vec<ManagedNode> {
    let mut out = Vec::new();
    for g in &config.node_groups {
        let allowed = match &g.allowed_layouts {
            AllowedLayouts::All => all_layouts(g.gpu_model),
            AllowedLayouts::Only(v) => v.clone(),
        };
        for n in &g.nodes {
            out.push(ManagedNode {
                name: n.clone(),
                model: g.gpu_model,
                gpus: g.gpus as usize,
                allowed: allowed.clone(),
            });
        }
    }
    out
}

/// What a managed node is to the controller now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeRole {
    /// In service with a known layout: a candidate.
    InService,
    /// Drained by dynmig for a repartition, jobs still running; drained since (seconds since
    /// the epoch, 0 if unknown).
    Draining {
        /// When the intent was set.
        since: i64,
    },
    /// Drained by dynmig and free of jobs: its agent is applying the target.
    Applying,
    /// A failed repartition, waiting for an administrator: left alone.
    Failed(String),
    /// Drained or down by an administrator (or not responding): left alone.
    Unavailable(String),
    /// Not registered with Slurm (a dynamic node between delete and re-registration).
    Unregistered,
    /// Registered, but its agent has not published a layout matching its GRES yet.
    LayoutUnknown,
}

impl NodeRole {
    /// The role's name in metrics: `in_service`, `draining`, `applying`, `failed`,
    /// `unavailable`, `unregistered` or `layout_unknown`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::InService => "in_service",
            Self::Draining { .. } => "draining",
            Self::Applying => "applying",
            Self::Failed(_) => "failed",
            Self::Unavailable(_) => "unavailable",
            Self::Unregistered => "unregistered",
            Self::LayoutUnknown => "layout_unknown",
        }
    }
}

/// Builds the snapshot of `managed` nodes from Slurm's `jobs` and `nodes` at `now` (seconds
/// since the epoch), and says what each node is ([`NodeRole`], in `managed` order).
///
/// Pending demand: each pending job's typed GPU request per node (`gres:gpu:2g.20gb:2` adds 2
/// instances of 2g.20gb; untyped requests are not MIG demand), for the jobs Slurm would start
/// once an instance is free ([`JobInfo::is_demand`]): held jobs, jobs waiting for a
/// dependency, a begin time or a limit, and jobs Slurm cannot start are no demand. A node's layout is the one its
/// agent published ([`PublishedLayout`]) when it agrees with the node's GRES; otherwise the
/// layout is unknown and the node is no candidate and no supply.
pub fn build_snapshot(
    jobs: &[JobInfo],
    nodes: &[NodeInfo],
    managed: &[ManagedNode],
    now: i64,
) -> (ClusterSnapshot, Vec<(String, NodeRole)>) {
    let mut pending = Pending::default();
    for j in jobs.iter().filter(|j| j.is_demand(now)) {
        for (t, n) in j.tres_per_node.typed() {
            pending.add(t, n, 1);
        }
    }
    let by_name: HashMap<&str, &NodeInfo> = nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    let ends = work_ends(jobs);
    let mut out = Vec::with_capacity(managed.len());
    let mut roles = Vec::with_capacity(managed.len());
    for m in managed {
        let (snap, role) = node_snapshot(m, by_name.get(m.name.as_str()).copied(), now);
        let snap = snap.map(|mut s| {
            if let Some(end) = ends.get(m.name.as_str()) {
                s.work_ends_in = Duration::from_secs(u64::try_from(end - now).unwrap_or(0));
            }
            s
        });
        roles.push((m.name.clone(), role));
        if let Some(s) = snap {
            out.push(s);
        }
    }
    (ClusterSnapshot { nodes: out, pending }, roles)
}

/// Per node, the latest `end_time` (the time limit's end) of the jobs running or completing
/// there, seconds since the epoch. Node lists are Slurm hostlists, expanded by the config's
/// typed parser; a list it refuses is left out (that job then counts on no node).
pub fn work_ends(jobs: &[JobInfo]) -> HashMap<String, i64> {
    let mut ends: HashMap<String, i64> = HashMap::new();
    for j in jobs
        .iter()
        .filter(|j| matches!(j.state, JobState::Running | JobState::Completing))
    {
        let Ok(names) = expand_hostlist(&j.nodes) else {
            continue;
        };
        for n in names {
            let e = ends.entry(n).or_insert(j.end_time);
            *e = (*e).max(j.end_time);
        }
    }
    ends
}

/// One node's snapshot (`None`: not the policy's to see, e.g. a failed repartition) and role.
fn node_snapshot(m: &ManagedNode, info: Option<&NodeInfo>, now: i64) -> (Option<NodeSnapshot>, NodeRole) {
    let empty = || NodeLayout {
        gpus: vec![ProfileCounts::empty(); m.gpus],
    };
    let mut snap = NodeSnapshot {
        name: m.name.clone(),
        model: m.model,
        layout: empty(),
        allowed: m.allowed.as_slice().into(),
        busy: BTreeMap::new(),
        running: BTreeMap::new(),
        unavailable: true,
        repartitioning: false,
        layout_age: Duration::ZERO,
        incoming: BTreeMap::new(),
        schedulable_free: BTreeMap::new(),
        work_ends_in: Duration::ZERO,
        planned: None,
        version: 0,
    };
    let Some(n) = info else {
        // Deleted for re-registration: counts as a repartition under way.
        snap.repartitioning = true;
        return (Some(snap), NodeRole::Unregistered);
    };
    let role = match NodeIntent::parse(&n.reason, m.model, m.gpus) {
        Ok(Some(NodeIntent::Failed(why))) => return (None, NodeRole::Failed(why)),
        Err(e) => return (None, NodeRole::Failed(format!("unreadable dynmig reason: {e}"))),
        Ok(Some(NodeIntent::Repartition(target))) => {
            snap.repartitioning = true;
            snap.incoming = target.totals();
            if n.has_jobs() {
                NodeRole::Draining {
                    since: n.reason_changed_at,
                }
            } else {
                NodeRole::Applying
            }
        }
        Ok(None) if n.is_drain() || n.is_down() => NodeRole::Unavailable(n.reason.clone()),
        Ok(None) => NodeRole::InService,
    };
    for (p, c) in parse_node_gres(&n.gres_used) {
        let e = snap.busy.entry(p).or_insert(0);
        *e = e.saturating_add(c);
    }
    snap.running = snap.busy.clone();
    snap.layout_age = Duration::from_secs(u64::try_from(now - n.slurmd_start_time).unwrap_or(0));
    let published = PublishedLayout::parse(&n.extra, m.model, m.gpus).ok().flatten();
    let known = published.filter(|p| shows_totals(&n.gres, &p.0.totals()));
    match known {
        Some(p) => snap.layout = p.0,
        None if role == NodeRole::InService => {
            return (Some(snap), NodeRole::LayoutUnknown);
        }
        None => {}
    }
    if role == NodeRole::InService {
        snap.unavailable = false;
        snap.schedulable_free = snap.free();
    }
    (Some(snap), role)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dynmig_core::geometry::A100_80GB;
    use dynmig_slurm::fake::{idle_node, pending_job, published_node, running_job};

    fn managed(name: &str) -> ManagedNode {
        ManagedNode {
            name: name.into(),
            model: &A100_80GB,
            gpus: 2,
            allowed: all_layouts(&A100_80GB),
        }
    }

    fn published(name: &str, layout: &str) -> NodeInfo {
        published_node(name, &NodeLayout::parse(&A100_80GB, 2, layout).unwrap())
    }

    #[test]
    fn the_published_layout_is_the_nodes_layout_per_gpu() {
        let n = published("n1", "2x3g.40gb,1x7g.80gb");
        let (s, roles) = build_snapshot(&[], &[n], &[managed("n1")], 100);
        assert_eq!(s.nodes[0].layout.to_string(), "2x3g.40gb,1x7g.80gb");
        assert!(!s.nodes[0].unavailable);
        assert_eq!(roles[0].1, NodeRole::InService);
    }

    #[test]
    fn a_layout_that_disagrees_with_gres_is_unknown_not_guessed() {
        let mut n = published("n1", "2x3g.40gb,1x7g.80gb");
        n.gres = "gpu:7g.80gb:2".into();
        let (s, roles) = build_snapshot(&[], &[n], &[managed("n1")], 100);
        assert_eq!(roles[0].1, NodeRole::LayoutUnknown);
        assert!(s.nodes[0].unavailable, "no candidate, no supply");
        let mut bare = idle_node("n2", "gpu:7g.80gb:2");
        bare.extra = "site text".into();
        let (_, roles) = build_snapshot(&[], &[bare], &[managed("n2")], 100);
        assert_eq!(roles[0].1, NodeRole::LayoutUnknown);
    }

    #[test]
    fn an_admins_drain_is_left_alone_and_a_failed_repartition_is_hidden() {
        let mut a = published("a", "1x7g.80gb,1x7g.80gb");
        a.flags.push("DRAIN".into());
        a.reason = "dynmig: repartition to 7x1g.10gb,7x1g.10gb".into(); // the old format, or an admin's
        let mut f = published("f", "1x7g.80gb,1x7g.80gb");
        f.flags.push("DRAIN".into());
        f.reason = NodeIntent::Failed("GPU 0: boom".into()).encode();
        let (s, roles) = build_snapshot(&[], &[a, f], &[managed("a"), managed("f")], 100);
        assert!(matches!(roles[0].1, NodeRole::Unavailable(_)));
        assert!(s.nodes[0].unavailable && !s.nodes[0].repartitioning);
        assert!(matches!(roles[1].1, NodeRole::Failed(_)));
        assert_eq!(s.nodes.len(), 1);
    }

    #[test]
    fn pending_typed_requests_are_demand_and_a_target_is_incoming() {
        let mut d = published("d", "1x7g.80gb,1x7g.80gb");
        d.flags.push("DRAIN".into());
        d.reason = NodeIntent::Repartition(NodeLayout::parse(&A100_80GB, 2, "7x1g.10gb,1x7g.80gb").unwrap()).encode();
        let jobs = vec![
            pending_job(1, "gres:gpu:2g.20gb:2"),
            pending_job(2, "gres/gpu:2g.20gb:1"),
            pending_job(3, "gres:gpu:1"),
        ];
        let (s, roles) = build_snapshot(&jobs, &[d], &[managed("d")], 100);
        let demand = s.demand();
        assert_eq!(demand.pending, [("2g.20gb".to_string(), 3)].into());
        assert_eq!(demand.incoming["1g.10gb"], 7);
        assert_eq!(roles[0].1, NodeRole::Applying);
    }

    #[test]
    fn work_ends_at_the_latest_time_limit_of_the_jobs_running_on_each_node() {
        let mut completing = running_job(3, "n2", "", 900);
        completing.state = JobState::Completing;
        let mut pending = pending_job(4, "gres:gpu:1g.10gb:1");
        pending.end_time = 9999;
        let jobs = vec![
            running_job(1, "n[1-2]", "", 1200),
            running_job(2, "n1", "", 1500),
            completing,
            pending,
            running_job(5, "n[1-", "", 9999),
        ];
        let ends = work_ends(&jobs);
        assert_eq!(ends["n1"], 1500);
        assert_eq!(ends["n2"], 1200);
        assert_eq!(ends.len(), 2, "pending jobs and unreadable node lists count nowhere");
        let (s, _) = build_snapshot(&jobs, &[published("n1", "1x7g.80gb,1x7g.80gb")], &[managed("n1")], 1000);
        assert_eq!(s.nodes[0].work_ends_in, Duration::from_secs(500));
    }
}
