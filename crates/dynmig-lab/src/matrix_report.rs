//! Tables of the goal matrix and the sensitivity grid ([`crate::matrix`]): aligned text,
//! Markdown and JSON.

use crate::matrix::{CellOutcome, Group, PolicySummary, Stat};
use crate::report::{aligned, site_cells, site_head, site_legend};
use anyhow::Result;
use serde::Serialize;

const HEAD: [&str; 13] = [
    "policy",
    "seeds",
    "ET (range)",
    "ET/static (range)",
    "ET/oracle (range)",
    "energy/job MJ",
    "tardiness s",
    "late %",
    "wait p50 s",
    "wait p99 s",
    "drain waste GPU-h",
    "reconfigs",
    "never started",
];

/// `mean (min-max)` with `d` decimals; `-` when not finite.
fn range(s: &Stat, d: usize) -> String {
    if !s.mean.is_finite() {
        return "-".into();
    }
    format!("{:.d$} ({:.d$}-{:.d$})", s.mean, s.min, s.max)
}

/// The mean with `d` decimals; `-` when not finite.
fn mean(s: &Stat, d: usize) -> String {
    if s.mean.is_finite() {
        format!("{:.d$}", s.mean)
    } else {
        "-".into()
    }
}

fn cells(p: &PolicySummary) -> Vec<String> {
    vec![
        p.policy.clone(),
        p.seeds.to_string(),
        range(&p.et, 3),
        range(&p.et_vs_static, 3),
        range(&p.et_vs_oracle, 3),
        mean(&p.energy_per_job_mj, 3),
        mean(&p.tardiness_s, 0),
        format!("{:.1}", 100.0 * p.late_share.mean),
        mean(&p.wait_p50_s, 0),
        mean(&p.wait_p99_s, 0),
        mean(&p.drain_waste_gpu_h, 1),
        mean(&p.reconfigs, 0),
        mean(&p.never_started, 0),
    ]
}

fn title(g: &Group) -> String {
    let seeds = match (g.seeds.iter().min(), g.seeds.iter().max()) {
        (Some(a), Some(b)) if (b - a + 1) as usize == g.seeds.len() => format!("seeds {a}-{b}"),
        _ => format!("seeds {:?}", g.seeds),
    };
    let mut s = format!("{} ({seeds}, {:.0} jobs on average", g.group, g.jobs);
    if g.skipped > 0 {
        s.push_str(&format!(", {} candidates skipped or rows omitted", g.skipped));
    }
    s.push(')');
    s
}

/// The site table of a group: per policy, one row per job class (means over seeds).
fn site_rows(g: &Group) -> Vec<Vec<String>> {
    g.policies
        .iter()
        .flat_map(|p| site_cells(&[p.policy.clone(), p.seeds.to_string()], &p.classes, &p.repartitions))
        .collect()
}

/// ET's implied energy price in a group (the same for every policy of a seed).
fn price(g: &Group) -> String {
    let p = g.policies.first().map(|p| &p.mj_per_tardiness_h);
    match p {
        Some(s) if s.mean.is_finite() => format!(
            "ET = (e / e_ref + t / t_ref) / 2, e_ref the energy lower bound per job, t_ref the mean full-GPU run of the judged jobs: 1 h of mean tardiness = {} MJ per job (mean (min-max) over seeds)",
            range(s, 3)
        ),
        _ => String::new(),
    }
}

/// The matrix as aligned text: per group, the site figures per policy and class, then one row
/// per policy (means over seeds, ranges of ET and its ratios).
pub fn matrix_terminal(groups: &[Group]) -> String {
    let mut s = String::new();
    for g in groups {
        s.push_str(&format!("== {}\n", title(g)));
        s.push_str(&aligned(&site_head(&["policy", "seeds"]), &site_rows(g)));
        s.push('\n');
        let rows: Vec<Vec<String>> = g.policies.iter().map(cells).collect();
        s.push_str(&aligned(&HEAD, &rows));
        s.push_str(&price(g));
        s.push_str("\n\n");
    }
    s.push_str(&frozen_markdown(groups));
    s.push_str(&site_legend());
    s.push('\n');
    s
}

/// The matrix as Markdown: a heading and two tables per group (site figures, then ET).
pub fn matrix_markdown(groups: &[Group]) -> String {
    let mut s = String::new();
    let head = site_head(&["policy", "seeds"]);
    for g in groups {
        s.push_str(&format!("### {}\n\n", title(g)));
        s.push_str(&format!("| {} |\n|{}\n", head.join(" | "), "---|".repeat(head.len())));
        for r in site_rows(g) {
            s.push_str(&format!("| {} |\n", r.join(" | ")));
        }
        s.push('\n');
        s.push_str(&format!("| {} |\n|{}\n", HEAD.join(" | "), "---|".repeat(HEAD.len())));
        for p in &g.policies {
            s.push_str(&format!("| {} |\n", cells(p).join(" | ")));
        }
        s.push_str(&format!("\n{}\n\n", price(g)));
    }
    s.push_str(&frozen_markdown(groups));
    s.push_str(&site_legend());
    s.push('\n');
    s
}

/// Within this share of its frozen mix's ET, a dynamic policy found a better static, not a
/// reason to change layouts (issue 27, item 6).
pub const FROZEN_TOLERANCE: f64 = 0.02;

/// What a policy's ET over its frozen mix's says.
fn frozen_verdict(r: f64) -> &'static str {
    if r < 1.0 - FROZEN_TOLERANCE {
        "adaptation pays"
    } else if r <= 1.0 + FROZEN_TOLERANCE {
        "a better static (within 2%)"
    } else {
        "its frozen mix is better"
    }
}

/// "Adaptation or a better static?" as Markdown: per group and policy with a frozen row, its
/// ET over the fair static's, its frozen mix's over the fair static's, and its ET over its
/// frozen mix's (mean and range over seeds), with the verdict ([`FROZEN_TOLERANCE`]).
pub fn frozen_markdown(groups: &[Group]) -> String {
    let mut rows = Vec::new();
    for g in groups {
        for p in g.policies.iter().filter(|p| p.et_vs_frozen.mean.is_finite()) {
            let frozen = format!("{}{}", p.policy, crate::evaluate::FROZEN_SUFFIX);
            let f = g.policies.iter().find(|x| x.policy == frozen);
            rows.push(format!(
                "| {} | {} | {} | {} | {} | {} |",
                g.group,
                p.policy,
                range(&p.et_vs_static, 3),
                f.map_or("-".into(), |f| range(&f.et_vs_static, 3)),
                range(&p.et_vs_frozen, 3),
                frozen_verdict(p.et_vs_frozen.mean)
            ));
        }
    }
    if rows.is_empty() {
        return String::new();
    }
    format!(
        "### Adaptation or a better static?\n\nEach policy whose layouts change beside the static layout of its own mean node mix over the judged days (`<policy>-frozen`); within {:.0}% of it, the policy found a better static, not a reason to change layouts.\n\n| group | policy | ET/static | frozen ET/static | ET/frozen | verdict |\n|---|---|---|---|---|---|\n{}\n\n",
        FROZEN_TOLERANCE * 100.0,
        rows.join("\n")
    )
}

/// The ranking of a group: `dynamic 0.612 < static 0.640 < ...` (mean ET).
pub fn ranking(g: &Group) -> String {
    g.ranking()
        .iter()
        .map(|p| format!("{} {}", p.policy, mean(&p.et, 3)))
        .collect::<Vec<_>>()
        .join(" < ")
}

/// The sensitivity grid as rows: the point, each policy's mean ET, and the ranking.
fn grid_rows(groups: &[Group]) -> (Vec<String>, Vec<Vec<String>>) {
    let mut names: Vec<String> = Vec::new();
    for g in groups {
        for p in &g.policies {
            if !names.contains(&p.policy) {
                names.push(p.policy.clone());
            }
        }
    }
    let mut head = vec!["point".to_string(), "seeds".to_string()];
    head.extend(names.iter().map(|n| format!("ET {n}")));
    head.push("dynamic/static".into());
    head.push("best".into());
    let rows = groups
        .iter()
        .map(|g| {
            let mut r = vec![g.point.clone(), g.seeds.len().to_string()];
            for n in &names {
                r.push(
                    g.policies
                        .iter()
                        .find(|p| &p.policy == n)
                        .map_or("-".into(), |p| mean(&p.et, 3)),
                );
            }
            r.push(
                g.policies
                    .iter()
                    .find(|p| p.policy == "dynamic")
                    .map_or("-".into(), |p| range(&p.et_vs_static, 3)),
            );
            r.push(g.ranking().first().map_or("-".into(), |p| p.policy.clone()));
            r
        })
        .collect();
    (head, rows)
}

/// The sensitivity grid as aligned text: a table of mean ETs per point, then each point's
/// full ranking.
pub fn grid_terminal(groups: &[Group]) -> String {
    let (head, rows) = grid_rows(groups);
    let head: Vec<&str> = head.iter().map(String::as_str).collect();
    let mut s = aligned(&head, &rows);
    s.push_str("\nranking by mean ET (best first):\n");
    for g in groups {
        s.push_str(&format!("  {}: {}\n", g.point, ranking(g)));
    }
    s
}

/// The sensitivity grid as Markdown.
pub fn grid_markdown(groups: &[Group]) -> String {
    let (head, rows) = grid_rows(groups);
    let mut s = format!("| {} |\n|{}\n", head.join(" | "), "---|".repeat(head.len()));
    for r in rows {
        s.push_str(&format!("| {} |\n", r.join(" | ")));
    }
    s.push_str("\nRanking by mean ET (best first):\n\n");
    for g in groups {
        s.push_str(&format!("- {}: {}\n", g.point, ranking(g)));
    }
    s
}

#[derive(Serialize)]
struct Json<'a> {
    groups: &'a [Group],
    cells: &'a [&'a CellOutcome],
    failures: &'a [String],
}

/// JSON: the groups' summaries, every cell's rows and the cells that failed.
///
/// # Errors
/// Serialisation failed.
pub fn json(groups: &[Group], cells: &[&CellOutcome], failures: &[String]) -> Result<String> {
    Ok(serde_json::to_string_pretty(&Json {
        groups,
        cells,
        failures,
    })?)
}
