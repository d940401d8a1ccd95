//! Lower bounds on energy, makespan and tardiness for a workload on a cluster, whatever the
//! policy and placement. Derivations in docs/model.md ("Lower bounds").

use crate::model::Job;
use crate::power::PowerModel;
use crate::workload::Workload;
use dynmig_core::geometry::{classic_profiles, GpuModel};
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The bounds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bounds {
    /// Makespan, s: the later of every job's release plus its time on a full GPU, and the
    /// time a fluid machine of all the cluster's compute slices ends the least slice-area.
    pub makespan_s: f64,
    /// Energy, J: idle power of every GPU over the makespan bound, plus each job's least
    /// busy energy ([`PowerModel::instance_lb_w`] x its run time, on its best fitting profile).
    pub energy_j: f64,
    /// `energy_j` per job.
    pub energy_per_job_j: f64,
    /// Mean tardiness, s: SRPT on one preemptive machine as fast as the whole cluster (in
    /// compute slices) gives the least possible k-th completion time for every k; matching
    /// sorted completions with sorted due dates bounds the total tardiness.
    pub mean_tardiness_s: f64,
}

/// For each profile `job` could run on (those whose memory holds it; whole GPUs for a job of
/// several GPUs): its least busy energy there (J, [`PowerModel::instance_lb_w`] x run time
/// on every GPU it holds) and its run time (s), with the profile's compute slices.
fn per_profile(job: &Job, model: &GpuModel, power: &PowerModel) -> Vec<(u8, f64, f64)> {
    let full = model.compute_slices;
    if job.gpus > 1 {
        let g = f64::from(job.gpus);
        return vec![(full, g * power.instance_lb_w(full) * job.work, job.work)];
    }
    classic_profiles(model)
        .into_iter()
        .filter(|p| p.memory_mib >= job.mem_mib)
        .map(|p| {
            let t = job.time_on(p.compute_slices, full);
            (p.compute_slices, power.instance_lb_w(p.compute_slices) * t, t)
        })
        .collect()
}

/// `(least busy energy J, run time s)` of `job` on each profile it could run on; empty when
/// no profile of `model` holds it.
pub fn least_per_profile(job: &Job, model: &GpuModel, power: &PowerModel) -> Vec<(f64, f64)> {
    per_profile(job, model, power)
        .into_iter()
        .map(|(_, e, t)| (e, t))
        .collect()
}

/// Least slice-seconds a job can be served in (over fitting profiles), and least busy energy.
fn least(job: &Job, model: &GpuModel, power: &PowerModel) -> (f64, f64) {
    let g = f64::from(job.gpus.max(1));
    per_profile(job, model, power)
        .into_iter()
        .fold((f64::INFINITY, f64::INFINITY), |(area, energy), (c, e, t)| {
            (area.min(g * f64::from(c) * t), energy.min(e))
        })
}

/// Computes the bounds for `wl` on `gpus` GPUs of `model`.
pub fn bounds(wl: &Workload, model: &GpuModel, gpus: usize, power: &PowerModel) -> Bounds {
    let cap = (gpus as f64) * f64::from(model.compute_slices);
    let n = wl.jobs.len();
    let mut area = Vec::with_capacity(n);
    let mut busy_e = 0.0;
    let mut makespan: f64 = 0.0;
    for j in &wl.jobs {
        let (a, e) = least(j, model, power);
        area.push(a / cap);
        busy_e += e;
        makespan = makespan.max(j.release + j.work);
    }
    // SRPT on one machine of speed `cap` (processing times area / cap), jobs sorted by release.
    let mut completions = Vec::with_capacity(n);
    let mut heap: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    let mut rem = area.clone();
    let mut t = 0.0f64;
    let mut i = 0;
    while completions.len() < n {
        if heap.is_empty() && i < n {
            t = t.max(wl.jobs[i].release);
        }
        while i < n && wl.jobs[i].release <= t {
            heap.push(Reverse((rem[i].to_bits(), i)));
            i += 1;
        }
        let Some(Reverse((_, j))) = heap.pop() else { continue };
        let next_release = if i < n { wl.jobs[i].release } else { f64::INFINITY };
        if t + rem[j] <= next_release {
            t += rem[j];
            rem[j] = 0.0;
            completions.push(t);
        } else {
            rem[j] -= next_release - t;
            t = next_release;
            heap.push(Reverse((rem[j].to_bits(), j)));
        }
    }
    makespan = makespan.max(t);
    let mut due: Vec<f64> = wl.jobs.iter().map(|j| j.due).collect();
    due.sort_by(f64::total_cmp);
    completions.sort_by(f64::total_cmp);
    let tard: f64 = completions.iter().zip(&due).map(|(c, d)| (c - d).max(0.0)).sum();
    let energy = power.idle_w * gpus as f64 * makespan + busy_e;
    Bounds {
        makespan_s: makespan,
        energy_j: energy,
        energy_per_job_j: energy / n.max(1) as f64,
        mean_tardiness_s: tard / n.max(1) as f64,
    }
}
