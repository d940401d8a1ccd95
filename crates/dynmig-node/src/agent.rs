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
//! Test hook: at each named point below the agent calls [`GpuBackend::checkpoint`]; the NVML
//! backend does nothing there, the simulated backend carries out a point fault of its fault
//! plan (`dynmig_gpu::FaultPlan`: SIGKILL, or a pause the test releases). The points, in
//! order: `journal:instances`, `journal:gres_conf`, `journal:register`, then within the
//! re-registration `register:stopped` (slurmd stopped), `register:deleted` (node deleted
//! from Slurm), `register:started` (the new slurmd daemonised), then `journal:wait`, and
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
use anyhow::{anyhow, bail, Context, Result};
use dynmig_core::geometry::{GpuModel, NodeLayout};
use dynmig_core::protocol::event::{Event, EventKind};
use dynmig_core::protocol::intent::NodeIntent;
use dynmig_core::protocol::journal::{Journal, JournalStep};
use dynmig_core::protocol::layout::PublishedLayout;
use dynmig_gpu::{apply_transition, GpuBackend};
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
    last_refusal: Option<String>,
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
        Self {
            metrics: AgentMetrics::new(&settings.node),
            settings,
            backend,
            slurm,
            reregister,
            events,
            last_refusal: None,
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
        self.backend.checkpoint(step);
        Ok(())
    }

    /// Looks at the node once and acts (module docs).
    ///
    /// # Errors
    /// Slurm cannot be read. Failures of the apply itself are [`Step::Failed`] after the node
    /// is marked.
    pub fn step(&mut self) -> Result<Step> {
        let node = self.slurm.node(&self.settings.node)?;
        let step = match self.load_journal() {
            OnDisk::Corrupt(why) => {
                let moved = self.settings.paths.journal().with_extension("json.corrupt");
                let _ = std::fs::rename(self.settings.paths.journal(), &moved);
                let why = format!("unreadable journal, moved to {}: {why}", moved.display());
                return Ok(self.fail(why));
            }
            OnDisk::Journal(j) => match self.may_resume(&j, node.as_ref()) {
                Ok(()) => self.run_apply(&j.target),
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
                        if n.has_jobs() {
                            let _ = write_atomically(&self.settings.paths.waiting_marker(), b"", 0o644);
                            Step::WaitingForJobs
                        } else {
                            self.run_apply(&target)
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
        if !matches!(step, Step::WaitingForJobs) {
            let _ = remove_if_present(&self.settings.paths.waiting_marker());
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

    fn run_apply(&mut self, target: &NodeLayout) -> Step {
        match self.apply(target) {
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
        let s = self.settings.clone();
        let started = Instant::now();
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

        let ops = apply_transition(self.backend.as_mut(), s.model, target)?;

        journal.step = JournalStep::GresConf;
        self.save_journal(&journal)?;
        let gres = self.write_gres_conf(target)?;

        journal.step = JournalStep::Register;
        self.save_journal(&journal)?;
        let registered = self.slurm.node(&s.node)?;
        let already = registered
            .as_ref()
            .is_some_and(|n| !n.is_drain() && same_gres(&parse_node_gres(&n.gres), target));
        if !already {
            let backend = &mut self.backend;
            self.reregister
                .reregister(self.slurm.as_ref(), &s.node, &gres, &mut |p| backend.checkpoint(p))?;
        }

        journal.step = JournalStep::Wait;
        self.save_journal(&journal)?;
        let until = Instant::now() + s.register_timeout;
        // When the node's daemon was seen gone (killed during its registration).
        let mut gone_since: Option<Instant> = None;
        let mut again = 0;
        loop {
            let running = self.reregister.daemon_running();
            if let Some(n) = self.slurm.node(&s.node)? {
                let back = !n.is_drain() && !n.is_down() && same_gres(&parse_node_gres(&n.gres), target);
                if back && running != Some(false) {
                    break;
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
                    let backend = &mut self.backend;
                    self.reregister
                        .reregister(self.slurm.as_ref(), &s.node, &gres, &mut |p| backend.checkpoint(p))?;
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
            std::thread::sleep(Duration::from_millis(100));
        }
        self.slurm
            .set_node_extra(&s.node, &PublishedLayout(target.clone()).encode())
            .map_err(|e| anyhow!("publishing the layout: {e}"))?;
        self.backend.checkpoint("published");
        remove_if_present(&s.paths.journal())?;
        self.metrics.apply_finished(started.elapsed());
        self.events.append(
            &self
                .event(EventKind::Applied)
                .layout(target)
                .detail(&format!(
                    "{ops} instance operations, {:.2} s",
                    started.elapsed().as_secs_f64()
                ))
                .encode(),
        );
        Ok(())
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
        use std::os::unix::fs::OpenOptionsExt;
        use std::os::unix::io::AsRawFd;
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        // SAFETY: the descriptor is open for the call.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            bail!("another agent of this node runs (it holds {})", path.display());
        }
        Ok(Self { _file: f })
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

/// Runs the agent until `control.stop` is set: takes the single-instance lock, writes its pid
/// file, serves its metrics on `metrics_listen` when given, looks at the node every `poll`,
/// and at once when woken by SIGUSR1 (the Epilog sends it when a job ends on a node the
/// agent waits for). A step under way (an apply: journalled, bounded by `register_timeout`)
/// is finished before it stops; a stopped agent leaves the journal for the next one to
/// resume.
///
/// # Errors
/// Another agent runs, the metrics address cannot be bound, or the pid file or signal
/// handler cannot be set up.
pub fn run_forever(
    agent: &mut Agent,
    metrics_listen: Option<std::net::SocketAddr>,
    control: Control<'_>,
) -> Result<()> {
    let paths = agent.settings.paths.clone();
    std::fs::create_dir_all(&paths.state_dir)?;
    let _lock = InstanceLock::take(&paths.agent_lock())?;
    let _metrics = match metrics_listen {
        Some(addr) => Some(dynmig_host::metrics::serve(addr, agent.metrics.registry(), "agent")?),
        None => None,
    };
    let woken = std::sync::Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGUSR1, woken.clone())?;
    crate::pidfile::write_own(&paths.agent_pid())?;
    let signalled =
        || woken.load(Ordering::SeqCst) || control.stop.load(Ordering::SeqCst) || control.reload.load(Ordering::SeqCst);
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
        let mut step = agent.step();
        // After a wake-up the last job may still be completing: look again quickly for a while.
        let fast_until = Instant::now() + Duration::from_secs(15);
        while matches!(step, Ok(Step::WaitingForJobs))
            && Instant::now() < fast_until
            && woken.load(Ordering::SeqCst)
            && !control.stop.load(Ordering::SeqCst)
        {
            std::thread::sleep(Duration::from_millis(50));
            step = agent.step();
        }
        woken.store(false, Ordering::SeqCst);
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
        let until = Instant::now() + agent.settings.poll;
        while Instant::now() < until && !signalled() {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
