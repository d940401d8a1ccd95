//! The history database: SQLite (rusqlite, SQLite bundled) on the controller host, one row per
//! run of a job, bounded by a [`Retention`]: the [`HistoryStore`] of `[history] store =
//! "server"`, from which the snapshot file job_submit/dynmig reads is built.
//!
//! The database file is created with mode 0600 and set to 0600 each time it is opened (SQLite
//! gives its journal the database's mode); the snapshot is written with
//! [`dynmig_host::fs::write_atomically`], mode 0600 (or 0640 with a reader group).

use crate::history_store::HistoryStore;
use crate::record::JobRecord;
use crate::Error;
use dynmig_core::estimate::history::PastJob;
use rusqlite::{params, Connection, OpenFlags};
use std::fs::OpenOptions;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Mode of the database file.
pub const DB_MODE: u32 = 0o600;

/// How much history is kept. Records beyond a bound are deleted when the server rebuilds the
/// snapshot ([`Store::prune`]); the estimator looks at the most recent `history_window` runs
/// per (user, job name) anyway.
///
/// The bounds are per user (uid) first: a user's own records beyond `max_per_user` go, their
/// oldest first; then, while more than `max_records` are left, the user who holds the most
/// loses their oldest. So one user's flood of short jobs evicts only that user's history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Most records kept in all. Must be at least 1.
    pub max_records: u64,
    /// Most records kept of one user (the newest by arrival). Must be at least 1.
    pub max_per_user: u64,
    /// Oldest record kept, by its `end_time`.
    pub max_age: Duration,
}

impl Default for Retention {
    /// 200,000 records, 20,000 per user and 365 days: a snapshot rebuild then takes 0.2 to
    /// 0.5 s (`cargo bench -p dynmig-history` on a 2-core machine).
    fn default() -> Self {
        Self {
            max_records: 200_000,
            max_per_user: 20_000,
            max_age: Duration::from_secs(365 * 24 * 3600),
        }
    }
}

/// How many records each user keeps so that `counts` (records per user) lose `excess` in all,
/// taken from the users who hold the most: every user above a level is cut to it (some to
/// one more, so that exactly `excess` go). Returns (user's index, records kept) of the users
/// cut only.
pub(crate) fn water_fill(counts: &[u64], excess: u64) -> Vec<(usize, u64)> {
    let over = |level: u64| counts.iter().map(|&c| c.saturating_sub(level)).sum::<u64>();
    if excess == 0 {
        return Vec::new();
    }
    // The highest level at which cutting removes at least `excess`.
    let (mut lo, mut hi) = (0u64, counts.iter().copied().max().unwrap_or(0));
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if over(mid) >= excess {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let level = lo;
    // Cutting to `level` removes `over(level) - excess` too many: that many users keep one more.
    let mut spare = over(level).saturating_sub(excess);
    let mut cut = Vec::new();
    for (i, &c) in counts.iter().enumerate() {
        if c > level {
            let keep = if spare > 0 {
                spare -= 1;
                level + 1
            } else {
                level
            };
            if keep < c {
                cut.push((i, keep));
            }
        }
    }
    cut
}

/// An open history database.
pub struct Store {
    conn: Connection,
    path: PathBuf,
}

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY,
    job_id INTEGER NOT NULL, restart INTEGER NOT NULL, node TEXT NOT NULL,
    uid INTEGER NOT NULL, user TEXT NOT NULL, job_name TEXT NOT NULL,
    profile TEXT NOT NULL, estimate_bytes INTEGER NOT NULL, source TEXT NOT NULL,
    peak_bytes INTEGER NOT NULL, limit_bytes INTEGER NOT NULL,
    exit_status INTEGER NOT NULL, oom INTEGER NOT NULL, end_time INTEGER NOT NULL,
    UNIQUE (job_id, restart, node));
CREATE INDEX IF NOT EXISTS jobs_user_name ON jobs (uid, job_name);
CREATE INDEX IF NOT EXISTS jobs_end_time ON jobs (end_time);
CREATE INDEX IF NOT EXISTS jobs_uid ON jobs (uid);";

impl Store {
    /// Opens (creating if needed, mode 0600) the database at `path`; its folder is created if
    /// missing. An existing file is set to mode 0600 too. A symbolic link at `path` is refused.
    ///
    /// # Errors
    /// The file cannot be created or opened, or is not a dynmig history database.
    pub fn open(path: &Path) -> Result<Self, Error> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(Error::io("create folder", dir))?;
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(DB_MODE)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(Error::io("open", path))?;
        file.set_permissions(std::fs::Permissions::from_mode(DB_MODE))
            .map_err(Error::io("set the mode of", path))?;
        drop(file);
        let db = |source| Error::Db {
            path: path.to_path_buf(),
            source,
        };
        let conn = Connection::open(path).map_err(db)?;
        conn.busy_timeout(Duration::from_secs(5)).map_err(db)?;
        conn.execute_batch(SCHEMA).map_err(db)?;
        Ok(Self {
            conn,
            path: path.to_path_buf(),
        })
    }

    /// Opens an existing database read-only (for listing).
    ///
    /// # Errors
    /// [`Error::NoDatabase`] when there is no file; the file is not a dynmig history database.
    pub fn open_read_only(path: &Path) -> Result<Self, Error> {
        if !path.exists() {
            return Err(Error::NoDatabase {
                path: path.to_path_buf(),
            });
        }
        let db = |source| Error::Db {
            path: path.to_path_buf(),
            source,
        };
        let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).map_err(db)?;
        conn.busy_timeout(Duration::from_secs(5)).map_err(db)?;
        conn.prepare("SELECT job_id FROM jobs LIMIT 0").map_err(db)?;
        Ok(Self {
            conn,
            path: path.to_path_buf(),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn db(&self) -> impl FnOnce(rusqlite::Error) -> Error + '_ {
        |source| Error::Db {
            path: self.path.clone(),
            source,
        }
    }

    /// Stores `r`; returns `false` if a record of the same job, restart and node is already
    /// there (a retried delivery).
    ///
    /// # Errors
    /// SQLite errors.
    pub fn insert(&self, r: &JobRecord) -> Result<bool, Error> {
        let n = self
            .conn
            .execute(
                "INSERT OR IGNORE INTO jobs (job_id, restart, node, uid, user, job_name, profile, estimate_bytes,
                 source, peak_bytes, limit_bytes, exit_status, oom, end_time)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
                params![
                    r.job_id as i64,
                    r.restart,
                    r.node,
                    r.uid,
                    r.user,
                    r.job_name,
                    r.profile,
                    r.estimate_bytes as i64,
                    r.source,
                    r.peak_bytes as i64,
                    r.limit_bytes as i64,
                    r.exit_status,
                    r.oom,
                    r.end_time
                ],
            )
            .map_err(self.db())?;
        Ok(n == 1)
    }

    /// The jobs of runs recorded without a job name (the Epilog's records: docs/history.md,
    /// "Job names") that ended at or after `since` (seconds since the epoch), as
    /// `(job_id, uid)`, oldest first, at most `limit`.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn unnamed(&self, since: i64, limit: usize) -> Result<Vec<(u64, u32)>, Error> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT job_id, uid, MIN(end_time) AS t FROM jobs WHERE job_name = '' AND end_time >= ?1
                 GROUP BY job_id, uid ORDER BY t LIMIT ?2",
            )
            .map_err(self.db())?;
        let rows = stmt
            .query_map(params![since, limit as i64], |row| {
                Ok((row.get::<_, i64>(0)? as u64, row.get::<_, u32>(1)?))
            })
            .map_err(self.db())?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(self.db())?;
        Ok(rows)
    }

    /// Names the unnamed runs of each job of `names` recorded for its uid with the job's name
    /// and dynmig's estimate and its source (from the job's decision record), all in one
    /// transaction (one commit, not one per job: the server's lock is held that long, and
    /// 300 separate commits held it about a second); returns how many runs were named. A run
    /// of another uid is left alone; a job whose name or source is over
    /// [`JobRecord::validate`]'s bounds is skipped and returned in the second list.
    ///
    /// # Errors
    /// SQLite errors (nothing is named then).
    pub fn name_runs(&self, names: &[crate::naming::RunName]) -> Result<(usize, Vec<u64>), Error> {
        let tx = self.conn.unchecked_transaction().map_err(self.db())?;
        let mut named = 0;
        let mut refused = Vec::new();
        {
            let mut stmt = tx
                .prepare_cached(
                    "UPDATE jobs SET job_name = ?1, estimate_bytes = ?2, source = ?3
                     WHERE job_id = ?4 AND uid = ?5 AND job_name = ''",
                )
                .map_err(self.db())?;
            for n in names {
                let Some(uid) = n.uid else { continue };
                if n.name.len() > crate::record::MAX_JOB_NAME_LEN || n.source.len() > crate::record::MAX_TAG_LEN {
                    refused.push(n.job_id);
                    continue;
                }
                named += stmt
                    .execute(params![n.name, n.estimate_bytes as i64, n.source, n.job_id as i64, uid])
                    .map_err(self.db())?;
            }
        }
        tx.commit().map_err(self.db())?;
        Ok((named, refused))
    }

    /// Number of records.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn count(&self) -> Result<u64, Error> {
        self.conn
            .query_row("SELECT COUNT(*) FROM jobs", [], |r| r.get::<_, i64>(0))
            .map(|n| n as u64)
            .map_err(self.db())
    }

    /// Deletes what `retention` does not keep (records older than `max_age`, then per user,
    /// see [`Retention`]), `now` being seconds since the Unix epoch; returns how many records
    /// went.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn prune(&self, retention: &Retention, now: i64) -> Result<usize, Error> {
        let oldest = now.saturating_sub(i64::try_from(retention.max_age.as_secs()).unwrap_or(i64::MAX));
        let by_age = self
            .conn
            .execute("DELETE FROM jobs WHERE end_time < ?1", params![oldest])
            .map_err(self.db())?;
        let mut counts: Vec<(u32, u64)> = {
            let mut stmt = self
                .conn
                .prepare("SELECT uid, COUNT(*) FROM jobs GROUP BY uid")
                .map_err(self.db())?;
            let rows = stmt
                .query_map([], |r| Ok((r.get::<_, u32>(0)?, r.get::<_, i64>(1)? as u64)))
                .map_err(self.db())?;
            rows.collect::<rusqlite::Result<_>>().map_err(self.db())?
        };
        let per_user = retention.max_per_user.max(1);
        let mut cuts: Vec<(u32, u64)> = Vec::new();
        for (uid, n) in &mut counts {
            if *n > per_user {
                cuts.push((*uid, per_user));
                *n = per_user;
            }
        }
        let total: u64 = counts.iter().map(|c| c.1).sum();
        let excess = total.saturating_sub(retention.max_records.max(1));
        let n: Vec<u64> = counts.iter().map(|c| c.1).collect();
        for (i, keep) in water_fill(&n, excess) {
            let uid = counts[i].0;
            match cuts.iter_mut().find(|c| c.0 == uid) {
                Some(c) => c.1 = keep,
                None => cuts.push((uid, keep)),
            }
        }
        let mut by_count = 0;
        for (uid, keep) in cuts {
            let keep = i64::try_from(keep).unwrap_or(i64::MAX);
            by_count += self
                .conn
                .execute(
                    "DELETE FROM jobs WHERE uid = ?1 AND id <= (SELECT id FROM jobs WHERE uid = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)",
                    params![uid, keep],
                )
                .map_err(self.db())?;
        }
        Ok(by_age + by_count)
    }

    /// Records, oldest first; only those of `user` (name or uid) and `job_name` when given,
    /// the last `limit`.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn list(&self, user: Option<&str>, job_name: Option<&str>, limit: usize) -> Result<Vec<JobRecord>, Error> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT job_id, restart, node, uid, user, job_name, profile, estimate_bytes, source, peak_bytes,
                 limit_bytes, exit_status, oom, end_time FROM jobs
                 WHERE (?1 IS NULL OR user = ?1 OR CAST(uid AS TEXT) = ?1) AND (?2 IS NULL OR job_name = ?2)
                 ORDER BY id DESC LIMIT ?3",
            )
            .map_err(self.db())?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt
            .query_map(params![user, job_name, limit], |row| {
                Ok(JobRecord {
                    job_id: row.get::<_, i64>(0)? as u64,
                    restart: row.get(1)?,
                    node: row.get(2)?,
                    uid: row.get(3)?,
                    user: row.get(4)?,
                    job_name: row.get(5)?,
                    profile: row.get(6)?,
                    estimate_bytes: row.get::<_, i64>(7)? as u64,
                    source: row.get(8)?,
                    peak_bytes: row.get::<_, i64>(9)? as u64,
                    limit_bytes: row.get::<_, i64>(10)? as u64,
                    exit_status: row.get(11)?,
                    oom: row.get(12)?,
                    end_time: row.get(13)?,
                })
            })
            .map_err(self.db())?;
        let mut v = rows.collect::<rusqlite::Result<Vec<_>>>().map_err(self.db())?;
        v.reverse();
        Ok(v)
    }
}

/// dynmig's own database as the history's store (`[history] store = "server"`).
impl HistoryStore for Store {
    /// [`Store::insert`].
    fn put(&self, r: &JobRecord) -> Result<bool, Error> {
        self.insert(r)
    }

    /// [`Store::list`].
    fn list(&self, user: Option<&str>, job_name: Option<&str>, limit: usize) -> Result<Vec<JobRecord>, Error> {
        Store::list(self, user, job_name, limit)
    }

    /// Every named run, in the order stored; a run not yet named (the Epilog does not know
    /// the name, [`crate::naming`]) is no estimate's evidence and is left out.
    fn past_jobs(&self) -> Result<Vec<PastJob>, Error> {
        let mut stmt = self
            .conn
            .prepare("SELECT uid, job_name, peak_bytes, limit_bytes, oom FROM jobs WHERE job_name != '' ORDER BY id")
            .map_err(self.db())?;
        let jobs = stmt
            .query_map([], |row| {
                let oom: bool = row.get(4)?;
                let peak = row.get::<_, i64>(2)? as u64;
                let limit = row.get::<_, i64>(3)? as u64;
                Ok(PastJob {
                    uid: row.get(0)?,
                    job_name: row.get(1)?,
                    peak_bytes: if oom { peak.max(limit) } else { peak },
                    oom,
                })
            })
            .map_err(self.db())?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(self.db())?;
        Ok(jobs)
    }
}

#[cfg(test)]
mod tests;
