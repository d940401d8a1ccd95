//! The administrator's search, done every day on the days just past: the best static cluster
//! layout for the jobs of the last `history` (7 days), searched with the simulator's own
//! engine exactly as the fair `static` baseline is searched once ([`crate::search`]), becomes
//! the layout the nodes move to, unless the planner's run on the same jobs is better still,
//! in which case the planner decides until the next search (docs/policy.md, "Adaptive").
//!
//! - **What it searches on.** Only what Slurm knows ([`super::joblog`]): the jobs submitted
//!   in the last `history`, with their GRES type, GPU count, time limit and deadline, run
//!   times where they ended (else time limit x the learned run/limit ratio), and the jobs
//!   submitted earlier that still wait (released at the start of the history): a layout that
//!   starves some kind of job must not look good because the starved jobs fell out of the
//!   history.
//! - **Whether a change pays.** What the nodes follow now (the layout they move to, the
//!   planner, or at first the layouts they have) is scored on the same jobs; the best
//!   candidate replaces it only when its ET is lower by `min_gain` (2%) of it. A candidate
//!   that cannot run some job of the history is skipped, as in the baseline search.
//! - **How nodes move.** As the planner's do ([`Wanted::assign`]): nodes already in a wanted
//!   layout keep it, the others change when their running work ends soonest (within
//!   `max_wait`), through reservations at their jobs' time limits, at most `max_concurrent`
//!   at once.

use super::joblog::JobLog;
use super::{Objective, Planner, PlannerSettings, Policy, PolicyLimits, PolicySpec};
use crate::engine::SimConfig;
use crate::search::Searcher;
use crate::workload::Workload;
use dynmig_core::demand::Demand;
use dynmig_core::geometry::NodeLayout;
use dynmig_core::policy::events::JobEvent;
use dynmig_core::policy::wanted::{change_budget, Wanted};
use dynmig_core::policy::{NodeSnapshot, Repartition};
use std::time::Duration;

/// Settings of [`Adaptive`].
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptiveSettings {
    /// Concurrency and hysteresis (`max_concurrent`, `min_layout_lifetime`).
    pub limits: PolicyLimits,
    /// Jobs submitted this far back are searched on (7 days: a week's pattern, half the fair
    /// baseline's 14 days so that a shift of the mix is followed within days).
    pub history: Duration,
    /// Time between searches (1 day).
    pub every: Duration,
    /// No search before this much history (1 day).
    pub min_history: Duration,
    /// The best candidate replaces the current target when its ET is below
    /// `(1 - min_gain)` x the current target's on the same jobs (0.02).
    pub min_gain: f64,
    /// Speed-up exponent of the jobs searched on (0.7, the planner's `speedup`).
    pub speedup: f64,
    /// Jobs run only on the GRES type they asked for (true in a controller, as in Slurm).
    pub exact_profiles: bool,
    /// Most nodes with a planned change at once (4 x `max_concurrent`, as the planner).
    pub max_planned: usize,
    /// A node changes only if its running work ends within this (4 h, the planner's
    /// `max_wait`); later ones are taken at a later call.
    pub max_wait: Duration,
    /// The planner, a candidate beside the static layouts: when its run on the history
    /// beats the best static layout's, the planner decides until the next search (`None`:
    /// static layouts only). Default: the planner's defaults with `limits`, speed objective.
    pub planner: Option<PlannerSettings>,
}

impl AdaptiveSettings {
    /// The defaults above with `limits`.
    pub fn new(limits: PolicyLimits) -> Self {
        let max_planned = 4 * limits.max_concurrent.max(1);
        let planner = Some(PlannerSettings::new(limits.clone(), Objective::Speed));
        Self {
            limits,
            history: Duration::from_secs(7 * 86_400),
            every: Duration::from_secs(86_400),
            min_history: Duration::from_secs(86_400),
            min_gain: 0.02,
            speedup: 0.7,
            exact_profiles: false,
            max_planned,
            max_wait: Duration::from_secs(4 * 3600),
            planner,
        }
    }
}

/// What the nodes follow between two searches.
#[derive(Debug, Clone, PartialEq)]
enum Mode {
    /// A cluster layout (one per node) the nodes move to.
    Static(Vec<NodeLayout>),
    /// The planner's decisions.
    Planner,
}

/// The best static layout re-searched every day on the past days (module docs).
pub struct Adaptive {
    settings: AdaptiveSettings,
    cfg: SimConfig,
    log: JobLog,
    /// The first event's time, s.
    first_s: Option<f64>,
    next_search_s: f64,
    /// What the nodes follow (`None`: nothing chosen yet, nodes keep their layouts).
    mode: Option<Mode>,
    /// The planner, asked at every call so that it keeps learning the time-of-day need.
    planner: Option<Planner>,
}

impl Adaptive {
    /// A policy searching with the engine settings `cfg` (those of the run it is in, or the
    /// controller's model of its nodes; samples off). Its planner runs jobs on their own
    /// profile exactly when `settings.exact_profiles` says so.
    pub fn new(mut settings: AdaptiveSettings, cfg: &SimConfig) -> Self {
        let mut cfg = cfg.clone();
        cfg.sample_interval_s = 0.0;
        cfg.window_start_s = 0.0;
        cfg.audit = false;
        let keep_s = settings.history.as_secs_f64();
        if let Some(p) = settings.planner.as_mut() {
            p.exact_profiles = settings.exact_profiles;
        }
        let planner = settings.planner.clone().map(Planner::new);
        Self {
            log: JobLog::new(cfg.model, settings.speedup, settings.exact_profiles, keep_s),
            cfg,
            settings,
            first_s: None,
            next_search_s: f64::NEG_INFINITY,
            mode: None,
            planner,
        }
    }

    /// Searches the best static layout (and scores the planner) on the jobs of the last
    /// `history` and follows the best if it pays (module docs).
    fn search(&mut self, nodes: &[NodeSnapshot]) {
        let now = self.log.now_s;
        let from = now - self.settings.history.as_secs_f64();
        let mut jobs = self.log.backlog(from, |at| at - from);
        jobs.extend(self.log.arrivals(from, now, |at| at - from));
        if jobs.is_empty() || nodes.is_empty() {
            return;
        }
        let wl = Workload::new(jobs, "adaptive history".into());
        let cfg = SimConfig {
            nodes: nodes.len(),
            ..self.cfg.clone()
        };
        let quiet = |_: &str, _: u64| {};
        let Ok(mut searcher) = Searcher::new(&wl, &cfg, "adaptive", false, &quiet) else {
            // A history the engine refuses (a job no profile holds): nothing to learn from.
            return;
        };
        searcher.threads = 1;
        let planner_et = self.settings.planner.as_ref().and_then(|p| {
            searcher
                .try_score("planner", "planner", &PolicySpec::Plan(p.clone()), &quiet)
                .ok()
        });
        let current_et = match &self.mode {
            Some(Mode::Planner) => planner_et,
            Some(Mode::Static(t)) if t.len() == nodes.len() => searcher
                .try_score("current", "current", &PolicySpec::Static(t.clone()), &quiet)
                .ok(),
            _ => {
                let now: Vec<NodeLayout> = nodes
                    .iter()
                    .map(|n| n.planned.clone().unwrap_or_else(|| n.layout.clone()))
                    .collect();
                searcher
                    .try_score("current", "current", &PolicySpec::Static(now), &quiet)
                    .ok()
            }
        };
        let (ranked, _) = searcher.statics(&quiet);
        let mut best: Option<(f64, Mode)> = ranked.into_iter().next().and_then(|b| match b.spec {
            PolicySpec::Static(l) => Some((b.et, Mode::Static(l))),
            _ => None,
        });
        if let Some(et) = planner_et {
            if best.as_ref().is_none_or(|b| et < b.0) {
                best = Some((et, Mode::Planner));
            }
        }
        if let Some((et, mode)) = best {
            if current_et.is_none_or(|c| et < c * (1.0 - self.settings.min_gain)) {
                self.mode = Some(mode);
            }
        }
    }
}

impl Policy for Adaptive {
    fn name(&self) -> &'static str {
        "adaptive"
    }

    fn plan(&mut self, nodes: &[NodeSnapshot], demand: &Demand) -> Vec<Repartition> {
        self.plan_at(Duration::ZERO, nodes, demand)
    }

    fn plan_at(&mut self, time_of_day: Duration, nodes: &[NodeSnapshot], demand: &Demand) -> Vec<Repartition> {
        let now = self.log.now_s;
        let first = *self.first_s.get_or_insert(now);
        if now >= self.next_search_s && now - first >= self.settings.min_history.as_secs_f64() {
            self.search(nodes);
            self.next_search_s = now + self.settings.every.as_secs_f64();
        }
        let proposals = self
            .planner
            .as_mut()
            .map(|p| p.plan_at(time_of_day, nodes, demand))
            .unwrap_or_default();
        let mut out = Vec::new();
        let target = match &self.mode {
            None => return out,
            Some(Mode::Planner) => return proposals,
            Some(Mode::Static(t)) => t,
        };
        let mut budget = change_budget(nodes, self.settings.limits.max_concurrent, self.settings.max_planned);
        let refs: Vec<&NodeSnapshot> = nodes.iter().collect();
        Wanted::from_layouts(target).assign(
            &refs,
            &mut budget,
            self.settings.limits.min_layout_lifetime,
            self.settings.max_wait,
            &mut out,
        );
        out
    }

    fn observes_jobs(&self) -> bool {
        true
    }

    fn observe(&mut self, now_s: f64, events: &[JobEvent]) {
        self.log.observe(now_s, events);
    }
}
