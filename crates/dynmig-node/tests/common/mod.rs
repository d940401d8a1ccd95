//! What the agent's integration tests share: an agent on the simulated backend (node n1, two
//! A100-80GB GPUs, both whole) against a fake Slurm whose re-registration brings the node
//! back in service, or fails.

use dynmig_core::config::Backend;
use dynmig_core::geometry::{NodeLayout, A100_80GB};
use dynmig_core::protocol::intent::NodeIntent;
use dynmig_gpu::{open_backend, BackendSettings};
use dynmig_host::fs::LineLog;
use dynmig_node::agent::{Agent, AgentSettings};
use dynmig_node::paths::NodePaths;
use dynmig_node::reregister::Reregister;
use dynmig_slurm::fake::{idle_node, FakeSlurm};
use dynmig_slurm::SlurmApi;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Stands in for `slurmd -Z`: the node comes back, in service, with the new GRES.
struct FakeRegister {
    slurm: Arc<FakeSlurm>,
    fail: bool,
}

impl Reregister for FakeRegister {
    fn reregister(
        &self,
        slurm: &dyn SlurmApi,
        node: &str,
        gres: &str,
        _checkpoint: &mut dyn FnMut(&str),
    ) -> anyhow::Result<()> {
        if self.fail {
            anyhow::bail!("slurmd would not start");
        }
        slurm.delete_node(node)?;
        self.slurm.state.lock().unwrap().nodes.push(idle_node(node, gres));
        Ok(())
    }
}

pub fn layout(text: &str) -> NodeLayout {
    NodeLayout::parse(&A100_80GB, 2, text).unwrap()
}

pub fn agent(dir: &Path, slurm: &Arc<FakeSlurm>, fail_register: bool) -> Agent {
    let paths = NodePaths {
        state_dir: dir.join("state"),
        device_dir: dir.join("dev"),
        gres_conf: dir.join("gres.conf"),
        slurm_conf_dir: dir.to_path_buf(),
        history_spool: dir.join("spool"),
    };
    std::fs::create_dir_all(&paths.state_dir).unwrap();
    let mut backend = open_backend(
        Backend::Simulated,
        &BackendSettings {
            model: &A100_80GB,
            gpus: 2,
            allow_mig_mode_change: false,
            sim_state_file: paths.sim_state(),
            sim_device_dir: paths.device_dir.clone(),
        },
    )
    .unwrap();
    dynmig_gpu::apply_transition(backend.as_mut(), &A100_80GB, &layout("1x7g.80gb,1x7g.80gb")).unwrap();
    Agent::new(
        AgentSettings {
            node: "n1".into(),
            model: &A100_80GB,
            gpus: 2,
            paths,
            poll: Duration::from_secs(1),
            register_timeout: Duration::from_secs(2),
        },
        backend,
        Box::new(slurm.clone()),
        Box::new(FakeRegister {
            slurm: slurm.clone(),
            fail: fail_register,
        }),
        LineLog::to(dir.join("events.jsonl")),
    )
}

pub fn drained_node(target: &str) -> dynmig_slurm::NodeInfo {
    let mut n = idle_node("n1", "gpu:7g.80gb:2");
    n.flags.push("DRAIN".into());
    n.reason = NodeIntent::Repartition(layout(target)).encode();
    n
}
