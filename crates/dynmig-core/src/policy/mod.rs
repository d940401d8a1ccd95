//! Repartitioning policies: given the cluster's current layouts and its pending demand, which
//! nodes should change layout, and to what.
//!
//! One trait, [`Policy`], is called by the controller daemon (on live Slurm state) and by the
//! simulator (on virtual state), so both run the same decisions. A policy does no I/O.
//!
//! The policies here:
//! - [`NoChange`]: never repartitions (static layouts, or whole GPUs).
//! - [`DemandDriven`]: the supply of each profile follows pending demand, with hysteresis
//!   (a layout lives at least `min_layout_lifetime`, and one it made is kept until it served
//!   a job), a minimum gain, a payback rule ([`payback`]: a change must gain more pending
//!   work than its drain costs), and a limit on how many nodes repartition at once. Draining
//!   costs capacity, so idle nodes are preferred and a busy node is only drained when no idle
//!   node can serve the demand.
//! - [`planner::Planner`]: plans the cluster's layout mix from pending and running demand and
//!   a time-of-day forecast learned online, changes the nodes whose running work ends soonest,
//!   and changes nothing unless the change serves demand the current mix cannot
//!   (docs/policy.md).

pub mod events;
pub mod forecast;
pub mod payback;
pub mod planner;
pub mod wanted;

use crate::demand::Demand;
use crate::geometry::{NodeLayout, ProfileCounts};
pub use crate::snapshot::NodeSnapshot;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// A decision: give `node` the layout `target` once its running jobs have ended.
///
/// For a node with a plan not yet started ([`NodeSnapshot::planned`]), another target moves
/// the plan, and the node's current layout cancels it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repartition {
    /// Slurm node name.
    pub node: String,
    /// The layout to apply once the node is idle.
    pub target: NodeLayout,
    /// Pending instances per profile that the new layout is meant to serve.
    pub serves: BTreeMap<String, u32>,
}

/// Parameters shared by policies.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyLimits {
    /// Most nodes draining or repartitioning at once (counting those already under way).
    pub max_concurrent: usize,
    /// Hysteresis: a node keeps a layout at least this long.
    pub min_layout_lifetime: Duration,
    /// A change must serve at least this many pending instances.
    pub min_gain: u32,
}

impl PolicyLimits {
    /// `[controller] max_concurrent_repartitions` and `min_layout_lifetime` of `config`, with
    /// `min_gain` (from the `[policy]` in force).
    pub fn from_config(config: &crate::config::Config, min_gain: u32) -> Self {
        let c = &config.controller;
        Self {
            max_concurrent: c.max_concurrent_repartitions as usize,
            min_layout_lifetime: c.min_layout_lifetime,
            min_gain,
        }
    }
}

impl Default for PolicyLimits {
    fn default() -> Self {
        Self {
            max_concurrent: 1,
            min_layout_lifetime: Duration::from_secs(120),
            min_gain: 1,
        }
    }
}

/// A repartitioning policy. Implementations must be deterministic for a given input.
pub trait Policy: Send {
    /// Short name, e.g. `"demand"`.
    fn name(&self) -> &'static str;
    /// Decides which nodes change layout now. `nodes` is every node dynmig manages.
    fn plan(&mut self, nodes: &[NodeSnapshot], demand: &Demand) -> Vec<Repartition>;

    /// Decides with the clock known: `time_of_day` is the time since midnight (the cluster's
    /// local time; the simulator's virtual day). Time-of-day schedules need it; the default
    /// ignores it and calls [`Policy::plan`], so demand-driven policies decide the same with
    /// or without it.
    fn plan_at(&mut self, time_of_day: Duration, nodes: &[NodeSnapshot], demand: &Demand) -> Vec<Repartition> {
        let _ = time_of_day;
        self.plan(nodes, demand)
    }

    /// Whether the policy wants [`Policy::observe`] called (building the events costs the
    /// caller work; false by default).
    fn observes_jobs(&self) -> bool {
        false
    }

    /// The job events since the last call, and the time now (s, on the events' clock). Called
    /// before each decision when [`Policy::observes_jobs`] is true; the default ignores them.
    fn observe(&mut self, now_s: f64, events: &[events::JobEvent]) {
        let _ = (now_s, events);
    }

    /// The GRES types (profile names) sized jobs should be given now, when the policy's
    /// layouts decide them (the guarded default: the types of the layout the nodes follow);
    /// `None` (the default): every profile, as dynmig's catalog node offers them.
    fn catalog(&self) -> Option<std::collections::BTreeSet<&'static str>> {
        None
    }
}

/// Never repartitions.
#[derive(Debug, Default, Clone)]
pub struct NoChange;

impl Policy for NoChange {
    fn name(&self) -> &'static str {
        "none"
    }
    fn plan(&mut self, _: &[NodeSnapshot], _: &Demand) -> Vec<Repartition> {
        Vec::new()
    }
}

/// The demand-driven heuristic (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct DemandDriven {
    /// Limits and hysteresis.
    pub limits: PolicyLimits,
    /// The payback rule.
    pub payback: payback::Payback,
    /// The pending jobs' time limits seen in job events.
    times: payback::PendingTimes,
    /// Per node, the last layout this policy chose for it.
    made: BTreeMap<String, payback::Made>,
}

impl DemandDriven {
    /// A demand-driven policy with these limits and the default payback rule.
    pub fn new(limits: PolicyLimits) -> Self {
        Self {
            limits,
            ..Self::default()
        }
    }
}

impl Policy for DemandDriven {
    fn name(&self) -> &'static str {
        "demand"
    }

    fn observes_jobs(&self) -> bool {
        self.payback.enabled
    }

    fn observe(&mut self, _now_s: f64, events: &[events::JobEvent]) {
        self.times.observe(events);
    }

    fn plan(&mut self, nodes: &[NodeSnapshot], demand: &Demand) -> Vec<Repartition> {
        // Whether the layouts this policy made have served a job yet.
        if !self.made.is_empty() {
            for n in nodes {
                if let Some(m) = self.made.get_mut(&n.name) {
                    m.look(n);
                }
            }
        }
        // Nothing can change when the concurrency limit is reached or no node may change:
        // checked first, as they cost less than the demand.
        let under_way = nodes.iter().filter(|n| n.repartitioning).count();
        let mut budget = self.limits.max_concurrent.saturating_sub(under_way);
        let mut out = Vec::new();
        if budget == 0 {
            return out;
        }
        // Candidates: available nodes whose layout is old enough. Idle nodes first, then the
        // nodes with the fewest busy instances (they drain soonest); name breaks ties.
        let hold = self.limits.min_layout_lifetime * self.payback.hold_factor;
        let held = |n: &NodeSnapshot| self.payback.enabled && self.made.get(&n.name).is_some_and(|m| m.holds(n, hold));
        let mut cands: Vec<(u32, &NodeSnapshot)> = nodes
            .iter()
            .filter(|n| {
                !n.unavailable && n.planned.is_none() && n.layout_age >= self.limits.min_layout_lifetime && !held(n)
            })
            .map(|n| (n.busy.values().sum::<u32>(), n))
            .collect();
        if cands.is_empty() {
            return out;
        }
        // Unmet demand: pending instances per profile that no free instance can serve now
        // (each node's free instances, [`NodeSnapshot::free`], counted for the pending
        // profiles only; the subtraction saturates at zero, so its order does not matter).
        let mut unmet: BTreeMap<String, u32> = demand.pending.clone();
        for (p, u) in unmet.iter_mut() {
            for n in nodes.iter().filter(|n| !n.unavailable) {
                if *u == 0 {
                    break;
                }
                let total = n.layout.gpus.iter().fold(0u32, |a, g| a.saturating_add(g.count(p)));
                *u = u.saturating_sub(total.saturating_sub(n.busy.get(p).copied().unwrap_or(0)));
            }
        }
        // Supply that is already coming (nodes repartitioning towards a target that holds it)
        // is counted, so that a second node is not drained for the same jobs.
        for (p, c) in &demand.incoming {
            if let Some(u) = unmet.get_mut(p) {
                *u = u.saturating_sub(*c);
            }
        }
        unmet.retain(|_, u| *u > 0);
        if unmet.is_empty() {
            return out;
        }
        cands.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)));

        // `best_target` depends on the node only through its layout, allowed layouts and
        // model: nodes alike share one answer until `unmet` changes (`None`: no change).
        type Answer = Option<(NodeLayout, BTreeMap<String, u32>)>;
        let mut memo: Vec<(&NodeSnapshot, Answer)> = Vec::new();
        for (_, node) in cands {
            if budget == 0 || unmet.is_empty() {
                break;
            }
            let alike = |m: &NodeSnapshot| {
                std::ptr::eq(m.model, node.model) && Arc::ptr_eq(&m.allowed, &node.allowed) && m.layout == node.layout
            };
            let answer = match memo.iter().find(|(m, _)| alike(m)) {
                Some((_, a)) => a.clone(),
                None => {
                    let (target, served) = best_target(node, &unmet, &demand.pending);
                    let gain: u32 = served.values().sum();
                    let a = (gain >= self.limits.min_gain && target != node.layout).then_some((target, served));
                    memo.push((node, a.clone()));
                    a
                }
            };
            let Some((target, served)) = answer else {
                continue;
            };
            if self.payback.enabled
                && !self
                    .payback
                    .balance(node, &target, &served, &demand.pending, &self.times)
                    .pays()
            {
                continue;
            }
            for (p, n) in &served {
                if let Some(u) = unmet.get_mut(p) {
                    *u = u.saturating_sub(*n);
                }
            }
            unmet.retain(|_, u| *u > 0);
            memo.clear();
            self.made.insert(node.name.clone(), payback::Made::new(node, &target));
            out.push(Repartition {
                node: node.name.clone(),
                target,
                serves: served,
            });
            budget -= 1;
        }
        out
    }
}

/// Chooses per GPU the allowed layout that serves the most unmet demand (weighted by compute
/// slices, so a 3g job counts more than a 1g job). When two layouts serve as much, the GPU's
/// current layout wins (no change, no cost); then the one closer to the overall pending mix;
/// then the one with fewer compute slices in profiles no pending or running job asks for
/// (the demo's 4g.40gb, which no job is typed to, beside the 3g.40gb it was made for).
///
/// Returns the node's target and the unmet instances it serves.
pub fn best_target(
    node: &NodeSnapshot,
    unmet: &BTreeMap<String, u32>,
    pending: &BTreeMap<String, u32>,
) -> (NodeLayout, BTreeMap<String, u32>) {
    // Per profile of a layout: (name, count, weight, weight x min(count, pending)).
    type Terms = Vec<(&'static str, u32, u64, u64)>;
    let terms = |l: &ProfileCounts| -> Terms {
        l.iter()
            .map(|(p, c)| {
                let w = node.model.profile(p).map_or(1, |s| u64::from(s.compute_slices));
                (p, c, w, w * u64::from(c.min(pending.get(p).copied().unwrap_or(0))))
            })
            .collect()
    };
    let options: Vec<(&ProfileCounts, Terms)> = node.allowed.iter().map(|l| (l, terms(l))).collect();
    let mut left = unmet.clone();
    let mut served: BTreeMap<String, u32> = BTreeMap::new();
    let mut gpus: Vec<ProfileCounts> = Vec::with_capacity(node.layout.gpus.len());
    // The last GPU's current layout and choice, while `left` has not changed since: a GPU
    // with the same layout gets the same choice.
    let mut last: Option<(&ProfileCounts, usize)> = None;
    for current in &node.layout.gpus {
        if let Some((c, i)) = last {
            if c == current {
                gpus.push(gpus[i].clone());
                continue;
            }
        }
        let score = |l: &ProfileCounts, t: &Terms, left: &BTreeMap<String, u32>| {
            let mut unmet_score = 0u64;
            let mut pending_score = 0u64;
            let mut unasked = 0u64;
            for (p, c, w, pend) in t {
                if *pend == 0 && node.running.get(*p).copied().unwrap_or(0) == 0 {
                    unasked += w * u64::from(*c);
                }
                // Only instances the GPU does not hold today are new supply.
                let new = c.saturating_sub(current.count(p));
                if new > 0 {
                    unmet_score += w * u64::from(new.min(left.get(*p).copied().unwrap_or(0)));
                }
                pending_score += pend;
            }
            let keep = u64::from(l == current);
            (unmet_score, keep, pending_score, std::cmp::Reverse(unasked))
        };
        let mut best = current;
        // With nothing left unmet, every other layout scores (0, 0, _) and the current one
        // (0, 1, _): it stays.
        if left.values().any(|u| *u > 0) {
            let mut best_score = score(current, &terms(current), &left);
            for (l, t) in &options {
                let s = score(l, t, &left);
                if s > best_score {
                    best = l;
                    best_score = s;
                }
            }
        }
        let mut changed = false;
        for (p, c) in best.iter() {
            if let Some(u) = left.get_mut(p) {
                let take = c.saturating_sub(current.count(p)).min(*u);
                *u -= take;
                if take > 0 {
                    changed = true;
                    *served.entry(p.to_string()).or_insert(0) += take;
                }
            }
        }
        last = (!changed).then_some((current, gpus.len()));
        gpus.push(best.clone());
    }
    (NodeLayout { gpus }, served)
}

#[cfg(test)]
mod tests;
