// One piece: one policy: the mix it aims for, the nodes it changes and the cost rule that ties them; its tests are in planner/.
//! The planning policy: which mix of node layouts the cluster should have over the next hours,
//! and which nodes to change to get there at the least cost (docs/policy.md).
//!
//! Each call, per GPU model:
//! 1. **Need**: instances per profile that running jobs hold (by the profile they asked for)
//!    plus those pending jobs ask for, the pending ones scaled down to the part of the queue
//!    beyond `queue_tolerance` times the running jobs (a shorter queue is cheaper to wait
//!    out than to run on smaller instances). The need is also learned per time-of-day bin (the mean
//!    of each bin's observations on a day, folded into the bin with weight `memory`), and the
//!    plan serves the larger of the need now and the learned need of the bins of the next
//!    `horizon`, plus `headroom` (0 by default).
//! 2. **Mix**: a multiset of node layouts (each node one layout on all its GPUs) that covers
//!    the need. [`Objective::Speed`] starts from whole GPUs and partitions one node at a time,
//!    each time the layout that leaves the least need uncovered, and stops as soon as the need
//!    is covered (jobs run on the largest instances the load allows: faster, and less energy
//!    for jobs that scale well). [`Objective::Consolidate`] fills nodes one at a time with the
//!    layout that covers the most, and leaves the rest whole and idle (GPUs that could be
//!    powered down or lent to whole-GPU work; MIG-serving's question, arXiv 2109.11067).
//!    Coverage: a job fits any instance with at least the memory of the profile it asked
//!    for; larger needs are served first, each from the smallest instance that fits;
//!    uncovered need is weighted by compute slices.
//! 3. **Whether it pays**: nothing changes unless the current mix (planned targets counted)
//!    leaves at least `min_gain` compute slices of need uncovered that the new mix covers, or
//!    (speed) the current mix partitions more nodes than needed, so that jobs run slower than
//!    they could.
//! 4. **Which nodes**: nodes already in a wanted layout keep it; plans (reservations) whose
//!    target is still wanted stay; others are moved to a wanted layout or cancelled. Then the
//!    nodes whose running work must end soonest (their jobs' time limits: idle nodes first)
//!    change, at most `max_concurrent` at once, none younger than `min_layout_lifetime`, none
//!    whose work ends later than `max_wait`. A node's change waits for its running jobs (a reservation at
//!    their time limit), so backfill keeps it busy meanwhile.

use super::forecast::{ForecastSettings, Need, TimeOfDayForecast};
use super::wanted::{change_budget, Wanted};
use super::{Policy, PolicyLimits, Repartition};
use crate::demand::Demand;
use crate::geometry::{GpuModel, ProfileCounts, ProfileSpec};
use crate::snapshot::NodeSnapshot;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// What the mix optimises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Objective {
    /// Partition only as much as the need requires; the rest whole GPUs.
    Speed,
    /// Serve the need with as few nodes as possible; the rest whole and idle.
    Consolidate,
}

/// Settings of the [`Planner`].
#[derive(Debug, Clone, PartialEq)]
pub struct PlannerSettings {
    /// Concurrency, hysteresis and minimum gain (compute slices of need newly covered).
    pub limits: PolicyLimits,
    /// What the mix optimises.
    pub objective: Objective,
    /// How far ahead the learned need counts (2 h: about the time a reservation waits for
    /// the running work of a node; trace p90 run time 2.05 h, docs/model.md).
    pub horizon: Duration,
    /// A busy node whose running work ends later than this is no candidate (4 h, twice the
    /// horizon: a change that lands later serves a need the plan cannot foresee). Waiting for
    /// any node however late was tried and is worse: held nodes keep the concurrency budget
    /// for days and refuse long jobs meanwhile (docs/policy.md).
    pub max_wait: Duration,
    /// Extra share of need planned for (0: the learned need of the next `horizon` already
    /// looks ahead; 0.1 partitioned a cluster that whole GPUs just served at its daily peak,
    /// docs/policy.md).
    pub headroom: f64,
    /// Time-of-day bins per day (24).
    pub bins: u32,
    /// Weight of a new day's observation of a bin (0.5).
    pub memory: f64,
    /// Queued jobs count as need only beyond this many times the running jobs (1.0). By
    /// Little's law a queue of `q` times the running jobs means a wait of about `q` run
    /// times; a job moved to a smaller instance of `c` of the GPU's `C` compute slices runs
    /// `(C/c)^gamma - 1` run times longer, about one for a 3g instance of a 7-slice GPU
    /// (gamma 0.85, docs/model.md). Below that queue, waiting for a
    /// larger instance makes jobs less late than running on a smaller one.
    pub queue_tolerance: f64,
    /// How a job's speed grows with compute slices, the exponent of `(c/C)^speedup` (0.7:
    /// between the simulator's 0.6 for inference and 0.85 for training, SMART-MIG's curves,
    /// docs/model.md). Used only to weigh running jobs by the share of a whole GPU they hold.
    pub speedup: f64,
    /// Whether a job runs only on an instance of the profile it asked for (true: Slurm's typed
    /// GRES, what the controller sees) or on any instance with enough memory (false: the
    /// simulator's placement, docs/model.md).
    pub exact_profiles: bool,
    /// Most nodes with a planned change that has not started (a reservation: they still run
    /// jobs that end in time), besides the `max_concurrent` draining or reconfiguring ones
    /// (4 x `max_concurrent`).
    pub max_planned: usize,
}

impl PlannerSettings {
    /// The settings of `config`'s `[policy]` when its kind is `plan`, `consolidate` or `mpc`
    /// (`exact_profiles` left false: the controller sets it, and the simulator's engine does
    /// under its default typed placement).
    pub fn from_config(config: &crate::config::Config) -> Option<Self> {
        let crate::config::PolicyConfig::Plan {
            consolidate,
            horizon,
            max_wait,
            min_gain,
            ..
        } = config.policy
        else {
            return None;
        };
        let objective = if consolidate {
            Objective::Consolidate
        } else {
            Objective::Speed
        };
        let mut s = Self::new(PolicyLimits::from_config(config, min_gain), objective);
        s.horizon = horizon;
        s.max_wait = max_wait;
        Some(s)
    }

    /// The defaults above with these limits and objective.
    pub fn new(limits: PolicyLimits, objective: Objective) -> Self {
        let forecast = ForecastSettings::default();
        Self {
            objective,
            horizon: forecast.horizon,
            max_wait: Duration::from_secs(4 * 3600),
            headroom: 0.0,
            bins: forecast.bins,
            memory: forecast.memory,
            max_planned: 4 * limits.max_concurrent,
            queue_tolerance: 1.0,
            speedup: 0.7,
            exact_profiles: false,
            limits,
        }
    }
}

/// The planning policy (see the module docs).
#[derive(Debug, Clone)]
pub struct Planner {
    /// Settings.
    pub settings: PlannerSettings,
    learned: BTreeMap<&'static str, TimeOfDayForecast>,
    /// Per model: the allowed layouts seen, their profiles and the whole-GPU layout.
    cache: ProfileCache,
    /// Per model: what each node contributed at the last call ([`Planner::tally`]).
    terms: BTreeMap<&'static str, GroupTerms>,
}

/// What the planner derived from the nodes of one GPU model, node by node, kept while a
/// node's [`NodeSnapshot::version`] stays the same.
#[derive(Debug, Clone, Default)]
struct GroupTerms {
    /// The whole-GPU layout the terms were made for (a node is partitioned when a GPU is not
    /// in it).
    whole: ProfileCounts,
    /// Profile names the nodes' running jobs asked for, in order of first appearance.
    names: Vec<String>,
    /// `(c/C)^speedup` of each busy profile name seen.
    shares: Vec<(String, f64)>,
    /// GPU layouts seen, and whether each is partitioned.
    layouts: Vec<(ProfileCounts, bool)>,
    /// Per node (by position in the group).
    nodes: Vec<NodeTerms>,
}

/// What one node contributes to a call ([`Planner::tally`]).
#[derive(Debug, Clone, Default)]
struct NodeTerms {
    /// The node's version when these were made (0: never).
    version: u64,
    name: String,
    /// Need of its running jobs: (index into [`GroupTerms::names`], instances weighed by the
    /// share of a whole GPU's time they hold), in the order of its `running` map.
    need: Vec<(usize, f64)>,
    /// Its GPUs' layouts (the planned target, else the current one), as runs of (index into
    /// [`GroupTerms::layouts`], GPUs).
    gpus: Vec<(usize, u64)>,
    /// Whether any of those GPUs is partitioned.
    partitioned: bool,
}

type ProfileCache = BTreeMap<&'static str, (Arc<[ProfileCounts]>, Arc<[&'static ProfileSpec]>, ProfileCounts)>;

impl Planner {
    /// A planner with these settings and nothing learned yet.
    pub fn new(settings: PlannerSettings) -> Self {
        Self {
            settings,
            learned: BTreeMap::new(),
            cache: BTreeMap::new(),
            terms: BTreeMap::new(),
        }
    }

    /// Records `now` in the forecast of `model`; returns the larger of `now` and the learned
    /// need of the bins of the next horizon.
    fn learn_and_forecast(&mut self, model: &'static str, tod: Duration, now: &Need) -> Need {
        let s = ForecastSettings {
            bins: self.settings.bins,
            memory: self.settings.memory,
            horizon: self.settings.horizon,
        };
        let ahead = self.learned.entry(model).or_default().observe(s, tod, now);
        let mut out = now.clone();
        for (p, x) in ahead {
            let e = out.entry(p).or_insert(0.0);
            *e = e.max(x);
        }
        out
    }
}

/// The profiles a group's layouts use, smallest (memory, then compute slices) first.
fn profiles_of(model: &GpuModel, allowed: &[ProfileCounts]) -> Vec<&'static ProfileSpec> {
    let mut v: Vec<&'static ProfileSpec> = allowed
        .iter()
        .flat_map(|l| l.iter().map(|(p, _)| p).collect::<Vec<_>>())
        .filter_map(|p| model.profile(p))
        .collect();
    v.sort_by_key(|p| (p.memory_mib, p.compute_slices, p.name));
    v.dedup_by_key(|p| p.name);
    v
}

/// Supply of a layout over `profiles` (instances per profile index), times `times`.
fn supply_of(l: &ProfileCounts, profiles: &[&'static ProfileSpec], times: f64) -> Vec<f64> {
    let mut v = vec![0.0; profiles.len()];
    add_layout(&mut v, l, profiles, times);
    v
}

/// Adds `times` x the instances of `l` to `supply`.
fn add_layout(supply: &mut [f64], l: &ProfileCounts, profiles: &[&'static ProfileSpec], times: f64) {
    for (name, n) in l.iter() {
        if let Some(i) = profiles.iter().position(|p| p.name == name) {
            supply[i] += f64::from(n) * times;
        }
    }
}

/// How badly `supply` serves `need`: the largest share of any profile's need left unserved,
/// then the compute slices of need left unserved. Larger needs are served first, each from
/// the smallest instance with enough memory, or, with `exact`, from instances of its own
/// profile only (Slurm: a job asking `gpu:2g.20gb` runs on a 2g.20gb instance and no other). The share comes first so that when no mix can
/// serve everything (an overload: the need counts queued jobs), every profile gets the same
/// share of its need rather than the largest profiles all of theirs.
fn shortfall(supply: &[f64], need: &[f64], profiles: &[&'static ProfileSpec], exact: bool) -> (f64, f64) {
    shortfall_in(&mut supply.to_vec(), need, profiles, exact)
}

/// [`shortfall`] of the supply in `avail`, which it uses up (no allocation: the planner's
/// search calls it thousands of times per decision).
fn shortfall_in(avail: &mut [f64], need: &[f64], profiles: &[&'static ProfileSpec], exact: bool) -> (f64, f64) {
    let mut left = 0.0;
    let mut worst: f64 = 0.0;
    for c in (0..profiles.len()).rev() {
        let mut want = need[c];
        for q in 0..profiles.len() {
            if want <= 0.0 {
                break;
            }
            let fits = if exact {
                q == c
            } else {
                profiles[q].memory_mib >= profiles[c].memory_mib
            };
            if !fits || avail[q] <= 0.0 {
                continue;
            }
            let take = want.min(avail[q]);
            avail[q] -= take;
            want -= take;
        }
        let want = want.max(0.0);
        if need[c] > 0.0 {
            worst = worst.max(want / need[c]);
        }
        left += want * f64::from(profiles[c].compute_slices);
    }
    (worst, left)
}

/// The index of the first item of `list` that `is`, after pushing `make()` if none is.
fn index_of<T>(list: &mut Vec<T>, is: impl Fn(&T) -> bool, make: impl FnOnce() -> T) -> usize {
    match list.iter().position(is) {
        Some(i) => i,
        None => {
            list.push(make());
            list.len() - 1
        }
    }
}

/// Whether shortfall `a` is better than `b` by more than rounding.
fn better(a: (f64, f64), b: (f64, f64)) -> bool {
    a.0 < b.0 - 1e-9 || (a.0 <= b.0 + 1e-9 && a.1 < b.1 - 1e-9)
}

fn add(a: &mut [f64], b: &[f64], sign: f64) {
    for (x, y) in a.iter_mut().zip(b) {
        *x += sign * y;
    }
}

/// The node layouts (one per node, each GPU the same) that cover `need` (see the module docs).
#[allow(clippy::too_many_arguments)]
fn compose<'a>(
    objective: Objective,
    exact: bool,
    nodes: usize,
    gpn: usize,
    need: &[f64],
    allowed: &'a [ProfileCounts],
    whole: &'a ProfileCounts,
    profiles: &[&'static ProfileSpec],
) -> Vec<&'a ProfileCounts> {
    let g = gpn as f64;
    let whole_s = supply_of(whole, profiles, g);
    let options: Vec<(usize, Vec<f64>)> = allowed
        .iter()
        .enumerate()
        .map(|(i, l)| (i, supply_of(l, profiles, g)))
        .collect();
    let mut kinds: Vec<&ProfileCounts> = Vec::with_capacity(nodes);
    let mut supply = vec![0.0; profiles.len()];
    let mut scratch = vec![0.0; profiles.len()];
    let mut base = vec![0.0; profiles.len()];
    // Large clusters move in steps of 1/64 of their nodes, so that a decision costs the
    // same for 16 nodes as for 1,000 (at most 64 steps).
    let step = (nodes / 64).max(1);
    // Speed starts from whole GPUs everywhere and each step replaces whole nodes; consolidate
    // starts from nothing and each step fills nodes.
    let replaced = match objective {
        Objective::Speed => {
            // Whole numbers of instances: the product is the sum of `nodes` terms, exactly.
            add(&mut supply, &whole_s, nodes as f64);
            whole_s.clone()
        }
        Objective::Consolidate => vec![0.0; profiles.len()],
    };
    while kinds.len() < nodes {
        let s0 = shortfall(&supply, need, profiles, exact);
        if s0.1 <= 1e-9 {
            break;
        }
        let k = step.min(nodes - kinds.len()) as f64;
        let mut best: Option<((f64, f64), usize)> = None;
        base.copy_from_slice(&supply);
        add(&mut base, &replaced, -k);
        for (i, s) in &options {
            scratch.copy_from_slice(&base);
            add(&mut scratch, s, k);
            let u = shortfall_in(&mut scratch, need, profiles, exact);
            if best.is_none_or(|(b, _)| better(u, b)) {
                best = Some((u, *i));
            }
        }
        let Some((_, i)) = best.filter(|(u, _)| better(*u, s0)) else {
            break;
        };
        add(&mut supply, &replaced, -k);
        add(&mut supply, &options[i].1, k);
        for _ in 0..k as usize {
            kinds.push(&allowed[i]);
        }
    }
    while kinds.len() < nodes {
        kinds.push(whole);
    }
    kinds
}

impl Planner {
    /// The profiles of a group's allowed layouts and its whole-GPU layout, computed once per
    /// list of allowed layouts.
    fn group_profiles(
        &mut self,
        model: &'static GpuModel,
        allowed: &Arc<[ProfileCounts]>,
    ) -> (Arc<[&'static ProfileSpec]>, ProfileCounts) {
        if let Some((a, p, w)) = self.cache.get(model.name) {
            if Arc::ptr_eq(a, allowed) {
                return (Arc::clone(p), w.clone());
            }
        }
        let profiles: Arc<[&'static ProfileSpec]> = profiles_of(model, allowed).into();
        let full = model.full_profile();
        let whole = allowed
            .iter()
            .find(|l| l.total() == 1 && l.count(full.name) == 1)
            .or_else(|| allowed.first())
            .cloned()
            .unwrap_or_default();
        self.cache
            .insert(model.name, (Arc::clone(allowed), Arc::clone(&profiles), whole.clone()));
        (profiles, whole)
    }

    /// The need of the running jobs per profile name they asked for (each weighed by the
    /// share of a whole GPU's time it holds, module docs), the GPU layouts the nodes have (or
    /// are planned to have) with how many GPUs hold each, and how many nodes are partitioned.
    /// What a node contributes is kept between calls while its version stays (the
    /// simulator's view changes few nodes between two calls); the sums are taken in node
    /// order every call, so the result is the same as from scratch.
    fn tally(
        &mut self,
        model: &'static GpuModel,
        nodes: &[&NodeSnapshot],
        whole: &ProfileCounts,
    ) -> (Need, Vec<(ProfileCounts, u64)>, usize) {
        let mut t = self.terms.remove(model.name).unwrap_or_default();
        if t.whole != *whole {
            t = GroupTerms {
                whole: whole.clone(),
                ..GroupTerms::default()
            };
        }
        t.nodes.resize_with(nodes.len(), NodeTerms::default);
        let full_slices = f64::from(model.compute_slices);
        let mut acc: Vec<f64> = vec![0.0; t.names.len()];
        let mut touched: Vec<bool> = vec![false; t.names.len()];
        let mut layout_gpus: Vec<u64> = vec![0; t.layouts.len()];
        let mut partitioned_now = 0usize;
        for (k, n) in nodes.iter().enumerate() {
            let fresh = n.version != 0 && t.nodes[k].version == n.version && t.nodes[k].name == n.name;
            if !fresh {
                let (mut held, mut jobs) = (0.0, 0.0);
                for (p, c) in &n.busy {
                    let i = index_of(
                        &mut t.shares,
                        |(q, _)| q == p,
                        || {
                            let slices = model.profile(p).map_or(full_slices, |s| f64::from(s.compute_slices));
                            (p.clone(), (slices / full_slices).powf(self.settings.speedup))
                        },
                    );
                    held += f64::from(*c) * t.shares[i].1;
                    jobs += f64::from(*c);
                }
                let factor = if jobs > 0.0 { held / jobs } else { 1.0 };
                // The node's terms are refilled in place (no allocation once they have grown).
                let mut terms = std::mem::take(&mut t.nodes[k]);
                terms.need.clear();
                for (p, c) in &n.running {
                    let i = index_of(&mut t.names, |q| q == p, || p.clone());
                    terms.need.push((i, f64::from(*c) * factor));
                }
                terms.gpus.clear();
                terms.partitioned = false;
                for g in &n.planned.as_ref().unwrap_or(&n.layout).gpus {
                    // Neighbouring GPUs mostly hold the same layout.
                    let i = match terms.gpus.last().filter(|(i, _)| t.layouts[*i].0 == *g) {
                        Some((i, _)) => *i,
                        None => index_of(&mut t.layouts, |(x, _)| x == g, || (g.clone(), *g != t.whole)),
                    };
                    terms.partitioned |= t.layouts[i].1;
                    match terms.gpus.last_mut() {
                        Some((j, count)) if *j == i => *count += 1,
                        _ => terms.gpus.push((i, 1)),
                    }
                }
                terms.version = n.version;
                if terms.name != n.name {
                    terms.name.clone_from(&n.name);
                }
                t.nodes[k] = terms;
                acc.resize(t.names.len(), 0.0);
                touched.resize(t.names.len(), false);
                layout_gpus.resize(t.layouts.len(), 0);
            }
            let terms = &t.nodes[k];
            for &(i, x) in &terms.need {
                acc[i] += x;
                touched[i] = true;
            }
            for &(i, count) in &terms.gpus {
                layout_gpus[i] += count;
            }
            if terms.partitioned {
                partitioned_now += 1;
            }
        }
        let now: Need = t
            .names
            .iter()
            .zip(acc.iter().zip(&touched))
            .filter(|(_, (_, touched))| **touched)
            .map(|(p, (x, _))| (p.clone(), *x))
            .collect();
        let gpu_layouts = t
            .layouts
            .iter()
            .zip(&layout_gpus)
            .filter(|(_, count)| **count > 0)
            .map(|((l, _), count)| (l.clone(), *count))
            .collect();
        self.terms.insert(model.name, t);
        (now, gpu_layouts, partitioned_now)
    }

    fn plan_group(
        &mut self,
        tod: Duration,
        model: &'static GpuModel,
        nodes: &[&NodeSnapshot],
        demand: &Demand,
        budget: &mut usize,
        out: &mut Vec<Repartition>,
    ) {
        let Some(first) = nodes.first() else { return };
        let (profiles, whole) = self.group_profiles(model, &first.allowed);
        if profiles.is_empty() {
            return;
        }
        let allowed = &first.allowed;
        // 1. Need.
        // A running job counts as the share of a whole GPU's time it would need there: a job
        // on `c` of `C` compute slices runs `(C/c)^speedup` times longer than on the whole
        // GPU, so it holds `(c/C)^speedup` of a whole GPU's time. Counting it as one instance
        // instead made partitions feed on themselves: slower jobs, more of them running at
        // once, more need, more partitions (docs/policy.md).
        let (mut now, gpu_layouts, partitioned_now) = self.tally(model, nodes, &whole);
        // Queued jobs count only beyond `queue_tolerance` x the running ones (module docs).
        let running: f64 = now.values().sum();
        let pending: f64 = demand
            .pending
            .iter()
            .filter(|(p, _)| model.profile(p).is_some())
            .map(|(_, c)| f64::from(*c))
            .sum();
        let excess = (pending - self.settings.queue_tolerance.max(0.0) * running).max(0.0);
        let share = if pending > 0.0 { excess / pending } else { 0.0 };
        // A profile no instance can serve now is never waited out: its queue would not move.
        let exact = self.settings.exact_profiles;
        let served_now = |p: &ProfileSpec| {
            gpu_layouts.iter().any(|(g, _)| {
                g.iter().any(|(q, _)| {
                    model.profile(q).is_some_and(|q| {
                        if exact {
                            q.name == p.name
                        } else {
                            q.memory_mib >= p.memory_mib
                        }
                    })
                })
            })
        };
        for (p, c) in &demand.pending {
            if let Some(spec) = model.profile(p) {
                let k = if served_now(spec) { share } else { 1.0 };
                *now.entry(p.clone()).or_insert(0.0) += f64::from(*c) * k;
            }
        }
        let planned_need = self.learn_and_forecast(model.name, tod, &now);
        let k = 1.0 + self.settings.headroom.max(0.0);
        let need: Vec<f64> = profiles
            .iter()
            .map(|p| (planned_need.get(p.name).copied().unwrap_or(0.0) * k).ceil())
            .collect();
        // 2. Mix.
        let gpn = first.layout.gpus.len();
        let kinds = compose(
            self.settings.objective,
            exact,
            nodes.len(),
            gpn,
            &need,
            allowed,
            &whole,
            &profiles,
        );
        // 3. Whether it pays: the current mix, planned targets counted. Supplies are whole
        // numbers of instances, so summing them per distinct layout is exact.
        let mut current = vec![0.0; profiles.len()];
        for (g, gpus) in &gpu_layouts {
            add_layout(&mut current, g, &profiles, *gpus as f64);
        }
        let mut desired = vec![0.0; profiles.len()];
        let mut partitioned_wanted = 0;
        for run in kinds.chunk_by(|a, b| std::ptr::eq(*a, *b)) {
            add_layout(&mut desired, run[0], &profiles, (gpn * run.len()) as f64);
            if *run[0] != whole {
                partitioned_wanted += run.len();
            }
        }
        let (now_s, want_s) = (
            shortfall(&current, &need, &profiles, exact),
            shortfall(&desired, &need, &profiles, exact),
        );
        let gain = if better(want_s, now_s) {
            (now_s.1 - want_s.1).max(f64::from(self.settings.limits.min_gain.max(1)))
        } else {
            0.0
        };
        let surplus = self.settings.objective == Objective::Speed && partitioned_now > partitioned_wanted;
        let consolidate = self.settings.objective == Objective::Consolidate && partitioned_now != partitioned_wanted;
        if gain < f64::from(self.settings.limits.min_gain.max(1)) && !surplus && !consolidate {
            return;
        }
        // 4. Which nodes. Need the current mix leaves unserved is served by the nodes that
        // free soonest, none later than `max_wait`. A surplus (no need unserved) may wait for
        // any node, one planned change at a time: holding a node costs nothing while
        // capacity is spare, and without it partitions taken at a peak would never come back.
        let need_driven = gain >= f64::from(self.settings.limits.min_gain.max(1));
        let mut no_budget = 0;
        let (budget, max_wait) = if need_driven {
            (budget, self.settings.max_wait)
        } else if nodes.iter().filter(|n| n.planned.is_some()).count() >= self.settings.limits.max_concurrent.max(1) {
            // Plans no longer wanted are still moved or cancelled; no new one is made.
            (&mut no_budget, Duration::MAX)
        } else {
            *budget = (*budget).min(1);
            (budget, Duration::MAX)
        };
        Wanted::new(kinds, gpn).assign(nodes, budget, self.settings.limits.min_layout_lifetime, max_wait, out);
    }
}

impl Policy for Planner {
    fn name(&self) -> &'static str {
        match self.settings.objective {
            Objective::Speed => "plan",
            Objective::Consolidate => "consolidate",
        }
    }

    fn plan(&mut self, nodes: &[NodeSnapshot], demand: &Demand) -> Vec<Repartition> {
        self.plan_at(Duration::ZERO, nodes, demand)
    }

    fn plan_at(&mut self, time_of_day: Duration, nodes: &[NodeSnapshot], demand: &Demand) -> Vec<Repartition> {
        let mut budget = change_budget(nodes, self.settings.limits.max_concurrent, self.settings.max_planned);
        let mut groups: BTreeMap<&'static str, (&'static GpuModel, Vec<&NodeSnapshot>)> = BTreeMap::new();
        for n in nodes {
            groups.entry(n.model.name).or_insert((n.model, Vec::new())).1.push(n);
        }
        let mut out = Vec::new();
        for (_, (model, group)) in groups {
            self.plan_group(time_of_day, model, &group, demand, &mut budget, &mut out);
        }
        out
    }
}

#[cfg(test)]
mod tests;
