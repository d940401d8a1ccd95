//! `dynmig-controller`: the cluster's controller daemon on its own, as the systemd unit runs
//! it. The same daemon as `dynmig controller` ([`dynmig_controller::daemon`]), in a binary
//! that links neither the simulator's lab (reports, charts, progress bars) nor a tensor
//! library: the policies that judge layouts run the simulator's engine, and the learned
//! policy's small network is evaluated in plain Rust.

use clap::Parser;
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "dynmig-controller",
    version,
    about = "dynmig's controller: chooses and applies MIG layouts for the Slurm cluster (one per cluster)"
)]
struct Args {
    /// The config file [default: $DYNMIG_CONFIG, else /etc/slurm/dynmig.toml, else the
    /// embedded defaults].
    #[arg(long)]
    config: Option<PathBuf>,
    /// One pass, then exit.
    #[arg(long)]
    once: bool,
}

fn main() {
    let args = Args::parse();
    let sink = dynmig_process::logging::init(Some("controller"));
    if let Err(e) = dynmig_controller::daemon::run(args.config.as_deref(), args.once) {
        dynmig_process::logging::exit_failed(sink, "dynmig-controller", &e);
    }
}
