//! The plugin's global state: the submit policy, read from the configuration in `init` and
//! shared by concurrent `job_submit`/`job_modify` calls (Slurm 23.02+ may run them in
//! parallel) behind a read-write lock; and the estimator's history snapshot.
//!
//! The snapshot (`paths.history_snapshot`, written by `dynmig history serve`) is read off the
//! hot path: a background thread looks at its modification time every
//! `history.snapshot_refresh` and, when it changed, parses it and swaps an `Arc` under a
//! write lock held only for the swap. A submit takes the read lock long enough to clone the
//! `Arc`; it never reads a file. `fini` stops and joins the thread before Slurm unloads the
//! plugin.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::thread::JoinHandle;
use std::time::SystemTime;

use dynmig_core::config::{parse_config, Config};
use dynmig_core::estimate::{EstimateContext, EstimatorConfig, HistorySnapshot, JobIdentity};
use dynmig_core::submit::{decide_with, JobRequest, Outcome, SubmitError, SubmitPolicy};

/// Environment variable of slurmctld naming the configuration file.
pub const CONFIG_ENV: &str = "DYNMIG_CONFIG";
/// The configuration file read when [`CONFIG_ENV`] is not set.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/slurm/dynmig.toml";

static POLICY: RwLock<Option<SubmitPolicy>> = RwLock::new(None);
static ESTIMATOR: RwLock<Option<EstimatorConfig>> = RwLock::new(None);
static SNAPSHOT: RwLock<Option<Arc<HistorySnapshot>>> = RwLock::new(None);
static WATCHER: Mutex<Option<(Sender<()>, JoinHandle<()>)>> = Mutex::new(None);

/// Where the policy came from, for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A configuration file.
    File(PathBuf),
    /// The built-in defaults, because the default file does not exist.
    Embedded,
}

/// Reads the configuration: the file named by `DYNMIG_CONFIG`, else
/// `/etc/slurm/dynmig.toml`, else (only when that default file is absent) the embedded
/// defaults.
///
/// # Errors
/// A message naming the file: it cannot be read (a file named by `DYNMIG_CONFIG` must
/// exist) or is not a valid configuration.
pub fn load(env_path: Option<&str>) -> Result<(SubmitPolicy, Source), String> {
    load_from(env_path, Path::new(DEFAULT_CONFIG_PATH))
}

/// [`load`] with another default path (for tests).
///
/// # Errors
/// As [`load`].
pub fn load_from(env_path: Option<&str>, default_path: &Path) -> Result<(SubmitPolicy, Source), String> {
    let (path, required) = match env_path {
        Some(p) if !p.is_empty() => (PathBuf::from(p), true),
        _ => (default_path.to_path_buf(), false),
    };
    if !required && !path.exists() {
        let config = Config::default_embedded();
        configure_estimator(&config);
        return Ok((SubmitPolicy::from_config(&config), Source::Embedded));
    }
    let config = read(&path)?;
    configure_estimator(&config);
    Ok((SubmitPolicy::from_config(&config), Source::File(path)))
}

fn read(path: &Path) -> Result<Config, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("dynmig: cannot read {}: {e}", path.display()))?;
    parse_config(&text).map_err(|e| format!("dynmig: {}: {e}", path.display()))
}

static BROKEN: RwLock<Option<String>> = RwLock::new(None);

/// Records why no policy could be installed (a bad config), for the message to users.
pub fn set_broken(why: String) {
    *BROKEN.write().unwrap_or_else(PoisonError::into_inner) = Some(why);
}

/// Why no policy is installed, if `init` failed to read the config.
pub fn broken_reason() -> Option<String> {
    BROKEN.read().unwrap_or_else(PoisonError::into_inner).clone()
}

/// Makes `policy` the one that `job_submit` and `job_modify` use.
pub fn install(policy: SubmitPolicy) {
    *BROKEN.write().unwrap_or_else(PoisonError::into_inner) = None;
    *POLICY.write().unwrap_or_else(PoisonError::into_inner) = Some(policy);
}

/// Drops the policy and stops the snapshot thread (plugin `fini`).
pub fn clear() {
    *POLICY.write().unwrap_or_else(PoisonError::into_inner) = None;
    stop_watcher();
    *SNAPSHOT.write().unwrap_or_else(PoisonError::into_inner) = None;
}

/// Installs the estimator settings of `config` and (re)starts the thread that keeps the
/// history snapshot fresh.
pub fn configure_estimator(config: &Config) {
    *ESTIMATOR.write().unwrap_or_else(PoisonError::into_inner) = Some(config.estimator);
    stop_watcher();
    let path = config.paths.history_snapshot.clone();
    let every = config.history.snapshot_refresh;
    let (tx, rx) = mpsc::channel::<()>();
    let spawned = std::thread::Builder::new()
        .name("dynmig-history".into())
        .spawn(move || {
            let mut seen: Option<SystemTime> = None;
            loop {
                refresh(&path, &mut seen);
                match rx.recv_timeout(every) {
                    Err(RecvTimeoutError::Timeout) => continue,
                    _ => return,
                }
            }
        });
    if let Ok(handle) = spawned {
        *WATCHER.lock().unwrap_or_else(PoisonError::into_inner) = Some((tx, handle));
    }
}

/// Re-reads the snapshot at `path` if its modification time is not `seen`; a missing or bad
/// file leaves the last good snapshot in place.
pub fn refresh(path: &Path, seen: &mut Option<SystemTime>) {
    let Ok(mtime) = std::fs::metadata(path).and_then(|m| m.modified()) else {
        return;
    };
    if *seen == Some(mtime) {
        return;
    }
    let Ok(text) = std::fs::read_to_string(path) else {
        return;
    };
    if let Ok(snap) = HistorySnapshot::parse(&text) {
        *SNAPSHOT.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(snap));
        *seen = Some(mtime);
    }
}

fn stop_watcher() {
    let w = WATCHER.lock().unwrap_or_else(PoisonError::into_inner).take();
    if let Some((tx, handle)) = w {
        drop(tx);
        let _ = handle.join();
    }
}

/// The current snapshot (an `Arc` clone; `None` before the first read).
pub fn snapshot() -> Option<Arc<HistorySnapshot>> {
    SNAPSHOT.read().unwrap_or_else(PoisonError::into_inner).clone()
}

/// [`decide_with`] with the installed estimator settings and history snapshot, for the job
/// of user `uid` named `job_name`.
///
/// # Errors
/// As [`decide_with`].
pub fn decide(
    req: &JobRequest,
    uid: u32,
    job_name: Option<&str>,
    policy: &SubmitPolicy,
) -> Result<Outcome, SubmitError> {
    let settings = *ESTIMATOR.read().unwrap_or_else(PoisonError::into_inner);
    let snap = snapshot();
    let cx = EstimateContext {
        settings: settings.as_ref(),
        job: job_name.map(|job_name| JobIdentity { uid, job_name }),
        history: snap.as_deref(),
    };
    decide_with(req, policy, &cx)
}

/// Runs `f` with the installed policy, or returns `None` if `init` has not installed one.
pub fn with_policy<T>(f: impl FnOnce(&SubmitPolicy) -> T) -> Option<T> {
    let guard = POLICY.read().unwrap_or_else(PoisonError::into_inner);
    guard.as_ref().map(f)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn missing_default_file_falls_back_to_embedded() {
        let _g = GLOBAL.lock().unwrap_or_else(PoisonError::into_inner);
        let (policy, source) = load_from(None, Path::new("/nonexistent/dynmig.toml")).unwrap();
        assert_eq!(source, Source::Embedded);
        assert!(!policy.models.is_empty());
    }

    #[test]
    fn file_named_by_env_must_exist_and_parse() {
        let err = load_from(Some("/nonexistent/x.toml"), Path::new("/x")).unwrap_err();
        assert!(err.starts_with("dynmig: cannot read /nonexistent/x.toml"), "{err}");
        let dir = std::env::temp_dir().join(format!("dynmig-state-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bad = dir.join("bad.toml");
        std::fs::write(&bad, "no_such_key = 1\n").unwrap();
        let err = load_from(bad.to_str(), Path::new("/x")).unwrap_err();
        assert!(err.starts_with(&format!("dynmig: {}: ", bad.display())), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The tests below share the global state.
    pub(crate) static GLOBAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn snapshot_is_read_by_the_thread_and_used_by_decide() {
        let _g = GLOBAL.lock().unwrap_or_else(PoisonError::into_inner);
        let dir = std::env::temp_dir().join(format!("dynmig-snap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let snap = dir.join("snap.tsv");
        std::fs::write(&snap, "1000\t5\t12884901888\t12884901888\t0\tft\n").unwrap();
        let text = format!(
            "version = 1\n[paths]\nhistory_snapshot = \"{}\"\n[history]\nsnapshot_refresh = \"50ms\"\n\
             [[node_group]]\nname = \"a\"\nnodes = \"n1\"\ngpu_model = \"A100-80GB\"\ngpus = 1\nbackend = \"simulated\"\n",
            snap.display()
        );
        let config = parse_config(&text).unwrap();
        configure_estimator(&config);
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while snapshot().is_none() {
            assert!(std::time::Instant::now() < until, "snapshot never read");
            std::thread::sleep(Duration::from_millis(10));
        }
        let req = JobRequest {
            tres_per_node: Some("gres:gpu:1"),
            ..Default::default()
        };
        let Outcome::Rewrite(r) = decide(&req, 1000, Some("ft"), &SubmitPolicy::from_config(&config)).unwrap() else {
            panic!("expected a rewrite")
        };
        // 12 GiB x 1.1 -> 2g.20gb from the history.
        assert_eq!(
            r.decision.to_string(),
            format!("dynmig: profile=2g.20gb count=1 mem=13.2GiB source=history")
        );
        let Outcome::Rewrite(r) = decide(&req, 1001, Some("ft"), &SubmitPolicy::from_config(&config)).unwrap() else {
            panic!("expected a rewrite")
        };
        assert_eq!(r.decision.profile, "7g.80gb");
        clear();
        assert!(snapshot().is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn install_and_clear() {
        let _g = GLOBAL.lock().unwrap_or_else(PoisonError::into_inner);
        install(SubmitPolicy::from_config(&Config::default_embedded()));
        assert_eq!(with_policy(|p| p.models.len()), Some(1));
        clear();
        assert!(with_policy(|_| ()).is_none());
    }
}
