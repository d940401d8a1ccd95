//! The daemons' config reload on SIGHUP (docs/architecture.md "Operations"); the flags the
//! signals set are [`dynmig_host::signals::Signals`], looked at by the daemon harness
//! ([`dynmig_host::daemon`]).

use crate::load_config;
use anyhow::Result;
use dynmig_core::config::Config;
use std::path::Path;

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
            crate::logging::apply_config_level(config.log.level);
            log::info!("config reloaded from {}", path.display());
            Some((config, t))
        }
        Err(e) => {
            log::error!("{e:#}; config not reloaded, keeping the one in use");
            None
        }
    }
}
