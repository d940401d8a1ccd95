//! Slurm Prolog and Epilog entry points.
//!
//! slurmd runs them as root on the node with `SLURMD_NODENAME`, `SLURM_JOB_ID`,
//! `SLURM_JOB_UID` and, for the Prolog, `SLURM_JOB_GPUS` (the indices of the job's GPU GRES,
//! in the order dynmig writes gres.conf). These variables come from slurmd, not from the
//! user; everything else about the job is read from Slurm's JSON.
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
use dynmig_core::config::{Config, HistoryStore};
use dynmig_core::estimate::{next_larger_profile, profile_bytes};
use dynmig_core::geometry::GpuModel;
use dynmig_core::gres::TresList;
use dynmig_core::protocol::decision::DecisionRecord;
use dynmig_core::protocol::event::{Event, EventKind};
use dynmig_gpu::energy::Ledger;
use dynmig_gpu::{open_backend, BackendSettings, GpuBackend};
use dynmig_history::JobRecord;
use dynmig_slurm::SlurmApi;
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

/// The Epilog (module docs). Backend, history and Slurm errors are reported on stderr but do
/// not fail it: a failing Epilog drains the node.
///
/// # Errors
/// None in practice; the signature keeps room for a fatal error.
pub fn epilog(config: &Config, env: &HookEnv, slurm: &dyn SlurmApi, exe: &std::path::Path) -> Result<()> {
    let paths = NodePaths::of(config, &env.node);
    match node_backend(config, &env.node) {
        Ok(mut b) => {
            if let Err(e) = b.release_job(env.job) {
                eprintln!("dynmig epilog: releasing job {}: {e}", env.job);
            }
        }
        Err(e) => eprintln!("dynmig epilog: {e:#}"),
    }
    let mut end = Event::at(dynmig_host::clock::now_secs_f64(), EventKind::JobEnd, &env.node).job(env.job.into());
    // Whether the Prolog claimed an instance for the job (its energy account).
    let mut claimed = false;
    match Ledger::in_dir(&paths.state_dir).finish_job(env.job) {
        Ok(Some(j)) => {
            claimed = true;
            end = end.detail(&format!("{j:.0} J"));
        }
        Ok(None) => {}
        Err(e) => {
            claimed = true; // unknown: read Slurm as for a MIG job
            eprintln!("dynmig epilog: energy ledger: {e}");
        }
    }
    event_log(config).append(&end.encode());
    if let Some(dir) = &paths.dcgm_job_map {
        if let Err(e) = crate::dcgm::job_ended(dir, env.job) {
            eprintln!("dynmig epilog: dcgm-exporter job mapping in {}: {e}", dir.display());
        }
    }
    if let Err(e) = after_job(config, env, slurm, exe, claimed) {
        eprintln!("dynmig epilog: job {}: history/out-of-memory: {e:#}", env.job);
    }
    if paths.waiting_marker().exists() {
        if let Some(pid) = crate::pidfile::live_own(&paths.agent_pid(), "dynmig") {
            crate::pidfile::signal(pid, libc::SIGUSR1);
        }
    }
    Ok(())
}

#[derive(serde::Deserialize)]
struct PeakFile {
    peak_bytes: u64,
    limit_bytes: u64,
    profile: String,
}

/// How long the Epilog keeps asking slurmctld for the finished job while it does not answer:
/// a slurmctld restart takes a few seconds (2-4 s in the fault tests, docs/results/faults-*),
/// and a record the Epilog cannot build is lost (found by tests/cluster/faults.rs on 24.11:
/// 49 of 50 records after a restart during a burst).
pub const JOB_READ_BUDGET: Duration = Duration::from_secs(20);

/// `slurm.job(id)`, asked again every second while it fails, for at most `budget`.
///
/// # Errors
/// The last error once `budget` has passed.
fn job_with_retries(
    slurm: &dyn SlurmApi,
    id: u32,
    budget: Duration,
) -> Result<Option<dynmig_slurm::JobInfo>, dynmig_slurm::SlurmError> {
    let until = std::time::Instant::now() + budget;
    loop {
        match slurm.job(id) {
            Ok(j) => return Ok(j),
            Err(e) if std::time::Instant::now() + Duration::from_secs(1) > until => return Err(e),
            Err(e) => {
                eprintln!("dynmig epilog: job {id}: Slurm did not answer ({e}); asking again");
                std::thread::sleep(Duration::from_secs(1));
            }
        }
    }
}

/// Records the run in the history and starts the restart helper if it ran out of memory.
///
/// A job with no GPU in `SLURM_JOB_GPUS`, no peak file and no instance the Prolog `claimed` is
/// no MIG job: nothing is recorded and Slurm is not read for it.
fn after_job(config: &Config, env: &HookEnv, slurm: &dyn SlurmApi, exe: &std::path::Path, claimed: bool) -> Result<()> {
    let paths = NodePaths::of(config, &env.node);
    let models = dynmig_core::submit::SubmitPolicy::from_config(config).models;
    let peak: Option<PeakFile> = dynmig_host::fs::read_bounded(&paths.peak(env.job), 4096)
        .ok()
        .flatten()
        .and_then(|b| serde_json::from_slice(&b).ok());
    if env.gpus.is_empty() && peak.is_none() && !claimed {
        return Ok(());
    }
    let Some(job) = job_with_retries(slurm, env.job, JOB_READ_BUDGET)? else {
        return Ok(()); // Slurm no longer holds it: nothing trustworthy to record.
    };
    // A job Slurm's JSON gives no uid or gid is recorded for no one and read as no one: a
    // missing id is never taken for root.
    let (Some(uid), Some(gid)) = (job.uid, job.gid) else {
        bail!(
            "Slurm's JSON gives job {} no user_id or group_id: no history record for it",
            job.id
        );
    };
    if env.uid.is_some_and(|u| u != uid) {
        bail!(
            "SLURM_JOB_UID {} differs from Slurm's uid {uid} for the job",
            env.uid.unwrap_or(0),
        );
    }
    let profile = TresList::parse(&job.tres_per_node)
        .ok()
        .and_then(|l| l.gpu_entries().find_map(|g| g.gres_type.clone()))
        .filter(|p| profile_bytes(&models, p).is_some())
        .or_else(|| peak.as_ref().map(|p| p.profile.clone()));
    let Some(profile) = profile else {
        return Ok(()); // not a MIG job
    };
    let limit = peak
        .as_ref()
        .map(|p| p.limit_bytes)
        .or_else(|| profile_bytes(&models, &profile))
        .unwrap_or(0);
    let tail = if job.exit_status != 0 {
        oom::stderr_path(oom::stderr_of(&job), &job.cwd, job.id, &job.user, &job.name, &env.node)
            .map(|p| oom::stderr_tail(UserIds { uid, gid }, &p))
            .unwrap_or_default()
    } else {
        String::new()
    };
    let est = &config.estimator;
    let why = oom::detect(
        job.exit_status,
        peak.as_ref().map(|p| Peak {
            peak_bytes: p.peak_bytes,
            limit_bytes: limit,
        }),
        &tail,
        est.oom_peak_fraction,
    );
    let decision = DecisionRecord::parse(&job.admin_comment).ok();
    let record = JobRecord {
        job_id: job.id.into(),
        restart: job.restarts,
        node: env.node.clone(),
        uid,
        user: job.user.clone(),
        job_name: job.name.clone(),
        profile: profile.clone(),
        estimate_bytes: decision.as_ref().map_or(0, |d| d.mem_bytes),
        source: decision.as_ref().map_or(String::new(), |d| d.source.to_string()),
        peak_bytes: peak.as_ref().map_or(0, |p| p.peak_bytes),
        limit_bytes: limit,
        exit_status: job.exit_status,
        oom: why.is_some(),
        end_time: dynmig_history::now(),
    };
    // The restart first: a record that cannot be spooled (a full disk) must not cost the job
    // its restart.
    if let Some(why) = &why {
        start_restart(config, exe, env, &profile, why, job.restarts, &models);
    }
    let spooled = dynmig_history::spool::put(&paths.history_spool, &record)?;
    if config.history.store == HistoryStore::Slurmdbd {
        // Slurm's accounting (docs/history.md): each spooled record goes once slurmdbd has
        // it, this job's first; records an earlier Epilog could not write are retried.
        let f = dynmig_history::accounting::flush_spool(
            &config.paths.sacctmgr,
            &config.paths.sacct,
            &paths.history_spool,
            Some(&spooled),
            dynmig_history::service::EPILOG_FLUSH_BUDGET,
        );
        if f.pending + f.refused > 0 {
            eprintln!(
                "dynmig epilog: job {}: {} history records stay spooled in {}",
                env.job,
                f.pending + f.refused,
                paths.history_spool.display()
            );
        }
    } else if let Some(server) = &config.history.server {
        let f = dynmig_history::service::flush_spool(
            &paths.history_spool,
            server,
            dynmig_history::auth::munge_socket(None),
            Duration::from_secs(5),
        );
        if f.pending + f.refused > 0 {
            eprintln!(
                "dynmig epilog: {} history records stay spooled in {}",
                f.pending + f.refused,
                paths.history_spool.display()
            );
        }
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
        .and_then(|n| oom::release_blocks_restart(oom::running_release(&config.paths.scontrol), n.name));
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
