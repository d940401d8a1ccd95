//! What a learned model sees (its observation), as a vector of `f32`: the same numbers in the
//! simulator and in the controller, read from the one [`NodeSnapshot`] and [`Demand`] both
//! give a policy. Counts are shares of the cluster so that one model serves any cluster size
//! (the mean-field idea of SMART-MIG, arXiv 2606.29775: state as how many GPUs are in each
//! layout, not which).
//!
//! Per decision: the cluster part ([`cluster_features`]) then the node part
//! ([`node_features`]); [`input_len`] is their length. Besides the snapshot, the cluster part
//! holds what the policy remembers ([`Outlook`]): the learned time-of-day forecast and the
//! queue's age.

use crate::catalogue::Catalogue;
use dynmig_core::demand::Demand;
use dynmig_core::geometry::GpuModel;
use dynmig_core::policy::forecast::Need;
use dynmig_core::policy::NodeSnapshot;
use std::time::Duration;

/// What the policy adds to the snapshot from what it saw before.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outlook {
    /// Instances per profile that running and pending jobs are forecast to need over the
    /// next 2 h (the planner's time-of-day forecast, [`dynmig_core::policy::forecast`]).
    pub forecast: Need,
    /// How long the oldest waiting job has waited (zero with an empty queue).
    pub queue_age: Duration,
}

/// Time until a node's work ends, and queue age, are given in units of this (4 h, the
/// planner's `max_wait`).
const WORK_UNIT_S: f64 = 4.0 * 3600.0;

/// Length of one observation: pending instances per GPU per profile, forecast instances per
/// GPU per profile, time of day (sin, cos), share of nodes per catalogue layout (+ other),
/// busy share, queue per GPU, share of nodes away, queue age; then the node's layout (one-hot,
/// + other), its busy share, its work's end, whether it has a plan.
pub fn input_len(cat: &Catalogue) -> usize {
    let p = cat.model.schedulable_profiles().len();
    let k = cat.layouts.len() + 1;
    2 * p + 2 + k + 4 + k + 3
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

/// Instances per profile that running jobs on `model`'s nodes asked for plus those pending
/// jobs ask for: what the forecast learns.
pub fn need_now(model: &GpuModel, nodes: &[NodeSnapshot], demand: &Demand) -> Need {
    let mut need = Need::new();
    for n in nodes.iter().filter(|n| n.model.name == model.name) {
        for (p, c) in &n.running {
            *need.entry(p.clone()).or_insert(0.0) += f64::from(*c);
        }
    }
    for (p, c) in &demand.pending {
        *need.entry(p.clone()).or_insert(0.0) += f64::from(*c);
    }
    need
}

/// The cluster part of the observation at `time_of_day`.
pub fn cluster_features(
    cat: &Catalogue,
    time_of_day: Duration,
    nodes: &[NodeSnapshot],
    demand: &Demand,
    outlook: &Outlook,
) -> Vec<f32> {
    let gpus = nodes.iter().map(|n| n.layout.gpus.len()).sum::<usize>().max(1) as f64;
    let mut x = Vec::with_capacity(input_len(cat));
    let profiles = cat.model.schedulable_profiles();
    for p in &profiles {
        let c = demand.pending.get(p.name).copied().unwrap_or(0);
        x.push((f64::from(c) / gpus).min(4.0) as f32);
    }
    for p in &profiles {
        let c = outlook.forecast.get(p.name).copied().unwrap_or(0.0);
        x.push((c / gpus).min(4.0) as f32);
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
    x.push((outlook.queue_age.as_secs_f64() / WORK_UNIT_S).min(3.0) as f32);
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

#[cfg(test)]
mod tests {
    use super::*;
    use dynmig_core::geometry::A100_40GB;

    #[test]
    fn the_forecast_and_queue_age_are_in_the_cluster_part() {
        let cat = Catalogue::for_model(&A100_40GB);
        let p = cat.model.schedulable_profiles();
        let mut outlook = Outlook::default();
        let base = cluster_features(&cat, Duration::ZERO, &[], &Demand::default(), &outlook);
        outlook.forecast.insert(p[1].name.to_string(), 0.5);
        outlook.queue_age = Duration::from_secs(2 * 3600);
        let x = cluster_features(&cat, Duration::ZERO, &[], &Demand::default(), &outlook);
        assert_eq!(x.len(), base.len());
        // No nodes: one GPU counted; the forecast follows the pending part.
        assert_eq!(x[p.len() + 1], 0.5);
        assert_eq!(base[p.len() + 1], 0.0);
        assert_eq!(*x.last().unwrap(), 0.5);
        assert_eq!(*base.last().unwrap(), 0.0);
        assert_eq!(x.len() + cat.layouts.len() + 4, input_len(&cat));
    }
}
