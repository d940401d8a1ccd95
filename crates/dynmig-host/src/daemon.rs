//! The one daemon harness of the controller, the node agent and the history service
//! (docs/architecture.md, "Operations"): the signal handlers ([`Signals`]: SIGTERM/SIGINT stop,
//! SIGHUP reloads), the metrics endpoint ([`crate::metrics::serve`]), the loop and the orderly
//! stop. A daemon plugs in as a [`Daemon`]; [`Harness::run`] drives it:
//!
//! 1. a stop asked for: [`Daemon::stopped`] (the daemon's clean-up and its last log line), and
//!    the loop returns;
//! 2. a reload asked for: [`Daemon::reload`] (the daemon reads its config again, or keeps the
//!    one it runs with and says why);
//! 3. [`Daemon::step`]; an error goes to [`Daemon::failed`], which logs it and goes on, or
//!    ends the loop with it;
//! 4. a wait of [`Daemon::next_wait`], cut short by a stop, a reload, or the daemon's own
//!    wake-up ([`Daemon::woken`]), each seen within [`POLL`].
//!
//! A step under way is never cut: the signals only set flags, looked at between two steps (a
//! long step may look at [`Signals::stopping`] itself). The logger is the binary's
//! (`dynmig::cli::logging`, installed before the daemon starts).

use crate::metrics::{prometheus_client::registry::Registry, MetricsServer};
pub use crate::signals::Signals;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the wait between two steps looks at the signals' flags and [`Daemon::woken`].
pub const POLL: Duration = Duration::from_millis(20);

/// A daemon driven by [`Harness::run`].
pub trait Daemon {
    /// What a step may fail with.
    type Error;

    /// One step of the daemon (a controller's pass, an agent's look at its node). `signals`
    /// lets a long step see a stop asked for while it runs.
    ///
    /// # Errors
    /// The step failed; [`Daemon::failed`] decides what follows.
    fn step(&mut self, signals: &Signals) -> Result<(), Self::Error>;

    /// A step failed: log it the daemon's way and return `Ok` to go on, or return the error
    /// to end the loop with it.
    ///
    /// # Errors
    /// The error that ends the daemon.
    fn failed(&mut self, error: Self::Error) -> Result<(), Self::Error>;

    /// SIGHUP: read the config again and take it, or keep the one in use and say why.
    fn reload(&mut self);

    /// How long to wait after the step just done before the next one.
    fn next_wait(&mut self) -> Duration;

    /// Whether something of the daemon's own (a wake-up from another process) asks for the
    /// next step before [`Daemon::next_wait`] is over; looked at every [`POLL`].
    fn woken(&mut self) -> bool {
        false
    }

    /// A stop was asked for: clean up and log the daemon's last line.
    ///
    /// # Errors
    /// The clean-up failed (the daemon exits with it).
    fn stopped(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

/// The signal handlers and the metrics endpoint of a daemon, and its loop ([`Harness::run`]).
/// Dropping it stops the metrics endpoint.
#[derive(Debug)]
pub struct Harness {
    signals: Signals,
    metrics: Option<MetricsServer>,
}

impl Harness {
    /// Installs the handlers of SIGTERM, SIGINT (stop) and SIGHUP (reload).
    ///
    /// # Errors
    /// A handler cannot be installed.
    pub fn install() -> std::io::Result<Self> {
        Ok(Self::with_signals(Signals::install()?))
    }

    /// A harness on flags the caller sets (tests, or a daemon run on a thread of a process
    /// that installed the handlers already).
    pub fn with_signals(signals: Signals) -> Self {
        Self { signals, metrics: None }
    }

    /// The stop and reload flags.
    pub fn signals(&self) -> &Signals {
        &self.signals
    }

    /// Serves `registry` at `GET /metrics` on `addr` until the harness is dropped; `None`:
    /// no endpoint. `daemon` names the endpoint's thread.
    ///
    /// # Errors
    /// The address cannot be bound ([`crate::metrics::serve`]; the message names it).
    pub fn serve_metrics(
        &mut self,
        addr: Option<SocketAddr>,
        registry: Arc<Registry>,
        daemon: &str,
    ) -> std::io::Result<()> {
        if let Some(addr) = addr {
            self.metrics = Some(crate::metrics::serve(addr, registry, daemon)?);
        }
        Ok(())
    }

    /// The address the metrics endpoint listens on, if it runs.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(MetricsServer::local_addr)
    }

    /// Runs `daemon` until a stop is asked for (module docs): returns what
    /// [`Daemon::stopped`] returns, or the error [`Daemon::failed`] ended the loop with.
    ///
    /// # Errors
    /// As above.
    pub fn run<D: Daemon + ?Sized>(&self, daemon: &mut D) -> Result<(), D::Error> {
        loop {
            if self.signals.stopping() {
                return daemon.stopped();
            }
            if self.signals.take_reload() {
                daemon.reload();
            }
            if let Err(e) = daemon.step(&self.signals) {
                daemon.failed(e)?;
            }
            let wait = daemon.next_wait();
            self.wait(wait, daemon);
        }
    }

    /// Waits `d`, or less: until a stop or a reload is asked for or `daemon` is woken.
    pub fn wait<D: Daemon + ?Sized>(&self, d: Duration, daemon: &mut D) {
        let until = Instant::now() + d;
        loop {
            let now = Instant::now();
            if now >= until || self.signals.stopping() || self.signals.reload.load(Ordering::SeqCst) || daemon.woken() {
                return;
            }
            std::thread::sleep((until - now).min(POLL));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts its steps; fails the second; asks for a stop after the fourth.
    struct Counter {
        steps: u32,
        reloads: u32,
        failures: u32,
        stopped: bool,
        wake: bool,
    }

    impl Daemon for Counter {
        type Error = String;
        fn step(&mut self, signals: &Signals) -> Result<(), String> {
            self.steps += 1;
            if self.steps == 4 {
                signals.stop.store(true, Ordering::SeqCst);
            }
            if self.steps == 2 {
                return Err("second".into());
            }
            Ok(())
        }
        fn failed(&mut self, _: String) -> Result<(), String> {
            self.failures += 1;
            Ok(())
        }
        fn reload(&mut self) {
            self.reloads += 1;
        }
        fn next_wait(&mut self) -> Duration {
            Duration::from_secs(60)
        }
        fn woken(&mut self) -> bool {
            self.wake
        }
        fn stopped(&mut self) -> Result<(), String> {
            self.stopped = true;
            Ok(())
        }
    }

    #[test]
    fn a_wake_up_cuts_the_wait_a_failed_step_goes_on_and_a_stop_ends_the_loop() {
        let h = Harness::with_signals(Signals {
            stop: Arc::default(),
            reload: Arc::default(),
        });
        h.signals().reload.store(true, Ordering::SeqCst);
        let mut d = Counter {
            steps: 0,
            reloads: 0,
            failures: 0,
            stopped: false,
            wake: true,
        };
        let started = Instant::now();
        h.run(&mut d).unwrap();
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
        assert_eq!((d.steps, d.reloads, d.failures, d.stopped), (4, 1, 1, true));
    }

    #[test]
    fn an_error_the_daemon_keeps_ends_the_loop_with_it() {
        struct Once;
        impl Daemon for Once {
            type Error = String;
            fn step(&mut self, _: &Signals) -> Result<(), String> {
                Err("no slurm".into())
            }
            fn failed(&mut self, e: String) -> Result<(), String> {
                Err(e)
            }
            fn reload(&mut self) {}
            fn next_wait(&mut self) -> Duration {
                Duration::ZERO
            }
        }
        let h = Harness::with_signals(Signals {
            stop: Arc::default(),
            reload: Arc::default(),
        });
        assert_eq!(h.run(&mut Once), Err("no slurm".to_string()));
    }

    #[test]
    fn a_reload_cuts_the_wait() {
        let h = Harness::with_signals(Signals {
            stop: Arc::default(),
            reload: Arc::default(),
        });
        let mut d = Counter {
            steps: 0,
            reloads: 0,
            failures: 0,
            stopped: false,
            wake: false,
        };
        let flag = Arc::clone(&h.signals().reload);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            flag.store(true, Ordering::SeqCst);
        });
        let started = Instant::now();
        h.wait(Duration::from_secs(60), &mut d);
        t.join().unwrap();
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
