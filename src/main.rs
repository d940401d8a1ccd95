//! `dynmig`: the command line of dynmig — controller, node agent, Prolog/Epilog, and the
//! administrator's tools.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use dynmig::cli::load_config;
use dynmig::dev::{demo, trace};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "dynmig",
    version = concat!(env!("CARGO_PKG_VERSION"), " (built with Slurm headers: ", env!("DYNMIG_SLURM_HEADERS"), ")"),
    about = "Dynamic NVIDIA MIG partitioning for Slurm"
)]
struct Cli {
    /// The config file [default: $DYNMIG_CONFIG, else /etc/slurm/dynmig.toml, else the
    /// embedded defaults].
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Check a config file: prints the first error with its key, line and what is allowed.
    Config {
        #[command(subcommand)]
        cmd: dynmig::cli::admin::ConfigCmd,
    },
    /// List the valid layouts of one GPU of a model.
    Layouts {
        /// GPU model, e.g. A100-80GB.
        #[arg(long)]
        model: String,
        /// Only the maximal layouts (no instance can be added).
        #[arg(long)]
        maximal: bool,
    },
    /// Give a node its initial layout (if its GPUs hold none), write its gres.conf, and print
    /// its Gres= string for `slurmd -Z --conf`.
    InitNode {
        /// Node name.
        #[arg(long)]
        node: String,
    },
    /// Print a node's gres.conf as its GPUs are now, or (--billing-weights) the slurm.conf
    /// settings that bill each MIG type by its memory slices.
    GresConf {
        /// Node name.
        #[arg(long, required_unless_present = "billing_weights")]
        node: Option<String>,
        /// Print `AccountingStorageTRES` and `TRESBillingWeights` for the MIG types of the
        /// config's GPU models, in proportion to memory slices (a 7g.80gb is 8 x a 1g.10gb).
        #[arg(long)]
        billing_weights: bool,
        /// With --billing-weights: the weight of one memory slice.
        #[arg(long, default_value_t = 1.0)]
        per_slice: f64,
    },
    /// Check that the dynmig plugins installed here are builds for the Slurm that runs
    /// (slurmctld's version from `scontrol show config`); exit 1 on a mismatch.
    Doctor {
        /// The job_submit plugin file [default: job_submit_dynmig.so in slurmctld's PluginDir].
        #[arg(long)]
        job_submit_plugin: Option<PathBuf>,
        /// The SPANK plugin file [default: the spank_dynmig line of PlugStackConfig].
        #[arg(long)]
        spank_plugin: Option<PathBuf>,
    },
    /// Show what the controller would do now, without changing anything.
    Plan,
    /// Run the controller (one per cluster).
    Controller {
        /// One pass, then exit.
        #[arg(long)]
        once: bool,
    },
    /// Run a node's agent (on the node, as root).
    Agent {
        /// This node's Slurm name.
        #[arg(long)]
        node: String,
        /// Look once, then exit.
        #[arg(long)]
        once: bool,
    },
    /// Slurm Prolog entry point.
    Prolog,
    /// Slurm Epilog entry point.
    Epilog,
    /// Job history: serve (controller host), show, flush a node's spool (docs/history.md).
    History {
        #[command(subcommand)]
        cmd: dynmig::cli::history::HistoryCmd,
    },
    /// A fake GPU job for the simulated backend: "allocates" --mem on its MIG instance.
    FakeJob {
        /// GPU memory to allocate, e.g. 30G.
        #[arg(long)]
        mem: String,
        /// Seconds to run when the memory fits.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
    },
    /// Requeue a job that ran out of memory on a larger profile (started by the Epilog).
    OomRestart {
        /// The node the job ran on.
        #[arg(long)]
        node: String,
        /// Job id.
        #[arg(long)]
        job: u32,
        /// Profile to requeue on; without it the job is only told why it is not requeued.
        #[arg(long)]
        to: Option<String>,
        /// What the user is told (job comment and stderr).
        #[arg(long)]
        message: String,
    },
    /// Nodes (state, layout per GPU, jobs, pending plan), pending demand and recent events.
    Status {
        /// Print the status as JSON (`ClusterStatus`, docs/architecture.md "Operations").
        #[arg(long)]
        json: bool,
        /// Also draw the cluster's current layouts into this SVG file.
        #[arg(long, value_name = "FILE")]
        svg: Option<PathBuf>,
    },
    /// Why a job waits: its profile and how it was chosen, the node being repartitioned for
    /// it and when it should start, or why nothing is planned (docs/why.md). Root may ask of
    /// any job, a user of their own.
    Why {
        /// Job id.
        job: u32,
        /// Print the answer as JSON (`WhyReport`).
        #[arg(long)]
        json: bool,
    },
    /// What a job would be given, before it is submitted: the same --mig-* options and
    /// --gres as sbatch; prints each term of the estimate, the total, the profile sbatch gives
    /// and, on each GPU model of the cluster, the profile and the next size up (docs/estimator.md).
    Estimate(dynmig::cli::estimate::EstimateArgs),
    /// Real GPUs: the NVML probe, and the reconfiguration cost table.
    Gpu {
        #[command(subcommand)]
        cmd: dynmig::cli::gpu::GpuCmd,
    },
    /// Import or export NVIDIA mig-parted v1 YAML configs.
    MigParted {
        #[command(subcommand)]
        cmd: dynmig::cli::gpu::MigPartedCmd,
    },
    /// Simulate a cluster of MIG GPUs under every policy on the real trace (or a synthetic
    /// workload) and compare them (docs/simulate.md).
    Simulate(Box<dynmig_lab::cli::SimulateArgs>),
    /// Train the learned policy in the simulator (docs/learned.md): writes the model, its
    /// checkpoints and learning curve to --out (default ./learned).
    Train(Box<dynmig_train::TrainArgs>),
    /// Train the learned residual on the guarded default in the simulator (docs/learned.md,
    /// "Residual"): writes the model kept to --model-out (default ./residual.json).
    TrainResidual(Box<dynmig_train::residual::ResidualArgs>),
    /// Trace tools.
    Trace {
        #[command(subcommand)]
        cmd: TraceCmd,
    },
    /// Replay a trace slice as sbatch jobs on the running cluster, wait, and report.
    Demo(demo::DemoArgs),
    /// The demo against the simulator: set-up for the demo's dynmig.toml, and the
    /// side-by-side table (docs/demo.md, "Simulator vs. real").
    DemoCompare {
        #[command(subcommand)]
        cmd: dynmig::dev::sim_compare::CompareCmd,
    },
}

#[derive(Subcommand)]
enum TraceCmd {
    /// Cut a slice of GPU pods out of the Alibaba trace.
    Slice {
        /// openb_pod_list_*.csv
        #[arg(long)]
        input: PathBuf,
        /// Day of the last 30 days (0-29).
        #[arg(long, default_value_t = 28)]
        day: i64,
        /// First trace-local hour.
        #[arg(long, default_value_t = 17)]
        from_hour: i64,
        /// Hour after the last.
        #[arg(long, default_value_t = 20)]
        to_hour: i64,
    },
}

fn main() {
    let cli = Cli::parse();
    let daemon = match &cli.cmd {
        Cmd::Controller { .. } => Some("controller"),
        Cmd::Agent { .. } => Some("agent"),
        Cmd::History {
            cmd: dynmig::cli::history::HistoryCmd::Serve { .. },
        } => Some("history"),
        _ => None,
    };
    let sink = dynmig::cli::logging::init(daemon);
    if let Err(e) = run(cli) {
        dynmig::cli::logging::exit_failed(sink, "dynmig", &e);
    }
}

/// Dispatches the parsed command line.
fn run(cli: Cli) -> Result<()> {
    use dynmig::cli::{admin, learn, node};
    let explicit = cli.config.as_deref();
    match cli.cmd {
        Cmd::Config { cmd } => admin::config(explicit, cmd),
        Cmd::Layouts { model, maximal } => admin::layouts(&model, maximal),
        Cmd::InitNode { node } => node::init_node(explicit, &node),
        Cmd::GresConf {
            billing_weights: true,
            per_slice,
            ..
        } => admin::billing_weights(explicit, per_slice),
        Cmd::GresConf { node, .. } => admin::gres_conf(explicit, node),
        Cmd::Doctor {
            job_submit_plugin,
            spank_plugin,
        } => admin::doctor(explicit, job_submit_plugin.as_deref(), spank_plugin.as_deref()),
        Cmd::Plan => admin::plan(explicit),
        Cmd::Controller { once } => dynmig_controller::daemon::run(explicit, once),
        Cmd::Agent { node, once } => dynmig::cli::agent::run(explicit, &node, once),
        Cmd::Prolog => node::prolog(explicit),
        Cmd::Epilog => node::epilog(explicit),
        Cmd::History { cmd } => dynmig::cli::history::run(explicit, cmd),
        Cmd::FakeJob { mem, seconds } => node::fake_job(explicit, &mem, seconds),
        Cmd::OomRestart { node, job, to, message } => node::oom_restart(explicit, &node, job, to, message),
        Cmd::Simulate(args) => learn::simulate(args),
        Cmd::Train(args) => learn::train(&args),
        Cmd::TrainResidual(args) => learn::train_residual(&args),
        Cmd::Gpu { cmd } => dynmig::cli::gpu::gpu(cmd),
        Cmd::MigParted { cmd } => dynmig::cli::gpu::mig_parted(cmd),
        Cmd::Status { json, svg } => admin::status(explicit, json, svg.as_deref()),
        Cmd::Why { job, json } => dynmig::cli::why::why(explicit, job, json),
        Cmd::Estimate(args) => dynmig::cli::estimate::run(explicit, &args),
        Cmd::Trace {
            cmd:
                TraceCmd::Slice {
                    input,
                    day,
                    from_hour,
                    to_hour,
                },
        } => trace_slice(&input, day, from_hour, to_hour),
        Cmd::Demo(args) => demo::run(&load_config(explicit)?.0, &args),
        Cmd::DemoCompare { cmd } => dynmig::dev::sim_compare::run(&cmd),
    }
}

/// `dynmig trace slice`: the GPU pods of one day's trace-local hours.
fn trace_slice(input: &std::path::Path, day: i64, from_hour: i64, to_hour: i64) -> Result<()> {
    let pods = trace::parse_pods(
        &std::fs::read_to_string(input).with_context(|| format!("cannot read {}", input.display()))?,
    )?;
    let last = pods.iter().map(|p| p.creation_time).max().unwrap_or(0);
    let start = last - 30 * 86400;
    let day_start = start + day * 86400;
    // Trace-local hours: seconds modulo a day.
    let slice: Vec<_> = trace::gpu_pods_between(&pods, day_start, day_start + 86400)
        .into_iter()
        .filter(|p| (from_hour..to_hour).contains(&((p.creation_time % 86400) / 3600)))
        .collect();
    print!("{}", trace::write_pods(&slice)?);
    eprintln!("{} GPU pods", slice.len());
    Ok(())
}
