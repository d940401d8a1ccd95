//! The demo: replays a slice of the real trace as sbatch jobs on a running cluster, waits
//! until every job has ended, and reports what happened.
//!
//! Each pod becomes `sbatch --gres=gpu:N [--mig-mem=...] --wrap 'sleep <run>'` at its
//! (compressed) arrival time ([`crate::dev::trace::DemoMapping`]). The report lists each job's
//! profile (as job_submit/dynmig typed it), node and queue wait, each node's layouts over time
//! (from the event log), the repartitions, and the time from the last job's end on a node to
//! the node's return to service with its new layout. With `--report FILE.md` an SVG timeline
//! of each node's layouts and the jobs on each instance is written beside it (`FILE.svg`) and
//! linked from the report.

use crate::dev::sim_compare::{self, quantile};
use crate::dev::trace::{DemoJob, SliceArgs};
use anyhow::{bail, Context, Result};
use dynmig_core::config::Config;
use dynmig_core::gres::GpuRequest;
use dynmig_core::protocol::event::{Event, EventKind};
use dynmig_slurm::{JobInfo, JobState, SlurmApi, SlurmCommands};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// `dynmig demo` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// The slice and its compression.
    #[command(flatten)]
    pub slice: SliceArgs,
    /// Give up waiting after this many seconds.
    #[arg(long, default_value_t = 900)]
    pub timeout: u64,
    /// Folder for job output files.
    #[arg(long, default_value = "/tmp/dynmig-demo")]
    pub workdir: PathBuf,
    /// Also write the report here (Markdown), and its timeline beside it (the same name with
    /// `.svg`).
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Also predict the run with the simulator (same jobs, cluster and policy as the config)
    /// and write the measured and predicted figures here (JSON, for `dynmig demo-compare
    /// table`).
    #[arg(long)]
    pub compare: Option<PathBuf>,
    /// Simulator: seconds per GPU-instance create or destroy.
    #[arg(long, default_value_t = 0.5)]
    pub reconfig_cost: f64,
    /// Simulator: seed of the due dates.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

const DONE_STATES: &[&str] = &[
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
    "PREEMPTED",
];

/// Runs the demo.
///
/// # Errors
/// A submit fails, the jobs do not end within the timeout, or a job did not complete.
pub fn run(config: &Config, args: &DemoArgs) -> Result<()> {
    let jobs = args.slice.jobs()?;
    std::fs::create_dir_all(&args.workdir)?;
    let slurm = SlurmCommands::from_config(config);
    let t0 = Instant::now();
    let start_epoch = dynmig_host::clock::now_secs_f64();
    eprintln!(
        "dynmig demo: submitting {} jobs from {} over {:.0} s",
        jobs.len(),
        args.slice.trace.display(),
        jobs.last().map_or(0.0, |j| j.submit_at.as_secs_f64())
    );
    let mut ids: BTreeMap<u32, String> = BTreeMap::new();
    for j in &jobs {
        if let Some(wait) = j.submit_at.checked_sub(t0.elapsed()) {
            std::thread::sleep(wait);
        }
        let mut a = j.sbatch_args();
        a.push(format!(
            "--time={}",
            sim_compare::time_limit_s(j.run, args.slice.time_limit_factor) / 60
        ));
        a.push(format!("--output={}/%j.out", args.workdir.display()));
        a.push(format!("--wrap=sleep {:.1}", j.run.as_secs_f64()));
        let id = dynmig_slurm::commands::sbatch(std::ffi::OsStr::new("sbatch"), &a, slurm.limits)
            .with_context(|| format!("submitting {}", j.pod))?;
        ids.insert(id, j.pod.clone());
    }
    eprintln!(
        "dynmig demo: all submitted after {:.0} s; waiting for them to end",
        t0.elapsed().as_secs_f64()
    );
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    let mut last_print = Instant::now();
    let finished = loop {
        let all = slurm.jobs()?;
        let ours: Vec<&JobInfo> = all.iter().filter(|j| ids.contains_key(&j.id)).collect();
        let done = ours
            .iter()
            .filter(|j| matches!(&j.state, JobState::Other(s) if DONE_STATES.contains(&s.as_str())))
            .count();
        if done == ids.len() {
            break all;
        }
        if Instant::now() > deadline {
            bail!(
                "{} of {} jobs still not ended after {} s",
                ids.len() - done,
                ids.len(),
                args.timeout
            );
        }
        if last_print.elapsed() > Duration::from_secs(10) {
            eprintln!("dynmig demo: {done}/{} jobs ended", ids.len());
            last_print = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let log = dynmig_host::fs::read_text_bounded(&config.paths.state_dir.join("events.jsonl"), 256 << 20)?
        .unwrap_or_default();
    let ev: Vec<Event> = Event::parse_lines(&log)
        .into_iter()
        .filter(|e| e.time >= start_epoch - 1.0 || e.kind == EventKind::Init)
        .collect();
    let ours: Vec<JobInfo> = finished.into_iter().filter(|j| ids.contains_key(&j.id)).collect();
    let mut report = report(&ours, &ids, &ev, start_epoch);
    if let Some(p) = &args.report {
        let end = ours
            .iter()
            .map(|j| j.end_time as f64)
            .chain(ev.iter().map(|e| e.time))
            .fold(start_epoch + 1.0, f64::max);
        report += &write_timeline(p, &ev, &dynmig_controller::managed_nodes(config), start_epoch, end)?;
        std::fs::write(p, &report)?;
    }
    print!("{report}");
    if let Some(p) = &args.compare {
        let c = compare(config, args, &jobs, &ours, &ev, start_epoch)?;
        let table = sim_compare::table(std::slice::from_ref(&c));
        print!("\n## Simulator vs. real\n\n{table}");
        std::fs::write(p, serde_json::to_string_pretty(&c)?)?;
    }
    let bad: Vec<String> = ours
        .iter()
        .filter(|j| j.state != JobState::Other("COMPLETED".into()))
        .map(|j| format!("{} ({})", j.id, j.state))
        .collect();
    if ours.len() != ids.len() {
        bail!(
            "{} jobs are lost: slurmctld no longer knows them",
            ids.len() - ours.len()
        );
    }
    if !bad.is_empty() {
        bail!("jobs that did not complete: {}", bad.join(", "));
    }
    Ok(())
}

/// The measured figures of a run and the simulator's prediction for the same jobs, cluster
/// and policy.
fn compare(
    config: &Config,
    args: &DemoArgs,
    jobs: &[DemoJob],
    ours: &[JobInfo],
    ev: &[Event],
    t0: f64,
) -> Result<sim_compare::Comparison> {
    let waits: Vec<f64> = ours
        .iter()
        .map(|j| (j.start_time - j.submit_time).max(0) as f64)
        .collect();
    let makespan = ours.iter().map(|j| j.end_time as f64 - t0).fold(0.0, f64::max);
    let repartitions = ev.iter().filter(|e| e.kind == EventKind::Applied).count() as u64;
    let measured = sim_compare::Figures::from_waits(&waits, makespan, repartitions);
    let cfg = sim_compare::sim_config(config, args.reconfig_cost)?;
    let wl = sim_compare::workload(jobs, cfg.model, args.slice.time_limit_factor, args.seed);
    let spec = dynmig_sim::policies::from_config::spec_from_config(
        config,
        dynmig_sim::policies::from_config::Host::Simulator,
    )?;
    let predicted = sim_compare::predict(&wl, &spec, &cfg)?;
    let layouts = dynmig_sim::policies::run::initial_layouts(&spec, &cfg)
        .iter()
        .map(|l| l.gpus.iter().map(ToString::to_string).collect::<Vec<_>>().join(" | "))
        .collect();
    Ok(sim_compare::Comparison {
        policy: sim_compare::policy_kind(&config.policy).to_string(),
        layouts,
        measured,
        predicted,
        reconfig_cost_s: args.reconfig_cost,
    })
}

/// Draws the timeline of `events` between `t0` and `end` (seconds since the epoch) for the
/// `managed` nodes beside the report `report_path` (`report-plan.md` -> `report-plan.svg`),
/// and returns the report's section that shows it.
///
/// # Errors
/// The SVG cannot be written.
pub fn write_timeline(
    report_path: &std::path::Path,
    events: &[Event],
    managed: &[dynmig_controller::ManagedNode],
    t0: f64,
    end: f64,
) -> Result<String> {
    let svg_path = report_path.with_extension("svg");
    let svg = crate::cli::pictures::timeline_svg(&crate::cli::pictures::timelines(events, managed, t0, end), t0, end)?;
    std::fs::write(&svg_path, svg).with_context(|| format!("cannot write {}", svg_path.display()))?;
    let name = svg_path
        .file_name()
        .map_or(String::new(), |n| n.to_string_lossy().into_owned());
    Ok(format!(
        "\n## Timeline\n\n![each node's layouts per GPU and the jobs on each instance over time]({name})\n"
    ))
}

fn profile_of(tres: &GpuRequest) -> String {
    tres.gpus().next().map_or_else(
        || "-".into(),
        |g| format!("{}x{}", g.count, g.gres_type.unwrap_or("gpu")),
    )
}

/// The demo report (Markdown).
pub fn report(jobs: &[JobInfo], pods: &BTreeMap<u32, String>, events: &[Event], t0: f64) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# dynmig demo report\n\n## Jobs\n");
    let _ = writeln!(
        s,
        "| job | pod | profile | node | wait s | run s | state |\n|---|---|---|---|---|---|---|"
    );
    let mut waits = Vec::new();
    let mut per_profile: BTreeMap<String, u32> = BTreeMap::new();
    for j in jobs {
        let wait = (j.start_time - j.submit_time).max(0) as f64;
        waits.push(wait);
        let prof = profile_of(&j.tres_per_node);
        *per_profile.entry(prof.clone()).or_insert(0) += 1;
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.0} | {} | {} |",
            j.id,
            pods.get(&j.id).map_or("", String::as_str),
            prof,
            j.nodes,
            wait,
            (j.end_time - j.start_time).max(0),
            j.state
        );
    }
    let completed = jobs
        .iter()
        .filter(|j| j.state == JobState::Other("COMPLETED".into()))
        .count();
    let _ = writeln!(
        s,
        "\nJobs: {} submitted, {completed} completed. Profiles: {per_profile:?}",
        jobs.len()
    );
    let _ = writeln!(
        s,
        "Queue wait (s, Slurm's submit to start, whole seconds): median {:.0}, p95 {:.0}, max {:.0}",
        quantile(&waits, 0.5),
        quantile(&waits, 0.95),
        quantile(&waits, 1.0)
    );
    let _ = writeln!(s, "\n## Layouts over time (seconds since the demo started)\n");
    let mut nodes: BTreeMap<&str, Vec<&Event>> = BTreeMap::new();
    for e in events.iter().filter(|e| !e.node.is_empty()) {
        nodes.entry(e.node.as_str()).or_default().push(e);
    }
    let mut repartitions = 0;
    let mut returns = Vec::new();
    for (node, evs) in &nodes {
        let _ = writeln!(s, "- {node}:");
        let mut last_job_end: Option<f64> = None;
        let mut drain_at: Option<f64> = None;
        for e in evs {
            match e.kind {
                EventKind::Init => {
                    let _ = writeln!(s, "  - start: {}", e.layout.as_deref().unwrap_or("?"));
                }
                EventKind::Drain => {
                    drain_at = Some(e.time);
                    let _ = writeln!(
                        s,
                        "  - {:>6.1} drain for {} ({})",
                        e.time - t0,
                        e.layout.as_deref().unwrap_or("?"),
                        e.detail.as_deref().unwrap_or("")
                    );
                }
                EventKind::JobEnd => last_job_end = Some(e.time),
                EventKind::Applied => {
                    repartitions += 1;
                    // From the later of the drain and the last job's end to back in service.
                    let from = match (last_job_end, drain_at) {
                        (Some(j), Some(d)) => j.max(d),
                        (a, b) => a.or(b).unwrap_or(e.time),
                    };
                    returns.push(e.time - from);
                    let _ = writeln!(
                        s,
                        "  - {:>6.1} in service with {} ({}; {:.2} s after the last job ended or the drain)",
                        e.time - t0,
                        e.layout.as_deref().unwrap_or("?"),
                        e.detail.as_deref().unwrap_or(""),
                        e.time - from
                    );
                }
                EventKind::RepartitionFailed => {
                    let _ = writeln!(
                        s,
                        "  - {:>6.1} repartition FAILED: {}",
                        e.time - t0,
                        e.detail.as_deref().unwrap_or("")
                    );
                }
                _ => {}
            }
        }
    }
    let _ = writeln!(s, "\nRepartitions: {repartitions}.");
    if !returns.is_empty() {
        let _ = writeln!(
            s,
            "Time from the last job's end (or the drain, if later) to the node's return to service with its new layout: median {:.2} s, p95 {:.2} s, max {:.2} s",
            quantile(&returns, 0.5),
            quantile(&returns, 0.95),
            quantile(&returns, 1.0)
        );
    }
    s += &repartition_section(events, t0);
    s
}
/// One repartition as the event log tells it ([`repartitions`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RepartitionRecord {
    /// Slurm node name.
    pub node: String,
    /// When the node was back in service with the new layout (seconds since the epoch).
    pub at: f64,
    /// The layout before and after.
    pub from: String,
    /// The new layout.
    pub to: String,
    /// Seconds from the later of the node's last job's end and its drain to back in service.
    pub back_s: f64,
    /// Seconds from that moment to the agent's start of the apply (noticing the idle drained
    /// node).
    pub noticed_s: f64,
    /// The agent's time per step ([`dynmig_node::agent::StepTimes`]).
    pub steps: dynmig_node::agent::StepTimes,
    /// Instances the repartition made: per GPU, the profiles (with count) it holds more of.
    pub made: Vec<BTreeMap<String, u32>>,
    /// Jobs that started on an instance of a profile it made on that GPU before the node's
    /// next apply began (job id, `profile@gpuN`).
    pub served: Vec<(u64, String)>,
}

/// Per GPU of a layout text (`1x4g.40gb+1x3g.40gb,1x7g.80gb`), instances per profile.
fn layout_counts(text: &str) -> Vec<BTreeMap<String, u32>> {
    text.split(',')
        .map(|g| {
            let mut m = BTreeMap::new();
            for part in g.split('+').filter(|p| !p.is_empty()) {
                let (n, p) = part.split_once('x').unwrap_or(("1", part));
                *m.entry(p.trim().to_string()).or_insert(0) += n.trim().parse::<u32>().unwrap_or(1);
            }
            m
        })
        .collect()
}

/// The repartitions of the event log, per node in order, with what each made and which jobs
/// started on it before the node's next apply.
pub fn repartitions(events: &[Event]) -> Vec<RepartitionRecord> {
    let mut nodes: BTreeMap<&str, Vec<&Event>> = BTreeMap::new();
    for e in events.iter().filter(|e| !e.node.is_empty()) {
        nodes.entry(e.node.as_str()).or_default().push(e);
    }
    let mut out = Vec::new();
    for (node, mut evs) in nodes {
        evs.sort_by(|a, b| a.time.total_cmp(&b.time));
        let mut layout = String::new();
        let mut last_job_end: Option<f64> = None;
        let mut drain_at: Option<f64> = None;
        let mut apply_start: Option<f64> = None;
        // Index in `out` of this node's last repartition, while its instances may serve.
        let mut open: Option<usize> = None;
        for e in evs {
            match e.kind {
                EventKind::Init => layout = e.layout.clone().unwrap_or_default(),
                EventKind::Drain => drain_at = Some(e.time),
                EventKind::JobEnd => last_job_end = Some(e.time),
                EventKind::ApplyStart => {
                    apply_start = Some(e.time);
                    open = None;
                }
                EventKind::JobStart => {
                    let Some(i) = open else { continue };
                    let r: &mut RepartitionRecord = &mut out[i];
                    for claim in e.detail.as_deref().unwrap_or("").split_whitespace() {
                        let mut parts = claim.split('@');
                        let (Some(p), Some(gpu)) = (parts.next(), parts.nth(1)) else {
                            continue;
                        };
                        let g: usize = gpu.trim_start_matches("gpu").parse().unwrap_or(usize::MAX);
                        if r.made.get(g).is_some_and(|m| m.contains_key(p)) {
                            r.served.push((e.job.unwrap_or(0), format!("{p}@{gpu}")));
                        }
                    }
                }
                EventKind::Applied => {
                    let to = e.layout.clone().unwrap_or_default();
                    let (before, after) = (layout_counts(&layout), layout_counts(&to));
                    let made = after
                        .iter()
                        .enumerate()
                        .map(|(g, a)| {
                            a.iter()
                                .filter_map(|(p, n)| {
                                    let had = before.get(g).and_then(|b| b.get(p)).copied().unwrap_or(0);
                                    (*n > had).then(|| (p.clone(), n - had))
                                })
                                .collect()
                        })
                        .collect();
                    // From the later of the drain and the last job's end to back in service.
                    let from = match (last_job_end, drain_at) {
                        (Some(j), Some(d)) => j.max(d),
                        (a, b) => a.or(b).unwrap_or(e.time),
                    };
                    out.push(RepartitionRecord {
                        node: node.to_string(),
                        at: e.time,
                        from: layout.clone(),
                        to: to.clone(),
                        back_s: e.time - from,
                        noticed_s: apply_start.map_or(0.0, |a| (a - from).max(0.0)),
                        steps: dynmig_node::agent::StepTimes::parse(e.detail.as_deref().unwrap_or("")),
                        made,
                        served: Vec::new(),
                    });
                    open = Some(out.len() - 1);
                    layout = to;
                    drain_at = None;
                }
                _ => {}
            }
        }
    }
    out
}

/// The report's sections on repartitions: each with what it made and whether that served a
/// job, the repartitions per node, and the time of each step (p50, p95, max).
pub fn repartition_section(events: &[Event], t0: f64) -> String {
    let reps = repartitions(events);
    let mut s = String::new();
    let _ = writeln!(s, "\n## Repartitions\n");
    if reps.is_empty() {
        let _ = writeln!(s, "None.");
        return s;
    }
    let _ = writeln!(
        s,
        "| node | in service at s | from | to | instances made | back in service s | served by |\n|---|---|---|---|---|---|---|"
    );
    for r in &reps {
        let made: Vec<String> = r
            .made
            .iter()
            .enumerate()
            .flat_map(|(g, m)| m.iter().map(move |(p, n)| format!("{n}x{p}@gpu{g}")))
            .collect();
        let served = if r.made.iter().all(BTreeMap::is_empty) {
            "- (nothing made)".to_string()
        } else if r.served.is_empty() {
            "**no job**".to_string()
        } else {
            r.served
                .iter()
                .map(|(j, i)| format!("job {j} ({i})"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(
            s,
            "| {} | {:.1} | {} | {} | {} | {:.2} | {} |",
            r.node,
            r.at - t0,
            r.from,
            r.to,
            made.join(" "),
            r.back_s,
            served
        );
    }
    let made_any = reps.iter().filter(|r| r.made.iter().any(|m| !m.is_empty())).count();
    let served = reps.iter().filter(|r| !r.served.is_empty()).count();
    let mut per_node: BTreeMap<&str, u32> = BTreeMap::new();
    for r in &reps {
        *per_node.entry(r.node.as_str()).or_insert(0) += 1;
    }
    let per_node: Vec<String> = per_node.iter().map(|(n, c)| format!("{n} {c}")).collect();
    let _ = writeln!(
        s,
        "\nRepartitions per node: {}. Of the {made_any} that made instances, {served} served a job before the node's next repartition.",
        per_node.join(", ")
    );
    let _ = writeln!(
        s,
        "\n## Time per step of a repartition (s, nearest rank over {} repartitions)\n",
        reps.len()
    );
    let _ = writeln!(s, "| step | n | p50 | p95 | max |\n|---|---|---|---|---|");
    let mut row = |name: &str, v: Vec<f64>| {
        if !v.is_empty() {
            let _ = writeln!(
                s,
                "| {name} | {} | {:.3} | {:.3} | {:.3} |",
                v.len(),
                quantile(&v, 0.5),
                quantile(&v, 0.95),
                quantile(&v, 1.0)
            );
        }
    };
    row(
        "noticed (drain or last job end -> apply start)",
        reps.iter().map(|r| r.noticed_s).collect(),
    );
    for name in dynmig_node::agent::STEP_NAMES {
        row(
            name,
            reps.iter()
                .filter_map(|r| r.steps.get(name))
                .map(|d| d.as_secs_f64())
                .collect(),
        );
    }
    row(
        "**back in service** (drain or last job end -> Slurm shows the new GRES)",
        reps.iter().map(|r| r.back_s).collect(),
    );
    s
}

#[cfg(test)]
mod tests;
