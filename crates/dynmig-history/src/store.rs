//! The history database: SQLite (rusqlite, SQLite bundled) on the controller host, one row per
//! run of a job, bounded by a [`Retention`], and the snapshot file job_submit/dynmig reads.
//!
//! The database file is created with mode 0600 and set to 0600 each time it is opened (SQLite
//! gives its journal the database's mode); the snapshot is written with
//! [`dynmig_host::fs::write_atomically`], mode 0600 (or 0640 with a reader group).

use crate::record::JobRecord;
use crate::Error;
use dynmig_core::estimate::history::{HistorySnapshot, PastJob};
use dynmig_core::estimate::EstimatorConfig;
use rusqlite::{params, Connection, OpenFlags};
use std::fs::OpenOptions;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Mode of the database file.
pub const DB_MODE: u32 = 0o600;

/// How much history is kept. Records beyond either bound are deleted when the server
/// rebuilds the snapshot; the estimator looks at the most recent `history_window` runs per
/// (user, job name) anyway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Most records kept (the newest by arrival). Must be at least 1.
    pub max_records: u64,
    /// Oldest record kept, by its `end_time`.
    pub max_age: Duration,
}

impl Default for Retention {
    /// 200,000 records and 365 days: a snapshot rebuild then takes 0.2 to 0.5 s
    /// (`cargo bench -p dynmig-history` on a 2-core machine).
    fn default() -> Self {
        Self {
            max_records: 200_000,
            max_age: Duration::from_secs(365 * 24 * 3600),
        }
    }
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
CREATE INDEX IF NOT EXISTS jobs_end_time ON jobs (end_time);";

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

    /// Deletes what `retention` does not keep, `now` being seconds since the Unix epoch;
    /// returns how many records went.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn prune(&self, retention: &Retention, now: i64) -> Result<usize, Error> {
        let oldest = now.saturating_sub(i64::try_from(retention.max_age.as_secs()).unwrap_or(i64::MAX));
        let by_age = self
            .conn
            .execute("DELETE FROM jobs WHERE end_time < ?1", params![oldest])
            .map_err(self.db())?;
        let keep = i64::try_from(retention.max_records.max(1)).unwrap_or(i64::MAX);
        let by_count = self
            .conn
            .execute(
                "DELETE FROM jobs WHERE id <= (SELECT id FROM jobs ORDER BY id DESC LIMIT 1 OFFSET ?1)",
                params![keep],
            )
            .map_err(self.db())?;
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

    /// The per-(user, job name) snapshot under the estimator settings.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn snapshot(&self, cfg: &EstimatorConfig) -> Result<HistorySnapshot, Error> {
        let mut stmt = self
            .conn
            .prepare("SELECT uid, job_name, peak_bytes, limit_bytes, oom FROM jobs ORDER BY id")
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
        Ok(HistorySnapshot::from_jobs(
            &jobs,
            cfg.history_quantile,
            cfg.history_window as usize,
        ))
    }

    /// Writes the snapshot to `path` atomically (a reader never sees half a file), mode 0600;
    /// with `reader_group`, the file gets that group and mode 0640 (so that slurmctld, running
    /// as `SlurmUser`, can read a snapshot written by root). Returns the number of entries.
    ///
    /// # Errors
    /// SQLite or file errors.
    pub fn write_snapshot(
        &self,
        cfg: &EstimatorConfig,
        path: &Path,
        reader_group: Option<u32>,
    ) -> Result<usize, Error> {
        let snap = self.snapshot(cfg)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(Error::io("create folder", dir))?;
        }
        dynmig_host::fs::write_atomically(path, snap.render().as_bytes(), 0o600)
            .map_err(Error::io("write snapshot", path))?;
        if let Some(gid) = reader_group {
            // The file is ours and private until here: give it to the group, then open it.
            std::os::unix::fs::lchown(path, None, Some(gid)).map_err(Error::io("set the group of", path))?;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o640))
                .map_err(Error::io("set the mode of", path))?;
        }
        Ok(snap.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn rec(job: u64, peak: u64, oom: bool) -> JobRecord {
        JobRecord {
            job_id: job,
            restart: 0,
            node: "n1".into(),
            uid: 1000,
            user: "alice".into(),
            job_name: "ft".into(),
            profile: "1g.10gb".into(),
            estimate_bytes: 0,
            source: "default".into(),
            peak_bytes: peak,
            limit_bytes: 100,
            exit_status: if oom { 97 } else { 0 },
            oom,
            end_time: 1_000_000,
        }
    }

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn insert_dedup_list_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(&dir.path().join("h.db")).unwrap();
        assert!(s.insert(&rec(1, 40, false)).unwrap());
        assert!(!s.insert(&rec(1, 40, false)).unwrap());
        assert!(s.insert(&rec(2, 60, false)).unwrap());
        assert!(s.insert(&rec(3, 10, true)).unwrap());
        let all = s.list(None, None, 10).unwrap();
        assert_eq!(all.iter().map(|r| r.job_id).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(s.list(Some("1000"), Some("ft"), 1).unwrap()[0].job_id, 3);
        assert!(s.list(Some("bob"), None, 10).unwrap().is_empty());
        assert_eq!(s.list(None, None, usize::MAX).unwrap().len(), 3);
        let cfg = EstimatorConfig::default();
        let snap = s.snapshot(&cfg).unwrap();
        let e = snap.lookup(1000, "ft").unwrap();
        // The out-of-memory run counts with its instance's memory (100).
        assert_eq!((e.samples, e.max_peak_bytes, e.ooms), (3, 100, 1));
        let path = dir.path().join("snap.tsv");
        assert_eq!(s.write_snapshot(&cfg, &path, None).unwrap(), 1);
        let back = HistorySnapshot::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(back.lookup(1000, "ft"), Some(e));
    }

    #[test]
    fn database_and_snapshot_are_created_private() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("state/history.db");
        let s = Store::open(&db).unwrap();
        s.insert(&rec(1, 1, false)).unwrap();
        assert_eq!(mode(&db), 0o600);
        let snap = dir.path().join("snap.tsv");
        s.write_snapshot(&EstimatorConfig::default(), &snap, None).unwrap();
        assert_eq!(mode(&snap), 0o600);
        // The process's own group: allowed without privileges.
        let gid = unsafe { libc::getegid() };
        s.write_snapshot(&EstimatorConfig::default(), &snap, Some(gid)).unwrap();
        assert_eq!(mode(&snap), 0o640);
    }

    #[test]
    fn an_existing_world_readable_database_is_made_private() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("history.db");
        drop(Store::open(&db).unwrap());
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
        drop(Store::open(&db).unwrap());
        assert_eq!(mode(&db), 0o600);
    }

    #[test]
    fn a_link_in_place_of_the_database_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("victim");
        std::fs::write(&target, b"keep").unwrap();
        let db = dir.path().join("history.db");
        std::os::unix::fs::symlink(&target, &db).unwrap();
        assert!(Store::open(&db).is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
    }

    #[test]
    fn retention_keeps_the_newest_records_and_drops_old_ones() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(&dir.path().join("h.db")).unwrap();
        let day = 24 * 3600;
        let now = 1_000 * day;
        for job in 1..=10u64 {
            let mut r = rec(job, job, false);
            r.end_time = now - if job == 3 { 400 * day } else { day };
            s.insert(&r).unwrap();
        }
        let keep = Retention {
            max_records: 5,
            max_age: Duration::from_secs(365 * day as u64),
        };
        // Job 3 is too old; of the rest, jobs 6 to 10 are the 5 newest.
        assert_eq!(s.prune(&keep, now).unwrap(), 5);
        let left: Vec<u64> = s.list(None, None, 100).unwrap().iter().map(|r| r.job_id).collect();
        assert_eq!(left, [6, 7, 8, 9, 10]);
        assert_eq!(s.prune(&keep, now).unwrap(), 0, "nothing more to prune");
        assert_eq!(s.count().unwrap(), 5);
    }

    #[test]
    fn show_of_a_missing_database_says_so_and_creates_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("none.db");
        assert!(matches!(Store::open_read_only(&db), Err(Error::NoDatabase { .. })));
        assert!(!db.exists());
    }
}
