//! Out-of-memory: detection in the Epilog, and the restart on a larger profile.
//!
//! **Detection** ([`detect`]), for a job that FAILED (exit status not 0) only — a job may
//! print such a message and still succeed:
//! 1. its stderr (where Slurm writes it: [`stderr_of`]) ends with a CUDA out-of-memory message ([`OOM_PATTERNS`]: PyTorch's
//!    `torch.OutOfMemoryError`/`CUDA out of memory`, the CUDA driver's
//!    `CUDA_ERROR_OUT_OF_MEMORY`, the runtime's `cudaErrorMemoryAllocation`, XLA's
//!    `RESOURCE_EXHAUSTED: Out of memory`). The tail (8 KiB) is read with the job user's rights,
//!    never root's ([`crate::as_user`]): `O_NOFOLLOW`, non-blocking, regular files only, 2 s;
//! 2. its peak GPU memory reached `estimator.oom_peak_fraction` of its instance. On the
//!    simulated backend the peak is what `dynmig fake-job` reports; on real GPUs no peak is
//!    read yet (NVML accounting is future work), so rule 1 decides there.
//!
//! No exit status means out-of-memory by itself: the fake workload prints PyTorch's message
//! and fails like a real job.
//!
//! **Restart** ([`restart`], run by `dynmig oom-restart`, which the Epilog starts in its own
//! session): a job that ran out of memory on profile P, with fewer than
//! `estimator.max_oom_restarts` restarts, is requeued held, its per-node GPU request rewritten
//! to the next larger profile (same count, same `gres:`/`gres/` form: [`next_request`]),
//! commented, told in its stderr (appended with the user's rights), and released: it restarts
//! seconds after the failure instead of at the end of its time limit. A job that is not
//! requeued (largest profile, or `max_oom_restarts` reached) is told why in its stderr only:
//! it has finished, and Slurm refuses to change a finished job's comment ("Job has already
//! finished", seen on 22.05.8).

use crate::as_user::{self, UserIds};
use dynmig_core::gres::GpuRequest;
use dynmig_core::modify::update_replaces_gpu_request;
use dynmig_core::protocol::clip;
use dynmig_core::protocol::decision::{ChangeCause, DecisionRecord};
use dynmig_slurm::plugin::SlurmVersion;
use dynmig_slurm::{SlurmApi, SlurmError};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// CUDA out-of-memory messages of PyTorch, the CUDA driver and runtime APIs, TensorFlow/JAX.
pub const OOM_PATTERNS: [&str; 5] = [
    "CUDA out of memory",
    "CUDA_ERROR_OUT_OF_MEMORY",
    "cudaErrorMemoryAllocation",
    "OutOfMemoryError",
    "RESOURCE_EXHAUSTED: Out of memory",
];

/// How much of a job's stderr the Epilog reads, bytes.
pub const STDERR_TAIL: usize = 8192;
/// How long the Epilog waits for that read.
pub const STDERR_TIMEOUT: Duration = Duration::from_secs(2);

/// A job's peak GPU memory on its instance (bytes), and the instance's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peak {
    /// Peak bytes.
    pub peak_bytes: u64,
    /// Instance memory, bytes.
    pub limit_bytes: u64,
}

/// Whether a run ran out of GPU memory, and why we think so (module docs). `None` for a run
/// that succeeded.
pub fn detect(exit_status: i32, peak: Option<Peak>, stderr_tail: &str, peak_fraction: f64) -> Option<String> {
    if exit_status == 0 {
        return None;
    }
    if let Some(p) = OOM_PATTERNS.iter().find(|p| stderr_tail.contains(*p)) {
        return Some(format!("'{p}' in the job's stderr"));
    }
    match peak {
        Some(p) if p.limit_bytes > 0 && p.peak_bytes as f64 >= peak_fraction * p.limit_bytes as f64 => Some(format!(
            "failed with its peak at {:.0}% of the instance",
            100.0 * p.peak_bytes as f64 / p.limit_bytes as f64
        )),
        _ => None,
    }
}

/// Where Slurm writes a batch job's stderr, as the user gave it: `--error`, else `--output`
/// (stderr then goes with stdout), else sbatch's default `slurm-%j.out` in the working
/// directory. 22.05's `squeue --json` shows an option that was not given as empty, so a job
/// without `--error` (most jobs) would otherwise never have its out-of-memory message read.
/// An array task's default (`slurm-%A_%a.out`) is not known here: its `slurm-<id>.out` does
/// not exist, and a missing file is not read.
///
/// `std_err` and `std_out` are the paths as the user gave them (Slurm's JSON
/// `standard_error`/`standard_output`, or the Epilog's `SLURM_JOB_STDERR`/`SLURM_JOB_STDOUT`),
/// empty when not given.
pub fn stderr_of<'a>(std_err: &'a str, std_out: &'a str) -> &'a str {
    if !std_err.is_empty() {
        std_err
    } else if !std_out.is_empty() {
        std_out
    } else {
        "slurm-%j.out"
    }
}

/// The job's stderr path made absolute and its patterns expanded as Slurm does for the ones
/// dynmig can know (`%j` job id, `%u` user, `%x` job name when `name` is known, `%N` node,
/// `%%`); `None` when the path holds another pattern or is empty (then it is not read).
pub fn stderr_path(raw: &str, cwd: &str, job: u32, user: &str, name: Option<&str>, node: &str) -> Option<PathBuf> {
    if raw.is_empty() {
        return None;
    }
    let mut out = String::new();
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next()? {
            'j' => out.push_str(&job.to_string()),
            'u' => out.push_str(user),
            'x' => out.push_str(name?),
            'N' => out.push_str(node),
            '%' => out.push('%'),
            _ => return None,
        }
    }
    let p = PathBuf::from(out);
    if p.is_absolute() {
        Some(p)
    } else if cwd.is_empty() {
        None
    } else {
        Some(Path::new(cwd).join(p))
    }
}

/// Reads the tail of a job's stderr as the job's user ([`STDERR_TAIL`] bytes within
/// [`STDERR_TIMEOUT`]); empty when it cannot be read, with the reason on stderr.
pub fn stderr_tail(who: UserIds, path: &Path) -> String {
    match as_user::read_tail(who, path, STDERR_TAIL, STDERR_TIMEOUT) {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(e) => {
            eprintln!(
                "dynmig epilog: not reading the job's stderr {}: {e}",
                clip(&path.to_string_lossy(), 200)
            );
            String::new()
        }
    }
}

/// The job's per-node request with its typed GPU entry moved to `to`, keeping the count and
/// the `gres:`/`gres/` form; `None` if it holds no typed GPU entry.
pub fn next_request(tres_per_node: impl Into<GpuRequest>, to: &str) -> Option<String> {
    let request = tres_per_node.into();
    let (_, count) = request.typed().next()?;
    request.retyped(to, count)
}

/// What `dynmig oom-restart` does (module docs).
#[derive(Debug, Clone)]
pub struct RestartRequest {
    /// The job.
    pub job: u32,
    /// The profile to requeue on; `None`: only tell the user why not.
    pub to: Option<String>,
    /// What the user is told.
    pub message: String,
    /// How long to retry `requeuehold` while the job completes.
    pub requeue_for: Duration,
}

/// Requeues the job on the larger profile (or only tells why not), as the module docs say.
/// The message goes, with the user's rights, to its stderr and, for a requeued job, to its
/// comment.
///
/// # Errors
/// The job is unknown, could not be requeued within `requeue_for`, or its request could not
/// be changed.
pub fn restart(slurm: &dyn SlurmApi, req: &RestartRequest, node: &str) -> Result<(), SlurmError> {
    let job = slurm
        .job(req.job)?
        .ok_or_else(|| SlurmError::Refused(format!("job {} is not known to Slurm", req.job)))?;
    let message = clip(&req.message, 400);
    let path = stderr_path(
        stderr_of(&job.std_err, &job.std_out),
        &job.cwd,
        job.id,
        &job.user,
        Some(&job.name),
        node,
    );
    if let (Some(p), Some(uid), Some(gid)) = (path, job.uid, job.gid) {
        // Only with the job's own ids: a job Slurm names no uid/gid for is written for no one.
        let who = UserIds { uid, gid };
        if let Err(e) = as_user::append(who, &p, &format!("{message}\n"), STDERR_TIMEOUT) {
            eprintln!("dynmig oom-restart: job {}: not appending to its stderr: {e}", job.id);
        }
    }
    let Some(to) = &req.to else {
        // Finished for good: Slurm keeps no comment change of a finished job.
        return Ok(());
    };
    let tres = next_request(job.tres_per_node.clone(), to).ok_or_else(|| {
        SlurmError::Refused(format!(
            "job {}: its request '{}' holds no typed GPU",
            job.id,
            clip(job.tres_per_node.as_str(), 100)
        ))
    })?;
    let until = Instant::now() + req.requeue_for;
    loop {
        match slurm.requeue_hold(job.id) {
            Ok(()) => break,
            Err(e) if Instant::now() > until => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(300)),
        }
    }
    let update = slurm.set_job_tres_per_node(job.id, &tres);
    // The decision record follows the request (an administrator's own comment is left).
    let record = DecisionRecord::parse(&job.admin_comment).ok().map(|r| {
        let count = GpuRequest::parse(tres.as_str())
            .gpus()
            .next()
            .map_or(r.count, |g| g.count);
        r.changed(to, count, job.restarts + 1, ChangeCause::OomRestart)
    });
    let record = match (&update, record) {
        (Ok(()), Some(r)) => slurm.set_job_admin_comment(job.id, &r.encode()),
        _ => Ok(()),
    };
    let comment = slurm.set_job_comment(job.id, &message);
    // Release even if an update failed: a held job would wait for an administrator.
    let release = slurm.release(job.id);
    update?;
    comment?;
    record?;
    release
}

/// Why a job that ran out of memory is not requeued on `to` under Slurm `release`, if the
/// release cannot change a submitted job's GPU type (before 23.02.6: the update is merged
/// into the old request and the job would never start, see
/// [`dynmig_core::modify::update_replaces_gpu_request`]): the text says what to do instead.
pub fn release_blocks_restart(release: Option<SlurmVersion>, to: &str) -> Option<String> {
    let v = release?;
    (!update_replaces_gpu_request(v.0)).then(|| {
        format!(
            "not requeued: Slurm {v} cannot move a submitted job to another MIG profile (SchedMD bug 17184, \
             fixed in 23.02.6); submit it again with --gres=gpu:{to}:1"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use dynmig_slurm::JobInfo;

    #[test]
    fn detection_needs_a_failed_job_and_a_real_signal() {
        let e = detect(
            1,
            None,
            "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB",
            0.98,
        )
        .unwrap();
        assert!(e.contains("CUDA out of memory"), "{e}");
        let peak = |p| {
            Some(Peak {
                peak_bytes: p,
                limit_bytes: 100,
            })
        };
        assert!(detect(1, peak(99), "", 0.98).unwrap().contains("99%"));
        assert!(detect(0, peak(99), "", 0.98).is_none());
        assert!(detect(1, peak(50), "segfault", 0.98).is_none());
        assert!(detect(0, None, "CUDA out of memory (an earlier run)", 0.98).is_none());
    }

    #[test]
    fn the_fake_workloads_exit_status_is_not_out_of_memory() {
        // 97 was the fake job's code; a real job exiting 97 did not run out of memory.
        assert!(detect(97, None, "", 0.98).is_none());
    }

    #[test]
    fn stderr_patterns_expand_or_the_file_is_not_read() {
        assert_eq!(
            stderr_path("slurm-%j.out", "/home/a", 12, "a", Some("n"), "n1"),
            Some(PathBuf::from("/home/a/slurm-12.out"))
        );
        assert_eq!(
            stderr_path("/s/%u/%x-%N-%%.err", "", 1, "alice", Some("my job"), "n1"),
            Some(PathBuf::from("/s/alice/my job-n1-%.err"))
        );
        // The Epilog does not know the job name: a path with `%x` is not read.
        assert_eq!(stderr_path("/s/%x.err", "/", 1, "a", None, "n1"), None);
        assert_eq!(stderr_path("/s/%A_%a.err", "/", 1, "a", Some("n"), "n1"), None);
        assert_eq!(stderr_path("rel.err", "", 1, "a", Some("n"), "n1"), None);
        assert_eq!(stderr_path("", "/", 1, "a", Some("n"), "n1"), None);
    }

    #[test]
    fn stderr_is_where_slurm_writes_it_error_then_output_then_the_default() {
        let mut j = dynmig_slurm::fake::pending_job(12, "gres:gpu:1g.10gb:1");
        j.cwd = "/home/a".into();
        let at = |j: &JobInfo| {
            stderr_path(
                stderr_of(&j.std_err, &j.std_out),
                &j.cwd,
                j.id,
                &j.user,
                Some(&j.name),
                "n1",
            )
        };
        assert_eq!(at(&j), Some(PathBuf::from("/home/a/slurm-12.out")));
        j.std_out = "out-%j.txt".into();
        assert_eq!(at(&j), Some(PathBuf::from("/home/a/out-12.txt")));
        j.std_err = "/s/err".into();
        assert_eq!(at(&j), Some(PathBuf::from("/s/err")));
    }

    #[test]
    fn the_restart_request_keeps_count_and_form() {
        assert_eq!(
            next_request("gres:gpu:1g.10gb:1", "2g.20gb").as_deref(),
            Some("gres:gpu:2g.20gb:1")
        );
        assert_eq!(
            next_request("gres/gpu:1g.10gb:3", "2g.20gb").as_deref(),
            Some("gres/gpu:2g.20gb:3")
        );
        assert_eq!(next_request("gres:gpu:2", "2g.20gb"), None);
    }
}

#[cfg(test)]
mod record_tests {
    use super::*;
    use dynmig_core::types::EstimateSource;
    use dynmig_slurm::fake::{pending_job, FakeSlurm};
    use dynmig_slurm::JobInfo;

    fn failed_job(admin_comment: &str) -> JobInfo {
        let mut j = pending_job(7, "gres:gpu:1g.10gb:1");
        j.state = dynmig_slurm::JobState::Other("FAILED".into());
        j.admin_comment = admin_comment.into();
        j.cwd = std::env::temp_dir().to_string_lossy().into_owned();
        j
    }

    fn request() -> RestartRequest {
        RestartRequest {
            job: 7,
            to: Some("2g.20gb".into()),
            message: "dynmig: job 7 ran out of GPU memory".into(),
            requeue_for: Duration::from_secs(1),
        }
    }

    #[test]
    fn a_restart_writes_the_record_of_the_profile_the_job_now_asks_for() {
        let record = DecisionRecord::new("1g.10gb", 1, 9 << 30, EstimateSource::MigMemHint);
        let slurm = FakeSlurm::new(vec![], vec![failed_job(&record.encode())]);
        restart(&slurm, &request(), "n1").unwrap();
        let job = slurm.job(7).unwrap().unwrap();
        assert_eq!(job.tres_per_node, "gres:gpu:2g.20gb:1");
        let now = DecisionRecord::parse(&job.admin_comment).unwrap();
        assert_eq!(now.profile, "2g.20gb");
        let change = now.change.expect("a change");
        assert_eq!(
            (change.restarts, change.prev, change.by),
            (1, vec!["1g.10gb".to_string()], ChangeCause::OomRestart)
        );
    }

    #[test]
    fn an_administrators_own_comment_is_left_as_it_is() {
        let slurm = FakeSlurm::new(vec![], vec![failed_job("keep-me")]);
        restart(&slurm, &request(), "n1").unwrap();
        assert_eq!(slurm.job(7).unwrap().unwrap().admin_comment, "keep-me");
        assert!(
            !slurm.calls().iter().any(|c| c.starts_with("admincomment")),
            "{:?}",
            slurm.calls()
        );
    }

    #[test]
    fn releases_before_23_02_6_do_not_requeue_and_say_what_to_do() {
        let why = release_blocks_restart(SlurmVersion::parse("slurm 22.05.8"), "2g.20gb").unwrap();
        assert!(why.contains("Slurm 22.05.8 cannot move"), "{why}");
        assert!(why.contains("--gres=gpu:2g.20gb:1"), "{why}");
        assert!(release_blocks_restart(SlurmVersion::parse("slurm 24.11.5"), "2g.20gb").is_none());
        assert!(release_blocks_restart(SlurmVersion::parse("slurm 23.02.6"), "2g.20gb").is_none());
        assert!(release_blocks_restart(None, "2g.20gb").is_none());
    }
}
