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
//! - **How nodes move.** As the planner's do ([`dynmig_core::policy::wanted::Wanted::assign`]): nodes already in a wanted
//!   layout keep it, the others change when their running work ends soonest (within
//!   `max_wait`), through reservations at their jobs' time limits, at most `max_concurrent`
//!   at once.

use super::joblog::JobLog;
use super::move_toward;
use super::{Planner, PlannerSettings, Policy, PolicySpec};
use crate::engine::SimConfig;
use crate::search::Searcher;
use crate::workload::Workload;
use dynmig_core::demand::Demand;
use dynmig_core::geometry::NodeLayout;
use dynmig_core::policy::events::JobEvent;
use dynmig_core::policy::{NodeSnapshot, Repartition};
use std::thread::JoinHandle;
use std::time::Duration;

pub use super::settings::AdaptiveSettings;

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
    /// A search under way on its own thread ([`AdaptiveSettings::background`]); its result is
    /// what the nodes should follow from then on (`None`: keep what they follow).
    running: Option<JoinHandle<Option<Mode>>>,
}

/// What a search needs, taken from the policy when it starts (sent to the search's thread).
struct SearchInput {
    /// The history as a workload.
    wl: Workload,
    /// The engine settings, for the nodes there are.
    cfg: SimConfig,
    /// What the nodes follow now, as a policy to score on the history: the static layout
    /// they move to or have, or `None` for the planner.
    current: Option<Vec<NodeLayout>>,
    planner: Option<PlannerSettings>,
    min_gain: f64,
}

impl Adaptive {
    /// A policy searching with the engine settings `cfg` (those of the run it is in, or the
    /// controller's model of its nodes; samples off). Its planner runs jobs on their own
    /// profile when `settings.exact_profiles` or its own settings say so.
    pub fn new(mut settings: AdaptiveSettings, cfg: &SimConfig) -> Self {
        let mut cfg = cfg.clone();
        cfg.sample_interval_s = 0.0;
        cfg.window_start_s = 0.0;
        cfg.audit = false;
        let keep_s = settings.history.as_secs_f64();
        if let Some(p) = settings.planner.as_mut() {
            p.exact_profiles |= settings.exact_profiles;
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
            running: None,
        }
    }

    /// What a search at this call works on: the jobs of the last `history` (and the older
    /// ones still waiting), the nodes' count and what they follow now; `None` when there is
    /// nothing to search on.
    fn search_input(&self, nodes: &[NodeSnapshot]) -> Option<SearchInput> {
        let now = self.log.now_s;
        let from = now - self.settings.history.as_secs_f64();
        let mut jobs = self.log.backlog(from, |at| at - from);
        jobs.extend(self.log.arrivals(from, now, |at| at - from));
        if jobs.is_empty() || nodes.is_empty() {
            return None;
        }
        let current = match &self.mode {
            Some(Mode::Planner) => None,
            Some(Mode::Static(t)) if t.len() == nodes.len() => Some(t.clone()),
            _ => Some(
                nodes
                    .iter()
                    .map(|n| n.planned.clone().unwrap_or_else(|| n.layout.clone()))
                    .collect(),
            ),
        };
        Some(SearchInput {
            wl: Workload::new(jobs, "adaptive history".into()),
            cfg: SimConfig {
                nodes: nodes.len(),
                ..self.cfg.clone()
            },
            current,
            planner: self.settings.planner.clone(),
            min_gain: self.settings.min_gain,
        })
    }

    /// Searches the best static layout (and scores the planner) on `input`'s history; returns
    /// the best candidate if it pays against what the nodes follow now (module docs), `None`
    /// to keep that.
    fn search(input: SearchInput) -> Option<Mode> {
        let quiet = |_: &str, _: u64| {};
        // A history the engine refuses (a job no profile holds): nothing to learn from.
        let mut searcher = Searcher::new(&input.wl, &input.cfg, "adaptive", false, &quiet).ok()?;
        searcher.threads = 1;
        let planner_et = input.planner.as_ref().and_then(|p| {
            searcher
                .try_score("planner", "planner", &PolicySpec::Plan(p.clone()), &quiet)
                .ok()
        });
        let current_et = match input.current {
            None => planner_et,
            Some(layouts) => searcher
                .try_score("current", "current", &PolicySpec::Static(layouts), &quiet)
                .ok(),
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
        let (et, mode) = best?;
        current_et
            .is_none_or(|c| et < c * (1.0 - input.min_gain))
            .then_some(mode)
    }

    /// Starts a search of `input`: on a thread of its own when the settings say so (its
    /// result taken later, [`Adaptive::take_search_result`]), else here.
    fn start_search(&mut self, input: SearchInput) {
        if self.settings.background {
            // The input goes to the thread through a channel, so that it is still here were
            // no thread to be had (the process is out of threads): the search then runs here
            // rather than not at all.
            let (tx, rx) = std::sync::mpsc::channel();
            let spawned = std::thread::Builder::new()
                .name("adaptive-search".into())
                .spawn(move || Self::search(rx.recv().ok()?));
            if let Ok(handle) = spawned {
                let _ = tx.send(input);
                self.running = Some(handle);
                return;
            }
        }
        self.follow(Self::search(input));
    }

    /// Follows what a search found (`None`: keep what the nodes follow).
    fn follow(&mut self, found: Option<Mode>) {
        if let Some(mode) = found {
            self.mode = Some(mode);
        }
    }

    /// Takes the result of a background search that has ended (all of them with `wait`).
    fn take_search_result(&mut self, wait: bool) {
        let Some(handle) = self.running.take_if(|h| wait || h.is_finished()) else {
            return;
        };
        // A search that panicked changes nothing; the next one is a day later.
        self.follow(handle.join().ok().flatten());
    }

    /// Waits for a background search under way and takes its result (tests; a caller that
    /// wants the search's decision before going on). Nothing happens when none runs.
    pub fn finish_search(&mut self) {
        self.take_search_result(true);
    }

    /// Whether a background search is under way (started and its result not yet taken).
    pub fn searching(&self) -> bool {
        self.running.is_some()
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
        self.take_search_result(false);
        let now = self.log.now_s;
        let first = *self.first_s.get_or_insert(now);
        if self.running.is_none() && now >= self.next_search_s && now - first >= self.settings.min_history.as_secs_f64()
        {
            if let Some(input) = self.search_input(nodes) {
                self.start_search(input);
            }
            self.next_search_s = now + self.settings.every.as_secs_f64();
        }
        let proposals = self
            .planner
            .as_mut()
            .map(|p| p.plan_at(time_of_day, nodes, demand))
            .unwrap_or_default();
        let target = match &self.mode {
            None => return Vec::new(),
            Some(Mode::Planner) => return proposals,
            Some(Mode::Static(t)) => t,
        };
        let s = &self.settings;
        move_toward(target, nodes, &s.limits, s.max_planned, s.max_wait)
    }

    fn observes_jobs(&self) -> bool {
        true
    }

    fn observe(&mut self, now_s: f64, events: &[JobEvent]) {
        self.log.observe(now_s, events);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::policies::PolicyLimits;
    use dynmig_core::geometry::{all_layouts, A100_40GB};
    use std::collections::BTreeMap;
    use std::sync::Arc;

    /// Two idle nodes of two whole A100-40GB GPUs each, two days old.
    pub(crate) fn nodes() -> Vec<NodeSnapshot> {
        let allowed: Arc<[_]> = all_layouts(&A100_40GB).into();
        ["n1", "n2"]
            .iter()
            .map(|name| NodeSnapshot {
                name: name.to_string(),
                model: &A100_40GB,
                layout: NodeLayout::parse(&A100_40GB, 2, "1x7g.40gb,1x7g.40gb").expect("valid"),
                allowed: Arc::clone(&allowed),
                busy: BTreeMap::new(),
                running: BTreeMap::new(),
                unavailable: false,
                repartitioning: false,
                layout_age: Duration::from_secs(2 * 86_400),
                incoming: BTreeMap::new(),
                schedulable_free: BTreeMap::new(),
                work_ends_in: Duration::ZERO,
                planned: None,
                version: 0,
            })
            .collect()
    }

    /// A day and a half of 1g.5gb jobs, 12 an hour, each running 1 h on a whole GPU: three
    /// times what the four whole GPUs serve, so that most of them wait.
    pub(crate) fn history(until_s: f64) -> Vec<JobEvent> {
        let mut free = [0.0f64; 4];
        let mut events = Vec::new();
        for i in 0..(until_s / 300.0) as u64 {
            let at = i as f64 * 300.0;
            events.push((
                at,
                0,
                JobEvent::Submitted {
                    id: i,
                    at_s: at,
                    profile: "1g.5gb",
                    gpus: 1,
                    time_limit_s: 7_200.0,
                    deadline_s: Some(at + 5_400.0),
                },
            ));
            let g = (0..4).min_by(|a, b| free[*a].total_cmp(&free[*b])).expect("four GPUs");
            let start = free[g].max(at);
            free[g] = start + 3_600.0;
            if start <= until_s {
                events.push((
                    start,
                    1,
                    JobEvent::Started {
                        id: i,
                        at_s: start,
                        node: format!("n{}", g / 2 + 1),
                        slices: 7,
                    },
                ));
            }
            if start + 3_600.0 <= until_s {
                events.push((
                    start + 3_600.0,
                    2,
                    JobEvent::Ended {
                        id: i,
                        at_s: start + 3_600.0,
                    },
                ));
            }
        }
        events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        events.into_iter().map(|(_, _, e)| e).collect()
    }

    fn policy(background: bool) -> Adaptive {
        let settings = AdaptiveSettings {
            background,
            ..AdaptiveSettings::new(PolicyLimits {
                max_concurrent: 2,
                min_layout_lifetime: Duration::from_secs(600),
                min_gain: 1,
            })
        };
        Adaptive::new(settings, &SimConfig::new(&A100_40GB, 2, 2))
    }

    /// The plan of `p` at time 0 (its first call) and then at `at_s`, after the history.
    fn plan_after_history(p: &mut Adaptive, at_s: f64) -> Vec<Repartition> {
        let (nodes, demand) = (nodes(), Demand::default());
        p.observe(0.0, &[]);
        assert!(p.plan_at(Duration::ZERO, &nodes, &demand).is_empty(), "no history yet");
        p.observe(at_s, &history(at_s));
        p.plan_at(Duration::from_secs(at_s as u64 % 86_400), &nodes, &demand)
    }

    #[test]
    fn a_background_search_leaves_the_call_at_once_and_decides_as_the_search_in_the_call() {
        let at = 1.5 * 86_400.0;
        let mut inline = policy(false);
        let decided = plan_after_history(&mut inline, at);
        assert!(
            !decided.is_empty(),
            "the search on the overload partitions the idle nodes"
        );

        let mut background = policy(true);
        let first = plan_after_history(&mut background, at);
        assert!(
            first.is_empty(),
            "the call that starts the search changes nothing: {first:?}"
        );
        assert!(background.searching(), "the search runs on its own thread");
        background.finish_search();
        assert!(!background.searching());
        let then = background.plan_at(Duration::from_secs(at as u64 % 86_400), &nodes(), &Demand::default());
        assert_eq!(then, decided, "the same decision as the search made inside the call");
        assert_eq!(background.mode, inline.mode);
    }
}
