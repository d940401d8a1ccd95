//! The job model: how fast a job runs on an instance of a given size, and when it is due.
//! Every number here is a parameter documented in docs/model.md with its source.

use serde::{Deserialize, Serialize};

/// Whether a job behaves like training (scales almost linearly with compute slices) or
/// inference (scales sublinearly).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobKind {
    /// Training-like: lognormal durations in the synthetic workload, exponent
    /// [`ModelParams::gamma_training`].
    Training,
    /// Inference-like: exponential durations in the synthetic workload, exponent
    /// [`ModelParams::gamma_inference`].
    Inference,
}

/// Modelling parameters shared by the workloads and the engine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelParams {
    /// Speed scaling exponent of training jobs: on `c` of `C` compute slices a job takes
    /// `work * (C / c)^gamma` seconds. 0.85: ResNet-50 training throughput on A100 MIG
    /// instances grows sublinearly but close to linearly (SMART-MIG's measured ResNet-50
    /// curve, read from its published figure; the exact points are not published).
    pub gamma_training: f64,
    /// Speed scaling exponent of inference jobs, 0.6: small-batch BERT-Base inference gains
    /// little from more slices (SMART-MIG's BERT curve, same caveat).
    pub gamma_inference: f64,
    /// Due date: `release + U(due_lo, due_hi) x time on a full GPU` (SMART-MIG: U(1, 1.5)).
    pub due_lo: f64,
    /// Upper end of the due-date factor.
    pub due_hi: f64,
    /// Memory of the GPUs the trace's pods ran on, in MiB: a pod asking `gpu_milli` of a GPU
    /// needs `gpu_milli / 1000 x` this. 16384: the trace's GPUs are T4, P100 and V100-16GB
    /// (16 GB) with a few V100-32GB; its G2/G3 nodes are unnamed (traces/README.md).
    pub trace_gpu_memory_mib: u64,
    /// Longest run time taken from the trace, seconds (48 h; the trace's p99 is 41 h, and a
    /// few pods ran for months, which would dominate any 30-day window).
    pub max_run_s: f64,
    /// Shortest run time, seconds (1 s; the trace has pods of 0 s).
    pub min_run_s: f64,
    /// User time limits: a job's time limit is its run time on the profile it asks for times
    /// a factor drawn uniformly from `[1, time_limit_f]`, the "f-model" of user runtime
    /// estimates (Mu'alem and Feitelson, "Utilization, Predictability, Workloads, and User
    /// Runtime Estimates in Scheduling the IBM SP2 with Backfilling", IEEE TPDS 12(6), 2001).
    /// 5: a mean accuracy (run time / estimate) of ln 5 / 4 = 0.40, the order of accuracy
    /// reported for production logs by the same authors; 1: exact limits. Slurm kills a job at
    /// its time limit, so no job runs longer than its limit.
    pub time_limit_f: f64,
}

impl Default for ModelParams {
    fn default() -> Self {
        Self {
            gamma_training: 0.85,
            gamma_inference: 0.6,
            due_lo: 1.0,
            due_hi: 1.5,
            trace_gpu_memory_mib: 16384,
            max_run_s: 48.0 * 3600.0,
            min_run_s: 1.0,
            time_limit_f: 5.0,
        }
    }
}

impl ModelParams {
    /// Draws a job's time-limit factor, `U(1, time_limit_f)`, from `rng`.
    pub fn draw_limit_factor(&self, rng: &mut impl rand::Rng) -> f64 {
        if self.time_limit_f > 1.0 {
            rng.gen_range(1.0..=self.time_limit_f)
        } else {
            1.0
        }
    }

    /// The scaling exponent of a kind.
    pub fn gamma(&self, kind: JobKind) -> f64 {
        match kind {
            JobKind::Training => self.gamma_training,
            JobKind::Inference => self.gamma_inference,
        }
    }
}

/// One job of a workload. Times are seconds from the workload's start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// Index in the workload (jobs are sorted by release, then id).
    pub id: u32,
    /// Release (submit) time, s.
    pub release: f64,
    /// Run time on a full GPU (all compute slices), s. Multi-GPU jobs: on each of `gpus` full GPUs.
    pub work: f64,
    /// GPU memory the job needs on each GPU, MiB.
    pub mem_mib: u64,
    /// GPUs: 1 (may run on any MIG instance with enough memory) or more (whole GPUs on one node).
    pub gpus: u32,
    /// Training-like or inference-like.
    pub kind: JobKind,
    /// Speed scaling exponent (from [`ModelParams::gamma`]).
    pub gamma: f64,
    /// Due date, s.
    pub due: f64,
    /// The user's time limit over the run time on the profile the job asks for (>= 1; see
    /// [`ModelParams::time_limit_f`]).
    pub limit_factor: f64,
    /// A single-GPU job that runs only on instances of one profile, the one with `mem_mib` of
    /// memory and this many compute slices: Slurm runs a job only on the GRES type it asked
    /// for. `None` (the simulator's workloads): any instance with enough memory.
    #[serde(default)]
    pub exact_slices: Option<u8>,
}

impl Job {
    /// Run time on an instance of `slices` of the GPU's `full` compute slices, s:
    /// `work * (full / slices)^gamma`.
    pub fn time_on(&self, slices: u8, full: u8) -> f64 {
        if slices >= full {
            self.work
        } else {
            self.work * (f64::from(full) / f64::from(slices)).powf(self.gamma)
        }
    }
}
