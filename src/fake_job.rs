//! `dynmig fake-job --mem 30G --seconds 5`: a stand-in for a GPU workload on the simulated
//! backend. It finds its MIG profile (the job's `TresPerNode`, else the instance the Prolog
//! attached the job to, else the GPU
//! index Slurm gave the job, `SLURM_JOB_GPUS` or `CUDA_VISIBLE_DEVICES`, mapped through the
//! node's gres.conf to the instance's device file) and "allocates" `--mem` on it:
//! - more than the instance has: prints PyTorch's CUDA out-of-memory message to stderr,
//!   records a peak equal to the instance's memory, and exits with [`OOM_EXIT`] at once;
//! - otherwise: records the peak, sleeps `--seconds`, exits 0.
//!
//! The peak is a [`PeakRecord`] in `<state_dir>/nodes/<node>/peaks/<job>.json`, which the
//! Epilog reads ([`crate::oom`]): the simulated counterpart of NVML's per-process accounting
//! (`nvmlDeviceGetAccountingStats`, `maxMemoryUsage`) on a real GPU.

use crate::backend::GpuBackend;
use crate::context::Ctx;
use crate::hooks::{gres_conf_files, job_gpu_indices};
use anyhow::{anyhow, Context, Result};
use dynmig_core::size::{format_size, MIB};
use dynmig_core::submit::SubmitPolicy;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Exit status of a fake job that ran out of GPU memory.
pub const OOM_EXIT: i32 = 97;

/// A job's peak GPU memory on its instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeakRecord {
    /// Slurm job id.
    pub job_id: u64,
    /// MIG profile of the instance.
    pub profile: String,
    /// Peak bytes.
    pub peak_bytes: u64,
    /// Instance memory, bytes.
    pub limit_bytes: u64,
    /// Whether an allocation failed for lack of memory.
    pub oom: bool,
}

/// Where the peak of `job` on `node` is kept.
pub fn peak_path(ctx: &Ctx, node: &str, job: u64) -> PathBuf {
    ctx.node_paths(node).state_dir.join("peaks").join(format!("{job}.json"))
}

/// Reads a job's peak record, if the job wrote one.
pub fn read_peak(path: &Path) -> Option<PeakRecord> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// The MIG instance of this job: (profile name, memory in bytes). First the instance the
/// Prolog attached the job to (the Prolog sees `SLURM_JOB_GPUS`; a 22.05 batch step gets only
/// `CUDA_VISIBLE_DEVICES` renumbered from 0), else the GPU index in the environment.
fn my_instance(ctx: &Ctx, node: &str, job: u64) -> Result<(String, u64)> {
    // The profile Slurm allocated (TresPerNode): on the local cluster the fake device files
    // all share one device number, so Slurm's GPU indices need not follow gres.conf order.
    let out = std::process::Command::new(&ctx.config.paths.scontrol)
        .args(["show", "job", &job.to_string()])
        .output();
    if let Ok(out) = out {
        let facts = crate::oom::parse_job(&String::from_utf8_lossy(&out.stdout));
        let models = SubmitPolicy::from_config(&ctx.config).models;
        if let Some((p, b)) = facts
            .profile
            .and_then(|p| dynmig_core::estimate::profile_bytes(&models, &p).map(|b| (p, b)))
        {
            return Ok((p, b));
        }
    }
    let backend = ctx.simulated_backend(node)?;
    for gpu in backend.gpus()? {
        for inst in &gpu.instances {
            if backend
                .jobs_on(gpu.index, inst.gi_id)?
                .iter()
                .any(|j| u64::from(*j) == job)
            {
                return Ok((
                    inst.placed.profile.name.to_string(),
                    inst.placed.profile.memory_mib * MIB,
                ));
            }
        }
    }
    let var = std::env::var("SLURM_JOB_GPUS")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .or_else(|| std::env::var("CUDA_VISIBLE_DEVICES").ok());
    let index = *job_gpu_indices(var.as_deref())?
        .first()
        .ok_or_else(|| anyhow!("no GPU: neither SLURM_JOB_GPUS nor CUDA_VISIBLE_DEVICES is set"))?;
    let paths = ctx.node_paths(node);
    let text = std::fs::read_to_string(&paths.gres_conf)
        .with_context(|| format!("cannot read {}", paths.gres_conf.display()))?;
    let files = gres_conf_files(&text);
    let file = files
        .get(index)
        .ok_or_else(|| anyhow!("GPU index {index} but gres.conf lists {} GPUs", files.len()))?;
    let (_, inst) = ctx
        .simulated_backend(node)?
        .instance_by_device_file(file)?
        .ok_or_else(|| anyhow!("no MIG instance behind {}", file.display()))?;
    Ok((
        inst.placed.profile.name.to_string(),
        inst.placed.profile.memory_mib * MIB,
    ))
}

/// Runs the fake job (module docs). Returns the exit status.
///
/// # Errors
/// Not inside a Slurm job with a MIG instance of a simulated node.
pub fn run(ctx: &Ctx, mem_bytes: u64, seconds: f64) -> Result<i32> {
    let node =
        std::env::var("SLURMD_NODENAME").context("SLURMD_NODENAME is not set: run fake-job inside a Slurm job")?;
    let job: u64 = std::env::var("SLURM_JOB_ID")
        .context("SLURM_JOB_ID is not set")?
        .parse()
        .context("SLURM_JOB_ID")?;
    let (profile, limit) = my_instance(ctx, &node, job)?;
    let oom = mem_bytes > limit;
    let record = PeakRecord {
        job_id: job,
        profile: profile.clone(),
        peak_bytes: mem_bytes.min(limit),
        limit_bytes: limit,
        oom,
    };
    let path = peak_path(ctx, &node, job);
    std::fs::create_dir_all(path.parent().expect("has a parent"))?;
    std::fs::write(&path, serde_json::to_vec(&record)?)?;
    if oom {
        // PyTorch's message (torch/csrc/cuda/CUDACachingAllocator), as jobs print it.
        eprintln!(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {} (GPU 0; {} total capacity; \
             0 bytes already allocated; {} free; MIG instance {profile})",
            format_size(mem_bytes),
            format_size(limit),
            format_size(limit)
        );
        return Ok(OOM_EXIT);
    }
    println!(
        "dynmig fake-job: job {job} holds {} of {profile} ({})",
        format_size(mem_bytes),
        format_size(limit)
    );
    std::thread::sleep(Duration::from_secs_f64(seconds.max(0.0)));
    Ok(0)
}
