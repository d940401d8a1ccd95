//! The controller daemon (the `dynmig-controller` binary, and `dynmig controller`): the
//! cluster's controller as a [`Daemon`] of the one harness
//! ([`dynmig_host::daemon`]): a pass every `[controller] interval`, the config read again on
//! SIGHUP, a stop between two passes on SIGTERM/SIGINT.

use crate::metrics::ControllerMetrics;
use crate::{managed_nodes, pass, policy_for_release, JobFeed, ManagedNode, PassReport, PassSettings};
use anyhow::{anyhow, Context, Result};
use dynmig_core::config::Config;
use dynmig_core::policy::Policy;
use dynmig_host::daemon::{Daemon, Harness, Signals};
use dynmig_host::fs::LineLog;
use dynmig_process::{event_log, load_config};
use dynmig_slurm::SlurmCommands;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Runs the controller with the config `explicit` names ([`load_config`]): one pass and exit
/// with `once`, else until SIGTERM/SIGINT.
///
/// # Errors
/// The config or the policy is refused, the metrics address cannot be bound, the signal
/// handlers cannot be installed, or (`once`) the pass failed.
pub fn run(explicit: Option<&Path>, once: bool) -> Result<()> {
    let (config, source) = load_config(explicit)?;
    dynmig_process::logging::apply_config_level(config.log.level);
    // Pending jobs follow the guarded default's catalog only where Slurm can change a
    // submitted job's GPU type (23.02.6+); the release is asked once.
    let release = dynmig_slurm::plugin::SlurmVersion::running(&config.paths.scontrol);
    let retype = release.is_some_and(|v| dynmig_core::modify::update_replaces_gpu_request(v.0));
    let policy = policy_for_release(&config, retype).map_err(|e| anyhow!("[policy]: {e}"))?;
    let mut c = Controller {
        slurm: SlurmCommands::from_config(&config),
        managed: managed_nodes(&config),
        events: event_log(&config),
        config,
        source,
        retype,
        policy,
        feed: JobFeed::new(),
        first: true,
        metrics: ControllerMetrics::new(),
        started: Instant::now(),
    };
    let mut harness = Harness::install().context("installing a signal handler")?;
    harness
        .serve_metrics(c.config.controller.metrics_listen, c.metrics.registry(), "controller")
        .context("[controller] metrics_listen")?;
    log::info!(
        "controller started: {} managed nodes, policy {}, every {:?}",
        c.managed.len(),
        c.policy.name(),
        c.config.controller.interval
    );
    if c.policy.catalog().is_some() && !retype {
        log::warn!(
            "Slurm {} cannot change a submitted job's GPU type (SchedMD bug 17184, fixed in 23.02.6): \
             new jobs follow the catalog, pending ones keep their type and no layout leaves it",
            release.map_or_else(|| "of unknown release".to_string(), |v| v.to_string())
        );
    }
    if once {
        return c.step(harness.signals());
    }
    // A pass is never cut: the stop is seen between two (the controller keeps no state of its
    // own beyond what each pass wrote).
    harness.run(&mut c)
}

/// The controller's state between two passes.
struct Controller {
    config: Config,
    /// The config's file, read again on SIGHUP (`None`: the embedded defaults).
    source: Option<PathBuf>,
    /// Whether Slurm can change a submitted job's GPU type (asked once, at the start).
    retype: bool,
    policy: Box<dyn Policy>,
    slurm: SlurmCommands,
    managed: Vec<ManagedNode>,
    events: LineLog,
    feed: JobFeed,
    /// No pass succeeded yet: the next one sweeps what an earlier controller left.
    first: bool,
    metrics: ControllerMetrics,
    /// When the last pass started.
    started: Instant,
}

impl Controller {
    /// Logs a pass that succeeded (one line a pass, and one per change) and wakes the agents
    /// of the nodes it drained.
    fn passed(&self, r: &PassReport, took: Duration) {
        // One line a pass: slurm/bench/queue.sh reads the pass times from it.
        log::info!(
            "pass took {:.3} s: {} jobs listed, {} read, {} left for later passes, {} updated from the listing{}",
            took.as_secs_f64(),
            r.queue.listed,
            r.queue.read,
            r.queue.deferred,
            r.queue.updated,
            if r.queue.whole { " (whole queue)" } else { "" }
        );
        for d in &r.drained {
            log::info!("draining {} to repartition to {}", d.node, d.target);
        }
        dynmig_host::wake::send_all_detached(r.wake.clone(), self.config.agent.wake_port);
        for d in &r.planned {
            log::info!(
                "{} reserved from the end of its jobs, then repartition to {}",
                d.node,
                d.target
            );
        }
        for d in &r.moved {
            log::info!("plan of {} moved to {}", d.node, d.target);
        }
        for n in &r.cancelled {
            log::info!("plan of {n} cancelled");
        }
        for n in &r.timed_out {
            log::warn!("{n}: jobs outlived drain_timeout; repartition dropped");
        }
        for j in &r.retyped {
            log::info!("job {} moved from {} to {} (catalog)", j.job, j.from, j.to);
        }
        log::debug!(
            "pass: pending {:?}, drain waste {} instances",
            r.demand.pending,
            r.held_idle_instances
        );
    }
}

impl Daemon for Controller {
    type Error = anyhow::Error;

    fn step(&mut self, _: &Signals) -> Result<()> {
        let settings = PassSettings {
            sweep: self.first,
            retype: self.retype,
            ..PassSettings::from_config(&self.config, dynmig_host::clock::now_secs())
        };
        self.started = Instant::now();
        let r = pass(
            &self.slurm,
            &self.managed,
            self.policy.as_mut(),
            &mut self.feed,
            &self.events,
            &settings,
        )?;
        self.first = false;
        let took = self.started.elapsed();
        self.metrics.pass_ok(&r, took);
        self.passed(&r, took);
        Ok(())
    }

    fn failed(&mut self, e: anyhow::Error) -> Result<()> {
        self.metrics.pass_failed(self.started.elapsed());
        log::error!("{e}");
        Ok(())
    }

    fn reload(&mut self) {
        // The policy starts afresh with the new config (its limits are in it).
        let retype = self.retype;
        let new = dynmig_process::signals::reload(self.source.as_deref(), |c| {
            policy_for_release(c, retype).map_err(|e| anyhow!("[policy]: {e}"))
        });
        let Some((c, p)) = new else { return };
        if c.controller.metrics_listen != self.config.controller.metrics_listen {
            log::warn!("[controller] metrics_listen changed: it takes effect at the next start");
        }
        self.policy = p;
        self.slurm = SlurmCommands::from_config(&c);
        self.managed = managed_nodes(&c);
        self.events = event_log(&c);
        self.config = c;
        log::info!(
            "controller: {} managed nodes, policy {}, every {:?}",
            self.managed.len(),
            self.policy.name(),
            self.config.controller.interval
        );
    }

    fn next_wait(&mut self) -> Duration {
        self.config.controller.interval
    }

    fn stopped(&mut self) -> Result<()> {
        log::info!("controller stopped");
        Ok(())
    }
}
