//! Out-of-memory detection and restart, run from the Epilog ([`after_job`]).
//!
//! **Detection** (any one; docs/history.md says what each Slurm version allows):
//! 1. the job's peak record says an allocation failed (simulated backend: `dynmig fake-job`;
//!    on real GPUs NVML accounting gives the peak but not the failure);
//! 2. the job exited with [`crate::fake_job::OOM_EXIT`];
//! 3. the job failed and its stderr ends with a CUDA out-of-memory error (`CUDA out of memory`,
//!    `CUDA_ERROR_OUT_OF_MEMORY`, `cudaErrorMemoryAllocation`, `OutOfMemoryError`); the
//!    Epilog runs as root and reads the tail of the job's `StdErr` file;
//! 4. the job failed (exit status not 0) with its peak at least `estimator.oom_peak_fraction`
//!    of its instance's memory.
//!
//! **Restart**: a job that ran out of memory on profile P, with fewer than
//! `estimator.max_oom_restarts` restarts so far, is requeued on the next larger profile
//! ([`dynmig_core::estimate::next_larger_profile`]) at once, by a helper the Epilog starts in
//! its own session (`dynmig oom-restart`): `scontrol requeuehold`, `scontrol update
//! TresPerNode=gres:gpu:<next>:1 Comment=...`, a line in the job's stderr, `scontrol release`.
//! The job thus restarts seconds after the failure instead of when its time limit ends.

use crate::context::Ctx;
use crate::events::Event;
use crate::fake_job::{peak_path, read_peak, OOM_EXIT};
use crate::history::{self, auth, spool, transport, JobRecord};
use anyhow::{bail, Context, Result};
use dynmig_core::estimate::{next_larger_profile, profile_bytes};
use dynmig_core::size::parse_size;
use dynmig_core::submit::SubmitPolicy;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// What the Epilog reads about a job from `scontrol show job`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobFacts {
    /// `JobName`.
    pub name: String,
    /// `UserId=name(uid)`: the name.
    pub user: String,
    /// `UserId=name(uid)`: the uid.
    pub uid: u32,
    /// `ExitCode=status:signal`: the status.
    pub exit_status: i32,
    /// `Restarts`.
    pub restarts: u32,
    /// The MIG profile of `TresPerNode=gres:gpu:<profile>:1`.
    pub profile: Option<String>,
    /// `mem=` of dynmig's AdminComment, bytes.
    pub estimate_bytes: Option<u64>,
    /// `source=` of dynmig's AdminComment.
    pub source: Option<String>,
    /// `StdErr`.
    pub std_err: Option<String>,
}

/// Reads [`JobFacts`] out of `scontrol show job` text.
pub fn parse_job(text: &str) -> JobFacts {
    let mut f = JobFacts::default();
    for tok in text.split_whitespace() {
        let Some((k, v)) = tok.split_once('=') else { continue };
        match k {
            "JobName" => f.name = v.to_string(),
            "UserId" => {
                if let Some((name, uid)) = v.split_once('(') {
                    f.user = name.to_string();
                    f.uid = uid.trim_end_matches(')').parse().unwrap_or(0);
                }
            }
            "ExitCode" => f.exit_status = v.split(':').next().and_then(|s| s.parse().ok()).unwrap_or(0),
            "Restarts" => f.restarts = v.parse().unwrap_or(0),
            "TresPerNode" => {
                f.profile = v.split(',').find_map(|e| {
                    let parts: Vec<&str> = e
                        .trim_start_matches("gres:")
                        .trim_start_matches("gres/")
                        .split(':')
                        .collect();
                    (parts.len() >= 2 && parts[0] == "gpu" && parts[1].contains("g.")).then(|| parts[1].to_string())
                })
            }
            "mem" => f.estimate_bytes = parse_size(v.trim_end_matches(';')).ok(),
            "source" => f.source = Some(v.trim_end_matches(';').to_string()),
            "StdErr" => f.std_err = Some(v.to_string()),
            _ => {}
        }
    }
    f
}

/// The last `max` bytes of a file, as text (empty if unreadable).
pub fn tail(path: &Path, max: u64) -> String {
    let Ok(mut f) = std::fs::File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map_or(0, |m| m.len());
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(max)));
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

/// CUDA out-of-memory messages of PyTorch, the CUDA driver and runtime APIs, TensorFlow/JAX.
pub const OOM_PATTERNS: [&str; 5] = [
    "CUDA out of memory",
    "CUDA_ERROR_OUT_OF_MEMORY",
    "cudaErrorMemoryAllocation",
    "OutOfMemoryError",
    "RESOURCE_EXHAUSTED: Out of memory",
];

/// Whether a run ran out of GPU memory, and why we think so (module docs).
pub fn detect(
    exit_status: i32,
    peak: Option<(u64, u64, bool)>,
    stderr_tail: &str,
    peak_fraction: f64,
) -> Option<String> {
    if let Some((_, _, true)) = peak {
        return Some("a GPU allocation failed (peak record)".into());
    }
    if exit_status == OOM_EXIT {
        return Some(format!("exit status {OOM_EXIT}"));
    }
    // Only for a failed run: a job may print (or append to, after a restart) such a message
    // and still succeed.
    if let Some(p) = OOM_PATTERNS
        .iter()
        .find(|p| stderr_tail.contains(*p))
        .filter(|_| exit_status != 0)
    {
        return Some(format!("'{p}' in the job's stderr"));
    }
    match peak {
        Some((peak, limit, _)) if exit_status != 0 && limit > 0 && peak as f64 >= peak_fraction * limit as f64 => {
            Some(format!(
                "failed with its peak at {:.0}% of the instance",
                100.0 * peak as f64 / limit as f64
            ))
        }
        _ => None,
    }
}

fn scontrol(ctx: &Ctx, args: &[&str]) -> Result<String> {
    let out = Command::new(&ctx.config.paths.scontrol)
        .args(args)
        .output()
        .with_context(|| format!("cannot run {}", ctx.config.paths.scontrol.display()))?;
    if !out.status.success() {
        bail!(
            "scontrol {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The Epilog's part: record the run in the history (spool, then deliver) and, if it ran out
/// of memory, start the restart helper. Errors are printed, never returned: a failing Epilog
/// would drain the node.
pub fn after_job(ctx: &Ctx, node: &str, job: u32) {
    if let Err(e) = record_and_restart(ctx, node, job) {
        eprintln!("dynmig epilog: job {job}: history/out-of-memory: {e:#}");
    }
}

fn record_and_restart(ctx: &Ctx, node: &str, job: u32) -> Result<()> {
    let facts = parse_job(&scontrol(ctx, &["show", "job", &job.to_string()])?);
    let peak = read_peak(&peak_path(ctx, node, job.into()));
    let models: Vec<_> = SubmitPolicy::from_config(&ctx.config).models;
    let profile = facts
        .profile
        .clone()
        .or_else(|| peak.as_ref().map(|p| p.profile.clone()));
    let limit = peak
        .as_ref()
        .map(|p| p.limit_bytes)
        .or_else(|| profile.as_deref().and_then(|p| profile_bytes(&models, p)))
        .unwrap_or(0);
    if profile.is_none() && peak.is_none() {
        return Ok(()); // not a MIG job
    }
    let stderr_tail = facts
        .std_err
        .as_deref()
        .map(|p| tail(Path::new(p), 8192))
        .unwrap_or_default();
    let est = &ctx.config.estimator;
    let why = detect(
        facts.exit_status,
        peak.as_ref().map(|p| (p.peak_bytes, p.limit_bytes, p.oom)),
        &stderr_tail,
        est.oom_peak_fraction,
    );
    let record = JobRecord {
        job_id: job.into(),
        restart: facts.restarts,
        node: node.to_string(),
        uid: facts.uid,
        user: facts.user.clone(),
        job_name: facts.name.clone(),
        profile: profile.clone().unwrap_or_default(),
        estimate_bytes: facts.estimate_bytes.unwrap_or(0),
        source: facts.source.clone().unwrap_or_default(),
        peak_bytes: peak.as_ref().map_or(0, |p| p.peak_bytes),
        limit_bytes: limit,
        exit_status: facts.exit_status,
        oom: why.is_some(),
        end_time: history::now(),
    };
    let spool_dir = spool_dir(ctx, node);
    spool::put(&spool_dir, &record)?;
    if let (Some(why), Some(cur)) = (&why, &profile) {
        start_restart(ctx, job, cur, why, facts.restarts, &models);
    }
    if let Some(server) = &ctx.config.history.server {
        let f = transport::flush(&spool_dir, server, auth::munge_socket(None).as_deref());
        if f.pending + f.refused > 0 {
            eprintln!(
                "dynmig epilog: {} history records stay spooled in {}",
                f.pending + f.refused,
                spool_dir.display()
            );
        }
    }
    Ok(())
}

/// The node's spool directory: `paths.history_spool`, `{node}` replaced.
pub fn spool_dir(ctx: &Ctx, node: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(ctx.config.paths.history_spool.to_string_lossy().replace("{node}", node))
}

fn start_restart(
    ctx: &Ctx,
    job: u32,
    cur: &str,
    why: &str,
    restarts: u32,
    models: &[&'static dynmig_core::geometry::GpuModel],
) {
    let max = ctx.config.estimator.max_oom_restarts;
    let next = next_larger_profile(models, cur);
    let (to, msg) = match next {
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
    let exe = std::env::current_exe().unwrap_or_else(|_| "dynmig".into());
    let mut cmd = Command::new(exe);
    if let Some(c) = &ctx.source {
        cmd.arg("--config").arg(c);
    }
    cmd.args(["oom-restart", "--job", &job.to_string(), "--message", &msg]);
    if let Some(to) = to {
        cmd.args(["--to", to]);
    }
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // Its own session: slurmd may kill the Epilog's process group when the Epilog exits.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    if let Err(e) = cmd.spawn() {
        eprintln!("dynmig epilog: cannot start the restart of job {job}: {e}");
    }
}

/// `dynmig oom-restart`: tells the user why (Comment and a line in the job's stderr) and, with
/// `to`, requeues the job on that profile: requeuehold (retried while the job completes),
/// update of its GPU request, release.
///
/// # Errors
/// The job could not be requeued within 60 s, or its request could not be changed.
pub fn restart(ctx: &Ctx, job: u32, to: Option<&str>, message: &str) -> Result<()> {
    let id = job.to_string();
    let facts = parse_job(&scontrol(ctx, &["show", "job", &id]).unwrap_or_default());
    if let Some(p) = &facts.std_err {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new().append(true).open(p) {
            let _ = writeln!(f, "{message}");
        }
    }
    let Some(to) = to else {
        let _ = scontrol(ctx, &["update", &format!("jobid={id}"), &format!("Comment={message}")]);
        return Ok(());
    };
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        match scontrol(ctx, &["requeuehold", &id]) {
            Ok(_) => break,
            Err(e) if Instant::now() > until => return Err(e.context(format!("job {job} could not be requeued"))),
            Err(_) => std::thread::sleep(Duration::from_millis(300)),
        }
    }
    let gres = format!("gres:gpu:{to}:1");
    let update = scontrol(ctx, &["update", &format!("jobid={id}"), &format!("TresPerNode={gres}")]);
    let comment = scontrol(ctx, &["update", &format!("jobid={id}"), &format!("Comment={message}")]);
    let release = scontrol(ctx, &["release", &id]);
    ctx.events()
        .log(&Event::new("oom_restart", "-").job(job.into()).detail(message));
    update?;
    comment?;
    release?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_scontrol_show_job() {
        let text = "JobId=12 JobName=ft\n   UserId=alice(1000) GroupId=alice(1000)\n   Restarts=1 ExitCode=97:0\n   \
                    AdminComment=dynmig: profile=1g.10gb count=1 mem=9.0GiB source=history\n   \
                    StdErr=/tmp/slurm-12.out\n   TresPerNode=gres:gpu:2g.20gb:1\n";
        let f = parse_job(text);
        assert_eq!((f.name.as_str(), f.user.as_str(), f.uid), ("ft", "alice", 1000));
        assert_eq!((f.exit_status, f.restarts), (97, 1));
        assert_eq!(f.profile.as_deref(), Some("2g.20gb"));
        assert_eq!(f.estimate_bytes, Some(9 << 30));
        assert_eq!(f.source.as_deref(), Some("history"));
        assert_eq!(f.std_err.as_deref(), Some("/tmp/slurm-12.out"));
    }

    #[test]
    fn detection_rules() {
        assert!(detect(0, Some((10, 10, true)), "", 0.98)
            .unwrap()
            .contains("peak record"));
        assert!(detect(OOM_EXIT, None, "", 0.98).is_some());
        let e = detect(
            1,
            None,
            "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB",
            0.98,
        )
        .unwrap();
        assert!(e.contains("CUDA out of memory"), "{e}");
        assert!(detect(1, Some((99, 100, false)), "", 0.98).unwrap().contains("99%"));
        assert!(detect(0, Some((99, 100, false)), "", 0.98).is_none());
        assert!(detect(1, Some((50, 100, false)), "segfault", 0.98).is_none());
        assert!(detect(0, None, "CUDA out of memory (an earlier run)", 0.98).is_none());
    }
}
