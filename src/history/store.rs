//! The history database: SQLite (rusqlite, bundled) on the controller host, one row per run
//! of a job, and the snapshot file job_submit/dynmig reads.

use super::JobRecord;
use anyhow::{Context, Result};
use dynmig_core::estimate::history::{HistorySnapshot, PastJob};
use dynmig_core::estimate::EstimatorConfig;
use rusqlite::{params, Connection};
use std::path::Path;

/// An open history database.
pub struct Store {
    conn: Connection,
}

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY,
    job_id INTEGER NOT NULL, restart INTEGER NOT NULL, node TEXT NOT NULL,
    uid INTEGER NOT NULL, user TEXT NOT NULL, job_name TEXT NOT NULL,
    profile TEXT NOT NULL, estimate_bytes INTEGER NOT NULL, source TEXT NOT NULL,
    peak_bytes INTEGER NOT NULL, limit_bytes INTEGER NOT NULL,
    exit_status INTEGER NOT NULL, oom INTEGER NOT NULL, end_time INTEGER NOT NULL,
    UNIQUE (job_id, restart, node));
CREATE INDEX IF NOT EXISTS jobs_user_name ON jobs (uid, job_name);";

impl Store {
    /// Opens (creating if needed) the database at `path`.
    ///
    /// # Errors
    /// The file cannot be opened or is not a dynmig history database.
    pub fn open(path: &Path) -> Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let conn = Connection::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.execute_batch(SCHEMA)
            .with_context(|| format!("{} is not a dynmig history database", path.display()))?;
        Ok(Self { conn })
    }

    /// Stores `r`; returns `false` if a record of the same job, restart and node is already
    /// there (a retried delivery).
    ///
    /// # Errors
    /// SQLite errors.
    pub fn insert(&self, r: &JobRecord) -> Result<bool> {
        let n = self.conn.execute(
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
        )?;
        Ok(n == 1)
    }

    /// Records, oldest first; only those of `user` (name or uid) and `job_name` when given,
    /// the last `limit`.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn list(&self, user: Option<&str>, job_name: Option<&str>, limit: usize) -> Result<Vec<JobRecord>> {
        let mut stmt = self.conn.prepare(
            "SELECT job_id, restart, node, uid, user, job_name, profile, estimate_bytes, source, peak_bytes,
             limit_bytes, exit_status, oom, end_time FROM jobs
             WHERE (?1 IS NULL OR user = ?1 OR CAST(uid AS TEXT) = ?1) AND (?2 IS NULL OR job_name = ?2)
             ORDER BY id DESC LIMIT ?3",
        )?;
        let rows = stmt.query_map(params![user, job_name, limit as i64], |row| {
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
        })?;
        let mut v = rows.collect::<rusqlite::Result<Vec<_>>>()?;
        v.reverse();
        Ok(v)
    }

    /// The per-(user, job name) snapshot under the estimator settings.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn snapshot(&self, cfg: &EstimatorConfig) -> Result<HistorySnapshot> {
        let mut stmt = self
            .conn
            .prepare("SELECT uid, job_name, peak_bytes, limit_bytes, oom FROM jobs ORDER BY id")?;
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
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(HistorySnapshot::from_jobs(
            &jobs,
            cfg.history_quantile,
            cfg.history_window as usize,
        ))
    }

    /// Writes the snapshot to `path` atomically (temporary file + rename), so that a reader
    /// never sees half a file.
    ///
    /// # Errors
    /// SQLite or file errors.
    pub fn write_snapshot(&self, cfg: &EstimatorConfig, path: &Path) -> Result<usize> {
        let snap = self.snapshot(cfg)?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, snap.render()).with_context(|| format!("cannot write {}", tmp.display()))?;
        std::fs::rename(&tmp, path)?;
        Ok(snap.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(job: u64, peak: u64, oom: bool) -> JobRecord {
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
            end_time: 0,
        }
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
        let cfg = EstimatorConfig::default();
        let snap = s.snapshot(&cfg).unwrap();
        let e = snap.lookup(1000, "ft").unwrap();
        // The out-of-memory run counts with its instance's memory (100).
        assert_eq!((e.samples, e.max_peak_bytes, e.ooms), (3, 100, 1));
        let path = dir.path().join("snap.tsv");
        assert_eq!(s.write_snapshot(&cfg, &path).unwrap(), 1);
        let back = HistorySnapshot::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(back.lookup(1000, "ft"), Some(e));
    }
}
