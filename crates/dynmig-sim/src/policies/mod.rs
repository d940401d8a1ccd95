//! The policies the simulator compares, all driven through [`dynmig_core::policy::Policy`]:
//! - `none`: whole GPUs, never changed ([`NoChange`] on all-full layouts);
//! - `static`: a fixed cluster layout ([`NoChange`]), the best one found by
//!   [`crate::search`];
//! - `twice-daily`: a day and a night layout ([`Scheduled`]);
//! - `dynamic`: the controller's [`DemandDriven`] policy, the very same code;
//! - `plan` and `consolidate`: the controller's [`Planner`] (speed or energy objective);
//! - `time-of-day`: a schedule learned from the arrivals seen so far ([`Learned`]);
//! - `mpc`: the planner's proposals made only when a lookahead run of the engine says they
//!   pay ([`mpc::Mpc`]);
//! - `adaptive`: the best static layout searched again every day on the days just past
//!   ([`adaptive::Adaptive`]);
//! - `guarded`: the fair static's layout, left only when runs of the engine on the days
//!   just past say a change pays, with a way back ([`guarded::Guarded`]);
//! - `learned`: a trained model from `dynmig-learn`, through [`PolicySpec::External`];
//! - `clairvoyant`: knows the future, a ceiling no site can run ([`clairvoyant::Clairvoyant`]).

pub mod adaptive;
pub mod clairvoyant;
pub mod from_config;
pub mod guarded;
pub(crate) mod joblog;
pub mod learned_model;
pub mod mix;
pub mod mpc;
pub mod residual;
pub mod run;
pub mod settings;
pub mod views;

use crate::cluster::Cluster;
use crate::engine::{Driven, SimConfig};
use crate::model::Job;
use dynmig_core::demand::Demand;
use dynmig_core::geometry::{NodeLayout, ProfileCounts};
pub use dynmig_core::policy::planner::{Objective, Planner, PlannerSettings};
pub use dynmig_core::policy::{DemandDriven, NoChange, Policy, PolicyLimits};
use dynmig_core::policy::{NodeSnapshot, Repartition};
use std::time::Duration;

/// The repartitions that move `nodes` toward `target` (one layout per node) as the planner
/// moves them ([`dynmig_core::policy::wanted::Wanted::assign`]): nodes already in a wanted
/// layout keep it, the others change when their running work ends soonest (within
/// `max_wait`), at most `limits.max_concurrent` at once and `max_planned` planned.
pub(crate) fn move_toward(
    target: &[NodeLayout],
    nodes: &[NodeSnapshot],
    limits: &PolicyLimits,
    max_planned: usize,
    max_wait: Duration,
) -> Vec<Repartition> {
    let mut out = Vec::new();
    let mut budget = dynmig_core::policy::wanted::change_budget(nodes, limits.max_concurrent, max_planned);
    let refs: Vec<&NodeSnapshot> = nodes.iter().collect();
    dynmig_core::policy::wanted::Wanted::from_layouts(target).assign(
        &refs,
        &mut budget,
        limits.min_layout_lifetime,
        max_wait,
        &mut out,
    );
    out
}

/// A policy to simulate, with its initial cluster layout.
#[derive(Debug, Clone)]
pub enum PolicySpec {
    /// Whole GPUs (a full-GPU instance on every GPU), never changed.
    None,
    /// A fixed layout, one [`NodeLayout`] per node.
    Static(Vec<NodeLayout>),
    /// Layouts by time of day: `(start, layouts)` sorted by start; the last one runs over
    /// midnight until the first.
    Scheduled(Vec<(Duration, Vec<NodeLayout>)>),
    /// The controller's demand-driven policy, starting from whole GPUs.
    Dynamic(PolicyLimits),
    /// The planning policy ([`dynmig_core::policy::planner::Planner`]), starting from whole
    /// GPUs; its objective (speed or consolidate) is in the settings.
    Plan(PlannerSettings),
    /// A time-of-day schedule of `periods` equal periods, learned each midnight from the
    /// arrivals seen so far; starts from whole GPUs and keeps them on the first day.
    Learned {
        /// Periods per day (4: 00-06, 06-12, 12-18, 18-24).
        periods: u32,
    },
    /// The planner gated by lookahead runs of the engine ([`mpc::Mpc`]), starting from whole
    /// GPUs.
    Mpc(mpc::MpcSettings),
    /// The best static layout re-searched every day on the past days ([`adaptive::Adaptive`]),
    /// starting from whole GPUs.
    Adaptive(settings::AdaptiveSettings),
    /// The guarded default ([`guarded::Guarded`]), starting from its base layout (the fair
    /// static's), jobs asking only for the base's GRES types.
    Guarded(settings::GuardedSettings),
    /// The clairvoyant planner ([`clairvoyant::Clairvoyant`]): knows every job of the run,
    /// starting from whole GPUs. A ceiling, not a policy a site can run.
    Clairvoyant(clairvoyant::ClairvoyantSettings),
    /// A policy made by another crate (the learned policy of `dynmig-learn`), starting from
    /// whole GPUs and asked every `policy_interval_s`.
    External(ExternalPolicy),
}

/// Makes a policy for a simulated cluster (its [`crate::engine::SimConfig`]).
pub type MakePolicy = dyn Fn(&SimConfig) -> anyhow::Result<Box<dyn Policy>> + Send + Sync;

/// A policy the simulator does not define, by name and maker ([`PolicySpec::External`]).
#[derive(Clone)]
pub struct ExternalPolicy {
    /// Its name in reports (`"learned"`).
    pub name: &'static str,
    /// The GPU model it is made for (`None`: any); an evaluation over several GPU models
    /// takes, per cluster, the one made for its GPUs.
    pub gpu_model: Option<&'static str>,
    /// Its maker; an error (a model that does not fit the cluster) fails the run.
    pub make: std::sync::Arc<MakePolicy>,
}

impl std::fmt::Debug for ExternalPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ExternalPolicy({})", self.name)
    }
}

impl PolicySpec {
    /// Short name for reports.
    pub fn name(&self) -> &'static str {
        match self {
            PolicySpec::None => "none",
            PolicySpec::Static(_) => "static",
            PolicySpec::Scheduled(_) => "twice-daily",
            PolicySpec::Dynamic(_) => "dynamic",
            PolicySpec::Plan(s) => match s.objective {
                Objective::Speed => "plan",
                Objective::Consolidate => "consolidate",
            },
            PolicySpec::Learned { .. } => "time-of-day",
            PolicySpec::Mpc(_) => "mpc",
            PolicySpec::Adaptive(_) => "adaptive",
            PolicySpec::Guarded(_) => "guarded",
            PolicySpec::Clairvoyant(_) => "clairvoyant",
            PolicySpec::External(e) => e.name,
        }
    }
}

/// Switches nodes to the layouts of the current period. Nodes are matched by position:
/// `nodes[i]` gets `layouts[i]`. A node that is away (draining, reconfiguring) is left
/// alone and caught at a later call.
#[derive(Debug, Clone, Default)]
pub struct Scheduled {
    /// `(start of period since midnight, layouts)`, sorted by start.
    pub periods: Vec<(Duration, Vec<NodeLayout>)>,
}

impl Scheduled {
    /// The layouts in force at `time_of_day`, if any period is set.
    pub fn current(&self, time_of_day: Duration) -> Option<&Vec<NodeLayout>> {
        self.periods
            .iter()
            .rev()
            .find(|(s, _)| *s <= time_of_day)
            .or_else(|| self.periods.last())
            .map(|(_, l)| l)
    }
}

impl Policy for Scheduled {
    fn name(&self) -> &'static str {
        "scheduled"
    }
    fn plan(&mut self, nodes: &[NodeSnapshot], demand: &Demand) -> Vec<Repartition> {
        self.plan_at(Duration::ZERO, nodes, demand)
    }
    fn plan_at(&mut self, time_of_day: Duration, nodes: &[NodeSnapshot], _: &Demand) -> Vec<Repartition> {
        let Some(targets) = self.current(time_of_day) else {
            return Vec::new();
        };
        nodes
            .iter()
            .zip(targets)
            .filter(|(n, t)| !n.unavailable && n.layout != **t)
            .map(|(n, t)| Repartition {
                node: n.name.clone(),
                target: t.clone(),
                serves: Default::default(),
            })
            .collect()
    }
}

/// The learned time-of-day policy: a [`Scheduled`] policy whose periods are recomputed each
/// midnight from the history of arrivals (no look-ahead: only jobs already released count).
///
/// History: each arriving job adds its run time on its smallest fitting profile (instance
/// seconds; GPU seconds for multi-GPU jobs) to the periods of the day it would run in if it
/// started at once. At midnight the mean concurrency per period is the sum over the days seen,
/// and [`mix::mix_for_demand`] turns it into layouts.
#[derive(Debug, Clone)]
pub struct Learned {
    /// The schedule in force.
    pub schedule: Scheduled,
    periods: u32,
    demand: Vec<Vec<f64>>,
    multi: Vec<f64>,
}

impl Learned {
    /// A policy with `periods` periods for a cluster shaped like `c`.
    pub fn new(periods: u32, c: &Cluster) -> Self {
        let periods = periods.max(1);
        Self {
            schedule: Scheduled::default(),
            periods,
            demand: vec![vec![0.0; c.profiles.len()]; periods as usize],
            multi: vec![0.0; periods as usize],
        }
    }

    fn period_len(&self) -> f64 {
        86400.0 / f64::from(self.periods)
    }

    /// Records an arriving job: `pidx` its smallest fitting profile, `run_s` its run time there.
    pub fn observe(&mut self, job: &Job, pidx: usize, run_s: f64) {
        let len = self.period_len();
        let (mut t, end) = (job.release, job.release + run_s);
        while t < end {
            let next = ((t / len).floor() + 1.0) * len;
            let stop = next.min(end);
            let p = ((t / len) as usize) % self.periods as usize;
            if job.gpus > 1 {
                self.multi[p] += (stop - t) * f64::from(job.gpus);
            } else {
                self.demand[p][pidx] += stop - t;
            }
            t = stop;
        }
    }

    /// Recomputes the schedule at `now` (s, a midnight) for cluster `c`.
    pub fn relearn(&mut self, now: f64, c: &Cluster, candidates: &[ProfileCounts]) {
        let days = (now / 86400.0).round().max(1.0);
        let len = self.period_len();
        self.schedule.periods = (0..self.periods as usize)
            .map(|p| {
                let d: Vec<f64> = self.demand[p].iter().map(|x| x / (days * len)).collect();
                let layouts = mix::mix_for_demand(
                    c.model,
                    &c.profiles,
                    c.nodes(),
                    c.gpn,
                    &d,
                    self.multi[p] / (days * len),
                    candidates,
                );
                (Duration::from_secs_f64(p as f64 * len), layouts)
            })
            .collect();
    }
}

impl Driven for Learned {
    fn policy(&mut self) -> &mut dyn Policy {
        self
    }
    fn wants_arrivals(&self) -> bool {
        true
    }
    fn arrival(&mut self, job: &Job, pidx: usize, run_s: f64) {
        Learned::observe(self, job, pidx, run_s);
    }
    fn midnight(&mut self, now_s: f64, c: &Cluster, candidates: &[ProfileCounts]) {
        self.relearn(now_s, c, candidates);
    }
}

impl Policy for Learned {
    fn name(&self) -> &'static str {
        "time-of-day"
    }
    fn plan(&mut self, nodes: &[NodeSnapshot], demand: &Demand) -> Vec<Repartition> {
        self.schedule.plan(nodes, demand)
    }
    fn plan_at(&mut self, time_of_day: Duration, nodes: &[NodeSnapshot], demand: &Demand) -> Vec<Repartition> {
        self.schedule.plan_at(time_of_day, nodes, demand)
    }
}
