//! The node agent: applies the layout the controller chose for this node, between
//! allocations.
//!
//! The controller hands the target over through Slurm: it drains the node with a
//! [`NodeIntent::Repartition`] reason. When the node is drained that way and no job runs on it
//! any more (the last job's Epilog wakes the agent at once), the agent
//! 1. journals the target ([`Journal`]) before each step,
//! 2. changes only the GPU instances that must change ([`apply_transition`]),
//! 3. rewrites the node's gres.conf,
//! 4. re-registers the node with its new GRES ([`Reregister`]),
//! 5. waits until Slurm shows the node in service with the new GRES,
//! 6. publishes the applied layout in the node's `Extra` field ([`PublishedLayout`]), and
//!    clears the journal.
//!
//! Test hook: at each named point below the agent calls [`TestPoints::reach`], which carries
//! out a point fault a test planned there (SIGKILL, or a pause the test releases;
//! [`crate::testpoints`]) and does nothing otherwise. The points, in
//! order: `journal:instances`, `journal:gres_conf`, `journal:register`, then within the
//! re-registration `register:stopped` (slurmd stopped), `register:deleted` (node deleted
//! from Slurm), `register:started` (the new slurmd daemonised and wrote its pid file), then `journal:wait`, and
//! `published` (the layout is in `Extra`, the journal not yet removed). Each `journal:*`
//! point comes right after that step was journalled, before it acts.
//!
//! Every step is idempotent. After a crash the agent resumes a journal only when the node is
//! still drained by dynmig for that same target and free of jobs, or already back with the
//! target's GRES; otherwise it refuses and says why ([`Step::Refused`]). A journal that cannot
//! be read drains the node with the reason. A failed apply leaves the node drained with a
//! [`NodeIntent::Failed`] reason, which the controller leaves for an administrator.

use crate::metrics::AgentMetrics;
use crate::paths::NodePaths;
use crate::reregister::Reregister;
use crate::testpoints::TestPoints;
use anyhow::{anyhow, bail, Context, Result};
use dynmig_core::geometry::{GpuModel, NodeLayout};
use dynmig_core::gres::shows_totals;
use dynmig_core::protocol::event::{Event, EventKind};
use dynmig_core::protocol::intent::NodeIntent;
use dynmig_core::protocol::journal::{Journal, JournalStep};
use dynmig_core::protocol::layout::PublishedLayout;
use dynmig_gpu::{apply_transition, GpuBackend, Ownership};
use dynmig_host::fs::{read_text_bounded, remove_if_present, write_atomically, LineLog};
use dynmig_slurm::{NodeInfo, SlurmApi};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

mod apply;
mod run;
pub mod steps;

pub use run::{run_forever, InstanceLock, WakeOn};
pub use steps::{StepTimes, STEP_NAMES};

/// How long the node's daemon must be seen gone during the Wait step before the agent
/// registers the node again.
pub const DAEMON_GONE_GRACE: Duration = Duration::from_secs(2);

/// How many times the Wait step registers the node again when its daemon is gone.
pub const REREGISTER_AGAIN: u32 = 2;

/// How many times the agent tries to write gres.conf after changing the GPUs.
pub const GRES_CONF_TRIES: u32 = 3;

/// The largest journal the agent reads, bytes.
pub const MAX_JOURNAL: u64 = 64 << 10;

/// How often the Wait step asks Slurm whether the node is back.
pub const REGISTER_POLL: Duration = Duration::from_millis(50);

/// How often the agent looks at its node while it may be about to be drained: for
/// [`FAST_WINDOW`] after the node was seen free of jobs following a job's end (the controller
/// drains an idle node on its next pass). Otherwise it looks every [`AgentSettings::poll`].
pub const FAST_POLL: Duration = Duration::from_millis(200);

/// How long the agent looks every [`FAST_POLL`] after its node became free of jobs.
pub const FAST_WINDOW: Duration = Duration::from_secs(5);

/// How often the agent looks at its node while the node is in service and runs no job: the
/// controller drains such a node at once when it wants it changed (a busy node is drained or
/// reserved, and its last job's Epilog wakes the agent). The demo of 2026-11-27 lost up to
/// the 2 s poll there.
pub const IDLE_POLL: Duration = Duration::from_millis(500);

/// With wake-ups, how often the agent reads its node while the node is drained for it and
/// jobs still run there. The end of each job wakes it at once (the Epilog's SIGUSR1, sent
/// while `agent.waiting` is there), so this look is only the fallback for an Epilog that did
/// not run, and the controller wakes it again every pass once the node is free of jobs;
/// every [`AgentSettings::poll`] (2 s) it was 60 of slurmctld's RPCs a minute per draining
/// node in the 24.11 queue campaign of 2026-11-28 (docs/results/queue-2026-11-28.md).
pub const WAITING_LOOK: Duration = Duration::from_secs(60);

/// Everything the agent of one node needs to know.
#[derive(Debug, Clone)]
pub struct AgentSettings {
    /// Slurm node name.
    pub node: String,
    /// GPU model of the node's GPUs.
    pub model: &'static GpuModel,
    /// Number of GPUs.
    pub gpus: usize,
    /// The node's files.
    pub paths: NodePaths,
    /// How often the agent looks at its node when no Epilog woke it.
    pub poll: Duration,
    /// Longest wait for the node to come back after re-registration.
    pub register_timeout: Duration,
}

/// What one look at the node did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing for the agent to do.
    Nothing,
    /// The node is drained by dynmig, but jobs still run there.
    WaitingForJobs,
    /// The node is drained by dynmig and free, but Slurm's backfill still plans jobs on it
    /// ([`dynmig_slurm::NodeInfo::is_planned`]): it is deleted only after backfill's next cycle.
    WaitingForBackfill,
    /// The target layout was applied and the node is back in service.
    Applied(NodeLayout),
    /// Applying failed; the node stays drained with the reason.
    Failed(String),
    /// A journal exists but the node is not in a state to resume it; nothing was touched.
    Refused(String),
}

/// The node agent of one node.
pub struct Agent {
    /// Settings.
    pub settings: AgentSettings,
    /// The GPU backend.
    pub backend: Box<dyn GpuBackend>,
    /// Slurm.
    pub slurm: Box<dyn SlurmApi>,
    /// How the node re-registers.
    pub reregister: Box<dyn Reregister>,
    /// Where events go.
    pub events: LineLog,
    /// The agent's metrics ([`run_forever`] serves them when the config asks).
    pub metrics: AgentMetrics,
    /// The step times of the last apply that finished.
    pub last_steps: Option<StepTimes>,
    last_refusal: Option<String>,
    /// The target the node was first seen drained for with jobs still on it, and when.
    drained_seen: Option<(NodeLayout, Instant)>,
    /// Whether the agent logged that backfill still plans its drained node (once a wait).
    planned_noted: bool,
    /// Whether the last look found jobs on the node, and since when it has had none (after
    /// having had some): the window of [`FAST_POLL`].
    had_jobs: bool,
    free_since: Option<Instant>,
    /// Whether the last look found the node in service (not drained) with no job.
    idle_in_service: bool,
    /// Whether the controller wakes this agent ([`run_forever`] with a wake listener): then
    /// the Epilog wakes it only while its node is drained for it and jobs still run.
    pub woken_by_controller: bool,
    /// Where tests stop the agent ([`crate::testpoints`]).
    points: TestPoints,
    /// The GRES the slurmd this agent started last registered (set by a finished apply),
    /// and since when that daemon has been seen dead ([`Agent::keep_slurmd`]).
    serving_gres: Option<String>,
    slurmd_dead_since: Option<Instant>,
}

/// The journal on disk, read with a bound.
enum OnDisk {
    None,
    Journal(Journal),
    Corrupt(String),
}

impl Agent {
    /// An agent over these parts.
    pub fn new(
        settings: AgentSettings,
        backend: Box<dyn GpuBackend>,
        slurm: Box<dyn SlurmApi>,
        reregister: Box<dyn Reregister>,
        events: LineLog,
    ) -> Self {
        let settings_state_dir = settings.paths.state_dir.clone();
        Self {
            metrics: AgentMetrics::new(&settings.node),
            settings,
            backend,
            slurm,
            reregister,
            events,
            last_steps: None,
            last_refusal: None,
            drained_seen: None,
            planned_noted: false,
            had_jobs: false,
            free_since: None,
            idle_in_service: false,
            woken_by_controller: false,
            serving_gres: None,
            slurmd_dead_since: None,
            points: TestPoints::for_node(&settings_state_dir).unwrap_or_else(|e| {
                log::error!("{e}; no test point fires");
                TestPoints::none()
            }),
        }
    }

    fn event(&self, kind: EventKind) -> Event {
        Event::at(dynmig_host::clock::now_secs_f64(), kind, &self.settings.node)
    }

    fn load_journal(&self) -> OnDisk {
        let path = self.settings.paths.journal();
        match read_text_bounded(&path, MAX_JOURNAL) {
            Ok(None) => OnDisk::None,
            Ok(Some(t)) => match Journal::parse(&t, self.settings.model, self.settings.gpus) {
                Ok(j) => OnDisk::Journal(j),
                Err(e) => OnDisk::Corrupt(e.to_string()),
            },
            Err(e) => OnDisk::Corrupt(e.to_string()),
        }
    }

    /// Writes the journal, then passes the point `journal:<step>` (module docs).
    fn save_journal(&mut self, j: &Journal) -> Result<()> {
        let path = self.settings.paths.journal();
        write_atomically(&path, j.encode().as_bytes(), 0o600).with_context(|| format!("writing {}", path.display()))?;
        let step = match j.step {
            JournalStep::Instances => "journal:instances",
            JournalStep::GresConf => "journal:gres_conf",
            JournalStep::Register => "journal:register",
            JournalStep::Wait => "journal:wait",
        };
        self.points.reach(step);
        Ok(())
    }

    /// Looks at the node once and acts (module docs).
    ///
    /// # Errors
    /// Slurm cannot be read. Failures of the apply itself are [`Step::Failed`] after the node
    /// is marked.
    pub fn step(&mut self) -> Result<Step> {
        let node = self.slurm.node(&self.settings.node)?;
        let has_jobs = node.as_ref().is_some_and(NodeInfo::has_jobs);
        if has_jobs {
            self.free_since = None;
        } else if self.had_jobs {
            self.free_since = Some(Instant::now());
        }
        self.had_jobs = has_jobs;
        self.idle_in_service = node.as_ref().is_some_and(|n| !n.has_jobs() && !n.is_drain());
        let step = match self.load_journal() {
            OnDisk::Corrupt(why) => {
                let moved = self.settings.paths.journal().with_extension("json.corrupt");
                let _ = std::fs::rename(self.settings.paths.journal(), &moved);
                let why = format!("unreadable journal, moved to {}: {why}", moved.display());
                return Ok(self.fail(why));
            }
            OnDisk::Journal(j) => match self.may_resume(&j, node.as_ref()) {
                Ok(()) => self.run_apply(&j.target, false, None),
                Err(why) => {
                    if self.last_refusal.as_deref() != Some(&why) {
                        log::warn!("{}: {why}", self.settings.node);
                        self.events
                            .append(&self.event(EventKind::AgentRefused).detail(&why).encode());
                        self.last_refusal = Some(why.clone());
                    }
                    Step::Refused(why)
                }
            },
            OnDisk::None => {
                let Some(n) = node else {
                    return Ok(Step::Nothing);
                };
                match NodeIntent::parse(&n.reason, self.settings.model, self.settings.gpus) {
                    Ok(Some(NodeIntent::Repartition(target))) if n.is_drain() => {
                        let seen = self.drained_seen.take().filter(|(t, _)| *t == target);
                        if n.has_jobs() {
                            self.drained_seen = Some(seen.unwrap_or_else(|| (target, Instant::now())));
                            Step::WaitingForJobs
                        } else if n.is_planned() {
                            // A node backfill still plans on must not be deleted (the
                            // re-registration deletes it): 22.05.8's slurmctld crashes at its
                            // next backfill cycle (NodeInfo::is_planned). Backfill clears the
                            // flag of a drained node at that cycle; look again soon.
                            if !self.planned_noted {
                                log::info!(
                                    "{}: drained, but Slurm's backfill still plans jobs on it (PLANNED): waiting for its next cycle before deleting the node",
                                    self.settings.node
                                );
                                self.planned_noted = true;
                            }
                            self.drained_seen = Some(seen.unwrap_or_else(|| (target, Instant::now())));
                            Step::WaitingForBackfill
                        } else {
                            self.planned_noted = false;
                            self.run_apply(&target, true, seen.map(|(_, at)| at.elapsed()))
                        }
                    }
                    _ => {
                        self.publish_if_stale(&n);
                        Step::Nothing
                    }
                }
            }
        };
        if !matches!(step, Step::Refused(_)) {
            self.last_refusal = None;
        }
        // The marker asks the Epilog to wake the agent when a job ends. Without the
        // controller's wake-ups: while the node runs jobs, drained or not, so that the agent
        // looks at once when its node frees (the controller drains a free node on its next
        // pass). With them: only while the node is drained for it and jobs still run (the
        // controller wakes it after a drain); in service, every last job's end cost a read
        // and its back-off, most of the agents' RPCs in the queue campaign (2026-11-29).
        let marker = self.settings.paths.waiting_marker();
        let wanted = if self.woken_by_controller {
            matches!(step, Step::WaitingForJobs)
        } else {
            has_jobs && !matches!(step, Step::Applied(_) | Step::Failed(_))
        };
        if wanted {
            if !marker.exists() {
                let _ = write_atomically(&marker, b"", 0o644);
            }
        } else {
            let _ = remove_if_present(&marker);
        }
        Ok(step)
    }

    /// Whether a journalled apply may go on (module docs); `Err(why)` if not.
    fn may_resume(&self, j: &Journal, node: Option<&NodeInfo>) -> std::result::Result<(), String> {
        let s = &self.settings;
        let Some(n) = node else {
            // Deleted for re-registration by this apply: only after the instances were done.
            return if j.step >= JournalStep::Register {
                Ok(())
            } else {
                Err(format!(
                    "journal for {} at step {:?}, but Slurm does not know node {}; not resuming (check the node, then remove {})",
                    j.target,
                    j.step,
                    s.node,
                    s.paths.journal().display()
                ))
            };
        };
        let intent = NodeIntent::parse(&n.reason, s.model, s.gpus);
        let drained_for_it = n.is_drain() && matches!(&intent, Ok(Some(NodeIntent::Repartition(t))) if *t == j.target);
        if drained_for_it && !n.has_jobs() {
            return Ok(());
        }
        let back_with_it =
            !n.is_drain() && j.step >= JournalStep::Register && shows_totals(&n.gres, &j.target.totals());
        if back_with_it {
            return Ok(());
        }
        let state = if n.has_jobs() { "runs jobs" } else { "has no jobs" };
        let reason = if n.reason.is_empty() {
            "no reason".to_string()
        } else {
            format!("reason '{}'", dynmig_core::protocol::clip(&n.reason, 100))
        };
        Err(format!(
            "journal for {} at step {:?}, but node {} is {} ({reason}) and {state}: not drained by dynmig for that target; not resuming (check the node, then remove {})",
            j.target,
            j.step,
            s.node,
            if n.is_drain() { "drained" } else { "in service" },
            s.paths.journal().display()
        ))
    }

    /// Whether the agent should look again soon ([`FAST_POLL`]): its node became free of
    /// jobs less than [`FAST_WINDOW`] ago.
    pub fn may_be_drained_soon(&self) -> bool {
        self.free_since.is_some_and(|t| t.elapsed() < FAST_WINDOW)
    }

    /// How long to wait before the next look: [`FAST_POLL`] while [`Agent::may_be_drained_soon`]
    /// or within [`FAST_WINDOW`] of `woke_at` (an Epilog's wake-up), [`IDLE_POLL`] while the
    /// node is in service with no job, else [`AgentSettings::poll`]; never longer than that.
    pub fn next_look(&self, woke_at: Option<Instant>) -> Duration {
        let p = if self.may_be_drained_soon() || woke_at.is_some_and(|t| t.elapsed() < FAST_WINDOW) {
            FAST_POLL
        } else if self.idle_in_service {
            IDLE_POLL
        } else {
            self.settings.poll
        };
        p.min(self.settings.poll)
    }
}
