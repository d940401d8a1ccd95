//! The `dynmig gpu ...` and `dynmig mig-parted ...` subcommands: the NVML probe, the
//! reconfiguration cost table, and mig-parted config import/export.

use anyhow::{anyhow, Context, Result};
use clap::Subcommand;
use dynmig_core::geometry::{model_by_name, model_names, GpuModel, ProfileCounts};
use dynmig_core::migparted::{self, GpuConfig};
use dynmig_gpu::{probe, NvmlBackend};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// `dynmig gpu ...`.
#[derive(Debug, Subcommand)]
pub enum GpuCmd {
    /// Print the GPUs NVML reports (MIG mode, profiles, placements, instances) and where they
    /// differ from dynmig's built-in tables. Read-only. Exits non-zero without NVML.
    Probe {
        /// Print the report as JSON (a fixture for tests) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Instance operations between representative layouts: dynmig against mig-parted's
    /// destroy-all-and-recreate, measured on the simulated backend (docs/reconfigure.md).
    Transitions {
        /// GPU model.
        #[arg(long, default_value = "A100-80GB")]
        model: String,
    },
}

/// `dynmig mig-parted ...`.
#[derive(Debug, Subcommand)]
pub enum MigPartedCmd {
    /// Read a mig-parted v1 YAML file and print each config as dynmig per-GPU layouts.
    Import {
        /// The mig-parted config file.
        file: PathBuf,
        /// GPU model of the node.
        #[arg(long)]
        model: String,
        /// GPUs per node.
        #[arg(long, default_value_t = 8)]
        gpus: usize,
    },
    /// Write dynmig layouts as a mig-parted v1 YAML file on stdout.
    Export {
        /// GPU model.
        #[arg(long)]
        model: String,
        /// `NAME=LAYOUT[,LAYOUT...]`, one layout per GPU (`off` for MIG disabled), e.g.
        /// `balanced=1x3g.40gb+1x2g.20gb+2x1g.10gb,1x7g.80gb`. Repeat for several configs.
        #[arg(long = "layouts", required = true)]
        configs: Vec<String>,
    },
}

fn model(name: &str) -> Result<&'static GpuModel> {
    model_by_name(name).ok_or_else(|| anyhow!("unknown GPU model '{name}'; known: {}", model_names().join(", ")))
}

/// Runs `dynmig gpu ...`.
///
/// # Errors
/// No NVML (probe), an unknown model, or a failing simulated apply.
pub fn gpu(cmd: GpuCmd) -> Result<()> {
    match cmd {
        GpuCmd::Probe { json } => {
            let nvml = NvmlBackend::open(false).map_err(|e| {
                anyhow!("cannot probe: {e}\n(no NVIDIA driver or GPU on this machine: nothing to probe)")
            })?;
            let report = nvml.probe()?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", probe::render(&report));
            }
            Ok(())
        }
        GpuCmd::Transitions { model: m } => {
            let dir = std::env::temp_dir().join(format!("dynmig-transitions-{}", std::process::id()));
            let table = dynmig_gpu::transitions::transitions_table(model(&m)?, &dir);
            let _ = std::fs::remove_dir_all(&dir);
            print!("{}", table?);
            Ok(())
        }
    }
}

/// Runs `dynmig mig-parted ...`.
///
/// # Errors
/// The file cannot be read, or any [`migparted::MigPartedError`], or a bad `--config`.
pub fn mig_parted(cmd: MigPartedCmd) -> Result<()> {
    match cmd {
        MigPartedCmd::Import { file, model: m, gpus } => {
            let m = model(&m)?;
            let text = std::fs::read_to_string(&file).with_context(|| format!("cannot read {}", file.display()))?;
            let got = migparted::import(&text, m, gpus).map_err(|e| anyhow!("{}: {e}", file.display()))?;
            for (name, per_gpu) in &got.configs {
                let v: Vec<String> = per_gpu.iter().map(GpuConfig::to_string).collect();
                println!("{name}: {}", v.join(","));
            }
            for name in &got.skipped {
                println!("{name}: skipped (no entry for {})", m.name);
            }
            Ok(())
        }
        MigPartedCmd::Export { model: m, configs } => {
            let m = model(&m)?;
            print!("{}", migparted::export(m, &parse_export_configs(m, &configs)?));
            Ok(())
        }
    }
}

/// Reads `NAME=L0,L1,...` arguments (`off` for MIG disabled).
fn parse_export_configs(m: &GpuModel, args: &[String]) -> Result<BTreeMap<String, Vec<GpuConfig>>> {
    let mut out = BTreeMap::new();
    for a in args {
        let (name, layouts) = a
            .split_once('=')
            .ok_or_else(|| anyhow!("--layouts '{a}': expected NAME=LAYOUT[,LAYOUT...]"))?;
        let per_gpu = layouts
            .split(',')
            .map(|l| match l.trim() {
                "off" => Ok(GpuConfig::Disabled),
                l => ProfileCounts::parse(m, l)
                    .map(GpuConfig::Enabled)
                    .map_err(|e| anyhow!("--layouts '{name}': {e}")),
            })
            .collect::<Result<Vec<_>>>()?;
        out.insert(name.to_string(), per_gpu);
    }
    Ok(out)
}
