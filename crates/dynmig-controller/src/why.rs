// One piece: `dynmig why`'s answer, every reason a job may wait checked in one order over one read of the job, the nodes and the plans; its tests are in why/.
//! `dynmig why JOBID`: why a job waits, in the words of its user.
//!
//! [`explain`] reads the job, its decision record (job_submit/dynmig's `AdminComment`,
//! [`DecisionRecord`]) and the cluster as the controller reads it ([`build_snapshot`], the
//! plans file), then runs the controller's own pass as a dry run ([`crate::pass`], what
//! `dynmig plan` prints), and says one [`Outcome`]: the job runs; it is no demand (held,
//! dependency, begin time, limit: [`JobInfo::blocked`]); an instance of its profile is free;
//! a node is being (or is about to be) repartitioned for it, and when it should start; the
//! instances of its profile are busy and when the first frees; or why nothing is planned (no
//! allowed layout holds the profile, the concurrency limit, `min_layout_lifetime`, or the
//! policy found no change worth its drain).
//!
//! Only root and the job's user may ask ([`WhyError::NotYourJob`]); the caller is the real
//! uid of the process, the owner is squeue's `user_id`. This is courtesy, not a security
//! boundary: it shows nothing `squeue` and `sinfo` do not show that user.

use crate::jobs::mig_request;
use crate::snapshot::{build_snapshot, work_ends, ManagedNode, NodeRole};
use crate::{pass, JobFeed, PassSettings};
use dynmig_core::geometry::NodeLayout;
use dynmig_core::policy::{Policy, PolicyLimits};
use dynmig_core::protocol::decision::{ChangeCause, DecisionRecord};
use dynmig_core::protocol::intent::NodeIntent;
use dynmig_core::types::EstimateSource;
use dynmig_host::fs::LineLog;
use dynmig_slurm::{Blocked, JobInfo, JobState, SlurmApi, SlurmError};
use serde::{Deserialize, Serialize};
use std::fmt::Write;

/// Version of [`WhyReport`]'s JSON form (`dynmig why --json`).
pub const WHY_VERSION: u32 = 1;

/// Why `dynmig why` answers no report.
#[derive(Debug, thiserror::Error)]
pub enum WhyError {
    /// Slurm cannot be read.
    #[error(transparent)]
    Slurm(#[from] SlurmError),
    /// Slurm holds no such job (never was, or finished and purged).
    #[error("job {0}: Slurm holds no such job (finished long ago, or a wrong id)")]
    NoSuchJob(u32),
    /// The caller is neither root nor the job's user.
    #[error("job {job} belongs to {}; only its user and root may ask why it waits (you are uid {caller})", owner.map_or("a user Slurm does not name".to_string(), |u| format!("uid {u}")))]
    NotYourJob {
        /// Job id.
        job: u32,
        /// The job's uid.
        owner: Option<u32>,
        /// The caller's real uid.
        caller: u32,
    },
}

/// What `dynmig why` found for one job; `--json` prints it as is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WhyReport {
    /// [`WHY_VERSION`].
    pub version: u32,
    /// When it was read, seconds since the epoch.
    pub time: i64,
    /// Job id.
    pub job: u32,
    /// Job name.
    pub name: String,
    /// The job's user.
    pub user: String,
    /// `PENDING`, `RUNNING`, ...
    pub state: String,
    /// Slurm's reason (`state_reason`), e.g. `ReqNodeNotAvail`.
    pub reason: String,
    /// Slurm's text for it (`state_description`), e.g. `ReqNodeNotAvail,
    /// UnavailableNodes:catalog`; empty when Slurm gives none.
    pub reason_detail: String,
    /// The MIG profile the job asks for (its GRES type), if any.
    pub profile: Option<String>,
    /// Instances per node.
    pub count: u32,
    /// How the profile was chosen (job_submit/dynmig's decision record), if recorded.
    pub chosen: Option<Choice>,
    /// The answer.
    pub outcome: Outcome,
}

/// job_submit/dynmig's decision for the job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Choice {
    /// The profile it chose.
    pub profile: String,
    /// Instances.
    pub count: u32,
    /// The memory estimate, bytes.
    pub mem_bytes: u64,
    /// Where the estimate came from (`mig-mem`, `history`, ...).
    pub source: String,
    /// The same, in words.
    pub how: String,
    /// How the request changed after submission (an out-of-memory restart on a larger
    /// profile, or an update), in words; `None` when it did not.
    pub changed: Option<String>,
}

/// The answer of `dynmig why`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Outcome {
    /// Running (or completing).
    Running {
        /// Its nodes.
        nodes: String,
        /// When its time limit ends.
        end_time: i64,
    },
    /// Finished or in another state dynmig does not wait on.
    NotPending,
    /// Asks for no MIG profile of a managed GPU model: dynmig repartitions nothing for it.
    NotMig {
        /// Its per-node GPU request (`tres_per_node`).
        request: String,
    },
    /// Slurm would not start it now (held, dependency, begin time, limit, ...): no demand.
    Blocked {
        /// `held`, `dependency`, `begin_time`, `limit`, `merged_gres` or `other`.
        class: String,
        /// In words.
        why: String,
    },
    /// An instance of its profile is free on these nodes: Slurm starts it at its next
    /// scheduling pass (or after jobs of higher priority).
    Free {
        /// Nodes with a free instance.
        nodes: Vec<String>,
    },
    /// A node is being repartitioned, or is planned or about to be, to a layout holding the
    /// job's profile.
    Repartition {
        /// The node.
        node: String,
        /// Its target layout, one per GPU.
        target: String,
        /// `draining` (drained, its jobs still run), `applying` (its agent changes the GPUs),
        /// `reserved` (a maintenance reservation from the end of its jobs), `next_pass` (the
        /// controller's next pass drains or reserves it).
        step: String,
        /// When the node should be free for the new layout (its running jobs' latest time
        /// limit, or the reservation's start), seconds since the epoch; the job should start
        /// shortly after (the agent's apply takes seconds).
        start: i64,
    },
    /// Instances of its profile exist but all run jobs.
    Busy {
        /// Nodes with the profile.
        nodes: Vec<String>,
        /// The earliest time limit end of the jobs on those instances.
        frees_at: Option<i64>,
    },
    /// No managed node may take a layout that holds the profile.
    NoLayout,
    /// As many nodes repartition as `[controller] max_concurrent_repartitions` allows.
    ConcurrencyLimit {
        /// The nodes under way.
        under_way: Vec<String>,
        /// The limit.
        max: usize,
    },
    /// Every node that could take the profile changed layout less than `min_layout_lifetime`
    /// ago.
    LayoutLifetime {
        /// When the first of them may change, seconds since the epoch.
        earliest: i64,
    },
    /// The policy found no change worth a drain now.
    NotPlanned {
        /// The policy's name.
        policy: String,
    },
}

/// What [`explain`] needs besides Slurm.
pub struct WhyInputs<'a> {
    /// The managed nodes.
    pub managed: &'a [ManagedNode],
    /// The configured policy (asked in a dry run).
    pub policy: &'a mut dyn Policy,
    /// `[controller] max_concurrent_repartitions` and `min_layout_lifetime`.
    pub limits: PolicyLimits,
    /// The controller's pass settings; the pass is always a dry run.
    pub settings: PassSettings,
}

/// Explains why job `id` waits, for `caller` (a real uid: 0 may ask of any job).
///
/// # Errors
/// [`WhyError`]: Slurm unreadable, no such job, or another user's job.
pub fn explain(slurm: &dyn SlurmApi, inputs: WhyInputs<'_>, id: u32, caller: u32) -> Result<WhyReport, WhyError> {
    let (mut feed, jobs) = queue_for_why(slurm, id)?;
    let job = jobs.iter().find(|j| j.id == id).ok_or(WhyError::NoSuchJob(id))?;
    if caller != 0 && job.uid != Some(caller) {
        return Err(WhyError::NotYourJob {
            job: id,
            owner: job.uid,
            caller,
        });
    }
    let now = inputs.settings.now;
    let request = mig_request(job, inputs.managed);
    let mut report = WhyReport {
        version: WHY_VERSION,
        time: now,
        job: id,
        name: job.name.clone(),
        user: job.user.clone(),
        state: job.state.to_string(),
        reason: job.reason.clone(),
        reason_detail: job.reason_detail.clone(),
        profile: request.map(|(p, _)| p.name.to_string()),
        count: request.map_or(0, |(_, c)| c),
        chosen: DecisionRecord::parse(&job.admin_comment).ok().map(|d| Choice {
            how: source_words(d.source).to_string(),
            changed: d.change.as_ref().map(|c| {
                let by = match c.by {
                    ChangeCause::OomRestart => "an out-of-memory restart on a larger profile",
                    ChangeCause::Update => "an update of its request",
                    ChangeCause::Catalog => "dynmig's catalog, when the layout the nodes follow changed",
                };
                format!(
                    "changed by {by} (restart {}); asked before: {}",
                    c.restarts,
                    c.prev.join(", ")
                )
            }),
            profile: d.profile,
            count: d.count,
            mem_bytes: d.mem_bytes,
            source: d.source.to_string(),
        }),
        outcome: Outcome::NotPending,
    };
    report.outcome = match job.state {
        JobState::Running | JobState::Completing => Outcome::Running {
            nodes: job.nodes.clone(),
            end_time: job.end_time,
        },
        JobState::Pending => match (request, job.blocked(now)) {
            (_, Some(b)) => blocked(&b, now),
            (None, None) => Outcome::NotMig {
                request: job.tres_per_node.to_string(),
            },
            (Some((profile, _)), None) => waiting(slurm, inputs, &mut feed, &jobs, profile.name)?,
        },
        JobState::Other(_) => Outcome::NotPending,
    };
    Ok(report)
}

/// The jobs `explain` looks at, and the feed its dry-run pass goes on from: what the
/// controller's first pass reads (the change listing,
/// then the JSON of running jobs and of the [`crate::queue::READS_PER_PASS`] pending jobs of
/// highest priority, `crate::queue`), and job `id` itself. The whole queue's JSON, read before,
/// grows with the queue (about 8.4 KB a job on 26.05: 420 MB for 50,000 jobs, over the
/// 256 MiB read bound); pending jobs below the top of the queue change nothing of where a
/// job stands that the controller would see in its first pass either. Where Slurm has no
/// listing, the whole queue is read as before.
fn queue_for_why(slurm: &dyn SlurmApi, id: u32) -> Result<(JobFeed, Vec<JobInfo>), WhyError> {
    let mut feed = JobFeed::new();
    feed.queue.refresh(slurm)?;
    let mut jobs = feed.queue.jobs();
    if !jobs.iter().any(|j| j.id == id) {
        if let Some(j) = slurm.job(id)? {
            if j.id == id {
                jobs.push(j);
            }
        }
    }
    Ok((feed, jobs))
}

fn source_words(s: EstimateSource) -> &'static str {
    match s {
        EstimateSource::MigMemHint => "from your --mig-mem hint",
        EstimateSource::MigProfileHint => "your --mig-profile",
        EstimateSource::Default => "the configured default memory (no hint, no history)",
        EstimateSource::WholeGpu => "a whole-GPU request",
        EstimateSource::Model => "estimated from your model hints (--mig-model-params ...)",
        EstimateSource::History => "from the peak memory of your earlier jobs of the same name",
    }
}

fn blocked(b: &Blocked, now: i64) -> Outcome {
    let class = match b {
        Blocked::Held(_) => "held",
        Blocked::Dependency(_) => "dependency",
        Blocked::BeginTime(_) => "begin_time",
        Blocked::Limit(_) => "limit",
        Blocked::MergedGres(_) => "merged_gres",
        Blocked::Other(_) => "other",
    };
    let why = match b {
        Blocked::BeginTime(at) => format!(
            "its begin time has not come (BeginTime): it may start {}",
            when(*at, now)
        ),
        b => b.to_string(),
    };
    Outcome::Blocked {
        class: class.into(),
        why,
    }
}

/// A pending job that is demand for `profile`: where it stands.
fn waiting(
    slurm: &dyn SlurmApi,
    inputs: WhyInputs<'_>,
    feed: &mut JobFeed,
    jobs: &[JobInfo],
    profile: &'static str,
) -> Result<Outcome, WhyError> {
    let now = inputs.settings.now;
    let nodes = slurm.nodes()?;
    let (snapshot, roles) = build_snapshot(jobs, &nodes, inputs.managed, now);
    let ends = work_ends(jobs);
    let holds = |l: &NodeLayout| l.gpus.iter().any(|g| g.count(profile) > 0);
    let in_service = |name: &str| roles.iter().any(|(n, r)| n == name && *r == NodeRole::InService);

    let free: Vec<String> = snapshot
        .nodes
        .iter()
        .filter(|n| in_service(&n.name) && n.free().get(profile).copied().unwrap_or(0) > 0)
        .map(|n| n.name.clone())
        .collect();
    if !free.is_empty() {
        return Ok(Outcome::Free { nodes: free });
    }
    // Repartitions under way: nodes drained with a target holding the profile.
    for (m, (name, role)) in inputs.managed.iter().zip(&roles) {
        let step = match role {
            NodeRole::Draining { .. } => "draining",
            NodeRole::Applying => "applying",
            _ => continue,
        };
        let Some(info) = nodes.iter().find(|n| &n.name == name) else {
            continue;
        };
        if let Ok(Some(NodeIntent::Repartition(target))) = NodeIntent::parse(&info.reason, m.model, m.gpus) {
            if holds(&target) {
                return Ok(Outcome::Repartition {
                    node: name.clone(),
                    target: target.to_string(),
                    step: step.into(),
                    start: ends.get(name).copied().unwrap_or(now).max(now),
                });
            }
        }
    }
    // Planned repartitions: the plans file (readable by root), then the controller's own
    // decision now (a dry run of its pass: what `dynmig plan` prints).
    if let Some(path) = &inputs.settings.plans {
        let plans = crate::plans::load_plans(path, inputs.managed, &LineLog::none(), now, false).plans;
        if let Some(p) = plans.plans.iter().find(|p| holds(&p.target)) {
            return Ok(Outcome::Repartition {
                node: p.node.clone(),
                target: p.target.to_string(),
                step: "reserved".into(),
                start: p.start.max(now),
            });
        }
    }
    let settings = PassSettings {
        dry_run: true,
        ..inputs.settings.clone()
    };
    let report = pass(slurm, inputs.managed, inputs.policy, feed, &LineLog::none(), &settings)?;
    let next = report.drained.iter().chain(&report.planned).find(|r| holds(&r.target));
    if let Some(r) = next {
        return Ok(Outcome::Repartition {
            node: r.node.clone(),
            target: r.target.to_string(),
            step: "next_pass".into(),
            start: ends.get(&r.node).copied().unwrap_or(now).max(now),
        });
    }
    // Instances exist but are busy.
    let with_profile: Vec<String> = snapshot
        .nodes
        .iter()
        .filter(|n| in_service(&n.name) && holds(&n.layout))
        .map(|n| n.name.clone())
        .collect();
    if !with_profile.is_empty() {
        let frees_at = jobs
            .iter()
            .filter(|j| matches!(j.state, JobState::Running | JobState::Completing))
            .filter(|j| j.tres_per_node.typed().any(|(t, _)| t == profile))
            .filter(|j| {
                dynmig_core::config::expand_hostlist(&j.nodes)
                    .is_ok_and(|ns| ns.iter().any(|n| with_profile.contains(n)))
            })
            .map(|j| j.end_time)
            .min();
        return Ok(Outcome::Busy {
            nodes: with_profile,
            frees_at,
        });
    }
    // Nothing planned: why.
    let can_hold: Vec<&ManagedNode> = inputs
        .managed
        .iter()
        .filter(|m| m.model.profile(profile).is_some() && m.allowed.iter().any(|l| l.count(profile) > 0))
        .collect();
    if can_hold.is_empty() {
        return Ok(Outcome::NoLayout);
    }
    let under_way: Vec<String> = snapshot
        .nodes
        .iter()
        .filter(|n| n.repartitioning)
        .map(|n| n.name.clone())
        .collect();
    if under_way.len() >= inputs.limits.max_concurrent {
        return Ok(Outcome::ConcurrencyLimit {
            under_way,
            max: inputs.limits.max_concurrent,
        });
    }
    let lifetime = inputs.limits.min_layout_lifetime;
    let candidates: Vec<_> = snapshot
        .nodes
        .iter()
        .filter(|n| can_hold.iter().any(|m| m.name == n.name) && in_service(&n.name) && n.planned.is_none())
        .collect();
    if !candidates.is_empty() && candidates.iter().all(|n| n.layout_age < lifetime) {
        let wait = candidates
            .iter()
            .map(|n| lifetime.saturating_sub(n.layout_age).as_secs())
            .min()
            .unwrap_or(0);
        return Ok(Outcome::LayoutLifetime {
            earliest: now + i64::try_from(wait).unwrap_or(i64::MAX / 2),
        });
    }
    Ok(Outcome::NotPlanned {
        policy: inputs.policy.name().to_string(),
    })
}

/// `2026-11-27 14:05:00 UTC (in 300 s)`: a time for a user, with how far it is from `now`.
pub fn when(t: i64, now: i64) -> String {
    let days = t.div_euclid(86_400);
    let secs = t.rem_euclid(86_400);
    // Days since 1970-01-01 to a civil date (Howard Hinnant's days_from_civil, inverted).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let rel = if t >= now {
        format!("in {} s", t - now)
    } else {
        format!("{} s ago", now - t)
    };
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC ({rel})",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

/// Text for a terminal: control characters become `?`.
fn printable(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { '?' } else { c }).collect()
}

impl WhyReport {
    /// The lines `dynmig why` prints.
    pub fn render_text(&self) -> String {
        let mut s = String::new();
        let detail = if self.reason_detail.is_empty() || self.reason_detail == self.reason {
            String::new()
        } else {
            format!(" ({})", printable(&self.reason_detail))
        };
        let _ = writeln!(
            s,
            "job {} ({}) of {}: {}, Slurm's reason: {}{detail}",
            self.job,
            printable(&self.name),
            printable(&self.user),
            self.state,
            if self.reason.is_empty() { "-" } else { &self.reason },
        );
        match (&self.profile, &self.chosen) {
            (Some(p), Some(c)) if &c.profile == p => {
                let _ = writeln!(
                    s,
                    "profile: {p} x{}, chosen by dynmig at submission {} (estimate {:.1} GiB)",
                    self.count,
                    c.how,
                    c.mem_bytes as f64 / f64::from(1u32 << 30)
                );
            }
            (Some(p), Some(c)) => {
                let _ = writeln!(
                    s,
                    "profile: {p} x{} as the job asks now; dynmig chose {} at submission ({})",
                    self.count, c.profile, c.how
                );
            }
            (Some(p), None) => {
                let _ = writeln!(
                    s,
                    "profile: {p} x{}, asked for directly (no dynmig decision recorded)",
                    self.count
                );
            }
            (None, _) => {}
        }
        if let Some(changed) = self.chosen.as_ref().and_then(|c| c.changed.as_ref()) {
            let _ = writeln!(s, "{changed}");
        }
        let t = |at: i64| when(at, self.time);
        let line = match &self.outcome {
            Outcome::Running { nodes, end_time } => {
                format!("running on {}; its time limit ends {}", printable(nodes), t(*end_time))
            }
            Outcome::NotPending => "not pending: nothing to wait for".to_string(),
            Outcome::NotMig { request } => format!(
                "not a MIG job (GPU request '{}'): dynmig changes no layout for it",
                printable(request)
            ),
            Outcome::Blocked { why, .. } => format!(
                "no repartition is planned for it: {why}. dynmig counts it once Slurm would start it"
            ),
            Outcome::Free { nodes } => format!(
                "a {} instance is free on {}: Slurm should start it at its next scheduling pass, after jobs of higher priority",
                self.profile.as_deref().unwrap_or("?"),
                nodes.join(", ")
            ),
            Outcome::Repartition {
                node,
                target,
                step,
                start,
            } => {
                let what = match step.as_str() {
                    "draining" => format!("{node} is drained to be repartitioned to {target} once its running jobs end"),
                    "applying" => format!("{node} is being repartitioned to {target} now"),
                    "reserved" => format!(
                        "{node} is reserved (dynmig_{node}) from the end of its running jobs, then repartitioned to {target}"
                    ),
                    _ => format!("the controller's next pass takes {node} to be repartitioned to {target}"),
                };
                if *start > self.time {
                    format!(
                        "{what}; it should be free {} (the running jobs' time limits), and the job start shortly after",
                        t(*start)
                    )
                } else {
                    format!("{what}; the node is free of jobs: the job should start within seconds, once the new layout is in service")
                }
            }
            Outcome::Busy { nodes, frees_at } => {
                let when = frees_at.map_or("when one of their jobs ends".to_string(), |at| {
                    format!("at the latest {} (the earliest time limit of their jobs)", t(at))
                });
                format!(
                    "every {} instance (on {}) runs a job and no repartition is planned: one frees {when}",
                    self.profile.as_deref().unwrap_or("?"),
                    nodes.join(", ")
                )
            }
            Outcome::NoLayout => format!(
                "no repartition is planned: no allowed layout of any managed node holds {} (ask your administrator)",
                self.profile.as_deref().unwrap_or("?")
            ),
            Outcome::ConcurrencyLimit { under_way, max } => format!(
                "no repartition is planned yet: {} node(s) are being repartitioned ({}), the most at once ([controller] max_concurrent_repartitions = {max}); the controller looks again when one is done",
                under_way.len(),
                under_way.join(", ")
            ),
            Outcome::LayoutLifetime { earliest } => format!(
                "no repartition is planned yet: the nodes that could hold it changed layout recently ([controller] min_layout_lifetime); the first may change {}",
                t(*earliest)
            ),
            Outcome::NotPlanned { policy } => format!(
                "no repartition is planned: the policy ({policy}) found no change worth draining a node for now (too little demand for a change, a drain that would not pay back, or other jobs served first); it decides again every pass"
            ),
        };
        let _ = writeln!(s, "{line}");
        s
    }

    /// The JSON form: pretty printed, with a final newline.
    pub fn render_json(&self) -> String {
        // Strings, numbers and options only: always serialises.
        serde_json::to_string_pretty(self).expect("a report always serialises") + "\n"
    }
}

#[cfg(test)]
mod tests;
