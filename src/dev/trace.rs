//! The Alibaba PAI "openb" GPU-cluster trace (cluster-trace-gpu-v2023), and the mapping of its
//! pods to Slurm jobs for the demo.
//!
//! Columns: `name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, qos, pod_phase,
//! creation_time, deletion_time, scheduled_time`; times are integer seconds from the trace
//! start; `gpu_milli` is the share of one GPU in thousandths for single-GPU pods
//! (crates/dynmig-sim/data/README.md). Cite: Weng et al., "Beware of Fragmentation: Scheduling
//! GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX ATC 2023.
//!
//! Demo mapping (documented in docs/demo.md):
//! - arrival: `(creation_time - first creation) / time_compression` seconds after the demo
//!   starts;
//! - run time: `(deletion_time - scheduled_time) / duration_compression`, clamped to
//!   `[min_run, max_run]` seconds;
//! - GPU memory: a fractional single-GPU pod (`gpu_milli < 1000`) needs
//!   `gpu_milli / 1000 x gpu_memory` (the trace has no memory figure; the share of the GPU is
//!   taken as the share of its memory) and is submitted with `--mig-mem`; a whole-GPU pod asks
//!   `--gres=gpu:1` with no hint; a multi-GPU pod asks `--gres=gpu:N`.

use anyhow::{Context, Result};
use std::path::PathBuf;
use std::time::Duration;

pub use dynmig_sim::workload::alibaba::{parse_pods, Pod};

/// Writes pods as CSV in the trace's own format (for a shipped slice).
pub fn write_pods(pods: &[Pod]) -> Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    for p in pods {
        w.serialize(p)?;
    }
    Ok(String::from_utf8(w.into_inner()?)?)
}

/// GPU pods that ran, created in `[from, to)` trace seconds, ordered by creation.
pub fn gpu_pods_between(pods: &[Pod], from: i64, to: i64) -> Vec<Pod> {
    let mut v: Vec<Pod> = pods
        .iter()
        .filter(|p| p.num_gpu >= 1 && p.duration().is_some() && p.creation_time >= from && p.creation_time < to)
        .cloned()
        .collect();
    v.sort_by_key(|p| (p.creation_time, p.name.clone()));
    v
}

/// How trace pods become demo jobs.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoMapping {
    /// Trace seconds per demo second for arrivals.
    pub time_compression: f64,
    /// Trace seconds per demo second for run times.
    pub duration_compression: f64,
    /// Shortest demo run time.
    pub min_run: Duration,
    /// Longest demo run time.
    pub max_run: Duration,
    /// Memory of one GPU of the demo cluster, in bytes (share x this = `--mig-mem`).
    pub gpu_memory_bytes: u64,
}

impl Default for DemoMapping {
    fn default() -> Self {
        Self {
            time_compression: 90.0,
            duration_compression: 240.0,
            min_run: Duration::from_secs(2),
            max_run: Duration::from_secs(15),
            gpu_memory_bytes: 80 << 30,
        }
    }
}

/// One demo job made from a pod.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoJob {
    /// The pod it comes from.
    pub pod: String,
    /// Submit this long after the demo starts.
    pub submit_at: Duration,
    /// Run this long.
    pub run: Duration,
    /// GPUs asked (`--gres=gpu:N`).
    pub gpus: u32,
    /// `--mig-mem` hint in bytes, for fractional pods.
    pub mig_mem: Option<u64>,
}

impl DemoJob {
    /// The sbatch arguments for this job (the script is given separately).
    pub fn sbatch_args(&self) -> Vec<String> {
        let mut a = vec![format!("--job-name={}", self.pod), format!("--gres=gpu:{}", self.gpus)];
        if let Some(m) = self.mig_mem {
            a.push(format!("--mig-mem={}M", m.div_ceil(1 << 20)));
        }
        a
    }
}

/// Maps pods (ordered by creation) to demo jobs.
pub fn demo_jobs(pods: &[Pod], m: &DemoMapping) -> Vec<DemoJob> {
    let t0 = pods.first().map_or(0, |p| p.creation_time);
    pods.iter()
        .map(|p| {
            let run = p.duration().unwrap_or_default().as_secs_f64() / m.duration_compression;
            let run = Duration::from_secs_f64(run.clamp(m.min_run.as_secs_f64(), m.max_run.as_secs_f64()));
            let mig_mem =
                (p.num_gpu == 1 && p.gpu_milli < 1000).then(|| m.gpu_memory_bytes * u64::from(p.gpu_milli) / 1000);
            DemoJob {
                pod: p.name.clone(),
                submit_at: Duration::from_secs_f64((p.creation_time - t0) as f64 / m.time_compression),
                run,
                gpus: p.num_gpu,
                mig_mem,
            }
        })
        .collect()
}

/// Which jobs the demo submits: the trace slice and how it is compressed.
#[derive(Debug, Clone, clap::Args)]
pub struct SliceArgs {
    /// Trace slice (CSV in the trace's own format).
    #[arg(long)]
    pub trace: PathBuf,
    /// Trace seconds per demo second, for arrivals.
    #[arg(long, default_value_t = 90.0)]
    pub time_compression: f64,
    /// Trace seconds per demo second, for run times.
    #[arg(long, default_value_t = 240.0)]
    pub duration_compression: f64,
    /// Longest run time of a demo job, in seconds.
    #[arg(long, default_value_t = 15.0)]
    pub max_run: f64,
    /// Submit only the first N pods.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Each job's time limit (`sbatch --time`): its run time x this, rounded up to whole
    /// minutes, at least 1 minute.
    #[arg(long, default_value_t = 2.0)]
    pub time_limit_factor: f64,
}

impl SliceArgs {
    /// The demo jobs of the slice.
    ///
    /// # Errors
    /// The trace cannot be read or parsed.
    pub fn jobs(&self) -> Result<Vec<DemoJob>> {
        let text =
            std::fs::read_to_string(&self.trace).with_context(|| format!("cannot read {}", self.trace.display()))?;
        let mut pods = parse_pods(&text)?;
        if let Some(n) = self.limit {
            pods.truncate(n);
        }
        let mapping = DemoMapping {
            time_compression: self.time_compression,
            duration_compression: self.duration_compression,
            max_run: Duration::from_secs_f64(self.max_run),
            ..DemoMapping::default()
        };
        Ok(demo_jobs(&pods, &mapping))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CSV: &str =
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
openb-pod-0001,6000,12288,1,460,,LS,Running,100,3700,100
openb-pod-0002,6000,12288,1,1000,,LS,Succeeded,190,1000,200
openb-pod-0003,6000,12288,0,0,,LS,Succeeded,200,1000,200
openb-pod-0004,6000,12288,2,1000,V100M16|V100M32,LS,Pending,300,,
";

    #[test]
    fn parses_and_maps_pods() {
        let pods = parse_pods(CSV).unwrap();
        assert_eq!(pods.len(), 4);
        assert_eq!(pods[3].scheduled_time, None);
        let gpu = gpu_pods_between(&pods, 0, 1000);
        assert_eq!(
            gpu.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
            ["openb-pod-0001", "openb-pod-0002"]
        );
        let jobs = demo_jobs(&gpu, &DemoMapping::default());
        assert_eq!(jobs[0].submit_at, Duration::ZERO);
        assert_eq!(
            jobs[1].submit_at,
            Duration::from_secs(1),
            "90 trace seconds = 1 demo second"
        );
        assert_eq!(jobs[0].run, Duration::from_secs(15), "3600 s / 240 = 15 s");
        assert_eq!(jobs[1].run, Duration::from_secs_f64(800.0 / 240.0));
        assert_eq!(jobs[0].mig_mem, Some((80u64 << 30) * 460 / 1000));
        assert_eq!(jobs[1].mig_mem, None, "a whole-GPU pod has no hint");
        assert_eq!(jobs[0].sbatch_args()[2], "--mig-mem=37684M");
    }

    #[test]
    fn round_trips_csv() {
        let pods = parse_pods(CSV).unwrap();
        assert_eq!(parse_pods(&write_pods(&pods).unwrap()).unwrap(), pods);
    }
}
