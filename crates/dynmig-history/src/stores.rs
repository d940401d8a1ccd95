//! Which store: [`open`] picks the [`HistoryStore`] that `[history] store` names, once, for
//! the callers (`dynmig history show`, `dynmig history serve`); [`deliver`] sends a node's
//! spooled records to that same store, for the Epilog and `dynmig history flush`.

use crate::history_store::HistoryStore;
use crate::transport::Flushed;
use crate::Error;
use dynmig_core::config::{Config, HistoryStore as StoreKind};
use std::path::Path;
use std::time::Duration;

/// The store `[history] store` names: the SQLite database `paths.history_db` (opened
/// read-only with `read_only`, for `dynmig history show`), or Slurm's accounting through
/// `paths.sacct` and `paths.sacctmgr` within `history.sacct_window`, holding what
/// `history.max_records` and `history.max_records_per_user` allow.
///
/// # Errors
/// The SQLite database cannot be opened (or, read-only, does not exist).
pub fn open(config: &Config, read_only: bool) -> Result<Box<dyn HistoryStore>, Error> {
    let p = &config.paths;
    Ok(match config.history.store {
        StoreKind::Slurmdbd => Box::new(
            crate::accounting::Accounting::new(
                &p.sacct,
                config.history.sacct_window,
                crate::service::limits_of(&config.history).1,
            )
            .with_sacctmgr(&p.sacctmgr),
        ),
        StoreKind::Server if read_only => Box::new(crate::store::Store::open_read_only(&p.history_db)?),
        StoreKind::Server => Box::new(crate::store::Store::open(&p.history_db)?),
    })
}

/// Delivers a node's spooled records (`spool_dir`) to the store `[history] store` names:
/// to the history server (`[history] server`, over TCP, each record sealed with munge;
/// within `server_budget`), or into Slurm's accounting (`paths.sacctmgr`, checked with
/// `paths.sacct`; within [`crate::service::EPILOG_FLUSH_BUDGET`], `first` tried first: the
/// record the Epilog just spooled). A record leaves the spool only once the store has it.
/// `None`: the store is the history server and `[history] server` is not set, so the
/// records stay spooled.
pub fn deliver(config: &Config, spool_dir: &Path, first: Option<&Path>, server_budget: Duration) -> Option<Flushed> {
    match config.history.store {
        StoreKind::Slurmdbd => Some(crate::accounting::flush_spool(
            &config.paths.sacctmgr,
            &config.paths.sacct,
            spool_dir,
            first,
            crate::service::EPILOG_FLUSH_BUDGET,
        )),
        StoreKind::Server => config.history.server.as_ref().map(|server| {
            crate::service::flush_spool(spool_dir, server, crate::auth::munge_socket(None), server_budget)
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::JobRecord;
    use dynmig_core::config::{parse_config, EXAMPLE_TOML};
    use dynmig_core::estimate::EstimatorConfig;

    fn run(job: u64, name: &str, peak: u64, oom: bool, end_time: i64) -> JobRecord {
        JobRecord {
            job_id: job,
            end_time,
            job_name: name.into(),
            peak_bytes: peak,
            oom,
            ..crate::record::tests::sample()
        }
    }

    #[test]
    fn the_config_picks_the_store_once_and_both_build_the_same_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = parse_config(EXAMPLE_TOML).unwrap();
        config.paths.history_db = dir.path().join("history.db");
        config.history.store = StoreKind::Server;
        assert!(open(&config, true).is_err(), "show on a missing database");
        let db = open(&config, false).unwrap();
        let runs = [
            run(1, "train", 5 << 30, false, 100),
            run(2, "train", 7 << 30, false, 200),
            run(3, "train", 1 << 30, true, 300),
            run(4, "eval", 2 << 30, false, 400),
        ];
        for r in &runs {
            assert!(db.put(r).unwrap());
        }
        assert!(!db.put(&runs[0]).unwrap(), "the same run twice");
        assert_eq!(db.list(None, Some("train"), 2).unwrap(), runs[1..3].to_vec());
        // Slurm's accounting, holding the same runs, summarises them the same way.
        let cfg = EstimatorConfig::default();
        let from_accounting = crate::accounting::snapshot(&runs, &cfg);
        assert_eq!(db.snapshot(&cfg).unwrap(), from_accounting);
        assert_eq!(from_accounting.lookup(1000, "train").unwrap().ooms, 1);
        let path = dir.path().join("snap.tsv");
        assert_eq!(db.write_snapshot(&cfg, &path, None).unwrap(), 2);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), from_accounting.render());

        config.history.store = StoreKind::Slurmdbd;
        config.paths.sacct = dir.path().join("no-sacct");
        let acct = open(&config, true).unwrap();
        assert!(acct.past_jobs().unwrap().is_empty(), "nothing read yet");
        assert!(acct.list(None, None, 10).is_err(), "sacct cannot run");
    }

    #[test]
    fn a_spool_goes_to_the_store_the_config_names_and_stays_when_it_cannot() {
        let dir = tempfile::tempdir().unwrap();
        let spool = dir.path().join("spool");
        let put = crate::spool::put(&spool, &run(7, "train", 3 << 30, false, 100)).unwrap();
        let mut config = parse_config(EXAMPLE_TOML).unwrap();
        config.history.store = StoreKind::Server;
        config.history.server = None;
        assert!(
            deliver(&config, &spool, Some(&put), Duration::from_secs(1)).is_none(),
            "nowhere to send it"
        );
        // A server nobody listens on: the record is not delivered and stays.
        config.history.server = Some("127.0.0.1:1".into());
        let f = deliver(&config, &spool, Some(&put), Duration::from_secs(1)).unwrap();
        assert_eq!((f.delivered, f.pending + f.refused), (0, 1));
        // Slurm's accounting through an sacctmgr that fails: the record stays too.
        config.history.store = StoreKind::Slurmdbd;
        config.paths.sacctmgr = dir.path().join("no-sacctmgr");
        config.paths.sacct = dir.path().join("no-sacct");
        let f = deliver(&config, &spool, Some(&put), Duration::from_secs(1)).unwrap();
        assert_eq!((f.delivered, f.pending + f.refused), (0, 1));
        assert_eq!(crate::spool::list(&spool).len(), 1, "nothing is lost");
    }
}
