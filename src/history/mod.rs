//! Job history: what each GPU job needed, recorded by the Epilog and kept in SQLite on the
//! controller host, so that the estimator learns from it (docs/history.md).
//!
//! Path of a record: the Epilog ([`crate::oom::after_job`]) builds a [`JobRecord`] and writes
//! it into the node's spool ([`spool`]); it then tries to deliver every spooled record to
//! `dynmig history serve` on the controller host ([`transport`]), each encoded afresh with
//! munge ([`auth`]). The server decodes it with `unmunge`, accepts it only from uid 0 with a
//! credential valid under the cluster's munge key, stores it ([`store`]), answers, and
//! rewrites the snapshot that job_submit/dynmig reads. A record leaves the spool only after
//! the server's answer, so nothing is lost while the controller host is down: the next Epilog
//! on the node, or `dynmig history flush`, delivers it.

pub mod auth;
pub mod cli;
pub mod spool;
pub mod store;
pub mod transport;

use serde::{Deserialize, Serialize};

/// What the Epilog records about one run of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    /// Slurm job id.
    pub job_id: u64,
    /// Slurm's `Restarts` count of the job when this run ended (0 for the first run).
    pub restart: u32,
    /// Node the job ran on.
    pub node: String,
    /// The user's numeric id.
    pub uid: u32,
    /// The user's name.
    pub user: String,
    /// Job name.
    pub job_name: String,
    /// MIG profile the job had, e.g. `2g.20gb` (empty when not a MIG job).
    pub profile: String,
    /// The estimate job_submit/dynmig made, bytes (0 when unknown).
    pub estimate_bytes: u64,
    /// Where it came from (`mig-mem`, `model`, `history`, `default`, `whole-gpu`, ...).
    pub source: String,
    /// Peak GPU memory the job used, bytes (for an out-of-memory run: the instance's memory).
    pub peak_bytes: u64,
    /// Memory of the instance, bytes.
    pub limit_bytes: u64,
    /// The job's exit status (`ExitCode=` status part).
    pub exit_status: i32,
    /// Whether it ran out of GPU memory.
    pub oom: bool,
    /// When the Epilog recorded it, seconds since the epoch.
    pub end_time: i64,
}

impl JobRecord {
    /// The spool file name: `<job>-<restart>-<node>.json`.
    pub fn spool_name(&self) -> String {
        format!("{}-{}-{}.json", self.job_id, self.restart, self.node)
    }
}

/// Seconds since the epoch, now.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}
