//! dynmig-history: what each GPU job needed, recorded on the nodes and kept in SQLite on the
//! controller host, so that the estimator learns from it (docs/history.md).
//!
//! Path of a record: the Epilog builds a [`JobRecord`] and writes it into the node's spool
//! ([`spool::put`]); it then delivers every spooled record to the history server
//! ([`transport::flush`]), each sealed afresh with munge ([`auth::Munge`], a [`auth::Sealer`]).
//! The server ([`transport::Server`], started by [`service::serve`]) checks the credential
//! ([`auth::Verifier`]: valid under the cluster's munge key and made by uid 0), decodes the
//! record ([`JobRecord::from_wire`], versioned), stores it ([`store::Store`], one
//! [`HistoryStore`]; Slurm's accounting is the other, [`accounting::Accounting`]), answers, and
//! rebuilds the snapshot that job_submit/dynmig reads on a cadence
//! ([`transport::SnapshotCadence`]), keeping a bounded history ([`store::Retention`]). A record
//! leaves the spool only after the server's `OK`, so nothing is lost while the controller host
//! is down. The server counts what arrives in [`metrics::HistoryMetrics`]. The job's name and
//! dynmig's estimate, which the Epilog does not know, are added by the store ([`naming`]).
//!
//! ```
//! use dynmig_history::{JobRecord, spool};
//! let dir = tempfile::tempdir().unwrap();
//! let record = JobRecord {
//!     job_id: 42, restart: 0, node: "gpu1".into(), uid: 1000, user: "alice".into(),
//!     job_name: "train".into(), profile: "1g.10gb".into(), estimate_bytes: 8 << 30,
//!     source: "mig-mem".into(), peak_bytes: 7 << 30, limit_bytes: 10 << 30,
//!     exit_status: 0, oom: false, end_time: dynmig_history::now(),
//! };
//! let path = spool::put(dir.path(), &record).unwrap();
//! assert!(path.ends_with("42-0-gpu1.json"));
//! assert_eq!(spool::list(dir.path())[0].1, record);
//! assert_eq!(JobRecord::from_wire(&record.to_wire().unwrap()).unwrap(), record);
//! ```
#![deny(missing_docs)]

pub mod accounting;
pub mod auth;
mod error;
pub mod history_store;
pub mod metrics;
pub mod naming;
pub mod record;
pub mod service;
pub mod snapshot;
pub mod spool;
pub mod store;
pub mod stores;
pub mod transport;

pub use error::Error;
pub use history_store::HistoryStore;
pub use record::{JobRecord, RecordError};

/// Seconds since the Unix epoch, now (0 if the clock is before 1970).
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}
