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

/// How a job's speed depends on the compute slices of its instance.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SpeedCurve {
    /// `work * (C / c)^gamma`, with the job's own exponent ([`Job::gamma`]): the what-if the
    /// sensitivity grid sweeps (docs/model.md, "Speed on an instance").
    #[default]
    Exponent,
    /// The measured medians of MISO (Li et al., "MISO: Exploiting Multi-Instance GPU
    /// Capability on Multi-Tenant GPU Clusters", ACM SoCC 2022; raw per-iteration logs in
    /// github.com/boringlee24/socc22-miso, `mps/models/logs/mig/`): 8 training jobs x 4
    /// batch sizes on an A100-40GB, speed on 1g/2g/3g/4g over the speed on 7g = 0.31, 0.52,
    /// 0.67, 0.75 (medians over the configurations that fit: 21 on 1g, 32 on the others).
    /// See [`MISO_TRAINING_SPEED`].
    MisoTraining,
}

/// [`SpeedCurve::MisoTraining`]: speed on an instance of `c` of 7 compute slices over the
/// speed on all 7, index `c` (0 unused). 5 and 6 slices (no such profile on A100, H100, H200
/// or B200) are interpolated linearly between 4 and 7. The 4g value is close to the 3g one
/// because both hold 4 of the 8 memory slices, so the same DRAM bandwidth and L2 (NVIDIA
/// A100 MIG user guide, "Supported MIG Profiles"). Measured on A100-40GB only: applied to
/// every model by compute slices (no public per-slice curve for H100, H200 or B200 is known).
pub const MISO_TRAINING_SPEED: [f64; 8] = [0.0, 0.31, 0.52, 0.67, 0.75, 0.8333, 0.9167, 1.0];

impl SpeedCurve {
    /// Speed on `slices` of `full` compute slices over the speed on all of them, in (0, 1],
    /// for a job of exponent `gamma`. A GPU of another slice count than 7 (A30: 4) reads the
    /// MISO table at the same fraction of the GPU, interpolated linearly.
    pub fn speed(self, slices: u8, full: u8, gamma: f64) -> f64 {
        if slices >= full {
            return 1.0;
        }
        match self {
            SpeedCurve::Exponent => (f64::from(slices) / f64::from(full)).powf(gamma),
            SpeedCurve::MisoTraining => {
                let x = 7.0 * f64::from(slices) / f64::from(full);
                let lo = (x.floor() as usize).clamp(1, 7);
                let hi = (x.ceil() as usize).clamp(1, 7);
                if x < 1.0 {
                    // Below one slice in seven: scale the 1g speed down in proportion.
                    return MISO_TRAINING_SPEED[1] * x;
                }
                let (a, b) = (MISO_TRAINING_SPEED[lo], MISO_TRAINING_SPEED[hi]);
                a + (b - a) * (x - lo as f64)
            }
        }
    }
}

/// Modelling parameters shared by the workloads and the engine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelParams {
    /// How training jobs' speed depends on their slices (default: the measured MISO table;
    /// [`SpeedCurve::Exponent`] with [`ModelParams::gamma_training`] as a what-if).
    #[serde(default)]
    pub speed_training: SpeedCurve,
    /// Speed scaling exponent of training jobs under [`SpeedCurve::Exponent`]: on `c` of `C`
    /// compute slices a job takes `work * (C / c)^gamma` seconds. 0.85: *assumed*, shaped
    /// after SMART-MIG's ResNet-50 curve (points not published); the MISO table's per-job
    /// least-squares fits have median 0.67 (p10 0.20, p90 0.91). Swept by the sensitivity grid.
    pub gamma_training: f64,
    /// Speed scaling exponent of inference jobs, 0.6: *assumed* (SMART-MIG's BERT curve,
    /// points not published). Public inference measurements span the whole range with the
    /// batch size: MLPerf Inference v1.0 A100 1g vs full at batch 1 (SingleStream latency)
    /// gives 0.16-0.99, at the largest batch (Offline) 1.01-1.12; swept by the sensitivity
    /// grid (docs/model.md, "Constants").
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
            speed_training: SpeedCurve::MisoTraining,
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

    /// The speed curve of a kind: [`ModelParams::speed_training`] for training, the
    /// exponent for inference.
    pub fn curve(&self, kind: JobKind) -> SpeedCurve {
        match kind {
            JobKind::Training => self.speed_training,
            JobKind::Inference => SpeedCurve::Exponent,
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
    /// Speed scaling exponent (from [`ModelParams::gamma`]), used by [`SpeedCurve::Exponent`].
    pub gamma: f64,
    /// How its speed depends on its slices (from [`ModelParams::curve`]).
    #[serde(default)]
    pub curve: SpeedCurve,
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
    /// Run time on an instance of `slices` of the GPU's `full` compute slices, s: `work`
    /// over the speed of [`Job::curve`] (`work * (full / slices)^gamma` for the exponent).
    pub fn time_on(&self, slices: u8, full: u8) -> f64 {
        if slices >= full {
            self.work
        } else {
            self.work / self.curve.speed(slices, full, self.gamma)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_miso_table_gives_its_medians_and_the_exponent_its_law() {
        let m = SpeedCurve::MisoTraining;
        for (c, v) in [(1, 0.31), (2, 0.52), (3, 0.67), (4, 0.75), (7, 1.0)] {
            assert!((m.speed(c, 7, 0.85) - v).abs() < 1e-9, "{c}g");
        }
        // A30 (4 slices): 2 of 4 is 3.5 of 7, between the 3g and 4g medians.
        assert!((m.speed(2, 4, 0.85) - 0.71).abs() < 1e-9);
        let e = SpeedCurve::Exponent;
        assert!((e.speed(3, 7, 0.85) - (3.0f64 / 7.0).powf(0.85)).abs() < 1e-12);
        // Monotone in the slices for both.
        for curve in [m, e] {
            let s: Vec<f64> = (1..=7).map(|c| curve.speed(c, 7, 0.6)).collect();
            assert!(s.windows(2).all(|w| w[0] <= w[1]), "{curve:?}: {s:?}");
        }
    }

    #[test]
    fn a_job_takes_its_work_over_the_speed_of_its_curve() {
        let mut j = Job {
            id: 0,
            release: 0.0,
            work: 100.0,
            mem_mib: 1000,
            gpus: 1,
            kind: JobKind::Training,
            gamma: 0.85,
            curve: SpeedCurve::MisoTraining,
            due: 150.0,
            limit_factor: 1.0,
            exact_slices: None,
        };
        assert!((j.time_on(3, 7) - 100.0 / 0.67).abs() < 1e-9);
        assert_eq!(j.time_on(7, 7), 100.0);
        j.curve = SpeedCurve::Exponent;
        assert!((j.time_on(3, 7) - 100.0 * (7.0f64 / 3.0).powf(0.85)).abs() < 1e-9);
    }

    #[test]
    fn the_defaults_use_the_measured_table_for_training() {
        let m = ModelParams::default();
        assert_eq!(m.curve(JobKind::Training), SpeedCurve::MisoTraining);
        assert_eq!(m.curve(JobKind::Inference), SpeedCurve::Exponent);
    }
}
