//! `dynmig history ...`: serve, show, flush, snapshot.

use super::store::Store;
use super::transport::{self, Server};
use super::{auth, JobRecord};
use crate::context::Ctx;
use anyhow::{anyhow, Context, Result};
use dynmig_core::size::format_size;
use std::net::TcpListener;
use std::path::PathBuf;

/// `dynmig history serve`: listens on `listen` (else `[history] listen`), decodes with the
/// munged socket `socket` (else slurm.conf's AuthInfo).
///
/// # Errors
/// No address, or the database or port cannot be opened.
pub fn serve(ctx: &Ctx, listen: Option<&str>, socket: Option<PathBuf>) -> Result<()> {
    let addr = listen
        .map(str::to_string)
        .or_else(|| ctx.config.history.listen.clone())
        .ok_or_else(|| anyhow!("no address to listen on: give --listen or set [history] listen/server"))?;
    let server = Server {
        store: Store::open(&ctx.config.paths.history_db)?,
        socket: socket.or_else(|| auth::munge_socket(None)),
        snapshot: ctx.config.paths.history_snapshot.clone(),
        estimator: ctx.config.estimator,
    };
    server.store.write_snapshot(&server.estimator, &server.snapshot)?;
    let listener = TcpListener::bind(&addr).with_context(|| format!("cannot listen on {addr}"))?;
    eprintln!(
        "dynmig history serve: listening on {addr}, database {}",
        ctx.config.paths.history_db.display()
    );
    server.serve(listener)
}

/// The records as a table.
pub fn render(records: &[JobRecord]) -> String {
    let mut out = format!(
        "{:>8} {:>3} {:<6} {:<10} {:<16} {:<8} {:>9} {:<11} {:>9} {:>5} {:<3}\n",
        "job", "rs", "node", "user", "name", "profile", "estimate", "source", "peak", "exit", "oom"
    );
    for r in records {
        out += &format!(
            "{:>8} {:>3} {:<6} {:<10} {:<16} {:<8} {:>9} {:<11} {:>9} {:>5} {:<3}\n",
            r.job_id,
            r.restart,
            r.node,
            r.user,
            r.job_name,
            r.profile,
            format_size(r.estimate_bytes),
            r.source,
            format_size(r.peak_bytes),
            r.exit_status,
            if r.oom { "yes" } else { "no" }
        );
    }
    out
}

/// `dynmig history show`.
///
/// # Errors
/// The database cannot be opened.
pub fn show(ctx: &Ctx, user: Option<&str>, name: Option<&str>, limit: usize, json: bool) -> Result<String> {
    let records = Store::open(&ctx.config.paths.history_db)?.list(user, name, limit)?;
    if json {
        return Ok(serde_json::to_string_pretty(&records)? + "\n");
    }
    Ok(render(&records))
}

/// `dynmig history flush --node N`: delivers the node's spool.
///
/// # Errors
/// No server configured.
pub fn flush(ctx: &Ctx, node: &str) -> Result<transport::Flushed> {
    let server = ctx
        .config
        .history
        .server
        .as_deref()
        .ok_or_else(|| anyhow!("no [history] server in the config"))?;
    Ok(transport::flush(
        &crate::oom::spool_dir(ctx, node),
        server,
        auth::munge_socket(None).as_deref(),
    ))
}
