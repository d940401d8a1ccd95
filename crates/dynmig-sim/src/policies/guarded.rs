//! The guarded default (issue 27; docs/policy.md, "Guarded"): the layout an administrator
//! would pick (the fair static search's, the `base`), left only when the evidence says a
//! change pays, and always with a way back.
//!
//! - **Catalog.** Jobs ask only for the GRES types of the layout the nodes follow (at first
//!   `base`'s, as on the site without dynmig); when that layout changes, the pending jobs
//!   ask again for the smallest type of the new layout that holds them (the engine's
//!   `set_catalog`; in Slurm job_submit's catalog and `scontrol update` of their GRES).
//! - **Candidates.** Every `every` (1 day, after `min_history`, 14 days), from the layout the nodes
//!   follow now: `base`, the `shortlist` (the fair search's three best layouts: the
//!   administrator's shortlist), and each move of `k` nodes (k in `moves`) from one node
//!   type to another, the node types being `base`'s node layouts, a whole node and
//!   `node_types` (the shortlist's node layouts).
//! - **Evidence.** Candidates are run by the simulator's engine on the jobs Slurm showed
//!   (what they asked for, time limits, run times of those that ended; the older jobs still
//!   waiting released at the window's start, as [`super::adaptive`] does), sped up on smaller
//!   instances by the public MISO table (`curve`), with ET's fixed references of that
//!   workload, over two windows: the recent `window` (3 days) and the `long_window` (14
//!   days, the fair static's search window).
//! - **Guard** (the third build, docs/policy.md "Guarded"). Every candidate is run on the
//!   recent window; the `recheck` (4) best there are run on the long window, and the best of
//!   those replaces the current layout only if, against the current layout on the long
//!   window, its ET is lower by `margin` (5%), its wait p95 and mean bounded slowdown are
//!   no higher, and no job class waits longer at p95 (the fourth build: the third's checks
//!   were over all jobs, and the multi-GPU class waited longer in 12 of 34 cells), and if it
//!   is no worse in ET on the recent window (a change must serve the mix that is now). A
//!   move thus needs the evidence of the window the base was chosen on.
//! - **Drain cost.** Nodes change through the planner's reservations at their jobs' time
//!   limits ([`dynmig_core::policy::wanted::Wanted::assign`]), at most `max_concurrent` at once, none whose running work
//!   ends later than `max_wait`. The margin is what a change must gain to pay its drains.
//! - **Nothing stranded.** A candidate that could not run a job like the most demanding
//!   ones seen since the start (the largest single-GPU request, the most GPUs one job asked
//!   for) is never taken, though the evidence windows hold none (added after the held-out
//!   gpushare80 run: a move to slices everywhere left 100 multi-GPU jobs never started).
//!   When a job unlike any seen before comes and the current layout cannot run it, the next
//!   decision goes back to the base (added after the same run: the move had come before the
//!   first multi-GPU job, and the guard, unable to score its own layout, never decided again).
//! - **Way back.** `base` needs no margin: when it is at least as good as the current layout
//!   on the long window, the nodes go back to it.
//! - **Residual.** With [`GuardedSettings::residual`] a learned model adjusts each decision
//!   once the safety rules above have spoken ([`super::residual`]; none by default).
//! - **Where it runs.** In the call that is due, or on a thread of its own under
//!   `background` (the controller's), the nodes following the result from the first call
//!   after it ends; the simulator's figures are of the first (the same decisions, a pass
//!   later).
//! - **Calm.** The target changes at most once per `every` (a day) and a node is only ever
//!   repartitioned toward the target, so no node repartitions more than once a day; a move
//!   changes at most the largest of `moves` (4) nodes, a shortlist layout or the way back
//!   any number, at most `max_concurrent` at once.

use super::joblog::JobLog;
use super::move_toward;
use super::PolicySpec;
use crate::bounds::{bounds, Bounds};
use crate::engine::{simulate, SimConfig};
use crate::metrics::{metrics, Norm};
use crate::search::unrunnable;
use crate::workload::Workload;
use dynmig_core::demand::Demand;
use dynmig_core::geometry::{NodeLayout, ProfileCounts};
use dynmig_core::policy::events::JobEvent;
use dynmig_core::policy::{NodeSnapshot, Policy, Repartition};
use std::collections::BTreeSet;
use std::time::Duration;

/// What the reports say of the default settings.
pub const GUARD_DETAIL: &str = "decided daily from day 14 among the base, the search's 3 best layouts and moves of 1, 2 or 4 nodes: the 4 best on the last 3 days judged on the last 14, a change when 5% better there with no class waiting longer, and no worse on the last 3 days; back to the base when no worse on the last 14";

pub use super::settings::GuardedSettings;

/// Jobs to score candidates on, with their bounds and ET references.
struct Evidence {
    wl: Workload,
    b: Bounds,
    norm: Norm,
}

/// The most demanding jobs seen since the start: (GPUs, MiB per GPU) of single-GPU and of
/// multi-GPU jobs, each the largest seen (0: none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Envelope {
    single: (u32, u64),
    multi: (u32, u64),
}

/// What one candidate did on the evidence.
#[derive(Debug, Clone)]
struct Score {
    et: f64,
    wait_p95_s: f64,
    bsld_mean: f64,
    /// Wait p95 (s) of each job class of the evidence ([`crate::metrics::JobClass`]).
    class_wait_p95_s: Vec<(String, f64)>,
}

impl Score {
    /// Whether no job class of `self` waits longer at p95 than it does in `other` (a class
    /// `other` lacks counts as waiting longer).
    fn no_class_waits_longer_than(&self, other: &Score) -> bool {
        self.class_wait_p95_s.iter().all(|(c, w)| {
            other
                .class_wait_p95_s
                .iter()
                .find(|(o, _)| o == c)
                .is_some_and(|(_, ow)| *w <= *ow)
        })
    }
}

/// The guarded default (module docs).
pub struct Guarded {
    settings: GuardedSettings,
    cfg: SimConfig,
    log: JobLog,
    /// The node types moves choose from: `base`'s node layouts and a whole node.
    types: Vec<NodeLayout>,
    /// What the nodes follow.
    target: Vec<NodeLayout>,
    first_s: Option<f64>,
    next_s: f64,
    /// Every job seen since the start, reduced to its largest demands: no candidate may
    /// leave a job like them unable to run, though the evidence windows no longer hold one.
    envelope: Envelope,
    /// [`Guarded::envelope`] as a workload, made again when it grows.
    envelope_jobs: Option<Workload>,
    /// A decision under way on its own thread ([`GuardedSettings::background`]).
    running: Option<std::thread::JoinHandle<Option<Vec<NodeLayout>>>>,
}

/// What one decision needs, taken from the policy when it is due, so that it can run on a
/// thread of its own.
struct Decision {
    settings: GuardedSettings,
    cfg: SimConfig,
    types: Vec<NodeLayout>,
    target: Vec<NodeLayout>,
    envelope_jobs: Option<Workload>,
    /// The types of single-GPU jobs still waiting, when pending types are fixed.
    waiting: Option<BTreeSet<&'static str>>,
    /// The jobs of the recent and of the long window (`None`: no job).
    short: Option<Workload>,
    long: Option<Workload>,
    nodes: usize,
    /// When it is made, s (the residual's draws depend on it).
    now_s: f64,
}

impl Guarded {
    /// A policy for the engine settings `cfg` (those of the run it is in).
    pub fn new(settings: GuardedSettings, cfg: &SimConfig) -> Self {
        let mut cfg = cfg.clone();
        cfg.sample_interval_s = 0.0;
        cfg.window_start_s = 0.0;
        cfg.audit = false;
        let mut types: Vec<NodeLayout> = Vec::new();
        let full = ProfileCounts::parse(cfg.model, &format!("1x{}", cfg.model.full_profile().name))
            .expect("the full profile parses");
        let whole = NodeLayout {
            gpus: vec![full; cfg.gpus_per_node],
        };
        for l in settings
            .base
            .iter()
            .chain(std::iter::once(&whole))
            .chain(settings.node_types.iter())
        {
            if !types.contains(l) {
                types.push(l.clone());
            }
        }
        let keep = settings.window.max(settings.long_window).as_secs_f64();
        let mut log = JobLog::new(cfg.model, settings.speedup, false, keep);
        log.curve = settings.curve;
        Self {
            // Jobs as they asked (their memory, not the type the catalog gave them), so that
            // each candidate's runs type them with its own catalog.
            log,
            target: settings.base.clone(),
            cfg,
            types,
            settings,
            first_s: None,
            next_s: f64::NEG_INFINITY,
            envelope: Envelope::default(),
            envelope_jobs: None,
            running: None,
        }
    }

    /// What a decision now needs, for `nodes` nodes.
    fn decision(&self, nodes: usize) -> Decision {
        let waiting = self.settings.pending_types_fixed.then(|| {
            self.log
                .jobs
                .values()
                .filter(|t| t.start.is_none() && t.gpus == 1)
                .map(|t| t.profile)
                .collect()
        });
        let short = self.evidence(self.settings.window);
        let long = if self.settings.long_window > self.settings.window {
            self.evidence(self.settings.long_window)
        } else {
            short.clone()
        };
        Decision {
            settings: self.settings.clone(),
            cfg: self.cfg.clone(),
            types: self.types.clone(),
            target: self.target.clone(),
            envelope_jobs: self.envelope_jobs.clone(),
            waiting,
            short,
            long,
            nodes,
            now_s: self.log.now_s,
        }
    }

    /// Takes the result of a background decision that has ended (`wait`: waits for it).
    fn take_result(&mut self, wait: bool) {
        let Some(handle) = self.running.take_if(|h| wait || h.is_finished()) else {
            return;
        };
        // A decision that panicked changes nothing; the next one is a day later.
        if let Some(t) = handle.join().ok().flatten() {
            self.target = t;
        }
    }

    /// Waits for a background decision under way and follows its result (tests).
    pub fn finish_decision(&mut self) {
        self.take_result(true);
    }

    /// Whether a background decision is under way.
    pub fn deciding(&self) -> bool {
        self.running.is_some()
    }

    /// Makes a decision: here, or on a thread of its own under `background` (one at a time;
    /// if no thread can be had, here).
    fn start_decision(&mut self, nodes: usize) {
        let d = self.decision(nodes);
        if self.settings.background {
            if self.running.is_some() {
                return;
            }
            let (tx, rx) = std::sync::mpsc::channel::<Decision>();
            let spawned = std::thread::Builder::new()
                .name("guarded-decision".into())
                .spawn(move || rx.recv().ok()?.decide());
            if let Ok(handle) = spawned {
                let _ = tx.send(d);
                self.running = Some(handle);
                return;
            }
            // No thread to be had: the decision is made here rather than not at all.
        }
        if let Some(t) = d.decide() {
            self.target = t;
        }
    }

    /// The evidence: the jobs of the last `window` and the older ones still waiting, released
    /// from the window's start; `None` when there are none.
    fn evidence(&self, window: Duration) -> Option<Workload> {
        let now = self.log.now_s;
        let from = now - window.as_secs_f64();
        let mut jobs = self.log.backlog(from, |at| at - from);
        jobs.extend(self.log.arrivals(from, now, |at| at - from));
        (!jobs.is_empty()).then(|| Workload::new(jobs, "guarded evidence".into()))
    }

    /// [`Guarded::envelope`] as jobs to check candidates against (`None`: no job seen yet).
    fn envelope_workload(&self) -> Option<Workload> {
        let jobs: Vec<crate::model::Job> = [self.envelope.single, self.envelope.multi]
            .into_iter()
            .filter(|(g, _)| *g > 0)
            .map(|(gpus, mem_mib)| crate::model::Job {
                id: 0,
                release: 0.0,
                work: 1.0,
                mem_mib,
                gpus,
                kind: crate::model::JobKind::Training,
                gamma: self.settings.speedup,
                curve: self.settings.curve,
                due: 1.0,
                limit_factor: 1.0,
                exact_slices: None,
            })
            .collect();
        (!jobs.is_empty()).then(|| Workload::new(jobs, "envelope".into()))
    }
}

impl Decision {
    /// The candidates: `base` and every move of `k` nodes from one node type to another.
    fn candidates(&self) -> Vec<Vec<NodeLayout>> {
        let mut out: Vec<Vec<NodeLayout>> = vec![self.settings.base.clone()];
        for l in &self.settings.shortlist {
            if !out.contains(l) && *l != self.target && l.len() == self.target.len() {
                out.push(l.clone());
            }
        }
        for from in &self.types {
            let at: Vec<usize> = (0..self.target.len()).filter(|&i| &self.target[i] == from).collect();
            for to in self.types.iter().filter(|t| *t != from) {
                for &k in &self.settings.moves {
                    if k > at.len() {
                        continue;
                    }
                    let mut c = self.target.clone();
                    for &i in &at[at.len() - k..] {
                        c[i] = to.clone();
                    }
                    if !out.contains(&c) && c != self.target {
                        out.push(c);
                    }
                }
            }
        }
        out
    }

    /// `wl` with its bounds and ET references on the cluster, to score candidates on.
    fn judged(&self, wl: Workload) -> Evidence {
        let gpus = self.cfg.nodes * self.cfg.gpus_per_node;
        let b = bounds(&wl, self.cfg.model, gpus, &self.cfg.power);
        let norm = Norm::of(&wl, &b, 0.0);
        Evidence { wl, b, norm }
    }

    /// Whether `layouts` could not run a job like the most demanding ones seen since the
    /// start (the largest single-GPU request, the most GPUs a job asked for): a candidate
    /// that would strand such a job when it comes back is never taken.
    fn strands(&self, layouts: &[NodeLayout]) -> bool {
        if let Some(waiting) = &self.waiting {
            let has = present(layouts);
            if waiting.iter().any(|p| !has.contains(p)) {
                return true;
            }
        }
        self.envelope_jobs
            .as_ref()
            .is_some_and(|wl| unrunnable(&[layouts], self.cfg.model, wl).is_some())
    }

    /// How `layouts` does on `ev` (`None`: it cannot run some job, or the run failed).
    fn score(&self, ev: &Evidence, layouts: &[NodeLayout]) -> Option<Score> {
        if unrunnable(&[layouts], self.cfg.model, &ev.wl).is_some() || self.strands(layouts) {
            return None;
        }
        let spec = PolicySpec::Static(layouts.to_vec());
        let r = simulate(&ev.wl, &spec, &self.cfg, &|_| {}).ok()?;
        let m = metrics(&ev.wl, &r, &ev.b, "", 0.0, &self.cfg);
        let all = m.classes.iter().find(|c| c.class == "all")?;
        Some(Score {
            et: ev.norm.et(m.energy_per_job_j, m.mean_tardiness_s),
            wait_p95_s: all.wait_p95_s,
            bsld_mean: all.bsld_mean,
            class_wait_p95_s: m
                .classes
                .iter()
                .filter(|c| c.class != "all")
                .map(|c| (c.class.clone(), c.wait_p95_s))
                .collect(),
        })
    }

    /// Decides on the evidence (module docs); returns the new target if it changes.
    fn decide(mut self) -> Option<Vec<NodeLayout>> {
        if self.nodes != self.target.len() {
            return None;
        }
        let (short, long) = (self.short.take()?, self.long.take()?);
        let (short, long) = (self.judged(short), self.judged(long));
        let Some(current) = self.score(&long, &self.target) else {
            // The layout the nodes follow cannot run a job of the evidence (one unlike any
            // seen when it was taken): back to the base, which the search checked on every
            // job of its window, if the base can run them.
            let back = self.target != self.settings.base && self.score(&long, &self.settings.base).is_some();
            return back.then(|| self.settings.base.clone());
        };
        // The way back needs no margin: the base at least as good on the long window.
        if self.target != self.settings.base {
            if let Some(b) = self.score(&long, &self.settings.base) {
                if b.et <= current.et {
                    return Some(self.settings.base.clone());
                }
            }
        }
        // The candidates best on the recent jobs, then judged on the long window.
        let mut recent: Vec<(f64, Vec<NodeLayout>)> = self
            .candidates()
            .into_iter()
            .filter(|c| *c != self.target)
            .filter_map(|c| self.score(&short, &c).map(|s| (s.et, c)))
            .collect();
        recent.sort_by(|a, b| a.0.total_cmp(&b.0));
        let top_recent = recent.first().cloned();
        let mut best: Option<(Score, Vec<NodeLayout>)> = None;
        for (_, c) in recent.into_iter().take(self.settings.recheck) {
            let Some(s) = self.score(&long, &c) else { continue };
            if best.as_ref().is_none_or(|(b, _)| s.et < b.et) {
                best = Some((s, c));
            }
        }
        let (s, c) = best?;
        let pays = s.et < (1.0 - self.settings.margin) * current.et
            && s.wait_p95_s <= current.wait_p95_s
            && s.bsld_mean <= current.bsld_mean
            && s.no_class_waits_longer_than(&current);
        let Some(residual) = &self.settings.residual else {
            if !pays {
                return None;
            }
            // And no worse on the recent jobs: a change must serve the mix that is now.
            let (a, b) = (self.score(&short, &c)?, self.score(&short, &self.target)?);
            return (a.et <= b.et).then_some(c);
        };
        let (a, b) = (self.score(&short, &c)?, self.score(&short, &self.target)?);
        let takes = pays && a.et <= b.et;
        let worst_class = s
            .class_wait_p95_s
            .iter()
            .filter_map(|(k, w)| {
                let now = current.class_wait_p95_s.iter().find(|(o, _)| o == k)?.1;
                Some(((w + 600.0) / (now + 600.0)).ln())
            })
            .fold(0.0f64, f64::max);
        let cx = super::residual::Context {
            long_gain: (current.et / s.et).ln(),
            short_gain: (b.et / a.et).ln(),
            class_wait: worst_class,
            bsld: (s.bsld_mean.max(1e-9) / current.bsld_mean.max(1e-9)).ln(),
            guard_takes: takes,
            at_base: self.target == self.settings.base,
        };
        match residual.adjust(&cx, self.now_s) {
            super::residual::Adjust::Follow => takes.then_some(c),
            super::residual::Adjust::Keep => None,
            super::residual::Adjust::Relax => (s.et < current.et && a.et <= b.et).then_some(c),
            super::residual::Adjust::Recent => {
                top_recent.and_then(|(et, l)| (et < (1.0 - self.settings.margin) * b.et).then_some(l))
            }
        }
    }
}

/// The GRES types `layouts` have.
fn present(layouts: &[NodeLayout]) -> BTreeSet<&'static str> {
    layouts
        .iter()
        .flat_map(|l| l.gpus.iter())
        .flat_map(|g| g.iter().filter(|(_, n)| *n > 0).map(|(name, _)| name))
        .collect()
}

impl Policy for Guarded {
    fn name(&self) -> &'static str {
        "guarded"
    }

    fn plan(&mut self, nodes: &[NodeSnapshot], demand: &Demand) -> Vec<Repartition> {
        self.plan_at(Duration::ZERO, nodes, demand)
    }

    fn plan_at(&mut self, _time_of_day: Duration, nodes: &[NodeSnapshot], _demand: &Demand) -> Vec<Repartition> {
        self.take_result(false);
        let now = self.log.now_s;
        let first = *self.first_s.get_or_insert(now);
        if now >= self.next_s && now - first >= self.settings.min_history.as_secs_f64() {
            self.next_s = now + self.settings.every.as_secs_f64();
            self.start_decision(nodes.len());
        }
        let s = &self.settings;
        let max_planned = 4 * s.limits.max_concurrent.max(1);
        move_toward(&self.target, nodes, &s.limits, max_planned, s.max_wait)
    }

    fn observes_jobs(&self) -> bool {
        true
    }

    /// The GRES types jobs ask for now: those of the layout the nodes follow.
    fn catalog(&self) -> Option<BTreeSet<&'static str>> {
        Some(present(&self.target))
    }

    fn observe(&mut self, now_s: f64, events: &[JobEvent]) {
        self.log.observe(now_s, events);
        let before = self.envelope;
        for e in events {
            if let JobEvent::Submitted { profile, gpus, .. } = e {
                let mib = self
                    .cfg
                    .model
                    .profile(profile)
                    .map_or(self.cfg.model.total_memory_mib, |p| p.memory_mib);
                let (g, m) = if *gpus > 1 {
                    &mut self.envelope.multi
                } else {
                    &mut self.envelope.single
                };
                *g = (*g).max(*gpus);
                *m = (*m).max(mib);
            }
        }
        if self.envelope != before {
            self.envelope_jobs = self.envelope_workload();
        }
    }
}

#[cfg(test)]
mod tests;
