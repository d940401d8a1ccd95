//! The comparison table in four forms: aligned text for a terminal, Markdown, CSV and JSON.

use crate::evaluate::Evaluation;
use crate::window::fmt_days;
use anyhow::Result;
use dynmig_sim::metrics::{ClassFigures, Metrics, Norm, Repartitions, BSLD_THRESHOLD_S};

const HEAD: [&str; 23] = [
    "policy",
    "placement",
    "never started",
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
        m.never_started.to_string(),
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

/// A class starves when its 99th-percentile queue wait is longer than this, s (24 h: a job
/// of a class that waits more than a day one time in a hundred is what users report as
/// "my jobs never start"; a threshold chosen for the tables, not from a source). Its p99
/// cell is flagged with `!`.
pub const STARVATION_P99_S: f64 = 24.0 * 3600.0;

/// A p99 wait in hours, flagged with `!` when the class starves ([`STARVATION_P99_S`]).
pub fn p99_hours(wait_p99_s: f64) -> String {
    let flag = if wait_p99_s > STARVATION_P99_S { "!" } else { "" };
    format!("{:.2}{flag}", wait_p99_s / 3600.0)
}

/// The columns of the site table after the two that name a row (e.g. policy and placement).
pub const SITE_HEAD: [&str; 12] = [
    "class",
    "jobs",
    "wait p50 h",
    "wait p95 h",
    "wait p99 h",
    "wait max h",
    "bsld mean",
    "bsld p95",
    "GPU-h/day",
    "slice util %",
    "reparts/node/day",
    "GPU-h idle/repart",
];

/// The site table's rows of one policy: `first` (the cells naming it) then one row per class
/// of `classes` (the `all` row first, with the repartition figures, which are cluster-wide).
pub fn site_cells(first: &[String], classes: &[ClassFigures], rep: &Repartitions) -> Vec<Vec<String>> {
    classes
        .iter()
        .map(|c| {
            let mut r = first.to_vec();
            let h = |s: f64| format!("{:.2}", s / 3600.0);
            r.extend([
                c.class.clone(),
                c.jobs.to_string(),
                h(c.wait_p50_s),
                h(c.wait_p95_s),
                p99_hours(c.wait_p99_s),
                h(c.wait_max_s),
                format!("{:.2}", c.bsld_mean),
                format!("{:.2}", c.bsld_p95),
                format!("{:.1}", c.gpu_h_per_day),
                format!("{:.1}", 100.0 * c.slice_util),
            ]);
            if c.class == "all" {
                r.push(format!("{:.3}", rep.per_node_day));
                r.push(format!("{:.2}", rep.idle_gpu_h_per_repartition));
            } else {
                r.extend([String::new(), String::new()]);
            }
            r
        })
        .collect()
}

/// The site table's head after `first` (the columns naming a row).
pub fn site_head<'a>(first: &[&'a str]) -> Vec<&'a str> {
    first.iter().copied().chain(SITE_HEAD).collect()
}

/// What the site table's columns are, one line.
pub fn site_legend() -> String {
    format!(
        "site figures of the judged jobs per class (slice<=3g: 1g-3g; 1 GPU: 4g-7g; multi-GPU): waits, bounded slowdown max(1, (wait + run) / max(run, {BSLD_THRESHOLD_S:.0} s)) (Feitelson, JSSPP 2001), full-GPU hours of work per day, share of compute slices held; repartitions per node and day and drain waste (GPU-h held idle) per repartition, from the window start; `!`: the class starves (p99 wait over {:.0} h)",
        STARVATION_P99_S / 3600.0
    )
}

/// ET's references and the energy price its weights imply, one line.
pub fn price_line(n: &Norm) -> String {
    format!(
        "ET = (e / e_ref + t / t_ref) / 2 with fixed references: e_ref = {:.3} MJ per job (energy lower bound per job of the workload), t_ref = {:.0} s (mean full-GPU run time of the judged jobs); its implied price: 1 h of mean tardiness = {:.3} MJ per job",
        n.e_ref_j / 1e6,
        n.t_ref_s,
        n.mj_per_tardiness_hour()
    )
}

fn site_rows(e: &Evaluation) -> Vec<Vec<String>> {
    e.rows
        .iter()
        .flat_map(|m| site_cells(&[m.policy.clone(), m.placement.clone()], &m.classes, &m.repartitions()))
        .collect()
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
    let mut s = aligned(&site_head(&["policy", "placement"]), &site_rows(e));
    s.push_str(&site_legend());
    s.push_str("\n\n");
    let rows: Vec<Vec<String>> = e.rows.iter().map(cells).collect();
    s.push_str(&aligned(&HEAD, &rows));
    s.push_str(&price_line(&e.norm));
    s.push('\n');
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
    let head = site_head(&["policy", "placement"]);
    let mut s = format!("| {} |\n|{}\n", head.join(" | "), "---|".repeat(head.len()));
    for r in site_rows(e) {
        s.push_str(&format!("| {} |\n", r.join(" | ")));
    }
    s.push_str(&format!("\n{}\n\n", site_legend()));
    s.push_str(&format!("| {} |\n|{}\n", HEAD.join(" | "), "---|".repeat(HEAD.len())));
    for m in &e.rows {
        s.push_str(&format!("| {} |\n", cells(m).join(" | ")));
    }
    s.push_str(&format!(
        "\n{}\n\n{}\n\n{}\n",
        price_line(&e.norm),
        window_line(e),
        bounds_line(e)
    ));
    if !e.skipped.is_empty() {
        s.push('\n');
        s.push_str(&skipped_lines(e));
    }
    s
}

/// CSV, one row per policy and placement, every metric in its unit (J, s): the per-class
/// figures first (`<class>_<figure>` for the classes all, slice, gpu, multi; empty where a
/// class has no judged job), then [`Metrics`]' own fields.
///
/// # Errors
/// Serialisation failed.
pub fn csv(e: &Evaluation) -> Result<String> {
    const CLASS_KEYS: [(&str, &str); 4] = [
        ("all", "all"),
        ("slice<=3g", "slice"),
        ("1 GPU", "gpu"),
        ("multi-GPU", "multi"),
    ];
    const FIELDS: [&str; 9] = [
        "jobs",
        "wait_p50_s",
        "wait_p95_s",
        "wait_p99_s",
        "wait_max_s",
        "bsld_mean",
        "bsld_p95",
        "gpu_h_per_day",
        "slice_util",
    ];
    let mut site = csv::Writer::from_writer(Vec::new());
    let mut head: Vec<String> = Vec::new();
    for (_, k) in CLASS_KEYS {
        head.extend(FIELDS.iter().map(|f| format!("{k}_{f}")));
    }
    site.write_record(&head)?;
    for m in &e.rows {
        let mut r: Vec<String> = Vec::new();
        for (name, _) in CLASS_KEYS {
            match m.classes.iter().find(|c| c.class == name) {
                Some(c) => r.extend(
                    [
                        c.jobs as f64,
                        c.wait_p50_s,
                        c.wait_p95_s,
                        c.wait_p99_s,
                        c.wait_max_s,
                        c.bsld_mean,
                        c.bsld_p95,
                        c.gpu_h_per_day,
                        c.slice_util,
                    ]
                    .map(|x| x.to_string()),
                ),
                None => r.extend(FIELDS.iter().map(|_| String::new())),
            }
        }
        site.write_record(&r)?;
    }
    // Metrics' own fields (the classes are the columns above).
    let mut rest = csv::Writer::from_writer(Vec::new());
    for m in &e.rows {
        let mut plain = m.clone();
        plain.classes.clear();
        rest.serialize(&plain)?;
    }
    let site = String::from_utf8(site.into_inner()?)?;
    let rest = String::from_utf8(rest.into_inner()?)?;
    let mut out = String::new();
    for (a, b) in site.lines().zip(rest.lines()) {
        out.push_str(a);
        out.push(',');
        out.push_str(b);
        out.push('\n');
    }
    Ok(out)
}

/// JSON: rows, bounds and the candidates tried.
///
/// # Errors
/// Serialisation failed.
pub fn json(e: &Evaluation) -> Result<String> {
    Ok(serde_json::to_string_pretty(e)?)
}
