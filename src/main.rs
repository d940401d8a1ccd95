//! `dynmig`: the command line of dynmig — controller, node agent, Prolog/Epilog, and the
//! administrator's tools.

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use dynmig::agent::{self, Agent, AgentSettings, DynamicNode};
use dynmig::context::Ctx;
use dynmig::{controller, demo, gres_conf, hooks, status, trace};
use dynmig_core::geometry::{all_layouts, maximal_layouts, model_by_name, model_names, ProfileCounts};
use std::path::{Path, PathBuf};
use std::time::Duration;

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
    /// Print a node's gres.conf as its GPUs are now.
    GresConf {
        /// Node name.
        #[arg(long)]
        node: String,
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
    /// Nodes, their layouts and states, pending demand and recent events.
    Status,
    /// Real GPUs: the NVML probe, and the reconfiguration cost table.
    Gpu {
        #[command(subcommand)]
        cmd: dynmig::gpu_cli::GpuCmd,
    },
    /// Import or export NVIDIA mig-parted v1 YAML configs.
    MigParted {
        #[command(subcommand)]
        cmd: dynmig::gpu_cli::MigPartedCmd,
    },
    /// Simulate a cluster of MIG GPUs under every policy on the real trace (or a synthetic
    /// workload) and compare them (docs/simulate.md).
    Simulate(dynmig_sim::cli::SimulateArgs),
    /// Trace tools.
    Trace {
        #[command(subcommand)]
        cmd: TraceCmd,
    },
    /// Replay a trace slice as sbatch jobs on the running cluster, wait, and report.
    Demo(demo::DemoArgs),
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
    /// Deliver a node's spooled records now.
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
    if let Err(e) = run(cli) {
        eprintln!("dynmig: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.cmd {
        Cmd::Config {
            cmd: ConfigCmd::Check { file },
        } => {
            let ctx = Ctx::load(file.as_deref().or(cli.config.as_deref()))?;
            let from = ctx
                .source
                .as_ref()
                .map_or("embedded defaults".to_string(), |p| p.display().to_string());
            println!("{from}: ok");
            print!("{}", status::config_summary(&ctx));
            Ok(())
        }
        Cmd::Config {
            cmd: ConfigCmd::Defaults,
        } => {
            print!(
                "{}",
                status::config_summary(&Ctx {
                    config: dynmig_core::config::Config::default_embedded(),
                    source: None
                })
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
            let ctx = Ctx::load(cli.config.as_deref())?;
            println!("{}", init_node(&ctx, &node)?);
            Ok(())
        }
        Cmd::GresConf { node } => {
            let ctx = Ctx::load(cli.config.as_deref())?;
            let backend = ctx.backend(&node)?;
            let gpus = backend.gpus()?;
            print!(
                "{}",
                gres_conf::render(&gres_conf::node_entries(&gpus, |g| backend.gpu_device_file(g)))
            );
            Ok(())
        }
        Cmd::Plan => {
            let ctx = Ctx::load(cli.config.as_deref())?;
            let mut policy = ctx.policy();
            let r = controller::pass(
                &ctx.slurm(),
                &ctx.managed_nodes(),
                policy.as_mut(),
                &ctx.events(),
                ctx.config.controller.drain_timeout,
                true,
            )?;
            println!("pending demand: {:?}", r.demand.pending);
            if r.drained.is_empty() {
                println!("no repartition");
            }
            for d in r.drained {
                println!(
                    "would drain {}: repartition to {} (serves {:?})",
                    d.node, d.target, d.serves
                );
            }
            Ok(())
        }
        Cmd::Controller { once } => {
            let ctx = Ctx::load(cli.config.as_deref())?;
            let mut policy = ctx.policy();
            let slurm = ctx.slurm();
            let managed = ctx.managed_nodes();
            let events = ctx.events();
            loop {
                match controller::pass(
                    &slurm,
                    &managed,
                    policy.as_mut(),
                    &events,
                    ctx.config.controller.drain_timeout,
                    false,
                ) {
                    Ok(r) => {
                        for d in &r.drained {
                            eprintln!("dynmig controller: draining {} to repartition to {}", d.node, d.target);
                        }
                    }
                    Err(e) if once => return Err(e),
                    Err(e) => eprintln!("dynmig controller: {e:#}"),
                }
                if once {
                    return Ok(());
                }
                std::thread::sleep(ctx.config.controller.interval);
            }
        }
        Cmd::Agent { node, once } => {
            let ctx = Ctx::load(cli.config.as_deref())?;
            let mut a = make_agent(&ctx, &node)?;
            if once {
                println!("{:?}", a.step()?);
                return Ok(());
            }
            agent::run_forever(&mut a)
        }
        Cmd::Prolog => hooks::prolog(&Ctx::load(cli.config.as_deref())?),
        Cmd::Epilog => hooks::epilog(&Ctx::load(cli.config.as_deref())?),
        Cmd::History { cmd } => {
            let ctx = Ctx::load(cli.config.as_deref())?;
            match cmd {
                HistoryCmd::Serve { listen, socket } => dynmig::history::cli::serve(&ctx, listen.as_deref(), socket),
                HistoryCmd::Show {
                    user,
                    name,
                    limit,
                    json,
                } => {
                    print!(
                        "{}",
                        dynmig::history::cli::show(&ctx, user.as_deref(), name.as_deref(), limit, json)?
                    );
                    Ok(())
                }
                HistoryCmd::Flush { node } => {
                    let f = dynmig::history::cli::flush(&ctx, &node)?;
                    println!(
                        "delivered {}, refused {}, pending {}",
                        f.delivered, f.refused, f.pending
                    );
                    Ok(())
                }
            }
        }
        Cmd::FakeJob { mem, seconds } => {
            let bytes = dynmig_core::size::parse_size(&mem).map_err(|e| anyhow::anyhow!("--mem={mem}: {e}"))?;
            let code = dynmig::fake_job::run(&Ctx::load(cli.config.as_deref())?, bytes, seconds)?;
            std::process::exit(code)
        }
        Cmd::OomRestart { job, to, message } => {
            dynmig::oom::restart(&Ctx::load(cli.config.as_deref())?, job, to.as_deref(), &message)
        }
        Cmd::Simulate(args) => dynmig_sim::cli::run(&args),
        Cmd::Gpu { cmd } => dynmig::gpu_cli::gpu(cmd),
        Cmd::MigParted { cmd } => dynmig::gpu_cli::mig_parted(cmd),
        Cmd::Status => {
            let ctx = Ctx::load(cli.config.as_deref())?;
            print!("{}", status::status(&ctx)?);
            Ok(())
        }
        Cmd::Trace {
            cmd:
                TraceCmd::Slice {
                    input,
                    day,
                    from_hour,
                    to_hour,
                },
        } => {
            let pods = trace::parse_pods(
                &std::fs::read_to_string(&input).with_context(|| format!("cannot read {}", input.display()))?,
            )?;
            let last = pods.iter().map(|p| p.creation_time).max().unwrap_or(0);
            let start = last - 30 * 86400;
            let day_start = start + day * 86400;
            // Trace-local hours: seconds modulo a day, as ../shared/traces/README.md measures them.
            let slice: Vec<_> = trace::gpu_pods_between(&pods, day_start, day_start + 86400)
                .into_iter()
                .filter(|p| (from_hour..to_hour).contains(&((p.creation_time % 86400) / 3600)))
                .collect();
            print!("{}", trace::write_pods(&slice)?);
            eprintln!("{} GPU pods", slice.len());
            Ok(())
        }
        Cmd::Demo(args) => demo::run(&Ctx::load(cli.config.as_deref())?, &args),
    }
}

/// Gives a node's GPUs the group's initial layout if they hold no instance, writes gres.conf,
/// and returns the Gres= string.
fn init_node(ctx: &Ctx, node: &str) -> Result<String> {
    let group = ctx.group(node)?;
    let mut backend = ctx.backend(node)?;
    let target = group.initial_node_layout();
    for (i, want) in target.gpus.iter().enumerate() {
        let gpu = backend.gpu(i as u32)?;
        if gpu.instances.is_empty() {
            let placed = dynmig_core::geometry::place(group.gpu_model, want)
                .with_context(|| format!("initial layout {want} does not fit"))?;
            for p in placed {
                backend.create_instance(i as u32, p.profile.name, p.start)?;
            }
        }
    }
    let entries = gres_conf::node_entries(&backend.gpus()?, |g| backend.gpu_device_file(g));
    let path = ctx.node_paths(node).gres_conf;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    gres_conf::write_atomically(&path, &gres_conf::render(&entries))?;
    let layout = dynmig_core::geometry::NodeLayout {
        gpus: backend.gpus()?.iter().map(|g| g.layout()).collect(),
    };
    ctx.events()
        .log(&dynmig::events::Event::new("init", node).layout(&layout.to_string()));
    Ok(gres_conf::node_gres_string(&entries))
}

/// `SlurmdPidFile` from a slurm.conf (`%n` = the node name), or Slurm's default.
fn slurmd_pid_file(slurm_conf: &Path, node: &str) -> PathBuf {
    std::fs::read_to_string(slurm_conf)
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                let l = l.trim();
                let (k, v) = l.split_once('=')?;
                k.trim()
                    .eq_ignore_ascii_case("SlurmdPidFile")
                    .then(|| PathBuf::from(v.trim().replace("%n", node)))
            })
        })
        .unwrap_or_else(|| PathBuf::from("/run/slurmd.pid"))
}

fn make_agent(ctx: &Ctx, node: &str) -> Result<Agent<'static>> {
    let group = ctx.group(node)?;
    let paths = ctx.node_paths(node);
    std::fs::create_dir_all(&paths.state_dir)?;
    let slurm_conf = paths.slurm_conf_dir.join("slurm.conf");
    let mut extra_args = Vec::new();
    if slurm_conf.exists() {
        extra_args = vec!["-f".to_string(), slurm_conf.display().to_string()];
    } else if group.backend == dynmig_core::config::Backend::Simulated && !Path::new("/etc/slurm/slurm.conf").exists() {
        bail!("no slurm.conf at {}", slurm_conf.display());
    }
    let reregister = DynamicNode {
        slurmd: ctx.config.paths.slurmd.clone(),
        extra_args,
        pid_file: slurmd_pid_file(&slurm_conf, node),
        node_conf: group.node_conf.clone(),
    };
    Ok(Agent {
        settings: AgentSettings {
            node: node.to_string(),
            model: group.gpu_model,
            gpus: group.gpus as usize,
            gres_conf: paths.gres_conf.clone(),
            state_dir: paths.state_dir.clone(),
            poll: Duration::from_secs(2),
            register_timeout: Duration::from_secs(60),
        },
        backend: ctx.backend(node)?,
        slurm: ctx.slurm(),
        reregister: Box::new(reregister),
        events: ctx.events(),
    })
}
