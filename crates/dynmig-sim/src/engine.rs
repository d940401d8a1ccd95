// One piece: the event loop and the one state (`Sim`) every event changes; split, its private fields would have to be opened to the other modules.
//! The discrete-event engine: releases, starts, completions, drains and reconfigurations in
//! virtual time (integer milliseconds), energy integrated between events.
//!
//! Deterministic: the same workload, config and seed give the same result (ordered
//! collections only; ties broken by job id and event sequence).

use crate::backfill::{Resv, WhatIfs, BF_INTERVAL_S, BF_MAX_JOB_TEST, BF_RESOLUTION_S, BF_WINDOW_S};
use crate::cluster::{Cluster, GpuState, Hold, SHAPE};
use crate::model::Job;
use crate::placement::Placement;
use crate::policies::mix;
use crate::policies::views::node_name;
use crate::policies::views::{node_index, View};
use crate::power::PowerModel;
use crate::requests::{plan_requests, restart_profile, RequestParams};
use crate::workload::Workload;
use anyhow::{anyhow, bail, Result};
use dynmig_core::geometry::{
    distinct_multisets, plan_transition, GpuModel, NodeLayout, Placed, ProfileCounts, Transition, TransitionError,
};
use dynmig_core::policy::events::JobEvent;
use dynmig_core::policy::Policy;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

mod schedule;
#[cfg(test)]
mod tests;

/// The free instances a job starts on: one, or one per GPU of a multi-GPU job.
enum Keys {
    One(u32),
    Many(Vec<u32>),
}

impl Keys {
    fn as_slice(&self) -> &[u32] {
        match self {
            Keys::One(k) => std::slice::from_ref(k),
            Keys::Many(v) => v,
        }
    }
}

/// The EASY reservation of the highest-priority blocked job, if any, and that job's queue
/// entry (its priority: only jobs behind it must leave the reservation intact).
type Reservation = Option<(Resv, (i64, u32))>;

/// What a repartition drains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DrainScope {
    /// The whole node drains and reconfigures once all its jobs ended (Slurm 22.05: a dynamic
    /// node is deleted and re-registered; what the controller does today).
    Node,
    /// Only the GPUs whose layout changes drain, each reconfigures once idle (a Slurm that can
    /// change one GPU's GRES in place; the research's per-GPU model).
    Gpu,
}

/// When a repartition takes its GPUs away from the scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DrainTiming {
    /// At once: the GPUs drain when the repartition is ordered and idle until their longest
    /// job ends (a Slurm drain).
    Immediate,
    /// At the time limit: the GPUs keep taking jobs whose time limit ends before the latest
    /// time-limit end of the jobs running when the repartition was ordered, and change once
    /// idle (a Slurm maintenance reservation starting then; backfill fills the gap). A new
    /// target moves the plan; the current layout cancels it.
    Reservation,
}

/// Engine settings.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// GPU model of every GPU.
    pub model: &'static GpuModel,
    /// Nodes.
    pub nodes: usize,
    /// GPUs per node.
    pub gpus_per_node: usize,
    /// Placement rule.
    pub placement: Placement,
    /// Seconds per GPU-instance create or destroy (SMART-MIG: 4 s per repartition; here per
    /// instance change, docs/model.md).
    pub reconfig_cost_s: f64,
    /// What a repartition drains.
    pub drain: DrainScope,
    /// When a repartition takes its GPUs away.
    pub timing: DrainTiming,
    /// How often the demand-driven policy runs while jobs wait, s (60).
    pub policy_interval_s: f64,
    /// Seed of the random placement.
    pub seed: u64,
    /// Sample the state for charts every this many seconds (0: never).
    pub sample_interval_s: f64,
    /// Check the invariants after every event (slow; for tests).
    pub audit: bool,
    /// The power model.
    pub power: PowerModel,
    /// What jobs ask for and how out-of-memory restarts go (default: exact requests).
    pub requests: RequestParams,
    /// Longest time limit a user may ask, s: the partition's `MaxTime` (48 h, a common Slurm
    /// site setting). A job that runs longer than that gets its run time as its limit.
    pub max_time_limit_s: f64,
    /// How long the EASY reservation of the highest-priority blocked job is reused before it
    /// is computed again, s: Slurm's backfill scheduler plans every `bf_interval` (default
    /// [`BF_INTERVAL_S`], 30 s: SchedMD's slurm.conf manual,
    /// <https://slurm.schedmd.com/slurm.conf.html>, `SchedulerParameters`), not at every
    /// event. 0: at every event.
    pub backfill_interval_s: f64,
    /// Slurm's `bf_window`, s: a blocked job whose reservation would start later than this
    /// after now gets none (lower-priority jobs may then take what it waits for). Default
    /// [`BF_WINDOW_S`], 1440 minutes (SchedMD's slurm.conf manual, `SchedulerParameters`).
    /// Infinite: no window.
    pub bf_window_s: f64,
    /// Slurm's `bf_resolution`, s: backfill's times (the reservation's start, a candidate's
    /// planned end) are rounded down to a multiple of it. Default [`BF_RESOLUTION_S`], 60 s
    /// (SchedMD's slurm.conf manual, `SchedulerParameters`). 0: exact times.
    pub bf_resolution_s: f64,
    /// Slurm's `bf_max_job_test`: at each backfill plan (every `backfill_interval_s`) the
    /// jobs queued behind a blocked job of the same type are tried too, at most this many
    /// in all, in priority order; between plans only each type's first job is (Slurm's main
    /// scheduler). Default [`BF_MAX_JOB_TEST`], 500 (SchedMD's slurm.conf manual). 0: never.
    pub bf_max_job_test: usize,
    /// Departures from Slurm's scheduling (none by default): [`WhatIfs`].
    pub what_if: WhatIfs,
    /// Start of the evaluation window, s: [`RunResult::window_energy_j`] and
    /// [`RunResult::drain_waste_gpu_s`] count from here (0: the whole run).
    pub window_start_s: f64,
    /// Stop the run here, s (infinite: when every job has ended): jobs not done by then are
    /// given as ending at the stop, on no instance (training episodes, `dynmig-train`).
    pub stop_s: f64,
}

impl SimConfig {
    /// Defaults for a cluster of `nodes` x `gpus_per_node` GPUs of `model`.
    pub fn new(model: &'static GpuModel, nodes: usize, gpus_per_node: usize) -> Self {
        Self {
            model,
            nodes,
            gpus_per_node,
            placement: Placement::Slurm,
            reconfig_cost_s: 4.0,
            drain: DrainScope::Node,
            timing: DrainTiming::Reservation,
            policy_interval_s: 60.0,
            seed: 1,
            sample_interval_s: 0.0,
            audit: false,
            power: PowerModel::for_model(model),
            requests: RequestParams::default(),
            window_start_s: 0.0,
            backfill_interval_s: BF_INTERVAL_S,
            bf_window_s: BF_WINDOW_S,
            bf_resolution_s: BF_RESOLUTION_S,
            bf_max_job_test: BF_MAX_JOB_TEST,
            what_if: WhatIfs::default(),
            max_time_limit_s: 48.0 * 3600.0,
            stop_s: f64::INFINITY,
        }
    }
}

/// The state sampled for charts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Virtual time, s.
    pub t_s: f64,
    /// Jobs waiting.
    pub queue: u32,
    /// Cluster board power, W.
    pub power_w: f64,
    /// Busy compute slices.
    pub busy_slices: u32,
    /// Instances per profile (the cluster's profile order, smallest first).
    pub instances: Vec<u32>,
    /// GPUs draining or reconfiguring.
    pub away_gpus: u32,
}

/// What happened to one job.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct JobOutcome {
    /// Start, ms.
    pub start_ms: i64,
    /// Completion, ms.
    pub end_ms: i64,
    /// Compute slices it ran on (per GPU).
    pub slices: u8,
    /// Out-of-memory restarts before this run (start and end are the last attempt's).
    pub restarts: u8,
    /// Index into [`RunResult::profiles`] of the instance it ran on (the last attempt's).
    pub profile: u8,
}

/// The result of one run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunResult {
    /// Policy name.
    pub policy: String,
    /// Placement rule.
    pub placement: Placement,
    /// Per job, in workload order.
    pub jobs: Vec<JobOutcome>,
    /// Energy of every GPU from time 0 to the makespan, idle included, J.
    pub energy_j: f64,
    /// Last completion, s.
    pub makespan_s: f64,
    /// Busy compute-slice seconds.
    pub busy_slice_s: f64,
    /// Compute slices of the cluster.
    pub capacity_slices: u32,
    /// Repartitions carried out (per node, or per GPU with [`DrainScope::Gpu`]) that changed
    /// at least one instance.
    pub reconfigs: u64,
    /// Of [`RunResult::reconfigs`], those ordered at or after [`SimConfig::window_start_s`].
    #[serde(default)]
    pub window_reconfigs: u64,
    /// GPU-instance creates and destroys.
    pub instance_changes: u64,
    /// Events processed (releases, completions, reconfigurations, policy calls).
    pub events: u64,
    /// Samples for charts.
    pub samples: Vec<Sample>,
    /// Profile names in the order of [`Sample::instances`].
    pub profiles: Vec<String>,
    /// Out-of-memory restarts (failed attempts).
    pub oom_restarts: u64,
    /// Jobs restarted at least once.
    pub restarted_jobs: u64,
    /// GPU-seconds of failed attempts: compute slices / the GPU's compute slices x seconds.
    pub wasted_gpu_s: f64,
    /// GPU-seconds held beyond need: for each single-GPU attempt that completes, the compute
    /// slices of its instance less those of the smallest profile that holds its memory (the
    /// profile an exact request gets) / the GPU's compute slices x its run time.
    pub oversize_gpu_s: f64,
    /// Energy of failed attempts: each one's instance power above idle
    /// ([`PowerModel::instance_w`], before the board cap) times its duration, J.
    pub wasted_j: f64,
    /// Energy of every GPU from [`SimConfig::window_start_s`] to the makespan, J.
    pub window_energy_j: f64,
    /// Drain waste from [`SimConfig::window_start_s`] on: GPU-seconds of compute slices left
    /// idle on nodes (or GPUs) held for a repartition, from the moment the repartition was
    /// ordered until it starts (free slices / the GPU's compute slices x seconds).
    pub drain_waste_gpu_s: f64,
    /// GPU-seconds, from [`SimConfig::window_start_s`] on, of GPUs that ran no job: GPUs that
    /// could have been powered down or lent to other work.
    pub idle_gpu_s: f64,
    /// Idle board power of one GPU, W (to price [`RunResult::idle_gpu_s`]).
    pub idle_w: f64,
    /// Jobs (ids, ascending) that never started: still queued when nothing left could start
    /// them (their type is on no node and the policy never created it, or it changed
    /// nothing for two virtual days with nothing running). Each is in [`RunResult::jobs`] as
    /// starting and ending when the run ended, on no instance (`slices` 0).
    #[serde(default)]
    pub never_started: Vec<u32>,
    /// Node-seconds each node layout was held from [`SimConfig::window_start_s`] to the
    /// makespan (a node counts from the moment its instances were set, draining included),
    /// longest first: the mix a policy kept over the judged days ([`mix::frozen_mix`]).
    #[serde(skip)]
    pub layout_time: Vec<(NodeLayout, f64)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// A job ends; `key` its instance, or `u32::MAX` for a multi-GPU job.
    Done { job: u32, key: u32 },
    /// GPUs `lo..hi` finished reconfiguring.
    Up { lo: u32, hi: u32 },
}

/// A policy as the engine drives it: the [`Policy`] that plans, and the hooks a few policies
/// need besides (the time-of-day policy learns from arrivals and relearns at midnight).
/// [`Plain`] drives any [`Policy`]; a [`RunSpec`] makes the driver of a run.
pub trait Driven {
    /// The policy that plans.
    fn policy(&mut self) -> &mut dyn Policy;
    /// Plan only while jobs are pending (the demand-driven policy).
    fn only_when_pending(&self) -> bool {
        false
    }
    /// Whether [`Driven::arrival`] is wanted.
    fn wants_arrivals(&self) -> bool {
        false
    }
    /// A job arrives: `pidx` the profile it asks for, `run_s` its run time there, s.
    fn arrival(&mut self, _job: &Job, _pidx: usize, _run_s: f64) {}
    /// Midnight (each after the first), before the policy plans: `now_s` the time, s.
    fn midnight(&mut self, _now_s: f64, _c: &Cluster, _candidates: &[ProfileCounts]) {}
}

/// A [`Policy`] driven as it is: every interval (or only while jobs are pending).
pub struct Plain {
    /// The policy.
    pub policy: Box<dyn Policy>,
    /// [`Driven::only_when_pending`].
    pub only_when_pending: bool,
}

impl Driven for Plain {
    fn policy(&mut self) -> &mut dyn Policy {
        self.policy.as_mut()
    }
    fn only_when_pending(&self) -> bool {
        self.only_when_pending
    }
}

/// What the engine needs to know of a run's policy ([`crate::policies::PolicySpec`]
/// implements it): the layouts it starts from, the GRES types jobs may ask for, how often it
/// is asked, and the driver that plans (`None`: the layouts never change).
pub trait RunSpec {
    /// Short name for reports.
    fn name(&self) -> &'static str;
    /// The layouts of every node at the start.
    fn initial_layouts(&self, cfg: &SimConfig) -> Vec<NodeLayout>;
    /// The profiles jobs may ask for on cluster `c` (one flag per profile of `c`).
    fn catalog(&self, c: &Cluster) -> Vec<bool>;
    /// A policy from elsewhere, which may never let some job run: the run is capped
    /// [`EXTERNAL_STOP_AFTER_S`] after the last arrival.
    fn is_external(&self) -> bool;
    /// The GRES types follow the policy's layouts ([`Policy::catalog`]).
    fn dynamic_catalog(&self) -> bool;
    /// The ages at which a layout may change again (the demand-driven policy's lifetime and
    /// payback hold); empty: no such rule.
    fn quiet_ages(&self) -> Vec<Duration>;
    /// The driver of a run of `wl` under `cfg` on `c`; `None`: fixed layouts.
    ///
    /// # Errors
    /// A policy that cannot be made for this cluster (an external model that does not fit).
    fn driver(&self, wl: &Workload, cfg: &SimConfig, c: &Cluster) -> Result<Option<Box<dyn Driven>>>;
    /// Milliseconds between two decisions of the policy (`i64::MAX`: never).
    fn interval_ms(&self, cfg: &SimConfig) -> i64;
}

/// Runs `wl` under `spec`. `progress` is told each completion.
///
/// Jobs that can never start (their type is on no node and the policy never creates it) do
/// not stop the run: it ends when nothing left could start them, and they are listed in
/// [`RunResult::never_started`].
///
/// # Errors
/// A job fits no profile of the model or needs more GPUs than a node has; an invariant
/// broke (with `audit`); a policy asked for an impossible layout.
pub fn simulate(wl: &Workload, spec: &dyn RunSpec, cfg: &SimConfig, progress: &dyn Fn(u64)) -> Result<RunResult> {
    // A policy from elsewhere (a learned model) may keep changing layouts so that some job
    // never runs and the run never ends: stop it 14 days after the last arrival, the jobs
    // not done ending there (their tardiness counts).
    let capped;
    let cfg = if spec.is_external() && !cfg.stop_s.is_finite() {
        let last = wl.jobs.last().map_or(0.0, |j| j.release);
        capped = SimConfig {
            stop_s: last + EXTERNAL_STOP_AFTER_S,
            ..cfg.clone()
        };
        &capped
    } else {
        cfg
    };
    let layouts = spec.initial_layouts(cfg);
    if layouts.len() != cfg.nodes {
        bail!(
            "policy {} gives {} node layouts for {} nodes",
            spec.name(),
            layouts.len(),
            cfg.nodes
        );
    }
    let cluster = Cluster::new(cfg.model, cfg.gpus_per_node, &layouts, cfg.power.clone())?;
    let catalog = spec.catalog(&cluster);
    let mut sim = Sim::new(wl, cfg, cluster, &catalog)?;
    sim.quiet_ages = spec.quiet_ages();
    sim.dynamic_catalog = spec.dynamic_catalog();
    let candidates: Arc<[ProfileCounts]> = distinct_multisets(cfg.model).into();
    let mut driver = spec.driver(wl, cfg, &sim.c)?;
    let interval_ms = spec.interval_ms(cfg);
    sim.observe = match driver.as_mut() {
        Some(d) => d.policy().observes_jobs(),
        None => false,
    };
    sim.run(&mut driver, interval_ms, &candidates, progress)?;
    Ok(sim.finish(spec.name()))
}

/// How long after the last arrival a run of an external policy ([`RunSpec::is_external`]) stops, s (14 days).
pub const EXTERNAL_STOP_AFTER_S: f64 = 14.0 * 86_400.0;

/// Where a lookahead run starts ([`simulate_from`]): the cluster as a policy sees it now.
#[derive(Debug, Clone, Default)]
pub struct StartState {
    /// Each node's layout now.
    pub layouts: Vec<NodeLayout>,
    /// Jobs running now, as `(job index in the workload, node)`: the first `running.len()`
    /// jobs of the workload, in that order, released at 0. Each starts at 0 on a free
    /// instance of its node of its type (the smallest such), else it queues like the rest.
    pub running: Vec<(u32, usize)>,
    /// Repartitions decided now, as `(node, target)`: applied at 0 after the running jobs
    /// started, with the run's [`DrainTiming`] (a reservation at the node's time limits).
    pub changes: Vec<(usize, NodeLayout)>,
}

/// Runs `wl` from `start` with the layouts fixed but for `start.changes` (model-predictive
/// control: the engine judging a candidate plan from the present, [`crate::policies::mpc`]).
///
/// # Errors
/// As [`simulate`]; also a `start` whose layouts do not match `cfg`'s nodes or whose running
/// jobs are not the workload's first jobs.
pub fn simulate_from(wl: &Workload, start: &StartState, cfg: &SimConfig) -> Result<RunResult> {
    if start.layouts.len() != cfg.nodes {
        bail!(
            "start state has {} node layouts for {} nodes",
            start.layouts.len(),
            cfg.nodes
        );
    }
    if start.running.iter().enumerate().any(|(i, (j, _))| *j as usize != i) {
        bail!("the running jobs of a start state must be the workload's first jobs, in order");
    }
    let cluster = Cluster::new(cfg.model, cfg.gpus_per_node, &start.layouts, cfg.power.clone())?;
    let every = vec![true; cluster.profiles.len()];
    let mut sim = Sim::new(wl, cfg, cluster, &every)?;
    for &(job, node) in &start.running {
        sim.start_on(job, node);
    }
    sim.prestarted = start.running.len();
    for (node, target) in &start.changes {
        sim.repartition(*node, target)?;
    }
    sim.run(&mut None, i64::MAX, &Arc::from(Vec::new()), &|_| {})?;
    Ok(sim.finish("lookahead"))
}

struct Sim<'a> {
    jobs: &'a [Job],
    cfg: &'a SimConfig,
    c: Cluster,
    now: i64,
    heap: BinaryHeap<Reverse<(i64, u64, Ev)>>,
    seq: u64,
    queues: Vec<BTreeSet<(i64, u32)>>,
    /// The first entry of each queue.
    heads: Vec<Option<(i64, u32)>>,
    /// Queue class of each job: its smallest fitting profile, or `profiles + gpus` for
    /// multi-GPU jobs.
    class: Vec<u16>,
    /// What each job first asks for before the catalog is applied: the profile its request
    /// names (its class but for [`catalog_fit`]), or its class.
    asked: Vec<u16>,
    /// Whether the catalog follows the policy's layouts ([`Sim::set_catalog`]); job events
    /// then name what a job asks for, not the type the catalog gives it.
    dynamic_catalog: bool,
    /// Pending instances per profile.
    pending: Vec<u32>,
    queued: u32,
    out: Vec<Option<JobOutcome>>,
    multi_keys: BTreeMap<u32, Vec<u32>>,
    /// Queue key of each queued job.
    qkey: Vec<i64>,
    /// Time limit of each queued job, ms ([`Sim::limit_ms`], set when it is queued).
    limit: Vec<i64>,
    finished: Vec<bool>,
    done: u64,
    energy_j: f64,
    busy_slice_ms: f64,
    reconfigs: u64,
    window_reconfigs: u64,
    changes: u64,
    events: u64,
    samples: Vec<Sample>,
    rng: ChaCha8Rng,
    /// Out-of-memory restarts of each job so far.
    attempt: Vec<u8>,
    /// Whether each running job's attempt runs out of memory.
    failing: Vec<bool>,
    oom_restarts: u64,
    wasted_slice_ms: f64,
    oversize_slice_ms: f64,
    wasted_j: f64,
    window_energy_j: f64,
    drain_waste_gpu_s: f64,
    idle_gpu_s: f64,
    /// What the policy sees, kept up to date.
    view: View,
    /// The last reservation computed: for which first blocked job, until when it is reused,
    /// and what it was.
    resv_cache: Option<(u32, i64, Reservation)>,
    /// When the next backfill plan tries the jobs behind each type's first ([`SimConfig::bf_max_job_test`]), ms.
    next_backfill_ms: i64,
    /// Counts every insertion into and removal from the queues.
    queue_version: u64,
    /// The last backfill plan that started nothing: the cluster's and the queues' versions
    /// and the reservation it planned around. A plan that would see the same is skipped
    /// (`Sim::schedule`).
    idle_backfill: Option<(u64, u64, Reservation)>,
    /// [`SimConfig::bf_resolution_s`] in ms.
    res_ms: i64,
    /// [`SimConfig::bf_window_s`] in ms (`i64::MAX`: no window).
    window_ms: i64,
    /// Whether the policy observes job events ([`Policy::observes_jobs`]).
    observe: bool,
    /// Job events since the policy's last call.
    job_events: Vec<JobEvent>,
    /// Jobs at the front of the workload already started by [`simulate_from`].
    prestarted: usize,
    /// [`SimConfig::stop_s`] in ms (`i64::MAX`: never).
    stop_ms: i64,
    /// Instance changes found so far, per (current instances, target) of an idle GPU.
    transitions: TransitionMemo,
    /// The profiles single-GPU jobs may ask for ([`catalog`]; every one with `spill-up`).
    catalog: Vec<bool>,
    /// Jobs still queued when the run ended with nothing left that could start them.
    never_started: Vec<u32>,
    /// The layout ages at which the demand-driven policy may decide otherwise: its
    /// `min_layout_lifetime` and its payback hold (empty under other policies); its calls are
    /// skipped while [`Sim::still_quiet`].
    quiet_ages: Vec<Duration>,
    /// The last call of the demand-driven policy, if it decided nothing.
    quiet: Option<Quiet>,
    /// Per node, when its current instances were set, ms.
    layout_since_ms: Vec<i64>,
    /// Milliseconds from [`SimConfig::window_start_s`] on that some node held each node
    /// layout ([`RunResult::layout_time`]).
    layout_ms: HashMap<NodeLayout, i64>,
}

/// What the demand-driven policy saw at a call that decided nothing.
struct Quiet {
    /// When, ms.
    at_ms: i64,
    /// Pending instances per profile then.
    pending: Vec<u32>,
    /// The most GPUs a queued job asked then.
    widest: usize,
}

/// The profile a single-GPU job asks for when its request is profile `p`: the smallest in the
/// catalog with at least `p`'s memory (profiles are sorted by memory, then compute slices),
/// or `p` itself when none is there (the job then waits for a repartition that creates it).
fn catalog_fit(c: &Cluster, catalog: &[bool], p: usize) -> usize {
    let need = c.profiles[p].memory_mib;
    (0..c.profiles.len())
        .find(|&q| catalog[q] && c.profiles[q].memory_mib >= need)
        .unwrap_or(p)
}

/// Memo of [`plan_transition`] on idle GPUs (lookups only: its order never matters).
type TransitionMemo = HashMap<(Vec<Placed>, ProfileCounts), Result<Rc<Transition>, TransitionError>>;

impl<'a> Sim<'a> {
    /// A run of `wl` on `c`; `catalog` marks the profiles single-GPU jobs may ask for
    /// ([`catalog`]; ignored with the `spill-up` what-if).
    fn new(wl: &'a Workload, cfg: &'a SimConfig, mut c: Cluster, catalog: &[bool]) -> Result<Self> {
        c.clairvoyant = cfg.what_if.clairvoyant_backfill;
        let np = c.profiles.len();
        let mut class = Vec::with_capacity(wl.jobs.len());
        for j in &wl.jobs {
            if j.gpus > 1 {
                if j.gpus as usize > cfg.gpus_per_node {
                    bail!("job {} asks {} GPUs; a node has {}", j.id, j.gpus, cfg.gpus_per_node);
                }
                if j.mem_mib > c.profiles[c.full].memory_mib {
                    bail!(
                        "job {} needs {} MiB per GPU; a {} has {}",
                        j.id,
                        j.mem_mib,
                        cfg.model.name,
                        c.profiles[c.full].memory_mib
                    );
                }
                class.push((np + j.gpus as usize) as u16);
            } else if let Some(slices) = j.exact_slices {
                let p = c
                    .profiles
                    .iter()
                    .position(|p| p.memory_mib == j.mem_mib && p.compute_slices == slices)
                    .ok_or_else(|| {
                        anyhow!(
                            "job {} asks for a profile of {} MiB and {} compute slices; {} has none",
                            j.id,
                            j.mem_mib,
                            slices,
                            cfg.model.name
                        )
                    })?;
                class.push(p as u16);
            } else {
                let p = c.smallest_fitting(j.mem_mib).ok_or_else(|| {
                    anyhow!(
                        "job {} needs {} MiB of GPU memory; no {} profile has that much",
                        j.id,
                        j.mem_mib,
                        cfg.model.name
                    )
                })?;
                class.push(p as u16);
            }
        }
        let req = plan_requests(&wl.jobs, cfg.model, &c.profiles, &cfg.requests, cfg.seed)?;
        let catalog: Vec<bool> = if cfg.what_if.spill_up {
            vec![true; np]
        } else {
            catalog.to_vec()
        };
        let mut asked = class.clone();
        for (((k, a), r), j) in class.iter_mut().zip(asked.iter_mut()).zip(&req).zip(&wl.jobs) {
            if let (Some(first), None) = (r.profile, j.exact_slices) {
                *a = first;
                *k = catalog_fit(&c, &catalog, first as usize) as u16;
            }
        }
        Ok(Self {
            jobs: &wl.jobs,
            cfg,
            now: 0,
            heap: BinaryHeap::new(),
            seq: 0,
            queues: vec![BTreeSet::new(); np + cfg.gpus_per_node + 1],
            heads: vec![None; np + cfg.gpus_per_node + 1],
            class,
            asked,
            dynamic_catalog: false,
            pending: vec![0; np],
            queued: 0,
            out: vec![None; wl.jobs.len()],
            multi_keys: BTreeMap::new(),
            qkey: vec![0; wl.jobs.len()],
            limit: vec![0; wl.jobs.len()],
            finished: vec![false; wl.jobs.len()],
            done: 0,
            stop_ms: if cfg.stop_s.is_finite() {
                (cfg.stop_s * 1000.0).round() as i64
            } else {
                i64::MAX
            },
            energy_j: 0.0,
            busy_slice_ms: 0.0,
            reconfigs: 0,
            window_reconfigs: 0,
            changes: 0,
            events: 0,
            samples: Vec::new(),
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            attempt: vec![0; wl.jobs.len()],
            failing: vec![false; wl.jobs.len()],
            oom_restarts: 0,
            wasted_slice_ms: 0.0,
            oversize_slice_ms: 0.0,
            wasted_j: 0.0,
            window_energy_j: 0.0,
            drain_waste_gpu_s: 0.0,
            idle_gpu_s: 0.0,
            view: View::default(),
            resv_cache: None,
            next_backfill_ms: 0,
            queue_version: 0,
            idle_backfill: None,
            res_ms: (cfg.bf_resolution_s * 1000.0).round().max(0.0) as i64,
            window_ms: if cfg.bf_window_s.is_finite() {
                (cfg.bf_window_s * 1000.0).round() as i64
            } else {
                i64::MAX
            },
            observe: false,
            job_events: Vec::new(),
            prestarted: 0,
            transitions: HashMap::new(),
            catalog,
            never_started: Vec::new(),
            quiet_ages: Vec::new(),
            quiet: None,
            layout_since_ms: vec![0; cfg.nodes],
            layout_ms: HashMap::new(),
            c,
        })
    }

    fn push(&mut self, t: i64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Reverse((t, self.seq, ev)));
    }

    fn dur_ms(&self, job: &Job, slices: u8) -> i64 {
        ((job.time_on(slices, self.cfg.model.compute_slices) * 1000.0).ceil() as i64).max(1)
    }

    /// Whether `job` runs out of memory on an instance of profile `p`.
    fn fails_on(&self, job: u32, p: usize) -> bool {
        let j = &self.jobs[job as usize];
        j.gpus == 1 && self.c.profiles[p].memory_mib < j.mem_mib
    }

    /// How long an attempt of `job` on an instance of profile `p` lasts: its run time, or the
    /// time to its out-of-memory failure.
    fn attempt_ms(&self, job: u32, p: usize) -> i64 {
        let full = self.dur_ms(&self.jobs[job as usize], self.c.profiles[p].compute_slices);
        let r = &self.cfg.requests;
        if self.fails_on(job, p) && r.early_restart {
            full.min(((r.oom_after_s * 1000.0).round() as i64).max(1))
        } else {
            full
        }
    }

    fn run(
        &mut self,
        driver: &mut Option<Box<dyn Driven>>,
        interval_ms: i64,
        cands: &Arc<[ProfileCounts]>,
        progress: &dyn Fn(u64),
    ) -> Result<()> {
        let n = self.jobs.len();
        let mut next_arrival = self.prestarted;
        let mut next_tick = if interval_ms == i64::MAX { i64::MAX } else { 0 };
        let mut next_sample = if self.cfg.sample_interval_s > 0.0 { 0 } else { i64::MAX };
        let sample_ms = (self.cfg.sample_interval_s * 1000.0) as i64;
        let mut last = 0i64;
        let mut last_change = 0i64;
        let deep_backfill = self.cfg.placement == Placement::Slurm
            && self.cfg.bf_max_job_test > 0
            && self.cfg.backfill_interval_s > 0.0;
        while (self.done as usize) < n {
            let ta = self
                .jobs
                .get(next_arrival)
                .map_or(i64::MAX, |j| (j.release * 1000.0).round() as i64);
            let th = self.heap.peek().map_or(i64::MAX, |Reverse((t, _, _))| *t);
            // Slurm's backfill plans every bf_interval while jobs wait, events or not; with
            // nothing else to come (no arrival, no running job, no repartition) it has nothing
            // new to find.
            let tb = if deep_backfill && self.queued > 0 && (ta != i64::MAX || th != i64::MAX) {
                self.next_backfill_ms.max(last + 1)
            } else {
                i64::MAX
            };
            let now = ta.min(th).min(next_tick).min(tb);
            if now > self.stop_ms {
                // Stopped: the energy runs to the stop, and jobs not done end there.
                self.energy_j += self.c.total_w * (self.stop_ms - last) as f64 / 1000.0;
                for o in self.out.iter_mut().filter(|o| o.is_none()) {
                    *o = Some(JobOutcome {
                        start_ms: self.stop_ms,
                        end_ms: self.stop_ms,
                        slices: 0,
                        restarts: 0,
                        profile: 0,
                    });
                }
                self.done = n as u64;
                break;
            }
            if now == i64::MAX || (ta == i64::MAX && th == i64::MAX && now - last_change > 2 * 86_400_000) {
                // Nothing left can start the queued jobs (no instance of their type, and the
                // policy changes nothing, or nothing for two days): the run ends at the last
                // event, and they are reported as never started.
                self.end_unstarted(last);
                break;
            }
            while next_sample <= now {
                self.sample(next_sample);
                next_sample += sample_ms;
            }
            let step_j = self.c.total_w * (now - last) as f64 / 1000.0;
            self.energy_j += step_j;
            let from_ms = (self.cfg.window_start_s * 1000.0).round() as i64;
            if now > from_ms {
                let inside = (now - last.max(from_ms)) as f64 / (now - last) as f64;
                self.window_energy_j += step_j * inside;
                let dt_s = (now - last.max(from_ms)) as f64 / 1000.0;
                self.idle_gpu_s += self.c.idle_gpus as f64 * dt_s;
                if self.c.held_gpus > 0 {
                    let slices = u32::from(self.cfg.model.compute_slices);
                    // Free slices of the held GPUs (an integer, exact as f64).
                    let free = f64::from(self.c.held_gpus * slices - self.c.held_busy_slices);
                    self.drain_waste_gpu_s += free / f64::from(slices) * dt_s;
                }
            }
            last = now;
            self.now = now;
            let before = (self.done, self.seq, self.queued);
            while next_arrival < n && ta == now && (self.jobs[next_arrival].release * 1000.0).round() as i64 == now {
                let j = &self.jobs[next_arrival];
                self.enqueue(j.id);
                if let Some(d) = driver.as_mut().filter(|d| d.wants_arrivals()) {
                    let p = (self.class[j.id as usize] as usize).min(self.c.full);
                    let slices = self.c.profiles[p].compute_slices;
                    d.arrival(j, p, j.time_on(slices, self.cfg.model.compute_slices));
                }
                next_arrival += 1;
                self.events += 1;
            }
            while let Some(Reverse((t, _, ev))) = self.heap.peek().copied() {
                if t != now {
                    break;
                }
                self.heap.pop();
                self.events += 1;
                match ev {
                    Ev::Done { job, key } => {
                        self.complete(job, key)?;
                        progress(self.done);
                    }
                    Ev::Up { lo, hi } => {
                        for g in lo as usize..hi as usize {
                            self.c.set_state(g, GpuState::Up);
                        }
                        self.c.layout_since_ms[lo as usize / self.c.gpn] = now;
                    }
                }
            }
            if now == next_tick {
                next_tick += interval_ms;
                self.tick(driver, cands)?;
            }
            self.schedule();
            if (self.done, self.seq, self.queued) != before {
                last_change = now;
            }
            if self.cfg.audit {
                self.c.audit()?;
            }
        }
        Ok(())
    }

    /// Ends the run at `at_ms` with the jobs still queued never started
    /// ([`RunResult::never_started`]): each is given as starting and ending then, on no
    /// instance.
    fn end_unstarted(&mut self, at_ms: i64) {
        let mut left: Vec<u32> = self.queues.iter().flatten().map(|&(_, j)| j).collect();
        left.sort_unstable();
        for &j in &left {
            let i = j as usize;
            self.out[i] = Some(JobOutcome {
                start_ms: at_ms,
                end_ms: at_ms,
                slices: 0,
                restarts: self.attempt[i],
                profile: (self.class[i] as usize).min(self.c.full) as u8,
            });
        }
        self.done = self.jobs.len() as u64;
        self.never_started = left;
    }

    fn sample(&mut self, t: i64) {
        let away = self.c.state.iter().filter(|s| **s != GpuState::Up).count() as u32;
        self.samples.push(Sample {
            t_s: t as f64 / 1000.0,
            queue: self.queued,
            power_w: self.c.total_w,
            busy_slices: self.c.busy_slices,
            instances: self.c.inst_count.clone(),
            away_gpus: away,
        });
    }

    fn enqueue(&mut self, job: u32) {
        let j = &self.jobs[job as usize];
        let r = self.rng.gen::<i64>();
        let key = self.cfg.placement.key(j, r);
        self.qkey[job as usize] = key;
        self.limit[job as usize] = self.limit_ms(job);
        let class = self.class[job as usize] as usize;
        self.queue_insert(class, (key, job));
        self.queued += 1;
        self.add_pending(job, 1);
        self.submitted(job);
    }

    /// Records `job` entering the queue for an observing policy.
    fn submitted(&mut self, job: u32) {
        if !self.observe {
            return;
        }
        let j = &self.jobs[job as usize];
        let class = if self.dynamic_catalog {
            self.asked[job as usize]
        } else {
            self.class[job as usize]
        };
        let p = (class as usize).min(self.c.full);
        self.job_events.push(JobEvent::Submitted {
            id: u64::from(job),
            at_s: self.now as f64 / 1000.0,
            profile: self.c.profiles[p].name,
            gpus: j.gpus,
            time_limit_s: self.limit[job as usize] as f64 / 1000.0,
            deadline_s: Some(j.due),
        });
    }

    /// Starts `job` (queued now) on the smallest free instance of `node` of its type (with
    /// `spill-up`, the smallest that holds it; all its GPUs on that node), if there is one;
    /// otherwise it stays queued.
    fn start_on(&mut self, job: u32, node: usize) {
        self.enqueue(job);
        let j = &self.jobs[job as usize];
        let gpus = node * self.c.gpn..(node + 1) * self.c.gpn;
        let up: Vec<usize> = gpus.filter(|g| self.c.state[*g] == GpuState::Up).collect();
        let keys: Option<Vec<u32>> = if j.gpus > 1 {
            let full: Vec<u32> = up
                .iter()
                .flat_map(|g| self.c.insts[*g].iter().map(move |i| (*g, i)))
                .filter(|(_, i)| i.job.is_none() && i.pidx as usize == self.c.full)
                .map(|(g, i)| Cluster::key(g, i.placed.start))
                .take(j.gpus as usize)
                .collect();
            (full.len() == j.gpus as usize).then_some(full)
        } else {
            let class = self.class[job as usize] as usize;
            let need = self.c.profiles[class].memory_mib;
            let exact = j.exact_slices.is_some() || !self.cfg.what_if.spill_up;
            up.iter()
                .flat_map(|g| self.c.insts[*g].iter().map(move |i| (*g, i)))
                .filter(|(_, i)| {
                    i.job.is_none()
                        && if exact {
                            i.pidx as usize == class
                        } else {
                            self.c.profiles[i.pidx as usize].memory_mib >= need
                        }
                })
                .min_by_key(|(g, i)| (self.c.profiles[i.pidx as usize].memory_mib, *g, i.placed.start))
                .map(|(g, i)| vec![Cluster::key(g, i.placed.start)])
        };
        if let Some(keys) = keys {
            self.start(
                job,
                if keys.len() == 1 {
                    Keys::One(keys[0])
                } else {
                    Keys::Many(keys)
                },
            );
        }
    }

    fn queue_insert(&mut self, class: usize, entry: (i64, u32)) {
        self.queue_version += 1;
        self.queues[class].insert(entry);
        if self.heads[class].is_none_or(|h| entry < h) {
            self.heads[class] = Some(entry);
        }
    }

    fn queue_remove(&mut self, class: usize, entry: (i64, u32)) -> bool {
        self.queue_version += 1;
        let removed = self.queues[class].remove(&entry);
        if self.heads[class] == Some(entry) {
            self.heads[class] = self.queues[class].first().copied();
        }
        removed
    }

    fn add_pending(&mut self, job: u32, sign: i32) {
        let class = self.class[job as usize] as usize;
        let (p, n) = if class < self.c.profiles.len() {
            (class, 1)
        } else {
            (self.c.full, self.jobs[job as usize].gpus)
        };
        if sign > 0 {
            self.pending[p] += n;
        } else {
            self.pending[p] -= n;
        }
    }

    fn tick(&mut self, driver: &mut Option<Box<dyn Driven>>, cands: &Arc<[ProfileCounts]>) -> Result<()> {
        let tod = Duration::from_millis((self.now % 86_400_000) as u64);
        let Some(d) = driver.as_mut() else {
            return Ok(());
        };
        if d.only_when_pending() && self.queued == 0 {
            return Ok(());
        }
        if self.now > 0 && self.now % 86_400_000 == 0 {
            d.midnight(self.now as f64 / 1000.0, &self.c, cands);
        }
        let policy = d.policy();
        self.events += 1;
        let np = self.c.profiles.len();
        let widest = (np..self.queues.len())
            .rev()
            .find(|q| !self.queues[*q].is_empty())
            .map_or(0, |q| q - np);
        if self.still_quiet(widest) {
            return Ok(());
        }
        self.view.refresh(
            &self.c,
            self.now,
            cands,
            &self.pending,
            &self.c.profiles,
            widest,
            &self.class,
        );
        self.c.clear_dirty();
        if self.observe {
            policy.observe(self.now as f64 / 1000.0, &self.job_events);
            self.job_events.clear();
        }
        let snap = &self.view.snapshot;
        let plan = policy.plan_at(tod, &snap.nodes, &snap.demand());
        if !self.quiet_ages.is_empty() {
            self.quiet = plan.is_empty().then(|| Quiet {
                at_ms: self.now,
                pending: self.pending.clone(),
                widest,
            });
        }
        for r in plan {
            let node = node_index(&r.node)
                .filter(|n| *n < self.c.nodes())
                .ok_or_else(|| anyhow!("policy names unknown node {}", r.node))?;
            self.repartition(node, &r.target)?;
        }
        if let Some(types) = policy.catalog() {
            let on: Vec<bool> = self.c.profiles.iter().map(|p| types.contains(p.name)).collect();
            self.set_catalog(on);
        }
        Ok(())
    }

    /// Makes `on` the GRES types single-GPU jobs ask for, as a controller does when its
    /// layouts change (job_submit's catalog, and `scontrol update` of the pending jobs' GRES):
    /// every job not yet started (queued or still to come) asks again for the smallest type
    /// of `on` that holds what it first asked for ([`catalog_fit`]). Jobs that asked for an
    /// exact profile and multi-GPU jobs keep theirs; a queued job keeps its place and its
    /// time limit (Slurm keeps both on a GRES update).
    fn set_catalog(&mut self, on: Vec<bool>) {
        if on == self.catalog || !on.iter().any(|x| *x) {
            return;
        }
        self.catalog = on;
        self.resv_cache = None;
        let np = self.c.profiles.len();
        for i in 0..self.jobs.len() {
            if self.out[i].is_some() || self.finished[i] || self.jobs[i].exact_slices.is_some() {
                continue;
            }
            let old = self.class[i] as usize;
            if old >= np {
                continue;
            }
            let new = catalog_fit(&self.c, &self.catalog, self.asked[i] as usize);
            if new == old {
                continue;
            }
            let job = i as u32;
            let entry = (self.qkey[i], job);
            let queued = self.queues[old].contains(&entry);
            if queued {
                self.add_pending(job, -1);
                self.queue_remove(old, entry);
            }
            self.class[i] = new as u16;
            if queued {
                self.queue_insert(new, entry);
                self.add_pending(job, 1);
            }
        }
    }

    /// Whether the demand-driven policy would decide nothing again: its last call decided
    /// nothing, and nothing it reads changed since (no node touched, the same pending demand,
    /// no layout grew past its lifetime or its payback hold). It reads the clock only through
    /// those ages, so its answer would be the same empty plan. (Until 2026-11-27 the hold was
    /// not among them: a layout held when the policy went quiet stayed for good, and the
    /// demo's 2-GPU job never started in the simulator, found by slurm/demo-compare.sh.)
    fn still_quiet(&self, widest: usize) -> bool {
        let Some(q) = &self.quiet else {
            return false;
        };
        if !self.c.dirty_nodes.is_empty() || q.widest != widest || q.pending != self.pending {
            return false;
        }
        let age = |since: i64, t: i64| Duration::from_millis(u64::try_from(t - since).unwrap_or(0));
        self.c.layout_since_ms.iter().all(|&since| {
            self.quiet_ages
                .iter()
                .all(|&a| (age(since, q.at_ms) >= a) == (age(since, self.now) >= a))
        })
    }

    fn repartition(&mut self, node: usize, target: &NodeLayout) -> Result<()> {
        let gpn = self.c.gpn;
        if target.gpus.len() != gpn {
            bail!(
                "policy target {target} for node {node} has {} GPUs, not {gpn}",
                target.gpus.len()
            );
        }
        let gpus = node * gpn..(node + 1) * gpn;
        if gpus.clone().any(|g| self.c.state[g] != GpuState::Up) {
            return Ok(()); // already away; the policy will be asked again
        }
        let changes: Vec<bool> = gpus
            .clone()
            .enumerate()
            .map(|(i, g)| self.c.gpu_counts(g) != target.gpus[i])
            .collect();
        // Cancel (or narrow) an earlier plan: GPUs that keep their layout are released.
        let node_changes = changes.iter().any(|c| *c);
        for (i, g) in gpus.clone().enumerate() {
            let keep = match self.cfg.drain {
                DrainScope::Node => !node_changes,
                DrainScope::Gpu => !changes[i],
            };
            if keep && self.c.hold[g].take().is_some() {
                self.c.touch(node, SHAPE);
                self.c.set_held(g, false);
            }
        }
        if !node_changes {
            return Ok(());
        }
        let affected: Vec<usize> = gpus
            .clone()
            .enumerate()
            .filter(|(i, _)| self.cfg.drain == DrainScope::Node || changes[*i])
            .map(|(_, g)| g)
            .collect();
        match self.cfg.timing {
            DrainTiming::Immediate => {
                for &g in &affected {
                    self.c
                        .set_state(g, GpuState::Draining(target.gpus[g - node * gpn].clone()));
                    self.c.set_held(g, true);
                }
            }
            DrainTiming::Reservation => {
                let deadline = affected
                    .iter()
                    .map(|g| self.c.gpu_work_ends_ms(*g))
                    .max()
                    .unwrap_or(0)
                    .max(self.now);
                for &g in &affected {
                    self.c.touch(node, SHAPE);
                    self.c.hold[g] = Some(Hold {
                        target: target.gpus[g - node * gpn].clone(),
                        deadline_ms: deadline,
                    });
                    self.c.set_held(g, true);
                }
            }
        }
        self.after_release(&affected)
    }

    /// Time limit of `job` from now, ms: its factor times its run time on the profile it asks
    /// for (a whole GPU for multi-GPU jobs), at most [`SimConfig::max_time_limit_s`] unless
    /// the run itself is longer.
    fn limit_ms(&self, job: u32) -> i64 {
        let j = &self.jobs[job as usize];
        let p = (self.class[job as usize] as usize).min(self.c.full);
        let run = j.time_on(self.c.profiles[p].compute_slices, self.cfg.model.compute_slices);
        let limit = (run * j.limit_factor).min(self.cfg.max_time_limit_s.max(run));
        ((limit * 1000.0).ceil() as i64).max(1)
    }

    /// Starts the reconfigurations that can start among `gpus` (just drained or just freed).
    fn after_release(&mut self, gpus: &[usize]) -> Result<()> {
        for &g in gpus {
            if self.c.hold[g].is_none() {
                continue;
            }
            let n = self.c.node_of(g);
            let ready = match self.cfg.drain {
                DrainScope::Gpu => self.c.gpu_idle(g),
                DrainScope::Node => self.c.node_busy[n] == 0,
            };
            if ready {
                let scope = match self.cfg.drain {
                    DrainScope::Gpu => g..g + 1,
                    DrainScope::Node => n * self.c.gpn..(n + 1) * self.c.gpn,
                };
                for h in scope {
                    if let Some(hold) = self.c.hold[h].take() {
                        self.c.set_state(h, GpuState::Draining(hold.target));
                    }
                }
            }
        }
        for &g in gpus {
            if !matches!(self.c.state[g], GpuState::Draining(_)) {
                continue;
            }
            match self.cfg.drain {
                DrainScope::Gpu => {
                    if self.c.gpu_idle(g) {
                        self.reconfigure(g, g + 1)?;
                    }
                }
                DrainScope::Node => {
                    let n = self.c.node_of(g);
                    if self.c.node_busy[n] == 0 {
                        self.reconfigure(n * self.c.gpn, (n + 1) * self.c.gpn)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Counts the time `node` held its layout until now, from the judged window's start on
    /// ([`RunResult::layout_time`]).
    fn layout_held(&mut self, node: usize, until_ms: i64) {
        let from = self.layout_since_ms[node].max((self.cfg.window_start_s * 1000.0).round() as i64);
        if until_ms > from {
            *self.layout_ms.entry(self.c.node_layout(node)).or_insert(0) += until_ms - from;
        }
        self.layout_since_ms[node] = until_ms;
    }

    fn reconfigure(&mut self, lo: usize, hi: usize) -> Result<()> {
        let mut ops = 0usize;
        for g in lo..hi {
            let GpuState::Draining(target) = self.c.state[g].clone() else {
                continue;
            };
            self.layout_held(self.c.node_of(g), self.now);
            let current: Vec<Placed> = self.c.insts[g].iter().map(|i| i.placed).collect();
            let t = self.transition(&current, target).map_err(|e| anyhow!("GPU {g}: {e}"))?;
            ops += t.operations();
            let mut next: Vec<_> = current.iter().copied().filter(|p| !t.destroy.contains(p)).collect();
            next.extend(t.create.iter().copied());
            self.c.set_state(g, GpuState::Reconfiguring);
            self.c.set_held(g, false);
            self.c.set_instances(g, &next)?;
        }
        if ops == 0 {
            for g in lo..hi {
                self.c.set_state(g, GpuState::Up);
                self.c.set_held(g, false);
            }
            return Ok(());
        }
        self.reconfigs += 1;
        if self.now as f64 >= self.cfg.window_start_s * 1000.0 {
            self.window_reconfigs += 1;
        }
        self.changes += ops as u64;
        let t = self.now + (ops as f64 * self.cfg.reconfig_cost_s * 1000.0).round() as i64;
        self.push(
            t,
            Ev::Up {
                lo: lo as u32,
                hi: hi as u32,
            },
        );
        Ok(())
    }

    /// [`plan_transition`] of an idle GPU holding `current` to `target`, computed once per
    /// pair and run (a pure function of the two; the search behind it is costly).
    fn transition(&mut self, current: &[Placed], target: ProfileCounts) -> Result<Rc<Transition>, TransitionError> {
        let key = (current.to_vec(), target);
        if let Some(t) = self.transitions.get(&key) {
            return t.clone();
        }
        let idle: Vec<(Placed, bool)> = current.iter().map(|p| (*p, false)).collect();
        let t = plan_transition(self.c.model, &idle, &key.1).map(Rc::new);
        self.transitions.insert(key, t.clone());
        t
    }

    fn complete(&mut self, job: u32, key: u32) -> Result<()> {
        let multi = if key == u32::MAX {
            self.multi_keys.remove(&job).unwrap_or_default()
        } else {
            Vec::new()
        };
        let single = [key];
        let keys: &[u32] = if key == u32::MAX { &multi } else { &single };
        let o = self.out[job as usize].ok_or_else(|| anyhow!("job {job} completes but never started"))?;
        if o.end_ms != self.now || self.finished[job as usize] {
            bail!("job {job} completes twice or at the wrong time");
        }
        if self.failing[job as usize] {
            return self.out_of_memory(job, keys, o);
        }
        self.finished[job as usize] = true;
        self.done += 1;
        if self.observe {
            self.job_events.push(JobEvent::Ended {
                id: u64::from(job),
                at_s: self.now as f64 / 1000.0,
            });
        }
        self.busy_slice_ms += f64::from(o.slices) * keys.len() as f64 * (o.end_ms - o.start_ms) as f64;
        self.release_all(keys)
    }

    /// Frees the instances `keys` of a job that ended and starts the reconfigurations that can
    /// start now.
    fn release_all(&mut self, keys: &[u32]) -> Result<()> {
        for &k in keys {
            self.c.release(k);
        }
        match keys {
            [k] => self.after_release(&[(k / 8) as usize]),
            _ => {
                let gpus: Vec<usize> = keys.iter().map(|k| (k / 8) as usize).collect();
                self.after_release(&gpus)
            }
        }
    }

    /// The attempt `o` of `job` on `keys` ran out of memory: free the instance, count the
    /// waste, requeue the job on its next attempt's profile (same place in the queue).
    fn out_of_memory(&mut self, job: u32, keys: &[u32], o: JobOutcome) -> Result<()> {
        let ms = (o.end_ms - o.start_ms) as f64;
        self.busy_slice_ms += f64::from(o.slices) * ms;
        self.wasted_slice_ms += f64::from(o.slices) * ms;
        self.wasted_j += self.cfg.power.instance_w(o.slices) * ms / 1000.0;
        self.oom_restarts += 1;
        for &k in keys {
            self.c.release(k);
        }
        let i = job as usize;
        self.out[i] = None;
        self.failing[i] = false;
        self.attempt[i] += 1;
        let next = restart_profile(
            self.cfg.model,
            &self.c.profiles,
            o.profile as usize,
            u32::from(self.attempt[i]),
            &self.cfg.requests,
        );
        self.asked[i] = next as u16;
        self.class[i] = catalog_fit(&self.c, &self.catalog, next) as u16;
        self.limit[i] = self.limit_ms(job);
        self.queue_insert(self.class[i] as usize, (self.qkey[i], job));
        self.queued += 1;
        self.add_pending(job, 1);
        if self.observe {
            self.job_events.push(JobEvent::Ended {
                id: u64::from(job),
                at_s: self.now as f64 / 1000.0,
            });
        }
        self.submitted(job);
        let gpus: Vec<usize> = keys.iter().map(|k| (k / 8) as usize).collect();
        self.after_release(&gpus)
    }

    fn start(&mut self, job: u32, keys: Keys) {
        let class = self.class[job as usize] as usize;
        let removed = self.queue_remove(class, (self.qkey[job as usize], job));
        debug_assert!(removed, "a started job was queued");
        self.queued -= 1;
        self.add_pending(job, -1);
        let mut slices = 0;
        let p = self.c.inst(keys.as_slice()[0]).pidx as usize;
        let until = self.now + self.limit[job as usize];
        let end = self.now + self.attempt_ms(job, p);
        let asked = (self.class[job as usize] as usize).min(self.c.full);
        for key in keys.as_slice() {
            slices = self.c.occupy(*key, job, until, end, asked);
        }
        self.failing[job as usize] = self.fails_on(job, p);
        let j = &self.jobs[job as usize];
        if !self.failing[job as usize] && j.gpus == 1 {
            let exact = self
                .c
                .smallest_fitting(j.mem_mib)
                .map_or(self.cfg.model.compute_slices, |e| self.c.profiles[e].compute_slices);
            let over = f64::from(self.c.profiles[p].compute_slices.saturating_sub(exact));
            self.oversize_slice_ms += over * (end - self.now) as f64;
        }
        self.out[job as usize] = Some(JobOutcome {
            start_ms: self.now,
            end_ms: end,
            slices,
            restarts: self.attempt[job as usize],
            profile: p as u8,
        });
        if self.observe {
            self.job_events.push(JobEvent::Started {
                id: u64::from(job),
                at_s: self.now as f64 / 1000.0,
                node: node_name(self.c.node_of((keys.as_slice()[0] / 8) as usize)),
                slices,
            });
        }
        let key = match keys {
            Keys::One(k) => k,
            Keys::Many(v) if v.len() == 1 => v[0],
            Keys::Many(v) => {
                self.multi_keys.insert(job, v);
                u32::MAX
            }
        };
        self.push(end, Ev::Done { job, key });
    }

    fn finish(mut self, policy: &str) -> RunResult {
        let makespan_ms = self.out.iter().flatten().map(|o| o.end_ms).max().unwrap_or(0);
        for n in 0..self.layout_since_ms.len() {
            self.layout_held(n, makespan_ms);
        }
        let mut layout_time: Vec<(NodeLayout, f64)> =
            self.layout_ms.drain().map(|(l, ms)| (l, ms as f64 / 1000.0)).collect();
        layout_time.sort_by(|a, b| {
            b.1.total_cmp(&a.1)
                .then_with(|| format!("{:?}", a.0).cmp(&format!("{:?}", b.0)))
        });
        RunResult {
            policy: policy.to_string(),
            placement: self.cfg.placement,
            jobs: self.out.into_iter().map(|o| o.expect("every job ran")).collect(),
            energy_j: self.energy_j,
            makespan_s: makespan_ms as f64 / 1000.0,
            busy_slice_s: self.busy_slice_ms / 1000.0,
            capacity_slices: (self.c.insts.len() as u32) * u32::from(self.cfg.model.compute_slices),
            reconfigs: self.reconfigs,
            window_reconfigs: self.window_reconfigs,
            instance_changes: self.changes,
            events: self.events,
            samples: self.samples,
            profiles: self.c.profiles.iter().map(|p| p.name.to_string()).collect(),
            oom_restarts: self.oom_restarts,
            restarted_jobs: self.attempt.iter().filter(|a| **a > 0).count() as u64,
            wasted_gpu_s: self.wasted_slice_ms / 1000.0 / f64::from(self.cfg.model.compute_slices),
            oversize_gpu_s: self.oversize_slice_ms / 1000.0 / f64::from(self.cfg.model.compute_slices),
            wasted_j: self.wasted_j,
            window_energy_j: self.window_energy_j,
            drain_waste_gpu_s: self.drain_waste_gpu_s,
            idle_gpu_s: self.idle_gpu_s,
            idle_w: self.cfg.power.idle_w,
            never_started: self.never_started,
            layout_time,
        }
    }
}

/// Convenience for callers that build static layouts: [`mix::uniform`].
pub use mix::uniform;
