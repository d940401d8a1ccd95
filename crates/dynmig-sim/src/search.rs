//! The search of the best `static` layout and the best `twice-daily` pair on one workload:
//! candidates are simulated and ranked by ET with the fixed references of the searched
//! workload ([`Norm`]: the same function and references the judgement uses). Besides the
//! uniform layouts and the demand mix, [`Searcher::local`] searches layouts that mix node
//! types (k nodes of one layout, n - k of another, ...) from the best uniform one.
//! A candidate that cannot run some job is skipped with a warning naming the job, never a
//! fatal error ([`unrunnable`]; a failed run is skipped the same way).
//!
//! `dynmig_lab::evaluate` searches twice: on the jobs of the search window only (the fair
//! baselines) and on the whole workload, judged on the evaluation window (the oracles).

use crate::bounds::{bounds, Bounds};
use crate::cluster::Cluster;
use crate::engine::{simulate, SimConfig};
use crate::metrics::{metrics, Norm};
use crate::model::Job;
use crate::policies::mix::{mix_for_demand, uniform};
use crate::policies::PolicySpec;
use crate::workload::Workload;
use anyhow::Result;
use dynmig_core::geometry::{distinct_multisets, GpuModel, NodeLayout, ProfileCounts};
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

/// Threads an evaluation uses by default: the machine's cores.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Runs `f` on every item on up to `threads` threads, each taking the next item not yet
/// taken; the results come in item order, so they do not depend on the threads. `f` gets the
/// progress to report to: `progress` itself with one thread; otherwise a relay to `progress`,
/// which is called on this thread (every 64th completion of a run is relayed). The lab's
/// evaluation runs its rows with it too.
pub fn par_map<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    progress: &dyn Fn(&str, u64),
    f: impl Fn(&T, &dyn Fn(&str, u64)) -> R + Sync,
) -> Vec<R> {
    let threads = threads.min(items.len());
    if threads <= 1 {
        return items.iter().map(|x| f(x, progress)).collect();
    }
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel::<(String, u64)>();
    let mut done: Vec<(usize, R)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let tx = tx.clone();
                let (next, f) = (&next, &f);
                s.spawn(move || {
                    let relay = |label: &str, d: u64| {
                        if d.is_multiple_of(64) {
                            // The receiver lives until every worker ended.
                            let _ = tx.send((label.to_string(), d));
                        }
                    };
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(x) = items.get(i) else { break };
                        out.push((i, f(x, &relay)));
                    }
                    out
                })
            })
            .collect();
        drop(tx);
        for (label, d) in rx {
            progress(&label, d);
        }
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}

/// A candidate that ran: its ET on the searched workload, its name and its policy.
#[derive(Debug, Clone)]
pub struct Ranked {
    /// ET on the searched workload ([`Norm::et`] with the workload's references).
    pub et: f64,
    /// What it is, e.g. `2 whole nodes, rest 2x3g.20gb`.
    pub name: String,
    /// The policy to run it.
    pub spec: PolicySpec,
}

/// The layouts a policy may put in force (the static layout, each period's layouts); empty
/// for policies that choose layouts as they go.
pub fn spec_layouts(spec: &PolicySpec) -> Vec<&[NodeLayout]> {
    match spec {
        PolicySpec::Static(l) => vec![l.as_slice()],
        PolicySpec::Scheduled(p) => p.iter().map(|x| x.1.as_slice()).collect(),
        _ => Vec::new(),
    }
}

/// The first job of `wl` that none of `periods` (each a cluster layout) can ever run, if any:
/// a single-GPU job needs some instance whose profile memory holds its `mem_mib` (the
/// simulator lets a job use any free instance at least as large as its smallest fitting
/// profile); a job of `g` GPUs needs a node with at least `g` full-GPU instances.
pub fn unrunnable<'w>(periods: &[&[NodeLayout]], model: &GpuModel, wl: &'w Workload) -> Option<&'w Job> {
    let mut max_mem = 0u64;
    let mut max_full = 0u32;
    for layouts in periods {
        for node in layouts.iter() {
            let mut full = 0u32;
            for g in &node.gpus {
                for (name, n) in g.iter() {
                    let Some(p) = model.profile(name) else { continue };
                    if n == 0 {
                        continue;
                    }
                    max_mem = max_mem.max(p.memory_mib);
                    if p.compute_slices == model.compute_slices {
                        full += n;
                    }
                }
            }
            max_full = max_full.max(full);
        }
    }
    wl.jobs.iter().find(|j| {
        if j.gpus > 1 {
            j.gpus > max_full
        } else {
            j.mem_mib > max_mem
        }
    })
}

/// A job for a warning: id, GPUs, memory and release day.
pub fn describe_job(j: &Job) -> String {
    format!(
        "job {} ({} GPU{}, {} MiB per GPU, released on day {:.2})",
        j.id,
        j.gpus,
        if j.gpus == 1 { "" } else { "s" },
        j.mem_mib,
        j.release / 86400.0
    )
}

/// Why `j` cannot run under layouts that do not hold it.
fn why(j: &Job) -> String {
    if j.gpus > 1 {
        format!("no node has {} full-GPU instances", j.gpus)
    } else {
        format!("no instance has {} MiB", j.mem_mib)
    }
}

/// Mean concurrency per profile of single-GPU jobs (at their smallest fitting profile) and of
/// multi-GPU GPUs, over jobs released in `[from, to)` seconds of the day (all if `None`),
/// per second of the span the workload's releases cover.
pub fn demand_mix(wl: &Workload, c: &Cluster, window: Option<(f64, f64)>) -> (Vec<f64>, f64) {
    let mut d = vec![0.0; c.profiles.len()];
    let mut multi = 0.0;
    let first = wl.jobs.first().map_or(0.0, |j| j.release);
    let horizon = wl.jobs.last().map_or(1.0, |j| (j.release - first).max(1.0));
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

/// A cluster layout in short, e.g. `112x[2x3g.20gb] 16x[1x7g.40gb]`.
pub fn describe(layouts: &[NodeLayout]) -> String {
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

/// Node types besides the whole node the local search mixes: the node layouts of this many
/// best uniform candidates.
pub const LOCAL_NODE_TYPES: usize = 3;

/// Runs of the local search ([`Searcher::local`]) at most, by default.
pub const LOCAL_SEARCH_RUNS: usize = 48;

/// Runs and ranks candidates on one workload.
pub struct Searcher<'a> {
    wl: &'a Workload,
    cfg: SimConfig,
    tag: String,
    b: Bounds,
    norm: Norm,
    probe: Cluster,
    cands: Vec<ProfileCounts>,
    warn: bool,
    /// Threads the candidates run on ([`default_threads`] unless set); the ranking does not
    /// depend on it.
    pub threads: usize,
    /// Every candidate that ran: (name, ET).
    pub tried: Vec<(String, f64)>,
    /// Warnings about the candidates skipped.
    pub skipped: Vec<String>,
}

impl<'a> Searcher<'a> {
    /// A searcher on `wl`, judging on jobs released from `cfg.window_start_s` on (samples
    /// off) with ET of the fixed references [`Norm::of`] `wl`; `tag` (e.g. `fair`, `oracle`)
    /// prefixes its progress labels and warnings; `warn`: print warnings to stderr as well.
    /// No run is made here (`_progress` is kept for callers that passed one: ET no longer needs
    /// a `none` run).
    ///
    /// # Errors
    /// The model has no profile table for a cluster (never for the built-in models).
    pub fn new(
        wl: &'a Workload,
        cfg: &SimConfig,
        tag: &str,
        warn: bool,
        _progress: &dyn Fn(&str, u64),
    ) -> Result<Self> {
        let mut cfg = cfg.clone();
        cfg.sample_interval_s = 0.0;
        let gpus = cfg.nodes * cfg.gpus_per_node;
        let b = bounds(wl, cfg.model, gpus, &cfg.power);
        let norm = Norm::of(wl, &b, cfg.window_start_s);
        let probe = Cluster::new(cfg.model, cfg.gpus_per_node, &[], cfg.power.clone())?;
        Ok(Self {
            wl,
            cands: distinct_multisets(cfg.model),
            cfg,
            tag: tag.to_string(),
            b,
            norm,
            probe,
            warn,
            threads: default_threads(),
            tried: Vec::new(),
            skipped: Vec::new(),
        })
    }

    /// Notes a skipped candidate (and prints it when asked to).
    fn skip(&mut self, msg: String) {
        if self.warn {
            eprintln!("warning: {msg}");
        }
        self.skipped.push(msg);
    }

    /// ET of `spec` (named `name`, a candidate of `kind`) on the searched workload, or the
    /// warning if it cannot run some job or its run failed.
    pub fn try_score(
        &self,
        kind: &str,
        name: &str,
        spec: &PolicySpec,
        progress: &dyn Fn(&str, u64),
    ) -> Result<f64, String> {
        // A policy that chooses layouts as it goes has none to check beforehand.
        let layouts = spec_layouts(spec);
        if let Some(j) = (!layouts.is_empty())
            .then(|| unrunnable(&layouts, self.cfg.model, self.wl))
            .flatten()
        {
            return Err(format!(
                "{} {kind} candidate '{name}' skipped: it cannot run {} ({})",
                self.tag,
                describe_job(j),
                why(j)
            ));
        }
        let label = format!("{}/{} {kind} {name}", self.cfg.placement, self.tag);
        match simulate(self.wl, spec, &self.cfg, &|d| progress(&label, d)) {
            Err(e) => Err(format!(
                "{} {kind} candidate '{name}' skipped: its run failed: {e:#}",
                self.tag
            )),
            Ok(r) => {
                let m = metrics(self.wl, &r, &self.b, name, 0.0, &self.cfg);
                Ok(self.norm.et(m.energy_per_job_j, m.mean_tardiness_s))
            }
        }
    }

    /// Scores `candidates` (name, policy) of `kind` on [`Searcher::threads`] threads and
    /// notes each in candidate order; returns those that ran, best first.
    fn rank(&mut self, kind: &str, candidates: Vec<(String, PolicySpec)>, progress: &dyn Fn(&str, u64)) -> Vec<Ranked> {
        let this = &*self;
        let scores = par_map(&candidates, self.threads, progress, |(name, spec), p| {
            this.try_score(kind, name, spec, p)
        });
        let mut out = Vec::new();
        for ((name, spec), score) in candidates.into_iter().zip(scores) {
            match score {
                Ok(et) => {
                    self.tried.push((format!("{kind} {name}"), et));
                    out.push(Ranked { et, name, spec });
                }
                Err(msg) => self.skip(msg),
            }
        }
        out.sort_by(|a, b| a.et.total_cmp(&b.et));
        out
    }

    /// The references this searcher ranks with.
    pub fn norm(&self) -> Norm {
        self.norm
    }

    /// The candidates of `static` (name, cluster layout): each of the model's distinct GPU
    /// layouts on every GPU but `whole` whole nodes (enough full GPUs for the multi-GPU
    /// demand), and the layout that follows the demand mix.
    pub fn static_candidates(&self) -> Vec<(String, Vec<NodeLayout>)> {
        let (nodes, gpn, model) = (self.cfg.nodes, self.cfg.gpus_per_node, self.cfg.model);
        let (d, multi) = demand_mix(self.wl, &self.probe, None);
        let whole = if multi > 0.0 {
            ((multi / gpn as f64).ceil() as usize).clamp(1, nodes)
        } else {
            0
        };
        let mut specs: Vec<(String, Vec<NodeLayout>)> = self
            .cands
            .iter()
            .map(|l| {
                (
                    format!("{whole} whole nodes, rest {l}"),
                    uniform(model, nodes, gpn, l, whole),
                )
            })
            .collect();
        let mix = mix_for_demand(model, &self.probe.profiles, nodes, gpn, &d, multi, &self.cands);
        specs.push((format!("demand mix: {}", describe(&mix)), mix));
        specs
    }

    /// Ranks `candidates` (name, cluster layout) as `static` layouts, best first; also returns
    /// how many were tried.
    pub fn rank_statics(
        &mut self,
        candidates: Vec<(String, Vec<NodeLayout>)>,
        progress: &dyn Fn(&str, u64),
    ) -> (Vec<Ranked>, usize) {
        let n = candidates.len();
        let specs = candidates
            .into_iter()
            .map(|(name, l)| (name, PolicySpec::Static(l)))
            .collect();
        (self.rank("static", specs, progress), n)
    }

    /// Candidates of `static`, best first ([`Searcher::static_candidates`]). Also returns
    /// how many were tried.
    pub fn statics(&mut self, progress: &dyn Fn(&str, u64)) -> (Vec<Ranked>, usize) {
        let c = self.static_candidates();
        self.rank_statics(c, progress)
    }

    /// A local search over layouts that mix node types, from the best uniform candidate of
    /// `ranked` (a layout whose nodes are all alike but for whole nodes): the node types are
    /// a whole node (every GPU one full instance) and the node layouts of the
    /// [`LOCAL_NODE_TYPES`] best uniform candidates; a step tries every change of one node
    /// from one type to another (each state once) and moves to the best neighbour if it
    /// lowers ET; it stops when none does or after `budget` runs. Returns the best layout
    /// found if it is better than the start (named `local search: <layout>`), and the runs it
    /// took. Nodes are ordered by type (whole nodes first, as [`uniform`] does).
    pub fn local(&mut self, ranked: &[Ranked], budget: usize, progress: &dyn Fn(&str, u64)) -> (Option<Ranked>, usize) {
        let nodes = self.cfg.nodes;
        let full = ProfileCounts::parse(self.cfg.model, &format!("1x{}", self.cfg.model.full_profile().name))
            .expect("the full profile parses");
        let whole = NodeLayout {
            gpus: vec![full; self.cfg.gpus_per_node],
        };
        // Uniform candidates: at most two node types, one of them whole nodes.
        let uniform_of = |r: &Ranked| -> Option<NodeLayout> {
            let PolicySpec::Static(l) = &r.spec else { return None };
            let mut other: Option<&NodeLayout> = None;
            for n in l {
                if *n == whole {
                    continue;
                }
                match other {
                    Some(o) if o != n => return None,
                    _ => other = Some(n),
                }
            }
            Some(other.cloned().unwrap_or_else(|| whole.clone()))
        };
        let Some(start) = ranked.iter().find(|r| uniform_of(r).is_some()) else {
            return (None, 0);
        };
        let mut types = vec![whole.clone()];
        for r in ranked {
            if types.len() > LOCAL_NODE_TYPES {
                break;
            }
            if let Some(t) = uniform_of(r) {
                if !types.contains(&t) {
                    types.push(t);
                }
            }
        }
        let PolicySpec::Static(start_layout) = &start.spec else {
            return (None, 0);
        };
        let mut counts = vec![0usize; types.len()];
        for n in start_layout {
            counts[types
                .iter()
                .position(|t| t == n)
                .expect("a uniform candidate's node types are listed")] += 1;
        }
        let layout_of = |c: &[usize]| -> Vec<NodeLayout> {
            c.iter()
                .zip(&types)
                .flat_map(|(k, t)| std::iter::repeat_n(t.clone(), *k))
                .collect()
        };
        let mut seen: HashSet<Vec<usize>> = HashSet::from([counts.clone()]);
        let (mut best_et, mut best) = (start.et, None);
        let mut runs = 0;
        while runs < budget {
            let mut next: Vec<Vec<usize>> = Vec::new();
            for from in 0..types.len() {
                for to in 0..types.len() {
                    if from == to || counts[from] == 0 {
                        continue;
                    }
                    let mut c = counts.clone();
                    c[from] -= 1;
                    c[to] += 1;
                    if seen.insert(c.clone()) {
                        next.push(c);
                    }
                }
            }
            next.truncate(budget - runs);
            if next.is_empty() {
                break;
            }
            runs += next.len();
            let cands: Vec<(String, PolicySpec)> = next
                .iter()
                .map(|c| {
                    let l = layout_of(c);
                    (format!("local search: {}", describe(&l)), PolicySpec::Static(l))
                })
                .collect();
            let step = self.rank("static", cands, progress);
            let Some(top) = step.into_iter().next() else { break };
            if top.et >= best_et {
                break;
            }
            best_et = top.et;
            let PolicySpec::Static(l) = &top.spec else { break };
            counts = vec![0; types.len()];
            for n in l {
                counts[types
                    .iter()
                    .position(|t| t == n)
                    .expect("a local layout's node types are listed")] += 1;
            }
            best = Some(top);
        }
        debug_assert!(nodes == counts.iter().sum::<usize>());
        (best, runs)
    }

    /// Candidates of `twice-daily`, best first: every ordered pair (day, night) among the
    /// `top` best of `statics`, the pair of the day's and the night's demand mixes, and
    /// `extra` (another search's pairs, e.g. the fair search's for the oracle's; those of the
    /// same name as one of these are left out); day starts at `day_night.0` and night at
    /// `day_night.1` (s after midnight). Also returns how many were tried.
    pub fn pairs(
        &mut self,
        statics: &[Ranked],
        top: usize,
        day_night: (f64, f64),
        extra: &[(String, PolicySpec)],
        progress: &dyn Fn(&str, u64),
    ) -> (Vec<Ranked>, usize) {
        let (nodes, gpn, model) = (self.cfg.nodes, self.cfg.gpus_per_node, self.cfg.model);
        let (day, night) = day_night;
        let layouts = |s: &Ranked| match &s.spec {
            PolicySpec::Static(l) => l.clone(),
            _ => Vec::new(),
        };
        let mut pairs: Vec<(String, Vec<NodeLayout>, Vec<NodeLayout>)> = Vec::new();
        let top = &statics[..top.min(statics.len())];
        for a in top {
            for b in top {
                if a.name != b.name {
                    pairs.push((format!("day {} / night {}", a.name, b.name), layouts(a), layouts(b)));
                }
            }
        }
        let (dd, dm) = demand_mix(self.wl, &self.probe, Some((day, night)));
        let (nd, nm) = demand_mix(self.wl, &self.probe, Some((night, day)));
        let dmix = mix_for_demand(model, &self.probe.profiles, nodes, gpn, &dd, dm, &self.cands);
        let nmix = mix_for_demand(model, &self.probe.profiles, nodes, gpn, &nd, nm, &self.cands);
        pairs.push((
            format!("day demand mix: {} / night {}", describe(&dmix), describe(&nmix)),
            dmix,
            nmix,
        ));
        let mut specs: Vec<(String, PolicySpec)> = pairs
            .into_iter()
            .map(|(name, d, nl)| {
                let mut v = vec![(Duration::from_secs_f64(day), d), (Duration::from_secs_f64(night), nl)];
                v.sort_by_key(|x| x.0);
                (name, PolicySpec::Scheduled(v))
            })
            .collect();
        for (name, spec) in extra {
            if !specs.iter().any(|(n, _)| n == name) {
                specs.push((name.clone(), spec.clone()));
            }
        }
        let n = specs.len();
        (self.rank("twice-daily", specs, progress), n)
    }
}
