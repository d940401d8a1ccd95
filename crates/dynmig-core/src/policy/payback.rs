//! The payback rule (docs/policy.md, "Payback"): a node changes layout only when the change is
//! expected to pay back its drain, and a layout made for demand is kept until it has served
//! a job.
//!
//! In compute-slice-seconds (a slice busy or idle for a second), for a node and a target:
//!
//! ```text
//! gain = sum over profiles p the target newly serves: slices(p) x served(p) x T(p)
//! cost = sum over the node's free instances i: slices(i) x work_ends_in   (idle while draining)
//!      + slices(node) x reconfig_time                                     (out of service)
//!      + sum over p the target removes: slices(p) x lost(p) x T(p)         (pending work it served)
//! change only if gain > cost
//! ```
//!
//! `T(p)` is the mean time limit of the pending jobs of profile `p` the policy saw submitted
//! ([`PendingTimes`], from the job events of [`super::Policy::observe`]), or
//! [`Payback::default_job_time`] where it saw none. `lost(p)`: instances of `p` the target
//! removes that are free now while jobs of `p` are pending (they would start there).
//!
//! Besides, a layout the policy made is kept while none of the instances it made has run a
//! job, for at most `hold_factor` x `min_layout_lifetime` ([`Made`]): a layout made for a
//! demand that went away before it served is not changed back at once for the next demand.

use super::events::JobEvent;
use crate::geometry::{GpuModel, NodeLayout};
use crate::snapshot::NodeSnapshot;
use std::cell::OnceCell;
use std::collections::BTreeMap;
use std::time::Duration;

/// Settings of the payback rule (module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct Payback {
    /// Whether changes must pay back (true).
    pub enabled: bool,
    /// How long a repartition keeps an idle node out of service (2 s: the agent's measured
    /// p95, docs/results/repartitions-2026-11-27.md).
    pub reconfig_time: Duration,
    /// Time limit taken for a pending instance whose job the policy has not seen submitted
    /// (1 h).
    pub default_job_time: Duration,
    /// A layout the policy made is kept until one of its new instances ran a job, or for this
    /// many `min_layout_lifetime`s (6).
    pub hold_factor: u32,
}

impl Default for Payback {
    fn default() -> Self {
        Self {
            enabled: true,
            reconfig_time: Duration::from_secs(2),
            default_job_time: Duration::from_secs(3600),
            hold_factor: 6,
        }
    }
}

/// The pending jobs' time limits, learned from job events: per job, its profile, instances
/// and time limit (s).
#[derive(Debug, Clone, Default)]
pub struct PendingTimes {
    jobs: BTreeMap<u64, (&'static str, u32, f64)>,
    /// Per profile, the instances and the sum of instances x time limit of `jobs` (those with
    /// a positive, finite limit), summed in `jobs`' order at the first [`PendingTimes::mean`]
    /// after a change: it is asked per node and profile at a call, with thousands of jobs
    /// pending.
    sums: OnceCell<BTreeMap<&'static str, (u64, f64)>>,
}

impl PendingTimes {
    /// Follows the events: a submitted job is pending until it starts or ends.
    pub fn observe(&mut self, events: &[JobEvent]) {
        for e in events {
            match e {
                JobEvent::Submitted {
                    id,
                    profile,
                    gpus,
                    time_limit_s,
                    ..
                } => {
                    self.jobs.insert(*id, (profile, *gpus, *time_limit_s));
                }
                JobEvent::Started { id, .. } | JobEvent::Ended { id, .. } => {
                    self.jobs.remove(id);
                }
            }
        }
        if !events.is_empty() {
            self.sums = OnceCell::new();
        }
    }

    /// The mean time limit of the pending instances of `profile`, if any was seen.
    pub fn mean(&self, profile: &str) -> Option<Duration> {
        let sums = self.sums.get_or_init(|| {
            let mut sums: BTreeMap<&'static str, (u64, f64)> = BTreeMap::new();
            for (p, g, t) in self.jobs.values() {
                if t.is_finite() && *t > 0.0 {
                    let e = sums.entry(p).or_insert((0, 0.0));
                    e.0 += u64::from(*g);
                    e.1 += f64::from(*g) * t;
                }
            }
            sums
        });
        let &(n, s) = sums.get(profile)?;
        (n > 0).then(|| Duration::from_secs_f64(s / n as f64))
    }
}

/// What a change of `node` to `target` gains and costs, in compute-slice-seconds (module
/// docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Balance {
    /// Pending work the target serves that the node cannot now.
    pub gain: f64,
    /// The drain, the reconfiguration and the pending work the node's free instances lose.
    pub cost: f64,
}

impl Balance {
    /// Whether the change pays back.
    pub fn pays(&self) -> bool {
        self.gain > self.cost
    }
}

fn slices(model: &GpuModel, p: &str) -> f64 {
    model.profile(p).map_or(1.0, |s| f64::from(s.compute_slices))
}

impl Payback {
    /// `T(p)` of the module docs.
    fn job_time(&self, times: &PendingTimes, p: &str) -> f64 {
        times.mean(p).unwrap_or(self.default_job_time).as_secs_f64()
    }

    /// The balance of changing `node` to `target`, which serves `served` pending instances
    /// per profile, with `pending` instances pending per profile.
    pub fn balance(
        &self,
        node: &NodeSnapshot,
        target: &NodeLayout,
        served: &BTreeMap<String, u32>,
        pending: &BTreeMap<String, u32>,
        times: &PendingTimes,
    ) -> Balance {
        let m = node.model;
        let gain = served
            .iter()
            .map(|(p, n)| slices(m, p) * f64::from(*n) * self.job_time(times, p))
            .sum();
        let free = node.free();
        let wait = node.work_ends_in.as_secs_f64();
        let idle: f64 = free.iter().map(|(p, n)| slices(m, p) * f64::from(*n) * wait).sum();
        let (before, after) = (node.layout.totals(), target.totals());
        let total: f64 = before.iter().map(|(p, n)| slices(m, p) * f64::from(*n)).sum();
        let lost: f64 = free
            .iter()
            .map(|(p, n)| {
                let had = before.get(*p).copied().unwrap_or(0);
                let removed = had.saturating_sub(after.get(*p).copied().unwrap_or(0));
                let k = removed.min(*n).min(pending.get(*p).copied().unwrap_or(0));
                slices(m, p) * f64::from(k) * self.job_time(times, p)
            })
            .sum();
        Balance {
            gain,
            cost: idle + total * self.reconfig_time.as_secs_f64() + lost,
        }
    }
}

/// A layout the policy chose for a node, and whether one of the instances it made has run a
/// job since the node got it.
#[derive(Debug, Clone, PartialEq)]
pub struct Made {
    /// The target.
    pub target: NodeLayout,
    /// Instances per profile it has beyond the layout it replaced.
    pub new: BTreeMap<&'static str, u32>,
    /// Whether one of them ran a job.
    pub served: bool,
}

impl Made {
    /// The record of a change of `node` to `target`.
    pub fn new(node: &NodeSnapshot, target: &NodeLayout) -> Self {
        let before = node.layout.totals();
        let new = target
            .totals()
            .into_iter()
            .filter_map(|(p, n)| {
                let had = before.get(p).copied().unwrap_or(0);
                (n > had).then(|| (p, n - had))
            })
            .collect();
        Self {
            target: target.clone(),
            new,
            served: false,
        }
    }

    /// Notes a look at the node: once it holds the target, a job on more instances of a
    /// new profile than the old layout had is served.
    pub fn look(&mut self, node: &NodeSnapshot) {
        if self.served || node.layout != self.target {
            return;
        }
        let totals = node.layout.totals();
        self.served = self.new.iter().any(|(p, n)| {
            let old = totals.get(p).copied().unwrap_or(0).saturating_sub(*n);
            node.busy.get(*p).copied().unwrap_or(0) > old
        });
    }

    /// Whether the node must keep the layout: it holds the target, none of the new instances
    /// has served, and it is younger than `hold`.
    pub fn holds(&self, node: &NodeSnapshot, hold: Duration) -> bool {
        !self.served && node.layout == self.target && !self.new.is_empty() && node.layout_age < hold
    }
}
