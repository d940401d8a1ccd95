//! dynmig-slurm: reading and changing Slurm from a process outside slurmctld.
//!
//! - [`SlurmApi`]: what the controller, the agent and the hooks ask of Slurm, one trait;
//! - [`commands::SlurmCommands`]: the implementation over Slurm's own commands. Reads go
//!   through JSON only (`squeue --json`, `sinfo --json`; SchedMD's OpenAPI data, v0.0.38 on
//!   22.05, newer on later releases), never text split on whitespace; every call runs with a
//!   timeout and an output cap ([`dynmig_host::process`]);
//! - [`json`]: the parsers of that JSON into [`JobInfo`] and [`NodeInfo`];
//! - `fake::FakeSlurm` (feature `fake`): an in-memory Slurm for tests.
#![deny(missing_docs)]

pub mod commands;
#[cfg(any(test, feature = "fake"))]
pub mod fake;
pub mod json;
pub mod plugin;

pub use commands::SlurmCommands;
use dynmig_core::protocol::intent::NodeIntent;

/// A job's base state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobState {
    /// Waiting to start (held jobs too).
    Pending,
    /// Running.
    Running,
    /// Ending (Epilog under way).
    Completing,
    /// Any other state (`COMPLETED`, `FAILED`, `CANCELLED`, ...), upper case.
    Other(String),
}

impl JobState {
    /// From Slurm's spelling (`PENDING`, any case).
    pub fn from_slurm(s: &str) -> Self {
        match s.to_ascii_uppercase().as_str() {
            "PENDING" => JobState::Pending,
            "RUNNING" => JobState::Running,
            "COMPLETING" => JobState::Completing,
            other => JobState::Other(other.to_string()),
        }
    }
}

impl std::fmt::Display for JobState {
    /// Slurm's spelling: `PENDING`, `RUNNING`, `COMPLETING`, or the other state as given.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            JobState::Pending => "PENDING",
            JobState::Running => "RUNNING",
            JobState::Completing => "COMPLETING",
            JobState::Other(s) => s,
        })
    }
}

/// One job as Slurm reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobInfo {
    /// Job id.
    pub id: u32,
    /// Job name (may hold spaces).
    pub name: String,
    /// The job's user name.
    pub user: String,
    /// The job's uid.
    pub uid: u32,
    /// The job's primary gid.
    pub gid: u32,
    /// The job's working directory (relative stdout/stderr paths are under it).
    pub cwd: String,
    /// Base state.
    pub state: JobState,
    /// Why a pending job waits (`Resources`, `Priority`, ...).
    pub reason: String,
    /// GPU request per node as Slurm holds it, e.g. `gres:gpu:2g.20gb:1`.
    pub tres_per_node: String,
    /// Allocated nodes (hostlist), empty while pending.
    pub nodes: String,
    /// Submit time, seconds since the epoch (0: not set).
    pub submit_time: i64,
    /// Start time (expected start for pending jobs), seconds since the epoch.
    pub start_time: i64,
    /// End time (time limit end for running jobs), seconds since the epoch.
    pub end_time: i64,
    /// Time limit, seconds; `None` when unlimited (`INFINITE`) or not set.
    pub time_limit_s: Option<i64>,
    /// Deadline (`sbatch --deadline`), seconds since the epoch; 0 when none.
    pub deadline: i64,
    /// The admin comment, where job_submit/dynmig records its decision.
    pub admin_comment: String,
    /// Exit status of the batch script, when finished.
    pub exit_status: i32,
    /// How often the job was requeued.
    pub restarts: u32,
    /// The job's stderr path as the user gave it (never opened with root's rights); empty
    /// when not given (Slurm then writes stderr to [`JobInfo::std_out`]).
    pub std_err: String,
    /// The job's stdout path as the user gave it (never opened with root's rights); empty
    /// when not given (sbatch's default is `slurm-%j.out` in the working directory).
    pub std_out: String,
}

/// A node's base state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeState {
    /// No job.
    Idle,
    /// Some CPUs allocated.
    Mixed,
    /// All CPUs allocated.
    Allocated,
    /// Jobs ending.
    Completing,
    /// Down, unknown, future or invalid: not in service.
    Down,
    /// Any other state, lower case.
    Other(String),
}

impl NodeState {
    /// From Slurm's spelling (any case).
    pub fn from_slurm(s: &str) -> Self {
        match s.to_ascii_lowercase().as_str() {
            "idle" => NodeState::Idle,
            "mixed" => NodeState::Mixed,
            "allocated" | "alloc" => NodeState::Allocated,
            "completing" => NodeState::Completing,
            "down" | "unknown" | "future" | "inval" => NodeState::Down,
            other => NodeState::Other(other.to_string()),
        }
    }
}

/// One node as Slurm reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeInfo {
    /// Node name.
    pub name: String,
    /// Base state.
    pub state: NodeState,
    /// State flags, upper case: `DRAIN`, `COMPLETING`, `DYNAMIC`, ...
    pub flags: Vec<String>,
    /// The drain/down reason.
    pub reason: String,
    /// Configured GRES, e.g. `gpu:3g.40gb:2(S:0),gpu:1g.10gb:1`.
    pub gres: String,
    /// GRES in use, e.g. `gpu:3g.40gb:1(IDX:0),gpu:1g.10gb:0(IDX:N/A)`.
    pub gres_used: String,
    /// The node's `Extra` field, where the agent publishes the applied layout.
    pub extra: String,
    /// When slurmd last started (seconds since the epoch): for a dynamic node, when its
    /// current layout was registered.
    pub slurmd_start_time: i64,
    /// CPUs allocated to jobs.
    pub alloc_cpus: i64,
    /// When the reason was set (seconds since the epoch; 0 if unknown).
    pub reason_changed_at: i64,
}

impl NodeInfo {
    /// Whether the node is drained or draining.
    pub fn is_drain(&self) -> bool {
        self.flags.iter().any(|f| f == "DRAIN")
    }

    /// Whether jobs run (or are completing) on the node.
    pub fn has_jobs(&self) -> bool {
        matches!(
            self.state,
            NodeState::Allocated | NodeState::Mixed | NodeState::Completing
        ) || self.flags.iter().any(|f| f == "COMPLETING")
            || self.alloc_cpus > 0
    }

    /// Whether the node is down (or unknown, future, invalid).
    pub fn is_down(&self) -> bool {
        self.state == NodeState::Down
    }
}

/// A maintenance reservation of one node, as dynmig asks Slurm for it: `Flags=MAINT,IGNORE_JOBS`,
/// `Users=root`, from `start` for `duration`. Slurm's backfill starts no job on the node that
/// would still run at `start`, and keeps starting jobs that end before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaintReservation {
    /// Reservation name (`dynmig_<node>`).
    pub name: String,
    /// The one node.
    pub node: String,
    /// Start, seconds since the epoch.
    pub start: i64,
    /// Length (Slurm counts whole minutes: rounded up, at least one).
    pub duration: std::time::Duration,
}

impl MaintReservation {
    /// The duration in whole minutes, rounded up, at least 1.
    pub fn minutes(&self) -> u64 {
        self.duration.as_secs().div_ceil(60).max(1)
    }
}

/// A Slurm call that failed.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    /// The command could not run, timed out, printed too much or failed.
    #[error(transparent)]
    Command(#[from] dynmig_host::process::RunError),
    /// Its output is not the JSON expected.
    #[error("{what}: {why}")]
    Json {
        /// Which command's output.
        what: &'static str,
        /// What is wrong.
        why: String,
    },
    /// The fake Slurm refused (tests only).
    #[error("{0}")]
    Refused(String),
}

/// What dynmig asks of Slurm. Every method may block up to the implementation's timeout;
/// none is called inside slurmctld.
pub trait SlurmApi {
    /// Every job slurmctld holds (pending, running and recently finished).
    ///
    /// # Errors
    /// [`SlurmError`].
    fn jobs(&self) -> Result<Vec<JobInfo>, SlurmError>;

    /// One job, `None` if Slurm no longer holds it.
    ///
    /// # Errors
    /// [`SlurmError`].
    fn job(&self, id: u32) -> Result<Option<JobInfo>, SlurmError> {
        Ok(self.jobs()?.into_iter().find(|j| j.id == id))
    }

    /// Every node.
    ///
    /// # Errors
    /// [`SlurmError`].
    fn nodes(&self) -> Result<Vec<NodeInfo>, SlurmError>;

    /// One node, `None` if Slurm does not know it (a dynamic node between delete and
    /// re-registration).
    ///
    /// # Errors
    /// [`SlurmError`].
    fn node(&self, name: &str) -> Result<Option<NodeInfo>, SlurmError> {
        Ok(self.nodes()?.into_iter().find(|n| n.name == name))
    }

    /// Drains `node` with the intent as its reason (running jobs go on).
    ///
    /// # Errors
    /// [`SlurmError`].
    fn drain(&self, node: &str, intent: &NodeIntent) -> Result<(), SlurmError>;

    /// Returns a drained node to service.
    ///
    /// # Errors
    /// [`SlurmError`].
    fn resume(&self, node: &str) -> Result<(), SlurmError>;

    /// Deletes a dynamic node (refused by slurmctld while jobs run there); a node already
    /// gone counts as deleted.
    ///
    /// # Errors
    /// [`SlurmError`].
    fn delete_node(&self, node: &str) -> Result<(), SlurmError>;

    /// Sets the node's `Extra` field.
    ///
    /// # Errors
    /// [`SlurmError`].
    fn set_node_extra(&self, node: &str, extra: &str) -> Result<(), SlurmError>;

    /// Requeues a job and holds it (`scontrol requeuehold`).
    ///
    /// # Errors
    /// [`SlurmError`] (e.g. the job is still completing).
    fn requeue_hold(&self, job: u32) -> Result<(), SlurmError>;

    /// Releases a held job.
    ///
    /// # Errors
    /// [`SlurmError`].
    fn release(&self, job: u32) -> Result<(), SlurmError>;

    /// Replaces a pending job's per-node TRES request (e.g. `gres:gpu:2g.20gb:1`).
    ///
    /// # Errors
    /// [`SlurmError`].
    fn set_job_tres_per_node(&self, job: u32, tres: &str) -> Result<(), SlurmError>;

    /// Sets a job's comment (what the user sees in `scontrol show job`/`squeue`).
    ///
    /// # Errors
    /// [`SlurmError`].
    fn set_job_comment(&self, job: u32, comment: &str) -> Result<(), SlurmError>;

    /// Creates a maintenance reservation (refused if one of that name exists).
    ///
    /// # Errors
    /// [`SlurmError`].
    fn create_reservation(&self, r: &MaintReservation) -> Result<(), SlurmError>;

    /// Moves a reservation's start (its duration stays).
    ///
    /// # Errors
    /// [`SlurmError`] (e.g. no such reservation).
    fn update_reservation_start(&self, name: &str, start: i64) -> Result<(), SlurmError>;

    /// Deletes a reservation. `Ok(false)`: there was none of that name.
    ///
    /// # Errors
    /// [`SlurmError`].
    fn delete_reservation(&self, name: &str) -> Result<bool, SlurmError>;

    /// Whether a reservation of that name exists (22.05 has no JSON view of reservations:
    /// only the answer's success is used, never its text).
    ///
    /// # Errors
    /// [`SlurmError`].
    fn reservation_exists(&self, name: &str) -> Result<bool, SlurmError>;
}
