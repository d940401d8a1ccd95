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
use dynmig_core::protocol::event::{Event, EventKind};
use dynmig_core::protocol::intent::NodeIntent;
use dynmig_core::protocol::journal::{Journal, JournalStep};
use dynmig_core::protocol::layout::PublishedLayout;
use dynmig_gpu::{apply_transition, GpuBackend, Ownership};
use dynmig_host::fs::{read_text_bounded, remove_if_present, write_atomically, LineLog};
use dynmig_slurm::json::parse_node_gres;
use dynmig_slurm::{NodeInfo, SlurmApi};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

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

/// Whether the node's energy ledger lists a job (a GPU job whose Prolog ran and whose Epilog
/// has not); a ledger that cannot be read counts as none.
fn gpu_jobs_left(state_dir: &std::path::Path) -> bool {
    dynmig_gpu::energy::Ledger::in_dir(state_dir)
        .jobs()
        .is_ok_and(|jobs| !jobs.is_empty())
}

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

/// Whether a node's GRES `(type, count)` list holds exactly the target's instances.
pub fn same_gres(gres: &[(String, u32)], target: &NodeLayout) -> bool {
    let mut have: BTreeMap<&str, u32> = BTreeMap::new();
    for (t, n) in gres {
        *have.entry(t.as_str()).or_insert(0) += n;
    }
    have.retain(|_, n| *n > 0);
    let want = target.totals();
    have.len() == want.len() && want.iter().all(|(t, n)| have.get(t) == Some(n))
}

/// The steps of an apply whose time the agent records, in order ([`StepTimes`]):
/// - `idle_wait`: from the first look that found the node drained for this target (with jobs
///   still on it) until the apply began: the running jobs ending and Slurm noticing (absent
///   when the node was idle at that first look, or the apply resumes a journal);
/// - `instances`: GPU instances deleted and created;
/// - `gres_conf`: gres.conf written;
/// - `slurmd_stop`, `delete`, `slurmd_start`: the re-registration ([`Reregister`]; the
///   `register:*` points of the module docs), each until its point;
/// - `registration`: from the started slurmd until Slurm shows the node in service with the
///   new GRES (the Wait step);
/// - `publish`: the layout written into the node's `Extra`.
pub const STEP_NAMES: [&str; 8] = [
    "idle_wait",
    "instances",
    "gres_conf",
    "slurmd_stop",
    "delete",
    "slurmd_start",
    "registration",
    "publish",
];

/// How long each step of one apply took (seconds per name of [`STEP_NAMES`], in order; a step
/// not done is absent). The agent logs them, observes them in its metrics and writes them
/// into the `applied` event's detail, where the demo's report reads them back.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepTimes(pub Vec<(&'static str, Duration)>);

impl StepTimes {
    /// Adds `took` to the step `name` (a step may be done twice: a re-registration again).
    pub fn add(&mut self, name: &'static str, took: Duration) {
        match self.0.iter_mut().find(|(n, _)| *n == name) {
            Some((_, d)) => *d += took,
            None => self.0.push((name, took)),
        }
    }

    /// The time of step `name`, if it was done.
    pub fn get(&self, name: &str) -> Option<Duration> {
        self.0.iter().find(|(n, _)| *n == name).map(|(_, d)| *d)
    }

    /// `steps idle_wait=0.052 instances=0.001 ...` (seconds, 3 decimals, in [`STEP_NAMES`]
    /// order).
    pub fn encode(&self) -> String {
        let mut s = String::from("steps");
        for name in STEP_NAMES {
            if let Some(d) = self.get(name) {
                s.push_str(&format!(" {name}={:.3}", d.as_secs_f64()));
            }
        }
        s
    }

    /// The step times in a text that holds [`StepTimes::encode`]'s words (an `applied`
    /// event's detail); unknown names and unreadable numbers are skipped.
    pub fn parse(text: &str) -> Self {
        let mut out = Self::default();
        let Some(at) = text.find("steps ") else {
            return out;
        };
        for word in text[at + "steps ".len()..].split_whitespace() {
            let Some((k, v)) = word.split_once('=') else { break };
            let Some(name) = STEP_NAMES.iter().find(|n| **n == k) else {
                continue;
            };
            if let Ok(secs) = v.trim_end_matches([',', ';']).parse::<f64>() {
                if secs.is_finite() && secs >= 0.0 {
                    out.add(name, Duration::from_secs_f64(secs));
                }
            }
        }
        out
    }
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
            !n.is_drain() && j.step >= JournalStep::Register && same_gres(&parse_node_gres(&n.gres), &j.target);
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

    /// [`Agent::apply_timed`], the outcome as a [`Step`].
    fn run_apply(&mut self, target: &NodeLayout, drained: bool, idle_wait: Option<Duration>) -> Step {
        match self.apply_timed(target, drained, idle_wait) {
            Ok(()) => Step::Applied(target.clone()),
            Err(e) => self.fail(format!("{e:#}")),
        }
    }

    /// Leaves the node drained with the reason and clears the journal, so that the agent does
    /// not retry in a loop: an administrator decides (`scontrol update state=resume`).
    fn fail(&mut self, why: String) -> Step {
        self.metrics.apply_failed();
        let _ = self.slurm.drain(&self.settings.node, &NodeIntent::Failed(why.clone()));
        let _ = remove_if_present(&self.settings.paths.journal());
        self.events
            .append(&self.event(EventKind::RepartitionFailed).detail(&why).encode());
        Step::Failed(why)
    }

    /// Writes the applied layout into the node's `Extra` when it is missing or stale (after
    /// a restart of the agent, or a node registered by `dynmig init-node`).
    fn publish_if_stale(&self, n: &NodeInfo) {
        let Ok(gpus) = self.backend.gpus() else { return };
        let layout = NodeLayout {
            gpus: gpus.iter().map(|g| g.layout()).collect(),
        };
        if !same_gres(&parse_node_gres(&n.gres), &layout) {
            return; // Slurm has not caught up with the GPUs: not ours to claim yet.
        }
        let text = PublishedLayout(layout).encode();
        if n.extra != text {
            if let Err(e) = self.slurm.set_node_extra(&self.settings.node, &text) {
                log::warn!("{}: publishing the layout: {e}", self.settings.node);
            }
        }
    }

    /// Writes gres.conf for what the GPUs hold, trying [`GRES_CONF_TRIES`] times: the GPUs
    /// already hold `target` here, so a transient read error (an NVML timeout) must not leave
    /// them with a gres.conf and a Slurm registration of the old layout. Found by
    /// tests/cluster/faults.rs (one failed read of the GPUs there).
    ///
    /// # Errors
    /// Every try failed; the text says that the GPUs hold `target` and gres.conf does not.
    fn write_gres_conf(&self, target: &NodeLayout) -> Result<String> {
        let path = &self.settings.paths.gres_conf;
        let mut tries = 0;
        loop {
            tries += 1;
            match dynmig_gpu::gres_conf::write_for(self.backend.as_ref(), path) {
                Ok(gres) => return Ok(gres),
                Err(e) if tries < GRES_CONF_TRIES => {
                    log::warn!("{}: writing {} (try {tries}): {e:#}", self.settings.node, path.display());
                    std::thread::sleep(Duration::from_millis(300));
                }
                Err(e) => {
                    return Err(anyhow!(
                        "the GPUs hold {target} but {} could not be rewritten ({tries} tries; it still describes the old layout): {e:#}",
                        path.display()
                    ))
                }
            }
        }
    }

    /// Applies `target`, every step idempotent and journalled.
    ///
    /// # Errors
    /// A backend refusal or a busy instance in the way, gres.conf not written, re-registration
    /// failed, or Slurm not taking the node back in time.
    pub fn apply(&mut self, target: &NodeLayout) -> Result<()> {
        self.apply_timed(target, false, None)
    }

    /// [`Agent::apply`], timing each step ([`StepTimes`]). `drained`: the caller has just
    /// seen the node drained for `target` (so it cannot already be back with it: the Register
    /// step need not ask Slurm again); `idle_wait`: how long the node was seen drained with
    /// jobs before.
    fn apply_timed(&mut self, target: &NodeLayout, drained: bool, idle_wait: Option<Duration>) -> Result<()> {
        let s = self.settings.clone();
        let started = Instant::now();
        let mut times = StepTimes::default();
        if let Some(w) = idle_wait {
            times.add("idle_wait", w);
        }
        let mut journal = Journal {
            target: target.clone(),
            step: JournalStep::Instances,
            started: dynmig_host::clock::now_secs().max(0) as u64,
        };
        self.save_journal(&journal)?;
        self.events
            .append(&self.event(EventKind::ApplyStart).layout(target).encode());
        self.metrics.apply_started();
        log::info!("{}: applying {target}", s.node);

        let t = Instant::now();
        let mut owned = Ownership::load(&s.paths.owned_instances())?;
        let ops = apply_transition(self.backend.as_mut(), s.model, target, &mut owned)?;
        times.add("instances", t.elapsed());

        journal.step = JournalStep::GresConf;
        self.save_journal(&journal)?;
        let t = Instant::now();
        let gres = self.write_gres_conf(target)?;
        times.add("gres_conf", t.elapsed());

        journal.step = JournalStep::Register;
        self.save_journal(&journal)?;
        let already = !drained
            && self
                .slurm
                .node(&s.node)?
                .is_some_and(|n| !n.is_drain() && same_gres(&parse_node_gres(&n.gres), target));
        if !already {
            self.reregister_timed(&s.node, &gres, &mut times)?;
        }

        journal.step = JournalStep::Wait;
        self.save_journal(&journal)?;
        let t = Instant::now();
        let until = t + s.register_timeout;
        // When the node's daemon was seen gone (killed during its registration).
        let mut gone_since: Option<Instant> = None;
        let mut again = 0;
        // Time spent registering again within the wait (counted in its own steps).
        let mut inside = Duration::ZERO;
        let back_at = loop {
            let running = self.reregister.daemon_running();
            if let Some(n) = self.slurm.node(&s.node)? {
                let back = !n.is_drain() && !n.is_down() && same_gres(&parse_node_gres(&n.gres), target);
                // Running before the read and still after it: a daemon killed while Slurm
                // answered is not taken for the one that registered.
                if back && running != Some(false) && self.reregister.daemon_running() != Some(false) {
                    break dynmig_host::clock::now_secs_f64();
                }
            }
            // Gone for a while (its pid file may name the old daemon for a moment after a
            // start): start it again, as the Register step does. Found by
            // tests/cluster/faults.rs: a slurmd killed before it registered left the node
            // deleted from Slurm, and the apply failed after register_timeout with no node
            // to drain.
            if running == Some(false) {
                let since = *gone_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= DAEMON_GONE_GRACE && again < REREGISTER_AGAIN {
                    again += 1;
                    gone_since = None;
                    log::warn!(
                        "{}: slurmd is gone before the node came back; registering again ({again})",
                        s.node
                    );
                    let r = Instant::now();
                    self.reregister_timed(&s.node, &gres, &mut times)?;
                    inside += r.elapsed();
                }
            } else {
                gone_since = None;
            }
            if Instant::now() > until {
                bail!(
                    "node {} did not come back with GRES {gres} within {:?}",
                    s.node,
                    s.register_timeout
                );
            }
            std::thread::sleep(REGISTER_POLL);
        };
        times.add("registration", t.elapsed().saturating_sub(inside));
        let in_service = started.elapsed();
        let t = Instant::now();
        self.slurm
            .set_node_extra(&s.node, &PublishedLayout(target.clone()).encode())
            .map_err(|e| anyhow!("publishing the layout: {e}"))?;
        self.points.reach("published");
        remove_if_present(&s.paths.journal())?;
        times.add("publish", t.elapsed());
        self.metrics.apply_finished(in_service);
        self.metrics.steps(&times);
        log::info!(
            "{}: {target} in service after {:.3} s; {}",
            s.node,
            in_service.as_secs_f64(),
            times.encode()
        );
        // Stamped when Slurm showed the node back: that is when it serves again (publishing
        // the layout for the controller comes after, its time is the `publish` step).
        let mut ev = self.event(EventKind::Applied).layout(target).detail(&format!(
            "{ops} instance operations, {:.2} s; {}",
            in_service.as_secs_f64(),
            times.encode()
        ));
        ev.time = back_at;
        self.events.append(&ev.encode());
        self.last_steps = Some(times);
        self.serving_gres = Some(gres);
        self.slurmd_dead_since = None;
        Ok(())
    }

    /// Starts the node's slurmd again when the one this agent started (by an apply) died
    /// without being stopped: its pid file still names it, but no live slurmd holds that pid
    /// (SIGKILL, a crash) for [`DAEMON_GONE_GRACE`]. A slurmd stopped on purpose (SIGTERM:
    /// `systemctl stop`, `scontrol shutdown`) removes its pid file and is left stopped. The
    /// agent started that slurmd itself (`slurmd -Z`, outside any systemd unit), so nothing
    /// else would: Slurm would mark the node not responding and requeue what it sent there.
    /// Found by tests/cluster/faults.rs on 26.05 (CI, 2026-11-29): a slurmd killed right
    /// after it registered left the node down.
    ///
    /// Reads no Slurm while the daemon lives (a look at `/proc`); `None` when there was
    /// nothing to do, else whether starting it again worked. Never during an apply (the
    /// journal's Wait step has its own check).
    pub fn keep_slurmd(&mut self) -> Option<Result<()>> {
        let gres = self.serving_gres.clone()?;
        if self.reregister.daemon_running() != Some(false) || self.settings.paths.journal().exists() {
            self.slurmd_dead_since = None;
            return None;
        }
        let since = *self.slurmd_dead_since.get_or_insert_with(Instant::now);
        if since.elapsed() < DAEMON_GONE_GRACE {
            return None;
        }
        self.slurmd_dead_since = None;
        let node = self.settings.node.clone();
        log::warn!("{node}: the slurmd this agent started died (its pid file names no live slurmd); starting it again with {gres}");
        let r = self
            .reregister
            .reregister(self.slurm.as_ref(), &node, &gres, &mut |_| {});
        let detail = match &r {
            Ok(()) => format!("slurmd died; started again with {gres}"),
            Err(e) => format!("slurmd died; starting it again failed: {e:#}"),
        };
        self.events
            .append(&self.event(EventKind::SlurmdRestarted).detail(&detail).encode());
        Some(r)
    }

    /// Re-registers the node ([`Reregister`]), adding the time up to each `register:*` point to
    /// its step in `times`.
    fn reregister_timed(&mut self, node: &str, gres: &str, times: &mut StepTimes) -> Result<()> {
        let points = &mut self.points;
        let mut last = Instant::now();
        let mut marks: Vec<(&'static str, Duration)> = Vec::new();
        let r = self.reregister.reregister(self.slurm.as_ref(), node, gres, &mut |p| {
            let step = match p {
                "register:stopped" => Some("slurmd_stop"),
                "register:deleted" => Some("delete"),
                "register:started" => Some("slurmd_start"),
                _ => None,
            };
            if let Some(step) = step {
                marks.push((step, last.elapsed()));
                last = Instant::now();
            }
            points.reach(p);
        });
        for (step, d) in marks {
            times.add(step, d);
        }
        r
    }
}

/// An exclusive lock on the agent's lock file, held while the agent runs: a second agent of
/// the same node refuses to start.
pub struct InstanceLock {
    _file: std::fs::File,
}

impl InstanceLock {
    /// Takes the lock at `path`.
    ///
    /// # Errors
    /// Another process holds it, or the file cannot be opened.
    pub fn take(path: &std::path::Path) -> Result<Self> {
        match dynmig_host::fs::try_lock_file(path).with_context(|| format!("cannot open {}", path.display()))? {
            Some(f) => Ok(Self { _file: f }),
            None => bail!("another agent of this node runs (it holds {})", path.display()),
        }
    }
}

/// What the daemon asks of [`run_forever`] between two looks at the node: flags its signal
/// handlers set, and what to do on a reload.
pub struct Control<'a> {
    /// Set (SIGTERM, SIGINT): finish the current step, remove the pid file and the waiting
    /// marker, and return.
    pub stop: &'a AtomicBool,
    /// Set (SIGHUP): call `reload` before the next look.
    pub reload: &'a AtomicBool,
    /// Reloads the config into the agent (or keeps it, saying why).
    pub on_reload: &'a mut dyn FnMut(&mut Agent),
}

/// Where [`run_forever`] takes the controller's wake-ups.
pub enum WakeOn {
    /// `[agent] wake_port` on every address of the host ([`dynmig_host::wake::Listener::bind_any`]),
    /// bound after the single-instance lock is taken.
    Port(u16),
    /// A listener the caller bound (tests: an ephemeral port on loopback, known before the
    /// agent starts).
    Listener(dynmig_host::wake::Listener),
}

/// Runs the agent until `control.stop` is set: takes the single-instance lock, writes its pid
/// file, serves its metrics on `metrics_listen` when given, and looks at its node in Slurm at
/// once when woken by SIGUSR1 (the Epilog sends it when a job ends on the node while the
/// agent's waiting marker is there: while the node runs jobs).
///
/// With `wake_listen` ([`WakeOn`]: `[agent] wake_port`, [`dynmig_host::wake`]) it also looks when the
/// controller wakes it after draining the node (at most once a [`dynmig_host::wake::MIN_GAP`]),
/// every [`WAITING_LOOK`] while its node is drained for it and jobs still run, and otherwise every
/// [`dynmig_host::wake::FALLBACK_LOOK`]; it samples the GPUs' power every `poll` either way.
/// Without it, it looks every `poll` ([`Agent::next_look`]: more often while its node is idle
/// or has just freed, so that it sees a drain soon). A step under way (an apply: journalled, bounded by `register_timeout`)
/// is finished before it stops; a stopped agent leaves the journal for the next one to
/// resume.
///
/// # Errors
/// Another agent runs, the metrics address cannot be bound, or the pid file or signal
/// handler cannot be set up.
pub fn run_forever(
    agent: &mut Agent,
    metrics_listen: Option<std::net::SocketAddr>,
    wake_listen: Option<WakeOn>,
    control: Control<'_>,
) -> Result<()> {
    let paths = agent.settings.paths.clone();
    std::fs::create_dir_all(&paths.state_dir)?;
    let _lock = InstanceLock::take(&paths.agent_lock())?;
    let _metrics = match metrics_listen {
        Some(addr) => Some(dynmig_host::metrics::serve(addr, agent.metrics.registry(), "agent")?),
        None => None,
    };
    // A port that cannot be bound leaves the agent polling as without wake-ups: the node
    // keeps working, and the log says why it costs slurmctld more.
    let wake = wake_listen.and_then(|on| match on {
        WakeOn::Listener(l) => Some(l),
        WakeOn::Port(port) => match dynmig_host::wake::Listener::bind_any(port) {
            Ok(l) => Some(l),
            Err(e) => {
                log::warn!(
                    "{}: [agent] wake_port: cannot listen on port {port} ({e}); polling the node instead",
                    agent.settings.node
                );
                None
            }
        },
    });
    agent.woken_by_controller = wake.is_some();
    let woken = std::sync::Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGUSR1, woken.clone())?;
    crate::pidfile::write_own(&paths.agent_pid())?;
    let mut woke_at: Option<Instant> = None;
    let mut last_look: Option<Instant> = None;
    let mut waiting = false;
    let mut waiting_backfill = false;
    // A controller's wake-up counts once MIN_GAP has passed since the last look.
    let wake_due = |last_look: Option<Instant>| {
        wake.as_ref()
            .is_some_and(|w| w.pending() && last_look.is_none_or(|t| t.elapsed() >= dynmig_host::wake::MIN_GAP))
    };
    let signalled = |last_look: Option<Instant>| {
        woken.load(Ordering::SeqCst)
            || control.stop.load(Ordering::SeqCst)
            || control.reload.load(Ordering::SeqCst)
            || wake_due(last_look)
    };
    loop {
        if control.stop.load(Ordering::SeqCst) {
            remove_if_present(&paths.agent_pid())?;
            remove_if_present(&paths.waiting_marker())?;
            log::info!("{}: stopped", agent.settings.node);
            return Ok(());
        }
        if control.reload.swap(false, Ordering::SeqCst) {
            (control.on_reload)(agent);
        }
        let node = agent.settings.node.clone();
        if woken.load(Ordering::SeqCst) {
            woke_at = Some(Instant::now());
        }
        // An Epilog's wake-up while other GPU jobs of this node still run (the energy
        // ledger: the Prolog adds each job, the Epilog removes it before it wakes the agent)
        // cannot find the node free: no read. At a few jobs' ends a second on a drained
        // node, those reads were most of the agents' RPCs in the queue campaign.
        if woken.load(Ordering::SeqCst) && gpu_jobs_left(&paths.state_dir) {
            woken.store(false, Ordering::SeqCst);
        }
        // With wake-ups, slurmctld is asked only when there may be something to see.
        let look = match &wake {
            None => true,
            Some(w) => {
                let by_controller = wake_due(last_look);
                if by_controller {
                    w.take();
                    log::info!("{node}: woken by the controller");
                }
                let every = if waiting_backfill {
                    agent.settings.poll
                } else if waiting {
                    WAITING_LOOK
                } else {
                    dynmig_host::wake::FALLBACK_LOOK
                };
                by_controller || woken.load(Ordering::SeqCst) || last_look.is_none_or(|t| t.elapsed() >= every)
            }
        };
        let mut step = if look {
            last_look = Some(Instant::now());
            agent.step()
        } else {
            Ok(Step::Nothing)
        };
        // After a wake-up the last job may still be completing (the Epilog wakes the agent
        // before it exits, and slurmctld frees the node after): look again soon, less often
        // each time (200 ms doubling up to 3.2 s, for 15 s), since other jobs may still run
        // there for hours: every 50 ms it was up to 300 reads of the node per job's end.
        let fast_until = Instant::now() + Duration::from_secs(15);
        let mut gap = Duration::from_millis(200);
        while matches!(step, Ok(Step::WaitingForJobs))
            && Instant::now() < fast_until
            && woken.load(Ordering::SeqCst)
            && !control.stop.load(Ordering::SeqCst)
        {
            std::thread::sleep(gap);
            gap = (gap * 2).min(Duration::from_millis(3200));
            step = agent.step();
        }
        woken.store(false, Ordering::SeqCst);
        if look {
            waiting = matches!(step, Ok(Step::WaitingForJobs));
            waiting_backfill = matches!(step, Ok(Step::WaitingForBackfill));
        }
        if let Some(Err(e)) = agent.keep_slurmd() {
            log::error!("{node}: {e:#}");
        }
        // Energy per job: charge this poll's power to the jobs on each GPU.
        let max_dt = 2.0 * agent.settings.poll.as_secs_f64() + 1.0;
        match dynmig_gpu::energy::sample_node(agent.backend.as_ref(), &paths.state_dir, max_dt) {
            Ok(sample) => {
                let jobs = dynmig_gpu::energy::Ledger::in_dir(&paths.state_dir)
                    .jobs()
                    .unwrap_or_default();
                agent.metrics.sampled(&sample, &jobs);
            }
            Err(e) => log::warn!("{node}: power sample: {e}"),
        }
        match step {
            Ok(Step::Applied(t)) => log::info!("{node}: applied {t}"),
            Ok(Step::Failed(why)) => log::error!("{node}: repartition failed: {why}"),
            Ok(_) => {}
            Err(e) => log::error!("{node}: {e:#}"),
        }
        // Soon after a job's end (a wake-up, or the node seen free of jobs) the controller may
        // drain the node: look every FAST_POLL for a while, so that the apply starts at once.
        let until = Instant::now()
            + if wake.is_some() {
                agent.settings.poll
            } else {
                agent.next_look(woke_at)
            };
        while Instant::now() < until && !signalled(last_look) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_epilogs_wake_up_is_worth_a_read_only_once_no_gpu_job_is_left_in_the_ledger() {
        let d = tempfile::tempdir().unwrap();
        assert!(!gpu_jobs_left(d.path()), "no ledger: no job");
        let ledger = dynmig_gpu::energy::Ledger::in_dir(d.path());
        ledger.job_started(7, &[(0, 1)]).unwrap();
        ledger.job_started(8, &[(0, 2)]).unwrap();
        ledger.finish_job(7).unwrap();
        assert!(gpu_jobs_left(d.path()), "job 8 still runs: the node cannot be free");
        ledger.finish_job(8).unwrap();
        assert!(!gpu_jobs_left(d.path()), "the last GPU job ended: read the node");
    }
}
