//! SVG charts (plotters): ET per policy, and one day of a run: instances per profile (the
//! layouts), queue length and cluster power over time.

use anyhow::{anyhow, Result};
use dynmig_sim::engine::RunResult;
use dynmig_sim::metrics::Metrics;
use plotters::prelude::*;
use std::path::Path;

fn err<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow!("drawing chart: {e}")
}

/// Bar chart of ET per row (policy / placement), written to `path`.
///
/// # Errors
/// The file cannot be written.
pub fn et_chart(rows: &[Metrics], path: &Path) -> Result<()> {
    let root = SVGBackend::new(path, (120 + 110 * rows.len() as u32, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let max = rows.iter().map(|r| r.et).fold(0.0f64, f64::max).max(1e-9) * 1.15;
    let mut ch = ChartBuilder::on(&root)
        .caption(
            "ET = (e / e_ref + t / t_ref) / 2, fixed references of the workload",
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(60)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..rows.len() as f64, 0f64..max)
        .map_err(err)?;
    ch.configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc("ET")
        .draw()
        .map_err(err)?;
    for (i, r) in rows.iter().enumerate() {
        let x = i as f64;
        ch.draw_series([Rectangle::new(
            [(x + 0.15, 0.0), (x + 0.85, r.et)],
            BLUE.mix(0.6).filled(),
        )])
        .map_err(err)?;
        ch.draw_series([Text::new(
            format!("{}/{}", r.policy, r.placement),
            (x + 0.1, -max * 0.06),
            ("sans-serif", 12),
        )])
        .map_err(err)?;
        ch.draw_series([Text::new(
            format!("{:.3}", r.et),
            (x + 0.3, r.et + max * 0.02),
            ("sans-serif", 12),
        )])
        .map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

/// One day (`day`, counted from 0) of `run`: instances per profile, queue length, and power,
/// three panels, written to `path`. Needs samples (`sample_interval_s > 0`).
///
/// # Errors
/// No samples in that day, or the file cannot be written.
pub fn day_chart(run: &RunResult, day: u32, path: &Path) -> Result<()> {
    let (t0, t1) = (f64::from(day) * 86400.0, f64::from(day + 1) * 86400.0);
    let s: Vec<_> = run.samples.iter().filter(|s| s.t_s >= t0 && s.t_s < t1).collect();
    if s.is_empty() {
        return Err(anyhow!("run {} has no samples in day {day}", run.policy));
    }
    let root = SVGBackend::new(path, (900, 900)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let panels = root.split_evenly((3, 1));
    let hours = |t: f64| (t - t0) / 3600.0;

    let max_inst = s
        .iter()
        .map(|x| x.instances.iter().sum::<u32>())
        .max()
        .unwrap_or(1)
        .max(1);
    let mut ch = ChartBuilder::on(&panels[0])
        .caption(
            format!(
                "{}: instances per profile, stacked (each line adds its profile), day {day}",
                run.policy
            ),
            ("sans-serif", 16),
        )
        .margin(8)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..24f64, 0f64..f64::from(max_inst) * 1.05)
        .map_err(err)?;
    ch.configure_mesh()
        .x_desc("hour")
        .y_desc("instances, cumulative")
        .draw()
        .map_err(err)?;
    for (p, name) in run.profiles.iter().enumerate() {
        let color = Palette99::pick(p).to_rgba();
        // stacked: the sum of profiles 0..=p
        let pts: Vec<(f64, f64)> = s
            .iter()
            .map(|x| (hours(x.t_s), f64::from(x.instances[..=p].iter().sum::<u32>())))
            .collect();
        ch.draw_series(LineSeries::new(pts, color.stroke_width(2)))
            .map_err(err)?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 15, y)], color));
    }
    ch.configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(err)?;

    let max_q = s.iter().map(|x| x.queue).max().unwrap_or(0).max(1);
    let mut ch = ChartBuilder::on(&panels[1])
        .caption("queued jobs", ("sans-serif", 16))
        .margin(8)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..24f64, 0f64..f64::from(max_q) * 1.05)
        .map_err(err)?;
    ch.configure_mesh().x_desc("hour").y_desc("jobs").draw().map_err(err)?;
    ch.draw_series(LineSeries::new(
        s.iter().map(|x| (hours(x.t_s), f64::from(x.queue))),
        &RED,
    ))
    .map_err(err)?;

    let max_w = s.iter().map(|x| x.power_w).fold(0.0, f64::max).max(1.0);
    let mut ch = ChartBuilder::on(&panels[2])
        .caption("cluster power, kW", ("sans-serif", 16))
        .margin(8)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..24f64, 0f64..max_w / 1000.0 * 1.05)
        .map_err(err)?;
    ch.configure_mesh().x_desc("hour").y_desc("kW").draw().map_err(err)?;
    ch.draw_series(LineSeries::new(
        s.iter().map(|x| (hours(x.t_s), x.power_w / 1000.0)),
        &BLACK,
    ))
    .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}
