// One piece: the side-by-side evaluation: every policy's row built from one set of fair baselines and one evaluation window, which the rows share.
//! Runs every policy side by side on one workload and judges each on the same evaluation
//! window (docs/simulate.md, "Fair baselines"): `none`; the best `static` layout and the best
//! `twice-daily` pair searched on the jobs of the search window only (fair) and, as
//! references, searched on the whole workload (`static-oracle`, `twice-daily-oracle`);
//! `dynamic` (the controller's policy) and the learned `time-of-day` schedule; for each
//! placement rule; then bounds and ET.

use crate::window::{fmt_days, released_in, windows, Windows};
use anyhow::{bail, Result};
use dynmig_sim::bounds::{bounds, Bounds};
use dynmig_sim::engine::{simulate, RunResult, SimConfig};
use dynmig_sim::metrics::{judged_jobs, metrics, normalise, Metrics, Norm};
use dynmig_sim::placement::Placement;
use dynmig_sim::policies::adaptive::AdaptiveSettings;
use dynmig_sim::policies::clairvoyant::ClairvoyantSettings;
use dynmig_sim::policies::guarded::{GuardedSettings, GUARD_DETAIL};
use dynmig_sim::policies::mpc::MpcSettings;
use dynmig_sim::policies::{Objective, PlannerSettings, PolicyLimits, PolicySpec};
use dynmig_sim::search::{
    default_threads, describe_job, par_map, spec_layouts, unrunnable, Ranked, Searcher, LOCAL_SEARCH_RUNS,
};
use dynmig_sim::workload::Workload;
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
    /// The best static layout re-searched every day on the past days.
    Adaptive,
    /// The fair static's layout, left only when the engine's runs on the days just past say
    /// a change pays ([`dynmig_sim::policies::guarded`]).
    Guarded,
    /// The guarded default with a learned residual adjusting its decisions
    /// ([`EvalOptions::residual`]; not in [`ALL_POLICIES`]: it needs one;
    /// [`dynmig_sim::policies::residual`]).
    GuardedResidual,
    /// A trained model ([`EvalOptions::learned`]; not in [`ALL_POLICIES`]: it needs one).
    Learned,
    /// Knows the future: a ceiling, not a policy a site can run (not in [`ALL_POLICIES`]:
    /// `--ceilings` runs it, or name it; [`dynmig_sim::policies::clairvoyant`]).
    Clairvoyant,
}

/// Every policy that needs nothing more than the options, in report order.
pub const ALL_POLICIES: [PolicyName; 12] = [
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
    PolicyName::Adaptive,
    PolicyName::Guarded,
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
            PolicyName::Adaptive => "adaptive",
            PolicyName::Guarded => "guarded",
            PolicyName::GuardedResidual => "guarded-residual",
            PolicyName::Learned => "learned",
            PolicyName::Clairvoyant => "clairvoyant",
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
        ALL_POLICIES
            .iter()
            .copied()
            .chain([PolicyName::Learned, PolicyName::GuardedResidual, PolicyName::Clairvoyant])
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown policy '{s}'; allowed: {}, learned (with a model), guarded-residual (with a residual model), clairvoyant (knows the future)",
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
    /// Threads the independent runs share (rows, search candidates) [default: the machine's
    /// cores]; the result does not depend on it.
    pub threads: usize,
    /// The trained models [`PolicyName::Learned`] runs (`dynmig-learn`), at most one per GPU
    /// model: a run takes the one for its cluster's GPUs ([`EvalOptions::learned_for`]); with
    /// none for them, the row is omitted with a warning.
    pub learned: Vec<dynmig_sim::policies::ExternalPolicy>,
    /// Runs the local search over mixed node layouts may take in each static search
    /// ([`Searcher::local`]; 0: uniform layouts and the demand mix only) [default:
    /// [`LOCAL_SEARCH_RUNS`]].
    pub static_local_runs: usize,
    /// Beside each row whose layouts change, a `<policy>-frozen` row: the static layout of
    /// its mean node mix over the judged days ([`dynmig_sim::policies::mix::frozen_mix`]; issue 27,
    /// item 6) [default: true].
    pub frozen: bool,
    /// The learned residual [`PolicyName::GuardedResidual`] runs on the guarded default
    /// (`dynmig-train`'s `residual`); without one, that row is omitted with a warning.
    pub residual: Option<dynmig_sim::policies::residual::ResidualUse>,
}

/// The suffix of a frozen-mix row's name.
pub const FROZEN_SUFFIX: &str = "-frozen";

/// Whether a row's layouts never change, so that it has no frozen-mix row.
fn fixed_layout(policy: &str) -> bool {
    matches!(policy, "none" | "static" | "static-oracle") || policy.ends_with(FROZEN_SUFFIX)
}

impl EvalOptions {
    /// The learned policy for clusters of `model` GPUs: the first of [`EvalOptions::learned`]
    /// made for that GPU model or for any.
    pub fn learned_for(
        &self,
        model: &dynmig_core::geometry::GpuModel,
    ) -> Option<&dynmig_sim::policies::ExternalPolicy> {
        self.learned
            .iter()
            .find(|e| e.gpu_model.is_none_or(|m| m == model.name))
    }
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
            threads: default_threads(),
            learned: Vec::new(),
            static_local_runs: LOCAL_SEARCH_RUNS,
            frozen: true,
            residual: None,
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
    /// The fixed references of ET on the judged jobs (the oracle's search ranks with them too).
    #[serde(default = "Norm::unset")]
    pub norm: Norm,
}

/// Which search a row's policy comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Search {
    /// On the jobs of the search window.
    Fair,
    /// On the whole workload, judged on the evaluation window.
    Oracle,
}

/// What one placement's rows share: the workloads, the settings, the windows and bounds.
struct Bench<'a> {
    wl: &'a Workload,
    search_wl: &'a Workload,
    c: SimConfig,
    opts: &'a EvalOptions,
    win: &'a Windows,
    b: &'a Bounds,
}

/// A row and the warnings its making gave (`None`: omitted, a warning says why).
type Row = (Option<(Metrics, RunResult)>, Vec<String>);

/// What one search produced: its candidates tried and skipped, and the rows asked of it (the
/// best static layout, the best twice-daily pair); `searched` is false when its search window
/// held no job.
#[derive(Debug)]
struct Searched {
    searched: bool,
    tried: Vec<(String, f64)>,
    skipped: Vec<String>,
    statics: Option<Row>,
    pairs: Option<Row>,
    /// The guarded default's row, started from the best static layout (fair search only).
    guarded: Option<Row>,
    /// The same with the learned residual ([`EvalOptions::residual`]).
    guarded_residual: Option<Row>,
    /// The static candidates this search ranked (name, layout), its local search's best
    /// included: the oracle's search ranks the fair search's too.
    candidates: Vec<(String, Vec<dynmig_core::geometry::NodeLayout>)>,
    /// The twice-daily pairs this search ranked: the oracle's search ranks the fair
    /// search's too.
    pair_candidates: Vec<(String, PolicySpec)>,
}

/// The rows asked of a search: the best static layout, the best twice-daily pair, the
/// guarded default started from the best static layout.
#[derive(Debug, Clone, Copy)]
struct Asked {
    statics: bool,
    pairs: bool,
    guarded: bool,
    guarded_residual: bool,
}

/// Candidates another search ranked, for the oracle's to rank too (a superset).
#[derive(Default, Clone, Copy)]
struct Extra<'a> {
    /// Static layouts (name, layout).
    statics: &'a [(String, Vec<dynmig_core::geometry::NodeLayout>)],
    /// Twice-daily pairs (name, policy).
    pairs: &'a [(String, PolicySpec)],
}

/// The search a policy's row comes from (`None`: it is not searched).
fn searched_by(p: PolicyName) -> Option<Search> {
    match p {
        PolicyName::Static | PolicyName::TwiceDaily | PolicyName::Guarded | PolicyName::GuardedResidual => {
            Some(Search::Fair)
        }
        PolicyName::StaticOracle | PolicyName::TwiceDailyOracle => Some(Search::Oracle),
        _ => None,
    }
}

/// One independent piece of an evaluation.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Task {
    /// The fair search, then the oracle's (which also ranks the fair search's candidates),
    /// and the rows they give.
    Searches,
    /// A row that is not searched.
    Run(PolicyName),
}

/// What a [`Task`] produced.
enum Done {
    Search(Vec<(Search, Result<Searched>)>),
    Run(Box<Result<(Metrics, RunResult)>>),
}

impl Bench<'_> {
    /// Runs `spec` on the whole workload and judges it.
    fn run(
        &self,
        spec: &PolicySpec,
        row: &str,
        detail: &str,
        progress: &dyn Fn(&str, u64),
    ) -> Result<(Metrics, RunResult)> {
        let label = format!("{}/{row}", self.c.placement);
        let t0 = Instant::now();
        let mut r = simulate(self.wl, spec, &self.c, &|d| progress(&label, d))?;
        let wall = t0.elapsed().as_secs_f64();
        r.policy = row.to_string();
        // Jobs a stopped run never ran (an external policy's, dynmig_sim::engine::EXTERNAL_STOP_AFTER_S)
        // used no energy: say so next to its figures.
        let never = r.jobs.iter().filter(|o| o.slices == 0).count();
        let detail = if never > 0 {
            format!(
                "{detail}; {never} jobs never ran (the run was stopped {} days after the last arrival): energy and ET are not comparable",
                dynmig_sim::engine::EXTERNAL_STOP_AFTER_S / 86_400.0
            )
        } else {
            detail.to_string()
        };
        let mut m = metrics(self.wl, &r, self.b, &detail, wall, &self.c);
        m.policy = row.to_string();
        Ok((m, r))
    }

    /// The `<policy>-frozen` row of a run whose layouts changed: its mean node mix over the
    /// judged days as a static layout (`Ok(None)`: nothing counted, or a mix that cannot run
    /// some job, said in the warning).
    fn frozen_row(&self, r: &RunResult, progress: &dyn Fn(&str, u64)) -> Result<Row> {
        let row = format!("{}{FROZEN_SUFFIX}", r.policy);
        let Some(mix) = dynmig_sim::policies::mix::frozen_mix(&r.layout_time, self.c.nodes) else {
            return Ok((
                None,
                vec![format!(
                    "{row} row omitted: {} held no layout in the judged window",
                    r.policy
                )],
            ));
        };
        if let Some(j) = unrunnable(&[&mix], self.c.model, self.wl) {
            return Ok((
                None,
                vec![format!(
                    "{row} row omitted: the mean mix {} cannot run {}",
                    dynmig_sim::search::describe(&mix),
                    describe_job(j)
                )],
            ));
        }
        let detail = format!(
            "the static layout of {}'s mean node mix over the judged days: {}",
            r.policy,
            dynmig_sim::search::describe(&mix)
        );
        Ok((
            Some(self.run(&PolicySpec::Static(mix), &row, &detail, progress)?),
            Vec::new(),
        ))
    }

    /// The row of a policy that is not searched.
    fn plain_row(&self, p: PolicyName, progress: &dyn Fn(&str, u64)) -> Result<(Metrics, RunResult)> {
        let (opts, cfg) = (self.opts, &self.c);
        match p {
            PolicyName::Dynamic => {
                let detail = format!(
                    "DemandDriven, max {} nodes at once, min lifetime {:?}, interval {} s",
                    opts.limits.max_concurrent, opts.limits.min_layout_lifetime, cfg.policy_interval_s
                );
                self.run(&PolicySpec::Dynamic(opts.limits.clone()), "dynamic", &detail, progress)
            }
            PolicyName::TimeOfDay => {
                let detail = format!("{} periods a day, relearned each midnight", opts.periods);
                let spec = PolicySpec::Learned { periods: opts.periods };
                self.run(&spec, "time-of-day", &detail, progress)
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
                self.run(&spec, p.as_str(), &detail, progress)
            }
            PolicyName::Mpc => {
                let settings = MpcSettings::new(PlannerSettings::new(opts.limits.clone(), Objective::Speed));
                let detail = format!(
                    "Planner (Speed) gated by lookahead runs over {:?} of forecast, cooldown {:?}, max {} nodes at once",
                    settings.horizon, settings.cooldown, opts.limits.max_concurrent
                );
                self.run(&PolicySpec::Mpc(settings), "mpc", &detail, progress)
            }
            PolicyName::Adaptive => {
                let settings = AdaptiveSettings::new(opts.limits.clone());
                let detail = format!(
                    "best static layout or the planner, chosen every {:?} on the last {:?}, changed when {:.0}% better, max {} nodes at once",
                    settings.every,
                    settings.history,
                    settings.min_gain * 100.0,
                    opts.limits.max_concurrent
                );
                self.run(&PolicySpec::Adaptive(settings), "adaptive", &detail, progress)
            }
            PolicyName::Clairvoyant => {
                let settings = ClairvoyantSettings::new(PlannerSettings::new(opts.limits.clone(), Objective::Speed));
                let detail = format!(
                    "knows every job; at most every {:?} picks keep or a planner's (speed, consolidate) proposals by lookahead runs over {:?} of true arrivals",
                    settings.period, settings.horizon
                );
                self.run(&PolicySpec::Clairvoyant(settings), "clairvoyant", &detail, progress)
            }
            PolicyName::Learned => {
                let Some(e) = opts.learned_for(self.c.model) else {
                    anyhow::bail!("policy 'learned' needs a trained model (dynmig simulate --learned-model FILE)");
                };
                self.run(
                    &PolicySpec::External(e.clone()),
                    "learned",
                    "trained model (dynmig train)",
                    progress,
                )
            }
            // Whole GPUs; the searched rows come from `search`.
            _ => self.run(&PolicySpec::None, "none", "whole GPUs", progress),
        }
    }

    /// The search `which` and the rows asked of it: `statics` (the best static layout) and
    /// `pairs` (the best twice-daily pair, searched among the best statics). The static
    /// candidates are the uniform layouts, the demand mix, `extra` (for the oracle: the fair
    /// search's, so that it ranks a superset of them on the judged jobs) and the local
    /// search's best from the best uniform one ([`Searcher::local`]).
    fn search(
        &self,
        which: Search,
        Asked {
            statics,
            guarded,
            guarded_residual,
            pairs,
        }: Asked,
        extra: Extra<'_>,
        rank_pairs: bool,
        progress: &dyn Fn(&str, u64),
    ) -> Result<Searched> {
        let (wl, from) = match which {
            Search::Fair => (self.search_wl, self.win.search_days.0 * 86400.0),
            Search::Oracle => (self.wl, self.c.window_start_s),
        };
        let (static_row, pairs_row) = match which {
            Search::Fair => ("static", "twice-daily"),
            Search::Oracle => ("static-oracle", "twice-daily-oracle"),
        };
        let mut out = Searched {
            searched: false,
            tried: Vec::new(),
            skipped: Vec::new(),
            statics: None,
            pairs: None,
            guarded: None,
            guarded_residual: None,
            candidates: Vec::new(),
            pair_candidates: Vec::new(),
        };
        if which == Search::Fair && wl.jobs.is_empty() {
            out.statics = statics.then(|| (None, vec![self.nothing_to_search(static_row)]));
            out.pairs = pairs.then(|| (None, vec![self.nothing_to_search(pairs_row)]));
            out.guarded = guarded.then(|| (None, vec![self.nothing_to_search("guarded")]));
            out.guarded_residual = guarded_residual.then(|| (None, vec![self.nothing_to_search("guarded-residual")]));
            return Ok(out);
        }
        let mut cfg = self.c.clone();
        cfg.window_start_s = from;
        let tag = match which {
            Search::Fair => "fair",
            Search::Oracle => "oracle",
        };
        let mut s = Searcher::new(wl, &cfg, tag, self.opts.warn, progress)?;
        s.threads = self.opts.threads;
        out.searched = true;
        let mut cands = s.static_candidates();
        for (name, l) in extra.statics {
            if !cands.iter().any(|(_, c)| c == l) {
                cands.push((name.clone(), l.clone()));
            }
        }
        let (mut ranked, mut n) = s.rank_statics(cands.clone(), progress);
        let t0 = Instant::now();
        let (local, runs) = s.local(&ranked, self.opts.static_local_runs, progress);
        let local_wall = t0.elapsed().as_secs_f64();
        if let Some(best) = local {
            if let PolicySpec::Static(l) = &best.spec {
                cands.push((best.name.clone(), l.clone()));
            }
            ranked.push(best);
            ranked.sort_by(|a, b| a.et.total_cmp(&b.et));
            n += 1;
        }
        out.candidates = cands;
        let local_note = format!("local search {runs} runs in {local_wall:.1} s");
        let ranked = (ranked, n);
        if statics || guarded || guarded_residual {
            let (row, chosen) = self.best_row(static_row, which, &ranked, &local_note, progress)?;
            out.statics = Some(row);
            let settings = match chosen {
                Some(PolicySpec::Static(base)) => {
                    let detail = format!(
                        "from the fair static ({}), {}",
                        dynmig_sim::search::describe(&base),
                        GUARD_DETAIL
                    );
                    let mut settings = GuardedSettings::new(base, self.opts.limits.clone());
                    // The node layouts of the search's three best candidates.
                    for r in ranked.0.iter().take(3) {
                        for layouts in spec_layouts(&r.spec) {
                            settings.shortlist.push(layouts.to_vec());
                            for l in layouts {
                                if !settings.node_types.contains(l) {
                                    settings.node_types.push(l.clone());
                                }
                            }
                        }
                    }
                    Some((settings, detail))
                }
                _ => None,
            };
            let omitted = |name: &str| {
                (
                    None,
                    vec![format!("{name} row omitted: no fair static layout to start from")],
                )
            };
            if guarded {
                out.guarded = Some(match &settings {
                    Some((settings, detail)) => {
                        let spec = PolicySpec::Guarded(settings.clone());
                        (Some(self.run(&spec, "guarded", detail, progress)?), Vec::new())
                    }
                    None => omitted("guarded"),
                });
            }
            if guarded_residual {
                out.guarded_residual = Some(match (&settings, &self.opts.residual) {
                    (Some((settings, detail)), Some(r)) => {
                        let mut settings = settings.clone();
                        settings.residual = Some(r.clone());
                        let detail = format!(
                            "{detail}; each decision adjusted by the learned residual ({})",
                            r.model.trained_on
                        );
                        let spec = PolicySpec::Guarded(settings);
                        (
                            Some(self.run(&spec, "guarded-residual", &detail, progress)?),
                            Vec::new(),
                        )
                    }
                    (None, _) => omitted("guarded-residual"),
                    (_, None) => (
                        None,
                        vec!["guarded-residual row omitted: no residual model given".into()],
                    ),
                });
            }
        }
        // `rank_pairs` without `pairs`: the fair search ranks its pairs for the oracle's only.
        if pairs || rank_pairs {
            let (top, dn) = (self.opts.top_static, self.opts.day_night);
            let r = s.pairs(&ranked.0, top, dn, extra.pairs, progress);
            out.pair_candidates = r.0.iter().map(|x| (x.name.clone(), x.spec.clone())).collect();
            if pairs {
                out.pairs = Some(self.best_row(pairs_row, which, &r, "", progress)?.0);
            }
        }
        out.tried = s.tried;
        out.skipped = s.skipped;
        Ok(out)
    }

    /// The fair search and the oracle's, as asked (`fair`, `oracle`: (statics, pairs)); the
    /// oracle's also ranks the fair search's static candidates, so the fair search runs
    /// whenever the oracle's does. `fair` is (statics, pairs, guarded, guarded-residual): the guarded default
    /// starts from the fair search's best static layout.
    fn searches(
        &self,
        fair: (bool, bool, bool, bool),
        oracle: (bool, bool),
        progress: &dyn Fn(&str, u64),
    ) -> Vec<(Search, Result<Searched>)> {
        let mut out = Vec::new();
        let asked = Asked {
            statics: fair.0,
            pairs: fair.1,
            guarded: fair.2,
            guarded_residual: fair.3,
        };
        let f = self.search(Search::Fair, asked, Extra::default(), oracle.1, progress);
        let extra = f.as_ref().map(|s| s.candidates.clone()).unwrap_or_default();
        let extra_pairs = f.as_ref().map(|s| s.pair_candidates.clone()).unwrap_or_default();
        let failed = f.as_ref().err().map(|e| format!("{e:#}"));
        out.push((Search::Fair, f));
        if oracle.0 || oracle.1 {
            let o = match failed {
                Some(e) => Err(anyhow::anyhow!(
                    "the fair search, whose candidates the oracle ranks too, failed: {e}"
                )),
                None => {
                    let more = Extra {
                        statics: &extra,
                        pairs: &extra_pairs,
                    };
                    let asked = Asked {
                        statics: oracle.0,
                        pairs: oracle.1,
                        guarded: false,
                        guarded_residual: false,
                    };
                    self.search(Search::Oracle, asked, more, false, progress)
                }
            };
            out.push((Search::Oracle, o));
        }
        out
    }

    /// The warning of a searched row omitted for want of jobs in the search window.
    fn nothing_to_search(&self, row: &str) -> String {
        let (a, b) = self.win.search_days;
        format!(
            "{row} row omitted: the search window, days [{}, {}), holds no job",
            fmt_days(a),
            fmt_days(b)
        )
    }

    /// Row `row`: the best of `ranked` that can run the whole workload, run on it and judged
    /// on the window; omitted (with a warning) when every candidate was skipped.
    fn best_row(
        &self,
        row: &str,
        which: Search,
        (ranked, n): &(Vec<Ranked>, usize),
        note: &str,
        progress: &dyn Fn(&str, u64),
    ) -> Result<(Row, Option<PolicySpec>)> {
        let (a, b) = self.win.search_days;
        let mut warnings = Vec::new();
        let mut whence = match which {
            Search::Fair => format!("searched on days [{}, {})", fmt_days(a), fmt_days(b)),
            Search::Oracle => "searched on the whole workload, ranked on the judged jobs (oracle)".to_string(),
        };
        if which == Search::Fair && !self.win.note.is_empty() {
            whence = format!("{whence} ({})", self.win.note);
        }
        let skipped = n - ranked.len();
        let mut skipped = if skipped > 0 {
            format!(", {skipped} skipped")
        } else {
            String::new()
        };
        if !note.is_empty() {
            skipped.push_str(&format!(" ({note})"));
        }
        for (k, cand) in ranked.iter().enumerate() {
            if let Some(j) = unrunnable(&spec_layouts(&cand.spec), self.c.model, self.wl) {
                warnings.push(format!(
                    "{row}: the search's #{} '{}' skipped: it cannot run {} of the whole workload",
                    k + 1,
                    cand.name,
                    describe_job(j)
                ));
                continue;
            }
            let pick = if k == 0 {
                String::new()
            } else {
                format!(" (#{} of the search)", k + 1)
            };
            let detail = format!("{whence}, best of {n}{skipped}{pick}: {}", cand.name);
            match self.run(&cand.spec, row, &detail, progress) {
                Ok(x) => return Ok(((Some(x), warnings), Some(cand.spec.clone()))),
                Err(e) => warnings.push(format!(
                    "{row}: '{}' skipped: its run on the whole workload failed: {e:#}",
                    cand.name
                )),
            }
        }
        warnings.push(format!("{row} row omitted: every candidate was skipped"));
        Ok(((None, warnings), None))
    }
}

/// Runs the comparison. `progress(label, done_jobs)` is told about each run's progress.
/// Every row runs on the whole workload and is judged on the jobs released in the evaluation
/// window ([`crate::window::windows`] from `opts`); `static` and `twice-daily` are searched
/// on the jobs released in the search window only, `static-oracle` and
/// `twice-daily-oracle` on the whole workload.
///
/// The runs are independent: they share [`EvalOptions::threads`] threads, and the result
/// does not depend on how many (warnings are printed once all runs of a placement ended).
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
    let norm = Norm::of(wl, &b, from_s);
    let (a, z) = win.search_days;
    let search_wl = released_in(wl, a * 86400.0, z * 86400.0);
    let mut rows = Vec::new();
    let mut runs = Vec::new();
    let mut tried = Vec::new();
    let mut skipped = Vec::new();
    // With models for other GPUs only, the learned row is omitted (a matrix over GPU models
    // given one model per GPU model).
    let learned_omitted = (opts.policies.contains(&PolicyName::Learned)
        && !opts.learned.is_empty()
        && opts.learned_for(cfg.model).is_none())
    .then(|| {
        let names: Vec<&str> = opts.learned.iter().filter_map(|e| e.gpu_model).collect();
        format!(
            "learned row omitted: no model was trained for {} GPUs (models given for {})",
            cfg.model.name,
            names.join(", ")
        )
    });
    let wants = |p: PolicyName| opts.policies.contains(&p) && !(p == PolicyName::Learned && learned_omitted.is_some());
    // The searches first (the longest), then the other rows; `none` always (ET/none divides by it).
    let mut tasks = Vec::new();
    let fair = (
        wants(PolicyName::Static),
        wants(PolicyName::TwiceDaily),
        wants(PolicyName::Guarded),
        wants(PolicyName::GuardedResidual),
    );
    let oracle = (wants(PolicyName::StaticOracle), wants(PolicyName::TwiceDailyOracle));
    if fair.0 || fair.1 || fair.2 || fair.3 || oracle.0 || oracle.1 {
        tasks.push(Task::Searches);
    }
    for p in [
        PolicyName::Adaptive,
        PolicyName::Mpc,
        PolicyName::Learned,
        PolicyName::Clairvoyant,
        PolicyName::Plan,
        PolicyName::Consolidate,
        PolicyName::Dynamic,
        PolicyName::TimeOfDay,
    ] {
        if wants(p) {
            tasks.push(Task::Run(p));
        }
    }
    tasks.push(Task::Run(PolicyName::None));
    for &pl in &opts.placements {
        let mut c = cfg.clone();
        c.placement = pl;
        c.window_start_s = from_s;
        let bench = Bench {
            wl,
            search_wl: &search_wl,
            c,
            opts,
            win: &win,
            b: &b,
        };
        let done = par_map(&tasks, opts.threads, progress, |t, p| match *t {
            Task::Searches => Done::Search(bench.searches(fair, oracle, p)),
            Task::Run(name) => Done::Run(Box::new(bench.plain_row(name, p))),
        });
        let mut plain: Vec<(PolicyName, Result<(Metrics, RunResult)>)> = Vec::new();
        let mut searched: Vec<(Search, Result<Searched>)> = Vec::new();
        for (t, d) in tasks.iter().zip(done) {
            match (t, d) {
                (Task::Run(p), Done::Run(r)) => plain.push((*p, *r)),
                (Task::Searches, Done::Search(r)) => searched.extend(r),
                _ => unreachable!("each task gives its own kind of result"),
            }
        }
        // The reference first, then the rows in report order: the first failure is the
        // evaluation's, as if they had run one after another.
        let taken = plain.iter().position(|(p, _)| *p == PolicyName::None);
        let none = plain.swap_remove(taken.expect("none always runs")).1?;
        for &p in &opts.policies {
            if let Some(which) = searched_by(p) {
                if let Some(i) = searched.iter().position(|(w, r)| *w == which && r.is_err()) {
                    return Err(searched.swap_remove(i).1.expect_err("a failed search"));
                }
            } else if let Some(i) = plain.iter().position(|(x, r)| *x == p && r.is_err()) {
                return Err(plain.swap_remove(i).1.expect_err("a failed run"));
            }
        }
        let searched: Vec<(Search, Searched)> = searched
            .into_iter()
            .filter_map(|(w, r)| r.ok().map(|s| (w, s)))
            .collect();
        let mut out: Vec<(Metrics, RunResult)> = Vec::new();
        let mut warnings = Vec::new();
        warnings.extend(learned_omitted.iter().cloned());
        for &p in opts.policies.iter().filter(|p| wants(**p)) {
            let row = match searched_by(p) {
                _ if p == PolicyName::None => Some(none.clone()),
                Some(which) => {
                    let s = &searched
                        .iter()
                        .find(|(w, _)| *w == which)
                        .expect("a search asked for ran")
                        .1;
                    let row = match p {
                        PolicyName::Static | PolicyName::StaticOracle => s.statics.as_ref(),
                        PolicyName::Guarded => s.guarded.as_ref(),
                        PolicyName::GuardedResidual => s.guarded_residual.as_ref(),
                        _ => s.pairs.as_ref(),
                    };
                    let (row, w) = row.expect("a row asked for is searched");
                    warnings.extend(w.iter().cloned());
                    row.clone()
                }
                None => plain
                    .iter()
                    .find_map(|(x, r)| (*x == p).then(|| r.as_ref().ok().cloned()))
                    .expect("a row asked for ran"),
            };
            out.extend(row);
        }
        for (w, s) in searched.iter().filter(|(_, s)| s.searched) {
            let tag = match w {
                Search::Fair => "fair",
                Search::Oracle => "oracle",
            };
            tried.extend(
                s.tried
                    .iter()
                    .map(|(n, et)| (pl.to_string(), format!("{tag} {n}"), *et)),
            );
            skipped.extend(s.skipped.iter().cloned());
        }
        if opts.frozen {
            let changing: Vec<usize> = (0..out.len()).filter(|&i| !fixed_layout(&out[i].1.policy)).collect();
            let frozen = par_map(&changing, opts.threads, progress, |&i, p| {
                bench.frozen_row(&out[i].1, p)
            });
            let mut with = Vec::with_capacity(out.len() + frozen.len());
            let mut frozen = changing.iter().zip(frozen).peekable();
            for (i, row) in out.into_iter().enumerate() {
                with.push(row);
                if let Some((_, f)) = frozen.next_if(|(k, _)| **k == i) {
                    let (row, mut w) = f?;
                    with.extend(row);
                    warnings.append(&mut w);
                }
            }
            out = with;
        }
        if opts.warn {
            for w in &warnings {
                eprintln!("warning: {w}");
            }
        }
        skipped.append(&mut warnings);
        for (m, r) in out {
            rows.push(m);
            runs.push(r);
        }
    }
    normalise(&mut rows, &norm);
    Ok(Evaluation {
        norm,
        rows,
        bounds: b,
        runs,
        candidates: tried,
        windows: win,
        skipped,
    })
}
