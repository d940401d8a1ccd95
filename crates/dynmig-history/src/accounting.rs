// One piece: the whole slurmdbd store: the sacctmgr write, the sacct read and the incremental poll share its bounds and the records it holds between reads (`Incremental`); its tests are in accounting/.
//! The history in Slurm's own accounting (`[history] store = "slurmdbd"`, docs/history.md).
//!
//! The Epilog writes each [`JobRecord`] into the job's **SystemComment** in slurmdbd with
//! `sacctmgr -i modify job where jobid=N set SystemComment=...` ([`write_record`]), and
//! `dynmig history serve` rebuilds the snapshot job_submit/dynmig reads from
//! `sacct --json` ([`read_sacct`], [`serve`]), off the submit path.
//!
//! Why SystemComment: sacctmgr's documentation lists `SystemComment` among the job fields an
//! administrator may modify ("SPECIFICATIONS FOR JOBS", <https://slurm.schedmd.com/sacctmgr.html>),
//! slurmdbd stores it with the job (sacct's `SystemComment` field,
//! <https://slurm.schedmd.com/sacct.html>), and `sacct --json` shows it as `comment.system`.
//! Only an administrator (root, SlurmUser, or AdminLevel=Administrator/Operator) may set it,
//! unlike `Comment`, which the job's user may set. `AdminComment` holds job_submit/dynmig's
//! decision record and is left alone; `Extra` exists only from 23.02. Tried on the local
//! cluster for a finished job on 22.05.8, 24.11.5 and 26.05.5 (`tests/cluster.rs`).
//!
//! The comment's text and the merge with what else it holds are the versioned codec
//! [`dynmig_core::protocol::system_comment`] (`dynmig-history/v1 key=value ... end`),
//! re-exported here.

use crate::record::{cut, JobRecord};
use crate::Error;
use dynmig_core::estimate::history::{HistorySnapshot, PastJob};
use dynmig_core::estimate::EstimatorConfig;
pub use dynmig_core::protocol::system_comment::{
    decode_comment, decode_comments, encode_comment, merge_comment, COMMENT_END, COMMENT_FAMILY, COMMENT_PREFIX,
    COMMENT_VERSION, MAX_COMMENT_BYTES, MAX_FOREIGN_BYTES, MAX_RECORDS_PER_COMMENT, SEPARATOR,
};
use dynmig_host::daemon::{Daemon, Harness, Signals};
use dynmig_host::process::{run, Limits, RunError};
use serde::Deserialize;
use std::path::Path;
use std::time::{Duration, Instant};

/// Most bytes of `sacct --json` read (then the command is killed and the snapshot kept).
pub const MAX_SACCT_BYTES: usize = 512 << 20;

/// How long one `sacct` may run.
pub const SACCT_TIMEOUT: Duration = Duration::from_secs(120);

/// How long one `sacct -j` that reads a job's SystemComment before it is written may run.
pub const READ_COMMENT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the Epilog tries to write a record (slurmctld sends the finished job to slurmdbd
/// asynchronously, so the first try may find no job).
pub const WRITE_BUDGET: Duration = Duration::from_secs(15);

/// The job's SystemComment as `sacct --json -j <id>` shows it (the job's latest run), read
/// with [`READ_COMMENT_TIMEOUT`] and [`MAX_SACCT_BYTES`]; `None` when sacct fails, shows no
/// such job, or the job has none.
pub fn current_comment(sacct: &Path, job_id: u64) -> Option<String> {
    let args = ["--json".to_string(), "-j".into(), job_id.to_string()];
    let limits = Limits {
        timeout: READ_COMMENT_TIMEOUT,
        max_output: MAX_SACCT_BYTES,
    };
    let out = run(sacct.as_os_str(), &args, limits).ok()?;
    let parsed: SacctOutput = serde_json::from_str(&out).ok()?;
    parsed
        .jobs
        .into_iter()
        .filter(|j| j.job_id == job_id)
        .find_map(|j| j.comment.system)
        .filter(|c| !c.is_empty())
}

/// Writes `r` into its job's SystemComment in slurmdbd with
/// `sacctmgr -i modify job where jobid=<id> set SystemComment=<comment>`, retrying for
/// `budget` while sacctmgr modifies nothing (slurmdbd may not have the finished job yet).
/// Before each try the job's SystemComment is read with `sacct` ([`current_comment`]) and
/// `r` added to it ([`merge_comment`]): what Slurm wrote and the records of the job's other
/// runs stay. Each sacctmgr gets at most 10 s, less near the end of the budget.
///
/// # Errors
/// The record cannot be encoded, sacctmgr fails, or the budget passes before a job was
/// modified.
pub fn write_record(sacctmgr: &Path, sacct: &Path, r: &JobRecord, budget: Duration) -> Result<(), Error> {
    encode_comment(r).map_err(Error::Record)?;
    let until = Instant::now() + budget;
    loop {
        let comment = merge_comment(current_comment(sacct, r.job_id).as_deref(), r).map_err(Error::Record)?;
        let args = [
            "-i".to_string(),
            "modify".into(),
            "job".into(),
            "where".into(),
            format!("jobid={}", r.job_id),
            "set".into(),
            format!("SystemComment={comment}"),
        ];
        let left = until.saturating_duration_since(Instant::now());
        let limits = Limits {
            timeout: left.min(Duration::from_secs(10)).max(Duration::from_secs(1)),
            max_output: 64 << 10,
        };
        let why = match run(sacctmgr.as_os_str(), &args, limits) {
            Ok(out) if out.contains("Modified") => return Ok(()),
            Ok(out) => format!("sacctmgr modified no job: {}", cut(out.trim())),
            Err(e @ (RunError::Spawn { .. } | RunError::TimedOut { .. })) => {
                return Err(Error::Accounting(e.to_string()))
            }
            Err(e) => e.to_string(),
        };
        if Instant::now() + Duration::from_millis(500) >= until {
            return Err(Error::Accounting(format!("job {}: {why}", r.job_id)));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Time each spooled record other than the Epilog's own gets in [`flush_spool`]: slurmdbd has
/// long had those jobs, so one try.
pub const OLDER_RECORD_BUDGET: Duration = Duration::from_secs(2);

/// Writes the spool `spool_dir` into Slurm's accounting ([`write_record`]), removing each
/// record's file once slurmdbd has it: `first` (the Epilog's own record, given
/// [`WRITE_BUDGET`]) before the others (oldest first, [`OLDER_RECORD_BUDGET`] each), until
/// `budget` has passed. What is left waits for the next Epilog or `dynmig history flush`;
/// a record whose job slurmdbd no longer has stays until an administrator removes it
/// (docs/history.md).
pub fn flush_spool(
    sacctmgr: &Path,
    sacct: &Path,
    spool_dir: &Path,
    first: Option<&Path>,
    budget: Duration,
) -> crate::transport::Flushed {
    let until = Instant::now() + budget;
    let mut records = crate::spool::list(spool_dir);
    if let Some(first) = first {
        records.sort_by_key(|(p, _)| p != first);
    }
    let mut f = crate::transport::Flushed::default();
    for (path, r) in records {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            f.pending += 1;
            continue;
        }
        let own = if Some(path.as_path()) == first {
            WRITE_BUDGET
        } else {
            OLDER_RECORD_BUDGET
        };
        match write_record(sacctmgr, sacct, &r, own.min(left)) {
            Ok(()) => {
                f.delivered += 1;
                if let Err(e) = std::fs::remove_file(&path) {
                    log::warn!("remove {}: {e}", path.display());
                }
            }
            Err(Error::Record(e)) => {
                f.refused += 1;
                log::warn!("job {}: record in {} refused: {e}", r.job_id, path.display());
            }
            Err(e) => {
                f.pending += 1;
                log::warn!("job {}: record stays in {}: {e}", r.job_id, path.display());
            }
        }
    }
    f
}

/// `dynmig history show` with `store = "slurmdbd"`: the records [`read_sacct`] finds within
/// `window` of `user` (name or uid) and `job_name` when given, as a table or JSON
/// ([`crate::service::show_records`] of an [`Accounting`] store: the newest `limit` by end
/// time, oldest first; records sacct's output had but dynmig skipped are counted on stderr).
///
/// # Errors
/// sacct fails, times out or prints too much; its output is not sacct's JSON.
pub fn show(
    sacct: &Path,
    window: Duration,
    user: Option<&str>,
    job_name: Option<&str>,
    limit: usize,
    json: bool,
) -> Result<String, Error> {
    let store = Accounting::new(sacct, window, crate::store::Retention::default());
    crate::service::show_records(&store, user, job_name, limit, json)
}

/// Slurm's accounting as the history's store (`[history] store = "slurmdbd"`): a record is
/// put into its job's SystemComment with sacctmgr ([`write_record`]), listed from a fresh
/// `sacct` read of the window ([`read_sacct`]), and the snapshot's past jobs are the records
/// held between incremental reads ([`Accounting::refresh`], [`Incremental`]).
pub struct Accounting {
    sacct: std::path::PathBuf,
    sacctmgr: Option<std::path::PathBuf>,
    window: Duration,
    held: Incremental,
}

impl Accounting {
    /// A store that reads with `sacct` the records of jobs that ended within `window`,
    /// holding what `retention` allows between reads; it puts nothing until given sacctmgr
    /// ([`Accounting::with_sacctmgr`]).
    pub fn new(sacct: &Path, window: Duration, retention: crate::store::Retention) -> Self {
        Self {
            sacct: sacct.to_path_buf(),
            sacctmgr: None,
            window,
            held: Incremental::new(sacct, window, retention),
        }
    }

    /// The same store, putting records with `sacctmgr`.
    pub fn with_sacctmgr(mut self, sacctmgr: &Path) -> Self {
        self.sacctmgr = Some(sacctmgr.to_path_buf());
        self
    }

    /// Reads what changed in Slurm's accounting up to `now` (seconds since the Unix epoch)
    /// into the records held ([`Incremental::refresh`]).
    pub fn refresh(&mut self, now: i64) -> Refreshed {
        self.held.refresh(now)
    }
}

impl crate::HistoryStore for Accounting {
    /// [`write_record`] with [`WRITE_BUDGET`]; always `Ok(true)` (a run's record replaces
    /// the one its SystemComment held).
    fn put(&self, r: &JobRecord) -> Result<bool, Error> {
        let sacctmgr = self
            .sacctmgr
            .as_deref()
            .ok_or_else(|| Error::Accounting("this accounting store was opened without sacctmgr".into()))?;
        write_record(sacctmgr, &self.sacct, r, WRITE_BUDGET).map(|()| true)
    }

    /// One [`read_sacct`] of the window; the skipped comments are counted on stderr.
    fn list(&self, user: Option<&str>, job_name: Option<&str>, limit: usize) -> Result<Vec<JobRecord>, Error> {
        let read = read_sacct(&self.sacct, self.window)?;
        if !read.skipped.is_empty() {
            eprintln!(
                "dynmig: {} dynmig comments in sacct's output skipped (malformed or not the job's)",
                read.skipped.len()
            );
        }
        let mut records: Vec<JobRecord> = read
            .records
            .into_iter()
            .filter(|r| user.is_none_or(|u| r.user == u || r.uid.to_string() == u))
            .filter(|r| job_name.is_none_or(|n| r.job_name == n))
            .collect();
        records.sort_by_key(|r| std::cmp::Reverse((r.end_time, r.job_id, r.restart)));
        records.truncate(limit);
        records.reverse();
        Ok(records)
    }

    /// The records held since the last [`Accounting::refresh`] ([`past_jobs`]).
    fn past_jobs(&self) -> Result<Vec<PastJob>, Error> {
        Ok(past_jobs(self.held.records()))
    }
}

/// `sacct --json`: only what dynmig reads. Unknown fields are ignored (sacct has hundreds,
/// and they change between releases: OpenAPI v0.0.38 on 22.05 to v0.0.44 on 26.05); the
/// fields read have the same names and types on every release of the matrix.
#[derive(Debug, Deserialize)]
pub struct SacctOutput {
    /// The jobs.
    pub jobs: Vec<SacctJob>,
}

/// One job of `sacct --json`.
#[derive(Debug, Deserialize)]
pub struct SacctJob {
    /// Slurm job id.
    pub job_id: u64,
    /// Job name as sacct shows it: the name of a record the Epilog wrote without one
    /// ([`records_from_sacct`]).
    #[serde(default)]
    pub name: String,
    /// User name, as slurmdbd resolved it from the job's uid.
    #[serde(default)]
    pub user: String,
    /// The comments.
    #[serde(default)]
    pub comment: SacctComment,
}

/// `comment` of a job: `administrator` (AdminComment), `job` (Comment: the user's own, never
/// read) and `system` (SystemComment).
#[derive(Debug, Default, Deserialize)]
pub struct SacctComment {
    /// AdminComment: job_submit/dynmig's decision record (null when unset).
    #[serde(default)]
    pub administrator: Option<String>,
    /// SystemComment (null when unset).
    #[serde(default)]
    pub system: Option<String>,
}

/// The records of a `sacct --json` output, and why others were skipped.
#[derive(Debug, Default)]
pub struct SacctRecords {
    /// Records whose job id, user and job name agree with the job sacct shows them on.
    pub records: Vec<JobRecord>,
    /// One line per dynmig comment skipped: the job and why.
    pub skipped: Vec<String>,
}

/// Reads the dynmig records out of `sacct --json` output. Only `comment.system` is read (an
/// administrator wrote it); a record whose job id differs from the job's own, or whose user
/// does when both are known, is skipped, as is a malformed one. A record without a user name
/// gets the job's. A record without a job name (the Epilog does not know it:
/// [`crate::naming`]) gets the job's name, and the estimate and its source of the job's
/// decision record (`comment.administrator`, AdminComment, which only job_submit/dynmig and
/// administrators write).
///
/// # Errors
/// More than [`MAX_SACCT_BYTES`], or not the JSON sacct prints (truncated, wrong types).
pub fn records_from_sacct(json: &[u8]) -> Result<SacctRecords, Error> {
    if json.len() > MAX_SACCT_BYTES {
        return Err(Error::Accounting(format!(
            "sacct --json printed {} bytes; at most {MAX_SACCT_BYTES} are read",
            json.len()
        )));
    }
    let out: SacctOutput = serde_json::from_slice(json).map_err(|e| {
        Error::Accounting(format!(
            "sacct --json is not what sacct prints: {}",
            cut(&e.to_string())
        ))
    })?;
    let mut res = SacctRecords::default();
    for job in out.jobs {
        let Some(text) = job.comment.system.as_deref() else {
            continue;
        };
        for decoded in decode_comments(text) {
            match decoded {
                Ok(mut r) => {
                    let differs = if r.job_id != job.job_id {
                        Some(("job id", r.job_id.to_string()))
                    } else if !r.user.is_empty() && !job.user.is_empty() && r.user != job.user {
                        Some(("user", r.user.clone()))
                    } else {
                        None
                    };
                    match differs {
                        Some((what, value)) => res.skipped.push(format!(
                            "job {}: its record's {what} '{}' is not the job's",
                            job.job_id,
                            cut(&value)
                        )),
                        None => {
                            if r.user.is_empty() {
                                r.user.clone_from(&job.user);
                            }
                            if r.job_name.is_empty() {
                                name_from_job(&mut r, &job);
                            }
                            // The same run's record on several rows of the job (sacctmgr may
                            // modify each of a requeued job's rows): counted once.
                            if !res
                                .records
                                .iter()
                                .any(|o| (o.job_id, o.restart, &o.node) == (r.job_id, r.restart, &r.node))
                            {
                                res.records.push(r);
                            }
                        }
                    }
                }
                Err(e) => res.skipped.push(format!("job {}: {e}", job.job_id)),
            }
        }
    }
    Ok(res)
}

/// Gives `r` the job's name and its decision record's estimate (none: 0 and no source).
fn name_from_job(r: &mut JobRecord, job: &SacctJob) {
    r.job_name = job.name.chars().take(crate::record::MAX_JOB_NAME_LEN / 4).collect();
    let decision = job
        .comment
        .administrator
        .as_deref()
        .and_then(|c| dynmig_core::protocol::decision::DecisionRecord::parse(c).ok());
    if let Some(d) = decision {
        r.estimate_bytes = d.mem_bytes;
        r.source = d.source.to_string();
    }
}

/// Runs `sacct --json --allusers --duplicates --starttime now-<window>` (every user's jobs
/// and every run of a requeued job; the JSON nests steps inside their job) with [`SACCT_TIMEOUT`] and
/// [`MAX_SACCT_BYTES`], and reads its records ([`records_from_sacct`]).
///
/// # Errors
/// sacct fails, times out or prints too much; its output is not sacct's JSON.
pub fn read_sacct(sacct: &Path, window: Duration) -> Result<SacctRecords, Error> {
    let args = [
        "--json".to_string(),
        "--allusers".into(),
        // Not --allocations: on 22.05.8 it makes sacct --json name every job "allocation".
        "--duplicates".into(),
        format!("--starttime=now-{}", window.as_secs()),
    ];
    let limits = Limits {
        timeout: SACCT_TIMEOUT,
        max_output: MAX_SACCT_BYTES,
    };
    let out = run(sacct.as_os_str(), &args, limits).map_err(|e| Error::Accounting(e.to_string()))?;
    records_from_sacct(out.as_bytes())
}

/// Longest stretch of time one `sacct` reads ([`Incremental`]): a longer one is read in
/// slices of this length, so that one busy day cannot make the whole read fail.
pub const SACCT_SLICE: Duration = Duration::from_secs(24 * 3600);

/// How far back before the end of the last read an incremental read starts again: a job's
/// record is written into slurmdbd up to [`WRITE_BUDGET`] after its Epilog starts, so a job
/// that ended just before the last read may have got its record only after it.
pub const SACCT_OVERLAP: Duration = Duration::from_secs(300);

/// How often [`Incremental`] reads its whole window again (in [`SACCT_SLICE`]s): a record that
/// reached slurmdbd long after its job ended (spooled on its node while slurmdbd was away)
/// is found by such a read only.
pub const SACCT_FULL_EVERY: Duration = Duration::from_secs(24 * 3600);

/// A held record's key: job id, restart count, node (a run of a job on a node counts once).
type RunKey = (u64, u32, String);

/// What one [`Incremental::refresh`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Refreshed {
    /// `sacct` runs (one per slice).
    pub reads: usize,
    /// Whether it read the whole window (the first read, or one [`SACCT_FULL_EVERY`]).
    pub full: bool,
    /// Records held after it.
    pub records: usize,
    /// Records dropped: older than the window, or beyond the retention.
    pub dropped: usize,
    /// One line per slice that could not be read (sacct failed, timed out, printed more than
    /// [`MAX_SACCT_BYTES`]): its records stay as they were; the next full read tries again.
    pub failed: Vec<String>,
    /// Dynmig comments skipped (malformed or not the job's), at most 20.
    pub skipped: Vec<String>,
}

/// The records of Slurm's accounting, kept between reads so that each `sacct` reads only what
/// changed: the first read covers the window (`sacct_window`) in [`SACCT_SLICE`]s, each
/// later one only the time since the previous read, less [`SACCT_OVERLAP`]; the window is read
/// again every [`SACCT_FULL_EVERY`]. A job's record seen again replaces the one held (the
/// same job, run and node: a record counts once); records whose job ended before the window
/// go, and the [`Retention`](crate::store::Retention) bounds what is held as it bounds the
/// service's database (per user first). A slice that fails is logged and skipped, never a
/// reason to stop updating.
pub struct Incremental {
    sacct: std::path::PathBuf,
    window: Duration,
    retention: crate::store::Retention,
    records: std::collections::HashMap<RunKey, JobRecord>,
    /// End of the last read and start of the last full one, seconds since the Unix epoch.
    last_read: Option<i64>,
    last_full: Option<i64>,
}

impl Incremental {
    /// Nothing read yet; `sacct` is the command, `window` how far back records count.
    pub fn new(sacct: &Path, window: Duration, retention: crate::store::Retention) -> Self {
        Self {
            sacct: sacct.to_path_buf(),
            window,
            retention,
            records: std::collections::HashMap::new(),
            last_read: None,
            last_full: None,
        }
    }

    /// The records held, in no order.
    pub fn records(&self) -> impl Iterator<Item = &JobRecord> {
        self.records.values()
    }

    /// Reads what changed up to `now` (seconds since the Unix epoch; the times given to sacct
    /// are relative to it: `--starttime=now-<s>`, `--endtime=now-<s>`) and merges it.
    pub fn refresh(&mut self, now: i64) -> Refreshed {
        let secs = |d: Duration| i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
        let window_start = now.saturating_sub(secs(self.window));
        let full = match (self.last_read, self.last_full) {
            (Some(_), Some(f)) => now.saturating_sub(f) >= secs(SACCT_FULL_EVERY),
            _ => true,
        };
        let from = match self.last_read {
            Some(last) if !full => last.saturating_sub(secs(SACCT_OVERLAP)).max(window_start),
            _ => window_start,
        };
        let mut out = Refreshed {
            full,
            ..Refreshed::default()
        };
        // Newest slice first: the records that matter most arrive even if an old day fails.
        let slice = secs(SACCT_SLICE).max(1);
        let mut end = now;
        while end > from {
            let start = end.saturating_sub(slice).max(from);
            let mut args = vec![
                "--json".to_string(),
                "--allusers".into(),
                // Not --allocations: on 22.05.8 it makes sacct --json name every job "allocation".
                "--duplicates".into(),
                format!("--starttime=now-{}", now - start),
            ];
            args.push(if end == now {
                "--endtime=now".into()
            } else {
                format!("--endtime=now-{}", now - end)
            });
            out.reads += 1;
            let limits = Limits {
                timeout: SACCT_TIMEOUT,
                max_output: MAX_SACCT_BYTES,
            };
            let read = run(self.sacct.as_os_str(), &args, limits)
                .map_err(|e| Error::Accounting(e.to_string()))
                .and_then(|o| records_from_sacct(o.as_bytes()));
            match read {
                Ok(read) => {
                    for s in read.skipped {
                        if out.skipped.len() < 20 {
                            out.skipped.push(s);
                        }
                    }
                    for r in read.records {
                        self.records.insert((r.job_id, r.restart, r.node.clone()), r);
                    }
                }
                Err(e) => out.failed.push(format!("{} to {}: {e}", args[3], args[4])),
            }
            end = start;
        }
        self.last_read = Some(now);
        if full {
            self.last_full = Some(now);
        }
        let before = self.records.len();
        self.records.retain(|_, r| r.end_time >= window_start);
        out.dropped = before - self.records.len() + self.apply_retention();
        out.records = self.records.len();
        out
    }

    /// Drops what the retention does not keep: per user beyond `max_per_user`, then from the
    /// users who hold the most beyond `max_records`; the oldest (by end time) first.
    fn apply_retention(&mut self) -> usize {
        let mut per_user: std::collections::HashMap<u32, Vec<(i64, RunKey)>> = std::collections::HashMap::new();
        for (k, r) in &self.records {
            per_user.entry(r.uid).or_default().push((r.end_time, k.clone()));
        }
        let cap = self.retention.max_per_user.max(1);
        let mut users: Vec<Vec<(i64, RunKey)>> = per_user.into_values().collect();
        let counts: Vec<u64> = users.iter().map(|u| (u.len() as u64).min(cap)).collect();
        let total: u64 = counts.iter().sum();
        let mut keep = counts.clone();
        for (i, k) in crate::store::water_fill(&counts, total.saturating_sub(self.retention.max_records.max(1))) {
            keep[i] = k;
        }
        let mut dropped = 0;
        for (u, keep) in users.iter_mut().zip(keep) {
            let keep = usize::try_from(keep).unwrap_or(usize::MAX);
            if u.len() > keep {
                u.sort_unstable();
                for (_, k) in u.drain(..u.len() - keep) {
                    self.records.remove(&k);
                    dropped += 1;
                }
            }
        }
        dropped
    }
}

/// The past jobs of `records`, by end time (then job and run): an out-of-memory run counts
/// its instance's memory. Unnamed runs stay (sacct names them from their job).
pub fn past_jobs<'a>(records: impl IntoIterator<Item = &'a JobRecord>) -> Vec<PastJob> {
    let mut sorted: Vec<&JobRecord> = records.into_iter().collect();
    sorted.sort_by_key(|r| (r.end_time, r.job_id, r.restart));
    sorted
        .iter()
        .map(|r| PastJob {
            uid: r.uid,
            job_name: r.job_name.clone(),
            peak_bytes: if r.oom {
                r.peak_bytes.max(r.limit_bytes)
            } else {
                r.peak_bytes
            },
            oom: r.oom,
        })
        .collect()
}

/// The snapshot of `records` under the estimator settings ([`past_jobs`], then
/// [`crate::snapshot::build`], as for every store), within
/// [`crate::snapshot::MAX_SNAPSHOT_BYTES`].
pub fn snapshot(records: &[JobRecord], cfg: &EstimatorConfig) -> HistorySnapshot {
    crate::snapshot::build(past_jobs(records), cfg)
}

/// One rebuild from a whole read of `window` (what [`serve`] did before it read
/// incrementally; kept for one-off use): [`read_sacct`], [`snapshot`], written atomically to `snapshot_path` (mode
/// 0600). Returns the number of records and snapshot entries.
///
/// # Errors
/// sacct or the file cannot be written; the old snapshot then stays.
pub fn rebuild(
    sacct: &Path,
    window: Duration,
    snapshot_path: &Path,
    cfg: &EstimatorConfig,
) -> Result<(usize, usize), Error> {
    let read = read_sacct(sacct, window)?;
    for s in read.skipped.iter().take(20) {
        log::warn!("sacct: skipped {s}");
    }
    let entries = write_snapshot(&read.records, snapshot_path, cfg)?;
    Ok((read.records.len(), entries))
}

/// Writes the [`snapshot`] of `records` atomically to `snapshot_path` (mode 0600); returns
/// its number of entries.
///
/// # Errors
/// The file cannot be written; the old snapshot then stays.
pub fn write_snapshot(records: &[JobRecord], snapshot_path: &Path, cfg: &EstimatorConfig) -> Result<usize, Error> {
    let snap = snapshot(records, cfg);
    crate::snapshot::write(&snap, snapshot_path, None)?;
    Ok(snap.len())
}

/// `dynmig history serve` with `store = "slurmdbd"`: reads Slurm's accounting at once and
/// then every `interval`, each time only what changed ([`Incremental`], bounded by
/// `retention`, an [`Accounting`] store), and writes the snapshot
/// ([`crate::HistoryStore::write_snapshot`]; a failed write is logged, the old snapshot kept). On SIGHUP it calls
/// `reload` (which reads the config again, or keeps the old one and says why) and rebuilds
/// with the estimator settings it returns. Runs on the daemon harness
/// ([`dynmig_host::daemon`]) until SIGTERM or SIGINT.
///
/// # Errors
/// The signal handlers cannot be installed.
pub fn serve(
    sacct: &Path,
    window: Duration,
    interval: Duration,
    retention: crate::store::Retention,
    snapshot_path: &Path,
    estimator: &EstimatorConfig,
    reload: &dyn Fn() -> Option<EstimatorConfig>,
) -> Result<(), Error> {
    let harness = Harness::install().map_err(|e| Error::Accounting(format!("cannot install a signal handler: {e}")))?;
    log::info!(
        "history from Slurm accounting: {} every {interval:?}, snapshot {}",
        sacct.display(),
        snapshot_path.display()
    );
    harness.run(&mut Refresher {
        store: Accounting::new(sacct, window, retention),
        cfg: *estimator,
        snapshot_path,
        interval,
        reload,
    })
}

/// [`serve`]'s [`Daemon`]: a refresh and a snapshot a step.
struct Refresher<'a> {
    store: Accounting,
    cfg: EstimatorConfig,
    snapshot_path: &'a Path,
    interval: Duration,
    reload: &'a dyn Fn() -> Option<EstimatorConfig>,
}

impl Daemon for Refresher<'_> {
    type Error = Error;

    fn step(&mut self, _: &Signals) -> Result<(), Error> {
        let r = self.store.refresh(crate::now());
        for f in &r.failed {
            log::error!("sacct: {f}");
        }
        for s in &r.skipped {
            log::warn!("sacct: skipped {s}");
        }
        let entries = crate::HistoryStore::write_snapshot(&self.store, &self.cfg, self.snapshot_path, None)?;
        log::debug!(
            "snapshot: {} sacct reads{}, {} records, {entries} entries",
            r.reads,
            if r.full { " (whole window)" } else { "" },
            r.records
        );
        Ok(())
    }

    fn failed(&mut self, e: Error) -> Result<(), Error> {
        log::error!("snapshot from sacct: {e}");
        Ok(())
    }

    fn reload(&mut self) {
        if let Some(e) = (self.reload)() {
            self.cfg = e;
        }
    }

    fn next_wait(&mut self) -> Duration {
        self.interval
    }

    fn stopped(&mut self) -> Result<(), Error> {
        log::info!("stopped");
        Ok(())
    }
}

#[cfg(test)]
mod tests;
