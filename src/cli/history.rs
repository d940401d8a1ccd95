//! `dynmig history serve | show | flush` (docs/history.md): the history service on the
//! daemon harness, and the administrator's and the Epilog's commands.

use super::load_config;
use anyhow::{anyhow, Result};
use clap::Subcommand;
use dynmig_core::config::{Config, HistoryStore};
use dynmig_node::paths::NodePaths;
use dynmig_slurm::SlurmCommands;
use std::path::{Path, PathBuf};

/// `dynmig history ...`.
#[derive(Subcommand)]
pub enum HistoryCmd {
    /// Receive records from the nodes into SQLite and keep the snapshot (controller host).
    Serve {
        /// addr:port [default: [history] listen].
        #[arg(long)]
        listen: Option<String>,
        /// munged socket [default: slurm.conf AuthInfo=socket=..., else munge's default].
        #[arg(long)]
        socket: Option<PathBuf>,
    },
    /// Show records, oldest first.
    Show {
        /// Only this user (name or uid).
        #[arg(long)]
        user: Option<String>,
        /// Only this job name.
        #[arg(long)]
        name: Option<String>,
        /// At most this many (the latest).
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Deliver a node's spooled records now: to the history server, or with `[history] store = "slurmdbd"` into Slurm's accounting.
    Flush {
        /// Node name.
        #[arg(long)]
        node: String,
    },
}

/// `dynmig history ...` with the config `explicit` names ([`load_config`]).
///
/// # Errors
/// The config is refused, or the command fails (see each).
pub fn run(explicit: Option<&Path>, cmd: HistoryCmd) -> Result<()> {
    let (config, source) = load_config(explicit)?;
    match cmd {
        HistoryCmd::Serve { listen, socket } => serve(&config, source.as_deref(), listen, socket),
        HistoryCmd::Show {
            user,
            name,
            limit,
            json,
        } => {
            let store = dynmig_history::stores::open(&config, true)?;
            print!(
                "{}",
                dynmig_history::service::show_records(&*store, user.as_deref(), name.as_deref(), limit, json)?
            );
            Ok(())
        }
        HistoryCmd::Flush { node } => flush(&config, &node),
    }
}

/// `dynmig history serve`: the history service (or, with `[history] store = "slurmdbd"`, the
/// snapshot kept from Slurm's accounting) until SIGTERM/SIGINT; `source` is the config's file
/// (a SIGHUP reads it again).
///
/// # Errors
/// No address, or the service cannot start ([`dynmig_history::service::serve`]).
fn serve(config: &Config, source: Option<&Path>, listen: Option<String>, socket: Option<PathBuf>) -> Result<()> {
    super::logging::apply_config_level(config.log.level);
    let p = &config.paths;
    let (limits, retention) = dynmig_history::service::limits_of(&config.history);
    let reload = || super::signals::reload(source, |c| Ok(c.estimator)).map(|(_, e)| e);
    if config.history.store == HistoryStore::Slurmdbd {
        let h = &config.history;
        return Ok(dynmig_history::accounting::serve(
            &p.sacct,
            h.sacct_window,
            h.sacct_interval,
            retention,
            &p.history_snapshot,
            &config.estimator,
            &reload,
        )?);
    }
    let listen = listen
        .or_else(|| config.history.listen.clone())
        .ok_or_else(|| anyhow!("no address: give --listen or set [history] listen"))?;
    let socket = socket.or_else(|| dynmig_history::auth::munge_socket(None));
    let slurm = SlurmCommands::from_config(config);
    Ok(dynmig_history::service::serve(
        &listen,
        config.history.metrics_listen,
        socket,
        &p.history_db,
        &p.history_snapshot,
        &config.estimator,
        retention,
        limits,
        &reload,
        &|ids| super::history_names::run_names(&slurm, ids),
    )?)
}

/// `dynmig history flush`: delivers `node`'s spool to the history server, or into Slurm's
/// accounting with `[history] store = "slurmdbd"`, and prints what became of it.
///
/// # Errors
/// No `[history] server` (for the history server).
fn flush(config: &Config, node: &str) -> Result<()> {
    let spool = NodePaths::of(config, node).history_spool;
    let budget = dynmig_history::service::EPILOG_FLUSH_BUDGET;
    let f = dynmig_history::stores::deliver(config, &spool, None, budget)
        .ok_or_else(|| anyhow!("no [history] server in the config"))?;
    println!(
        "delivered {}, refused {}, pending {}",
        f.delivered, f.refused, f.pending
    );
    Ok(())
}
