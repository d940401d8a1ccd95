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

/// Least slice-seconds a job can be served in (over fitting profiles), and least busy energy.
fn least(job: &Job, model: &GpuModel, power: &PowerModel) -> (f64, f64) {
    let full = model.compute_slices;
    if job.gpus > 1 {
        let g = f64::from(job.gpus);
        return (g * f64::from(full) * job.work, g * power.instance_lb_w(full) * job.work);
    }
    let mut area = f64::INFINITY;
    let mut energy = f64::INFINITY;
    for p in classic_profiles(model) {
        if p.memory_mib >= job.mem_mib {
            let t = job.time_on(p.compute_slices, full);
            area = area.min(f64::from(p.compute_slices) * t);
            energy = energy.min(power.instance_lb_w(p.compute_slices) * t);
        }
    }
    (area, energy)
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
