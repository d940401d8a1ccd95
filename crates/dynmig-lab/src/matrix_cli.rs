//! `dynmig simulate --matrix` and `--sensitivity`: builds the cells from the command line,
//! runs them ([`crate::matrix`]) and prints and writes the tables ([`crate::matrix_report`]).

use crate::args::{eval_options, parse_drain, parse_model, SimulateArgs};
use crate::matrix::{
    grid_cells, matrix_cells, parse_seeds, run_cells, summarise, synthetic_family, Cell, CellOutcome, Setup, SYNTHETIC,
};
use crate::matrix_report as mr;
use anyhow::{bail, Context, Result};
use dynmig_core::geometry::GpuModel;
use dynmig_sim::engine::{DrainScope, SimConfig};
use dynmig_sim::model::ModelParams;
use dynmig_sim::workload::alibaba::{pods_of, Pod};
use dynmig_sim::workload::Load;
use std::collections::BTreeMap;
use std::time::Instant;

/// Runs `--matrix` and/or `--sensitivity` with the cluster, load and policies of `a`; the
/// grid runs on `a.trace` with `model` and `drain` (defaults: the default trace, A100-40GB,
/// node), and `m` as its base parameters.
///
/// # Errors
/// Bad arguments, an unreadable trace, or an output file that cannot be written. A cell that
/// fails is reported and left out of the summary, not an error.
pub fn run(a: &SimulateArgs, load: Load, m: &ModelParams, model: &'static GpuModel, drain: DrainScope) -> Result<()> {
    let threads = a
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let setup = setup(a, load, model)?;
    if a.matrix {
        let seeds = parse_seeds(a.seeds.as_deref().unwrap_or("1-8"))?;
        let models = a
            .matrix_models
            .iter()
            .map(|x| parse_model(x))
            .collect::<Result<Vec<_>>>()?;
        let drains = a
            .matrix_drains
            .iter()
            .map(|x| parse_drain(x))
            .collect::<Result<Vec<_>>>()?;
        let pods = read_traces(&a.matrix_traces)?;
        let cells = matrix_cells(&a.matrix_traces, &models, &drains, &seeds, m);
        let (groups, text, md, json) = go(&cells, &setup, &pods, threads, false)?;
        print_and_write(a, "matrix", &text, &md, &json, &groups)?;
    }
    if a.sensitivity {
        let seeds = parse_seeds(a.seeds.as_deref().unwrap_or("1-2"))?;
        let traces = vec![if a.synthetic {
            a.family.map_or(SYNTHETIC.to_string(), |f| format!("{SYNTHETIC}:{f}"))
        } else {
            a.trace.clone()
        }];
        let pods = read_traces(&traces)?;
        let cells = grid_cells(&traces[0], model, drain, &seeds, m);
        let (groups, text, md, json) = go(&cells, &setup, &pods, threads, true)?;
        print_and_write(a, "sensitivity", &text, &md, &json, &groups)?;
    }
    Ok(())
}

/// What every cell of `--matrix` with the arguments `a` shares (the residual's trainer,
/// `dynmig-train`, runs its cells with the same).
///
/// # Errors
/// Bad scheduling or policy arguments.
pub fn setup(a: &SimulateArgs, load: Load, model: &'static GpuModel) -> Result<Setup> {
    // Every cell schedules with the what-ifs and backfill settings given (`--what-if`,
    // `--bf-window`, `--bf-resolution`; default: Slurm's).
    let mut sched = SimConfig::new(model, 1, 1);
    crate::args::scheduling(a, &mut sched)?;
    Ok(Setup {
        nodes: a.nodes,
        gpus_per_node: a.gpus_per_node,
        days: a.days,
        load,
        reconfig_cost_s: a.reconfig_cost,
        policy_interval_s: a.policy_interval,
        opts: eval_options(a)?,
        what_if: sched.what_if,
        bf_window_s: sched.bf_window_s,
        bf_resolution_s: sched.bf_resolution_s,
    })
}

/// The pods of every trace named (not the synthetic one).
pub fn read_traces(traces: &[String]) -> Result<BTreeMap<String, Vec<Pod>>> {
    let mut pods = BTreeMap::new();
    for t in traces {
        if synthetic_family(t)?.is_none() && !pods.contains_key(t) {
            pods.insert(t.clone(), pods_of(t)?);
        }
    }
    Ok(pods)
}

type Tables = (usize, String, String, String);

/// Runs the cells and renders them (text, Markdown, JSON); `grid`: as the sensitivity grid.
fn go(cells: &[Cell], setup: &Setup, pods: &BTreeMap<String, Vec<Pod>>, threads: usize, grid: bool) -> Result<Tables> {
    let t0 = Instant::now();
    eprintln!("{} cells on {threads} threads", cells.len());
    let outcomes = run_cells(cells, setup, pods, threads);
    let mut failures = Vec::new();
    let mut ok: Vec<&CellOutcome> = Vec::new();
    for (c, r) in cells.iter().zip(&outcomes) {
        match r {
            Ok(o) => ok.push(o),
            Err(e) => failures.push(format!("{} / seed {}: {e:#}", c.group(), c.seed)),
        }
    }
    if ok.is_empty() {
        bail!(
            "every cell failed; the first: {}",
            failures.first().cloned().unwrap_or_default()
        );
    }
    let groups = summarise(&ok);
    let (mut text, mut md) = if grid {
        (mr::grid_terminal(&groups), mr::grid_markdown(&groups))
    } else {
        (mr::matrix_terminal(&groups), mr::matrix_markdown(&groups))
    };
    let tail = format!(
        "{} cells in {:.0} s ({} failed){}",
        cells.len(),
        t0.elapsed().as_secs_f64(),
        failures.len(),
        failures.iter().map(|f| format!("\n  failed: {f}")).collect::<String>()
    );
    text.push_str(&tail);
    text.push('\n');
    md.push_str(&format!("\n{tail}\n"));
    let json = mr::json(&groups, &ok, &failures)?;
    Ok((groups.len(), text, md, json))
}

fn print_and_write(a: &SimulateArgs, name: &str, text: &str, md: &str, json: &str, _groups: &usize) -> Result<()> {
    match a.format.as_str() {
        "table" => print!("{text}"),
        "markdown" => print!("{md}"),
        "json" => println!("{json}"),
        f => bail!("unknown format '{f}' for --{name}; allowed: table, markdown, json"),
    }
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for (file, s) in [(format!("{name}.md"), md), (format!("{name}.json"), json)] {
            std::fs::write(dir.join(&file), s).with_context(|| format!("writing {}", dir.join(&file).display()))?;
        }
        eprintln!("wrote {}/{name}.md and {name}.json", dir.display());
    }
    Ok(())
}
