//! What a learned model sees (its observation), as a vector of `f32`: the same numbers in the
//! simulator and in the controller, read from the one [`NodeSnapshot`] and [`Demand`] both
//! give a policy. Counts are shares of the cluster so that one model serves any cluster size
//! (the mean-field idea of SMART-MIG, arXiv 2606.29775: state as how many GPUs are in each
//! layout, not which).
//!
//! Per decision: the cluster part ([`cluster_features`]) then the node part
//! ([`node_features`]); [`input_len`] is their length.

use crate::catalogue::Catalogue;
use dynmig_core::demand::Demand;
use dynmig_core::policy::NodeSnapshot;
use std::time::Duration;

/// Time until a node's work ends is given in units of this (4 h, the planner's `max_wait`).
const WORK_UNIT_S: f64 = 4.0 * 3600.0;

/// Length of one observation: pending share per profile, time of day (sin, cos), share of
/// nodes per catalogue layout (+ other), busy share, queue per GPU, share of nodes away; then
/// the node's layout (one-hot, + other), its busy share, its work's end, whether it has a plan.
pub fn input_len(cat: &Catalogue) -> usize {
    let p = cat.model.schedulable_profiles().len();
    let k = cat.layouts.len() + 1;
    p + 2 + k + 3 + k + 3
}

/// Compute slices busy on `n` over its compute slices.
fn busy_share(n: &NodeSnapshot) -> f64 {
    let busy: f64 = n
        .busy
        .iter()
        .map(|(p, c)| f64::from(*c) * f64::from(n.model.profile(p).map_or(0, |s| s.compute_slices)))
        .sum();
    let total = (n.layout.gpus.len() as f64 * f64::from(n.model.compute_slices)).max(1.0);
    (busy / total).min(1.0)
}

/// The cluster part of the observation at `time_of_day`.
pub fn cluster_features(cat: &Catalogue, time_of_day: Duration, nodes: &[NodeSnapshot], demand: &Demand) -> Vec<f32> {
    let gpus = nodes.iter().map(|n| n.layout.gpus.len()).sum::<usize>().max(1) as f64;
    let mut x = Vec::with_capacity(input_len(cat));
    for p in cat.model.schedulable_profiles() {
        let c = demand.pending.get(p.name).copied().unwrap_or(0);
        x.push((f64::from(c) / gpus).min(4.0) as f32);
    }
    let angle = time_of_day.as_secs_f64() / 86_400.0 * std::f64::consts::TAU;
    x.push(angle.sin() as f32);
    x.push(angle.cos() as f32);
    let k = cat.layouts.len();
    let mut kinds = vec![0.0f64; k + 1];
    for n in nodes {
        kinds[cat.kind_of(&n.layout).unwrap_or(k)] += 1.0;
    }
    let count = nodes.len().max(1) as f64;
    x.extend(kinds.iter().map(|c| (c / count) as f32));
    x.push((nodes.iter().map(busy_share).sum::<f64>() / count) as f32);
    let queued: u32 = demand.pending.values().sum();
    x.push((f64::from(queued) / gpus).min(4.0) as f32);
    let away = nodes
        .iter()
        .filter(|n| n.unavailable || n.repartitioning || n.planned.is_some())
        .count();
    x.push((away as f64 / count) as f32);
    x
}

/// The node part of the observation.
pub fn node_features(cat: &Catalogue, n: &NodeSnapshot) -> Vec<f32> {
    let k = cat.layouts.len();
    let mut x = vec![0.0f32; k + 1];
    x[cat.kind_of(&n.layout).unwrap_or(k)] = 1.0;
    x.push(busy_share(n) as f32);
    x.push((n.work_ends_in.as_secs_f64() / WORK_UNIT_S).min(3.0) as f32);
    x.push(if n.planned.is_some() { 1.0 } else { 0.0 });
    x
}
