// One piece: the training loop of the learned policy: environment, episode, update and checkpoint, one algorithm in order.
//! `dynmig train`: the learned policy trained in the simulator (docs/learned.md).
//!
//! - **Environment**: one episode is three days of the training days of the workload
//!   (`--train-days`, default the fair baselines' search window, days 0-14), run by the
//!   simulator's own engine from whole GPUs. The planner (`plan`) runs the first two days
//!   ([`WARMUP_DAYS`]): its layouts, running jobs and queue at their end are the episode's
//!   start state, drawn from the trace (with an empty cluster at midnight as the start,
//!   whole GPUs and `plan` were equal, ET 0.5735 and 0.5741, and a model learned to keep;
//!   over the 30-day trace the queue the trace builds is what makes layouts matter, ET 1.0
//!   against 0.58). The model decides from then on, asked every `--policy-interval` as in
//!   `dynmig simulate` (it decides at most every 10 min); the episode stops a day after the
//!   last arrivals ([`EPISODE_STOP_S`]), jobs not done by then ending there.
//! - **Reward**: minus the ET the episode accrued in the 4 h after a decision ([`CREDIT_S`]):
//!   `(e / e_none + t / t_none) / 2` over that span (energy per job from the power samples,
//!   tardiness accrued then), normalised as the simulator reports ET: the references are the
//!   same episode's on whole GPUs throughout, `t_none` at least the mean run time. The
//!   episode's ET is the same over its whole length. An episode the engine refuses counts
//!   ET 10.
//! - **Algorithm**: policy gradient (REINFORCE, Williams 1992) with a per-day baseline: each
//!   iteration runs `--episodes-per-day` episodes on each of `--days-per-iteration` days drawn
//!   from the training days; a decision's advantage is its reward less the mean reward of the
//!   same span in that day's episodes of the iteration, over the spread of all; loss
//!   minus the mean of advantage x log-probability of the action taken among the allowed ones,
//!   less `--entropy` x the policy's entropy; candle's AdamW takes the step. The weights start
//!   from the seed ([`dynmig_learn::net::Network::seeded`]); the episodes run the runtime's
//!   network (dynmig-learn), into which candle's weights are copied after each step
//!   ([`crate::net`]).
//! - **Output** (in `--out`): `model.safetensors` (the model whose greedy decisions had the
//!   lowest mean ET over the training days, checked every 10 iterations), checkpoints
//!   `checkpoint-<iteration>.safetensors`, `curve.csv` and `curve.svg` (the learning curve).
//!   A fixed `--seed` gives the same model.

use crate::net::{copy_to_runtime, to_candle};
use anyhow::{anyhow, bail, Context, Result};
use candle_core::{Device, Tensor, D};
use candle_nn::{AdamW, Optimizer, ParamsAdamW};
use dynmig_core::demand::Demand;
use dynmig_core::policy::events::JobEvent;
use dynmig_core::policy::{NodeSnapshot, Repartition};
use dynmig_lab::cli::{eval_options, workload_and_config, SimulateArgs};
use dynmig_learn::catalogue::Catalogue;
use dynmig_learn::policy::{DayClock, LearnedPolicy, Step, DECISION_INTERVAL, MAX_WAIT};
use dynmig_learn::Model;
use dynmig_sim::engine::{simulate, RunResult, SimConfig};
use dynmig_sim::model::Job;
use dynmig_sim::policies::learned_model::mode;
use dynmig_sim::policies::{ExternalPolicy, Objective, Planner, PlannerSettings, Policy, PolicyLimits, PolicySpec};
use dynmig_sim::workload::Workload;
use indicatif::{ProgressBar, ProgressStyle};
use plotters::prelude::*;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const DAY_S: f64 = 86_400.0;
/// Days of arrivals the planner runs before the model decides: the episode's start state.
pub const WARMUP_DAYS: usize = 2;
/// Days of arrivals in an episode: the warm-up, then a day the model decides.
pub const EPISODE_DAYS: usize = WARMUP_DAYS + 1;
/// When the model takes over from the planner, s from the episode's start.
pub const HANDOVER_S: f64 = WARMUP_DAYS as f64 * DAY_S;
/// Episodes stop here, s (a day after the last arrivals): a policy that keeps jobs from
/// running pays their tardiness to then.
pub const EPISODE_STOP_S: f64 = (EPISODE_DAYS + 1) as f64 * DAY_S;
/// A decision is credited with the ET of this long after it (4 h: the planner's `max_wait`,
/// about the time a change takes to land and be used).
pub const CREDIT_S: f64 = 4.0 * 3600.0;
/// ET given to an episode the engine stopped.
const FAILED_ET: f64 = 10.0;

/// Arguments of `dynmig train` (the workload and cluster as `dynmig simulate` takes them).
#[derive(Debug, Clone, clap::Args)]
pub struct TrainArgs {
    /// Workload, cluster and output directory (`--out`, default `learned`), as for
    /// `dynmig simulate`.
    #[command(flatten)]
    pub sim: SimulateArgs,
    /// Training days `A,B` of the workload (jobs released in `[A, B)`) [default: 0,14].
    #[arg(long, value_delimiter = ',')]
    pub train_days: Option<Vec<f64>>,
    /// Wall-clock budget, minutes.
    #[arg(long, default_value_t = 30.0)]
    pub minutes: f64,
    /// Stop after this many iterations (before the budget if sooner).
    #[arg(long)]
    pub iterations: Option<usize>,
    /// Days drawn per iteration.
    #[arg(long, default_value_t = 4)]
    pub days_per_iteration: usize,
    /// Episodes per drawn day.
    #[arg(long, default_value_t = 4)]
    pub episodes_per_day: usize,
    /// Hidden units per layer.
    #[arg(long, default_value_t = 32)]
    pub hidden: usize,
    /// AdamW learning rate.
    #[arg(long, default_value_t = 3e-3)]
    pub lr: f64,
    /// Entropy bonus weight.
    #[arg(long, default_value_t = 0.01)]
    pub entropy: f64,
}

/// One point of the learning curve.
#[derive(Debug, Clone, PartialEq)]
pub struct CurvePoint {
    /// Iteration (1-based).
    pub iteration: usize,
    /// Seconds since training started.
    pub seconds: f64,
    /// Mean ET of the iteration's sampled episodes.
    pub sampled_et: f64,
    /// Mean ET of greedy decisions over every training day, where checked.
    pub greedy_et: Option<f64>,
}

/// What a training run produced.
#[derive(Debug, Clone)]
pub struct Trained {
    /// The saved model file.
    pub model: PathBuf,
    /// The learning curve.
    pub curve: Vec<CurvePoint>,
    /// Greedy mean ET over the training days of the saved model.
    pub best_et: f64,
    /// Mean ET on the same episodes of keeping the warm-up's layouts after it.
    pub keep_et: f64,
    /// Mean ET of `plan` on the same episodes.
    pub plan_et: f64,
}

/// A training day: its jobs (released from 0) and its references (the episode on whole GPUs).
struct Day {
    wl: Workload,
    e_ref: f64,
    t_ref: f64,
    /// ET of `plan` throughout, normalised as the episodes'.
    plan_et: f64,
}

/// The jobs of `wl` released in days `d` to `d + EPISODE_DAYS` (the warm-up's, then the
/// model's day), moved to start at 0.
fn day_workload(wl: &Workload, d: usize) -> Workload {
    let (from, to) = (d as f64 * DAY_S, (d + EPISODE_DAYS) as f64 * DAY_S);
    let jobs: Vec<Job> = wl
        .jobs
        .iter()
        .filter(|j| j.release >= from && j.release < to)
        .map(|j| Job {
            release: j.release - from,
            due: j.due - from,
            ..j.clone()
        })
        .collect();
    Workload::new(jobs, format!("{} day {d}", wl.description))
}

/// Energy per job and mean tardiness of `r` on `wl`, and the mean run time on whole GPUs.
fn energy_and_tardiness(wl: &Workload, r: &RunResult) -> (f64, f64, f64) {
    let n = wl.jobs.len().max(1) as f64;
    let t = r
        .jobs
        .iter()
        .zip(&wl.jobs)
        .map(|(o, j)| (o.end_ms as f64 / 1000.0 - j.due).max(0.0))
        .sum::<f64>()
        / n;
    let work = wl.jobs.iter().map(|j| j.work).sum::<f64>() / n;
    (r.energy_j / n, t, work)
}

impl Day {
    fn new(wl: Workload, plan: &PolicySpec, cfg: &SimConfig) -> Result<Self> {
        let r = simulate(&wl, &PolicySpec::None, cfg, &|_| {})?;
        let (e, t, work) = energy_and_tardiness(&wl, &r);
        let (e_ref, t_ref) = (e.max(1e-9), t.max(work).max(1e-9));
        let r = simulate(&wl, plan, cfg, &|_| {})?;
        let (e, t, _) = energy_and_tardiness(&wl, &r);
        Ok(Self {
            e_ref,
            t_ref,
            plan_et: (e / e_ref + t / t_ref) / 2.0,
            wl,
        })
    }

    /// A run of `policy` on this day; `None` if the engine refused it.
    fn run(&self, policy: ExternalPolicy, cfg: &SimConfig) -> Option<Episode> {
        let mut r = simulate(&self.wl, &PolicySpec::External(policy), cfg, &|_| {}).ok()?;
        // A job the episode never ran ends a whole-GPU run time after the stop, and costs a
        // mean job's energy on whole GPUs: without this, leaving jobs unrun saved energy and
        // cost tardiness only until the stop, and the model learned to starve multi-GPU jobs.
        let mut unrun_j = 0.0;
        for (o, j) in r.jobs.iter_mut().zip(&self.wl.jobs) {
            if o.slices == 0 {
                o.end_ms += (j.work * 1000.0).round() as i64;
                unrun_j += self.e_ref;
            }
        }
        r.energy_j += unrun_j;
        let (e, t, _) = energy_and_tardiness(&self.wl, &r);
        Some(Episode {
            et: (e / self.e_ref + t / self.t_ref) / 2.0,
            e_ref: self.e_ref,
            t_ref: self.t_ref,
            n: self.wl.jobs.len().max(1) as f64,
            samples: r.samples.iter().map(|s| (s.t_s, s.power_w)).collect(),
            sample_s: cfg.sample_interval_s,
            ends: r
                .jobs
                .iter()
                .zip(&self.wl.jobs)
                .map(|(o, j)| (o.end_ms as f64 / 1000.0, j.due))
                .collect(),
        })
    }

    /// ET of a run of `policy` on this day ([`FAILED_ET`] if the engine refused it).
    fn et(&self, policy: ExternalPolicy, cfg: &SimConfig) -> f64 {
        self.run(policy, cfg).map_or(FAILED_ET, |e| e.et)
    }
}

/// One episode's outcome, enough to say how much ET came after any time.
struct Episode {
    et: f64,
    e_ref: f64,
    t_ref: f64,
    n: f64,
    /// `(time, cluster power)` samples, every `sample_s`.
    samples: Vec<(f64, f64)>,
    sample_s: f64,
    /// `(end, due)` per job.
    ends: Vec<(f64, f64)>,
}

impl Episode {
    /// The part of the episode's ET that came in `[t_s, t_s + CREDIT_S)`: energy used and
    /// tardiness accrued then, normalised as [`Episode::et`].
    fn et_after(&self, t_s: f64) -> f64 {
        let until = t_s + CREDIT_S;
        let e: f64 = self
            .samples
            .iter()
            .filter(|(t, _)| *t >= t_s && *t < until)
            .map(|(_, w)| w * self.sample_s)
            .sum::<f64>()
            / self.n;
        let t = self
            .ends
            .iter()
            .map(|(end, due)| (end.min(until) - due.max(t_s)).max(0.0))
            .sum::<f64>()
            / self.n;
        (e / self.e_ref + t / self.t_ref) / 2.0
    }
}

/// The planner until [`HANDOVER_S`] after the first call, then the model (`None`: keep every
/// layout from then on): the policy of a training episode.
struct HandOver {
    first: Planner,
    then: Option<LearnedPolicy>,
    clock: DayClock,
}

impl Policy for HandOver {
    fn name(&self) -> &'static str {
        "learned"
    }

    fn plan(&mut self, nodes: &[NodeSnapshot], demand: &Demand) -> Vec<Repartition> {
        self.plan_at(Duration::ZERO, nodes, demand)
    }

    fn plan_at(&mut self, time_of_day: Duration, nodes: &[NodeSnapshot], demand: &Demand) -> Vec<Repartition> {
        if self.clock.tick(time_of_day).as_secs_f64() < HANDOVER_S {
            if let Some(t) = &mut self.then {
                t.watch(time_of_day, nodes, demand);
            }
            return self.first.plan_at(time_of_day, nodes, demand);
        }
        match &mut self.then {
            Some(t) => t.plan_at(time_of_day, nodes, demand),
            None => Vec::new(),
        }
    }

    fn observes_jobs(&self) -> bool {
        self.then.as_ref().is_some_and(Policy::observes_jobs)
    }

    fn observe(&mut self, now_s: f64, events: &[JobEvent]) {
        if let Some(t) = &mut self.then {
            t.observe(now_s, events);
        }
    }
}

/// The policy of a training episode ([`HandOver`]): `model` greedy, sampling into `steps`, or
/// none (keep).
fn episode_policy(
    model: Option<&Model>,
    limits: &PolicyLimits,
    sample: Option<(u64, Arc<Mutex<Vec<Step>>>)>,
) -> ExternalPolicy {
    let (model, limits) = (model.cloned(), limits.clone());
    ExternalPolicy {
        name: "learned",
        gpu_model: model.as_ref().map(|m| m.catalogue.model.name),
        make: Arc::new(move |_: &SimConfig| {
            let then = model
                .as_ref()
                .map(|m| LearnedPolicy::new(m.clone(), limits.clone(), MAX_WAIT, mode(&sample)));
            Ok(Box::new(HandOver {
                first: Planner::new(PlannerSettings::new(limits.clone(), Objective::Speed)),
                then,
                clock: DayClock::default(),
            }) as _)
        }),
    }
}

/// One sampled episode to run: its drawn day's slot, the episode, its decisions.
type EpisodeRun<'a> = Box<dyn FnOnce() -> (usize, Option<Episode>, Vec<Step>) + Send + 'a>;

/// Runs `jobs` (closures) on `threads` threads; results in order.
fn parallel<T: Send>(threads: usize, jobs: Vec<Box<dyn FnOnce() -> T + Send + '_>>) -> Vec<T> {
    let n = jobs.len();
    let slots: Vec<Mutex<Option<T>>> = (0..n).map(|_| Mutex::new(None)).collect();
    let queue = Mutex::new(jobs.into_iter().enumerate().collect::<Vec<_>>());
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, n.max(1)) {
            s.spawn(|| loop {
                let next = queue.lock().expect("queue").pop();
                let Some((i, job)) = next else { break };
                let v = job();
                *slots[i].lock().expect("slot") = Some(v);
            });
        }
    });
    slots
        .into_iter()
        .map(|s| s.into_inner().expect("slot").expect("every job ran"))
        .collect()
}

/// Trains a model as `a` says (module docs).
///
/// # Errors
/// Bad arguments, an unreadable trace, or an output that cannot be written.
pub fn train(a: &TrainArgs) -> Result<Trained> {
    let (wl, mut cfg, _) = workload_and_config(&a.sim)?;
    // An episode is a day; its jobs may run into a second one, not further.
    cfg.stop_s = EPISODE_STOP_S;
    // Power samples at the decision interval, for the ET after each decision.
    cfg.sample_interval_s = DECISION_INTERVAL.as_secs_f64();
    let limits = eval_options(&a.sim)?.limits;
    let (from, to) = match a.train_days.as_deref() {
        None => (0.0, 14.0),
        Some([from, to]) => (*from, *to),
        Some(v) => bail!("--train-days {v:?}: allowed two days A,B, e.g. 0,14"),
    };
    if !(from >= 0.0 && to > from) {
        bail!("--train-days {from},{to}: allowed A,B with 0 <= A < B");
    }
    let plan = PolicySpec::Plan(PlannerSettings::new(limits.clone(), Objective::Speed));
    let days: Vec<Day> = (from.floor() as usize..(to.ceil() as usize).saturating_sub(EPISODE_DAYS - 1))
        .map(|d| day_workload(&wl, d))
        .filter(|w| !w.jobs.is_empty())
        .map(|w| Day::new(w, &plan, &cfg))
        .collect::<Result<_>>()?;
    if days.is_empty() {
        bail!("no jobs released in training days {from}-{to}");
    }
    if a.days_per_iteration == 0 || a.episodes_per_day < 2 {
        bail!("--days-per-iteration must be >= 1 and --episodes-per-day >= 2 (the baseline is the day's mean)");
    }
    // What the heuristics do on the same episodes, to read the curve against: `plan`
    // throughout, and the warm-up's layouts kept after it.
    let plan_et = days.iter().map(|d| d.plan_et).sum::<f64>() / days.len() as f64;
    let threads = dynmig_sim::search::default_threads();
    let keep_et = greedy_et(None, &limits, &days, &cfg, threads);
    eprintln!(
        "dynmig train: {} training days; ET on them (episode form): plan {plan_et:.4}, \
         the warm-up's layouts kept {keep_et:.4}",
        days.len()
    );
    let out = a.sim.out.clone().unwrap_or_else(|| PathBuf::from("learned"));
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let seed = a.sim.seed;
    let trained_on = format!(
        "{} days {from}-{to}, {} nodes x {} {}, seed {seed}",
        wl.description, cfg.nodes, cfg.gpus_per_node, cfg.model.name
    );
    // The weights start from the seed in the runtime's model (the rollouts run it); candle
    // holds a copy to differentiate and update, copied back after each update.
    let mut model = Model::fresh(Catalogue::for_model(cfg.model), a.hidden, trained_on.clone(), seed);
    let (varmap, net) = to_candle(&model)?;
    let mut opt = AdamW::new(
        varmap.all_vars(),
        ParamsAdamW {
            lr: a.lr,
            ..ParamsAdamW::default()
        },
    )?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let started = Instant::now();
    let budget = Duration::from_secs_f64(a.minutes.max(0.0) * 60.0);
    let bar = ProgressBar::new(a.iterations.unwrap_or(0) as u64);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} iteration {pos} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut curve = Vec::new();
    let mut best = f64::INFINITY;
    let model_path = out.join("model.safetensors");
    let mut iteration = 0;
    while a.iterations.is_none_or(|n| iteration < n) && started.elapsed() < budget {
        iteration += 1;
        let mut order: Vec<usize> = (0..days.len()).collect();
        order.shuffle(&mut rng);
        let picked: Vec<usize> = order.into_iter().cycle().take(a.days_per_iteration).collect();
        let mut runs: Vec<EpisodeRun<'_>> = Vec::new();
        for (slot, &d) in picked.iter().enumerate() {
            for e in 0..a.episodes_per_day {
                let ep_seed = seed
                    ^ ((iteration as u64) << 32)
                    ^ ((slot * a.episodes_per_day + e) as u64).wrapping_mul(0x9E37_79B9);
                let steps = Arc::new(Mutex::new(Vec::new()));
                let policy = episode_policy(Some(&model), &limits, Some((ep_seed, steps.clone())));
                let (day, cfg) = (&days[d], &cfg);
                runs.push(Box::new(move || {
                    let ep = day.run(policy, cfg);
                    let steps = std::mem::take(&mut *steps.lock().expect("steps"));
                    (slot, ep, steps)
                }));
            }
        }
        let results = parallel(threads, runs);
        // Advantage of a decision at time t: minus the ET its episode accrued after t, less
        // the mean of that over the episodes of the same drawn day (the other episodes are the
        // baseline: same jobs, same time), over the spread of all advantages. An episode the
        // engine refused counts FAILED_ET after every decision.
        let to_go = |ep: &Option<Episode>, t: f64| ep.as_ref().map_or(FAILED_ET, |e| e.et_after(t));
        let mut per_step: Vec<(f64, &Step)> = Vec::new();
        for (slot, ep, steps) in &results {
            for st in steps {
                let mine = -to_go(ep, st.t_s);
                let others: Vec<f64> = results
                    .iter()
                    .filter(|(s2, _, _)| s2 == slot)
                    .map(|(_, e2, _)| -to_go(e2, st.t_s))
                    .collect();
                let base = others.iter().sum::<f64>() / others.len() as f64;
                per_step.push((mine - base, st));
            }
        }
        let sd = (per_step.iter().map(|(a, _)| a * a).sum::<f64>() / per_step.len().max(1) as f64)
            .sqrt()
            .max(1e-6);
        let sampled_et = results
            .iter()
            .map(|(_, ep, _)| ep.as_ref().map_or(FAILED_ET, |e| e.et))
            .sum::<f64>()
            / results.len() as f64;
        let (mut xs, mut masks, mut actions, mut advs) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let width = model.meta.inputs;
        for (a_st, st) in &per_step {
            xs.extend_from_slice(&st.x);
            masks.extend_from_slice(&st.mask);
            actions.push(st.action);
            advs.push((a_st / sd) as f32);
        }
        let n = actions.len();
        if n > 0 && per_step.iter().any(|(x, _)| x.abs() > 1e-12) {
            let k = model.catalogue.layouts.len() + 1;
            let x = Tensor::from_vec(xs, (n, width), &Device::Cpu)?;
            let mask = Tensor::from_vec(masks, (n, k), &Device::Cpu)?;
            let act = Tensor::from_vec(actions, (n, 1), &Device::Cpu)?;
            let adv_t = Tensor::from_vec(advs, n, &Device::Cpu)?;
            let logits = net.forward(&x)?;
            // Disallowed actions get -1e9: no probability, and no NaN in the entropy.
            let masked = (logits + ((mask - 1.0)? * 1e9)?)?;
            let logp = candle_nn::ops::log_softmax(&masked, D::Minus1)?;
            let taken = logp.gather(&act, 1)?.squeeze(1)?;
            let pg = (taken * adv_t)?.mean_all()?.neg()?;
            let p = logp.exp()?;
            let ent = (p * &logp)?.sum(D::Minus1)?.mean_all()?.neg()?;
            let loss = (pg - (ent * a.entropy)?)?;
            opt.backward_step(&loss)?;
            copy_to_runtime(&varmap, &mut model.net)?;
        }
        let mut point = CurvePoint {
            iteration,
            seconds: started.elapsed().as_secs_f64(),
            sampled_et,
            greedy_et: None,
        };
        if iteration % 10 == 1 {
            let g = greedy_et(Some(&model), &limits, &days, &cfg, threads);
            point.greedy_et = Some(g);
            model.save(&out.join(format!("checkpoint-{iteration}.safetensors")))?;
            if g < best {
                best = g;
                model.save(&model_path)?;
            }
        }
        bar.set_position(iteration as u64);
        bar.set_message(format!(
            "sampled ET {sampled_et:.4}{}, best greedy {best:.4}",
            point.greedy_et.map(|g| format!(", greedy {g:.4}")).unwrap_or_default()
        ));
        curve.push(point);
    }
    bar.finish_and_clear();
    let g = greedy_et(Some(&model), &limits, &days, &cfg, threads);
    if let Some(last) = curve.last_mut() {
        last.greedy_et = Some(g);
    }
    if g < best || !model_path.exists() {
        best = g;
        model.save(&model_path)?;
    }
    write_curve(&curve, &out)?;
    Ok(Trained {
        model: model_path,
        curve,
        best_et: best,
        keep_et,
        plan_et,
    })
}

/// Mean ET over `days` of the greedy decisions of `model` after the warm-up (`None`: the
/// warm-up's layouts kept).
fn greedy_et(model: Option<&Model>, limits: &PolicyLimits, days: &[Day], cfg: &SimConfig, threads: usize) -> f64 {
    let runs: Vec<Box<dyn FnOnce() -> f64 + Send + '_>> = days
        .iter()
        .map(|d| {
            let p = episode_policy(model, limits, None);
            Box::new(move || d.et(p, cfg)) as Box<dyn FnOnce() -> f64 + Send + '_>
        })
        .collect();
    let ets = parallel(threads, runs);
    ets.iter().sum::<f64>() / ets.len().max(1) as f64
}

/// `curve.csv` and `curve.svg` in `dir`.
fn write_curve(curve: &[CurvePoint], dir: &Path) -> Result<()> {
    let mut csv = String::from("iteration,seconds,sampled_et,greedy_et\n");
    for p in curve {
        csv.push_str(&format!(
            "{},{:.1},{:.5},{}\n",
            p.iteration,
            p.seconds,
            p.sampled_et,
            p.greedy_et.map(|g| format!("{g:.5}")).unwrap_or_default()
        ));
    }
    std::fs::write(dir.join("curve.csv"), csv)
        .with_context(|| format!("writing {}", dir.join("curve.csv").display()))?;
    let path = dir.join("curve.svg");
    let err = |e: &dyn std::fmt::Display| anyhow!("drawing {}: {e}", path.display());
    let root = SVGBackend::new(&path, (720, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let n = curve.len().max(2) as f64;
    let ets = curve.iter().flat_map(|p| [Some(p.sampled_et), p.greedy_et]).flatten();
    let (lo, hi) = ets.fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), e| (l.min(e), h.max(e)));
    let (lo, hi) = if lo.is_finite() {
        (lo * 0.98, hi * 1.02 + 1e-9)
    } else {
        (0.0, 1.0)
    };
    let mut ch = ChartBuilder::on(&root)
        .caption(
            "dynmig train: ET over whole GPUs per iteration (lower is better)",
            ("sans-serif", 16),
        )
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(1f64..n, lo..hi)
        .map_err(|e| err(&e))?;
    ch.configure_mesh()
        .x_desc("iteration")
        .y_desc("ET")
        .draw()
        .map_err(|e| err(&e))?;
    ch.draw_series(LineSeries::new(
        curve.iter().map(|p| (p.iteration as f64, p.sampled_et)),
        BLUE.mix(0.5),
    ))
    .map_err(|e| err(&e))?
    .label("sampled episodes")
    .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BLUE));
    ch.draw_series(LineSeries::new(
        curve
            .iter()
            .filter_map(|p| p.greedy_et.map(|g| (p.iteration as f64, g))),
        RED.stroke_width(2),
    ))
    .map_err(|e| err(&e))?
    .label("greedy, all training days")
    .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], RED));
    ch.configure_series_labels()
        .background_style(WHITE)
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
