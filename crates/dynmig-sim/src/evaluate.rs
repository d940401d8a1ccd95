//! Runs every policy side by side on one workload and judges each on the same evaluation
//! window (docs/simulate.md, "Fair baselines"): `none`; the best `static` layout and the best
//! `twice-daily` pair searched on the jobs of the search window only (fair) and, as
//! references, searched on the whole workload (`static-oracle`, `twice-daily-oracle`);
//! `dynamic` (the controller's policy) and the learned `time-of-day` schedule; for each
//! placement rule; then bounds and ET.

use crate::bounds::{bounds, Bounds};
use crate::engine::{simulate, RunResult, SimConfig};
use crate::metrics::{judged_jobs, metrics, normalise, Metrics};
use crate::placement::Placement;
use crate::policies::mpc::MpcSettings;
use crate::policies::{Objective, PlannerSettings, PolicyLimits, PolicySpec};
use crate::search::{describe_job, spec_layouts, unrunnable, Ranked, Searcher};
use crate::window::{fmt_days, released_in, windows, Windows};
use crate::workload::Workload;
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// A policy to compare, by name (one row of the report per placement).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PolicyName {
    /// Whole GPUs.
    None,
    /// Best static layout searched on the search window (fair).
    Static,
    /// Best static layout searched on the whole workload and judged jobs (a reference).
    StaticOracle,
    /// Best day/night pair searched on the search window (fair).
    TwiceDaily,
    /// Best day/night pair searched on the whole workload (a reference).
    TwiceDailyOracle,
    /// The controller's demand-driven policy.
    Dynamic,
    /// Learned time-of-day schedule.
    TimeOfDay,
    /// The planning policy, speed objective.
    Plan,
    /// The planning policy, consolidate objective (fewest GPUs busy).
    Consolidate,
    /// The planner's proposals made only when a lookahead run of the engine says they pay.
    Mpc,
}

/// Every policy, in report order.
pub const ALL_POLICIES: [PolicyName; 10] = [
    PolicyName::None,
    PolicyName::Static,
    PolicyName::StaticOracle,
    PolicyName::TwiceDaily,
    PolicyName::TwiceDailyOracle,
    PolicyName::Dynamic,
    PolicyName::TimeOfDay,
    PolicyName::Plan,
    PolicyName::Consolidate,
    PolicyName::Mpc,
];

impl PolicyName {
    /// The name on the command line and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyName::None => "none",
            PolicyName::Static => "static",
            PolicyName::StaticOracle => "static-oracle",
            PolicyName::TwiceDaily => "twice-daily",
            PolicyName::TwiceDailyOracle => "twice-daily-oracle",
            PolicyName::Dynamic => "dynamic",
            PolicyName::TimeOfDay => "time-of-day",
            PolicyName::Plan => "plan",
            PolicyName::Consolidate => "consolidate",
            PolicyName::Mpc => "mpc",
        }
    }
}

impl std::fmt::Display for PolicyName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for PolicyName {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.to_ascii_lowercase();
        ALL_POLICIES.iter().copied().find(|p| p.as_str() == s).ok_or_else(|| {
            format!(
                "unknown policy '{s}'; allowed: {}",
                ALL_POLICIES.map(PolicyName::as_str).join(", ")
            )
        })
    }
}

/// Options of an evaluation.
#[derive(Debug, Clone)]
pub struct EvalOptions {
    /// Policies to run, in report order.
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
    /// Search window `[A, B)` in days of the workload [default: `[0, 14)`, see
    /// [`crate::window::windows`]].
    pub search_days: Option<(f64, f64)>,
    /// Start of the evaluation window in days [default: 14].
    pub eval_from_days: Option<f64>,
    /// Print a warning to stderr for each candidate skipped (they are listed in
    /// [`Evaluation::skipped`] either way).
    pub warn: bool,
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
            search_days: None,
            eval_from_days: None,
            warn: true,
        }
    }
}

/// Everything one evaluation produced.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Evaluation {
    /// One row per policy and placement, ET filled in.
    pub rows: Vec<Metrics>,
    /// The bounds (the same for every row; over the whole workload).
    pub bounds: Bounds,
    /// The runs of the rows, for charts (samples kept).
    #[serde(skip)]
    pub runs: Vec<RunResult>,
    /// Every static and twice-daily candidate tried: (placement, name, ET), the name starting
    /// with `fair` (searched on the search window) or `oracle`.
    pub candidates: Vec<(String, String, f64)>,
    /// The search and evaluation windows.
    pub windows: Windows,
    /// Warnings: candidates skipped (naming the job they cannot run) and rows omitted.
    pub skipped: Vec<String>,
}

/// Which search a row's policy comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Search {
    /// On the jobs of the search window.
    Fair,
    /// On the whole workload, judged on the evaluation window.
    Oracle,
}

/// The searches done for one placement, kept for the rows that need them.
#[derive(Default)]
struct Found {
    statics: Option<(Vec<Ranked>, usize)>,
    pairs: Option<(Vec<Ranked>, usize)>,
}

/// The rows of one placement: runs each policy on the whole workload, judged on the window.
struct Bench<'a> {
    wl: &'a Workload,
    search_wl: &'a Workload,
    c: SimConfig,
    opts: &'a EvalOptions,
    win: &'a Windows,
    b: &'a Bounds,
    progress: &'a dyn Fn(&str, u64),
    searchers: [Option<Searcher<'a>>; 2],
    found: [Found; 2],
    skipped: Vec<String>,
}

impl<'a> Bench<'a> {
    fn warn(&mut self, msg: String) {
        if self.opts.warn {
            eprintln!("warning: {msg}");
        }
        self.skipped.push(msg);
    }

    /// Runs `spec` on the whole workload and judges it.
    fn run(&self, spec: &PolicySpec, row: &str, detail: &str) -> Result<(Metrics, RunResult)> {
        let label = format!("{}/{row}", self.c.placement);
        let t0 = Instant::now();
        let mut r = simulate(self.wl, spec, &self.c, &|d| (self.progress)(&label, d))?;
        let wall = t0.elapsed().as_secs_f64();
        r.policy = row.to_string();
        let mut m = metrics(self.wl, &r, self.b, detail, wall, self.c.window_start_s);
        m.policy = row.to_string();
        Ok((m, r))
    }

    /// The searcher of `which`, created on first use (`None` when the search window holds no
    /// job).
    fn searcher(&mut self, which: Search) -> Result<Option<&mut Searcher<'a>>> {
        let i = which as usize;
        if self.searchers[i].is_none() {
            let (wl, from) = match which {
                Search::Fair if self.search_wl.jobs.is_empty() => return Ok(None),
                Search::Fair => (self.search_wl, self.win.search_days.0 * 86400.0),
                Search::Oracle => (self.wl, self.c.window_start_s),
            };
            let mut cfg = self.c.clone();
            cfg.window_start_s = from;
            let tag = match which {
                Search::Fair => "fair",
                Search::Oracle => "oracle",
            };
            self.searchers[i] = Some(Searcher::new(wl, &cfg, tag, self.opts.warn, self.progress)?);
        }
        Ok(self.searchers[i].as_mut())
    }
}

impl Bench<'_> {
    /// The static candidates of `which`, searched once (`None`: nothing to search on).
    fn statics(&mut self, which: Search) -> Result<Option<(Vec<Ranked>, usize)>> {
        let i = which as usize;
        if self.found[i].statics.is_none() {
            let progress = self.progress;
            let Some(s) = self.searcher(which)? else {
                return Ok(None);
            };
            let r = s.statics(progress);
            self.found[i].statics = Some(r);
        }
        Ok(self.found[i].statics.clone())
    }

    /// The twice-daily candidates of `which` (pairs among its best statics), searched once.
    fn pairs(&mut self, which: Search) -> Result<Option<(Vec<Ranked>, usize)>> {
        let i = which as usize;
        if self.found[i].pairs.is_none() {
            let Some((statics, _)) = self.statics(which)? else {
                return Ok(None);
            };
            let (progress, top, dn) = (self.progress, self.opts.top_static, self.opts.day_night);
            let Some(s) = self.searcher(which)? else {
                return Ok(None);
            };
            let r = s.pairs(&statics, top, dn, progress);
            self.found[i].pairs = Some(r);
        }
        Ok(self.found[i].pairs.clone())
    }

    /// Row `row`: the best of `ranked` that can run the whole workload, run on it and judged
    /// on the window; `None` (with a warning) when every candidate was skipped.
    fn best_row(
        &mut self,
        row: &str,
        which: Search,
        ranked: Option<(Vec<Ranked>, usize)>,
    ) -> Result<Option<(Metrics, RunResult)>> {
        let (a, b) = self.win.search_days;
        let Some((ranked, n)) = ranked else {
            self.warn(format!(
                "{row} row omitted: the search window, days [{}, {}), holds no job",
                fmt_days(a),
                fmt_days(b)
            ));
            return Ok(None);
        };
        let mut whence = match which {
            Search::Fair => format!("searched on days [{}, {})", fmt_days(a), fmt_days(b)),
            Search::Oracle => "searched on the whole workload, ranked on the judged jobs (oracle)".to_string(),
        };
        if which == Search::Fair && !self.win.note.is_empty() {
            whence = format!("{whence} ({})", self.win.note);
        }
        let skipped = n - ranked.len();
        let skipped = if skipped > 0 {
            format!(", {skipped} skipped")
        } else {
            String::new()
        };
        for (k, cand) in ranked.iter().enumerate() {
            if let Some(j) = unrunnable(&spec_layouts(&cand.spec), self.c.model, self.wl) {
                let msg = format!(
                    "{row}: the search's #{} '{}' skipped: it cannot run {} of the whole workload",
                    k + 1,
                    cand.name,
                    describe_job(j)
                );
                self.warn(msg);
                continue;
            }
            let pick = if k == 0 {
                String::new()
            } else {
                format!(" (#{} of the search)", k + 1)
            };
            let detail = format!("{whence}, best of {n}{skipped}{pick}: {}", cand.name);
            match self.run(&cand.spec, row, &detail) {
                Ok(x) => return Ok(Some(x)),
                Err(e) => self.warn(format!(
                    "{row}: '{}' skipped: its run on the whole workload failed: {e:#}",
                    cand.name
                )),
            }
        }
        self.warn(format!("{row} row omitted: every candidate was skipped"));
        Ok(None)
    }
}

/// Runs the comparison. `progress(label, done_jobs)` is told about each run's progress.
/// Every row runs on the whole workload and is judged on the jobs released in the evaluation
/// window ([`crate::window::windows`] from `opts`); `static` and `twice-daily` are searched
/// on the jobs released in the search window only, `static-oracle` and
/// `twice-daily-oracle` on the whole workload.
///
/// # Errors
/// Windows out of range, no job in the evaluation window, or a run of `none`, `dynamic` or
/// `time-of-day` failed (see [`simulate`]). A static or twice-daily candidate that cannot
/// run is skipped with a warning ([`Evaluation::skipped`]), never an error.
pub fn evaluate(
    wl: &Workload,
    cfg: &SimConfig,
    opts: &EvalOptions,
    progress: &dyn Fn(&str, u64),
) -> Result<Evaluation> {
    if wl.jobs.is_empty() {
        bail!("the workload has no jobs");
    }
    let win = windows(wl, opts.search_days, opts.eval_from_days)?;
    let from_s = win.eval_from_s();
    let judged = judged_jobs(wl, from_s);
    if judged == 0 {
        bail!(
            "no job is released in the evaluation window (from day {})",
            win.eval_from_days
        );
    }
    let gpus = cfg.nodes * cfg.gpus_per_node;
    let b = bounds(wl, cfg.model, gpus, &cfg.power);
    let mean_work = wl
        .jobs
        .iter()
        .filter(|j| j.release >= from_s)
        .map(|j| j.work)
        .sum::<f64>()
        / judged as f64;
    let (a, z) = win.search_days;
    let search_wl = released_in(wl, a * 86400.0, z * 86400.0);
    let mut rows = Vec::new();
    let mut runs = Vec::new();
    let mut tried = Vec::new();
    let mut skipped = Vec::new();
    for &pl in &opts.placements {
        let mut c = cfg.clone();
        c.placement = pl;
        c.window_start_s = from_s;
        let mut bench = Bench {
            wl,
            search_wl: &search_wl,
            c,
            opts,
            win: &win,
            b: &b,
            progress,
            searchers: [None, None],
            found: [Found::default(), Found::default()],
            skipped: Vec::new(),
        };
        // The reference: none (always run; ET needs it).
        let none = bench.run(&PolicySpec::None, "none", "whole GPUs")?;
        let mut out: Vec<(Metrics, RunResult)> = Vec::new();
        for &p in &opts.policies {
            let row = match p {
                PolicyName::None => Some(none.clone()),
                PolicyName::Static => {
                    let r = bench.statics(Search::Fair)?;
                    bench.best_row("static", Search::Fair, r)?
                }
                PolicyName::StaticOracle => {
                    let r = bench.statics(Search::Oracle)?;
                    bench.best_row("static-oracle", Search::Oracle, r)?
                }
                PolicyName::TwiceDaily => {
                    let r = bench.pairs(Search::Fair)?;
                    bench.best_row("twice-daily", Search::Fair, r)?
                }
                PolicyName::TwiceDailyOracle => {
                    let r = bench.pairs(Search::Oracle)?;
                    bench.best_row("twice-daily-oracle", Search::Oracle, r)?
                }
                PolicyName::Dynamic => {
                    let detail = format!(
                        "DemandDriven, max {} nodes at once, min lifetime {:?}, interval {} s",
                        opts.limits.max_concurrent, opts.limits.min_layout_lifetime, cfg.policy_interval_s
                    );
                    Some(bench.run(&PolicySpec::Dynamic(opts.limits.clone()), "dynamic", &detail)?)
                }
                PolicyName::TimeOfDay => {
                    let detail = format!("{} periods a day, relearned each midnight", opts.periods);
                    let spec = PolicySpec::Learned { periods: opts.periods };
                    Some(bench.run(&spec, "time-of-day", &detail)?)
                }
                PolicyName::Plan | PolicyName::Consolidate => {
                    let objective = if p == PolicyName::Plan {
                        Objective::Speed
                    } else {
                        Objective::Consolidate
                    };
                    let spec = PolicySpec::Plan(PlannerSettings::new(opts.limits.clone(), objective));
                    let detail = format!(
                        "Planner ({objective:?}), max {} nodes at once, interval {} s, drain {:?} at {:?}",
                        opts.limits.max_concurrent, cfg.policy_interval_s, cfg.drain, cfg.timing
                    );
                    Some(bench.run(&spec, p.as_str(), &detail)?)
                }
                PolicyName::Mpc => {
                    let settings = MpcSettings::new(PlannerSettings::new(opts.limits.clone(), Objective::Speed));
                    let detail = format!(
                        "Planner (Speed) gated by lookahead runs over {:?} of forecast, cooldown {:?}, max {} nodes at once",
                        settings.horizon, settings.cooldown, opts.limits.max_concurrent
                    );
                    Some(bench.run(&PolicySpec::Mpc(settings), "mpc", &detail)?)
                }
            };
            out.extend(row);
        }
        for (tag, s) in ["fair", "oracle"].iter().zip(&bench.searchers) {
            if let Some(s) = s {
                tried.extend(
                    s.tried
                        .iter()
                        .map(|(n, et)| (pl.to_string(), format!("{tag} {n}"), *et)),
                );
                skipped.extend(s.skipped.iter().cloned());
            }
        }
        skipped.append(&mut bench.skipped);
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
        windows: win,
        skipped,
    })
}
