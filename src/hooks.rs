//! Slurm Prolog and Epilog entry points, and node initialisation.
//!
//! slurmd runs the Prolog and Epilog as root on the node, with `SLURMD_NODENAME`,
//! `SLURM_JOB_ID` and `SLURM_JOB_GPUS` (the indices of the GPU GRES allocated to the job) in
//! the environment. Slurm numbers a node's GPU GRES in the order of the gres.conf lines, which
//! dynmig writes itself ([`crate::gres_conf::render`]), so index `i` is the `i`-th `File=` line.
//!
//! - **Prolog**: checks that each allocated MIG device exists (its device file, and an
//!   instance of the GPU backend behind it) and marks the instance busy (simulated backend:
//!   the job is attached, so the instance cannot be destroyed). A missing device makes the
//!   Prolog fail: Slurm then drains the node and requeues the job.
//! - **Epilog**: releases the job's instances, and if the node is drained by dynmig for a
//!   repartition, wakes the node agent at once (SIGUSR1 to the pid in its pid file), so the
//!   new layout is applied as soon as the last job has gone, with no polling delay.

use crate::agent::REASON_PREFIX;
use crate::context::Ctx;
use crate::events::Event;
use anyhow::{anyhow, bail, Context, Result};
use std::path::{Path, PathBuf};

/// The `File=` (or first of `MultipleFiles=`) of each GPU line of a gres.conf, in order.
pub fn gres_conf_files(text: &str) -> Vec<PathBuf> {
    crate::gres_conf::line_files(text)
        .into_iter()
        .filter_map(|f| f.into_iter().next())
        .collect()
}

/// The GPU indices in `SLURM_JOB_GPUS` (`"0,2"`); empty for none.
pub fn job_gpu_indices(var: Option<&str>) -> Result<Vec<usize>> {
    let Some(v) = var.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(Vec::new());
    };
    v.split(',')
        .map(|s| {
            s.trim()
                .parse()
                .map_err(|_| anyhow!("SLURM_JOB_GPUS='{v}' is not a list of indices"))
        })
        .collect()
}

fn env(name: &str) -> Result<String> {
    std::env::var(name).map_err(|_| anyhow!("{name} is not set: run this as Slurm's Prolog/Epilog"))
}

/// The Prolog: check and claim the job's MIG devices.
///
/// # Errors
/// A device of the job does not exist (the Prolog then exits non-zero).
pub fn prolog(ctx: &Ctx) -> Result<()> {
    let node = env("SLURMD_NODENAME")?;
    let job: u32 = env("SLURM_JOB_ID")?.parse().context("SLURM_JOB_ID")?;
    let indices = job_gpu_indices(std::env::var("SLURM_JOB_GPUS").ok().as_deref())?;
    if indices.is_empty() {
        return Ok(());
    }
    let paths = ctx.node_paths(&node);
    let text = std::fs::read_to_string(&paths.gres_conf)
        .with_context(|| format!("cannot read {}", paths.gres_conf.display()))?;
    if ctx.group(&node)?.backend == dynmig_core::config::Backend::Nvml {
        return crate::power::prolog_nvml(ctx, &node, job, &text, &indices);
    }
    let files = gres_conf_files(&text);
    // Check the devices before opening the backend: opening the simulated backend puts
    // missing device files back, which would hide the fault this check is for.
    let mut wanted = Vec::new();
    for i in indices {
        let file = files
            .get(i)
            .ok_or_else(|| anyhow!("GPU index {i} but gres.conf lists {} GPUs", files.len()))?;
        if !Path::new(file).exists() {
            ctx.events().log(
                &Event::new("prolog_failed", &node)
                    .job(job.into())
                    .detail(&format!("{} missing", file.display())),
            );
            bail!(
                "job {job}: MIG device {} (GPU index {i}) does not exist",
                file.display()
            );
        }
        wanted.push(file);
    }
    let backend = ctx.simulated_backend(&node)?;
    let mut claimed = Vec::new();
    for file in wanted {
        let (gpu, inst) = backend
            .instance_by_device_file(file)?
            .ok_or_else(|| anyhow!("job {job}: no MIG instance behind {}", file.display()))?;
        backend.attach_job(gpu, inst.gi_id, job)?;
        crate::power::record_job(&paths.state_dir, job, gpu, inst.gi_id);
        claimed.push(format!("{}@gpu{gpu}", inst.placed));
    }
    ctx.events().log(
        &Event::new("job_start", &node)
            .job(job.into())
            .detail(&claimed.join(" ")),
    );
    Ok(())
}

/// The Epilog: release the job's instances and wake the agent if a repartition waits.
///
/// # Errors
/// The environment is not a Slurm Epilog's. Backend and Slurm errors are reported but do not
/// fail the Epilog (a failing Epilog drains the node).
pub fn epilog(ctx: &Ctx) -> Result<()> {
    let node = env("SLURMD_NODENAME")?;
    let job: u32 = env("SLURM_JOB_ID")?.parse().context("SLURM_JOB_ID")?;
    if let Ok(b) = ctx.simulated_backend(&node) {
        if let Err(e) = b.detach_job_everywhere(job) {
            eprintln!("dynmig epilog: releasing job {job}: {e}");
        }
    }
    let mut end = Event::new("job_end", &node).job(job.into());
    if let Some(energy) = crate::power::finish_job(&ctx.node_paths(&node).state_dir, job) {
        end = end.detail(&energy);
    }
    ctx.events().log(&end);
    crate::oom::after_job(ctx, &node, job);
    match ctx.slurm().node(&node) {
        Ok(Some(n)) if n.reason.starts_with(REASON_PREFIX) => {
            wake_agent(&ctx.node_paths(&node).state_dir.join("agent.pid"))
        }
        Ok(_) => {}
        Err(e) => eprintln!("dynmig epilog: reading node {node}: {e:#}"),
    }
    Ok(())
}

/// Sends SIGUSR1 to the agent whose pid is in `pid_file`, if it runs.
pub fn wake_agent(pid_file: &Path) {
    let Some(pid) = std::fs::read_to_string(pid_file)
        .ok()
        .and_then(|t| t.trim().parse::<i32>().ok())
    else {
        return;
    };
    let _ = std::process::Command::new("kill")
        .args(["-USR1", &pid.to_string()])
        .status();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gres_conf_order_and_indices() {
        let text = "# generated by dynmig; do not edit\nName=gpu Type=3g.40gb File=/d/gpu0/gi1\nName=gpu Type=2g.20gb MultipleFiles=/d/gpu0/gi2,/dev/nvidia0\n";
        assert_eq!(
            gres_conf_files(text),
            vec![PathBuf::from("/d/gpu0/gi1"), PathBuf::from("/d/gpu0/gi2")]
        );
        assert_eq!(job_gpu_indices(Some("0,2")).unwrap(), vec![0, 2]);
        assert!(job_gpu_indices(Some("")).unwrap().is_empty());
        assert!(job_gpu_indices(Some("x")).is_err());
    }
}
