//! `nvml-standin`: installs the NVML stand-in into a folder and works its state, for scripts
//! (slurm/local-dynmig.sh gives each node of the local test cluster its own).
//!
//! ```text
//! nvml-standin install --dir D --board A100-80GB --gpus 2 [--mig] [--device-root R]
//! nvml-standin faults --dir D '{"faults":[...],"crash_after_mutations":1}'
//! nvml-standin show --dir D
//! ```

use clap::{Parser, Subcommand};
use nvml_standin::{Fault, NodeSpec, StandIn};
use std::path::PathBuf;

#[derive(Parser)]
#[command(about = "Install and drive dynmig's NVML stand-in (crates/nvml-standin)")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Copy the stand-in to DIR/libnvidia-ml.so.1 and write a fresh node state.
    Install {
        /// The node's folder.
        #[arg(long)]
        dir: PathBuf,
        /// A dynmig GPU model (`A100-80GB`) or a capture (`capture:h100-80gb`).
        #[arg(long)]
        board: String,
        /// GPUs on the node.
        #[arg(long)]
        gpus: u32,
        /// MIG mode on at install.
        #[arg(long)]
        mig: bool,
        /// Where the driver's device files go (dev/, proc/).
        #[arg(long)]
        device_root: Option<PathBuf>,
        /// The built cdylib to copy [default: next to this program].
        #[arg(long)]
        lib: Option<PathBuf>,
    },
    /// Replace the planned faults: JSON `{"faults": [...], "crash_after_mutations": n}`.
    Faults {
        /// The node's folder.
        #[arg(long)]
        dir: PathBuf,
        /// The plan.
        plan: String,
    },
    /// Print the node's state (JSON).
    Show {
        /// The node's folder.
        #[arg(long)]
        dir: PathBuf,
    },
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Plan {
    #[serde(default)]
    faults: Vec<Fault>,
    #[serde(default)]
    crash_after_mutations: Option<u32>,
}

fn run(cli: Cli) -> Result<(), String> {
    match cli.cmd {
        Cmd::Install {
            dir,
            board,
            gpus,
            mig,
            device_root,
            lib,
        } => {
            let mut spec = NodeSpec::new(&board, gpus);
            spec.mig_enabled = mig;
            spec.device_root = device_root;
            let s = match lib {
                Some(l) => StandIn::install_from(&l, &dir, &spec),
                None => StandIn::install(&dir, &spec),
            }
            .map_err(|e| format!("install into {}: {e}", dir.display()))?;
            println!("{}", s.library_path().display());
        }
        Cmd::Faults { dir, plan } => {
            let p: Plan = serde_json::from_str(&plan).map_err(|e| format!("bad plan: {e}"))?;
            let s = StandIn::open(&dir).map_err(|e| e.to_string())?;
            s.set_faults(p.faults).map_err(|e| e.to_string())?;
            if let Some(n) = p.crash_after_mutations {
                s.crash_after_mutations(n).map_err(|e| e.to_string())?;
            }
        }
        Cmd::Show { dir } => {
            let s = StandIn::open(&dir).map_err(|e| e.to_string())?;
            let st = s.read().map_err(|e| e.to_string())?;
            println!("{}", serde_json::to_string_pretty(&st).map_err(|e| e.to_string())?);
        }
    }
    Ok(())
}

fn main() {
    if let Err(e) = run(Cli::parse()) {
        eprintln!("nvml-standin: {e}");
        std::process::exit(1);
    }
}
