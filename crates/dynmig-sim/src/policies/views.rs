//! What the core policies see of the simulated cluster: the same [`NodeView`] and [`Demand`]
//! the controller builds from Slurm (src/controller.rs), built from the simulated state.

use crate::cluster::{Cluster, GpuState};
use dynmig_core::demand::Demand;
use dynmig_core::geometry::{ProfileCounts, ProfileSpec};
use dynmig_core::policy::NodeView;
use std::collections::BTreeMap;
use std::time::Duration;

/// The name of simulated node `i`: `n0`, `n1`, ...
pub fn node_name(i: usize) -> String {
    format!("n{i}")
}

/// The index of a simulated node name, if it is one.
pub fn node_index(name: &str) -> Option<usize> {
    name.strip_prefix('n')?.parse().ok()
}

/// One view per node, in node order. A node is unavailable and repartitioning while any of
/// its GPUs drains or reconfigures (what a drained node with a `dynmig:` reason is to the
/// controller); its layout age runs from its last reconfiguration.
pub fn node_views(c: &Cluster, now_ms: i64, allowed: &[ProfileCounts]) -> Vec<NodeView> {
    (0..c.nodes())
        .map(|n| {
            let gpus = n * c.gpn..(n + 1) * c.gpn;
            let mut busy: BTreeMap<String, u32> = BTreeMap::new();
            for g in gpus.clone() {
                for i in &c.insts[g] {
                    if i.job.is_some() {
                        *busy.entry(i.placed.profile.name.to_string()).or_insert(0) += 1;
                    }
                }
            }
            let away = gpus.clone().any(|g| c.state[g] != GpuState::Up);
            NodeView {
                name: node_name(n),
                model: c.model,
                layout: c.node_layout(n),
                allowed: allowed.to_vec(),
                busy,
                unavailable: away,
                repartitioning: away,
                layout_age: Duration::from_millis(u64::try_from(now_ms - c.layout_since_ms[n]).unwrap_or(0)),
            }
        })
        .collect()
}

/// Pending demand per profile (`pending[p]` instances of `profiles[p]`: a queued job counts
/// as its smallest fitting profile, a multi-GPU job as that many full profiles, as
/// job_submit/dynmig would rewrite them), and the instances that draining or reconfiguring
/// GPUs will bring.
///
/// `widest` is the most GPUs a queued multi-GPU job asks (0 if none). Free full-GPU
/// instances on nodes with fewer than `widest` of them cannot serve that job, but the policy
/// subtracts every free instance from the demand; so they are added to the pending full
/// profile, which keeps the demand unmet until one node holds enough whole GPUs.
pub fn demand(c: &Cluster, pending: &[u32], profiles: &[&'static ProfileSpec], widest: usize) -> Demand {
    let mut d = Demand::default();
    for (p, n) in pending.iter().enumerate() {
        d.add_pending(profiles[p].name, *n);
    }
    if widest > 1 {
        // The controller's rule (`Demand::add_stranded`), fed from the per-node counts.
        let full = profiles[c.full].name;
        let widest_map = [(full.to_string(), u32::try_from(widest).unwrap_or(u32::MAX))].into();
        let free: Vec<std::collections::BTreeMap<&'static str, u32>> = c
            .free_full
            .iter()
            .filter(|f| **f > 0)
            .map(|f| [(full, u32::from(*f))].into())
            .collect();
        d.add_stranded(&widest_map, free.iter());
    }
    for (g, s) in c.state.iter().enumerate() {
        match s {
            GpuState::Up => {}
            GpuState::Draining(t) => {
                for (p, n) in t.iter() {
                    d.add_incoming(p, n);
                }
            }
            GpuState::Reconfiguring => {
                for i in &c.insts[g] {
                    d.add_incoming(i.placed.profile.name, 1);
                }
            }
        }
    }
    d
}
