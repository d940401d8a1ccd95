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

use super::{PlannerSettings, Policy};
use crate::engine::{simulate_from, RunResult, SimConfig, StartState};
use crate::model::{Job, JobKind};
use crate::workload::Workload;
use dynmig_core::demand::Demand;
use dynmig_core::geometry::GpuModel;
use dynmig_core::policy::events::JobEvent;
use dynmig_core::policy::planner::Planner;
use dynmig_core::policy::{NodeSnapshot, Repartition};
use std::collections::BTreeMap;
use std::time::Duration;

const DAY_S: f64 = 86_400.0;
/// Due date of a job with no deadline: never late.
const NO_DEADLINE: f64 = f64::MAX / 4.0;

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

/// What the policy knows of a job that has not ended.
#[derive(Debug, Clone)]
struct Tracked {
    profile: &'static str,
    gpus: u32,
    submit_s: f64,
    limit_s: f64,
    deadline_s: Option<f64>,
    /// Start time and node, once running.
    start: Option<(f64, String)>,
}

/// A past arrival, for the forecast.
#[derive(Debug, Clone)]
struct Arrival {
    profile: &'static str,
    gpus: u32,
    limit_s: f64,
    /// Deadline after submission, s.
    deadline_after_s: Option<f64>,
    /// Its run time, once it has ended.
    run_s: Option<f64>,
}

/// The planner gated by lookahead runs of the engine (module docs).
pub struct Mpc {
    settings: MpcSettings,
    planner: Planner,
    /// The engine settings of the lookahead runs (the simulated cluster's own).
    cfg: SimConfig,
    model: &'static GpuModel,
    now_s: f64,
    jobs: BTreeMap<u64, Tracked>,
    /// Arrivals of the last day and horizon, by `(submit ms, id)`.
    past: BTreeMap<(i64, u64), Arrival>,
    /// Submit key of each past arrival still pending or running, to record its run time.
    past_key: BTreeMap<u64, (i64, u64)>,
    run_sum_s: f64,
    limit_sum_s: f64,
    ended: u64,
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
        Self {
            planner: Planner::new(settings.planner.clone()),
            model: cfg.model,
            cfg,
            settings,
            now_s: 0.0,
            jobs: BTreeMap::new(),
            past: BTreeMap::new(),
            past_key: BTreeMap::new(),
            run_sum_s: 0.0,
            limit_sum_s: 0.0,
            ended: 0,
            quiet_until_s: f64::NEG_INFINITY,
        }
    }

    /// Run time over time limit of the jobs that ended (1 until 20 have).
    fn run_ratio(&self) -> f64 {
        if self.ended < 20 || self.limit_sum_s <= 0.0 {
            1.0
        } else {
            (self.run_sum_s / self.limit_sum_s).clamp(0.01, 1.0)
        }
    }

    /// A lookahead job: `run_s` on the profile it asks for, released at `release_s`.
    fn job(&self, profile: &'static str, gpus: u32, release_s: f64, run_s: f64, limit_s: f64, due_s: f64) -> Job {
        let full = self.model.compute_slices;
        let spec = self.model.profile(profile);
        let slices = if gpus > 1 {
            full
        } else {
            spec.map_or(full, |p| p.compute_slices)
        };
        let mem_mib = spec.map_or(self.model.total_memory_mib, |p| p.memory_mib);
        let gamma = self.settings.planner.speedup;
        let run_s = run_s.max(1.0);
        Job {
            id: 0,
            release: release_s,
            work: run_s * (f64::from(slices) / f64::from(full)).powf(gamma),
            mem_mib,
            gpus,
            kind: JobKind::Training,
            gamma,
            due: due_s,
            limit_factor: (limit_s / run_s).max(1.0),
            // Slurm runs a job only on the GRES type it asked for (a controller's planner says
            // so; the simulator's own jobs fit any instance with enough memory).
            exact_slices: (self.settings.planner.exact_profiles && gpus == 1)
                .then(|| spec.map(|p| p.compute_slices))
                .flatten(),
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
            gain += et_change(&wl, &a, &b, (cfg.nodes * cfg.gpus_per_node) as f64);
        }
        Ok(gain < -1e-9)
    }

    /// The jobs running (on their nodes, first) and queued now, as lookahead jobs released at
    /// 0, and the running ones' `(index, node)`.
    fn present(&self, index: &BTreeMap<&str, usize>) -> (Vec<Job>, Vec<(u32, usize)>) {
        let rho = self.run_ratio();
        let now = self.now_s;
        let mut jobs = Vec::new();
        let mut running = Vec::new();
        for t in self.jobs.values() {
            let Some((start, node)) = &t.start else { continue };
            let Some(&n) = index.get(node.as_str()) else { continue };
            let left_limit = (t.limit_s - (now - start)).max(1.0);
            let due = t.deadline_s.map_or(NO_DEADLINE, |d| d - now);
            running.push((jobs.len() as u32, n));
            jobs.push(self.job(t.profile, t.gpus, 0.0, left_limit * rho, left_limit, due));
        }
        let mut queued: Vec<&Tracked> = self.jobs.values().filter(|t| t.start.is_none()).collect();
        queued.sort_by(|a, b| a.submit_s.total_cmp(&b.submit_s));
        for t in queued.into_iter().take(self.settings.max_queued) {
            let due = t.deadline_s.map_or(NO_DEADLINE, |d| d - now);
            jobs.push(self.job(t.profile, t.gpus, 0.0, t.limit_s * rho, t.limit_s, due));
        }
        (jobs, running)
    }

    /// The arrivals of the `horizon` after this time `days` ago, moved to now.
    fn forecast(&self, days: f64) -> Vec<Job> {
        let rho = self.run_ratio();
        let back = days * DAY_S;
        let from = ((self.now_s - back) * 1000.0).round() as i64;
        let to = ((self.now_s - back + self.settings.horizon.as_secs_f64()) * 1000.0).round() as i64;
        self.past
            .range((from, 0)..(to, 0))
            .map(|((at_ms, _), a)| {
                let release = (*at_ms as f64 / 1000.0 + back - self.now_s).max(0.0);
                let run = a.run_s.unwrap_or(a.limit_s * rho);
                let due = a.deadline_after_s.map_or(NO_DEADLINE, |d| release + d);
                self.job(a.profile, a.gpus, release, run, a.limit_s, due)
            })
            .collect()
    }

    fn forget_before(&mut self, t_s: f64) {
        let cut = (t_s * 1000.0).round() as i64;
        let keep = self.past.split_off(&(cut, 0));
        for (_, id) in std::mem::replace(&mut self.past, keep).into_keys() {
            self.past_key.remove(&id);
        }
    }
}

/// ET of run `b` less ET of run `a` over the jobs of `wl` on `gpus` GPUs, normalised by `a`
/// (module docs).
fn et_change(wl: &Workload, a: &RunResult, b: &RunResult, gpus: f64) -> f64 {
    let n = wl.jobs.len().max(1) as f64;
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
    let busy_j = |r: &RunResult| (r.energy_j - r.idle_w * gpus * r.makespan_s).max(0.0) / n;
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
        if proposals.is_empty() || self.now_s < self.quiet_until_s {
            return Vec::new();
        }
        match self.pays(nodes, &proposals) {
            // A lookahead that cannot run (a state the engine refuses) does not stop the
            // planner: its proposals are made as they would be without the gate.
            Ok(true) | Err(_) => proposals,
            Ok(false) => {
                self.quiet_until_s = self.now_s + self.settings.cooldown.as_secs_f64();
                Vec::new()
            }
        }
    }

    fn observes_jobs(&self) -> bool {
        true
    }

    fn observe(&mut self, now_s: f64, events: &[JobEvent]) {
        self.now_s = now_s;
        for e in events {
            match e {
                JobEvent::Submitted {
                    id,
                    at_s,
                    profile,
                    gpus,
                    time_limit_s,
                    deadline_s,
                } => {
                    self.jobs.insert(
                        *id,
                        Tracked {
                            profile,
                            gpus: *gpus,
                            submit_s: *at_s,
                            limit_s: *time_limit_s,
                            deadline_s: *deadline_s,
                            start: None,
                        },
                    );
                    let key = ((*at_s * 1000.0).round() as i64, *id);
                    if let Some(old) = self.past_key.insert(*id, key) {
                        self.past.remove(&old);
                    }
                    self.past.insert(
                        key,
                        Arrival {
                            profile,
                            gpus: *gpus,
                            limit_s: *time_limit_s,
                            deadline_after_s: deadline_s.map(|d| d - at_s),
                            run_s: None,
                        },
                    );
                }
                JobEvent::Started { id, at_s, node, .. } => {
                    if let Some(t) = self.jobs.get_mut(id) {
                        t.start = Some((*at_s, node.clone()));
                    }
                }
                JobEvent::Ended { id, at_s } => {
                    let Some(t) = self.jobs.remove(id) else { continue };
                    let Some((start, _)) = t.start else { continue };
                    let run = (at_s - start).max(0.0);
                    self.run_sum_s += run;
                    self.limit_sum_s += t.limit_s;
                    self.ended += 1;
                    if let Some(a) = self.past_key.get(id).and_then(|k| self.past.get_mut(k)) {
                        a.run_s = Some(run);
                    }
                }
            }
        }
        self.forget_before(now_s - self.settings.scenarios as f64 * DAY_S - self.settings.horizon.as_secs_f64());
    }
}
