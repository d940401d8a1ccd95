//! A node from the config: its initial layout (`dynmig init-node`), and its agent.

use crate::agent::{Agent, AgentSettings};
use crate::hooks::node_backend;
use crate::paths::{event_log, NodePaths};
use crate::reregister::{slurmd_pid_file, DynamicNode};
use anyhow::{anyhow, bail, Context, Result};
use dynmig_core::config::{Backend, Config};
use dynmig_core::geometry::NodeLayout;
use dynmig_core::protocol::event::{Event, EventKind};
use dynmig_gpu::{apply_transition, Ownership};
use dynmig_slurm::SlurmCommands;
use std::path::Path;
use std::time::Duration;

/// Gives a node's GPUs the group's initial layout if they hold no instance, writes gres.conf,
/// and returns the `Gres=` string for `slurmd -Z --conf`. On a node without an instance
/// record yet, the instances its GPUs hold are adopted as dynmig's
/// ([`dynmig_gpu::Ownership`]): running `init-node` hands the node's GPUs to dynmig.
///
/// # Errors
/// The node is in no group, the backend fails, or gres.conf cannot be written.
pub fn init_node(config: &Config, node: &str) -> Result<String> {
    let group = config
        .group_of(node)
        .ok_or_else(|| anyhow!("node '{node}' is in no [[node_group]] of the config"))?;
    let mut backend = node_backend(config, node)?;
    let gpus = backend.gpus()?;
    let paths = NodePaths::of(config, node);
    let record = paths.owned_instances();
    let mut owned = Ownership::load(&record)?;
    if !record.exists() {
        // The administrator hands the node to dynmig: what its GPUs hold now is dynmig's.
        owned.adopt(&gpus)?;
    }
    if gpus.iter().all(|g| g.instances.is_empty()) {
        let target = group.initial_node_layout();
        apply_transition(backend.as_mut(), group.gpu_model, &target, &mut owned).context("initial layout")?;
    }
    if let Some(dir) = paths.gres_conf.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let gres = dynmig_gpu::gres_conf::write_for(backend.as_ref(), &paths.gres_conf)?;
    let layout = NodeLayout {
        gpus: backend.gpus()?.iter().map(|g| g.layout()).collect(),
    };
    event_log(config).append(
        &Event::at(dynmig_host::clock::now_secs_f64(), EventKind::Init, node)
            .layout(&layout)
            .encode(),
    );
    Ok(gres)
}

/// The agent of `node` as the config describes it.
///
/// # Errors
/// The node is in no group, a simulated node has no slurm.conf, or the backend fails.
pub fn make_agent(config: &Config, node: &str) -> Result<Agent> {
    let group = config
        .group_of(node)
        .ok_or_else(|| anyhow!("node '{node}' is in no [[node_group]] of the config"))?;
    let paths = NodePaths::of(config, node);
    std::fs::create_dir_all(&paths.state_dir)?;
    let slurm_conf = paths.slurm_conf_dir.join("slurm.conf");
    let mut extra_args = Vec::new();
    if slurm_conf.exists() {
        extra_args = vec!["-f".to_string(), slurm_conf.display().to_string()];
    } else if group.backend == Backend::Simulated && !Path::new("/etc/slurm/slurm.conf").exists() {
        bail!("no slurm.conf at {}", slurm_conf.display());
    }
    let conf_text = dynmig_host::fs::read_text_bounded(&slurm_conf, 4 << 20)
        .ok()
        .flatten()
        .unwrap_or_default();
    let reregister = DynamicNode {
        slurmd: config.paths.slurmd.clone(),
        extra_args,
        pid_file: slurmd_pid_file(&conf_text, node),
        node_conf: group.node_conf.clone(),
        timeout: Duration::from_secs(20),
    };
    let mut agent = Agent::new(
        AgentSettings {
            node: node.to_string(),
            model: group.gpu_model,
            gpus: group.gpus as usize,
            paths,
            poll: Duration::from_secs(2),
            register_timeout: Duration::from_secs(60),
        },
        node_backend(config, node)?,
        Box::new(SlurmCommands::from_config(config)),
        Box::new(reregister),
        event_log(config),
    );
    agent.metrics.set_per_job(config.agent.metrics_per_job);
    Ok(agent)
}
