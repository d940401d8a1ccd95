//! dynmig-process: what every dynmig process does at its start and on SIGHUP, shared by the
//! `dynmig` command (its daemons, the node's commands and the administrator's) and the lean
//! `dynmig-controller` binary:
//!
//! - [`load_config`]: the config file (`--config`, `$DYNMIG_CONFIG`, /etc/slurm/dynmig.toml,
//!   or the embedded defaults), read with a size bound;
//! - [`logging`]: the one logger, to journald under systemd, else stderr;
//! - [`signals`]: the config read again on SIGHUP, refused as `dynmig config check` refuses it.
//!
//! The Slurm plugins use none of it: they log through Slurm.
#![deny(missing_docs)]

pub mod logging;
pub mod signals;

use anyhow::{anyhow, Context, Result};
use dynmig_core::config::{parse_config, Config};
use dynmig_host::fs::LineLog;
use std::path::{Path, PathBuf};

/// Environment variable naming the config file.
pub const CONFIG_ENV: &str = "DYNMIG_CONFIG";
/// Where the config is read from when neither `--config` nor [`CONFIG_ENV`] says.
pub const DEFAULT_CONFIG: &str = "/etc/slurm/dynmig.toml";
/// The largest config file read, bytes.
pub const MAX_CONFIG: u64 = 4 << 20;

/// Loads the config: `explicit` path, else `$DYNMIG_CONFIG`, else /etc/slurm/dynmig.toml;
/// if none of these exists and none was named, the embedded defaults. Returns the config and
/// the file it came from (`None`: embedded).
///
/// # Errors
/// A named file that cannot be read (or is over 4 MiB), or any config error (key, line, what
/// is allowed).
pub fn load_config(explicit: Option<&Path>) -> Result<(Config, Option<PathBuf>)> {
    let named = explicit
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os(CONFIG_ENV).map(PathBuf::from));
    let path = match named {
        Some(p) => p,
        None if Path::new(DEFAULT_CONFIG).exists() => PathBuf::from(DEFAULT_CONFIG),
        None => return Ok((Config::default_embedded(), None)),
    };
    let text = dynmig_host::fs::read_text_bounded(&path, MAX_CONFIG)
        .with_context(|| format!("cannot read {}", path.display()))?
        .ok_or_else(|| anyhow!("{} does not exist", path.display()))?;
    let config = parse_config(&text).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    Ok((config, Some(path)))
}

/// The cluster's event log, `<state_dir>/events.jsonl`: the controller, the agents and the
/// Prolog/Epilog append one JSON line per event ([`dynmig_core::protocol::event`]).
pub fn event_log(config: &Config) -> LineLog {
    LineLog::to(config.paths.state_dir.join("events.jsonl"))
}
