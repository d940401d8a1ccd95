//! Model-predictive control over the planner: a change the [`Planner`] proposes is made only
//! if the simulator's own engine, run ahead from the present, says it pays (docs/policy.md).
//!
//! Each time the planner proposes changes, two lookahead runs ([`simulate_from`]) start from
//! the cluster as it is now (layouts, the running jobs on their nodes, the plans already made)
//! with the queue and the arrivals forecast for the next `horizon`, and run until every one of
//! those jobs has ended:
//! - **keep**: the layouts stay, the plans already made go ahead;
//! - **change**: the same with the planner's proposals applied (as reservations at the time
//!   limits of the changed nodes' jobs, as the controller does).
//!
//! The change is made when its ET over those jobs is lower than keep's. ET is the report's:
//! `(e / e_ref + t / t_ref) / 2`, with keep as the reference (`e` energy per job, `t` mean
//! tardiness; `t_ref` at least the mean run time). After a rejection the planner is not asked
//! again for `cooldown`.
//!
//! Only what Slurm knows is used: each job's GRES request, submit and start time, node, time
//! limit and deadline (the simulator's jobs carry their due date as `--deadline`); run times
//! are estimated as the time limit times the ratio of run time to time limit of the jobs that
//! ended so far (1 until 20 have); jobs are assumed to speed up with compute slices by the
//! planner's `speedup` exponent. The forecast is the arrivals of the same hours of the
//! previous day (time-of-day demand, learned from past days), with their run times where they
//! have ended. Assumptions, not measurements: docs/policy.md says how each was chosen.

use super::joblog::{JobLog, Tracked, NO_DEADLINE};
use super::{PlannerSettings, Policy};
use crate::engine::{simulate_from, RunResult, SimConfig, StartState};
use crate::model::Job;
use crate::workload::Workload;
use dynmig_core::demand::Demand;
use dynmig_core::policy::events::JobEvent;
use dynmig_core::policy::planner::Planner;
use dynmig_core::policy::{NodeSnapshot, Repartition};
use std::collections::BTreeMap;
use std::time::Duration;

const DAY_S: f64 = 86_400.0;

/// Settings of [`Mpc`].
#[derive(Debug, Clone, PartialEq)]
pub struct MpcSettings {
    /// The planner whose proposals are judged.
    pub planner: PlannerSettings,
    /// Arrivals forecast this far ahead (4 h: twice the planner's horizon, the planner's
    /// `max_wait` for a node's running work).
    pub horizon: Duration,
    /// After a rejected proposal, the planner is not asked again for this long (10 min; 30
    /// min was tried and reacted too late, docs/policy.md).
    pub cooldown: Duration,
    /// Most queued jobs taken into a lookahead, oldest first (2,000: a day of the default
    /// trace's arrivals at its load; a longer queue is cut, the same for both runs).
    pub max_queued: usize,
    /// Forecast scenarios: the arrivals of the same hours on each of this many past days, one
    /// pair of lookahead runs each (1; 3 and 7 were tried and changed nothing but the cost,
    /// docs/policy.md).
    pub scenarios: usize,
}

impl MpcSettings {
    /// The defaults above around `planner`.
    pub fn new(planner: PlannerSettings) -> Self {
        Self {
            planner,
            horizon: Duration::from_secs(4 * 3600),
            cooldown: Duration::from_secs(600),
            max_queued: 2000,
            scenarios: 1,
        }
    }
}

/// The planner gated by lookahead runs of the engine (module docs).
pub struct Mpc {
    settings: MpcSettings,
    planner: Planner,
    /// The engine settings of the lookahead runs (the simulated cluster's own).
    cfg: SimConfig,
    /// The jobs followed, and the arrivals of the last `scenarios` days and horizon.
    log: JobLog,
    quiet_until_s: f64,
}

impl Mpc {
    /// An MPC policy judging with the engine settings `cfg` (those of the run it is in; its
    /// samples and evaluation window are switched off for the lookaheads).
    pub fn new(settings: MpcSettings, cfg: &SimConfig) -> Self {
        let mut cfg = cfg.clone();
        cfg.sample_interval_s = 0.0;
        cfg.window_start_s = 0.0;
        cfg.audit = false;
        let keep_s = settings.scenarios as f64 * DAY_S + settings.horizon.as_secs_f64();
        let p = &settings.planner;
        Self {
            planner: Planner::new(p.clone()),
            log: JobLog::new(cfg.model, p.speedup, p.exact_profiles, keep_s),
            cfg,
            settings,
            quiet_until_s: f64::NEG_INFINITY,
        }
    }

    /// Whether `proposals` pay, judged by lookahead runs (module docs): the mean over the
    /// scenarios of ET with the change less ET without it is below zero.
    fn pays(&self, nodes: &[NodeSnapshot], proposals: &[Repartition]) -> anyhow::Result<bool> {
        let index: BTreeMap<&str, usize> = nodes.iter().enumerate().map(|(i, n)| (n.name.as_str(), i)).collect();
        let mut keep: BTreeMap<usize, _> = nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| n.planned.clone().map(|t| (i, t)))
            .collect();
        let mut change = keep.clone();
        for r in proposals {
            let i = *index
                .get(r.node.as_str())
                .ok_or_else(|| anyhow::anyhow!("proposal for unknown node {}", r.node))?;
            change.insert(i, r.target.clone());
        }
        keep.retain(|i, t| *t != nodes[*i].layout);
        change.retain(|i, t| *t != nodes[*i].layout);
        // A controller's snapshot leaves out nodes it cannot plan for (unregistered, drained by
        // an admin): the lookahead models the nodes it is given.
        let cfg = SimConfig {
            nodes: nodes.len(),
            ..self.cfg.clone()
        };
        let (present, running) = self.present(&index);
        let mut start = StartState {
            layouts: nodes.iter().map(|n| n.layout.clone()).collect(),
            running,
            changes: Vec::new(),
        };
        let mut gain = 0.0;
        for day in 1..=self.settings.scenarios {
            let mut jobs = present.clone();
            jobs.extend(self.forecast(day as f64));
            if jobs.is_empty() {
                continue;
            }
            for (i, j) in jobs.iter_mut().enumerate() {
                j.id = i as u32;
            }
            let wl = Workload::new(jobs, "lookahead".into());
            start.changes = keep.clone().into_iter().collect();
            let a = simulate_from(&wl, &start, &cfg)?;
            start.changes = change.clone().into_iter().collect();
            let b = simulate_from(&wl, &start, &cfg)?;
            // Jobs that keeping the layouts leaves unserved for good (their type is on no
            // node) and the change serves: the change pays, whatever ET says over a horizon
            // that may end before their due dates.
            if b.never_started.len() < a.never_started.len() {
                return Ok(true);
            }
            gain += et_change(&wl, &a, &b, &cfg);
        }
        Ok(gain < -1e-9)
    }

    /// The jobs running (on their nodes, first) and queued now, as lookahead jobs released at
    /// 0, and the running ones' `(index, node)`.
    fn present(&self, index: &BTreeMap<&str, usize>) -> (Vec<Job>, Vec<(u32, usize)>) {
        let log = &self.log;
        let rho = log.run_ratio();
        let now = log.now_s;
        let mut jobs = Vec::new();
        let mut running = Vec::new();
        for t in log.jobs.values() {
            let Some((start, node)) = &t.start else { continue };
            let Some(&n) = index.get(node.as_str()) else { continue };
            let left_limit = (t.limit_s - (now - start)).max(1.0);
            let due = t.deadline_s.map_or(NO_DEADLINE, |d| d - now);
            running.push((jobs.len() as u32, n));
            jobs.push(log.job(t.profile, t.gpus, None, 0.0, left_limit * rho, left_limit, due));
        }
        let mut queued: Vec<&Tracked> = log.jobs.values().filter(|t| t.start.is_none()).collect();
        queued.sort_by(|a, b| a.submit_s.total_cmp(&b.submit_s));
        for t in queued.into_iter().take(self.settings.max_queued) {
            let due = t.deadline_s.map_or(NO_DEADLINE, |d| d - now);
            jobs.push(log.job(t.profile, t.gpus, None, 0.0, t.limit_s * rho, t.limit_s, due));
        }
        (jobs, running)
    }

    /// The arrivals of the `horizon` after this time `days` ago, moved to now.
    fn forecast(&self, days: f64) -> Vec<Job> {
        let back = days * DAY_S;
        let now = self.log.now_s;
        let from = now - back;
        self.log
            .arrivals(from, from + self.settings.horizon.as_secs_f64(), |at| at + back - now)
    }
}

/// ET of run `b` less ET of run `a` over the jobs of `wl` on `cfg`'s cluster, normalised by
/// `a` (module docs). A job the lookahead did not run to its end (its type is on no node, or
/// the horizon came first: no instance in its outcome) is charged its work on whole GPUs at
/// full busy power, as the yardstick charges a job that never started: otherwise a plan that
/// leaves a job unserved would look cheaper than one that serves it.
fn et_change(wl: &Workload, a: &RunResult, b: &RunResult, cfg: &SimConfig) -> f64 {
    let gpus = (cfg.nodes * cfg.gpus_per_node) as f64;
    let n = wl.jobs.len().max(1) as f64;
    let unserved_j = |r: &RunResult| -> f64 {
        r.jobs
            .iter()
            .zip(&wl.jobs)
            .filter(|(o, _)| o.slices == 0)
            .map(|(_, j)| f64::from(j.gpus) * cfg.power.instance_w(cfg.model.compute_slices) * j.work)
            .sum()
    };
    let tardiness = |r: &RunResult| -> f64 {
        r.jobs
            .iter()
            .zip(&wl.jobs)
            .map(|(o, j)| (o.end_ms as f64 / 1000.0 - j.due).max(0.0))
            .sum::<f64>()
            / n
    };
    // Energy above idle: the lookahead's arrivals stop at the horizon, so the run whose
    // last job ends later would pay every other GPU's idle power until then, which the
    // cluster pays either way.
    let busy_j = |r: &RunResult| ((r.energy_j - r.idle_w * gpus * r.makespan_s).max(0.0) + unserved_j(r)) / n;
    let mean_run = wl.jobs.iter().map(|j| j.work).sum::<f64>() / n;
    let (ta, tb) = (tardiness(a), tardiness(b));
    let (ea, eb) = (busy_j(a), busy_j(b));
    let e_ref = ea.max(1e-9);
    let t_ref = ta.max(mean_run).max(1e-9);
    ((eb - ea) / e_ref + (tb - ta) / t_ref) / 2.0
}

impl Policy for Mpc {
    fn name(&self) -> &'static str {
        "mpc"
    }

    fn plan(&mut self, nodes: &[NodeSnapshot], demand: &Demand) -> Vec<Repartition> {
        self.plan_at(Duration::ZERO, nodes, demand)
    }

    fn plan_at(&mut self, time_of_day: Duration, nodes: &[NodeSnapshot], demand: &Demand) -> Vec<Repartition> {
        let proposals = self.planner.plan_at(time_of_day, nodes, demand);
        if proposals.is_empty() || self.log.now_s < self.quiet_until_s {
            return Vec::new();
        }
        match self.pays(nodes, &proposals) {
            // A lookahead that cannot run (a state the engine refuses) does not stop the
            // planner: its proposals are made as they would be without the gate.
            Ok(true) | Err(_) => proposals,
            Ok(false) => {
                self.quiet_until_s = self.log.now_s + self.settings.cooldown.as_secs_f64();
                Vec::new()
            }
        }
    }

    fn observes_jobs(&self) -> bool {
        true
    }

    fn observe(&mut self, now_s: f64, events: &[JobEvent]) {
        self.log.observe(now_s, events);
    }
}
