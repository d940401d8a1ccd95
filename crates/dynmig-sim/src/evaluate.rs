//! Runs every policy side by side on one workload: `none`, the best `static` layout (searched),
//! the best `twice-daily` pair, `dynamic` (the controller's policy) and the learned
//! `time-of-day` schedule, for each placement rule; then bounds and ET.

use crate::bounds::{bounds, Bounds};
use crate::cluster::Cluster;
use crate::engine::{simulate, RunResult, SimConfig};
use crate::metrics::{metrics, normalise, Metrics};
use crate::placement::Placement;
use crate::policies::mix::{mix_for_demand, uniform};
use crate::policies::{Objective, PlannerSettings, PolicyLimits, PolicySpec};
use crate::workload::Workload;
use anyhow::{bail, Result};
use dynmig_core::geometry::{distinct_multisets, NodeLayout};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// A policy to compare, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PolicyName {
    /// Whole GPUs.
    None,
    /// Best static layout.
    Static,
    /// Best day/night pair.
    TwiceDaily,
    /// The controller's demand-driven policy.
    Dynamic,
    /// Learned time-of-day schedule.
    TimeOfDay,
    /// The planning policy, speed objective.
    Plan,
    /// The planning policy, consolidate objective.
    Consolidate,
}

/// Every policy, in report order.
pub const ALL_POLICIES: [PolicyName; 5] = [
    PolicyName::None,
    PolicyName::Static,
    PolicyName::TwiceDaily,
    PolicyName::Dynamic,
    PolicyName::TimeOfDay,
];

impl std::str::FromStr for PolicyName {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "none" => PolicyName::None,
            "static" => PolicyName::Static,
            "twice-daily" => PolicyName::TwiceDaily,
            "dynamic" => PolicyName::Dynamic,
            "time-of-day" => PolicyName::TimeOfDay,
            "plan" => PolicyName::Plan,
            "consolidate" => PolicyName::Consolidate,
            _ => {
                return Err(format!(
                    "unknown policy '{s}'; allowed: none, static, twice-daily, dynamic, time-of-day, plan, consolidate"
                ))
            }
        })
    }
}

/// Options of an evaluation.
#[derive(Debug, Clone)]
pub struct EvalOptions {
    /// Policies to run.
    pub policies: Vec<PolicyName>,
    /// Placement rules to run each policy with.
    pub placements: Vec<Placement>,
    /// Limits of the dynamic policy.
    pub limits: PolicyLimits,
    /// Periods per day of the learned schedule.
    pub periods: u32,
    /// Day starts (s after midnight) and night starts for the twice-daily policy (8:00, 20:00).
    pub day_night: (f64, f64),
    /// Twice-daily candidates: pairs among this many best static layouts, plus the demand mix
    /// pair (3).
    pub top_static: usize,
}

impl Default for EvalOptions {
    fn default() -> Self {
        Self {
            policies: ALL_POLICIES.to_vec(),
            placements: vec![Placement::Slurm],
            limits: PolicyLimits::default(),
            periods: 4,
            day_night: (8.0 * 3600.0, 20.0 * 3600.0),
            top_static: 3,
        }
    }
}

/// Everything one evaluation produced.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Evaluation {
    /// One row per policy and placement, ET filled in.
    pub rows: Vec<Metrics>,
    /// The bounds (the same for every row).
    pub bounds: Bounds,
    /// The runs of the rows, for charts (samples kept).
    #[serde(skip)]
    pub runs: Vec<RunResult>,
    /// Every static and twice-daily candidate tried: (placement, name, ET).
    pub candidates: Vec<(String, String, f64)>,
}

/// Mean concurrency per profile of single-GPU jobs (at their smallest fitting profile) and of
/// multi-GPU GPUs, over jobs released in `[from, to)` seconds of the day (all if `None`).
fn demand_mix(wl: &Workload, c: &Cluster, window: Option<(f64, f64)>) -> (Vec<f64>, f64) {
    let mut d = vec![0.0; c.profiles.len()];
    let mut multi = 0.0;
    let horizon = wl.jobs.last().map_or(1.0, |j| j.release.max(1.0));
    let share = window.map_or(1.0, |(a, b)| {
        if b > a {
            (b - a) / 86400.0
        } else {
            (86400.0 - a + b) / 86400.0
        }
    });
    for j in &wl.jobs {
        if let Some((a, b)) = window {
            let tod = j.release % 86400.0;
            let inside = if a < b {
                tod >= a && tod < b
            } else {
                tod >= a || tod < b
            };
            if !inside {
                continue;
            }
        }
        if j.gpus > 1 {
            multi += f64::from(j.gpus) * j.work;
        } else if let Some(p) = c.smallest_fitting(j.mem_mib) {
            d[p] += j.time_on(c.profiles[p].compute_slices, c.model.compute_slices);
        }
    }
    let span = horizon * share;
    (d.into_iter().map(|x| x / span).collect(), multi / span)
}

fn describe(layouts: &[NodeLayout]) -> String {
    let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
    for n in layouts {
        for g in &n.gpus {
            *counts.entry(g.to_string()).or_insert(0) += 1;
        }
    }
    let mut v: Vec<_> = counts.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v.iter()
        .map(|(l, n)| format!("{n}x[{l}]"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs the comparison. `progress(label, done_jobs)` is told about each run's progress.
///
/// # Errors
/// A run failed (see [`simulate`]).
pub fn evaluate(
    wl: &Workload,
    cfg: &SimConfig,
    opts: &EvalOptions,
    progress: &dyn Fn(&str, u64),
) -> Result<Evaluation> {
    if wl.jobs.is_empty() {
        bail!("the workload has no jobs");
    }
    let gpus = cfg.nodes * cfg.gpus_per_node;
    let b = bounds(wl, cfg.model, gpus, &cfg.power);
    let mean_work = wl.jobs.iter().map(|j| j.work).sum::<f64>() / wl.jobs.len() as f64;
    let probe = Cluster::new(cfg.model, cfg.gpus_per_node, &[], cfg.power.clone())?;
    let cands = distinct_multisets(cfg.model);
    let (all_d, all_multi) = demand_mix(wl, &probe, None);
    let whole = if all_multi > 0.0 {
        ((all_multi / cfg.gpus_per_node as f64).ceil() as usize).clamp(1, cfg.nodes)
    } else {
        0
    };
    let mut rows = Vec::new();
    let mut runs = Vec::new();
    let mut tried = Vec::new();
    for &pl in &opts.placements {
        let mut c = cfg.clone();
        c.placement = pl;
        let mut quiet = c.clone();
        quiet.sample_interval_s = 0.0;
        let run = |spec: &PolicySpec, cfg: &SimConfig, label: &str| -> Result<(RunResult, f64)> {
            let t0 = Instant::now();
            let r = simulate(wl, spec, cfg, &|d| progress(label, d))?;
            Ok((r, t0.elapsed().as_secs_f64()))
        };
        // The reference: none (always run; ET needs it).
        let (none_r, none_w) = run(&PolicySpec::None, &c, &format!("{pl}/none"))?;
        let none_m = metrics(wl, &none_r, &b, "whole GPUs", none_w);
        let score = |m: &Metrics| -> f64 {
            let mut v = vec![none_m.clone(), m.clone()];
            normalise(&mut v, mean_work);
            v[1].et
        };
        let mut out: Vec<(Metrics, RunResult)> = Vec::new();
        if opts.policies.contains(&PolicyName::None) {
            out.push((none_m.clone(), none_r));
        }
        let need_static = opts
            .policies
            .iter()
            .any(|p| matches!(p, PolicyName::Static | PolicyName::TwiceDaily));
        let mut statics: Vec<(f64, String, Vec<NodeLayout>)> = Vec::new();
        if need_static {
            let mut specs: Vec<(String, Vec<NodeLayout>)> = cands
                .iter()
                .map(|l| {
                    (
                        format!("{whole} whole nodes, rest {l}"),
                        uniform(cfg.model, cfg.nodes, cfg.gpus_per_node, l, whole),
                    )
                })
                .collect();
            let mix = mix_for_demand(
                cfg.model,
                &probe.profiles,
                cfg.nodes,
                cfg.gpus_per_node,
                &all_d,
                all_multi,
                &cands,
            );
            specs.push((format!("demand mix: {}", describe(&mix)), mix));
            for (name, l) in specs {
                let (r, w) = run(&PolicySpec::Static(l.clone()), &quiet, &format!("{pl}/static {name}"))?;
                let m = metrics(wl, &r, &b, &name, w);
                let et = score(&m);
                tried.push((pl.to_string(), format!("static {name}"), et));
                statics.push((et, name, l));
            }
            statics.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        if opts.policies.contains(&PolicyName::Static) {
            let (_, name, l) = &statics[0];
            let (r, w) = run(&PolicySpec::Static(l.clone()), &c, &format!("{pl}/static"))?;
            out.push((
                metrics(wl, &r, &b, &format!("best of {}: {name}", cands.len() + 1), w),
                r,
            ));
        }
        if opts.policies.contains(&PolicyName::TwiceDaily) {
            let (day, night) = opts.day_night;
            let mut pairs: Vec<(String, Vec<NodeLayout>, Vec<NodeLayout>)> = Vec::new();
            let top = &statics[..opts.top_static.min(statics.len())];
            for a in top {
                for b2 in top {
                    if a.1 != b2.1 {
                        pairs.push((format!("day {} / night {}", a.1, b2.1), a.2.clone(), b2.2.clone()));
                    }
                }
            }
            let (dd, dm) = demand_mix(wl, &probe, Some((day, night)));
            let (nd, nm) = demand_mix(wl, &probe, Some((night, day)));
            let dmix = mix_for_demand(
                cfg.model,
                &probe.profiles,
                cfg.nodes,
                cfg.gpus_per_node,
                &dd,
                dm,
                &cands,
            );
            let nmix = mix_for_demand(
                cfg.model,
                &probe.profiles,
                cfg.nodes,
                cfg.gpus_per_node,
                &nd,
                nm,
                &cands,
            );
            pairs.push(("day and night demand mixes".into(), dmix, nmix));
            let sched = |d: &Vec<NodeLayout>, n: &Vec<NodeLayout>| {
                let mut v = vec![
                    (Duration::from_secs_f64(day), d.clone()),
                    (Duration::from_secs_f64(night), n.clone()),
                ];
                v.sort_by_key(|x| x.0);
                PolicySpec::Scheduled(v)
            };
            let mut best: Option<(f64, String, PolicySpec)> = None;
            for (name, d, n) in pairs {
                let spec = sched(&d, &n);
                let (r, w) = run(&spec, &quiet, &format!("{pl}/twice-daily {name}"))?;
                let et = score(&metrics(wl, &r, &b, &name, w));
                tried.push((pl.to_string(), format!("twice-daily {name}"), et));
                if best.as_ref().is_none_or(|x| et < x.0) {
                    best = Some((et, name, spec));
                }
            }
            if let Some((_, name, spec)) = best {
                let (r, w) = run(&spec, &c, &format!("{pl}/twice-daily"))?;
                out.push((metrics(wl, &r, &b, &name, w), r));
            }
        }
        if opts.policies.contains(&PolicyName::Dynamic) {
            let (r, w) = run(&PolicySpec::Dynamic(opts.limits.clone()), &c, &format!("{pl}/dynamic"))?;
            let detail = format!(
                "DemandDriven, max {} nodes at once, min lifetime {:?}, interval {} s",
                opts.limits.max_concurrent, opts.limits.min_layout_lifetime, cfg.policy_interval_s
            );
            out.push((metrics(wl, &r, &b, &detail, w), r));
        }
        for (name, objective) in [
            (PolicyName::Plan, Objective::Speed),
            (PolicyName::Consolidate, Objective::Consolidate),
        ] {
            if opts.policies.contains(&name) {
                let spec = PolicySpec::Plan(PlannerSettings::new(opts.limits.clone(), objective));
                let (r, w) = run(&spec, &c, &format!("{pl}/{}", spec.name()))?;
                let detail = format!(
                    "Planner ({objective:?}), max {} nodes at once, interval {} s, drain {:?} at {:?}",
                    opts.limits.max_concurrent, cfg.policy_interval_s, cfg.drain, cfg.timing
                );
                out.push((metrics(wl, &r, &b, &detail, w), r));
            }
        }
        if opts.policies.contains(&PolicyName::TimeOfDay) {
            let spec = PolicySpec::Learned { periods: opts.periods };
            let (r, w) = run(&spec, &c, &format!("{pl}/time-of-day"))?;
            let detail = format!("{} periods a day, relearned each midnight", opts.periods);
            out.push((metrics(wl, &r, &b, &detail, w), r));
        }
        for (m, r) in out {
            rows.push(m);
            runs.push(r);
        }
    }
    normalise(&mut rows, mean_work);
    Ok(Evaluation {
        rows,
        bounds: b,
        runs,
        candidates: tried,
    })
}
