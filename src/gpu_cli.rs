//! The `dynmig gpu ...` and `dynmig mig-parted ...` subcommands: the NVML probe, the
//! reconfiguration cost table, and mig-parted config import/export.

use crate::backend::{GpuBackend, NvmlBackend, SimulatedBackend};
use crate::gpu_probe;
use anyhow::{anyhow, bail, Context, Result};
use clap::Subcommand;
use dynmig_core::geometry::{
    destroy_all_and_recreate, model_by_name, model_names, place, plan_transition, GpuModel, ProfileCounts,
};
use dynmig_core::migparted::{self, GpuConfig};
use std::collections::BTreeMap;
use std::fmt::Write as _;
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
                print!("{}", gpu_probe::render(&report));
            }
            Ok(())
        }
        GpuCmd::Transitions { model: m } => {
            print!("{}", transitions_table(model(&m)?)?);
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

/// One row of [`transitions`]: a start layout (with its busy instances) and a target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransitionRow {
    /// Layout before.
    pub from: String,
    /// Profiles of `from` that run a job (kept by dynmig).
    pub busy: Vec<&'static str>,
    /// Layout after.
    pub to: String,
    /// Instance operations dynmig did on the simulated backend.
    pub dynmig_ops: usize,
    /// Operations of mig-parted's destroy-all-and-recreate.
    pub mig_parted_ops: usize,
    /// Whether mig-parted would destroy an instance that runs a job.
    pub mig_parted_kills_job: bool,
}

/// Representative `(from, busy profiles in from, to)` pairs for a seven-slice model, written
/// with the model's profile names by slice counts: `1g`, `1g2` (double memory), `2g`, `3g`,
/// `4g`, `7g`.
const PAIRS: &[(&str, &[&str], &str)] = &[
    ("1x7g", &[], "7x1g"),
    ("7x1g", &[], "1x7g"),
    ("7x1g", &[], "3x2g+1x1g"),
    ("2x3g", &[], "1x4g+1x3g"),
    ("1x4g+1x3g", &[], "1x4g+1x2g+1x1g"),
    ("3x2g+1x1g", &[], "2x2g+3x1g"),
    ("1x3g+1x2g+2x1g", &[], "1x3g+4x1g"),
    ("1x3g+1x2g+2x1g", &["3g"], "1x3g+4x1g"),
    ("1x4g+1x2g+1x1g", &["4g"], "1x4g+3x1g"),
    ("7x1g", &["1g"], "1x3g+4x1g"),
];

/// `"3x2g+1x1g"` in `model`'s profile names (`3x2g.20gb+1x1g.10gb`).
fn spell(model: &GpuModel, short: &str) -> Result<ProfileCounts> {
    let name = |g: &str| -> Result<&'static str> {
        let c: u8 = g.trim_end_matches('g').parse().map_err(|_| anyhow!("bad term {g}"))?;
        model
            .schedulable_profiles()
            .into_iter()
            .find(|p| p.compute_slices == c && p.id != 15)
            .map(|p| p.name)
            .ok_or_else(|| anyhow!("{} has no {g} profile", model.name))
    };
    let mut text = Vec::new();
    for term in short.split('+') {
        let (n, g) = term.split_once('x').ok_or_else(|| anyhow!("bad term {term}"))?;
        text.push(format!("{n}x{}", name(g)?));
    }
    ProfileCounts::parse(model, &text.join("+")).map_err(|e| anyhow!("{e}"))
}

/// Applies every pair of [`PAIRS`] on a fresh simulated GPU of `model` (in a temporary
/// folder): creates `from` at [`place`]'s placements, attaches a job to the busy instances,
/// then does exactly what the node agent does ([`plan_transition`], destroys, creates) and
/// checks the result; mig-parted's count is [`destroy_all_and_recreate`].
///
/// # Errors
/// A pair that does not fit `model`, or a backend failure.
pub fn transitions(model: &'static GpuModel) -> Result<Vec<TransitionRow>> {
    let dir = std::env::temp_dir().join(format!("dynmig-transitions-{}", std::process::id()));
    let mut rows = Vec::new();
    for (n, (from_s, busy_s, to_s)) in PAIRS.iter().enumerate() {
        let from = spell(model, from_s)?;
        let to = spell(model, to_s)?;
        let node = dir.join(format!("pair{n}"));
        let mut b = SimulatedBackend::open(&node.join("gpus.json"), &node.join("dev"), model, 1)?;
        let placed = place(model, &from).ok_or_else(|| anyhow!("{from} does not fit"))?;
        let mut busy_left: Vec<u8> = busy_s
            .iter()
            .map(|g| g.trim_end_matches('g').parse().unwrap_or(0))
            .collect();
        for p in &placed {
            let inst = b.create_instance(0, p.profile.name, p.start)?;
            if let Some(k) = busy_left.iter().position(|&c| c == p.profile.compute_slices) {
                busy_left.remove(k);
                b.attach_job(0, inst.gi_id, 1000 + n as u32)?;
            }
        }
        let gpu = b.gpu(0)?;
        let current: Vec<_> = gpu.instances.iter().map(|i| (i.placed, i.busy)).collect();
        let plan = plan_transition(model, &current, &to).map_err(|e| anyhow!("{from} -> {to}: {e}"))?;
        for d in &plan.destroy {
            let gi = gpu
                .instances
                .iter()
                .find(|i| i.placed == *d)
                .map(|i| i.gi_id)
                .unwrap_or(0);
            b.destroy_instance(0, gi)?;
        }
        for c in &plan.create {
            b.create_instance(0, c.profile.name, c.start)?;
        }
        let after = b.gpu(0)?;
        if after.layout() != to {
            bail!("{from} -> {to}: the simulated GPU holds {}", after.layout());
        }
        if after.instances.iter().filter(|i| i.busy).count() != busy_s.len() {
            bail!("{from} -> {to}: a busy instance was lost");
        }
        rows.push(TransitionRow {
            from: from.to_string(),
            busy: busy_s.to_vec(),
            to: to.to_string(),
            dynmig_ops: plan.operations(),
            mig_parted_ops: destroy_all_and_recreate(&placed, &to),
            mig_parted_kills_job: !busy_s.is_empty() && from != to,
        });
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(rows)
}

/// [`transitions`] as a Markdown table with totals.
///
/// # Errors
/// As [`transitions`].
pub fn transitions_table(model: &'static GpuModel) -> Result<String> {
    let rows = transitions(model)?;
    let mut out = format!(
        "Instance operations (GPU-instance creates + destroys) on one simulated {}\n\n| from | busy | to | dynmig | mig-parted |\n|---|---|---|---|---|\n",
        model.name
    );
    let (mut d, mut m) = (0, 0);
    for r in &rows {
        let busy = if r.busy.is_empty() {
            "-".to_string()
        } else {
            r.busy.join(",")
        };
        let kills = if r.mig_parted_kills_job { " (kills the job)" } else { "" };
        let _ = writeln!(
            out,
            "| {} | {busy} | {} | {} | {}{kills} |",
            r.from, r.to, r.dynmig_ops, r.mig_parted_ops
        );
        d += r.dynmig_ops;
        m += r.mig_parted_ops;
    }
    let _ = writeln!(out, "| **total** | | | **{d}** | **{m}** |");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dynmig_core::geometry::{A100_80GB, H100_80GB};

    #[test]
    fn dynmig_never_needs_more_operations_than_mig_parted() {
        for m in [&A100_80GB, &H100_80GB] {
            let rows = transitions(m).unwrap();
            assert_eq!(rows.len(), PAIRS.len());
            for r in &rows {
                assert!(r.dynmig_ops <= r.mig_parted_ops, "{r:?}");
            }
            // 1x7g -> 7x1g: both must destroy the 7g and create seven 1g.
            assert_eq!((rows[0].dynmig_ops, rows[0].mig_parted_ops), (8, 8));
            // 3x2g+1x1g -> 2x2g+3x1g: one 2g becomes two 1g (3 operations), not 4 + 5.
            assert_eq!((rows[5].dynmig_ops, rows[5].mig_parted_ops), (3, 9));
        }
        let table = transitions_table(&A100_80GB).unwrap();
        assert!(
            table.contains("| 3x2g.20gb+1x1g.10gb | - | 2x2g.20gb+3x1g.10gb | 3 | 9 |"),
            "{table}"
        );
    }

    /// The subcommands next to main's global `--config` (a clash panics at parse time).
    #[test]
    fn subcommands_parse_beside_a_global_config_flag() {
        use clap::{CommandFactory, Parser};
        #[derive(Parser)]
        struct Cli {
            #[arg(long, global = true)]
            config: Option<PathBuf>,
            #[command(subcommand)]
            cmd: Top,
        }
        #[derive(clap::Subcommand)]
        enum Top {
            Gpu {
                #[command(subcommand)]
                cmd: GpuCmd,
            },
            MigParted {
                #[command(subcommand)]
                cmd: MigPartedCmd,
            },
        }
        Cli::command().debug_assert();
        let c = Cli::parse_from(["dynmig", "mig-parted", "export", "--model", "A30", "--layouts", "x=off"]);
        assert!(matches!(
            c.cmd,
            Top::MigParted {
                cmd: MigPartedCmd::Export { .. }
            }
        ));
        assert!(c.config.is_none());
    }

    #[test]
    fn export_arguments() {
        let m = &A100_80GB;
        let c = parse_export_configs(m, &["mixed=1x7g.80gb,off".into()]).unwrap();
        assert_eq!(c["mixed"][1], GpuConfig::Disabled);
        assert!(parse_export_configs(m, &["nope".into()]).is_err());
        assert!(parse_export_configs(m, &["x=9x1g.10gb".into()]).is_err());
    }
}
