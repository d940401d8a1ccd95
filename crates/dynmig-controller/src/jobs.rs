//! What a policy that looks ahead learns of jobs between passes ([`JobEvent`]): a [`JobFeed`]
//! compares each pass's jobs (`squeue --json`) with the previous pass's and says which were
//! submitted, started and ended in between, with what Slurm knows of them (GRES type and
//! count, time limit, deadline, node).
//!
//! A controller that starts sees every job in the queue as just submitted and every running
//! job as just started: what happened before it ran is not in the queue any more, so a
//! policy's forecast from past days fills up over the first day.

use crate::queue::QueueCache;
use crate::snapshot::ManagedNode;
use dynmig_core::config::expand_hostlist;
use dynmig_core::geometry::ProfileSpec;
use dynmig_core::policy::events::JobEvent;
use dynmig_slurm::{JobInfo, JobState};
use std::collections::{HashMap, HashSet};

/// The time limit assumed for a job whose limit is unlimited (`INFINITE`), s: 48 h, the
/// simulator's partition `MaxTime` (a common site setting), so that both judge such a job
/// alike.
pub const UNLIMITED_TIME_LIMIT_S: f64 = 48.0 * 3600.0;

/// What the feed remembers of a job it reported.
#[derive(Debug, Clone, Copy)]
struct Seen {
    restarts: u32,
    started: bool,
}

/// The job events between passes (module docs). Only jobs asking for a MIG profile of a
/// managed node's GPU model are followed; others are no MIG demand. A pending job that is no
/// demand ([`JobInfo::is_demand`]: held, waiting for a dependency, ...) is followed from when
/// it becomes demand; one held after it was seen (a requeue-hold) has ended.
///
/// The feed also holds the queue as read so far ([`QueueCache`]): a controller keeps one feed
/// from pass to pass, so each pass reads only the jobs that changed.
#[derive(Debug, Default)]
pub struct JobFeed {
    known: HashMap<u32, Seen>,
    /// The queue between passes.
    pub queue: QueueCache,
}

impl JobFeed {
    /// A feed that has seen nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The events since the last call, given the jobs Slurm lists now and `now` (seconds since
    /// the epoch), in order: submissions (oldest first), starts, ends. A job that left the
    /// list ended at `now`; a finished job still listed ended at its `end_time` (at most
    /// `now`); a running job seen again pending was requeued: it ended and is submitted again.
    pub fn events(&mut self, jobs: &[JobInfo], managed: &[ManagedNode], now: i64) -> Vec<JobEvent> {
        let mut submitted = Vec::new();
        let mut started = Vec::new();
        let mut ended = Vec::new();
        let mut listed = HashMap::with_capacity(jobs.len());
        let mut finished = HashSet::new();
        for j in jobs {
            let Some((profile, gpus)) = mig_request(j, managed) else {
                continue;
            };
            // A pending job Slurm would not start (held, waiting for a dependency, a begin
            // time or a limit) is not submitted yet as far as the forecast goes: it is when
            // it becomes demand ([`JobInfo::is_demand`]).
            if j.state == JobState::Pending && !j.is_demand(now) {
                continue;
            }
            let id = u64::from(j.id);
            let active = matches!(j.state, JobState::Pending | JobState::Running | JobState::Completing);
            let prev = self.known.get(&j.id).copied();
            if !active {
                if prev.is_some() {
                    let at = if j.end_time > 0 { j.end_time.min(now) } else { now };
                    ended.push(JobEvent::Ended { id, at_s: at as f64 });
                    finished.insert(j.id);
                }
                continue;
            }
            let running = j.state != JobState::Pending;
            let requeued = prev.is_some_and(|p| (p.started && !running) || p.restarts != j.restarts);
            if requeued {
                ended.push(JobEvent::Ended { id, at_s: now as f64 });
            }
            if prev.is_none() || requeued {
                let at = if j.submit_time > 0 { j.submit_time.min(now) } else { now };
                submitted.push((
                    at,
                    JobEvent::Submitted {
                        id,
                        at_s: at as f64,
                        profile: profile.name,
                        gpus,
                        time_limit_s: j.time_limit_s.map_or(UNLIMITED_TIME_LIMIT_S, |s| s as f64),
                        deadline_s: (j.deadline > 0).then_some(j.deadline as f64),
                    },
                ));
            }
            let was_started = prev.is_some_and(|p| p.started) && !requeued;
            if running && !was_started {
                if let Some(node) = expand_hostlist(&j.nodes).ok().and_then(|n| n.into_iter().next()) {
                    let at = if j.start_time > 0 { j.start_time.min(now) } else { now };
                    started.push(JobEvent::Started {
                        id,
                        at_s: at as f64,
                        node,
                        slices: profile.compute_slices,
                    });
                }
            }
            listed.insert(
                j.id,
                Seen {
                    restarts: j.restarts,
                    started: running,
                },
            );
        }
        let mut gone: Vec<u32> = self
            .known
            .keys()
            .filter(|id| !listed.contains_key(id) && !finished.contains(id))
            .copied()
            .collect();
        gone.sort_unstable();
        ended.extend(gone.into_iter().map(|id| JobEvent::Ended {
            id: u64::from(id),
            at_s: now as f64,
        }));
        self.known = listed;
        submitted.sort_by_key(|(at, e)| (*at, event_id(e)));
        let mut out: Vec<JobEvent> = ended;
        out.extend(submitted.into_iter().map(|(_, e)| e));
        out.extend(started);
        out
    }
}

fn event_id(e: &JobEvent) -> u64 {
    match e {
        JobEvent::Submitted { id, .. } | JobEvent::Started { id, .. } | JobEvent::Ended { id, .. } => *id,
    }
}

/// The MIG profile (of a managed node's GPU model) and count of `job`'s first typed GPU
/// request per node; `None` for a job asking for no MIG profile.
pub(crate) fn mig_request(job: &JobInfo, managed: &[ManagedNode]) -> Option<(&'static ProfileSpec, u32)> {
    job.tres_per_node
        .typed()
        .find_map(|(t, n)| Some((managed.iter().find_map(|m| m.model.profile(t))?, n)))
}
