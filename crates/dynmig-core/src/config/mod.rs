//! dynmig.toml: read with serde and toml (unknown keys refused everywhere), then checked into
//! a [`Config`] whose values carry their units in their types (`Duration`, bytes, GPU model
//! tables, parsed layouts).
//!
//! Every key, its default and what it allows is documented in `docs/config.md`; the
//! commented example (`default.toml` in this folder, shipped as `slurm/dynmig.toml`) is also
//! [`Config::default_embedded`].
//!
//! ```
//! let cfg = dynmig_core::config::parse_config(r#"
//!     version = 1
//!     [[node_group]]
//!     name = "a100"
//!     nodes = "n[1-2]"
//!     gpu_model = "A100-80GB"
//!     gpus = 2
//!     backend = "simulated"
//! "#).unwrap();
//! assert_eq!(cfg.group_of("n2").unwrap().name, "a100");
//! ```

mod error;
mod hostlist;
mod raw;
mod validate;

pub use error::ConfigError;
pub use hostlist::{expand_hostlist, MAX_HOSTS, MAX_NAME};

use crate::estimate::EstimatorConfig;
use crate::geometry::{GpuModel, NodeLayout, ProfileCounts};
use crate::types::{MultiGpu, WholeGpu};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The config version this dynmig reads (`version = 1`).
pub const CONFIG_VERSION: u32 = 1;

/// The example config, which is also the embedded default. The repository ships the same
/// text as `slurm/dynmig.toml` (a test keeps the two byte-equal).
pub const EXAMPLE_TOML: &str = include_str!("default.toml");

/// A checked dynmig.toml.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `version`: always [`CONFIG_VERSION`].
    pub version: u32,
    /// `[paths]`.
    pub paths: Paths,
    /// `[estimator]`.
    pub estimator: EstimatorConfig,
    /// `[history]`.
    pub history: HistoryConfig,
    /// `[jobs]`.
    pub jobs: JobsConfig,
    /// `[controller]`.
    pub controller: ControllerConfig,
    /// `[policy]`.
    pub policy: PolicyConfig,
    /// `[agent]`.
    pub agent: AgentConfig,
    /// `[log]`.
    pub log: LogConfig,
    /// `[[node_group]]`, at least one, in file order; no node is in two groups.
    pub node_groups: Vec<NodeGroup>,
}

/// `[paths]`: where dynmig reads and writes, and the Slurm commands it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    /// dynmig's own state (absolute). Default `/var/lib/dynmig`.
    pub state_dir: PathBuf,
    /// Slurm's configuration directory (absolute). Default `/etc/slurm`.
    pub slurm_conf_dir: PathBuf,
    /// The gres.conf the node agent writes (absolute). Default `<slurm_conf_dir>/gres.conf`.
    pub gres_conf: PathBuf,
    /// Where the simulated backend creates its fake device files (absolute).
    /// Default `<state_dir>/devices`.
    pub device_dir: PathBuf,
    /// The job history the estimator learns from (absolute). Default `<state_dir>/history.db`.
    pub history_db: PathBuf,
    /// The compact per-(user, job name) summary of the history that job_submit/dynmig reads
    /// (absolute). Default `<state_dir>/history-snapshot.tsv`.
    pub history_snapshot: PathBuf,
    /// Where a node keeps history records not yet delivered (absolute; may hold `{node}`).
    /// Default `<state_dir>/spool`.
    pub history_spool: PathBuf,
    /// slurmd: an absolute path or a bare name looked up in `PATH`. Default `/usr/sbin/slurmd`.
    pub slurmd: PathBuf,
    /// scontrol. Default `/usr/bin/scontrol`.
    pub scontrol: PathBuf,
    /// squeue. Default `/usr/bin/squeue`.
    pub squeue: PathBuf,
    /// sinfo. Default `/usr/bin/sinfo`.
    pub sinfo: PathBuf,
    /// sacct (`[history] store = "slurmdbd"`). Default `/usr/bin/sacct`.
    pub sacct: PathBuf,
    /// sacctmgr (`[history] store = "slurmdbd"`). Default `/usr/bin/sacctmgr`.
    pub sacctmgr: PathBuf,
    /// dcgm-exporter's HPC job-mapping directory (its `--hpc-job-mapping-dir`,
    /// `DCGM_HPC_JOB_MAPPING_DIR`; absolute, may hold `{node}`): the Prolog writes one file per
    /// GPU instance a job holds, named `<gpu>.<GPU_I_ID>` (`<gpu>` for a whole GPU), holding
    /// the job id, and the Epilog removes the job's files, so that dcgm-exporter labels each
    /// instance's metrics with `hpc_job` (NVIDIA/dcgm-exporter README, "How to include HPC
    /// jobs in metric labels"; per-instance names since dcgm-exporter pull request #602).
    /// Default: not set, no files written.
    pub dcgm_job_map_dir: Option<PathBuf>,
}

/// `[history]`: how records travel from the nodes to the controller host (docs/history.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryConfig {
    /// `store`: where the records are kept (docs/history.md, "Which store").
    /// Default [`HistoryStore::Server`].
    pub store: HistoryStore,
    /// `sacct_interval`: with `store = "slurmdbd"`, how often `dynmig history serve` rebuilds
    /// the snapshot from `sacct --json` (at least 1 s). Default 60 s.
    pub sacct_interval: Duration,
    /// `sacct_window`: with `store = "slurmdbd"`, how far back `sacct` looks (at least 1 h).
    /// Default 30 days.
    pub sacct_window: Duration,
    /// `server`: `host:port` the nodes send records to. Default `None`: records stay in the
    /// node's spool until a server is configured.
    pub server: Option<String>,
    /// `listen`: `addr:port` that `dynmig history serve` listens on. Default: `server`.
    pub listen: Option<String>,
    /// `snapshot_refresh`: how often job_submit/dynmig looks whether the snapshot changed
    /// (at least 10 ms). Default 5 s.
    pub snapshot_refresh: Duration,
    /// `metrics_listen`: `ip:port` where `dynmig history serve` serves Prometheus metrics (a
    /// port alone means `127.0.0.1:<port>`). Default `None`: no metrics endpoint.
    pub metrics_listen: Option<SocketAddr>,
    /// `max_connections`: connections `dynmig history serve` serves at once (1 to 4096).
    /// Default 64.
    pub max_connections: u32,
    /// `connections_per_address`: connections one address (an IPv4 address, an IPv6 /64) may
    /// hold at once (1 to 4096). Default 4.
    pub connections_per_address: u32,
    /// `checks_per_minute`: credential checks (each an `unmunge`) one address may have per
    /// minute, the refill of its token bucket (1 to 60,000). Default 1200 (docs/history.md).
    pub checks_per_minute: u32,
    /// `check_burst`: credential checks one address may have at once after a quiet spell, the
    /// size of its token bucket (1 to 100,000). Default 120.
    pub check_burst: u32,
    /// `max_records`: records the history keeps in all; beyond it the user who holds the most
    /// loses their oldest (1 to 10,000,000). Default 200,000.
    pub max_records: u32,
    /// `max_records_per_user`: records the history keeps of one user, their newest
    /// (1 to 10,000,000). Default 20,000.
    pub max_records_per_user: u32,
}

/// `[history] store`: where the Epilog's job records go and where the snapshot comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HistoryStore {
    /// `"server"`: dynmig's own service (`dynmig history serve`: TCP, munge, SQLite), for
    /// sites without slurmdbd.
    Server,
    /// `"slurmdbd"`: Slurm's accounting. The Epilog writes the record into the job's
    /// `SystemComment` with `sacctmgr`; `dynmig history serve` builds the snapshot from
    /// `sacct --json`.
    Slurmdbd,
}

/// `[agent]`: the node agent daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AgentConfig {
    /// `metrics_listen`: `ip:port` where each node's agent serves Prometheus metrics (a port
    /// alone, `"9751"`, means `127.0.0.1:9751`). Default `None`: no metrics endpoint.
    pub metrics_listen: Option<SocketAddr>,
    /// `metrics_per_job`: whether the agent's metrics carry per-job series (the energy of
    /// each running job, labelled with its job id). Default `false`: the endpoint has no
    /// authentication, and job ids and their energy are what Slurm's `PrivateData=jobs`
    /// hides from other users.
    pub metrics_per_job: bool,
    /// `wake_port`: the TCP port where each node's agent takes wake-ups from the controller
    /// (a connection is a wake-up; nothing it sends is read as an instruction), on every
    /// address of the node. The controller connects to a node's Slurm `NodeAddr` on it after
    /// draining the node, so that the agent reads its node from slurmctld when there is
    /// something to see instead of polling for it. Default [`DEFAULT_WAKE_PORT`]; `0`: no
    /// wake-ups, the agent polls its node as often as before (docs/architecture.md).
    pub wake_port: u16,
}

/// The default `[agent] wake_port`.
pub const DEFAULT_WAKE_PORT: u16 = 9814;

/// `[log]`: what the daemons log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogConfig {
    /// `level`: the most verbose level logged when `RUST_LOG` is not set. Default
    /// [`LogLevel::Info`].
    pub level: LogLevel,
}

/// A log level of the `log` facade, or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum LogLevel {
    /// Nothing.
    Off,
    /// Errors only.
    Error,
    /// Errors and warnings.
    Warn,
    /// What the daemons do (drains, applies, records): the default.
    #[default]
    Info,
    /// Each step and each Slurm call's outcome.
    Debug,
    /// Everything.
    Trace,
}

impl LogLevel {
    /// The level's name as written in the config and in `RUST_LOG`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Error => "error",
            Self::Warn => "warn",
            Self::Info => "info",
            Self::Debug => "debug",
            Self::Trace => "trace",
        }
    }

    /// Every level, least verbose first.
    pub const ALL: [LogLevel; 6] = [Self::Off, Self::Error, Self::Warn, Self::Info, Self::Debug, Self::Trace];
}

/// `[jobs]`: what happens at submit to requests without a hint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobsConfig {
    /// `whole_gpu`. Default [`WholeGpu::FullProfile`].
    pub whole_gpu: WholeGpu,
    /// `multi_gpu`. Default [`MultiGpu::FullProfile`].
    pub multi_gpu: MultiGpu,
}

/// `[controller]`: timing of the controller daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControllerConfig {
    /// `interval`: time between two policy rounds (at least 100 ms). Default 5 s.
    pub interval: Duration,
    /// `max_concurrent_repartitions`: nodes being drained or reconfigured at once (at least
    /// 1). Default 1.
    pub max_concurrent_repartitions: u32,
    /// `min_layout_lifetime`: a node keeps a layout at least this long before the policy may
    /// change it again (hysteresis). Default 120 s.
    pub min_layout_lifetime: Duration,
    /// `drain_timeout`: a node that has not drained after this long is resumed with its old
    /// layout and the repartition dropped (at least 1 min). Default 30 min.
    pub drain_timeout: Duration,
    /// `drain`: how a busy node is taken out of service for a repartition. Default
    /// [`DrainMode::Reservation`](crate::types::DrainMode::Reservation).
    pub drain: crate::types::DrainMode,
    /// `reservation_duration`: length of the maintenance reservation that holds a busy node
    /// for its repartition (the controller drains the node once it starts and then deletes
    /// it; if the controller is down, the node returns to service when it ends). At least 1 min.
    /// Default 10 min.
    pub reservation_duration: Duration,
    /// `metrics_listen`: `ip:port` where the controller serves Prometheus metrics (a port
    /// alone means `127.0.0.1:<port>`). Default `None`: no metrics endpoint.
    pub metrics_listen: Option<SocketAddr>,
}

/// `[policy]`: which policy chooses layouts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyConfig {
    /// `kind = "demand"` (default): supply of each profile follows pending and forecast demand.
    Demand {
        /// `forecast_window`: how far ahead demand is forecast (at least 1 min). Default 10 min.
        forecast_window: Duration,
        /// `min_gain`: a repartition must make at least this many more pending instances
        /// runnable (at least 1). Default 1.
        min_gain: u32,
    },
    /// `kind = "plan"`, `"consolidate"` or `"mpc"`: the planning policy
    /// ([`crate::policy::planner::Planner`], docs/policy.md).
    Plan {
        /// Whether it serves the need with as few nodes as possible (`consolidate`).
        consolidate: bool,
        /// `kind = "mpc"`: the planner's proposals are made only when lookahead runs of the
        /// simulator's engine over the queue and this much forecast arrival time say they pay
        /// (model-predictive control, docs/policy.md). `lookahead`, default 4 h; `None` for
        /// `plan` and `consolidate`.
        lookahead: Option<Duration>,
        /// `horizon`: how far ahead the learned time-of-day need counts. Default 2 h.
        horizon: Duration,
        /// `max_wait`: a busy node whose running jobs' time limits end later is no candidate.
        /// Default 4 h.
        max_wait: Duration,
        /// `min_gain`: compute slices of need a change must newly serve. Default 1.
        min_gain: u32,
    },
    /// `kind = "guarded"`: each node group's `initial_layout` (the layout the site picked),
    /// left only when runs of the simulator's engine on the last 14 days say a change pays
    /// by 5% with no job class waiting longer, with a way back; sized jobs are given the
    /// types of the layout the nodes follow (docs/policy.md, "Guarded").
    Guarded {
        /// `node_types`: more per-GPU layouts a node may take, each on every GPU of the node,
        /// besides the groups' `initial_layout` and a whole GPU (the administrator's
        /// shortlist); empty: a group's `allowed_layouts` when it is a list, else none.
        node_types: Vec<ProfileCounts>,
    },
    /// `kind = "adaptive"`: the best static layout searched again every day with the
    /// simulator's engine on the jobs of the last 7 days, the nodes moved to it at their time
    /// limits (docs/policy.md, "Adaptive"). No keys of its own.
    Adaptive,
    /// `kind = "learned"`: a model trained by `dynmig train` (docs/learned.md).
    Learned {
        /// `model`: the model file (`model.safetensors`), read by the controller at start.
        model: std::path::PathBuf,
    },
    /// `kind = "static"`: every node keeps its group's `initial_layout`.
    Static,
    /// `kind = "none"`: dynmig never changes a layout.
    None,
}

/// How a node group's GPUs are driven.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// A state file and fake device files under `paths.device_dir`: tests and demos.
    Simulated,
    /// Real GPUs through NVML.
    Nvml,
}

/// Which layouts a node group's GPUs may take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowedLayouts {
    /// Every layout that fits on the GPU model.
    All,
    /// Only these (per GPU), as listed.
    Only(Vec<ProfileCounts>),
}

impl AllowedLayouts {
    /// Whether one GPU may take `layout`.
    pub fn allows(&self, layout: &ProfileCounts) -> bool {
        match self {
            AllowedLayouts::All => true,
            AllowedLayouts::Only(v) => v.contains(layout),
        }
    }
}

/// `[[node_group]]`: nodes with the same GPUs and settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeGroup {
    /// `name`: unique; letters, digits, `-`, `_`, `.`.
    pub name: String,
    /// `nodes`: node names, expanded from a list and/or Slurm hostlists (`"n[1-2]"`).
    pub nodes: Vec<String>,
    /// `gpu_model`: the model of every GPU of these nodes (name or alias of
    /// [`crate::geometry::MODELS`]).
    pub gpu_model: &'static GpuModel,
    /// `gpus`: GPUs per node, 1 to 16.
    pub gpus: u32,
    /// `backend`: `"simulated"` or `"nvml"`.
    pub backend: Backend,
    /// `initial_layout`: the layout of each GPU at install time. Default one full profile.
    pub initial_layout: ProfileCounts,
    /// `allowed_layouts`: `"all"` (default) or a list of per-GPU layouts.
    pub allowed_layouts: AllowedLayouts,
    /// `node_conf`: the node's `slurmd -Z --conf` text without `Gres=`, e.g.
    /// `"CPUs=4 RealMemory=4000"`. Default empty.
    pub node_conf: String,
    /// `allow_mig_mode_change`: whether the NVML backend may turn MIG mode on or off
    /// (default `false`). On Ampere a mode change resets the GPU; Hopper and later lose the
    /// mode at reboot or driver reload, so with `false` the site enables MIG at boot.
    pub allow_mig_mode_change: bool,
    /// NVML backend only: how the node reaches the driver ([`NvmlAccess`]).
    pub nvml: NvmlAccess,
}

/// The NVML backend's settings of a node group: `nvml_library`, `nvml_device_root` and
/// `nvml_timeout`. Paths may contain `{node}`, replaced by the node's name (the local test
/// cluster and the demo keep every node's stand-in driver on one machine).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvmlAccess {
    /// `nvml_library`: the `libnvidia-ml.so.1` to load, absolute; `None` (the default) lets
    /// the dynamic loader find the driver's as `nvidia-smi` does. Tests and the demo name
    /// the NVML stand-in (crates/nvml-standin) here.
    pub library: Option<PathBuf>,
    /// `nvml_device_root`: the root under which the driver's files are: `dev/nvidia<N>`,
    /// `dev/nvidia-caps/nvidia-cap<M>` and `proc/driver/nvidia-caps/mig-minors`. Default `/`.
    pub device_root: PathBuf,
    /// `nvml_timeout`: the longest one NVML operation (a read of a GPU, a create, a destroy,
    /// a mode change) may take before the backend gives up on it and makes no further NVML
    /// call in that process. Default 30 s; allowed 1 s to 10 min.
    pub timeout: std::time::Duration,
}

impl Default for NvmlAccess {
    fn default() -> Self {
        Self {
            library: None,
            device_root: PathBuf::from("/"),
            timeout: std::time::Duration::from_secs(30),
        }
    }
}

impl NvmlAccess {
    /// The settings for node `node`: `{node}` in the paths replaced by its name.
    pub fn for_node(&self, node: &str) -> Self {
        let subst = |p: &std::path::Path| PathBuf::from(p.to_string_lossy().replace("{node}", node));
        Self {
            library: self.library.as_deref().map(subst),
            device_root: subst(&self.device_root),
            timeout: self.timeout,
        }
    }
}

impl NodeGroup {
    /// [`Self::initial_layout`] on each of the group's GPUs.
    pub fn initial_node_layout(&self) -> NodeLayout {
        NodeLayout {
            gpus: vec![self.initial_layout.clone(); self.gpus as usize],
        }
    }
}

/// Reads and checks a dynmig.toml.
///
/// # Errors
/// The first [`ConfigError`]: unknown key, wrong type, missing key, or a value that is not
/// allowed, naming the key, its line and column, and what is allowed.
pub fn parse_config(text: &str) -> Result<Config, ConfigError> {
    let raw: raw::RawConfig = toml::from_str(text).map_err(|e| {
        let mut err = ConfigError::from_toml(text, &e);
        if let Some(help) = validate::key_help(&err.key) {
            err.message = format!("{}; allowed: {help}", err.message);
        }
        err
    })?;
    validate::validate(text, raw)
}

impl Config {
    /// The group that lists `node`.
    pub fn group_of(&self, node: &str) -> Option<&NodeGroup> {
        self.node_groups.iter().find(|g| g.nodes.iter().any(|n| n == node))
    }

    /// Each configured node's `initial_layout` on all of its GPUs, in file order (groups,
    /// then their nodes): the layout a site picked, the guarded default's base.
    pub fn initial_node_layouts(&self) -> Vec<crate::geometry::NodeLayout> {
        self.node_groups
            .iter()
            .flat_map(|g| g.nodes.iter().map(|_| g.initial_node_layout()))
            .collect()
    }

    /// The example config ([`EXAMPLE_TOML`]): nodes n1 and n2, two
    /// A100-80GB each, simulated backend, guarded policy.
    pub fn default_embedded() -> Config {
        parse_config(EXAMPLE_TOML).expect("the embedded example is valid (tested)")
    }
}
