//! dynmig-slurm: reading and changing Slurm from a process outside slurmctld.
//!
//! - [`SlurmApi`]: what the controller, the agent and the hooks ask of Slurm, one trait;
//! - [`commands::SlurmCommands`]: the implementation over Slurm's own commands. Reads go
//!   through JSON only (`squeue --json`, `sinfo --json`; SchedMD's OpenAPI data, v0.0.38 on
//!   22.05, newer on later releases), never text split on whitespace; every call runs with a
//!   timeout and an output cap ([`dynmig_host::process`]);
//! - [`json`]: the parsers of that JSON into [`JobInfo`] and [`NodeInfo`];
//! - [`listing`]: the queue's change listing, which says which jobs changed (never what
//!   they are) so that the controller reads the JSON of those jobs only;
//! - `fake::FakeSlurm` (feature `fake`): an in-memory Slurm for tests.
#![deny(missing_docs)]

pub mod commands;
#[cfg(any(test, feature = "fake"))]
pub mod fake;
pub mod json;
pub mod listing;
pub mod plugin;

pub use commands::SlurmCommands;
use dynmig_core::gres::GpuRequest;
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
    /// The job's uid; `None` when Slurm's JSON does not give one (never taken for root:
    /// whatever acts as the job's user refuses a job without one).
    pub uid: Option<u32>,
    /// The job's primary gid; `None` when Slurm's JSON does not give one.
    pub gid: Option<u32>,
    /// The job's working directory (relative stdout/stderr paths are under it).
    pub cwd: String,
    /// Base state.
    pub state: JobState,
    /// Why a pending job waits (`Resources`, `Priority`, ...).
    pub reason: String,
    /// GPU request per node as Slurm holds it, e.g. `gres:gpu:2g.20gb:1`: its text and its
    /// GPU entries, read once where the JSON is read.
    pub tres_per_node: GpuRequest,
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
    /// Held: priority 0 (what `scontrol hold`/`release` set; 22.05's `priority`, a number or
    /// null), or `"hold": true` (v0.0.39+, where `priority` is `{"set":..,"number":..}`).
    pub held: bool,
    /// When the job may start at the earliest (`eligible_time`: Slurm reports the job's begin
    /// time there, `--begin` or a requeue's delay), seconds since the epoch; 0 when not set.
    pub eligible_time: i64,
    /// The job's whole TRES request as slurmctld holds it (`tres_req_str`), e.g.
    /// `cpu=1,mem=16G,node=1,billing=1,gres/gpu=1,gres/gpu:2g.20gb=1`.
    pub tres_req: String,
    /// Slurm's text for the reason (`state_description`), e.g. `ReqNodeNotAvail,
    /// UnavailableNodes:catalog`; often empty.
    pub reason_detail: String,
}

/// Why a pending job is no demand for a repartition: Slurm would not start it now even if an
/// instance of its profile were free ([`JobInfo::blocked`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blocked {
    /// Held by its user or an administrator (`JobHeldUser`, `JobHeldAdmin`,
    /// `JobHoldMaxRequeue`, or priority 0): the reason as Slurm gives it.
    Held(String),
    /// Waits for other jobs (`Dependency`), or never will start (`DependencyNeverSatisfied`).
    Dependency(String),
    /// Its begin time (`--begin`, or a requeue's delay) is in the future: seconds since the
    /// epoch.
    BeginTime(i64),
    /// An association, QOS, partition or account limit (`AssocGrpGRES`,
    /// `QOSMaxJobsPerUserLimit`, `PartitionDown`, `MaxJobsPerAccount`, ...).
    Limit(String),
    /// Its TRES request names GPU types that its per-node request no longer asks for: Slurm
    /// 22.05 merged an update's new type into the old list (`gres_job_state_validate`), and
    /// no node holds both. The stale types.
    MergedGres(Vec<String>),
    /// Slurm cannot or does not start it for another reason (`BadConstraints`,
    /// `InvalidAccount`, `Licenses`, `NodeDown`, ..., or a reason this dynmig does not know).
    Other(String),
}

impl std::fmt::Display for Blocked {
    /// One clause for a user: `it is held (JobHeldUser): ...`, `it waits for the jobs it
    /// depends on (Dependency)`, ...
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Blocked::Held(r) => write!(f, "it is held ({r}): it starts only after `scontrol release`"),
            Blocked::Dependency(r) if r == "DependencyNeverSatisfied" => {
                write!(
                    f,
                    "its dependency can never be satisfied ({r}): it will not start; cancel it"
                )
            }
            Blocked::Dependency(r) => write!(f, "it waits for the jobs it depends on ({r})"),
            Blocked::BeginTime(at) => write!(f, "its begin time has not come (BeginTime; eligible at {at})"),
            Blocked::Limit(r) => write!(
                f,
                "it is blocked by a limit of its association, QOS, account or partition ({r})"
            ),
            Blocked::MergedGres(stale) => write!(
                f,
                "its request still holds the GPU type(s) {} that an update replaced (Slurm 22.05 keeps them): \
                 it cannot start; cancel it and submit it again with the new GRES",
                stale.join(", ")
            ),
            Blocked::Other(r) => write!(f, "Slurm does not start it now ({r})"),
        }
    }
}

/// The pending reasons (`state_reason`, the names of Slurm's `job_state_reason_string()` in
/// `src/common/slurm_protocol_defs.c` on 22.05, `src/common/job_state_reason.c` on 24.11 and
/// 26.05) that mean "waits for nodes or GRES Slurm would give it": a job with one of these is
/// demand. Every other reason is not ([`JobInfo::blocked`]).
///
/// - `None`: not looked at by the scheduler yet (a new or just released job);
/// - `Priority`: jobs of higher priority go first;
/// - `Resources`: the nodes or GRES it asks for are busy;
/// - `ReqNodeNotAvail`: the nodes that could run it are down, drained or reserved: what a
///   dynmig job shows while its profile is on no node but the catalog node;
/// - `Reservation`: every usable node is reserved (a `dynmig_<node>` maintenance reservation,
///   or the reservation the job asked for has not started);
/// - `SchedDefer`: scheduling deferred to the main scheduler (`SchedulerParameters=defer`);
/// - `Cleaning`: requeued, its previous run still cleaning up.
///
/// An empty reason (a JSON without the field) counts as `None`.
pub const DEMAND_REASONS: [&str; 8] = [
    "",
    "None",
    "Priority",
    "Resources",
    "ReqNodeNotAvail",
    "Reservation",
    "SchedDefer",
    "Cleaning",
];

impl JobInfo {
    /// Why Slurm would not start this pending job now even with a free instance of its
    /// profile; `None`: it waits only for resources (it is demand). Checked in this order:
    ///
    /// 1. held (priority 0, [`JobInfo::held`]) or the reasons `JobHeldUser`, `JobHeldAdmin`,
    ///    `JobHoldMaxRequeue`;
    /// 2. the TRES request names a GPU type that `tres_per_node` does not (Slurm 22.05's merge
    ///    on `scontrol update gres=`, see [`Blocked::MergedGres`]);
    /// 3. a begin time after `now` ([`JobInfo::eligible_time`]) or the reason `BeginTime`;
    /// 4. the reason: `Dependency`/`DependencyNeverSatisfied`; those of limits (`Assoc*`,
    ///    `QOS*`, `Partition*`, `Max*` but `MaxPoweredUpNodes`, `AccountNotAllowed`,
    ///    `AccountingPolicy`, `JobArrayTaskLimit`); [`DEMAND_REASONS`] are demand; any other
    ///    (`BadConstraints`, `InvalidAccount`, `InvalidQOS`, `JobLaunchFailure`, `Licenses`,
    ///    `NodeDown`, `DeadLine`, a reason of a later release) is [`Blocked::Other`].
    ///
    /// The reason list is a whitelist on purpose: a reason added by a later Slurm is no
    /// demand until it is read here, so the controller never drains a node for a job that
    /// would not start on it. The state is not looked at: call it for pending jobs.
    pub fn blocked(&self, now: i64) -> Option<Blocked> {
        let r = self.reason.as_str();
        if self.held || matches!(r, "JobHeldUser" | "JobHeldAdmin" | "JobHoldMaxRequeue") {
            let why = if r.starts_with("JobHeld") || r == "JobHoldMaxRequeue" {
                r
            } else {
                "priority 0"
            };
            return Some(Blocked::Held(why.to_string()));
        }
        let stale = self.stale_gpu_types();
        if !stale.is_empty() {
            return Some(Blocked::MergedGres(stale));
        }
        if self.eligible_time > now || r == "BeginTime" {
            return Some(Blocked::BeginTime(self.eligible_time));
        }
        if DEMAND_REASONS.contains(&r) {
            return None;
        }
        if matches!(r, "Dependency" | "DependencyNeverSatisfied") {
            return Some(Blocked::Dependency(r.to_string()));
        }
        let limit = ["Assoc", "QOS", "Partition", "Max"].iter().any(|p| r.starts_with(p)) && r != "MaxPoweredUpNodes"
            || matches!(r, "AccountNotAllowed" | "AccountingPolicy" | "JobArrayTaskLimit");
        Some(if limit {
            Blocked::Limit(r.to_string())
        } else {
            Blocked::Other(r.to_string())
        })
    }

    /// Whether the job is pending and Slurm would start it once its resources are free: the
    /// controller's demand ([`JobInfo::blocked`]).
    pub fn is_demand(&self, now: i64) -> bool {
        self.state == JobState::Pending && self.blocked(now).is_none()
    }

    /// The GPU types the job's TRES request ([`JobInfo::tres_req`], `gres/gpu:TYPE=N`
    /// entries) names but its per-node request (`tres_per_node`) does not, sorted. Empty when
    /// either names no type (an untyped request, or no `tres_req_str` in the JSON).
    pub fn stale_gpu_types(&self) -> Vec<String> {
        let asked: Vec<&str> = self.tres_per_node.typed().map(|(t, _)| t).collect();
        if asked.is_empty() {
            return Vec::new();
        }
        let mut stale: Vec<String> = self
            .tres_req
            .split(',')
            .filter_map(|e| e.trim().strip_prefix("gres/gpu:"))
            .filter_map(|e| e.split('=').next())
            .filter(|t| !t.is_empty() && !asked.iter().any(|a| a == t))
            .map(str::to_string)
            .collect();
        stale.sort();
        stale.dedup();
        stale
    }
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
    /// The node's `NodeAddr` (Slurm's JSON `address`): where the controller wakes its agent
    /// (`[agent] wake_port`); empty if Slurm gave none.
    pub address: String,
}

impl NodeInfo {
    /// Whether the node is drained or draining.
    pub fn is_drain(&self) -> bool {
        self.flags.iter().any(|f| f == "DRAIN")
    }

    /// Whether Slurm's backfill scheduler has planned a pending job on the node (the state
    /// flag `PLANNED`, set at the end of a backfill cycle, cleared at the start of the next).
    /// Deleting such a node crashes slurmctld before 22.05.9: the next cycle dereferences the
    /// deleted node (SchedMD bug 16165, fixed in 22.05.9, "sched/backfill - fix segfault when
    /// removing a PLANNED node from system"; Debian 12 ships 22.05.8).
    pub fn is_planned(&self) -> bool {
        self.flags.iter().any(|f| f == "PLANNED")
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

    /// The queue's change listing ([`listing`]): each job slurmctld holds, with the key whose
    /// change means its JSON must be read again. `None` where this implementation has no
    /// cheap listing: the caller then reads [`SlurmApi::jobs`].
    ///
    /// # Errors
    /// [`SlurmError`].
    fn job_listing(&self) -> Result<Option<std::collections::HashMap<u32, listing::JobKey>>, SlurmError> {
        Ok(None)
    }

    /// The jobs of `ids` that Slurm holds as pending, running, suspended or completing
    /// (`squeue`'s default states), in any order: a job gone or ended since it was listed is
    /// left out, and so are the ended tasks of an array whose id is asked for (`squeue
    /// --jobs=ID` answers every task of array ID: 1,008 records for one id in the 24.11 queue
    /// campaign, docs/results/queue-2026-11-28.md). An implementation that can only read the
    /// whole queue (this default; 22.05's `squeue --json`) returns all of it: the caller keeps
    /// what it has read.
    ///
    /// # Errors
    /// [`SlurmError`].
    fn jobs_by_id(&self, ids: &[u32]) -> Result<Vec<JobInfo>, SlurmError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        self.jobs()
    }

    /// The jobs of `ids` that Slurm still holds in any state, ended ones included (slurmctld
    /// keeps an ended job for `MinJobAge`, 300 s by default), in any order; only jobs asked
    /// for. Many ids cost one read: the history service names the runs the Epilogs recorded
    /// with one call every few seconds, not one per job (docs/history.md, "Job names").
    /// This default reads the whole queue.
    ///
    /// # Errors
    /// [`SlurmError`].
    fn jobs_in_any_state(&self, ids: &[u32]) -> Result<Vec<JobInfo>, SlurmError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let want: std::collections::HashSet<u32> = ids.iter().copied().collect();
        Ok(self.jobs()?.into_iter().filter(|j| want.contains(&j.id)).collect())
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

    /// Sets a job's `AdminComment` (where job_submit/dynmig keeps its decision record):
    /// only root, SlurmUser or an operator may.
    ///
    /// # Errors
    /// [`SlurmError`].
    fn set_job_admin_comment(&self, job: u32, comment: &str) -> Result<(), SlurmError>;

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

#[cfg(test)]
mod tests;
