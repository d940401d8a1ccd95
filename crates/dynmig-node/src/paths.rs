//! Where a node's files are, from the config.
//!
//! `paths.gres_conf` and `paths.slurm_conf_dir` may contain `{node}`, replaced by the node name
//! (on a real cluster each node has its own /etc/slurm, so the plain paths are right; the
//! local test cluster keeps every node's files on one machine). The agent's journal, pid file
//! and lock, the energy ledger and the simulated backend's state live in
//! `<state_dir>/nodes/<node>/`, the simulated device files in `<device_dir>/<node>/`, and the
//! event log is `<state_dir>/events.jsonl`.

use dynmig_core::config::Config;
use std::path::{Path, PathBuf};

/// A node's files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePaths {
    /// Agent journal, pid file, lock, energy ledger, simulated GPU state.
    pub state_dir: PathBuf,
    /// Simulated device files.
    pub device_dir: PathBuf,
    /// The node's gres.conf.
    pub gres_conf: PathBuf,
    /// The node's slurm.conf directory.
    pub slurm_conf_dir: PathBuf,
    /// The node's history spool.
    pub history_spool: PathBuf,
    /// dcgm-exporter's job-mapping directory, if the config names one ([`crate::dcgm`]).
    pub dcgm_job_map: Option<PathBuf>,
}

fn subst(p: &Path, node: &str) -> PathBuf {
    PathBuf::from(p.to_string_lossy().replace("{node}", node))
}

impl NodePaths {
    /// The paths of `node` under `config`.
    pub fn of(config: &Config, node: &str) -> Self {
        let p = &config.paths;
        Self {
            state_dir: p.state_dir.join("nodes").join(node),
            device_dir: p.device_dir.join(node),
            gres_conf: subst(&p.gres_conf, node),
            slurm_conf_dir: subst(&p.slurm_conf_dir, node),
            history_spool: subst(&p.history_spool, node),
            dcgm_job_map: p.dcgm_job_map_dir.as_deref().map(|d| subst(d, node)),
        }
    }

    /// The agent's journal.
    pub fn journal(&self) -> PathBuf {
        self.state_dir.join("agent-journal.json")
    }
    /// The agent's pid file (`<pid> <start time>`).
    pub fn agent_pid(&self) -> PathBuf {
        self.state_dir.join("agent.pid")
    }
    /// The agent's single-instance lock.
    pub fn agent_lock(&self) -> PathBuf {
        self.state_dir.join("agent.lock")
    }
    /// Present while the agent waits for the jobs of a node drained for a repartition: the
    /// Epilog wakes the agent only then.
    pub fn waiting_marker(&self) -> PathBuf {
        self.state_dir.join("agent.waiting")
    }
    /// The instances dynmig created on the node ([`dynmig_gpu::Ownership`]).
    pub fn owned_instances(&self) -> PathBuf {
        self.state_dir.join("owned-instances.json")
    }
    /// The simulated backend's state.
    pub fn sim_state(&self) -> PathBuf {
        self.state_dir.join("gpus.json")
    }
    /// Simulated accounting: the peak of `job` (written by `dynmig fake-job`).
    pub fn peak(&self, job: u32) -> PathBuf {
        self.state_dir.join("peaks").join(format!("{job}.json"))
    }
}

pub use dynmig_process::event_log;
