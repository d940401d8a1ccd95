//! The administrator's commands that read the config and Slurm: `config`, `layouts`,
//! `gres-conf`, `doctor`, `plan` and `status`.

use super::load_config;
use anyhow::{anyhow, Context, Result};
use clap::Subcommand;
use dynmig_controller::{managed_nodes, pass, policy_from_config, JobFeed, PassSettings};
use dynmig_core::geometry::{all_layouts, maximal_layouts, model_by_name, model_names, ProfileCounts};
use dynmig_slurm::SlurmCommands;
use std::path::{Path, PathBuf};

/// `dynmig config ...`.
#[derive(Subcommand)]
pub enum ConfigCmd {
    /// Check the config (the file given, or the one --config / $DYNMIG_CONFIG names).
    Check {
        /// File to check.
        file: Option<PathBuf>,
    },
    /// Print the embedded default config's summary.
    Defaults,
}

/// `dynmig config check | defaults`: the config's source and summary.
///
/// # Errors
/// The config is refused (the first error with its key, line and what is allowed).
pub fn config(explicit: Option<&Path>, cmd: ConfigCmd) -> Result<()> {
    let config = match cmd {
        ConfigCmd::Check { file } => {
            let (config, source) = load_config(file.as_deref().or(explicit))?;
            let from = source.map_or("embedded defaults".to_string(), |p| p.display().to_string());
            println!("{from}: ok");
            config
        }
        ConfigCmd::Defaults => dynmig_core::config::Config::default_embedded(),
    };
    print!("{}", dynmig_controller::status::config_summary(&config));
    Ok(())
}

/// `dynmig layouts`: the valid (or only the maximal) layouts of one GPU of `model`.
///
/// # Errors
/// An unknown model.
pub fn layouts(model: &str, maximal: bool) -> Result<()> {
    let m = model_by_name(model)
        .with_context(|| format!("unknown GPU model '{model}'; known: {}", model_names().join(", ")))?;
    let layouts: Vec<ProfileCounts> = if maximal {
        maximal_layouts(m).iter().map(|l| ProfileCounts::of(l)).collect()
    } else {
        all_layouts(m)
    };
    for l in &layouts {
        println!("{l}");
    }
    eprintln!("{} layouts of {}", layouts.len(), m.name);
    Ok(())
}

/// `dynmig gres-conf --billing-weights`: the slurm.conf settings that bill each MIG type of
/// the config's GPU models by its memory slices, `per_slice` each.
///
/// # Errors
/// The config is refused, or a weight cannot be computed.
pub fn billing_weights(explicit: Option<&Path>, per_slice: f64) -> Result<()> {
    let (config, _) = load_config(explicit)?;
    let models: Vec<_> = config.node_groups.iter().map(|g| g.gpu_model).collect();
    let w = dynmig_gpu::gres_conf::BillingWeights::for_models(&models, per_slice).map_err(|e| anyhow!(e))?;
    println!("# Bill MIG instances by memory slices (docs/gpus.md, \"Beside dcgm-exporter\").");
    println!("# In slurm.conf: extend AccountingStorageTRES, and add TRESBillingWeights to each GPU partition.");
    println!("AccountingStorageTRES={}", w.accounting_storage_tres());
    println!("TRESBillingWeights=\"{}\"", w.tres_billing_weights());
    Ok(())
}

/// `dynmig gres-conf --node N`: the node's gres.conf as its GPUs are now.
///
/// # Errors
/// No node given, the config is refused, or the node's GPUs cannot be read.
pub fn gres_conf(explicit: Option<&Path>, node: Option<String>) -> Result<()> {
    let (config, _) = load_config(explicit)?;
    let node = node.ok_or_else(|| anyhow!("--node is required without --billing-weights"))?;
    let backend = dynmig_node::hooks::node_backend(&config, &node)?;
    let gpus = backend.gpus()?;
    let entries = dynmig_gpu::gres_conf::node_entries(&gpus, |g| backend.gpu_device_file(g));
    print!("{}", dynmig_gpu::gres_conf::render(&entries));
    Ok(())
}

/// `dynmig doctor`: whether the installed plugins are builds for the running Slurm
/// ([`super::doctor::doctor`]).
///
/// # Errors
/// A plugin does not match, or what it needs cannot be read.
pub fn doctor(explicit: Option<&Path>, job_submit_plugin: Option<&Path>, spank_plugin: Option<&Path>) -> Result<()> {
    let (config, _) = load_config(explicit)?;
    if super::doctor::doctor(&config, job_submit_plugin, spank_plugin)? {
        Ok(())
    } else {
        Err(anyhow!("a dynmig plugin does not match the running Slurm"))
    }
}

/// `dynmig plan`: what the controller would do now (a dry-run pass), without changing
/// anything.
///
/// # Errors
/// The config or the policy is refused, or Slurm cannot be read.
pub fn plan(explicit: Option<&Path>) -> Result<()> {
    let (config, _) = load_config(explicit)?;
    let mut policy = policy_from_config(&config).map_err(|e| anyhow!("[policy]: {e}"))?;
    let r = pass(
        &SlurmCommands::from_config(&config),
        &managed_nodes(&config),
        policy.as_mut(),
        &mut JobFeed::new(),
        &dynmig_host::fs::LineLog::none(),
        &PassSettings {
            dry_run: true,
            ..PassSettings::from_config(&config, dynmig_host::clock::now_secs())
        },
    )?;
    println!("pending demand: {:?}", r.demand.pending);
    if r.drained.is_empty() && r.planned.is_empty() && r.moved.is_empty() && r.cancelled.is_empty() {
        println!("no repartition");
    }
    for d in r.drained {
        println!(
            "would drain {}: repartition to {} (serves {:?})",
            d.node, d.target, d.serves
        );
    }
    for d in r.planned {
        println!(
            "would reserve {} from the end of its jobs: repartition to {} (serves {:?})",
            d.node, d.target, d.serves
        );
    }
    for d in r.moved {
        println!("would move the plan of {} to {}", d.node, d.target);
    }
    for n in r.cancelled {
        println!("would cancel the plan of {n}");
    }
    Ok(())
}

/// `dynmig status`: the cluster's nodes, demand and recent events, as text or JSON; with
/// `svg`, its current layouts drawn into that file too.
///
/// # Errors
/// The config is refused, Slurm cannot be read, or the SVG cannot be written.
pub fn status(explicit: Option<&Path>, json: bool, svg: Option<&Path>) -> Result<()> {
    let (config, _) = load_config(explicit)?;
    let st = dynmig_controller::status::read_status(
        &SlurmCommands::from_config(&config),
        &managed_nodes(&config),
        &config.paths.state_dir,
        dynmig_host::clock::now_secs(),
    )?;
    if let Some(path) = svg {
        std::fs::write(path, super::pictures::status_svg(&st)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    print!("{}", if json { st.render_json() } else { st.render_text() });
    Ok(())
}
