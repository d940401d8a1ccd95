//! What the core policies see of the simulated cluster: the same [`ClusterSnapshot`] the
//! controller builds from Slurm, built from the simulated state.

use crate::cluster::{Cluster, GpuState, SHAPE};
use dynmig_core::geometry::{NodeLayout, ProfileCounts, ProfileSpec};
use dynmig_core::snapshot::{ClusterSnapshot, NodeSnapshot, Pending};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The name of simulated node `i`: `n0`, `n1`, ...
pub fn node_name(i: usize) -> String {
    format!("n{i}")
}

/// The index of a simulated node name, if it is one.
pub fn node_index(name: &str) -> Option<usize> {
    name.strip_prefix('n')?.parse().ok()
}

/// The simulated cluster as a [`ClusterSnapshot`], the type the controller builds from
/// Slurm; [`ClusterSnapshot::demand`] then derives the policy's demand by the same code.
///
/// Per node: unavailable and repartitioning while any of its GPUs drains or reconfigures
/// (what a drained node with a dynmig intent is to the controller); layout age from its last
/// reconfiguration; incoming = the targets of its draining GPUs and the instances of its
/// reconfiguring ones; schedulable free = its free full-GPU instances on GPUs that are up
/// (multi-GPU jobs are the only multi-instance jobs here).
///
/// Running: per profile a running job asked for (`class[job]`, the simulator's queue class;
/// multi-GPU classes count as the full profile per GPU).
///
/// Pending: `pending[p]` instances of `profiles[p]` (a queued job counts as its smallest
/// fitting profile, a multi-GPU job as that many full profiles, as job_submit/dynmig would
/// rewrite them); `widest` is the most GPUs a queued multi-GPU job asks (0 if none).
///
/// Kept up to date incrementally: only the nodes marked dirty since the last refresh
/// ([`Cluster::dirty_nodes`]) are updated, their busy and running counts, free whole GPUs and
/// work end in place when only jobs started or ended ([`crate::cluster::BUSY`]), rebuilt when their layout,
/// state or plan changed ([`SHAPE`]); layout ages and work end times move with the clock.
#[derive(Debug, Clone, Default)]
pub struct View {
    /// The snapshot as of the last refresh.
    pub snapshot: ClusterSnapshot,
    /// Per node, the latest time-limit end of its running jobs, ms.
    ends_ms: Vec<i64>,
    /// Per node, busy and running instances per profile as in its snapshot's maps (when the
    /// model has at most [`MAX_PROFILES`] profiles).
    counts: Vec<Counts>,
    /// The last [`NodeSnapshot::version`] given: every update of a node takes the next one.
    version: u64,
}

/// Busy and running instances per profile index.
type Counts = ([u32; MAX_PROFILES], [u32; MAX_PROFILES]);

impl View {
    /// Updates the nodes marked in [`Cluster::dirty`] (builds every node the first time) and
    /// the clock-driven fields of all.
    #[allow(clippy::too_many_arguments)]
    pub fn refresh(
        &mut self,
        c: &Cluster,
        now_ms: i64,
        allowed: &Arc<[ProfileCounts]>,
        pending: &[u32],
        profiles: &[&'static ProfileSpec],
        widest: usize,
        class: &[u16],
    ) {
        let full = profiles[c.full].name;
        if self.snapshot.nodes.len() != c.nodes() {
            self.snapshot.nodes = (0..c.nodes()).map(|n| node(c, n, allowed, profiles, class)).collect();
            self.ends_ms = (0..c.nodes()).map(|n| node_ends_ms(c, n)).collect();
            self.counts = (0..c.nodes()).map(|n| count_busy(c, n)).collect();
            for s in &mut self.snapshot.nodes {
                self.version += 1;
                s.version = self.version;
            }
        } else {
            for &n in &c.dirty_nodes {
                let n = n as usize;
                if c.dirty[n] & SHAPE != 0 || profiles.len() > MAX_PROFILES {
                    self.snapshot.nodes[n] = node(c, n, allowed, profiles, class);
                    self.counts[n] = count_busy(c, n);
                } else {
                    let counts = count_busy(c, n);
                    update_busy(&mut self.snapshot.nodes[n], &self.counts[n], &counts, c, n, profiles);
                    self.counts[n] = counts;
                }
                self.ends_ms[n] = node_ends_ms(c, n);
                self.version += 1;
                self.snapshot.nodes[n].version = self.version;
            }
        }
        for (n, s) in self.snapshot.nodes.iter_mut().enumerate() {
            s.layout_age = Duration::from_millis(u64::try_from(now_ms - c.layout_since_ms[n]).unwrap_or(0));
            s.work_ends_in = Duration::from_millis(u64::try_from(self.ends_ms[n] - now_ms).unwrap_or(0));
        }
        let mut p = Pending::default();
        for (i, n) in pending.iter().enumerate() {
            if *n > 0 {
                p.instances.insert(profiles[i].name.to_string(), *n);
            }
        }
        if widest > 1 {
            p.widest
                .insert(full.to_string(), u32::try_from(widest).unwrap_or(u32::MAX));
        }
        self.snapshot.pending = p;
    }
}

/// Most profiles [`update_busy`] counts in place.
const MAX_PROFILES: usize = 16;

/// Sets `map`, which holds the non-zero `old` counts of `profiles`, to the non-zero `counts`
/// (the same map [`node`] builds), touching only the profiles whose count changed.
fn sync_counts(map: &mut BTreeMap<String, u32>, old: &[u32], counts: &[u32], profiles: &[&'static ProfileSpec]) {
    for ((p, &k), _) in profiles.iter().zip(counts).zip(old).filter(|((_, k), o)| *k != *o) {
        match map.get_mut(p.name) {
            Some(v) if k > 0 => *v = k,
            Some(_) => {
                map.remove(p.name);
            }
            None if k > 0 => {
                map.insert(p.name.to_string(), k);
            }
            None => {}
        }
    }
}

/// Busy instances per profile of node `n`, and running jobs per profile they asked for
/// ([`Cluster::node_counts`]).
fn count_busy(c: &Cluster, n: usize) -> Counts {
    let mut busy = [0u32; MAX_PROFILES];
    let mut running = [0u32; MAX_PROFILES];
    let np = c.profiles.len();
    if np <= MAX_PROFILES {
        let counts = &c.node_counts[n * 2 * np..(n + 1) * 2 * np];
        busy[..np].copy_from_slice(&counts[..np]);
        running[..np].copy_from_slice(&counts[np..]);
    }
    (busy, running)
}

/// Updates what jobs starting and ending change of node `n`'s snapshot `s`, whose counts were
/// `old` and are `new`: busy and running instances, free whole GPUs (the same values
/// [`node`] gives).
fn update_busy(
    s: &mut NodeSnapshot,
    old: &Counts,
    new: &Counts,
    c: &Cluster,
    n: usize,
    profiles: &[&'static ProfileSpec],
) {
    let np = profiles.len();
    sync_counts(&mut s.busy, &old.0[..np], &new.0[..np], profiles);
    sync_counts(&mut s.running, &old.1[..np], &new.1[..np], profiles);
    let full = profiles[c.full].name;
    if c.free_full[n] > 0 {
        s.schedulable_free.insert(full, u32::from(c.free_full[n]));
    } else {
        s.schedulable_free.remove(full);
    }
}

fn node_ends_ms(c: &Cluster, n: usize) -> i64 {
    (n * c.gpn..(n + 1) * c.gpn)
        .map(|g| c.gpu_work_ends_ms(g))
        .max()
        .unwrap_or(0)
}

/// Node `n` as the policy sees it (layout age and work end time filled in by the caller).
fn node(
    c: &Cluster,
    n: usize,
    allowed: &Arc<[ProfileCounts]>,
    profiles: &[&'static ProfileSpec],
    class: &[u16],
) -> NodeSnapshot {
    let full = profiles[c.full].name;
    let gpus = n * c.gpn..(n + 1) * c.gpn;
    let mut busy: BTreeMap<String, u32> = BTreeMap::new();
    let mut running: BTreeMap<String, u32> = BTreeMap::new();
    let mut incoming: BTreeMap<&'static str, u32> = BTreeMap::new();
    for g in gpus.clone() {
        for i in &c.insts[g] {
            if let Some(j) = i.job {
                *busy.entry(i.placed.profile.name.to_string()).or_insert(0) += 1;
                let asked = (class[j as usize] as usize).min(c.full);
                *running.entry(profiles[asked].name.to_string()).or_insert(0) += 1;
            }
        }
        match &c.state[g] {
            GpuState::Up => {}
            GpuState::Draining(t) => {
                for (p, k) in t.iter() {
                    *incoming.entry(p).or_insert(0) += k;
                }
            }
            GpuState::Reconfiguring => {
                for i in &c.insts[g] {
                    *incoming.entry(i.placed.profile.name).or_insert(0) += 1;
                }
            }
        }
    }
    let away = gpus.clone().any(|g| c.state[g] != GpuState::Up);
    let planned = gpus.clone().any(|g| c.hold[g].is_some()).then(|| NodeLayout {
        gpus: gpus
            .clone()
            .map(|g| c.hold[g].as_ref().map_or_else(|| c.gpu_counts(g), |h| h.target.clone()))
            .collect(),
    });
    for h in gpus.clone().filter_map(|g| c.hold[g].as_ref()) {
        for (name, k) in h.target.iter() {
            *incoming.entry(name).or_insert(0) += k;
        }
    }
    let mut schedulable_free = BTreeMap::new();
    if c.free_full[n] > 0 {
        schedulable_free.insert(full, u32::from(c.free_full[n]));
    }
    NodeSnapshot {
        name: node_name(n),
        model: c.model,
        layout: c.node_layout(n),
        allowed: Arc::clone(allowed),
        busy,
        running,
        unavailable: away,
        repartitioning: away || planned.is_some(),
        layout_age: Duration::ZERO,
        incoming,
        schedulable_free,
        work_ends_in: Duration::ZERO,
        planned,
        version: 0,
    }
}
