//! The comparison table in four forms: aligned text for a terminal, Markdown, CSV and JSON.

use crate::evaluate::Evaluation;
use crate::metrics::Metrics;
use crate::window::fmt_days;
use anyhow::Result;

const HEAD: [&str; 22] = [
    "policy",
    "placement",
    "energy/job MJ",
    "E/E_lb",
    "tardiness s",
    "late %",
    "ET",
    "ET/none",
    "ET/static",
    "ET/oracle",
    "makespan h",
    "util %",
    "wait p50 s",
    "wait p99 s",
    "reconfigs",
    "drain waste GPU-h",
    "idle GPU-h",
    "E/job idle off MJ",
    "inst changes",
    "OOM restarts",
    "events",
    "wall s",
];

fn cells(m: &Metrics) -> Vec<String> {
    vec![
        m.policy.clone(),
        m.placement.clone(),
        format!("{:.3}", m.energy_per_job_j / 1e6),
        format!("{:.3}", 1.0 + m.energy_over_lb),
        format!("{:.0}", m.mean_tardiness_s),
        format!("{:.1}", 100.0 * m.late_share),
        format!("{:.3}", m.et),
        ratio(m.et_vs_none),
        ratio(m.et_vs_static),
        ratio(m.et_vs_oracle),
        format!("{:.1}", m.makespan_s / 3600.0),
        format!("{:.1}", 100.0 * m.utilisation),
        format!("{:.0}", m.wait_p50_s),
        format!("{:.0}", m.wait_p99_s),
        m.reconfigs.to_string(),
        format!("{:.1}", m.drain_waste_gpu_s / 3600.0),
        format!("{:.0}", m.idle_gpu_h),
        format!("{:.3}", m.energy_per_job_off_j / 1e6),
        m.instance_changes.to_string(),
        m.oom_restarts.to_string(),
        m.events.to_string(),
        format!("{:.2}", m.wall_s),
    ]
}

/// Which jobs were judged and where the fair baselines were searched.
fn window_line(e: &Evaluation) -> String {
    let w = &e.windows;
    let jobs = e.rows.first().map_or(0, |m| m.jobs);
    let mut s = format!(
        "judged: {jobs} jobs released in days [{}, {:.1}]; static and twice-daily searched on days [{}, {}), the oracles on the whole workload",
        fmt_days(w.eval_from_days),
        w.span_days,
        fmt_days(w.search_days.0),
        fmt_days(w.search_days.1)
    );
    if !w.note.is_empty() {
        s.push_str(&format!(" ({})", w.note));
    }
    s
}

fn bounds_line(e: &Evaluation) -> String {
    format!(
        "lower bounds (whole workload): energy/job {:.3} MJ, mean tardiness {:.0} s, makespan {:.1} h",
        e.bounds.energy_per_job_j / 1e6,
        e.bounds.mean_tardiness_s,
        e.bounds.makespan_s / 3600.0
    )
}

/// A ratio to a policy that was not run (NaN) is shown as `-`.
fn ratio(r: f64) -> String {
    if r.is_finite() {
        format!("{r:.3}")
    } else {
        "-".into()
    }
}

/// `head` and `rows` as aligned text: the first two columns left-aligned, the others right,
/// two spaces between columns, one line per row (the header first).
pub fn aligned(head: &[&str], rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..head.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].len())
                .chain([head[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |r: &[String]| -> String {
        r.iter()
            .enumerate()
            .map(|(i, c)| {
                if i < 2 {
                    format!("{c:<w$}", w = widths[i])
                } else {
                    format!("{c:>w$}", w = widths[i])
                }
            })
            .collect::<Vec<_>>()
            .join("  ")
    };
    let mut s = line(&head.iter().map(|h| h.to_string()).collect::<Vec<_>>());
    s.push('\n');
    for r in rows {
        s.push_str(&line(r));
        s.push('\n');
    }
    s
}

/// Aligned text.
pub fn terminal(e: &Evaluation) -> String {
    let rows: Vec<Vec<String>> = e.rows.iter().map(cells).collect();
    let mut s = aligned(&HEAD, &rows);
    s.push_str(&window_line(e));
    s.push('\n');
    s.push_str(&bounds_line(e));
    s.push('\n');
    for m in &e.rows {
        s.push_str(&format!("  {} / {}: {}\n", m.policy, m.placement, m.detail));
    }
    s.push_str(&skipped_lines(e));
    s
}

/// The warnings of the evaluation (candidates skipped, rows omitted), one line each.
fn skipped_lines(e: &Evaluation) -> String {
    e.skipped.iter().map(|w| format!("  warning: {w}\n")).collect()
}

/// Markdown table.
pub fn markdown(e: &Evaluation) -> String {
    let mut s = format!("| {} |\n|{}\n", HEAD.join(" | "), "---|".repeat(HEAD.len()));
    for m in &e.rows {
        s.push_str(&format!("| {} |\n", cells(m).join(" | ")));
    }
    s.push_str(&format!("\n{}\n\n{}\n", window_line(e), bounds_line(e)));
    if !e.skipped.is_empty() {
        s.push('\n');
        s.push_str(&skipped_lines(e));
    }
    s
}

/// CSV, one row per policy and placement, every metric in its unit (J, s).
///
/// # Errors
/// Serialisation failed.
pub fn csv(e: &Evaluation) -> Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    for m in &e.rows {
        w.serialize(m)?;
    }
    Ok(String::from_utf8(w.into_inner()?)?)
}

/// JSON: rows, bounds and the candidates tried.
///
/// # Errors
/// Serialisation failed.
pub fn json(e: &Evaluation) -> Result<String> {
    Ok(serde_json::to_string_pretty(e)?)
}
