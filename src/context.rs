//! Loading the config and deriving what each part needs from it: a node's paths, its GPU
//! backend, the Slurm commands, the policy, the managed nodes.
//!
//! Per-node paths: `paths.gres_conf` and `paths.slurm_conf_dir` may contain `{node}`, which is
//! replaced by the node name (on a real cluster each node has its own /etc/slurm, so the
//! plain paths are right; the local test cluster keeps every node's files on one machine).
//! The agent's journal and the simulated backend's state live in
//! `<state_dir>/nodes/<node>/`, the simulated device files in `<device_dir>/<node>/`, and the
//! event log is `<state_dir>/events.jsonl`.

use crate::backend::{GpuBackend, NvmlBackend, SimulatedBackend};
use crate::controller::ManagedNode;
use crate::events::EventLog;
use crate::slurm::SlurmCommands;
use anyhow::{anyhow, bail, Context, Result};
use dynmig_core::config::{parse_config, AllowedLayouts, Backend, Config, NodeGroup, PolicyConfig};
use dynmig_core::geometry::all_layouts;
use dynmig_core::policy::{DemandDriven, NoChange, Policy, PolicyLimits};
use std::path::{Path, PathBuf};

/// Environment variable naming the config file.
pub const CONFIG_ENV: &str = "DYNMIG_CONFIG";
/// Where the config is read from when neither `--config` nor [`CONFIG_ENV`] says.
pub const DEFAULT_CONFIG: &str = "/etc/slurm/dynmig.toml";

/// A loaded config and where it came from.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// The config.
    pub config: Config,
    /// The file it was read from; `None` for the embedded defaults.
    pub source: Option<PathBuf>,
}

/// A node's files.
#[derive(Debug, Clone)]
pub struct NodePaths {
    /// Agent journal, pid file, simulated GPU state.
    pub state_dir: PathBuf,
    /// Simulated device files.
    pub device_dir: PathBuf,
    /// The node's gres.conf.
    pub gres_conf: PathBuf,
    /// The node's slurm.conf directory.
    pub slurm_conf_dir: PathBuf,
}

fn subst(p: &Path, node: &str) -> PathBuf {
    PathBuf::from(p.to_string_lossy().replace("{node}", node))
}

impl Ctx {
    /// Loads the config: `explicit` path, else `$DYNMIG_CONFIG`, else /etc/slurm/dynmig.toml;
    /// if none of these exists and none was named, the embedded defaults.
    ///
    /// # Errors
    /// A named file that cannot be read, or any config error (with key and line).
    pub fn load(explicit: Option<&Path>) -> Result<Self> {
        let named = explicit
            .map(Path::to_path_buf)
            .or_else(|| std::env::var_os(CONFIG_ENV).map(PathBuf::from));
        let path = match named {
            Some(p) => p,
            None if Path::new(DEFAULT_CONFIG).exists() => PathBuf::from(DEFAULT_CONFIG),
            None => {
                return Ok(Self {
                    config: Config::default_embedded(),
                    source: None,
                })
            }
        };
        let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let config = parse_config(&text).map_err(|e| anyhow!("{}: {e}", path.display()))?;
        Ok(Self {
            config,
            source: Some(path),
        })
    }

    /// The node group of `node`.
    ///
    /// # Errors
    /// The node is in no group.
    pub fn group(&self, node: &str) -> Result<&NodeGroup> {
        self.config.group_of(node).ok_or_else(|| {
            let all: Vec<&str> = self
                .config
                .node_groups
                .iter()
                .flat_map(|g| g.nodes.iter().map(String::as_str))
                .collect();
            anyhow!(
                "node '{node}' is in no [[node_group]] of the config; known nodes: {}",
                all.join(", ")
            )
        })
    }

    /// A node's paths.
    pub fn node_paths(&self, node: &str) -> NodePaths {
        let p = &self.config.paths;
        NodePaths {
            state_dir: p.state_dir.join("nodes").join(node),
            device_dir: p.device_dir.join(node),
            gres_conf: subst(&p.gres_conf, node),
            slurm_conf_dir: subst(&p.slurm_conf_dir, node),
        }
    }

    /// The event log.
    pub fn events(&self) -> EventLog {
        EventLog::to(self.config.paths.state_dir.join("events.jsonl"))
    }

    /// The Slurm client commands.
    pub fn slurm(&self) -> SlurmCommands {
        let p = &self.config.paths;
        SlurmCommands {
            squeue: p.squeue.clone(),
            sinfo: p.sinfo.clone(),
            scontrol: p.scontrol.clone(),
            ..SlurmCommands::default()
        }
    }

    /// The simulated backend of `node` (created with MIG on and no instances if new).
    ///
    /// # Errors
    /// The node is unknown, its group uses NVML, or the state cannot be opened.
    pub fn simulated_backend(&self, node: &str) -> Result<SimulatedBackend> {
        let g = self.group(node)?;
        if g.backend != Backend::Simulated {
            bail!("node {node} uses the {:?} backend, not the simulated one", g.backend);
        }
        let paths = self.node_paths(node);
        std::fs::create_dir_all(&paths.state_dir)?;
        Ok(SimulatedBackend::open(
            &paths.state_dir.join("gpus.json"),
            &paths.device_dir,
            g.gpu_model,
            g.gpus,
        )?)
    }

    /// The GPU backend of `node`.
    ///
    /// # Errors
    /// As [`Self::simulated_backend`]; for `backend = "nvml"`, NVML cannot be loaded or a GPU
    /// is not of the group's `gpu_model` ([`NvmlBackend::open_expecting`]).
    pub fn backend(&self, node: &str) -> Result<Box<dyn GpuBackend>> {
        let g = self.group(node)?;
        match g.backend {
            Backend::Simulated => Ok(Box::new(self.simulated_backend(node)?)),
            Backend::Nvml => Ok(Box::new(
                NvmlBackend::open_expecting(g.gpu_model, g.allow_mig_mode_change)
                    .with_context(|| format!("node {node}: NVML backend"))?,
            )),
        }
    }

    /// Every node dynmig manages, with the layouts its GPUs may take.
    pub fn managed_nodes(&self) -> Vec<ManagedNode> {
        let mut out = Vec::new();
        for g in &self.config.node_groups {
            let allowed = match &g.allowed_layouts {
                AllowedLayouts::All => all_layouts(g.gpu_model),
                AllowedLayouts::Only(v) => v.clone(),
            };
            for n in &g.nodes {
                out.push(ManagedNode {
                    name: n.clone(),
                    model: g.gpu_model,
                    gpus: g.gpus as usize,
                    allowed: allowed.clone(),
                });
            }
        }
        out
    }

    /// The configured policy.
    pub fn policy(&self) -> Box<dyn Policy> {
        let c = &self.config.controller;
        match self.config.policy {
            PolicyConfig::Demand { min_gain, .. } => Box::new(DemandDriven::new(PolicyLimits {
                max_concurrent: c.max_concurrent_repartitions as usize,
                min_layout_lifetime: c.min_layout_lifetime,
                min_gain,
            })),
            PolicyConfig::Static | PolicyConfig::None => Box::new(NoChange),
        }
    }
}
