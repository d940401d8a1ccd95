//! The cluster as a policy sees it: one [`ClusterSnapshot`], built by the controller from
//! Slurm and by the simulator from its virtual state, and turned into the policy's inputs
//! ([`NodeSnapshot`]s and [`Demand`]) by the same code here.
//!
//! Each node carries its real per-GPU layout (the controller reads the layout the agent
//! published, [`crate::protocol::layout::PublishedLayout`]; the simulator knows it), never one
//! guessed from GRES totals.

use crate::demand::Demand;
use crate::geometry::{GpuModel, NodeLayout, ProfileCounts};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// What a policy sees of one node.
#[derive(Debug, Clone)]
pub struct NodeSnapshot {
    /// Slurm node name.
    pub name: String,
    /// GPU model of every GPU on the node.
    pub model: &'static GpuModel,
    /// Current layout, one entry per GPU.
    pub layout: NodeLayout,
    /// Layouts each GPU of this node may take (from the node group's `allowed_layouts`).
    /// Shared: every node of a group holds the same list.
    pub allowed: Arc<[ProfileCounts]>,
    /// Instances in use by running jobs, per profile.
    pub busy: BTreeMap<String, u32>,
    /// Running jobs' instances per profile they asked for (their GRES type). In Slurm this is
    /// `busy`: a job gets the type it asks for. The simulator lets a job take a larger free
    /// instance, so there the two differ.
    pub running: BTreeMap<String, u32>,
    /// Whether the node takes no new jobs now (drained or draining, by dynmig or an admin, not
    /// registered, or its layout unknown): it is no candidate, and its free instances serve
    /// nothing.
    pub unavailable: bool,
    /// Whether dynmig is repartitioning the node now (counts against the concurrency limit).
    pub repartitioning: bool,
    /// How long the current layout has been in place.
    pub layout_age: Duration,
    /// Instances per profile that a repartition under way will bring (its target).
    pub incoming: BTreeMap<&'static str, u32>,
    /// Free instances per profile on GPUs that take jobs now: what can serve a pending
    /// multi-instance job, which needs all its instances on one node.
    pub schedulable_free: BTreeMap<&'static str, u32>,
    /// Time from now until the last job running on the node must end: the latest end of its
    /// running jobs' time limits (Slurm's `end_time` of a running job; the simulator's time
    /// limits). `Duration::ZERO` for an idle node. A repartition planned for then costs no
    /// drain: Slurm's backfill keeps the node busy until then with jobs that end in time.
    pub work_ends_in: Duration,
    /// A repartition scheduled for this node but not started: the node still takes jobs that
    /// end before the scheduled time (a maintenance reservation), then changes to this target.
    /// A policy moves the plan by returning another target for the node, and cancels it by
    /// returning the node's current layout ([`crate::policy::Repartition`]).
    pub planned: Option<NodeLayout>,
    /// Changes whenever the node's `layout`, `planned`, `busy`, `running`, `unavailable` or
    /// `repartitioning` change (not with the clock-driven `layout_age` and `work_ends_in`):
    /// a policy may keep what it derived from those fields while the version stays. `0`:
    /// unknown, nothing may be kept (the controller builds every snapshot anew and leaves it
    /// 0; the simulator's incremental view numbers its updates).
    pub version: u64,
}

impl NodeSnapshot {
    /// Free (idle) instances per profile: the current layout less the busy ones.
    pub fn free(&self) -> BTreeMap<&'static str, u32> {
        let mut free = self.layout.totals();
        for (p, n) in free.iter_mut() {
            *n = n.saturating_sub(self.busy.get(*p).copied().unwrap_or(0));
        }
        free
    }

    /// Whether any instance runs a job.
    pub fn is_idle(&self) -> bool {
        self.busy.values().all(|n| *n == 0)
    }
}

/// Pending jobs, summarised per profile.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pending {
    /// Instances per profile that pending jobs ask for (a job asking `gpu:2g.20gb:2` per node
    /// adds 2).
    pub instances: BTreeMap<String, u32>,
    /// Per profile, the most instances one pending job asks for on one node.
    pub widest: BTreeMap<String, u32>,
}

impl Pending {
    /// Adds `jobs` pending jobs, each asking `per_job` instances of `profile` on one node.
    /// Counts saturate at `u32::MAX`.
    pub fn add(&mut self, profile: &str, per_job: u32, jobs: u32) {
        if per_job == 0 || jobs == 0 {
            return;
        }
        let n = self.instances.entry(profile.to_string()).or_insert(0);
        *n = n.saturating_add(per_job.saturating_mul(jobs));
        let w = self.widest.entry(profile.to_string()).or_insert(0);
        *w = (*w).max(per_job);
    }
}

/// The cluster at one moment: every managed node and the pending jobs.
#[derive(Debug, Clone, Default)]
pub struct ClusterSnapshot {
    /// Every node dynmig manages.
    pub nodes: Vec<NodeSnapshot>,
    /// Pending jobs.
    pub pending: Pending,
}

impl ClusterSnapshot {
    /// The demand a policy plans against: pending instances, plus the instances stranded on
    /// nodes too small for the widest pending job of their profile
    /// ([`Demand::add_stranded`]), and the instances repartitions under way will bring.
    pub fn demand(&self) -> Demand {
        let mut d = Demand::default();
        for (p, n) in &self.pending.instances {
            d.add_pending(p, *n);
        }
        d.add_stranded(&self.pending.widest, self.nodes.iter().map(|n| &n.schedulable_free));
        for n in &self.nodes {
            for (p, c) in &n.incoming {
                d.add_incoming(p, *c);
            }
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::A100_80GB;

    fn node(name: &str, layout: &str, free: &[(&'static str, u32)]) -> NodeSnapshot {
        NodeSnapshot {
            name: name.into(),
            model: &A100_80GB,
            layout: NodeLayout::parse(&A100_80GB, 2, layout).unwrap(),
            allowed: Arc::new([]),
            busy: BTreeMap::new(),
            running: BTreeMap::new(),
            unavailable: false,
            repartitioning: false,
            layout_age: Duration::ZERO,
            incoming: BTreeMap::new(),
            schedulable_free: free.iter().copied().collect(),
            work_ends_in: Duration::ZERO,
            planned: None,
            version: 0,
        }
    }

    #[test]
    fn demand_counts_pending_stranded_and_incoming() {
        let mut s = ClusterSnapshot::default();
        s.pending.add("7g.80gb", 2, 1);
        s.pending.add("1g.10gb", 1, 3);
        s.nodes
            .push(node("a", "1x7g.80gb,7x1g.10gb", &[("7g.80gb", 1), ("1g.10gb", 7)]));
        let mut b = node("b", "1x7g.80gb,1x7g.80gb", &[]);
        b.incoming = [("3g.40gb", 2)].into();
        s.nodes.push(b);
        let d = s.demand();
        assert_eq!(d.pending["7g.80gb"], 3, "node a's lone 7g cannot serve the 2-GPU job");
        assert_eq!(d.pending["1g.10gb"], 3);
        assert_eq!(d.incoming["3g.40gb"], 2);
    }

    #[test]
    fn pending_counts_saturate() {
        let mut p = Pending::default();
        p.add("1g.10gb", u32::MAX, 3);
        p.add("1g.10gb", 1, 1);
        assert_eq!(p.instances["1g.10gb"], u32::MAX);
        assert_eq!(p.widest["1g.10gb"], u32::MAX);
    }
}
