//! The daemons' signals (signal-hook, docs/architecture.md "Operations"): SIGHUP reloads the
//! config, SIGTERM and SIGINT stop cleanly. The handlers only set flags; the daemon's loop
//! looks at them between two steps, so a step under way is never cut.

use super::load_config;
use anyhow::{Context, Result};
use dynmig_core::config::Config;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The flags the handlers set.
#[derive(Debug, Clone)]
pub struct Signals {
    /// Set by SIGTERM or SIGINT.
    pub stop: Arc<AtomicBool>,
    /// Set by SIGHUP; cleared by whoever reloads.
    pub reload: Arc<AtomicBool>,
}

impl Signals {
    /// Installs the handlers of SIGTERM, SIGINT and SIGHUP.
    ///
    /// # Errors
    /// A handler cannot be installed.
    pub fn install() -> Result<Self> {
        let s = Self {
            stop: Arc::default(),
            reload: Arc::default(),
        };
        for (sig, flag) in [(SIGTERM, &s.stop), (SIGINT, &s.stop), (SIGHUP, &s.reload)] {
            signal_hook::flag::register(sig, Arc::clone(flag)).context("installing a signal handler")?;
        }
        Ok(s)
    }

    /// Whether a stop was asked for.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Whether a reload was asked for since the last call (clears the request).
    pub fn take_reload(&self) -> bool {
        self.reload.swap(false, Ordering::SeqCst)
    }

    /// Sleeps for `d`, or less when a signal asks for a stop or a reload.
    pub fn sleep(&self, d: Duration) {
        let until = Instant::now() + d;
        while Instant::now() < until && !self.stopping() && !self.reload.load(Ordering::SeqCst) {
            std::thread::sleep((until - Instant::now()).min(Duration::from_millis(20)));
        }
    }
}

/// Reads the config again from `source`, the file the daemon started with, and hands it to
/// `take` (which builds what the daemon needs from it, or refuses it). A config that
/// `dynmig config check` would refuse is refused with the same message; either refusal is
/// logged at error level and `None` is returned: the daemon keeps the config it runs with.
/// An accepted one has its `[log] level` applied (unless `RUST_LOG` is set).
pub fn reload<T>(source: Option<&Path>, take: impl FnOnce(&Config) -> Result<T>) -> Option<(Config, T)> {
    let Some(path) = source else {
        log::warn!("SIGHUP: running on the embedded defaults, there is no config file to read again");
        return None;
    };
    match load_config(Some(path)).and_then(|(c, _)| take(&c).map(|t| (c, t))) {
        Ok((config, t)) => {
            super::logging::apply_config_level(config.log.level);
            log::info!("config reloaded from {}", path.display());
            Some((config, t))
        }
        Err(e) => {
            log::error!("{e:#}; config not reloaded, keeping the one in use");
            None
        }
    }
}
