//! The agent's daemon loop ([`run_forever`]): its lock, wake-ups, looks and power samples.

use super::*;
use dynmig_host::daemon::{Daemon, Signals};

/// Whether the node's energy ledger lists a job (a GPU job whose Prolog ran and whose Epilog
/// has not); a ledger that cannot be read counts as none.
fn gpu_jobs_left(state_dir: &std::path::Path) -> bool {
    dynmig_gpu::energy::Ledger::in_dir(state_dir)
        .jobs()
        .is_ok_and(|jobs| !jobs.is_empty())
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

/// Where [`run_forever`] takes the controller's wake-ups.
pub enum WakeOn {
    /// `[agent] wake_port` on every address of the host ([`dynmig_host::wake::Listener::bind_any`]),
    /// bound after the single-instance lock is taken.
    Port(u16),
    /// A listener the caller bound (tests: an ephemeral port on loopback, known before the
    /// agent starts).
    Listener(dynmig_host::wake::Listener),
}

/// Runs the agent on `harness` ([`dynmig_host::daemon`]) until a stop is asked for: takes the
/// single-instance lock, writes its pid file, serves its metrics on `metrics_listen` when
/// given, calls `on_reload` on SIGHUP (which reloads the config into the agent, or keeps it,
/// saying why), and looks at its node in Slurm at once when woken by SIGUSR1 (the Epilog sends
/// it when a job ends on the node while the agent's waiting marker is there: while the node
/// runs jobs).
///
/// With `wake_listen` ([`WakeOn`]: `[agent] wake_port`, [`dynmig_host::wake`]) it also looks when the
/// controller wakes it after draining the node (at most once a [`dynmig_host::wake::MIN_GAP`]),
/// every [`WAITING_LOOK`] while its node is drained for it and jobs still run, and otherwise every
/// [`dynmig_host::wake::FALLBACK_LOOK`]; it samples the GPUs' power every `poll` either way.
/// Without it, it looks every `poll` ([`Agent::next_look`]: more often while its node is idle
/// or has just freed, so that it sees a drain soon). A step under way (an apply: journalled, bounded by `register_timeout`)
/// is finished before it stops; a stopped agent removes its pid file and waiting marker and
/// leaves the journal for the next one to resume.
///
/// # Errors
/// Another agent runs, the metrics address cannot be bound, or the pid file or the SIGUSR1
/// handler cannot be set up.
pub fn run_forever(
    agent: &mut Agent,
    mut harness: dynmig_host::daemon::Harness,
    metrics_listen: Option<std::net::SocketAddr>,
    wake_listen: Option<WakeOn>,
    on_reload: &mut dyn FnMut(&mut Agent),
) -> Result<()> {
    let paths = agent.settings.paths.clone();
    std::fs::create_dir_all(&paths.state_dir)?;
    let _lock = InstanceLock::take(&paths.agent_lock())?;
    harness.serve_metrics(metrics_listen, agent.metrics.registry(), "agent")?;
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
    harness.run(&mut Looks {
        agent,
        paths,
        wake,
        woken,
        on_reload,
        woke_at: None,
        last_look: None,
        waiting: false,
        waiting_backfill: false,
    })
}

/// The agent between two looks at its node: [`run_forever`]'s [`Daemon`].
struct Looks<'a> {
    agent: &'a mut Agent,
    paths: NodePaths,
    /// The controller's wake-ups, when taken.
    wake: Option<dynmig_host::wake::Listener>,
    /// Set by SIGUSR1 (an Epilog).
    woken: std::sync::Arc<AtomicBool>,
    on_reload: &'a mut dyn FnMut(&mut Agent),
    /// The last SIGUSR1 seen.
    woke_at: Option<Instant>,
    last_look: Option<Instant>,
    /// The last look found the node drained for the agent, jobs still running.
    waiting: bool,
    /// The last look found the node reserved for the agent, jobs still running.
    waiting_backfill: bool,
}

impl Looks<'_> {
    /// Whether a controller's wake-up counts: once MIN_GAP has passed since the last look.
    fn wake_due(&self) -> bool {
        self.wake
            .as_ref()
            .is_some_and(|w| w.pending() && self.last_look.is_none_or(|t| t.elapsed() >= dynmig_host::wake::MIN_GAP))
    }
}

impl Daemon for Looks<'_> {
    type Error = anyhow::Error;

    fn step(&mut self, signals: &Signals) -> Result<()> {
        let node = self.agent.settings.node.clone();
        let woken = &self.woken;
        if woken.load(Ordering::SeqCst) {
            self.woke_at = Some(Instant::now());
        }
        // An Epilog's wake-up while other GPU jobs of this node still run (the energy
        // ledger: the Prolog adds each job, the Epilog removes it before it wakes the agent)
        // cannot find the node free: no read. At a few jobs' ends a second on a drained
        // node, those reads were most of the agents' RPCs in the queue campaign.
        if woken.load(Ordering::SeqCst) && gpu_jobs_left(&self.paths.state_dir) {
            woken.store(false, Ordering::SeqCst);
        }
        // With wake-ups, slurmctld is asked only when there may be something to see.
        let look = match &self.wake {
            None => true,
            Some(w) => {
                let by_controller = self.wake_due();
                if by_controller {
                    w.take();
                    log::info!("{node}: woken by the controller");
                }
                let every = if self.waiting_backfill {
                    self.agent.settings.poll
                } else if self.waiting {
                    WAITING_LOOK
                } else {
                    dynmig_host::wake::FALLBACK_LOOK
                };
                by_controller || woken.load(Ordering::SeqCst) || self.last_look.is_none_or(|t| t.elapsed() >= every)
            }
        };
        let mut step = if look {
            self.last_look = Some(Instant::now());
            self.agent.step()
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
            && !signals.stopping()
        {
            std::thread::sleep(gap);
            gap = (gap * 2).min(Duration::from_millis(3200));
            step = self.agent.step();
        }
        woken.store(false, Ordering::SeqCst);
        if look {
            self.waiting = matches!(step, Ok(Step::WaitingForJobs));
            self.waiting_backfill = matches!(step, Ok(Step::WaitingForBackfill));
        }
        if let Some(Err(e)) = self.agent.keep_slurmd() {
            log::error!("{node}: {e:#}");
        }
        // Energy per job: charge this poll's power to the jobs on each GPU.
        let max_dt = 2.0 * self.agent.settings.poll.as_secs_f64() + 1.0;
        match dynmig_gpu::energy::sample_node(self.agent.backend.as_ref(), &self.paths.state_dir, max_dt) {
            Ok(sample) => {
                let jobs = dynmig_gpu::energy::Ledger::in_dir(&self.paths.state_dir)
                    .jobs()
                    .unwrap_or_default();
                self.agent.metrics.sampled(&sample, &jobs);
            }
            Err(e) => log::warn!("{node}: power sample: {e}"),
        }
        match step? {
            Step::Applied(t) => log::info!("{node}: applied {t}"),
            Step::Failed(why) => log::error!("{node}: repartition failed: {why}"),
            _ => {}
        }
        Ok(())
    }

    fn failed(&mut self, e: anyhow::Error) -> Result<()> {
        log::error!("{}: {e:#}", self.agent.settings.node);
        Ok(())
    }

    fn reload(&mut self) {
        (self.on_reload)(self.agent);
    }

    fn next_wait(&mut self) -> Duration {
        // Soon after a job's end (a wake-up, or the node seen free of jobs) the controller may
        // drain the node: look every FAST_POLL for a while, so that the apply starts at once.
        if self.wake.is_some() {
            self.agent.settings.poll
        } else {
            self.agent.next_look(self.woke_at)
        }
    }

    fn woken(&mut self) -> bool {
        self.woken.load(Ordering::SeqCst) || self.wake_due()
    }

    fn stopped(&mut self) -> Result<()> {
        remove_if_present(&self.paths.agent_pid())?;
        remove_if_present(&self.paths.waiting_marker())?;
        log::info!("{}: stopped", self.agent.settings.node);
        Ok(())
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
