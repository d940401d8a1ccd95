// One piece: the simulated cluster's state and the operations that keep its free-instance pools and power in step; split, the invariants would span files.
//! The simulated cluster's state: nodes of GPUs, each GPU's placed instances and which job
//! runs on each, free-instance pools for fast placement, and the power drawn now.
//!
//! An instance is named by its key `gpu * 8 + start slice`, unique among a GPU's current
//! instances; keys are node-major, so the lowest key is on the lowest node.

use crate::power::PowerModel;
use anyhow::{anyhow, Result};
use dynmig_core::geometry::{
    check_instances, classic_profiles, place, GpuModel, NodeLayout, Placed, ProfileCounts, ProfileSpec,
};
use dynmig_core::hints::smallest_fitting_in;
use dynmig_core::size::MIB;
use std::collections::BTreeSet;

/// A set of small integers (instance keys, node indices) below a fixed bound: a bit per
/// value and a bit per 64-value word that is not empty, so that insertions and removals are
/// O(1) and the smallest value from a point is found by a short scan. Iterates in ascending
/// order, as a `BTreeSet` would.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeySet {
    words: Vec<u64>,
    summary: Vec<u64>,
    len: usize,
}

impl KeySet {
    /// An empty set for values below `bound`.
    pub fn new(bound: usize) -> Self {
        let w = bound.div_ceil(64);
        Self {
            words: vec![0; w],
            summary: vec![0; w.div_ceil(64)],
            len: 0,
        }
    }

    /// Adds `k`; false if it was there.
    pub fn insert(&mut self, k: u32) -> bool {
        let (w, m) = (k as usize / 64, 1u64 << (k % 64));
        if self.words[w] & m != 0 {
            return false;
        }
        self.words[w] |= m;
        self.summary[w / 64] |= 1 << (w % 64);
        self.len += 1;
        true
    }

    /// Removes `k`; false if it was not there.
    pub fn remove(&mut self, k: u32) -> bool {
        let (w, m) = (k as usize / 64, 1u64 << (k % 64));
        if self.words.get(w).is_none_or(|x| x & m == 0) {
            return false;
        }
        self.words[w] &= !m;
        if self.words[w] == 0 {
            self.summary[w / 64] &= !(1 << (w % 64));
        }
        self.len -= 1;
        true
    }

    /// How many values.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no value.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The smallest value at or above `from`.
    pub fn next_from(&self, from: u32) -> Option<u32> {
        if self.len == 0 {
            return None;
        }
        let w = from as usize / 64;
        let bits = *self.words.get(w)? & (!0u64 << (from % 64));
        if bits != 0 {
            return Some((w * 64) as u32 + bits.trailing_zeros());
        }
        let next = w + 1;
        let mut s = next / 64;
        let mut sbits = self.summary.get(s).map_or(0, |x| x & (!0u64 << (next % 64)));
        loop {
            if sbits != 0 {
                let w = s * 64 + sbits.trailing_zeros() as usize;
                return Some((w * 64) as u32 + self.words[w].trailing_zeros());
            }
            s += 1;
            sbits = *self.summary.get(s)?;
        }
    }

    /// The smallest value.
    pub fn first(&self) -> Option<u32> {
        self.next_from(0)
    }

    /// The values at or above `from`, ascending.
    pub fn iter_from(&self, from: u32) -> impl Iterator<Item = u32> + '_ {
        std::iter::successors(self.next_from(from), move |k| self.next_from(k + 1))
    }

    /// The values, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.iter_from(0)
    }
}

/// A [`Cluster::dirty`] bit: jobs started or ended on the node.
pub const BUSY: u8 = 1;
/// A [`Cluster::dirty`] bit: the node's instances, a GPU's state or a planned repartition
/// changed.
pub const SHAPE: u8 = 2;

/// One placed instance and the job on it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Inst {
    /// Where it is.
    pub placed: Placed,
    /// Index into [`Cluster::profiles`].
    pub pidx: u8,
    /// The job running on it.
    pub job: Option<u32>,
    /// When that job's time limit ends, ms (0 when free).
    pub until_ms: i64,
    /// When that job ends, ms (0 when free).
    pub end_ms: i64,
    /// Index into [`Cluster::profiles`] of the profile that job asked for (0 when free).
    pub asked: u8,
}

/// A repartition planned for a GPU but not started (a maintenance reservation): the GPU takes
/// only jobs whose time limit ends by `deadline_ms`, and changes to `target` once idle.
#[derive(Debug, Clone, PartialEq)]
pub struct Hold {
    /// The layout the GPU gets.
    pub target: ProfileCounts,
    /// When the reservation starts: the latest time-limit end of the jobs running when it was
    /// planned, ms.
    pub deadline_ms: i64,
}

/// What a GPU is doing.
#[derive(Debug, Clone, PartialEq)]
pub enum GpuState {
    /// Takes jobs.
    Up,
    /// Takes no new jobs; will change to the target once idle.
    Draining(ProfileCounts),
    /// Instances being changed; up again at the scheduled event.
    Reconfiguring,
}

/// The cluster.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// GPU model of every GPU.
    pub model: &'static GpuModel,
    /// GPUs per node.
    pub gpn: usize,
    /// The profiles jobs run on (the model's classic profiles), sorted by memory then compute
    /// slices, smallest first.
    pub profiles: Vec<&'static ProfileSpec>,
    /// Index of the full-GPU profile in `profiles`.
    pub full: usize,
    /// Instances of each GPU.
    pub insts: Vec<Vec<Inst>>,
    /// State of each GPU.
    pub state: Vec<GpuState>,
    /// A planned repartition of each GPU, if any (the GPU is up meanwhile).
    pub hold: Vec<Option<Hold>>,
    /// Jobs running on each GPU.
    pub gpu_jobs: Vec<u8>,
    /// GPUs that run no job.
    pub idle_gpus: usize,
    /// Busy instances per node.
    pub node_busy: Vec<u32>,
    /// Per node, what a policy sees of it that changed since the engine last cleared it:
    /// [`BUSY`] and [`SHAPE`] bits (0: nothing).
    pub dirty: Vec<u8>,
    /// The nodes whose `dirty` is not 0, each once.
    pub dirty_nodes: Vec<u32>,
    /// Counts every change of what a job could start on ([`Cluster::touch`]): equal values
    /// mean the same instances, states, holds and busy instances.
    pub version: u64,
    /// When each node's layout last changed, ms.
    pub layout_since_ms: Vec<i64>,
    /// Free instances on up GPUs, per profile, by key.
    pub free: Vec<KeySet>,
    /// Free full-GPU instances per node.
    pub free_full: Vec<u8>,
    /// Nodes by their count of free full-GPU instances.
    pub by_free_full: Vec<KeySet>,
    /// Per node, when the jobs on its busy full-GPU instances of up GPUs end as backfill
    /// plans it ([`Cluster::plan_end`]), ms, sorted (what an EASY reservation for a multi-GPU
    /// job waits for).
    pub full_ends: Vec<Vec<i64>>,
    /// Per profile, the busy instances of up GPUs as (planned end, key), ascending (what an
    /// EASY reservation for a single-GPU job waits for).
    pub busy_ends: Vec<BTreeSet<(i64, u32)>>,
    /// Whether backfill plans with the jobs' true ends (the `clairvoyant-backfill` what-if)
    /// instead of their time limits (Slurm). Set before any job starts.
    pub clairvoyant: bool,
    /// Instances per profile in the whole cluster.
    pub inst_count: Vec<u32>,
    /// Busy instance power above idle, per GPU, W.
    pub busy_w: Vec<f64>,
    /// Board power of the whole cluster now, W.
    pub total_w: f64,
    /// Busy compute slices now.
    pub busy_slices: u32,
    /// Busy compute slices of each GPU.
    pub gpu_slices: Vec<u8>,
    /// Per node, its busy instances per profile, then its running jobs per profile they asked
    /// for: `2 x profiles` counts a node, node-major.
    pub node_counts: Vec<u32>,
    /// GPUs held for a repartition (planned or draining): the engine's mark.
    pub held: Vec<bool>,
    /// How many GPUs are held.
    pub held_gpus: u32,
    /// Busy compute slices of the held GPUs.
    pub held_busy_slices: u32,
    /// The power model.
    pub power: PowerModel,
}

impl Cluster {
    /// A cluster whose node `i` holds `layouts[i]` (one `ProfileCounts` per GPU).
    ///
    /// # Errors
    /// A layout names a profile that jobs cannot use here, does not fit a GPU, or has the
    /// wrong number of GPUs.
    pub fn new(model: &'static GpuModel, gpn: usize, layouts: &[NodeLayout], power: PowerModel) -> Result<Self> {
        let mut profiles = classic_profiles(model);
        profiles.sort_by_key(|p| (p.memory_mib, p.compute_slices));
        let full = profiles
            .iter()
            .position(|p| p.compute_slices == model.compute_slices)
            .ok_or_else(|| anyhow!("{} has no full-GPU profile", model.name))?;
        let nodes = layouts.len();
        let gpus = nodes * gpn;
        let mut c = Self {
            model,
            gpn,
            full,
            insts: vec![Vec::new(); gpus],
            state: vec![GpuState::Up; gpus],
            hold: vec![None; gpus],
            gpu_jobs: vec![0; gpus],
            idle_gpus: gpus,
            node_busy: vec![0; nodes],
            dirty: vec![SHAPE; nodes],
            dirty_nodes: (0..nodes as u32).collect(),
            version: 0,
            layout_since_ms: vec![0; nodes],
            free: vec![KeySet::new(gpus * 8); profiles.len()],
            free_full: vec![0; nodes],
            by_free_full: vec![KeySet::new(nodes); gpn + 1],
            full_ends: vec![Vec::new(); nodes],
            busy_ends: vec![BTreeSet::new(); profiles.len()],
            clairvoyant: false,
            inst_count: vec![0; profiles.len()],
            busy_w: vec![0.0; gpus],
            total_w: power.idle_w * gpus as f64,
            busy_slices: 0,
            gpu_slices: vec![0; gpus],
            node_counts: vec![0; nodes * 2 * profiles.len()],
            held: vec![false; gpus],
            held_gpus: 0,
            held_busy_slices: 0,
            power,
            profiles,
        };
        for n in 0..nodes {
            c.by_free_full[0].insert(n as u32);
        }
        for (n, l) in layouts.iter().enumerate() {
            if l.gpus.len() != gpn {
                return Err(anyhow!(
                    "node {n}: layout {l} has {} GPUs, the nodes have {gpn}",
                    l.gpus.len()
                ));
            }
            for (i, counts) in l.gpus.iter().enumerate() {
                let placed =
                    place(model, counts).ok_or_else(|| anyhow!("{counts} does not fit on one {}", model.name))?;
                c.set_instances(n * gpn + i, &placed)?;
            }
        }
        Ok(c)
    }

    /// Nodes.
    pub fn nodes(&self) -> usize {
        self.node_busy.len()
    }

    /// Marks node `node` dirty with `what` ([`BUSY`], [`SHAPE`]).
    pub fn touch(&mut self, node: usize, what: u8) {
        self.version += 1;
        if self.dirty[node] == 0 {
            self.dirty_nodes.push(node as u32);
        }
        self.dirty[node] |= what;
    }

    /// Clears every node's dirty bits.
    pub fn clear_dirty(&mut self) {
        for n in self.dirty_nodes.drain(..) {
            self.dirty[n as usize] = 0;
        }
    }

    /// Index in `profiles` of a profile name.
    pub fn pidx(&self, name: &str) -> Option<usize> {
        self.profiles.iter().position(|p| p.name == name)
    }

    /// The smallest profile (index) whose memory holds `mem_mib`, if any: job_submit's rule,
    /// [`smallest_fitting_in`], over [`Cluster::profiles`].
    pub fn smallest_fitting(&self, mem_mib: u64) -> Option<usize> {
        smallest_fitting_in(self.profiles.iter().copied().enumerate(), mem_mib.saturating_mul(MIB)).map(|(i, _)| i)
    }

    /// The key of an instance.
    pub fn key(gpu: usize, start: u8) -> u32 {
        (gpu as u32) * 8 + u32::from(start)
    }

    /// Node of a GPU.
    pub fn node_of(&self, gpu: usize) -> usize {
        gpu / self.gpn
    }

    /// The instance with this key.
    pub fn inst(&self, key: u32) -> &Inst {
        let (g, s) = ((key / 8) as usize, (key % 8) as u8);
        self.insts[g]
            .iter()
            .find(|i| i.placed.start == s)
            .expect("instance key exists")
    }

    fn inst_mut(&mut self, key: u32) -> &mut Inst {
        let (g, s) = ((key / 8) as usize, (key % 8) as u8);
        self.insts[g]
            .iter_mut()
            .find(|i| i.placed.start == s)
            .expect("instance key exists")
    }

    /// A GPU's current layout as profile counts.
    pub fn gpu_counts(&self, gpu: usize) -> ProfileCounts {
        let placed: Vec<Placed> = self.insts[gpu].iter().map(|i| i.placed).collect();
        ProfileCounts::of(&placed)
    }

    /// A node's current layout.
    pub fn node_layout(&self, node: usize) -> NodeLayout {
        NodeLayout {
            gpus: (node * self.gpn..(node + 1) * self.gpn)
                .map(|g| self.gpu_counts(g))
                .collect(),
        }
    }

    /// Whether a GPU runs no job.
    pub fn gpu_idle(&self, gpu: usize) -> bool {
        self.gpu_jobs[gpu] == 0
    }

    /// The latest time-limit end of the jobs running on `gpu`, ms (0 when idle).
    pub fn gpu_work_ends_ms(&self, gpu: usize) -> i64 {
        self.insts[gpu].iter().map(|i| i.until_ms).max().unwrap_or(0)
    }

    /// Busy compute slices of `gpu`.
    pub fn gpu_busy_slices(&self, gpu: usize) -> u8 {
        self.gpu_slices[gpu]
    }

    /// Marks `gpu` held for a repartition or not ([`Cluster::held`]).
    pub fn set_held(&mut self, gpu: usize, held: bool) {
        if self.held[gpu] == held {
            return;
        }
        self.held[gpu] = held;
        let s = u32::from(self.gpu_slices[gpu]);
        if held {
            self.held_gpus += 1;
            self.held_busy_slices += s;
        } else {
            self.held_gpus -= 1;
            self.held_busy_slices -= s;
        }
    }

    fn pool_add(&mut self, gpu: usize, inst: Inst) {
        let key = Self::key(gpu, inst.placed.start);
        self.free[inst.pidx as usize].insert(key);
        if inst.pidx as usize == self.full {
            let n = self.node_of(gpu);
            self.by_free_full[self.free_full[n] as usize].remove(n as u32);
            self.free_full[n] += 1;
            self.by_free_full[self.free_full[n] as usize].insert(n as u32);
        }
    }

    fn pool_remove(&mut self, gpu: usize, inst: Inst) {
        let key = Self::key(gpu, inst.placed.start);
        if self.free[inst.pidx as usize].remove(key) && inst.pidx as usize == self.full {
            let n = self.node_of(gpu);
            self.by_free_full[self.free_full[n] as usize].remove(n as u32);
            self.free_full[n] -= 1;
            self.by_free_full[self.free_full[n] as usize].insert(n as u32);
        }
    }

    /// Replaces an idle GPU's instances (after a reconfiguration or at start). The GPU's
    /// state is left as it is; free instances join the pools only if it is up.
    ///
    /// # Errors
    /// A profile jobs cannot use, or instances that break a placement rule.
    pub fn set_instances(&mut self, gpu: usize, placed: &[Placed]) -> Result<()> {
        check_instances(self.model, placed).map_err(|e| anyhow!("GPU {gpu}: {e}"))?;
        let n = self.node_of(gpu);
        self.touch(n, SHAPE);
        for i in std::mem::take(&mut self.insts[gpu]) {
            self.pool_remove(gpu, i);
            self.inst_count[i.pidx as usize] -= 1;
        }
        let mut v = Vec::with_capacity(placed.len());
        for p in placed {
            let pidx = self
                .pidx(p.profile.name)
                .ok_or_else(|| anyhow!("profile {} is not one jobs run on", p.profile.name))?;
            v.push(Inst {
                placed: *p,
                pidx: pidx as u8,
                job: None,
                until_ms: 0,
                end_ms: 0,
                asked: 0,
            });
            self.inst_count[pidx] += 1;
        }
        v.sort_by_key(|i| i.placed.start);
        self.insts[gpu] = v;
        if self.state[gpu] == GpuState::Up {
            for i in self.insts[gpu].clone() {
                self.pool_add(gpu, i);
            }
        }
        Ok(())
    }

    /// Starts `job`, whose time limit ends at `until_ms`, which ends at `end_ms` and asked
    /// for profile `asked` (an index into `profiles`), on the free instance `key`. Returns the
    /// instance's compute slices.
    pub fn occupy(&mut self, key: u32, job: u32, until_ms: i64, end_ms: i64, asked: usize) -> u8 {
        let gpu = (key / 8) as usize;
        let inst = *self.inst(key);
        debug_assert!(inst.job.is_none() && self.state[gpu] == GpuState::Up);
        self.pool_remove(gpu, inst);
        let i = self.inst_mut(key);
        i.job = Some(job);
        i.until_ms = until_ms;
        i.end_ms = end_ms;
        i.asked = asked as u8;
        let i = *i;
        self.ends_add(gpu, &i);
        if self.gpu_jobs[gpu] == 0 {
            self.idle_gpus -= 1;
        }
        self.gpu_jobs[gpu] += 1;
        let c = inst.placed.profile.compute_slices;
        let n = self.node_of(gpu);
        self.touch(n, BUSY);
        let np = self.profiles.len();
        self.node_counts[n * 2 * np + inst.pidx as usize] += 1;
        self.node_counts[n * 2 * np + np + asked] += 1;
        self.node_busy[n] += 1;
        self.busy_slices += u32::from(c);
        self.gpu_slices[gpu] += c;
        if self.held[gpu] {
            self.held_busy_slices += u32::from(c);
        }
        self.add_busy_w(gpu, self.power.instance_w(c));
        c
    }

    /// Ends the job on instance `key`; the instance becomes free if its GPU is up.
    pub fn release(&mut self, key: u32) {
        let gpu = (key / 8) as usize;
        let inst = *self.inst(key);
        debug_assert!(inst.job.is_some());
        if self.state[gpu] == GpuState::Up {
            self.ends_remove(gpu, &inst);
        }
        let i = self.inst_mut(key);
        i.job = None;
        i.until_ms = 0;
        i.end_ms = 0;
        i.asked = 0;
        self.gpu_jobs[gpu] -= 1;
        if self.gpu_jobs[gpu] == 0 {
            self.idle_gpus += 1;
        }
        let c = inst.placed.profile.compute_slices;
        let n = self.node_of(gpu);
        self.touch(n, BUSY);
        let np = self.profiles.len();
        self.node_counts[n * 2 * np + inst.pidx as usize] -= 1;
        self.node_counts[n * 2 * np + np + inst.asked as usize] -= 1;
        self.node_busy[n] -= 1;
        self.busy_slices -= u32::from(c);
        self.gpu_slices[gpu] -= c;
        if self.held[gpu] {
            self.held_busy_slices -= u32::from(c);
        }
        self.add_busy_w(gpu, -self.power.instance_w(c));
        if self.state[gpu] == GpuState::Up {
            let i = *self.inst(key);
            self.pool_add(gpu, i);
        }
    }

    /// When the job on `i` ends as backfill plans it: its time limit's end (Slurm), or its
    /// true end with [`Cluster::clairvoyant`].
    pub fn plan_end(&self, i: &Inst) -> i64 {
        if self.clairvoyant {
            i.end_ms
        } else {
            i.until_ms
        }
    }

    /// Indexes the busy instance `i` of the up GPU `gpu` ([`Cluster::full_ends`],
    /// [`Cluster::busy_ends`]).
    fn ends_add(&mut self, gpu: usize, i: &Inst) {
        let end_ms = self.plan_end(i);
        self.busy_ends[i.pidx as usize].insert((end_ms, Self::key(gpu, i.placed.start)));
        if i.pidx as usize != self.full {
            return;
        }
        let v = &mut self.full_ends[gpu / self.gpn];
        let at = v.partition_point(|e| *e <= end_ms);
        v.insert(at, end_ms);
    }

    fn ends_remove(&mut self, gpu: usize, i: &Inst) {
        let end_ms = self.plan_end(i);
        let removed = self.busy_ends[i.pidx as usize].remove(&(end_ms, Self::key(gpu, i.placed.start)));
        debug_assert!(removed, "a busy instance's end is indexed");
        if i.pidx as usize != self.full {
            return;
        }
        let v = &mut self.full_ends[gpu / self.gpn];
        let at = v.partition_point(|e| *e < end_ms);
        debug_assert_eq!(v.get(at), Some(&end_ms), "a busy full-GPU instance's end is indexed");
        v.remove(at);
    }

    fn add_busy_w(&mut self, gpu: usize, dw: f64) {
        let before = self.power.gpu_w(self.busy_w[gpu]);
        self.busy_w[gpu] += dw;
        if self.busy_w[gpu].abs() < 1e-9 || self.gpu_idle(gpu) {
            self.busy_w[gpu] = 0.0; // no drift once idle
        }
        self.total_w += self.power.gpu_w(self.busy_w[gpu]) - before;
    }

    /// Sets a GPU's state; leaving `Up` takes its free instances out of the pools, entering
    /// it puts them back.
    pub fn set_state(&mut self, gpu: usize, s: GpuState) {
        let n = self.node_of(gpu);
        self.touch(n, SHAPE);
        let was_up = self.state[gpu] == GpuState::Up;
        let is_up = s == GpuState::Up;
        self.state[gpu] = s;
        if was_up != is_up {
            for k in 0..self.insts[gpu].len() {
                let i = self.insts[gpu][k];
                match (i.job.is_none(), is_up) {
                    (true, true) => self.pool_add(gpu, i),
                    (true, false) => self.pool_remove(gpu, i),
                    (false, true) => self.ends_add(gpu, &i),
                    (false, false) => self.ends_remove(gpu, &i),
                }
            }
        }
    }

    /// Checks the state's invariants: every GPU's instances are a valid placement (no two
    /// overlap, within its slices and instance limits), the pools hold exactly the idle
    /// instances of up GPUs, the busy counts and the power match a recount.
    ///
    /// # Errors
    /// The first broken invariant.
    pub fn audit(&self) -> Result<()> {
        let mut free = vec![BTreeSet::new(); self.profiles.len()];
        let mut node_busy = vec![0u32; self.nodes()];
        let mut full_ends = vec![Vec::new(); self.nodes()];
        let mut busy_ends = vec![BTreeSet::new(); self.profiles.len()];
        let mut total_w = 0.0;
        let mut busy_slices = 0u32;
        let mut held_busy = 0u32;
        let np = self.profiles.len();
        let mut node_counts = vec![0u32; self.nodes() * 2 * np];
        for (g, insts) in self.insts.iter().enumerate() {
            let slices: u32 = insts
                .iter()
                .filter(|i| i.job.is_some())
                .map(|i| u32::from(i.placed.profile.compute_slices))
                .sum();
            if slices != u32::from(self.gpu_slices[g]) {
                return Err(anyhow!("GPU {g}: busy slices do not match its running jobs"));
            }
            if self.held[g] {
                held_busy += slices;
            }
            let placed: Vec<Placed> = insts.iter().map(|i| i.placed).collect();
            check_instances(self.model, &placed).map_err(|e| anyhow!("GPU {g} over capacity or overlapping: {e}"))?;
            let mut w = 0.0;
            for i in insts {
                if i.job.is_some() {
                    node_busy[g / self.gpn] += 1;
                    node_counts[g / self.gpn * 2 * np + i.pidx as usize] += 1;
                    node_counts[g / self.gpn * 2 * np + np + i.asked as usize] += 1;
                    if self.state[g] == GpuState::Up {
                        busy_ends[i.pidx as usize].insert((self.plan_end(i), Self::key(g, i.placed.start)));
                        if i.pidx as usize == self.full {
                            full_ends[g / self.gpn].push(self.plan_end(i));
                        }
                    }
                    w += self.power.instance_w(i.placed.profile.compute_slices);
                    busy_slices += u32::from(i.placed.profile.compute_slices);
                } else if self.state[g] == GpuState::Up {
                    free[i.pidx as usize].insert(Self::key(g, i.placed.start));
                }
            }
            if self.state[g] == GpuState::Reconfiguring && w > 0.0 {
                return Err(anyhow!("GPU {g} reconfigures while a job runs on it"));
            }
            total_w += self.power.gpu_w(w);
        }
        let pools: Vec<BTreeSet<u32>> = self.free.iter().map(|f| f.iter().collect()).collect();
        if free != pools || self.free.iter().zip(&free).any(|(a, b)| a.len() != b.len()) {
            return Err(anyhow!("free pools do not match the idle instances of up GPUs"));
        }
        full_ends.iter_mut().for_each(|v| v.sort_unstable());
        if full_ends != self.full_ends || busy_ends != self.busy_ends {
            return Err(anyhow!(
                "the index of full-GPU job ends does not match the running jobs"
            ));
        }
        if held_busy != self.held_busy_slices || self.held.iter().filter(|h| **h).count() != self.held_gpus as usize {
            return Err(anyhow!("held GPU counts do not match the held GPUs"));
        }
        if node_busy != self.node_busy || busy_slices != self.busy_slices || node_counts != self.node_counts {
            return Err(anyhow!("busy counts do not match the running jobs"));
        }
        if (total_w - self.total_w).abs() > 1e-6 * total_w.max(1.0) {
            return Err(anyhow!(
                "power {} W does not match a recount {} W",
                self.total_w,
                total_w
            ));
        }
        Ok(())
    }
}
