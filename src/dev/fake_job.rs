//! `dynmig fake-job --mem 30G --seconds 5`: a stand-in for a GPU workload on the simulated
//! backend, for tests and the demo only. It finds its MIG profile (the job's per-node request
//! from Slurm's JSON, else the GPU index Slurm gave the job, `SLURM_JOB_GPUS` or
//! `CUDA_VISIBLE_DEVICES`, mapped through the node's gres.conf to the instance behind it) and
//! "allocates" `--mem` on it:
//! - more than the instance has: prints PyTorch's CUDA out-of-memory message to stderr, records
//!   a peak equal to the instance's memory, and fails with exit status 1, as a Python job with
//!   an uncaught `torch.OutOfMemoryError` does;
//! - otherwise: records the peak, sleeps `--seconds`, exits 0.
//!
//! The peak goes to `<state_dir>/nodes/<node>/peaks/<job>.json`, which the Epilog reads (with
//! a size bound, never following a link): the simulated counterpart of NVML's per-process
//! accounting (`nvmlDeviceGetAccountingStats`, `maxMemoryUsage`) on a real GPU.

use anyhow::{anyhow, Context, Result};
use dynmig_core::config::Config;
use dynmig_core::size::{format_size, MIB};
use dynmig_node::hooks::{job_gpu_indices, node_backend};
use dynmig_node::paths::NodePaths;
use dynmig_slurm::{SlurmApi, SlurmCommands};
use std::time::Duration;

/// The MIG instance of this job: (profile name, memory in bytes).
fn my_instance(config: &Config, node: &str, job: u32) -> Result<(String, u64)> {
    let models = dynmig_core::submit::SubmitPolicy::from_config(config).models;
    if let Ok(Some(j)) = SlurmCommands::from_config(config).job(job) {
        let typed = j.tres_per_node.typed().next().map(|(t, _)| t.to_string());
        if let Some((p, b)) = typed.and_then(|p| dynmig_core::estimate::profile_bytes(&models, &p).map(|b| (p, b))) {
            return Ok((p, b));
        }
    }
    let var = std::env::var("SLURM_JOB_GPUS")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .or_else(|| std::env::var("CUDA_VISIBLE_DEVICES").ok());
    let index = *job_gpu_indices(var.as_deref())?
        .first()
        .ok_or_else(|| anyhow!("no GPU: neither SLURM_JOB_GPUS nor CUDA_VISIBLE_DEVICES is set"))?;
    let paths = NodePaths::of(config, node);
    let text = std::fs::read_to_string(&paths.gres_conf)
        .with_context(|| format!("cannot read {}", paths.gres_conf.display()))?;
    let lines = dynmig_gpu::gres_conf::line_files(&text)?;
    let files = lines
        .get(index)
        .ok_or_else(|| anyhow!("GPU index {index} but gres.conf lists {} GPUs", lines.len()))?;
    let (_, inst) = node_backend(config, node)?
        .find_instance(files)?
        .ok_or_else(|| anyhow!("no MIG instance behind {files:?}"))?;
    Ok((
        inst.placed.profile.name.to_string(),
        inst.placed.profile.memory_mib * MIB,
    ))
}

/// Runs the fake job (module docs). Returns the exit status.
///
/// # Errors
/// Not inside a Slurm job with a MIG instance of a simulated node.
pub fn run(config: &Config, mem_bytes: u64, seconds: f64) -> Result<i32> {
    let node =
        std::env::var("SLURMD_NODENAME").context("SLURMD_NODENAME is not set: run fake-job inside a Slurm job")?;
    let job: u32 = std::env::var("SLURM_JOB_ID")
        .context("SLURM_JOB_ID is not set")?
        .parse()
        .context("SLURM_JOB_ID")?;
    let (profile, limit) = my_instance(config, &node, job)?;
    let oom = mem_bytes > limit;
    let record = serde_json::json!({
        "job_id": job,
        "profile": profile,
        "peak_bytes": mem_bytes.min(limit),
        "limit_bytes": limit,
    });
    let path = NodePaths::of(config, &node).peak(job);
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
        return Ok(1);
    }
    println!(
        "dynmig fake-job: job {job} holds {} of {profile} ({})",
        format_size(mem_bytes),
        format_size(limit)
    );
    std::thread::sleep(Duration::from_secs_f64(seconds.max(0.0)));
    Ok(0)
}
