//! What the agent's integration tests share: an agent of node n1 (two A100-80GB GPUs, both
//! whole) on the NVML backend over its own NVML stand-in (crates/nvml-standin; the
//! production GPU path), or on the simulated backend where a test needs its fault plans,
//! against a fake Slurm whose re-registration brings the node back in service, or fails.

// Each test binary uses some of these helpers, none all.
#![allow(dead_code)]

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
    /// How many of the next registrations lose their daemon before it registers (the node
    /// stays deleted, `daemon_running` says false until the next registration).
    lose: Arc<std::sync::atomic::AtomicU32>,
    /// Registrations made.
    calls: Arc<std::sync::atomic::AtomicU32>,
    running: Arc<std::sync::atomic::AtomicBool>,
}

impl Reregister for FakeRegister {
    fn reregister(
        &self,
        slurm: &dyn SlurmApi,
        node: &str,
        gres: &str,
        _checkpoint: &mut dyn FnMut(&str),
    ) -> anyhow::Result<()> {
        use std::sync::atomic::Ordering::SeqCst;
        if self.fail {
            anyhow::bail!("slurmd would not start");
        }
        self.calls.fetch_add(1, SeqCst);
        slurm.delete_node(node)?;
        let lost = self.lose.fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1)).is_ok();
        self.running.store(!lost, SeqCst);
        if !lost {
            self.slurm.state.lock().unwrap().nodes.push(idle_node(node, gres));
        }
        Ok(())
    }

    fn daemon_running(&self) -> Option<bool> {
        Some(self.running.load(std::sync::atomic::Ordering::SeqCst))
    }
}

/// What [`agent_losing_daemons`] hands back: how many registrations were made.
pub type Calls = Arc<std::sync::atomic::AtomicU32>;

/// [`agent`] whose first `lose` registrations lose their slurmd before it registers.
pub fn agent_losing_daemons(dir: &Path, slurm: &Arc<FakeSlurm>, lose: u32) -> (Agent, Calls) {
    let calls = Calls::default();
    let register = FakeRegister {
        slurm: slurm.clone(),
        fail: false,
        lose: Arc::new(lose.into()),
        calls: calls.clone(),
        running: Arc::new(true.into()),
    };
    (agent_with(dir, slurm, Box::new(register)), calls)
}

/// [`agent`] whose slurmd a test can kill: the flag is what `daemon_running` says (a
/// registration sets it again).
pub fn agent_with_killable_daemon(
    dir: &Path,
    slurm: &Arc<FakeSlurm>,
) -> (Agent, Calls, Arc<std::sync::atomic::AtomicBool>) {
    let calls = Calls::default();
    let running = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let register = FakeRegister {
        slurm: slurm.clone(),
        fail: false,
        lose: Arc::new(0.into()),
        calls: calls.clone(),
        running: running.clone(),
    };
    (agent_with(dir, slurm, Box::new(register)), calls, running)
}

pub fn layout(text: &str) -> NodeLayout {
    NodeLayout::parse(&A100_80GB, 2, text).unwrap()
}

pub fn agent(dir: &Path, slurm: &Arc<FakeSlurm>, fail_register: bool) -> Agent {
    let register = FakeRegister {
        slurm: slurm.clone(),
        fail: fail_register,
        lose: Arc::default(),
        calls: Arc::default(),
        running: Arc::new(true.into()),
    };
    agent_with(dir, slurm, Box::new(register))
}

/// An agent of node n1 on two whole A100-80GB GPUs in `dir` (NVML on the stand-in),
/// re-registering through `register`.
pub fn agent_with(dir: &Path, slurm: &Arc<FakeSlurm>, register: Box<dyn Reregister>) -> Agent {
    agent_on(Backend::Nvml, dir, slurm, register)
}

/// [`agent`] on the simulated backend (tests of its fault plans).
pub fn agent_simulated(dir: &Path, slurm: &Arc<FakeSlurm>) -> Agent {
    let register = FakeRegister {
        slurm: slurm.clone(),
        fail: false,
        lose: Arc::default(),
        calls: Arc::default(),
        running: Arc::new(true.into()),
    };
    agent_on(Backend::Simulated, dir, slurm, Box::new(register))
}

/// The NVML stand-in of the agent made by [`agent_with`] in `dir`.
pub fn standin(dir: &Path) -> nvml_standin::StandIn {
    nvml_standin::StandIn::open(&dir.join("nvml")).unwrap()
}

fn agent_on(kind: Backend, dir: &Path, slurm: &Arc<FakeSlurm>, register: Box<dyn Reregister>) -> Agent {
    let mut nvml = dynmig_core::config::NvmlAccess::default();
    if kind == Backend::Nvml {
        let mut spec = nvml_standin::NodeSpec::new("A100-80GB", 2);
        spec.mig_enabled = true;
        spec.device_root = Some(dir.join("root"));
        let s = nvml_standin::StandIn::install(&dir.join("nvml"), &spec).unwrap();
        nvml.library = Some(s.library_path());
        nvml.device_root = dir.join("root");
    }
    let paths = NodePaths {
        state_dir: dir.join("state"),
        device_dir: dir.join("dev"),
        gres_conf: dir.join("gres.conf"),
        slurm_conf_dir: dir.to_path_buf(),
        history_spool: dir.join("spool"),
        dcgm_job_map: None,
    };
    std::fs::create_dir_all(&paths.state_dir).unwrap();
    let mut backend = open_backend(
        kind,
        &BackendSettings {
            model: &A100_80GB,
            gpus: 2,
            allow_mig_mode_change: false,
            sim_state_file: paths.sim_state(),
            sim_device_dir: paths.device_dir.clone(),
            nvml,
        },
    )
    .unwrap();
    let mut owned = dynmig_gpu::Ownership::load(&paths.owned_instances()).unwrap();
    dynmig_gpu::apply_transition(backend.as_mut(), &A100_80GB, &layout("1x7g.80gb,1x7g.80gb"), &mut owned).unwrap();
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
        register,
        LineLog::to(dir.join("events.jsonl")),
    )
}

pub fn drained_node(target: &str) -> dynmig_slurm::NodeInfo {
    let mut n = idle_node("n1", "gpu:7g.80gb:2");
    n.flags.push("DRAIN".into());
    n.reason = NodeIntent::Repartition(layout(target)).encode();
    n
}
