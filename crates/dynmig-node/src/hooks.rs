//! Slurm Prolog and Epilog entry points.
//!
//! slurmd runs them as root on the node with `SLURMD_NODENAME`, `SLURM_JOB_ID`,
//! `SLURM_JOB_UID`, `SLURM_JOB_GPUS` (the indices of the job's GPU GRES, in the order dynmig
//! writes gres.conf) and, for the Epilog, the job's end ([`EndedJob`]). These variables come
//! from slurmd, not from the user. Neither hook reads slurmctld: at thousands of short jobs
//! an hour, one read per job was a third of slurmctld's RPCs (docs/results/queue-2026-11-28.md).
//!
//! - **Prolog**: checks that each allocated MIG device exists (its device files, and an
//!   instance of the GPU backend behind them) and claims the instance for the job. A missing
//!   device makes the Prolog fail: Slurm then drains the node and requeues the job.
//! - **Epilog**: releases the job's instances, closes its energy account, records the run in
//!   the history and restarts it on a larger profile if it ran out of memory
//!   ([`crate::oom`]), and wakes the agent if it waits for this node's jobs to end.

use crate::as_user::UserIds;
use crate::oom::{self, Peak};
use crate::paths::{event_log, NodePaths};
use anyhow::{anyhow, bail, Context, Result};
use dynmig_core::config::Config;
use dynmig_core::estimate::{next_larger_profile, profile_bytes};
use dynmig_core::geometry::GpuModel;
use dynmig_core::protocol::event::{Event, EventKind};
use dynmig_gpu::energy::Ledger;
use dynmig_gpu::{open_backend, BackendSettings, GpuBackend};
use dynmig_history::JobRecord;
use std::path::PathBuf;
use std::time::Duration;

/// What slurmd tells a Prolog or Epilog about the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookEnv {
    /// `SLURMD_NODENAME`.
    pub node: String,
    /// `SLURM_JOB_ID`.
    pub job: u32,
    /// `SLURM_JOB_UID`, if set.
    pub uid: Option<u32>,
    /// `SLURM_JOB_GPUS`: GPU GRES indices (empty: no GPU).
    pub gpus: Vec<usize>,
}

impl HookEnv {
    /// Reads the hook's environment through `get` (`std::env::var` in production).
    ///
    /// # Errors
    /// A variable is missing or not a number.
    pub fn read(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let need = |k: &str| get(k).ok_or_else(|| anyhow!("{k} is not set: run this as Slurm's Prolog/Epilog"));
        let node = need("SLURMD_NODENAME")?;
        let job = need("SLURM_JOB_ID")?
            .trim()
            .parse()
            .map_err(|_| anyhow!("SLURM_JOB_ID is not a job id"))?;
        let uid = get("SLURM_JOB_UID").and_then(|u| u.trim().parse().ok());
        let gpus = job_gpu_indices(get("SLURM_JOB_GPUS").as_deref())?;
        Ok(Self { node, job, uid, gpus })
    }
}

/// The GPU indices in `SLURM_JOB_GPUS` (`"0,2"`); empty for none.
///
/// # Errors
/// Not a comma-separated list of indices.
pub fn job_gpu_indices(var: Option<&str>) -> Result<Vec<usize>> {
    let Some(v) = var.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(Vec::new());
    };
    v.split(',')
        .map(|s| {
            s.trim().parse().map_err(|_| {
                anyhow!(
                    "SLURM_JOB_GPUS='{}' is not a list of indices",
                    dynmig_core::protocol::clip(v, 100)
                )
            })
        })
        .collect()
}

/// The backend of `node` as its node group says.
///
/// # Errors
/// The node is in no group, or the backend cannot be opened.
pub fn node_backend(config: &Config, node: &str) -> Result<Box<dyn GpuBackend>> {
    let g = config.group_of(node).ok_or_else(|| {
        anyhow!(
            "node '{}' is in no [[node_group]] of the config",
            dynmig_core::protocol::clip(node, 100)
        )
    })?;
    let paths = NodePaths::of(config, node);
    std::fs::create_dir_all(&paths.state_dir)?;
    open_backend(
        g.backend,
        &BackendSettings {
            model: g.gpu_model,
            gpus: g.gpus,
            allow_mig_mode_change: g.allow_mig_mode_change,
            sim_state_file: paths.sim_state(),
            sim_device_dir: paths.device_dir.clone(),
            nvml: g.nvml.for_node(node),
        },
    )
    .with_context(|| format!("node {node}: GPU backend"))
}

/// The Prolog: check and claim the job's MIG devices.
///
/// # Errors
/// A device of the job does not exist or no instance is behind it (the Prolog then exits
/// non-zero).
pub fn prolog(config: &Config, env: &HookEnv) -> Result<()> {
    if env.gpus.is_empty() {
        return Ok(());
    }
    let paths = NodePaths::of(config, &env.node);
    let text = dynmig_host::fs::read_text_bounded(&paths.gres_conf, 1 << 20)
        .with_context(|| format!("cannot read {}", paths.gres_conf.display()))?
        .ok_or_else(|| anyhow!("{} does not exist", paths.gres_conf.display()))?;
    let lines = dynmig_gpu::gres_conf::line_files(&text)?;
    let events = event_log(config);
    // Check the device files before opening the backend: opening the simulated backend puts
    // missing device files back, which would hide the fault this check is for.
    let mut wanted: Vec<(usize, &Vec<PathBuf>)> = Vec::new();
    for &i in &env.gpus {
        let files = lines
            .get(i)
            .ok_or_else(|| anyhow!("GPU index {i} but gres.conf lists {} GPUs", lines.len()))?;
        if let Some(missing) = files.iter().find(|f| !f.exists()) {
            events.append(
                &Event::at(dynmig_host::clock::now_secs_f64(), EventKind::PrologFailed, &env.node)
                    .job(env.job.into())
                    .detail(&format!("{} missing", missing.display()))
                    .encode(),
            );
            bail!(
                "job {}: MIG device {} (GPU index {i}) does not exist",
                env.job,
                missing.display()
            );
        }
        wanted.push((i, files));
    }
    let mut backend = node_backend(config, &env.node)?;
    let ledger = Ledger::in_dir(&paths.state_dir);
    let mut claimed = Vec::new();
    let mut held = Vec::new();
    for (i, files) in wanted {
        let (gpu, inst) = backend
            .find_instance(files)?
            .ok_or_else(|| anyhow!("job {}: no MIG instance behind GPU index {i} ({files:?})", env.job))?;
        backend.claim(gpu, inst.gi_id, env.job)?;
        held.push((gpu, inst.gi_id));
        claimed.push(format!("{}@gpu{gpu}", inst.placed));
    }
    if let Err(e) = ledger.job_started(env.job, &held) {
        eprintln!("dynmig prolog: energy ledger: {e}");
    }
    if let Some(dir) = &paths.dcgm_job_map {
        if let Err(e) = crate::dcgm::job_started(dir, env.job, &held) {
            eprintln!("dynmig prolog: dcgm-exporter job mapping in {}: {e}", dir.display());
        }
    }
    events.append(
        &Event::at(dynmig_host::clock::now_secs_f64(), EventKind::JobStart, &env.node)
            .job(env.job.into())
            .detail(&claimed.join(" "))
            .encode(),
    );
    Ok(())
}

/// What the Epilog's environment says about the job that ended. slurmd sets these from the
/// job's credential and its end (`prep_script_slurmd.c` of 22.05.8, 24.11.5 and 26.05.3:
/// `SLURM_JOB_UID`, `SLURM_JOB_GID`, `SLURM_JOB_USER`, `SLURM_JOB_WORK_DIR`,
/// `SLURM_JOB_EXIT_CODE2`, and from the credential `SLURM_JOB_RESTART_COUNT`,
/// `SLURM_JOB_STDERR`, `SLURM_JOB_STDOUT`), after the SPANK plugins' variables, which carry
/// a `SPANK_` prefix: a user cannot set them. So the Epilog reads nothing from slurmctld: the
/// job's name and dynmig's decision record, which no Epilog variable holds, are added by the
/// history store (docs/history.md, "Job names").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndedJob {
    /// `SLURM_JOB_UID`.
    pub uid: u32,
    /// `SLURM_JOB_GID`.
    pub gid: u32,
    /// `SLURM_JOB_USER` (empty when unset).
    pub user: String,
    /// The exit code of `SLURM_JOB_EXIT_CODE2` (`code:signal`); 128 + the signal for a job
    /// killed by one; 0 when unset (slurmd sets it only when the job's end is known).
    pub exit_status: i32,
    /// `SLURM_JOB_RESTART_COUNT` (0 when unset: the first run).
    pub restarts: u32,
    /// `SLURM_JOB_STDERR`, `SLURM_JOB_STDOUT`: the paths the user gave, patterns unexpanded
    /// (empty when not given).
    pub std_err: String,
    /// See `std_err`.
    pub std_out: String,
    /// `SLURM_JOB_WORK_DIR`.
    pub work_dir: String,
}

impl EndedJob {
    /// Reads the Epilog's environment through `get` (`std::env::var` in production).
    ///
    /// # Errors
    /// `SLURM_JOB_UID` or `SLURM_JOB_GID` is missing or not a number (a missing id is never
    /// taken for root), or `SLURM_JOB_EXIT_CODE2` or `SLURM_JOB_RESTART_COUNT` is malformed.
    pub fn read(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let id = |k: &str| -> Result<u32> {
            get(k)
                .ok_or_else(|| anyhow!("{k} is not set: the job's run is recorded for no one"))?
                .trim()
                .parse()
                .map_err(|_| anyhow!("{k} is not a number"))
        };
        let exit_status = match get("SLURM_JOB_EXIT_CODE2") {
            None => 0,
            Some(v) => {
                let (code, signal) = v
                    .trim()
                    .split_once(':')
                    .and_then(|(c, s)| Some((c.parse::<i32>().ok()?, s.parse::<i32>().ok()?)))
                    .ok_or_else(|| anyhow!("SLURM_JOB_EXIT_CODE2 is not CODE:SIGNAL"))?;
                if signal > 0 {
                    128 + signal
                } else {
                    code
                }
            }
        };
        let restarts = match get("SLURM_JOB_RESTART_COUNT") {
            None => 0,
            Some(v) => v
                .trim()
                .parse()
                .map_err(|_| anyhow!("SLURM_JOB_RESTART_COUNT is not a number"))?,
        };
        Ok(Self {
            uid: id("SLURM_JOB_UID")?,
            gid: id("SLURM_JOB_GID")?,
            user: get("SLURM_JOB_USER").unwrap_or_default(),
            exit_status,
            restarts,
            std_err: get("SLURM_JOB_STDERR").unwrap_or_default(),
            std_out: get("SLURM_JOB_STDOUT").unwrap_or_default(),
            work_dir: get("SLURM_JOB_WORK_DIR").unwrap_or_default(),
        })
    }
}

/// The Epilog (module docs). Backend, history and environment errors are reported on stderr
/// but do not fail it: a failing Epilog drains the node. It reads nothing from slurmctld
/// ([`EndedJob`]).
///
/// # Errors
/// None in practice; the signature keeps room for a fatal error.
pub fn epilog(config: &Config, env: &HookEnv, ended: Result<EndedJob>, exe: &std::path::Path) -> Result<()> {
    let paths = NodePaths::of(config, &env.node);
    let mut backend = match node_backend(config, &env.node) {
        Ok(b) => Some(b),
        Err(e) => {
            eprintln!("dynmig epilog: {e:#}");
            None
        }
    };
    let mut end = Event::at(dynmig_host::clock::now_secs_f64(), EventKind::JobEnd, &env.node).job(env.job.into());
    // The instances the Prolog claimed for the job (its energy account), and their profile.
    let mut claimed = false;
    let mut claimed_profile = None;
    match Ledger::in_dir(&paths.state_dir).finish_job(env.job) {
        Ok(Some(j)) => {
            claimed = true;
            end = end.detail(&format!("{:.0} J", j.joules));
            claimed_profile = backend.as_ref().and_then(|b| profile_of(b.as_ref(), &j.instances));
        }
        Ok(None) => {}
        Err(e) => {
            claimed = true; // unknown: record it if it is a MIG job
            eprintln!("dynmig epilog: energy ledger: {e}");
        }
    }
    if let Some(b) = backend.as_mut() {
        if let Err(e) = b.release_job(env.job) {
            eprintln!("dynmig epilog: releasing job {}: {e}", env.job);
        }
    }
    event_log(config).append(&end.encode());
    if let Some(dir) = &paths.dcgm_job_map {
        if let Err(e) = crate::dcgm::job_ended(dir, env.job) {
            eprintln!("dynmig epilog: dcgm-exporter job mapping in {}: {e}", dir.display());
        }
    }
    let recorded = ended.and_then(|ended| after_job(config, env, &ended, exe, claimed, claimed_profile));
    if let Err(e) = recorded {
        eprintln!("dynmig epilog: job {}: history/out-of-memory: {e:#}", env.job);
    }
    if paths.waiting_marker().exists() {
        if let Some(pid) = crate::pidfile::live_own(&paths.agent_pid(), "dynmig") {
            crate::pidfile::signal(pid, libc::SIGUSR1);
        }
    }
    Ok(())
}

/// The MIG profile of the first of `instances` (`(gpu, gi_id)`, as the energy ledger keeps
/// them) that is a MIG instance on `backend` now; `None` for whole GPUs or instances gone.
fn profile_of(backend: &dyn GpuBackend, instances: &[(u32, u32)]) -> Option<String> {
    instances.iter().find_map(|&(gpu, gi)| {
        backend
            .gpu(gpu)
            .ok()?
            .instance(gi)
            .filter(|_| gi != dynmig_gpu::WHOLE_GPU)
            .map(|i| i.placed.profile.name.to_string())
    })
}

#[derive(serde::Deserialize)]
struct PeakFile {
    peak_bytes: u64,
    limit_bytes: u64,
    profile: String,
}

/// Records the run in the history and starts the restart helper if it ran out of memory.
///
/// The profile is the one of the instance the Prolog `claimed` (`claimed_profile`), else the
/// one in the job's peak file. A job with no GPU in `SLURM_JOB_GPUS`, no peak file and no
/// claimed instance is no MIG job: nothing is recorded. The record's job name, estimate and
/// estimate source are left empty: the history store adds them from Slurm's job record in one
/// read for many jobs (docs/history.md, "Job names").
fn after_job(
    config: &Config,
    env: &HookEnv,
    ended: &EndedJob,
    exe: &std::path::Path,
    claimed: bool,
    claimed_profile: Option<String>,
) -> Result<()> {
    let paths = NodePaths::of(config, &env.node);
    let models = dynmig_core::submit::SubmitPolicy::from_config(config).models;
    let peak: Option<PeakFile> = dynmig_host::fs::read_bounded(&paths.peak(env.job), 4096)
        .ok()
        .flatten()
        .and_then(|b| serde_json::from_slice(&b).ok());
    if env.gpus.is_empty() && peak.is_none() && !claimed {
        return Ok(());
    }
    let profile = claimed_profile
        .or_else(|| peak.as_ref().map(|p| p.profile.clone()))
        .filter(|p| profile_bytes(&models, p).is_some());
    let Some(profile) = profile else {
        return Ok(()); // not a MIG job
    };
    let limit = peak
        .as_ref()
        .map(|p| p.limit_bytes)
        .or_else(|| profile_bytes(&models, &profile))
        .unwrap_or(0);
    let tail = if ended.exit_status != 0 {
        // `%x` (the job name) is not known here: such a path is not read (oom::stderr_path).
        oom::stderr_path(
            oom::stderr_of(&ended.std_err, &ended.std_out),
            &ended.work_dir,
            env.job,
            &ended.user,
            None,
            &env.node,
        )
        .map(|p| {
            oom::stderr_tail(
                UserIds {
                    uid: ended.uid,
                    gid: ended.gid,
                },
                &p,
            )
        })
        .unwrap_or_default()
    } else {
        String::new()
    };
    let est = &config.estimator;
    let why = oom::detect(
        ended.exit_status,
        peak.as_ref().map(|p| Peak {
            peak_bytes: p.peak_bytes,
            limit_bytes: limit,
        }),
        &tail,
        est.oom_peak_fraction,
    );
    let record = JobRecord {
        job_id: env.job.into(),
        restart: ended.restarts,
        node: env.node.clone(),
        uid: ended.uid,
        user: ended.user.clone(),
        job_name: String::new(),
        profile: profile.clone(),
        estimate_bytes: 0,
        source: String::new(),
        peak_bytes: peak.as_ref().map_or(0, |p| p.peak_bytes),
        limit_bytes: limit,
        exit_status: ended.exit_status,
        oom: why.is_some(),
        end_time: dynmig_history::now(),
    };
    // The restart first: a record that cannot be spooled (a full disk) must not cost the job
    // its restart.
    if let Some(why) = &why {
        start_restart(config, exe, env, &profile, why, ended.restarts, &models);
    }
    let spooled = dynmig_history::spool::put(&paths.history_spool, &record)?;
    // To the history server or into Slurm's accounting (docs/history.md), this job's record
    // first; records an earlier Epilog could not deliver are retried. The history server gets
    // 5 s: an Epilog that waits on an unreachable server holds the job in COMPLETING.
    let f = dynmig_history::stores::deliver(config, &paths.history_spool, Some(&spooled), Duration::from_secs(5));
    if let Some(f) = f.filter(|f| f.pending + f.refused > 0) {
        eprintln!(
            "dynmig epilog: job {}: {} history records stay spooled in {}",
            env.job,
            f.pending + f.refused,
            paths.history_spool.display()
        );
    }
    Ok(())
}

fn start_restart(
    config: &Config,
    exe: &std::path::Path,
    env: &HookEnv,
    cur: &str,
    why: &str,
    restarts: u32,
    models: &[&'static GpuModel],
) {
    let job = env.job;
    let max = config.estimator.max_oom_restarts;
    let blocked = next_larger_profile(models, cur)
        .filter(|_| restarts < max)
        .and_then(|n| {
            oom::release_blocks_restart(
                dynmig_slurm::plugin::SlurmVersion::running(&config.paths.scontrol),
                n.name,
            )
        });
    let (to, msg) = match next_larger_profile(models, cur) {
        Some(_) if blocked.is_some() => (
            None,
            format!(
                "dynmig: job {job} ran out of GPU memory on {cur} ({why}); {}",
                blocked.unwrap_or_default()
            ),
        ),
        Some(n) if restarts < max => (
            Some(n.name),
            format!(
                "dynmig: job {job} ran out of GPU memory on {cur} ({why}); requeued on {} (restart {} of {max})",
                n.name,
                restarts + 1
            ),
        ),
        Some(_) => (None, format!("dynmig: job {job} ran out of GPU memory on {cur} ({why}); not requeued: it was restarted {restarts} times (estimator.max_oom_restarts = {max})")),
        None => (None, format!("dynmig: job {job} ran out of GPU memory on {cur} ({why}), the largest profile; not requeued")),
    };
    event_log(config).append(
        &Event::at(dynmig_host::clock::now_secs_f64(), EventKind::OomRestart, &env.node)
            .job(job.into())
            .detail(&msg)
            .encode(),
    );
    let mut cmd = std::process::Command::new(exe);
    if let Ok(c) = std::env::var("DYNMIG_CONFIG") {
        cmd.env("DYNMIG_CONFIG", c);
    }
    cmd.args([
        "oom-restart",
        "--node",
        &env.node,
        "--job",
        &job.to_string(),
        "--message",
        &msg,
    ]);
    if let Some(to) = to {
        cmd.args(["--to", to]);
    }
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // Its own session: slurmd may kill the Epilog's process group when the Epilog exits.
    // SAFETY: setsid is async-signal-safe.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    if let Err(e) = dynmig_host::process::spawn(&mut cmd) {
        eprintln!("dynmig epilog: cannot start the restart of job {job}: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hook_environment() {
        let env = |k: &str| match k {
            "SLURMD_NODENAME" => Some("n1".to_string()),
            "SLURM_JOB_ID" => Some("12".to_string()),
            "SLURM_JOB_UID" => Some("1000".to_string()),
            "SLURM_JOB_GPUS" => Some("0,2".to_string()),
            _ => None,
        };
        let e = HookEnv::read(env).unwrap();
        assert_eq!(
            (e.node.as_str(), e.job, e.uid, e.gpus),
            ("n1", 12, Some(1000), vec![0, 2])
        );
        assert!(HookEnv::read(|_| None).is_err());
        assert!(job_gpu_indices(Some("x")).is_err());
        assert!(job_gpu_indices(Some("")).unwrap().is_empty());
    }
}
