//! The learned policy: each call, the nodes that may change (available, not repartitioning,
//! old enough, their running work ending within `max_wait`), those whose work ends soonest
//! first, each get one decision of the model — keep, or change to one of the catalogue's
//! layouts (actions that would change nothing, that the node group does not allow, or that
//! the [`Shield`] finds would leave waiting jobs no node to run on are masked) — until `max_concurrent` nodes are changing or planned. A change of a busy node
//! waits for its jobs' time limits (a maintenance reservation in the controller, the engine's
//! reservation timing in the simulator), as the planner's do. It decides at most every
//! [`DECISION_INTERVAL`], or every `min_layout_lifetime` where that is shorter (a demo
//! cluster that lives minutes).
//!
//! Between decisions it learns what the observation's [`Outlook`] holds: at every call the
//! need of running and pending jobs goes into a time-of-day forecast (the planner's,
//! [`dynmig_core::policy::forecast`]), and from the job events
//! ([`Policy::observe`]) it keeps the submit time of every waiting job (queue age).

use crate::features::{cluster_features, need_now, node_features, Outlook};
use crate::net::Model;
use crate::shield::Shield;
use anyhow::Result;
use dynmig_core::demand::Demand;
use dynmig_core::policy::events::JobEvent;
use dynmig_core::policy::forecast::{ForecastSettings, TimeOfDayForecast};
use dynmig_core::policy::{NodeSnapshot, Policy, PolicyLimits, Repartition};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One decision taken while training: when, the observation, which actions were allowed (1.0)
/// and the action taken (0 keep, `i` catalogue layout `i - 1`).
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Seconds since the policy's first call (its time of day, days counted).
    pub t_s: f64,
    /// Observation.
    pub x: Vec<f32>,
    /// Allowed actions.
    pub mask: Vec<f32>,
    /// The action.
    pub action: u32,
}

/// How actions are chosen.
pub enum Mode {
    /// The most likely allowed action (serving).
    Greedy,
    /// Drawn from the model's distribution over allowed actions, each recorded (training).
    Sample {
        /// The draws.
        rng: Box<ChaCha8Rng>,
        /// Where the decisions go.
        steps: Arc<Mutex<Vec<Step>>>,
    },
}

/// `to - from` on a 24-hour clock: the time from the time of day `from` to the next `to`.
fn since(from: Duration, to: Duration) -> Duration {
    if to >= from {
        to - from
    } else {
        to + Duration::from_secs(86_400) - from
    }
}

/// Time since a policy's first call, from the time of day it is given at each call (calls
/// less than a day apart).
#[derive(Debug, Clone, Copy, Default)]
pub struct DayClock {
    elapsed: Duration,
    last_call: Option<Duration>,
}

impl DayClock {
    /// Moves the clock to `time_of_day`; returns the time since the first call.
    pub fn tick(&mut self, time_of_day: Duration) -> Duration {
        if let Some(prev) = self.last_call {
            self.elapsed += since(prev, time_of_day);
        }
        self.last_call = Some(time_of_day);
        self.elapsed
    }
}

/// Nodes whose running work ends later than this (4 h, the planner's default `max_wait`) are
/// no candidates: the `max_wait` the controller, the simulator and training give
/// [`LearnedPolicy::new`].
pub const MAX_WAIT: Duration = Duration::from_secs(4 * 3600);

/// The learned policy decides at most this often (10 min): a decision's effect (a drain at
/// the jobs' time limits) takes longer than the callers' 60 s interval to show.
pub const DECISION_INTERVAL: Duration = Duration::from_secs(600);

/// The learned policy (module docs).
pub struct LearnedPolicy {
    model: Model,
    limits: PolicyLimits,
    max_wait: Duration,
    mode: Mode,
    /// Time of day of the last decision.
    last: Option<Duration>,
    /// Time since the first call (for [`Step::t_s`]).
    clock: DayClock,
    /// Whether the shield counts a waiting job's own profile only ([`Shield::new`]).
    exact_profiles: bool,
    /// The need learned per time of day.
    forecast: TimeOfDayForecast,
    /// Submit time (s, the events' clock) of each waiting job, by id.
    waiting: BTreeMap<u64, f64>,
    /// The events' clock at the last [`Policy::observe`] (s).
    now_s: f64,
    /// The forecast at the last call, and the queue age.
    outlook: Outlook,
}

impl LearnedPolicy {
    /// `model` deciding under `limits`; nodes whose work ends later than `max_wait`
    /// ([`MAX_WAIT`] in the simulator and the controller, the planner's default) are no
    /// candidates.
    pub fn new(model: Model, limits: PolicyLimits, max_wait: Duration, mode: Mode) -> Self {
        Self {
            model,
            limits,
            max_wait,
            mode,
            last: None,
            clock: DayClock::default(),
            exact_profiles: false,
            forecast: TimeOfDayForecast::default(),
            waiting: BTreeMap::new(),
            now_s: 0.0,
            outlook: Outlook::default(),
        }
    }

    /// The policy for Slurm, which runs a job only on the GRES type it asked for: the shield
    /// counts that profile only ([`Shield::new`]; the simulator, where a job runs on any
    /// instance that holds it, leaves this off). Same as the planner's `exact_profiles`.
    #[must_use]
    pub fn with_exact_profiles(mut self, exact: bool) -> Self {
        self.exact_profiles = exact;
        self
    }

    /// Watches the cluster at `time_of_day` without deciding: moves the policy's clock and
    /// learns the forecast. A caller that asks another policy first (training's warm-up, in
    /// dynmig-train) calls this at each of its calls, so that [`Step::t_s`] counts from
    /// the run's first call and the forecast has learned those days. Calls must come less
    /// than a day apart.
    pub fn watch(&mut self, time_of_day: Duration, nodes: &[NodeSnapshot], demand: &Demand) {
        self.clock.tick(time_of_day);
        let need = need_now(self.model.catalogue.model, nodes, demand);
        self.outlook.forecast = self.forecast.observe(ForecastSettings::default(), time_of_day, &need);
    }

    /// How long the oldest waiting job had waited at the last [`Policy::observe`] (zero with
    /// no job waiting).
    pub fn queue_age(&self) -> Duration {
        let oldest = self.waiting.values().copied().fold(f64::INFINITY, f64::min);
        if oldest.is_finite() {
            Duration::from_secs_f64((self.now_s - oldest).clamp(0.0, 1e9))
        } else {
            Duration::ZERO
        }
    }

    /// The decisions for `nodes`, or an error from the network (never expected: shapes are
    /// fixed at load).
    fn decide(&mut self, time_of_day: Duration, nodes: &[NodeSnapshot], demand: &Demand) -> Result<Vec<Repartition>> {
        let away = nodes.iter().filter(|n| n.repartitioning || n.planned.is_some()).count();
        let budget = self.limits.max_concurrent.max(1).saturating_sub(away);
        if budget == 0 {
            return Ok(Vec::new());
        }
        let mut cands: Vec<&NodeSnapshot> = nodes
            .iter()
            .filter(|n| {
                !n.unavailable
                    && !n.repartitioning
                    && n.planned.is_none()
                    && n.layout_age >= self.limits.min_layout_lifetime
                    && n.work_ends_in <= self.max_wait
                    && n.model.name == self.model.catalogue.model.name
            })
            .collect();
        if cands.is_empty() {
            return Ok(Vec::new());
        }
        cands.sort_by(|a, b| a.work_ends_in.cmp(&b.work_ends_in).then(a.name.cmp(&b.name)));
        let cat = &self.model.catalogue;
        self.outlook.queue_age = self.queue_age();
        let global = cluster_features(cat, time_of_day, nodes, demand, &self.outlook);
        // Which catalogue layouts each node group allows, once per group's list.
        let mut allowed: BTreeMap<usize, Vec<bool>> = BTreeMap::new();
        let mut shield = Shield::new(cat, nodes, demand, self.exact_profiles);
        let mut out = Vec::new();
        let mut x = Vec::with_capacity(self.model.meta.inputs);
        for (i, n) in cands.iter().enumerate() {
            if out.len() >= budget {
                break;
            }
            x.clear();
            x.extend_from_slice(&global);
            x.extend(node_features(cat, n));
            let logits = self.model.net.forward(&x)?;
            let key = Arc::as_ptr(&n.allowed) as *const u8 as usize;
            let ok = allowed
                .entry(key)
                .or_insert_with(|| cat.layouts.iter().map(|l| n.allowed.contains(l)).collect());
            let current = cat.kind_of(&n.layout);
            let before = shield.offers_of(&n.layout);
            let mask = shield.mask(current, &before, ok, i == 0);
            let action = match &mut self.mode {
                Mode::Greedy => argmax(&logits, &mask),
                Mode::Sample { rng, steps } => {
                    let a = sample(&logits, &mask, rng);
                    steps
                        .lock()
                        .map_err(|_| anyhow::anyhow!("steps lock poisoned"))?
                        .push(Step {
                            t_s: self.clock.elapsed.as_secs_f64(),
                            x: x.clone(),
                            mask: mask.clone(),
                            action: a as u32,
                        });
                    a
                }
            };
            if action > 0 {
                shield.take(&before, action - 1);
                out.push(Repartition {
                    node: n.name.clone(),
                    target: cat.node_layout(action - 1, n.layout.gpus.len()),
                    serves: BTreeMap::new(),
                });
            }
        }
        Ok(out)
    }
}

/// The allowed action with the largest logit (the first on ties); keep (0) when none is
/// allowed. Keep itself may be masked (the shield's second rule).
fn argmax(logits: &[f32], mask: &[f32]) -> usize {
    let mut best: Option<usize> = None;
    for (a, (l, m)) in logits.iter().zip(mask).enumerate() {
        if *m > 0.0 && best.is_none_or(|b| *l > logits[b]) {
            best = Some(a);
        }
    }
    best.unwrap_or(0)
}

/// An allowed action drawn with probability softmax(logits) over the allowed ones.
fn sample(logits: &[f32], mask: &[f32], rng: &mut ChaCha8Rng) -> usize {
    let top = logits
        .iter()
        .zip(mask)
        .filter(|(_, m)| **m > 0.0)
        .map(|(l, _)| *l)
        .fold(f32::NEG_INFINITY, f32::max);
    let w: Vec<f64> = logits
        .iter()
        .zip(mask)
        .map(|(l, m)| if *m > 0.0 { f64::from(l - top).exp() } else { 0.0 })
        .collect();
    let mut r = rng.gen::<f64>() * w.iter().sum::<f64>();
    for (a, x) in w.iter().enumerate() {
        if r < *x {
            return a;
        }
        r -= x;
    }
    0
}

impl Policy for LearnedPolicy {
    fn name(&self) -> &'static str {
        "learned"
    }

    fn plan(&mut self, nodes: &[NodeSnapshot], demand: &Demand) -> Vec<Repartition> {
        self.plan_at(Duration::ZERO, nodes, demand)
    }

    fn plan_at(&mut self, time_of_day: Duration, nodes: &[NodeSnapshot], demand: &Demand) -> Vec<Repartition> {
        self.watch(time_of_day, nodes, demand);
        if let Some(last) = self.last {
            if since(last, time_of_day) < DECISION_INTERVAL.min(self.limits.min_layout_lifetime) {
                return Vec::new();
            }
        }
        self.last = Some(time_of_day);
        // No panic and no change when the network fails: the layouts stay.
        self.decide(time_of_day, nodes, demand).unwrap_or_default()
    }

    fn observes_jobs(&self) -> bool {
        true
    }

    fn observe(&mut self, now_s: f64, events: &[JobEvent]) {
        self.now_s = now_s;
        for e in events {
            match e {
                JobEvent::Submitted { id, at_s, .. } => {
                    self.waiting.insert(*id, *at_s);
                }
                JobEvent::Started { id, .. } | JobEvent::Ended { id, .. } => {
                    self.waiting.remove(id);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::Catalogue;
    use dynmig_core::geometry::A100_40GB;

    fn submitted(id: u64, at_s: f64) -> JobEvent {
        JobEvent::Submitted {
            id,
            at_s,
            profile: "1g.5gb",
            gpus: 1,
            time_limit_s: 3600.0,
            deadline_s: None,
        }
    }

    #[test]
    fn queue_age_is_the_oldest_waiting_jobs_wait_and_forgets_started_and_ended_jobs() {
        let model = Model::fresh(Catalogue::for_model(&A100_40GB), 8, "test".into(), 1);
        let mut p = LearnedPolicy::new(
            model,
            PolicyLimits::default(),
            Duration::from_secs(4 * 3600),
            Mode::Greedy,
        );
        assert!(p.observes_jobs());
        assert_eq!(p.queue_age(), Duration::ZERO);
        p.observe(500.0, &[submitted(1, 100.0), submitted(2, 300.0), submitted(3, 400.0)]);
        assert_eq!(p.queue_age(), Duration::from_secs(400));
        let started = JobEvent::Started {
            id: 1,
            at_s: 600.0,
            node: "n1".into(),
            slices: 1,
        };
        p.observe(1000.0, &[started, JobEvent::Ended { id: 2, at_s: 900.0 }]);
        assert_eq!(p.queue_age(), Duration::from_secs(600));
        p.observe(
            1100.0,
            &[JobEvent::Started {
                id: 3,
                at_s: 1100.0,
                node: "n1".into(),
                slices: 1,
            }],
        );
        assert_eq!(p.queue_age(), Duration::ZERO);
    }

    #[test]
    fn the_greedy_choice_is_an_allowed_action_even_when_keep_is_likelier_and_masked() {
        let logits = [1.0, 2.0, 0.5, 0.2];
        assert_eq!(argmax(&logits, &[1.0, 1.0, 1.0, 1.0]), 1);
        assert_eq!(argmax(&logits, &[1.0, 0.0, 1.0, 1.0]), 0);
        // The shield masked keep and the current layout: the best of the rest.
        assert_eq!(argmax(&logits, &[0.0, 0.0, 1.0, 1.0]), 2);
        assert_eq!(argmax(&logits, &[0.0, 0.0, 0.0, 0.0]), 0);
    }
}
