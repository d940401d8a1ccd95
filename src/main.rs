//! `dynmig`: the command line of dynmig — controller, node agent, Prolog/Epilog, and the
//! administrator's tools.

use anyhow::{anyhow, Context, Result};
use clap::{Parser, Subcommand};
use dynmig::cli::load_config;
use dynmig::dev::{demo, trace};
use dynmig_controller::{managed_nodes, pass, policy_from_config, JobFeed, PassSettings};
use dynmig_core::geometry::{all_layouts, maximal_layouts, model_by_name, model_names, ProfileCounts};
use dynmig_node::hooks::{node_backend, HookEnv};
use dynmig_node::paths::NodePaths;
use dynmig_slurm::SlurmCommands;
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
        cmd: ConfigCmd,
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
        cmd: HistoryCmd,
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
    Simulate(Box<dynmig_sim::cli::SimulateArgs>),
    /// Train the learned policy in the simulator (docs/learned.md): writes the model, its
    /// checkpoints and learning curve to --out (default ./learned).
    Train(Box<dynmig_learn::TrainArgs>),
    /// Train the learned residual on the guarded default in the simulator (docs/learned.md,
    /// "Residual"): writes the model kept to --model-out (default ./residual.json).
    TrainResidual(Box<dynmig_learn::residual::ResidualArgs>),
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
enum ConfigCmd {
    /// Check the config (the file given, or the one --config / $DYNMIG_CONFIG names).
    Check {
        /// File to check.
        file: Option<PathBuf>,
    },
    /// Print the embedded default config's summary.
    Defaults,
}

#[derive(Subcommand)]
enum HistoryCmd {
    /// Receive records from the nodes into SQLite and keep the snapshot (controller host).
    Serve {
        /// addr:port [default: [history] listen].
        #[arg(long)]
        listen: Option<String>,
        /// munged socket [default: slurm.conf AuthInfo=socket=..., else munge's default].
        #[arg(long)]
        socket: Option<PathBuf>,
    },
    /// Show records, oldest first.
    Show {
        /// Only this user (name or uid).
        #[arg(long)]
        user: Option<String>,
        /// Only this job name.
        #[arg(long)]
        name: Option<String>,
        /// At most this many (the latest).
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Deliver a node's spooled records now: to the history server, or with `[history] store = "slurmdbd"` into Slurm's accounting.
    Flush {
        /// Node name.
        #[arg(long)]
        node: String,
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
            cmd: HistoryCmd::Serve { .. },
        } => Some("history"),
        _ => None,
    };
    let sink = dynmig::cli::logging::init(daemon);
    if let Err(e) = run(cli) {
        // Under systemd stderr reaches the journal too: one entry, with its priority.
        if sink == dynmig::cli::logging::Sink::Journal {
            log::error!("{e:#}");
            log::logger().flush();
            std::process::exit(1);
        }
        eprintln!("dynmig: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    let explicit = cli.config.as_deref();
    match cli.cmd {
        Cmd::Config {
            cmd: ConfigCmd::Check { file },
        } => {
            let (config, source) = load_config(file.as_deref().or(explicit))?;
            let from = source.map_or("embedded defaults".to_string(), |p| p.display().to_string());
            println!("{from}: ok");
            print!("{}", dynmig_controller::status::config_summary(&config));
            Ok(())
        }
        Cmd::Config {
            cmd: ConfigCmd::Defaults,
        } => {
            print!(
                "{}",
                dynmig_controller::status::config_summary(&dynmig_core::config::Config::default_embedded())
            );
            Ok(())
        }
        Cmd::Layouts { model, maximal } => {
            let m = model_by_name(&model)
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
        Cmd::InitNode { node } => {
            let (config, _) = load_config(explicit)?;
            println!("{}", dynmig_node::setup::init_node(&config, &node)?);
            Ok(())
        }
        Cmd::GresConf {
            billing_weights: true,
            per_slice,
            ..
        } => {
            let (config, _) = load_config(explicit)?;
            let models: Vec<_> = config.node_groups.iter().map(|g| g.gpu_model).collect();
            let w = dynmig_gpu::gres_conf::BillingWeights::for_models(&models, per_slice).map_err(|e| anyhow!(e))?;
            println!("# Bill MIG instances by memory slices (docs/gpus.md, \"Beside dcgm-exporter\").");
            println!(
                "# In slurm.conf: extend AccountingStorageTRES, and add TRESBillingWeights to each GPU partition."
            );
            println!("AccountingStorageTRES={}", w.accounting_storage_tres());
            println!("TRESBillingWeights=\"{}\"", w.tres_billing_weights());
            Ok(())
        }
        Cmd::GresConf { node, .. } => {
            let (config, _) = load_config(explicit)?;
            let node = node.ok_or_else(|| anyhow!("--node is required without --billing-weights"))?;
            let backend = node_backend(&config, &node)?;
            let gpus = backend.gpus()?;
            let entries = dynmig_gpu::gres_conf::node_entries(&gpus, |g| backend.gpu_device_file(g));
            print!("{}", dynmig_gpu::gres_conf::render(&entries));
            Ok(())
        }
        Cmd::Doctor {
            job_submit_plugin,
            spank_plugin,
        } => {
            let (config, _) = load_config(explicit)?;
            if dynmig::cli::doctor::doctor(&config, job_submit_plugin.as_deref(), spank_plugin.as_deref())? {
                Ok(())
            } else {
                Err(anyhow!("a dynmig plugin does not match the running Slurm"))
            }
        }
        Cmd::Plan => {
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
        Cmd::Controller { once } => dynmig::cli::controller::run(explicit, once),
        Cmd::Agent { node, once } => dynmig::cli::agent::run(explicit, &node, once),
        Cmd::Prolog => {
            let (config, _) = load_config(explicit)?;
            dynmig_node::hooks::prolog(&config, &HookEnv::read(|k| std::env::var(k).ok())?)
        }
        Cmd::Epilog => {
            let (config, _) = load_config(explicit)?;
            let exe = std::env::current_exe().unwrap_or_else(|_| "dynmig".into());
            let get = |k: &str| std::env::var(k).ok();
            dynmig_node::hooks::epilog(
                &config,
                &HookEnv::read(get)?,
                dynmig_node::hooks::EndedJob::read(get),
                &exe,
            )
        }
        Cmd::History { cmd } => {
            let (config, source) = load_config(explicit)?;
            history(cmd, &config, source.as_deref())
        }
        Cmd::FakeJob { mem, seconds } => {
            let bytes = dynmig_core::size::parse_size(&mem).map_err(|e| anyhow!("--mem={mem}: {e}"))?;
            let (config, _) = load_config(explicit)?;
            let code = dynmig::dev::fake_job::run(&config, bytes, seconds)?;
            std::process::exit(code)
        }
        Cmd::OomRestart { node, job, to, message } => {
            let (config, _) = load_config(explicit)?;
            let req = dynmig_node::oom::RestartRequest {
                job,
                to,
                message,
                requeue_for: std::time::Duration::from_secs(60),
            };
            Ok(dynmig_node::oom::restart(
                &SlurmCommands::from_config(&config),
                &req,
                &node,
            )?)
        }
        Cmd::Simulate(mut args) => {
            if !args.learned_model.is_empty() {
                let limits = dynmig_sim::cli::eval_options(&args)?.limits;
                args.learned = dynmig_learn::load_externals(&args.learned_model, &limits)?;
                // One cluster: a model for its GPUs is needed (the message of the load that
                // refuses it says what each was trained for).
                if !args.matrix && !args.sensitivity {
                    let model = dynmig_sim::cli::parse_model(&args.model)?;
                    if !args.learned.iter().any(|e| e.gpu_model == Some(model.name)) {
                        let errors: Vec<String> = args
                            .learned_model
                            .iter()
                            .filter_map(|p| dynmig_learn::Model::load(p, model).err().map(|e| e.to_string()))
                            .collect();
                        anyhow::bail!("{}", errors.join("; "));
                    }
                }
            }
            dynmig_sim::cli::run(&args)
        }
        Cmd::Train(args) => {
            let t = dynmig_learn::train(&args)?;
            let last = t.curve.last().map_or(0, |p| p.iteration);
            println!(
                "trained {last} iterations; model {} (greedy ET on the training days {:.4}; the warm-up's layouts kept {:.4}, plan {:.4}); curve {}",
                t.model.display(),
                t.best_et,
                t.keep_et,
                t.plan_et,
                t.model.with_file_name("curve.svg").display()
            );
            Ok(())
        }
        Cmd::TrainResidual(args) => {
            let t = dynmig_learn::residual::train_residual(&args, &|line| eprintln!("train-residual: {line}"))?;
            for c in &t.checkpoints {
                println!(
                    "checkpoint after {} episodes: mean reward {:.4} on the checkpoint days, adjustments (follow, keep, relax, recent) {:?}",
                    c.episodes, c.reward, c.adjusted
                );
            }
            println!("kept: {}; written to {}", t.model.trained_on, args.model_out.display());
            Ok(())
        }
        Cmd::Gpu { cmd } => dynmig::cli::gpu::gpu(cmd),
        Cmd::MigParted { cmd } => dynmig::cli::gpu::mig_parted(cmd),
        Cmd::Status { json, svg } => {
            let (config, _) = load_config(explicit)?;
            let st = dynmig_controller::status::read_status(
                &SlurmCommands::from_config(&config),
                &managed_nodes(&config),
                &config.paths.state_dir,
                dynmig_host::clock::now_secs(),
            )?;
            if let Some(path) = svg {
                std::fs::write(&path, dynmig::cli::pictures::status_svg(&st)?)
                    .with_context(|| format!("cannot write {}", path.display()))?;
            }
            print!("{}", if json { st.render_json() } else { st.render_text() });
            Ok(())
        }
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

/// `dynmig history ...`; `source` is the config's file (a SIGHUP to `serve` reads it again).
fn history(cmd: HistoryCmd, config: &dynmig_core::config::Config, source: Option<&std::path::Path>) -> Result<()> {
    let p = &config.paths;
    match cmd {
        HistoryCmd::Serve { listen, socket } => {
            dynmig::cli::logging::apply_config_level(config.log.level);
            let (limits, retention) = dynmig_history::service::limits_of(&config.history);
            if config.history.store == dynmig_core::config::HistoryStore::Slurmdbd {
                let h = &config.history;
                return Ok(dynmig_history::accounting::serve(
                    &p.sacct,
                    h.sacct_window,
                    h.sacct_interval,
                    retention,
                    &p.history_snapshot,
                    &config.estimator,
                    &|| dynmig::cli::signals::reload(source, |c| Ok(c.estimator)).map(|(_, e)| e),
                )?);
            }
            let listen = listen
                .or_else(|| config.history.listen.clone())
                .ok_or_else(|| anyhow!("no address: give --listen or set [history] listen"))?;
            let socket = socket.or_else(|| dynmig_history::auth::munge_socket(None));
            let slurm = SlurmCommands::from_config(config);
            Ok(dynmig_history::service::serve(
                &listen,
                config.history.metrics_listen,
                socket,
                &p.history_db,
                &p.history_snapshot,
                &config.estimator,
                retention,
                limits,
                &|| dynmig::cli::signals::reload(source, |c| Ok(c.estimator)).map(|(_, e)| e),
                &|ids| dynmig::cli::history_names::run_names(&slurm, ids),
            )?)
        }
        HistoryCmd::Show {
            user,
            name,
            limit,
            json,
        } => {
            let store = dynmig_history::stores::open(config, true)?;
            print!(
                "{}",
                dynmig_history::service::show_records(&*store, user.as_deref(), name.as_deref(), limit, json)?
            );
            Ok(())
        }
        HistoryCmd::Flush { node } if config.history.store == dynmig_core::config::HistoryStore::Slurmdbd => {
            let f = dynmig_history::accounting::flush_spool(
                &config.paths.sacctmgr,
                &config.paths.sacct,
                &NodePaths::of(config, &node).history_spool,
                None,
                dynmig_history::service::EPILOG_FLUSH_BUDGET,
            );
            println!(
                "delivered {}, refused {}, pending {}",
                f.delivered, f.refused, f.pending
            );
            Ok(())
        }
        HistoryCmd::Flush { node } => {
            let server = config
                .history
                .server
                .clone()
                .ok_or_else(|| anyhow!("no [history] server in the config"))?;
            let f = dynmig_history::service::flush_spool(
                &NodePaths::of(config, &node).history_spool,
                &server,
                dynmig_history::auth::munge_socket(None),
                dynmig_history::service::EPILOG_FLUSH_BUDGET,
            );
            println!(
                "delivered {}, refused {}, pending {}",
                f.delivered, f.refused, f.pending
            );
            Ok(())
        }
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
