//! `dynmig simulate`: the command line of the simulator (docs/simulate.md). The arguments
//! and what they build are [`crate::args`].

pub use crate::args::*;
use crate::evaluate::evaluate;
use crate::{charts, compare, report};
use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Runs `dynmig simulate`.
///
/// # Errors
/// Bad arguments (the message says what is allowed), an unreadable trace, a failed run, or
/// an output file that cannot be written.
pub fn run(a: &SimulateArgs) -> Result<()> {
    let model = parse_model(&a.model)?;
    let drain = parse_drain(&a.drain)?;
    if a.nodes == 0 || a.gpus_per_node == 0 || a.gpus_per_node > 64 {
        bail!("nodes must be >= 1 and gpus-per-node 1 to 64");
    }
    let m = model_params(a)?;
    let gpus = a.nodes * a.gpus_per_node;
    let load = parse_load(&a.load, gpus)?;
    if a.matrix || a.sensitivity {
        return crate::matrix_cli::run(a, load, &m, model, drain);
    }
    let (wl, mut cfg, load) = workload_and_config(a)?;
    let gpus = cfg.nodes * cfg.gpus_per_node;
    cfg.sample_interval_s = 300.0;
    let mut opts = eval_options(a)?;
    if a.compare_requests {
        opts.policies = a.compare_policies.clone();
    }
    eprintln!(
        "{}: {} jobs (load x{load:.2}) on {} nodes x {} {} ({} GPUs), peak whole-GPU demand {:.1} GPUs",
        wl.description,
        wl.jobs.len(),
        a.nodes,
        a.gpus_per_node,
        model.name,
        gpus,
        wl.peak_gpu_demand()
    );
    let bar = ProgressBar::new(wl.jobs.len() as u64);
    if a.quiet {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar.set_style(
        ProgressStyle::with_template("{msg:40!} [{bar:30}] {pos}/{len} jobs ({per_sec})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let progress = |label: &str, done: u64| {
        if done.is_multiple_of(1024) || done == wl.jobs.len() as u64 {
            bar.set_message(label.to_string());
            bar.set_position(done);
        }
    };
    if a.compare_requests {
        cfg.sample_interval_s = 0.0;
        let c = compare::compare_requests(&wl, &cfg, &opts, &progress)?;
        bar.finish_and_clear();
        let text = match a.format.as_str() {
            "table" => compare::terminal(&c),
            "markdown" => compare::markdown(&c),
            "json" => compare::json(&c)?,
            f => bail!("unknown format '{f}' for --compare-requests; allowed: table, markdown, json"),
        };
        print!("{text}");
        if let Some(dir) = &a.out {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            for (name, s) in [
                ("requests.md", compare::markdown(&c)),
                ("requests.json", compare::json(&c)?),
            ] {
                std::fs::write(dir.join(name), s).with_context(|| format!("writing {}", dir.join(name).display()))?;
            }
            eprintln!("wrote {}", dir.display());
        }
        return Ok(());
    }
    if a.ceilings {
        let (cs, floor, ev) = crate::ceilings::ceilings(&wl, &cfg, &opts)?;
        bar.finish_and_clear();
        print!("{}", crate::ceilings::markdown(&cs, floor.as_ref(), &ev));
        return Ok(());
    }
    let ev = evaluate(&wl, &cfg, &opts, &progress)?;
    bar.finish_and_clear();
    let text = match a.format.as_str() {
        "table" => report::terminal(&ev),
        "markdown" => report::markdown(&ev),
        "csv" => report::csv(&ev)?,
        "json" => report::json(&ev)?,
        f => bail!("unknown format '{f}'; allowed: table, markdown, csv, json"),
    };
    print!("{text}");
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let write = |name: &str, s: String| {
            std::fs::write(dir.join(name), s).with_context(|| format!("writing {}", dir.join(name).display()))
        };
        write("table.md", report::markdown(&ev))?;
        write("table.csv", report::csv(&ev)?)?;
        write("results.json", report::json(&ev)?)?;
        charts::et_chart(&ev.rows, &dir.join("et.svg"))?;
        let days = wl.jobs.last().map_or(1.0, |j| j.release / 86400.0);
        let day = a.chart_day.unwrap_or((days / 2.0) as u32);
        for r in &ev.runs {
            let name = format!("day-{}-{}.svg", r.policy, r.placement);
            charts::day_chart(r, day, &dir.join(name))?;
        }
        eprintln!("wrote {}", dir.display());
    }
    Ok(())
}
