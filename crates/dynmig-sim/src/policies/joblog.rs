//! What a policy that looks ahead knows of the jobs: the events Slurm shows
//! ([`JobEvent`]: submitted with GRES type, GPU count, time limit and deadline; started on a
//! node; ended), kept as the jobs not yet ended and the arrivals of a recent span, and turned
//! into the simulator's [`Job`]s for a lookahead ([`crate::policies::mpc`]) or a search on
//! past days ([`crate::policies::adaptive`]).
//!
//! What Slurm does not know is estimated: a job's run time is its time limit times the ratio
//! of run time to time limit of the jobs that ended so far (1 until 20 have); a job speeds up
//! with compute slices by one exponent, `speedup` (the planner's, 0.7).

use crate::model::{Job, JobKind};
use dynmig_core::geometry::GpuModel;
use dynmig_core::policy::events::JobEvent;
use std::collections::BTreeMap;

/// Due date of a job with no deadline: never late.
pub(crate) const NO_DEADLINE: f64 = f64::MAX / 4.0;

/// What is known of a job that has not ended.
#[derive(Debug, Clone)]
pub(crate) struct Tracked {
    pub profile: &'static str,
    pub gpus: u32,
    pub submit_s: f64,
    pub limit_s: f64,
    pub deadline_s: Option<f64>,
    /// Start time and node, once running.
    pub start: Option<(f64, String)>,
}

/// A past arrival.
#[derive(Debug, Clone)]
pub(crate) struct Arrival {
    pub profile: &'static str,
    pub gpus: u32,
    pub limit_s: f64,
    /// Deadline after submission, s.
    pub deadline_after_s: Option<f64>,
    /// Its run time, once it has ended.
    pub run_s: Option<f64>,
    /// Compute slices of the instances it ran on, once started (a job may run on a larger
    /// instance than it asked for; its run time is of that instance).
    pub ran_slices: Option<u8>,
}

/// The jobs a policy follows through [`JobEvent`]s (module docs).
#[derive(Debug, Clone)]
pub(crate) struct JobLog {
    model: &'static GpuModel,
    /// Speed-up exponent of the jobs built ([`JobLog::job`]).
    speedup: f64,
    /// How the built jobs speed up with compute slices: one exponent, `speedup` (the
    /// default), or [`crate::model::SpeedCurve::MisoTraining`], the public MISO table.
    pub curve: crate::model::SpeedCurve,
    /// Whether a built single-GPU job runs only on its own profile (as in Slurm).
    exact_profiles: bool,
    /// Arrivals older than this (s before the latest event) are forgotten.
    keep_s: f64,
    pub now_s: f64,
    /// Jobs not yet ended, by id.
    pub jobs: BTreeMap<u64, Tracked>,
    /// Arrivals of the last `keep_s`, by `(submit ms, id)`.
    pub past: BTreeMap<(i64, u64), Arrival>,
    /// Submit key of each past arrival still pending or running, to record its run time.
    past_key: BTreeMap<u64, (i64, u64)>,
    run_sum_s: f64,
    limit_sum_s: f64,
    ended: u64,
}

impl JobLog {
    /// A log of jobs on `model` GPUs, keeping arrivals for `keep_s` seconds.
    pub fn new(model: &'static GpuModel, speedup: f64, exact_profiles: bool, keep_s: f64) -> Self {
        Self {
            model,
            speedup,
            curve: crate::model::SpeedCurve::Exponent,
            exact_profiles,
            keep_s,
            now_s: 0.0,
            jobs: BTreeMap::new(),
            past: BTreeMap::new(),
            past_key: BTreeMap::new(),
            run_sum_s: 0.0,
            limit_sum_s: 0.0,
            ended: 0,
        }
    }

    /// Run time over time limit of the jobs that ended (1 until 20 have).
    pub fn run_ratio(&self) -> f64 {
        if self.ended < 20 || self.limit_sum_s <= 0.0 {
            1.0
        } else {
            (self.run_sum_s / self.limit_sum_s).clamp(0.01, 1.0)
        }
    }

    /// A simulator job asking for `gpus` instances of `profile`, taking `run_s` on instances
    /// of `ran_slices` compute slices (`None`: of the profile it asks for), released at
    /// `release_s`, due at `due_s`, with time limit `limit_s`.
    #[allow(clippy::too_many_arguments)]
    pub fn job(
        &self,
        profile: &'static str,
        gpus: u32,
        ran_slices: Option<u8>,
        release_s: f64,
        run_s: f64,
        limit_s: f64,
        due_s: f64,
    ) -> Job {
        let full = self.model.compute_slices;
        let spec = self.model.profile(profile);
        let slices = if gpus > 1 {
            full
        } else {
            ran_slices.or(spec.map(|p| p.compute_slices)).unwrap_or(full).min(full)
        };
        let mem_mib = spec.map_or(self.model.total_memory_mib, |p| p.memory_mib);
        let gamma = self.speedup;
        let run_s = run_s.max(1.0);
        Job {
            id: 0,
            release: release_s,
            work: match self.curve {
                crate::model::SpeedCurve::Exponent => run_s * (f64::from(slices) / f64::from(full)).powf(gamma),
                c => run_s * c.speed(slices, full, gamma),
            },
            mem_mib,
            gpus,
            kind: JobKind::Training,
            gamma,
            // The policies' own model of a job.
            curve: self.curve,
            due: due_s,
            limit_factor: (limit_s / run_s).max(1.0),
            // Slurm runs a job only on the GRES type it asked for (a controller's planner says
            // so, and so does the engine unless its `spill-up` what-if is on).
            exact_slices: (self.exact_profiles && gpus == 1)
                .then(|| spec.map(|p| p.compute_slices))
                .flatten(),
        }
    }

    /// The arrivals submitted in `[from_s, to_s)` as jobs, each released at `release(submit
    /// time)` (not before 0), with its run time where it ended, else the estimate.
    pub fn arrivals(&self, from_s: f64, to_s: f64, release: impl Fn(f64) -> f64) -> Vec<Job> {
        let rho = self.run_ratio();
        let from = (from_s * 1000.0).round() as i64;
        let to = (to_s * 1000.0).round() as i64;
        self.past
            .range((from, 0)..(to, 0))
            .map(|((at_ms, _), a)| {
                let release = release(*at_ms as f64 / 1000.0).max(0.0);
                let due = a.deadline_after_s.map_or(NO_DEADLINE, |d| release + d);
                match a.run_s {
                    Some(run) => self.job(a.profile, a.gpus, a.ran_slices, release, run, a.limit_s, due),
                    None => self.job(a.profile, a.gpus, None, release, a.limit_s * rho, a.limit_s, due),
                }
            })
            .collect()
    }

    /// The jobs submitted before `before_s` that have not started, as jobs released at
    /// `release(before_s)` (not before 0), due `release` + their deadline less `before_s`
    /// (never due if none), run times estimated.
    pub fn backlog(&self, before_s: f64, release: impl Fn(f64) -> f64) -> Vec<Job> {
        let rho = self.run_ratio();
        let at = release(before_s).max(0.0);
        self.jobs
            .values()
            .filter(|t| t.start.is_none() && t.submit_s < before_s)
            .map(|t| {
                let due = t.deadline_s.map_or(NO_DEADLINE, |d| at + d - before_s);
                self.job(t.profile, t.gpus, None, at, t.limit_s * rho, t.limit_s, due)
            })
            .collect()
    }

    /// Records `events`, the latest at `now_s`, and forgets arrivals older than the span kept.
    pub fn observe(&mut self, now_s: f64, events: &[JobEvent]) {
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
                            ran_slices: None,
                        },
                    );
                }
                JobEvent::Started { id, at_s, node, slices } => {
                    if let Some(t) = self.jobs.get_mut(id) {
                        t.start = Some((*at_s, node.clone()));
                    }
                    if let Some(a) = self.past_key.get(id).and_then(|k| self.past.get_mut(k)) {
                        a.ran_slices = Some(*slices);
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
        self.forget_before(now_s - self.keep_s);
    }

    fn forget_before(&mut self, t_s: f64) {
        let cut = (t_s * 1000.0).round() as i64;
        let keep = self.past.split_off(&(cut, 0));
        for (_, id) in std::mem::replace(&mut self.past, keep).into_keys() {
            self.past_key.remove(&id);
        }
    }
}
