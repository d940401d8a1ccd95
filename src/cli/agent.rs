//! `dynmig agent`: a node's agent on the one daemon harness ([`dynmig_host::daemon`], through
//! [`dynmig_node::agent::run_forever`]), its config read again on SIGHUP.

use super::load_config;
use anyhow::{Context, Result};
use dynmig_host::daemon::Harness;
use dynmig_node::agent::{Agent, WakeOn};
use dynmig_node::paths::NodePaths;
use std::path::Path;

/// Runs the agent of `node` with the config `explicit` names ([`load_config`]): one look and
/// exit with `once` (beside no running agent of the node), else until SIGTERM/SIGINT.
///
/// # Errors
/// The config is refused, another agent of the node runs, or the agent cannot start
/// ([`dynmig_node::agent::run_forever`]).
pub fn run(explicit: Option<&Path>, node: &str, once: bool) -> Result<()> {
    let (config, source) = load_config(explicit)?;
    super::logging::apply_config_level(config.log.level);
    let mut a = dynmig_node::setup::make_agent(&config, node)?;
    if once {
        // One agent per node, --once too: two at a time applied two targets to the
        // same GPUs (seen in tests/cluster/faults.rs).
        std::fs::create_dir_all(&a.settings.paths.state_dir)?;
        let _lock = dynmig_node::agent::InstanceLock::take(&a.settings.paths.agent_lock())?;
        println!("{:?}", a.step()?);
        return Ok(());
    }
    let harness = Harness::install().context("installing a signal handler")?;
    let metrics_listen = config.agent.metrics_listen;
    let paths = a.settings.paths.clone();
    let mut on_reload = |a: &mut Agent| {
        let new = super::signals::reload(source.as_deref(), |c| {
            if NodePaths::of(c, node) != paths {
                anyhow::bail!("the node's paths (state_dir, gres_conf, ...) changed: restart the agent for that");
            }
            if c.agent.metrics_listen != metrics_listen {
                log::warn!("[agent] metrics_listen changed: it takes effect at the next start");
            }
            dynmig_node::setup::make_agent(c, node)
        });
        if let Some((_, mut new)) = new {
            // The metrics endpoint serves the running agent's registry: keep it, with the
            // new config's per-job setting.
            std::mem::swap(&mut new.metrics, &mut a.metrics);
            new.metrics.set_per_job(a.metrics.per_job());
            *a = new;
        }
    };
    log::info!("agent of {node} started");
    // Wake-ups from the controller on every address of the node ([agent] wake_port).
    let wake_listen = (config.agent.wake_port != 0).then_some(WakeOn::Port(config.agent.wake_port));
    dynmig_node::agent::run_forever(&mut a, harness, metrics_listen, wake_listen, &mut on_reload)
}
