//! The clairvoyant planner (issue 26, item 5): a node-drain policy that knows the future, to
//! say how much of the remaining headroom foresight alone would win. No site can run it.
//!
//! It knows every job of the run as the simulator does: its true run time on every instance,
//! its due date, and when the jobs not yet submitted will arrive. It follows the cluster with
//! two planners ([`Planner`], speed and consolidate objectives), and at most every `period`
//! (10 min) in which either proposed a change it runs the simulator's own engine ahead from
//! the present ([`simulate_from`]) on the true jobs: those running (their true remaining
//! time), those queued, and every arrival of the next `horizon` (24 h), until all of them have
//! ended, once for keep (the layouts stay, the plans already made go ahead) and once per
//! planner's latest proposals.
//!
//! It makes the candidate that leaves the fewest of those jobs unserved (a type on no node)
//! and, among those, costs least, if that beats keep. The cost is the judgement's ET summed
//! over the lookahead's jobs, with the judgement's fixed references ([`Norm`]: the energy
//! lower bound per job, the mean full-GPU run time of the judged jobs): busy energy over
//! `e_ref` plus tardiness over `t_ref`; a job left unserved is charged its work on whole GPUs at full busy
//! power and the tardiness of starting at the later of the lookahead's last end and the
//! horizon.
//!
//! What it is not: an optimum, nor a proven bound. It is greedy over a finite horizon and two
//! planners' proposals, so an online policy could in principle beat it; the lower bounds no
//! policy can pass are [`crate::bounds`]'. How its settings were chosen (on the development
//! trace only) is in docs/simulate.md, "Ceilings". Running jobs keep the instance type they
//! asked for in its lookahead (under the `spill-up` what-if a job may run on a larger one:
//! its remaining time is then taken on its own type).

use super::joblog::JobLog;
use super::{PlannerSettings, Policy};
use crate::bounds::bounds;
use crate::engine::{simulate_from, RunResult, SimConfig, StartState};
use crate::metrics::Norm;
use crate::model::Job;
use crate::workload::Workload;
use dynmig_core::demand::Demand;
use dynmig_core::policy::events::JobEvent;
use dynmig_core::policy::planner::{Objective, Planner};
use dynmig_core::policy::{NodeSnapshot, Repartition};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Settings of [`Clairvoyant`].
#[derive(Debug, Clone, PartialEq)]
pub struct ClairvoyantSettings {
    /// The planner settings of its planner candidates (the objective is set per candidate).
    pub planner: PlannerSettings,
    /// Arrivals seen ahead (24 h).
    pub horizon: Duration,
    /// Least time between decisions (10 min).
    pub period: Duration,
    /// Most queued jobs taken into a lookahead, oldest first (2,000, as mpc).
    pub max_queued: usize,
}

impl ClairvoyantSettings {
    /// The defaults above around `planner`.
    pub fn new(planner: PlannerSettings) -> Self {
        Self {
            planner,
            horizon: Duration::from_secs(24 * 3600),
            period: Duration::from_secs(600),
            max_queued: 2000,
        }
    }
}

/// The clairvoyant planner (module docs).
pub struct Clairvoyant {
    settings: ClairvoyantSettings,
    planners: Vec<Planner>,
    /// Each planner's latest proposals since the last decision.
    proposals: Vec<Vec<Repartition>>,
    /// The engine settings of the lookahead runs (the simulated cluster's own).
    cfg: SimConfig,
    /// Every job of the run, by id (the engine's job index).
    jobs: Arc<[Job]>,
    /// Which jobs are queued and running now.
    log: JobLog,
    /// The judgement's references.
    norm: Norm,
    next_s: f64,
}

impl Clairvoyant {
    /// A clairvoyant planner for the run of `jobs` (the workload the engine runs, in its
    /// order) on `cfg`'s cluster.
    pub fn new(settings: ClairvoyantSettings, cfg: &SimConfig, jobs: &[Job]) -> Self {
        // The engine's jobs are already in release order with ids equal to their index, so
        // the workload keeps them as they are.
        let wl = Workload::new(jobs.to_vec(), "clairvoyant".into());
        let b = bounds(&wl, cfg.model, cfg.nodes * cfg.gpus_per_node, &cfg.power);
        let norm = Norm::of(&wl, &b, cfg.window_start_s);
        let mut cfg = cfg.clone();
        cfg.sample_interval_s = 0.0;
        cfg.window_start_s = 0.0;
        cfg.audit = false;
        let p = &settings.planner;
        let planners: Vec<Planner> = [Objective::Speed, Objective::Consolidate]
            .into_iter()
            .map(|objective| Planner::new(PlannerSettings { objective, ..p.clone() }))
            .collect();
        Self {
            log: JobLog::new(cfg.model, p.speedup, p.exact_profiles, 0.0),
            norm,
            proposals: vec![Vec::new(); planners.len()],
            planners,
            cfg,
            jobs: wl.jobs.into(),
            settings,
            next_s: 0.0,
        }
    }

    /// The lookahead's jobs (running first, then queued, then the arrivals of the horizon,
    /// released relative to now) and the running ones' `(index, node)`.
    fn lookahead_jobs(&self, index: &BTreeMap<&str, usize>) -> (Vec<Job>, Vec<(u32, usize)>) {
        let now = self.log.now_s;
        let full = self.cfg.model.compute_slices;
        let mut jobs = Vec::new();
        let mut running = Vec::new();
        // The job as it asked Slurm: its GRES type's memory, typed unless spill-up.
        let asked = |j: &Job, profile: &str| -> Job {
            let mut j = j.clone();
            if let Some(p) = self.cfg.model.profile(profile).filter(|_| j.gpus == 1) {
                j.mem_mib = p.memory_mib;
                j.exact_slices = (!self.cfg.what_if.spill_up).then_some(p.compute_slices);
            }
            j
        };
        for (id, t) in &self.log.jobs {
            let Some((start, node)) = &t.start else { continue };
            let (Some(&n), Some(j)) = (index.get(node.as_str()), self.jobs.get(*id as usize)) else {
                continue;
            };
            let slices = if j.gpus > 1 {
                full
            } else {
                self.cfg.model.profile(t.profile).map_or(full, |p| p.compute_slices)
            };
            let total = j.time_on(slices, full).max(1e-3);
            let left = (start + total - now).max(1.0);
            let mut l = asked(j, t.profile);
            l.release = 0.0;
            l.work = j.work * left / total;
            l.due = j.due - now;
            running.push((jobs.len() as u32, n));
            jobs.push(l);
        }
        let mut queued: Vec<(f64, u64)> = self
            .log
            .jobs
            .iter()
            .filter(|(_, t)| t.start.is_none())
            .map(|(id, t)| (t.submit_s, *id))
            .collect();
        queued.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        for (_, id) in queued.into_iter().take(self.settings.max_queued) {
            let (Some(j), Some(t)) = (self.jobs.get(id as usize), self.log.jobs.get(&id)) else {
                continue;
            };
            let mut l = asked(j, t.profile);
            l.release = 0.0;
            l.due = j.due - now;
            jobs.push(l);
        }
        let until = now + self.settings.horizon.as_secs_f64();
        let from = self.jobs.partition_point(|j| j.release <= now);
        for j in self.jobs[from..].iter().take_while(|j| j.release <= until) {
            let mut l = j.clone();
            l.release = j.release - now;
            l.due = j.due - now;
            jobs.push(l);
        }
        (jobs, running)
    }

    /// The best candidate by lookahead (module docs), if it beats keep.
    fn choose(&self, nodes: &[NodeSnapshot]) -> anyhow::Result<Vec<Repartition>> {
        let index: BTreeMap<&str, usize> = nodes.iter().enumerate().map(|(i, n)| (n.name.as_str(), i)).collect();
        let (mut jobs, running) = self.lookahead_jobs(&index);
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let candidates: Vec<Vec<Repartition>> = self.proposals.iter().filter(|r| !r.is_empty()).cloned().collect();
        if candidates.is_empty() {
            return Ok(Vec::new());
        }
        for (i, j) in jobs.iter_mut().enumerate() {
            j.id = i as u32;
        }
        let wl = Workload::new(jobs, "clairvoyant lookahead".into());
        let cfg = SimConfig {
            nodes: nodes.len(),
            ..self.cfg.clone()
        };
        let keep: BTreeMap<usize, _> = nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| n.planned.clone().filter(|t| *t != n.layout).map(|t| (i, t)))
            .collect();
        let mut start = StartState {
            layouts: nodes.iter().map(|n| n.layout.clone()).collect(),
            running,
            changes: keep.clone().into_iter().collect(),
        };
        let kept = self.score(&wl, &simulate_from(&wl, &start, &cfg)?, &cfg);
        let mut best: Option<((usize, f64), usize)> = None;
        for (k, c) in candidates.iter().enumerate() {
            let mut change = keep.clone();
            for r in c {
                if let Some(&i) = index.get(r.node.as_str()) {
                    change.insert(i, r.target.clone());
                }
            }
            change.retain(|i, t| *t != nodes[*i].layout);
            start.changes = change.into_iter().collect();
            let score = self.score(&wl, &simulate_from(&wl, &start, &cfg)?, &cfg);
            if best.is_none_or(|(b, _)| score < b) {
                best = Some((score, k));
            }
        }
        Ok(match best {
            Some(((n, c), k)) if n < kept.0 || (n == kept.0 && c < kept.1 * (1.0 - 1e-9)) => {
                candidates.into_iter().nth(k).unwrap_or_default()
            }
            _ => Vec::new(),
        })
    }

    /// Jobs lookahead run `r` leaves unserved, then its cost (module docs).
    fn score(&self, wl: &Workload, r: &RunResult, cfg: &SimConfig) -> (usize, f64) {
        (r.never_started.len(), self.cost(wl, r, cfg))
    }

    /// The cost of lookahead run `r` of `wl` (module docs).
    fn cost(&self, wl: &Workload, r: &RunResult, cfg: &SimConfig) -> f64 {
        let gpus = (cfg.nodes * cfg.gpus_per_node) as f64;
        let full_w = cfg.power.instance_w(cfg.model.compute_slices);
        let horizon = self.settings.horizon.as_secs_f64();
        let mut energy = (r.energy_j - r.idle_w * gpus * r.makespan_s).max(0.0);
        let mut tardiness = 0.0;
        for (o, j) in r.jobs.iter().zip(&wl.jobs) {
            if o.slices == 0 {
                energy += f64::from(j.gpus) * full_w * j.work;
                tardiness += (r.makespan_s.max(horizon) + j.work - j.due).max(0.0);
            } else {
                tardiness += (o.end_ms as f64 / 1000.0 - j.due).max(0.0);
            }
        }
        energy / self.norm.e_ref_j + tardiness / self.norm.t_ref_s
    }
}

impl Policy for Clairvoyant {
    fn name(&self) -> &'static str {
        "clairvoyant"
    }

    fn plan(&mut self, nodes: &[NodeSnapshot], demand: &Demand) -> Vec<Repartition> {
        self.plan_at(Duration::ZERO, nodes, demand)
    }

    fn plan_at(&mut self, time_of_day: Duration, nodes: &[NodeSnapshot], demand: &Demand) -> Vec<Repartition> {
        // The planners follow the cluster at every call, as they do on their own; their
        // latest proposals are candidates at the next decision.
        for (p, last) in self.planners.iter_mut().zip(self.proposals.iter_mut()) {
            let r = p.plan_at(time_of_day, nodes, demand);
            if !r.is_empty() {
                *last = r;
            }
        }
        if self.log.now_s < self.next_s || self.proposals.iter().all(Vec::is_empty) {
            return Vec::new();
        }
        self.next_s = self.log.now_s + self.settings.period.as_secs_f64();
        // A lookahead that cannot run (a state the engine refuses) changes nothing.
        let r = self.choose(nodes).unwrap_or_default();
        for last in &mut self.proposals {
            last.clear();
        }
        r
    }

    fn observes_jobs(&self) -> bool {
        true
    }

    fn observe(&mut self, now_s: f64, events: &[JobEvent]) {
        self.log.observe(now_s, events);
    }
}
