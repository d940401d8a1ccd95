//! One door to the history: the trait [`HistoryStore`], implemented by dynmig's own SQLite
//! database ([`crate::store::Store`], `[history] store = "server"`) and by Slurm's accounting
//! ([`crate::accounting::Accounting`], `store = "slurmdbd"`), chosen once from the config by
//! [`crate::stores::open`].
//!
//! The callers have one code path each: `dynmig history show` lists a store's records
//! ([`crate::service::show_records`]), and the snapshot job_submit/dynmig reads is built and
//! written the same way from either store's past jobs ([`HistoryStore::snapshot`],
//! [`HistoryStore::write_snapshot`], through [`crate::snapshot::build`] and
//! [`crate::snapshot::write`]). What differs stays behind the trait: where a record is put
//! (an SQLite row; the job's SystemComment in slurmdbd) and how the records are read back
//! (SQL; `sacct --json`).

use crate::record::JobRecord;
use crate::Error;
use dynmig_core::estimate::history::{HistorySnapshot, PastJob};
use dynmig_core::estimate::EstimatorConfig;
use std::path::Path;

/// Where the history's records are kept and read back.
pub trait HistoryStore {
    /// Keeps `r`. `Ok(true)`: stored now; `Ok(false)`: this run (job, restart, node) was
    /// stored already and is left as it was (SQLite; slurmdbd's SystemComment replaces a
    /// run's record, and always answers `true`).
    ///
    /// # Errors
    /// The store cannot be written (SQLite errors; sacctmgr fails or does not find the job
    /// within [`crate::accounting::WRITE_BUDGET`]).
    fn put(&self, r: &JobRecord) -> Result<bool, Error>;

    /// The records of `user` (a name or a uid) and `job_name` when given: the newest `limit`,
    /// oldest first.
    ///
    /// # Errors
    /// The store cannot be read (SQLite errors; sacct fails, times out or prints what is not
    /// its JSON).
    fn list(&self, user: Option<&str>, job_name: Option<&str>, limit: usize) -> Result<Vec<JobRecord>, Error>;

    /// The runs the snapshot summarises, oldest first; an out-of-memory run counts with its
    /// instance's memory (its peak at least the instance's bytes).
    ///
    /// # Errors
    /// As [`HistoryStore::list`].
    fn past_jobs(&self) -> Result<Vec<PastJob>, Error>;

    /// The per-(user, job name) snapshot of [`HistoryStore::past_jobs`] under the estimator
    /// settings, at most [`crate::snapshot::MAX_SNAPSHOT_BYTES`] of text
    /// ([`crate::snapshot::build`]).
    ///
    /// # Errors
    /// As [`HistoryStore::past_jobs`].
    fn snapshot(&self, cfg: &EstimatorConfig) -> Result<HistorySnapshot, Error> {
        Ok(crate::snapshot::build(self.past_jobs()?, cfg))
    }

    /// Writes [`HistoryStore::snapshot`] to `path` ([`crate::snapshot::write`]: atomically,
    /// mode 0600, or 0640 and `reader_group`'s). Returns the number of entries.
    ///
    /// # Errors
    /// As [`HistoryStore::past_jobs`], or the file cannot be written.
    fn write_snapshot(&self, cfg: &EstimatorConfig, path: &Path, reader_group: Option<u32>) -> Result<usize, Error> {
        let snap = self.snapshot(cfg)?;
        crate::snapshot::write(&snap, path, reader_group)?;
        Ok(snap.len())
    }
}
