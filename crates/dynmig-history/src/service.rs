//! The commands `dynmig history serve | show | flush`, taking plain settings: the binary reads
//! its config and calls these.

use crate::auth::Munge;
use crate::record::{cut, JobRecord};
use crate::store::{Retention, Store};
use crate::transport::{self, CheckRate, ConnectionLimits, Flushed, Server, ServerSettings};
use crate::Error;
use crate::HistoryStore;
use dynmig_core::estimate::EstimatorConfig;
use dynmig_core::size::format_size;
use dynmig_host::daemon::{Daemon, Harness, Signals};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Time the Epilog gives [`flush_spool`]: Slurm kills an Epilog that runs past
/// `PrologEpilogTimeout` (slurm.conf(5)), and a node's spool may hold many records after an
/// outage; what is left waits for the next Epilog or `dynmig history flush`.
pub const EPILOG_FLUSH_BUDGET: Duration = Duration::from_secs(20);

/// The connection limits and the retention that `[history]` sets (docs/config.md):
/// `max_connections`, `connections_per_address`, `checks_per_minute`, `check_burst`,
/// `max_records` and `max_records_per_user`; the rest as [`ConnectionLimits::default`] and
/// [`Retention::default`].
pub fn limits_of(h: &dynmig_core::config::HistoryConfig) -> (ConnectionLimits, Retention) {
    let limits = ConnectionLimits {
        max_connections: h.max_connections.max(1) as usize,
        max_per_address: h.connections_per_address.max(1) as usize,
        checks: CheckRate {
            per_minute: h.checks_per_minute.max(1),
            burst: h.check_burst.max(1),
        },
        ..ConnectionLimits::default()
    };
    let retention = Retention {
        max_records: u64::from(h.max_records.max(1)),
        max_per_user: u64::from(h.max_records_per_user.max(1)),
        ..Retention::default()
    };
    (limits, retention)
}

/// `dynmig history serve`: listens on `listen_addr` (`host:port`), checks credentials with
/// munge on `munge_socket` (`None`: munge's default), stores records in the database
/// `db_path` (created 0600) and keeps the snapshot `snapshot_path` (0600), keeping what
/// `retention` allows and serving connections within `limits` ([`limits_of`] reads both from
/// the config); serves its metrics on `metrics_listen` when given. On SIGHUP it calls
/// `reload` (which reads the config again, or keeps the old one and says why) and uses the
/// estimator settings it returns, rewriting the snapshot with them. Runs until SIGTERM or
/// SIGINT, then finishes the connections in progress, writes a pending snapshot and returns.
/// Every [`crate::naming::NAME_EVERY`] it names the runs recorded without a job name through
/// `namer` ([`Server::name_runs`]).
///
/// # Errors
/// The database, the snapshot, the address or the metrics address cannot be opened, or the
/// signal handlers cannot be installed.
#[allow(clippy::too_many_arguments)]
pub fn serve(
    listen_addr: &str,
    metrics_listen: Option<std::net::SocketAddr>,
    munge_socket: Option<PathBuf>,
    db_path: &Path,
    snapshot_path: &Path,
    estimator: &EstimatorConfig,
    retention: Retention,
    limits: ConnectionLimits,
    reload: &(dyn Fn() -> Option<EstimatorConfig> + Sync),
    namer: crate::naming::Namer<'_>,
) -> Result<(), Error> {
    let mut settings = ServerSettings::new(snapshot_path.to_path_buf(), *estimator);
    settings.retention = retention;
    settings.limits = limits;
    let server = Server::new(Store::open(db_path)?, Box::new(Munge::new(munge_socket)), settings)?;
    let listener = TcpListener::bind(listen_addr).map_err(|source| Error::Listen {
        addr: cut(listen_addr),
        source,
    })?;
    let mut harness = Harness::install().map_err(|source| Error::Listen {
        addr: format!("{listen_addr} (signal handler)"),
        source,
    })?;
    harness
        .serve_metrics(metrics_listen, server.metrics().registry(), "history")
        .map_err(Error::Metrics)?;
    log::info!("listening on {listen_addr}, database {}", db_path.display());
    let stop = &harness.signals().stop;
    std::thread::scope(|s| {
        // The harness's loop beside the connections: naming, and the reloads.
        s.spawn(|| {
            harness.run(&mut Upkeep {
                server: &server,
                namer,
                reload,
                last_naming: None,
            })
        });
        let r = server.serve(&listener, stop);
        // The upkeep's loop ends with the stop flag; a failed serve must end it too.
        stop.store(true, Ordering::SeqCst);
        r
    })?;
    log::info!("stopped");
    Ok(())
}

/// What [`serve`] does beside the connections, on the daemon harness: names the runs
/// recorded without a job name every [`crate::naming::NAME_EVERY`], and takes new estimator
/// settings on SIGHUP.
struct Upkeep<'a> {
    server: &'a Server,
    namer: crate::naming::Namer<'a>,
    reload: &'a (dyn Fn() -> Option<EstimatorConfig> + Sync),
    last_naming: Option<Instant>,
}

impl Daemon for Upkeep<'_> {
    type Error = Error;

    fn step(&mut self, _: &Signals) -> Result<(), Error> {
        if self
            .last_naming
            .is_some_and(|t| t.elapsed() < crate::naming::NAME_EVERY)
        {
            return Ok(());
        }
        self.last_naming = Some(Instant::now());
        match self.server.name_runs(self.namer, crate::now())? {
            0 => {}
            n => log::debug!("named {n} recorded runs from Slurm"),
        }
        Ok(())
    }

    fn failed(&mut self, e: Error) -> Result<(), Error> {
        log::warn!("{e}; asked again in {:?}", crate::naming::NAME_EVERY);
        Ok(())
    }

    fn reload(&mut self) {
        if let Some(e) = (self.reload)() {
            if let Err(err) = self.server.set_estimator(e) {
                log::error!("snapshot after a reload: {err}");
            }
        }
    }

    fn next_wait(&mut self) -> Duration {
        self.last_naming.map_or(Duration::ZERO, |t| {
            crate::naming::NAME_EVERY.saturating_sub(t.elapsed())
        })
    }
}

/// `dynmig history show`: the last `limit` records of `db_path` (of `user`, a name or uid,
/// and `job_name` when given), as a table ([`render`]) or JSON ([`render_json`])
/// ([`show_records`] of the database opened read-only).
///
/// # Errors
/// There is no database, or it cannot be read.
pub fn show(
    db_path: &Path,
    user: Option<&str>,
    job_name: Option<&str>,
    limit: usize,
    json: bool,
) -> Result<String, Error> {
    show_records(&Store::open_read_only(db_path)?, user, job_name, limit, json)
}

/// `dynmig history show` on any store ([`crate::stores::open`] picks it from the
/// config): `store`'s last `limit` records (of `user`, a name or uid, and `job_name` when
/// given), oldest first, as a table ([`render`]) or JSON ([`render_json`]).
///
/// # Errors
/// The store cannot be read ([`HistoryStore::list`]).
pub fn show_records(
    store: &dyn HistoryStore,
    user: Option<&str>,
    job_name: Option<&str>,
    limit: usize,
    json: bool,
) -> Result<String, Error> {
    let records = store.list(user, job_name, limit)?;
    Ok(if json { render_json(&records) } else { render(&records) })
}

/// `dynmig history flush`: delivers the spool `spool_dir` to `server` (`host:port`), sealing
/// with munge on `munge_socket`, for at most `budget` (e.g. [`EPILOG_FLUSH_BUDGET`]).
pub fn flush_spool(spool_dir: &Path, server: &str, munge_socket: Option<PathBuf>, budget: Duration) -> Flushed {
    transport::flush(spool_dir, server, &Munge::new(munge_socket), Instant::now() + budget)
}

/// Text for a terminal: control characters (a job name may hold escape sequences) become `?`.
fn printable(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { '?' } else { c }).collect()
}

/// The records as a table, one line each, with a header; sizes in binary units.
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
            printable(&r.node),
            printable(&r.user),
            printable(&r.job_name),
            printable(&r.profile),
            format_size(r.estimate_bytes),
            printable(&r.source),
            format_size(r.peak_bytes),
            r.exit_status,
            if r.oom { "yes" } else { "no" }
        );
    }
    out
}

/// The records as a pretty-printed JSON array (the record's fields, no version), with a final
/// newline.
pub fn render_json(records: &[JobRecord]) -> String {
    // Serialising plain structs of strings and numbers cannot fail.
    serde_json::to_string_pretty(records).unwrap_or_else(|_| "[]".into()) + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_neutralises_escape_sequences_in_job_names() {
        let mut r = crate::record::tests::sample();
        r.job_name = "x\u{1b}[2Jy".into();
        let t = render(&[r]);
        assert!(!t.contains('\u{1b}'), "{t:?}");
        assert!(t.contains("x?[2Jy"), "{t}");
        assert_eq!(t.lines().count(), 2);
        assert!(t.contains("10.0GiB"), "{t}");
    }

    const MINIMAL: &str = "version = 1\n[[node_group]]\nname = \"g\"\nnodes = [\"a1\"]\ngpu_model = \"A100-40GB\"\ngpus = 1\nbackend = \"nvml\"\n";

    #[test]
    fn the_history_limits_come_from_the_config_with_defaults() {
        let c = dynmig_core::config::parse_config(MINIMAL).unwrap();
        let (limits, retention) = limits_of(&c.history);
        assert_eq!(limits, ConnectionLimits::default());
        assert_eq!(retention, Retention::default());
        let text = format!(
            "{MINIMAL}[history]\nmax_connections = 128\nconnections_per_address = 2\nchecks_per_minute = 6\ncheck_burst = 3\nmax_records = 5000\nmax_records_per_user = 500\n"
        );
        let (limits, retention) = limits_of(&dynmig_core::config::parse_config(&text).unwrap().history);
        assert_eq!((limits.max_connections, limits.max_per_address), (128, 2));
        assert_eq!(
            limits.checks,
            CheckRate {
                per_minute: 6,
                burst: 3
            }
        );
        assert_eq!((retention.max_records, retention.max_per_user), (5000, 500));
        for (bad, key, allowed) in [
            ("checks_per_minute = 0", "history.checks_per_minute", "1 to 60000"),
            ("check_burst = -1", "history.check_burst", "1 to 100000"),
            (
                "connections_per_address = 5000",
                "history.connections_per_address",
                "1 to 4096",
            ),
            (
                "max_records_per_user = 0",
                "history.max_records_per_user",
                "1 to 10000000",
            ),
        ] {
            let e = dynmig_core::config::parse_config(&format!("{MINIMAL}[history]\n{bad}\n")).unwrap_err();
            assert_eq!(e.key, key, "{e}");
            assert!(e.to_string().contains(allowed), "{e}");
        }
        let e = dynmig_core::config::parse_config(&format!("{MINIMAL}[history]\ncheck_burst = \"30\"\n")).unwrap_err();
        assert!(e.to_string().contains("an integer from 1 to 100000"), "{e}");
    }

    #[test]
    fn render_json_round_trips() {
        let r = crate::record::tests::sample();
        let back: Vec<JobRecord> = serde_json::from_str(&render_json(std::slice::from_ref(&r))).unwrap();
        assert_eq!(back, [r]);
    }

    #[test]
    fn show_lists_what_the_store_holds() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("h.db");
        Store::open(&db)
            .unwrap()
            .insert(&crate::record::tests::sample())
            .unwrap();
        let t = show(&db, Some("alice"), None, 10, false).unwrap();
        assert!(t.contains("alice") && t.contains("gpu-n1.cluster"), "{t}");
        assert_eq!(show(&db, Some("bob"), None, 10, false).unwrap().lines().count(), 1);
        let e = show(&dir.path().join("none.db"), None, None, 10, false).unwrap_err();
        assert!(e.to_string().contains("no history database"), "{e}");
    }
}
