//! The settings of the policies that run the simulator's searches (the guarded default and
//! the adaptive policy), apart from the policies themselves: [`super::PolicySpec`] carries
//! them, and the policies import the searches, which import [`super::PolicySpec`].

use super::{Objective, PlannerSettings, PolicyLimits};
use dynmig_core::geometry::NodeLayout;
use std::time::Duration;

/// Settings of [`super::adaptive::Adaptive`].
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptiveSettings {
    /// Concurrency and hysteresis (`max_concurrent`, `min_layout_lifetime`).
    pub limits: PolicyLimits,
    /// Jobs submitted this far back are searched on (7 days: a week's pattern, half the fair
    /// baseline's 14 days so that a shift of the mix is followed within days).
    pub history: Duration,
    /// Time between searches (1 day).
    pub every: Duration,
    /// No search before this much history (1 day).
    pub min_history: Duration,
    /// The best candidate replaces the current target when its ET is below
    /// `(1 - min_gain)` x the current target's on the same jobs (0.02).
    pub min_gain: f64,
    /// Speed-up exponent of the jobs searched on (0.7, the planner's `speedup`).
    pub speedup: f64,
    /// Jobs run only on the GRES type they asked for (true in a controller, as in Slurm).
    pub exact_profiles: bool,
    /// Most nodes with a planned change at once (4 x `max_concurrent`, as the planner).
    pub max_planned: usize,
    /// A node changes only if its running work ends within this (4 h, the planner's
    /// `max_wait`); later ones are taken at a later call.
    pub max_wait: Duration,
    /// The planner, a candidate beside the static layouts: when its run on the history
    /// beats the best static layout's, the planner decides until the next search (`None`:
    /// static layouts only). Default: the planner's defaults with `limits`, speed objective.
    pub planner: Option<PlannerSettings>,
    /// Search on a thread of its own (true in a controller: a search of a week's jobs on a
    /// large cluster takes seconds to minutes, and no pass may wait for it; its result is
    /// taken at the first call after it ends). False (the default, the simulator): the
    /// search runs inside the call and its result applies at once, so that a run in
    /// virtual time is reproducible.
    pub background: bool,
}

impl AdaptiveSettings {
    /// The defaults above with `limits`.
    pub fn new(limits: PolicyLimits) -> Self {
        let max_planned = 4 * limits.max_concurrent.max(1);
        let planner = Some(PlannerSettings::new(limits.clone(), Objective::Speed));
        Self {
            limits,
            history: Duration::from_secs(7 * 86_400),
            every: Duration::from_secs(86_400),
            min_history: Duration::from_secs(86_400),
            min_gain: 0.02,
            speedup: 0.7,
            exact_profiles: false,
            max_planned,
            max_wait: Duration::from_secs(4 * 3600),
            planner,
            background: false,
        }
    }
}

/// Settings of [`super::guarded::Guarded`].
#[derive(Debug, Clone, PartialEq)]
pub struct GuardedSettings {
    /// The layout it starts from and goes back to (one per node): the fair static's.
    pub base: Vec<NodeLayout>,
    /// Concurrency and hysteresis (`max_concurrent`, `min_layout_lifetime`).
    pub limits: PolicyLimits,
    /// The recent evidence: jobs submitted this far back (3 days). Candidates are ranked on
    /// it, and a change must be no worse on it.
    pub window: Duration,
    /// The deciding evidence: jobs submitted this far back (14 days, the fair static's search
    /// window). Zero or shorter than `window`: `window`'s jobs.
    pub long_window: Duration,
    /// Time between decisions (1 day).
    pub every: Duration,
    /// No decision before this much history (14 days, the long window: a change needs the
    /// evidence the base was chosen on; the fifth build, docs/policy.md "Guarded").
    pub min_history: Duration,
    /// A candidate must lower ET by this share of the current layout's on the long window (0.05).
    pub margin: f64,
    /// How many candidates, the best on the recent `window`, are judged on `long_window` (4).
    pub recheck: usize,
    /// How many nodes one move changes from one node type to another ([1, 2, 4]); the
    /// largest is the most nodes one decision drains.
    pub moves: Vec<usize>,
    /// More node types moves may choose (none by default; an evaluation gives the node
    /// layouts of the fair search's three best candidates).
    pub node_types: Vec<NodeLayout>,
    /// Whole cluster layouts that are candidates at every decision besides `base` (none by
    /// default; an evaluation gives the fair search's three best: the administrator's
    /// shortlist). Moving to one may change many nodes, one reservation at a time.
    pub shortlist: Vec<Vec<NodeLayout>>,
    /// How the jobs the evidence is built from speed up with compute slices: the MISO
    /// table (the public measurement the simulator's training jobs follow, docs/model.md),
    /// or one exponent, `speedup`.
    pub curve: crate::model::SpeedCurve,
    /// Speed-up exponent of those jobs under [`crate::model::SpeedCurve::Exponent`] (0.7, as
    /// the planner's).
    pub speedup: f64,
    /// A node changes only if its running work ends within this (4 h, as the planner's).
    pub max_wait: Duration,
    /// Pending jobs keep the GRES type they were given (false: they follow the catalog). True
    /// in the controller on Slurm before 23.02.6, which cannot change a submitted job's type:
    /// a candidate without the type of a single-GPU job still waiting is then never taken, and
    /// a current layout without one goes back to the base (docs/policy.md, "Guarded").
    pub pending_types_fixed: bool,
    /// Decide on a thread of its own, the nodes following the result from the first call
    /// after it ends (false; the controller sets it: on a large cluster a decision's runs of
    /// the engine take longer than a pass should).
    pub background: bool,
    /// A learned residual that adjusts each decision ([`super::residual`]; none by default).
    pub residual: Option<super::residual::ResidualUse>,
}

impl GuardedSettings {
    /// The controller's guarded default of `config` (`kind = "guarded"`; `None` for another
    /// kind or no node group): each node's group `initial_layout` as the base, the
    /// `node_types` on every GPU of a node as more node types, the controller's limits.
    pub fn from_config(config: &dynmig_core::config::Config) -> Option<Self> {
        let dynmig_core::config::PolicyConfig::Guarded { node_types } = &config.policy else {
            return None;
        };
        let gpus = config.node_groups.first()?.gpus as usize;
        let mut s = Self::new(config.initial_node_layouts(), PolicyLimits::from_config(config, 1));
        s.node_types = node_types
            .iter()
            .map(|c| NodeLayout {
                gpus: vec![c.clone(); gpus],
            })
            .collect();
        Some(s)
    }

    /// The defaults above from `base` with `limits`.
    pub fn new(base: Vec<NodeLayout>, limits: PolicyLimits) -> Self {
        Self {
            base,
            limits,
            window: Duration::from_secs(3 * 86_400),
            long_window: Duration::from_secs(14 * 86_400),
            every: Duration::from_secs(86_400),
            min_history: Duration::from_secs(14 * 86_400),
            margin: 0.05,
            moves: vec![1, 2, 4],
            recheck: 4,
            node_types: Vec::new(),
            shortlist: Vec::new(),
            curve: crate::model::SpeedCurve::MisoTraining,
            speedup: 0.7,
            max_wait: Duration::from_secs(4 * 3600),
            pending_types_fixed: false,
            background: false,
            residual: None,
        }
    }
}
