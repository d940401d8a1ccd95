//! dynmig.toml as written: serde types with every key optional where a default exists and
//! unknown keys refused. [`super::validate`] turns them into a [`super::Config`].

use crate::types::{MultiGpu, WholeGpu};
use serde::Deserialize;
use toml::Spanned;

type S<T> = Option<Spanned<T>>;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    pub version: Spanned<i64>,
    #[serde(default)]
    pub paths: RawPaths,
    #[serde(default)]
    pub estimator: RawEstimator,
    #[serde(default)]
    pub history: RawHistory,
    #[serde(default)]
    pub jobs: RawJobs,
    #[serde(default)]
    pub controller: RawController,
    #[serde(default)]
    pub policy: RawPolicy,
    #[serde(default)]
    pub agent: RawAgent,
    #[serde(default)]
    pub log: RawLog,
    #[serde(default)]
    pub node_group: Vec<RawNodeGroup>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPaths {
    pub state_dir: S<String>,
    pub slurm_conf_dir: S<String>,
    pub gres_conf: S<String>,
    pub device_dir: S<String>,
    pub history_db: S<String>,
    pub history_snapshot: S<String>,
    pub history_spool: S<String>,
    pub slurmd: S<String>,
    pub scontrol: S<String>,
    pub squeue: S<String>,
    pub sinfo: S<String>,
    pub sacct: S<String>,
    pub sacctmgr: S<String>,
    pub dcgm_job_map_dir: S<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEstimator {
    pub default_mem: S<String>,
    pub cuda_context: S<String>,
    pub model_margin: S<f64>,
    pub model_margin_infer: S<f64>,
    pub history_quantile: S<f64>,
    pub history_margin: S<f64>,
    pub history_min_samples: S<i64>,
    pub history_window: S<i64>,
    pub max_oom_restarts: S<i64>,
    pub oom_peak_fraction: S<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHistory {
    pub store: S<String>,
    pub sacct_interval: S<String>,
    pub sacct_window: S<String>,
    pub server: S<String>,
    pub listen: S<String>,
    pub snapshot_refresh: S<String>,
    pub metrics_listen: S<String>,
    pub max_connections: S<i64>,
    pub connections_per_address: S<i64>,
    pub checks_per_minute: S<i64>,
    pub check_burst: S<i64>,
    pub max_records: S<i64>,
    pub max_records_per_user: S<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawJobs {
    pub whole_gpu: Option<WholeGpu>,
    pub multi_gpu: Option<MultiGpu>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawController {
    pub interval: S<String>,
    pub max_concurrent_repartitions: S<i64>,
    pub min_layout_lifetime: S<String>,
    pub drain_timeout: S<String>,
    pub drain: Option<crate::types::DrainMode>,
    pub reservation_duration: S<String>,
    pub metrics_listen: S<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAgent {
    pub metrics_listen: S<String>,
    pub metrics_per_job: Option<Spanned<bool>>,
    pub wake_port: S<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLog {
    pub level: S<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum PolicyKind {
    Demand,
    Plan,
    Consolidate,
    Mpc,
    Guarded,
    Adaptive,
    Learned,
    Static,
    None,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPolicy {
    /// `None`: the default, decided with the node groups (`validate::policy`).
    pub kind: Option<PolicyKind>,
    pub forecast_window: S<String>,
    pub min_gain: S<i64>,
    pub horizon: S<String>,
    pub max_wait: S<String>,
    pub lookahead: S<String>,
    pub model: S<String>,
    pub node_types: S<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNodeGroup {
    pub name: Spanned<String>,
    pub nodes: Spanned<toml::Value>,
    pub gpu_model: Spanned<String>,
    pub gpus: Spanned<i64>,
    pub backend: super::Backend,
    pub initial_layout: S<String>,
    pub allowed_layouts: S<toml::Value>,
    pub node_conf: S<String>,
    pub allow_mig_mode_change: S<bool>,
    pub nvml_library: S<String>,
    pub nvml_device_root: S<String>,
    pub nvml_timeout: S<String>,
}
