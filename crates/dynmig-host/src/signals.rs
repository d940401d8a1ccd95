//! The daemons' signals (signal-hook, docs/architecture.md "Operations"): SIGHUP asks for a
//! config reload, SIGTERM and SIGINT for a clean stop. The handlers only set flags; the
//! daemon's loop ([`crate::daemon::Harness`]) looks at them between two steps, so a step under
//! way is never cut.

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

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
    /// A handler cannot be installed (signal-hook's error).
    pub fn install() -> std::io::Result<Self> {
        let s = Self {
            stop: Arc::default(),
            reload: Arc::default(),
        };
        for (sig, flag) in [(SIGTERM, &s.stop), (SIGINT, &s.stop), (SIGHUP, &s.reload)] {
            signal_hook::flag::register(sig, Arc::clone(flag))?;
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
}
