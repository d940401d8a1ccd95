//! The per-allocation ceiling (issue 26, item 5): what a Slurm design that creates each job's
//! MIG instance when the job starts and destroys it when the job ends could reach. No layout,
//! no drain, no repartition: every job gets exactly the profile it asks for on any GPU where
//! the real placement rules leave room for it (`dynmig_core::geometry`: legal start slices, no
//! overlap, at most the GPU's compute slices), and pays the NVML create and destroy time. The
//! fragmentation the placement rules cause is modelled: an instance stays where it was created
//! until its job ends, so a free 4g may be missing although four compute slices are free.
//!
//! Scheduling is the engine's Slurm rule: priority = release order; per class (profile, or
//! N whole GPUs) only the head can start (FIFO within a class); the oldest head that cannot
//! start holds an EASY reservation planned with the running jobs' **time limits** (the GPU,
//! or the node's GPUs, where it can start soonest), and a later job may use those GPUs only
//! if its time limit ends before the reservation. Each job goes to the GPU where it fits
//! tightest (fewest compute slices left free), then the lowest GPU: packing keeps large holes
//! for large profiles.
//!
//! What Slurm would need for this (docs/model.md, "Ceilings"): a count-only GRES per GPU (e.g.
//! `gres/shard` or slices) for the scheduler and a Prolog that creates the GI/CI at a legal
//! placement; Slurm itself cannot see the placement rules, so this is a ceiling (it never
//! picks a GPU whose free slices are too fragmented), not what a Slurm site gets.

use anyhow::{bail, Result};
use dynmig_core::geometry::{classic_profiles, place_around, Placed, ProfileCounts, ProfileSpec};
use dynmig_core::hints::smallest_fitting_in;
use dynmig_core::size::MIB;
use dynmig_sim::engine::{JobOutcome, RunResult, SimConfig};
use dynmig_sim::model::Job;
use dynmig_sim::placement::Placement;
use dynmig_sim::workload::Workload;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

/// NVML's cost of one instance, s.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InstanceCosts {
    /// GPU instance plus compute instance create, s.
    pub create_s: f64,
    /// Compute instance plus GPU instance destroy, s.
    pub destroy_s: f64,
}

impl Default for InstanceCosts {
    /// 0.16 s to create and 0.11 s to destroy: the FAR tool's execution report
    /// (artecs-group/RL_MIG_scheduler, `GPU_MIG_scheduler/README.md`, A30 through NVML, GI
    /// plus CI, the slower of its two profiles). No H100 figure is published.
    fn default() -> Self {
        Self {
            create_s: 0.16,
            destroy_s: 0.11,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// A job's run ends (its instance starts being destroyed).
    Done(u32),
    /// A job's instance is gone: its slices are free.
    Freed(u32),
    /// A job is submitted.
    Release(u32),
    /// A job's instance is created: the job runs from now.
    Created(u32),
}

/// One instance on a GPU: where, whose, until when (ms) it is expected to hold its slices by
/// its job's time limit, and whether its job runs now (for power).
#[derive(Debug, Clone, Copy)]
struct Held {
    placed: Placed,
    job: u32,
    limit_end_ms: i64,
    running: bool,
}

struct State<'a> {
    cfg: &'a SimConfig,
    jobs: &'a [Job],
    profiles: Vec<&'static ProfileSpec>,
    /// Per job: the index of its profile in `profiles` (whole-GPU profile for multi-GPU jobs).
    asks: Vec<usize>,
    /// Per GPU: its instances.
    gpus: Vec<Vec<Held>>,
    /// Per job: the GPUs it holds.
    on: Vec<Vec<u32>>,
    queues: BTreeMap<(u32, usize), VecDeque<u32>>,
    out: Vec<JobOutcome>,
    now: i64,
    power_w: Vec<f64>,
    total_w: f64,
    running_on: Vec<u32>,
    energy_j: f64,
    window_energy_j: f64,
    idle_gpu_s: f64,
    busy_slice_s: f64,
    instance_changes: u64,
    events: u64,
    create_ms: i64,
    destroy_ms: i64,
}

/// Runs `wl` on `cfg`'s cluster with one instance per job, created at its start and destroyed
/// at its end ([`InstanceCosts`]). Uses `cfg`'s model, nodes, GPUs per node, power model,
/// longest time limit and evaluation window; ignores its layouts, drains and placement.
///
/// # Errors
/// A job asks for more GPUs than a node has.
pub fn simulate_per_allocation(wl: &Workload, cfg: &SimConfig, costs: InstanceCosts) -> Result<RunResult> {
    let profiles = classic_profiles(cfg.model);
    let full = profiles
        .iter()
        .position(|p| p.compute_slices == cfg.model.compute_slices)
        .expect("every model has a whole-GPU profile");
    let mut asks = Vec::with_capacity(wl.jobs.len());
    for j in &wl.jobs {
        if j.gpus as usize > cfg.gpus_per_node {
            bail!(
                "job {} asks for {} GPUs; a node has {}",
                j.id,
                j.gpus,
                cfg.gpus_per_node
            );
        }
        // The smallest profile that holds the job (what job_submit/dynmig asks for).
        let p = if j.gpus > 1 {
            full
        } else {
            smallest_fitting_in(profiles.iter().copied().enumerate(), j.mem_mib.saturating_mul(MIB))
                .map_or(full, |(p, _)| p)
        };
        asks.push(p);
    }
    let n_gpus = cfg.nodes * cfg.gpus_per_node;
    let idle = cfg.power.board_w(&[]);
    let (create_ms, destroy_ms) = (
        (costs.create_s * 1000.0).round() as i64,
        (costs.destroy_s * 1000.0).round() as i64,
    );
    let mut s = State {
        cfg,
        jobs: &wl.jobs,
        profiles,
        asks,
        gpus: vec![Vec::new(); n_gpus],
        on: vec![Vec::new(); wl.jobs.len()],
        queues: BTreeMap::new(),
        out: vec![
            JobOutcome {
                start_ms: 0,
                end_ms: 0,
                slices: 0,
                restarts: 0,
                profile: 0,
            };
            wl.jobs.len()
        ],
        now: 0,
        power_w: vec![idle; n_gpus],
        total_w: idle * n_gpus as f64,
        running_on: vec![0; n_gpus],
        energy_j: 0.0,
        window_energy_j: 0.0,
        idle_gpu_s: 0.0,
        busy_slice_s: 0.0,
        instance_changes: 0,
        events: 0,
        create_ms,
        destroy_ms,
    };
    let mut heap: BinaryHeap<Reverse<(i64, Ev)>> = wl
        .jobs
        .iter()
        .map(|j| Reverse(((j.release * 1000.0).round() as i64, Ev::Release(j.id))))
        .collect();
    let mut makespan = 0i64;
    while let Some(Reverse((t, _))) = heap.peek().copied() {
        s.advance(t);
        while let Some(Reverse((t2, ev))) = heap.peek().copied() {
            if t2 != t {
                break;
            }
            heap.pop();
            s.events += 1;
            match ev {
                Ev::Release(j) => {
                    let key = (s.jobs[j as usize].gpus, s.asks[j as usize]);
                    s.queues.entry(key).or_default().push_back(j);
                }
                Ev::Done(j) => {
                    makespan = makespan.max(t);
                    s.stop_running(j);
                    heap.push(Reverse((t + s.destroy_ms, Ev::Freed(j))));
                }
                Ev::Freed(j) => s.free(j),
                Ev::Created(j) => s.start_running(j),
            }
        }
        for j in s.schedule() {
            let job = &s.jobs[j as usize];
            let slices = s.profiles[s.asks[j as usize]].compute_slices;
            let run = job.time_on(slices, cfg.model.compute_slices);
            let run_ms = ((run * 1000.0).ceil() as i64).max(1);
            let end = t + s.create_ms + run_ms.min(s.limit_ms(j));
            s.out[j as usize] = JobOutcome {
                start_ms: t,
                end_ms: end,
                slices,
                restarts: 0,
                profile: s.asks[j as usize] as u8,
            };
            s.busy_slice_s += f64::from(slices) * f64::from(job.gpus) * (end - t - s.create_ms) as f64 / 1000.0;
            // The instance exists from now; its job runs once it is created.
            heap.push(Reverse((t + s.create_ms, Ev::Created(j))));
            heap.push(Reverse((end, Ev::Done(j))));
        }
    }
    if s.queues.values().any(|q| !q.is_empty()) {
        bail!("per-allocation run ended with jobs that never started (a job no GPU can hold)");
    }
    let capacity = (n_gpus as u32) * u32::from(cfg.model.compute_slices);
    let makespan_s = makespan as f64 / 1000.0;
    Ok(RunResult {
        policy: "per-allocation".to_string(),
        placement: Placement::Slurm,
        jobs: s.out,
        energy_j: s.energy_j,
        makespan_s,
        busy_slice_s: s.busy_slice_s,
        capacity_slices: capacity,
        reconfigs: 0,
        window_reconfigs: 0,
        never_started: Vec::new(),
        instance_changes: s.instance_changes,
        events: s.events,
        samples: Vec::new(),
        profiles: s.profiles.iter().map(|p| p.name.to_string()).collect(),
        oom_restarts: 0,
        restarted_jobs: 0,
        wasted_gpu_s: 0.0,
        oversize_gpu_s: 0.0,
        wasted_j: 0.0,
        window_energy_j: s.window_energy_j,
        drain_waste_gpu_s: 0.0,
        idle_gpu_s: s.idle_gpu_s,
        idle_w: idle,
        layout_time: Vec::new(),
    })
}

impl State<'_> {
    /// The job's time limit, ms: its run on the profile it asks for times its factor, at most
    /// the partition's longest limit unless the run is longer (the engine's rule).
    fn limit_ms(&self, j: u32) -> i64 {
        let job = &self.jobs[j as usize];
        let run = job.time_on(
            self.profiles[self.asks[j as usize]].compute_slices,
            self.cfg.model.compute_slices,
        );
        let limit = (run * job.limit_factor).min(self.cfg.max_time_limit_s.max(run));
        ((limit * 1000.0).ceil() as i64).max(1)
    }

    /// Integrates energy and idle GPU time up to `t`.
    fn advance(&mut self, t: i64) {
        if t <= self.now {
            return;
        }
        let w0 = (self.cfg.window_start_s * 1000.0) as i64;
        let dt = (t - self.now) as f64 / 1000.0;
        self.energy_j += self.total_w * dt;
        let in_window = (t - self.now.max(w0)).max(0) as f64 / 1000.0;
        self.window_energy_j += self.total_w * in_window.min(dt);
        let idle_gpus = self.running_on.iter().filter(|&&n| n == 0).count() as f64;
        self.idle_gpu_s += idle_gpus * in_window.min(dt);
        self.now = t;
    }

    fn repower(&mut self, g: usize) {
        let busy: Vec<u8> = self.gpus[g]
            .iter()
            .filter(|h| h.running)
            .map(|h| h.placed.profile.compute_slices)
            .collect();
        let w = self.cfg.power.board_w(&busy);
        self.total_w += w - self.power_w[g];
        self.power_w[g] = w;
    }

    fn set_running(&mut self, j: u32, running: bool) {
        for g in self.on[j as usize].clone() {
            let g = g as usize;
            for h in self.gpus[g].iter_mut().filter(|h| h.job == j) {
                h.running = running;
            }
            if running {
                self.running_on[g] += 1;
            } else {
                self.running_on[g] -= 1;
            }
            self.repower(g);
        }
    }

    fn start_running(&mut self, j: u32) {
        self.set_running(j, true);
    }

    fn stop_running(&mut self, j: u32) {
        self.set_running(j, false);
    }

    fn free(&mut self, j: u32) {
        for g in std::mem::take(&mut self.on[j as usize]) {
            self.gpus[g as usize].retain(|h| h.job != j);
            self.instance_changes += 1;
        }
    }

    fn place(&mut self, j: u32, gpus: &[(u32, Placed)], hold_until_ms: i64) {
        for &(g, placed) in gpus {
            self.gpus[g as usize].push(Held {
                placed,
                job: j,
                limit_end_ms: hold_until_ms,
                running: false,
            });
            self.on[j as usize].push(g);
            self.instance_changes += 1;
        }
    }

    /// Where one instance of `one` (a single profile's counts) fits on a GPU holding `held`
    /// (the lowest legal start, [`place_around`]), or `None`.
    fn fit(&self, held: &[Placed], one: &ProfileCounts) -> Option<Placed> {
        place_around(self.cfg.model, held, one)?.pop()
    }

    fn placed_on(&self, g: usize) -> Vec<Placed> {
        self.gpus[g].iter().map(|h| h.placed).collect()
    }

    /// The GPUs (with the new instances) where job `j` can start now, respecting `resv`.
    fn find(&self, j: u32, resv: Option<&(Vec<u32>, i64)>) -> Option<Vec<(u32, Placed)>> {
        let job = &self.jobs[j as usize];
        let p = self.profiles[self.asks[j as usize]];
        let fits_before =
            |g: u32| resv.is_none_or(|(gs, shadow)| !gs.contains(&g) || self.now + self.limit_ms(j) <= *shadow);
        if job.gpus > 1 {
            let n = job.gpus as usize;
            for node in 0..self.cfg.nodes {
                let lo = node * self.cfg.gpus_per_node;
                let empty: Vec<(u32, Placed)> = (lo..lo + self.cfg.gpus_per_node)
                    .filter(|&g| self.gpus[g].is_empty() && fits_before(g as u32))
                    .map(|g| (g as u32, Placed { profile: p, start: 0 }))
                    .take(n)
                    .collect();
                if empty.len() == n {
                    return Some(empty);
                }
            }
            return None;
        }
        let mut one = ProfileCounts::default();
        one.add(p, 1);
        let mut best: Option<(u8, u32, Placed)> = None;
        for g in 0..self.gpus.len() {
            if !fits_before(g as u32) {
                continue;
            }
            let held = self.placed_on(g);
            if let Some(placed) = self.fit(&held, &one) {
                let used: u8 = held.iter().map(|h| h.profile.compute_slices).sum::<u8>() + p.compute_slices;
                let left = self.cfg.model.compute_slices - used;
                if best.is_none_or(|(l, _, _)| left < l) {
                    best = Some((left, g as u32, placed));
                    if left == 0 {
                        break;
                    }
                }
            }
        }
        best.map(|(_, g, placed)| vec![(g, placed)])
    }

    /// The EASY reservation of `j`, blocked: the GPUs where it can start soonest by the
    /// running jobs' time limits, and when.
    fn reservation(&self, j: u32) -> Option<(Vec<u32>, i64)> {
        let job = &self.jobs[j as usize];
        let p = self.profiles[self.asks[j as usize]];
        if job.gpus > 1 {
            let n = job.gpus as usize;
            let mut best: Option<(i64, Vec<u32>)> = None;
            for node in 0..self.cfg.nodes {
                let lo = node * self.cfg.gpus_per_node;
                let mut free_at: Vec<(i64, u32)> = (lo..lo + self.cfg.gpus_per_node)
                    .map(|g| {
                        let t = self.gpus[g].iter().map(|h| h.limit_end_ms).max().unwrap_or(self.now);
                        (t, g as u32)
                    })
                    .collect();
                free_at.sort_unstable();
                let t = free_at[n - 1].0;
                if best.as_ref().is_none_or(|(b, _)| t < *b) {
                    best = Some((t, free_at[..n].iter().map(|x| x.1).collect()));
                }
            }
            return best.map(|(t, g)| (g, t));
        }
        let mut one = ProfileCounts::default();
        one.add(p, 1);
        let mut best: Option<(i64, u32)> = None;
        for g in 0..self.gpus.len() {
            let mut held: Vec<Held> = self.gpus[g].clone();
            held.sort_by_key(|h| h.limit_end_ms);
            let mut t = self.now;
            loop {
                let placed: Vec<Placed> = held.iter().map(|h| h.placed).collect();
                if self.fit(&placed, &one).is_some() {
                    break;
                }
                let h = held.remove(0);
                t = t.max(h.limit_end_ms);
            }
            if best.is_none_or(|(b, _)| t < b) {
                best = Some((t, g as u32));
            }
        }
        best.map(|(t, g)| (vec![g], t))
    }

    /// Starts what can start now: repeatedly the oldest class head that fits, the oldest
    /// blocked head holding its reservation. Their instances are placed, held until the end
    /// of their time limit plus the create and destroy times; returns the jobs started.
    fn schedule(&mut self) -> Vec<u32> {
        let mut started = Vec::new();
        loop {
            let mut heads: Vec<u32> = self.queues.values().filter_map(|q| q.front().copied()).collect();
            heads.sort_unstable();
            let mut resv: Option<(Vec<u32>, i64)> = None;
            let mut go = None;
            for &j in &heads {
                if let Some(gpus) = self.find(j, resv.as_ref()) {
                    go = Some((j, gpus));
                    break;
                }
                if resv.is_none() {
                    resv = self.reservation(j);
                }
            }
            let Some((j, gpus)) = go else { break };
            let key = (self.jobs[j as usize].gpus, self.asks[j as usize]);
            self.queues.get_mut(&key).map(VecDeque::pop_front);
            let hold = self.now + self.create_ms + self.limit_ms(j) + self.destroy_ms;
            self.place(j, &gpus, hold);
            started.push(j);
        }
        started
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dynmig_core::geometry::A100_40GB;
    use dynmig_sim::model::{JobKind, SpeedCurve};

    fn job(release: f64, work: f64, mem_mib: u64, gpus: u32) -> Job {
        Job {
            id: 0,
            release,
            work,
            mem_mib,
            gpus,
            kind: JobKind::Training,
            gamma: 1.0,
            curve: SpeedCurve::Exponent,
            due: release + work,
            limit_factor: 1.0,
            exact_slices: None,
        }
    }

    fn run(jobs: Vec<Job>, nodes: usize, gpn: usize) -> RunResult {
        let wl = Workload::new(jobs, "test".into());
        let cfg = SimConfig::new(&A100_40GB, nodes, gpn);
        simulate_per_allocation(&wl, &cfg, InstanceCosts::default()).unwrap()
    }

    #[test]
    fn small_jobs_share_a_gpu_at_once_and_pay_the_create_time() {
        // Two 3g.20gb jobs (16 GiB each) on one A100-40GB GPU: both start at 0, side by side.
        let r = run(vec![job(0.0, 70.0, 16_000, 1), job(0.0, 70.0, 16_000, 1)], 1, 1);
        for o in &r.jobs {
            assert_eq!(o.start_ms, 0);
            assert_eq!(o.slices, 3);
            // 70 s on 7 slices at gamma 1 = 163.333 s on 3, plus 0.16 s to create.
            assert_eq!(o.end_ms, 160 + 163_334);
        }
        // Two creates and two destroys.
        assert_eq!(r.instance_changes, 4);
        assert_eq!(r.reconfigs, 0);
    }

    #[test]
    fn placement_rules_fragment_a_gpu_so_a_4g_waits_though_four_slices_are_free() {
        // A100-40GB: a 1g.5gb may start at memory slices 0-6; the 4g.20gb only at 0. A first
        // 1g at slice 0 leaves 6 compute slices but no 4g placement, and a 3g (starts 0 or 4)
        // goes to 4. The 4g job released after them waits until the 1g's instance is gone.
        let jobs = vec![
            job(0.0, 7.0, 4_000, 1),
            job(0.0, 700.0, 16_000, 1),
            job(1.0, 70.0, 19_000, 1),
        ];
        let r = run(jobs, 1, 1);
        let first_gone = r.jobs[0].end_ms + 110;
        assert!(r.jobs[2].start_ms >= first_gone, "{:?}", r.jobs);
        assert_eq!(r.jobs[1].start_ms, 0);
    }

    #[test]
    fn a_blocked_multi_gpu_job_holds_a_reservation_by_time_limits() {
        // One node of 2 GPUs. A long 1-GPU job, then a 2-GPU job (blocked), then a short job
        // whose limit would overlap the reservation: it must not take the second GPU.
        let jobs = vec![
            job(0.0, 1000.0, 40_000, 1),
            job(1.0, 100.0, 40_000, 2),
            job(2.0, 2000.0, 40_000, 1),
        ];
        let r = run(jobs, 1, 2);
        let long_end = r.jobs[0].end_ms;
        assert!(r.jobs[1].start_ms >= long_end + 110);
        assert!(r.jobs[2].start_ms >= r.jobs[1].end_ms, "{:?}", r.jobs);
    }

    #[test]
    fn energy_counts_idle_and_busy_power() {
        let r = run(vec![job(0.0, 100.0, 40_000, 1)], 1, 1);
        let cfg = SimConfig::new(&A100_40GB, 1, 1);
        let idle = cfg.power.board_w(&[]);
        let busy = cfg.power.board_w(&[7]);
        // Idle while created and destroyed, busy while it runs.
        let expect = idle * (0.16 + 0.11) + busy * 100.0;
        assert!((r.energy_j - expect).abs() < 1.0, "{} vs {expect}", r.energy_j);
    }
}
