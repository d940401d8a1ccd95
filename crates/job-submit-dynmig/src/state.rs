//! The plugin's one global state: an `Arc<State>` behind one read-write lock, replaced as a
//! whole and never changed in place.
//!
//! `init` reads the configuration and the history snapshot and installs a [`State`];
//! `job_submit`/`job_modify` (which Slurm 23.02+ may run concurrently) take the read lock
//! only long enough to clone the `Arc`, and never read a file. When the configuration
//! names a history snapshot, `init` starts one thread ([`start_refresher`]) that looks at
//! the snapshot's modification time every `history.snapshot_refresh` and installs a new
//! `State` with the new snapshot; `fini` stops and joins it ([`stop_refresher`]). Nothing
//! starts a thread as a side effect of loading.
//!
//! Configuration discovery is kept minimal: the file named by `DYNMIG_CONFIG` in
//! slurmctld's environment (it must exist), else `/etc/slurm/dynmig.toml`, else (only when
//! that file does not exist) the built-in defaults. A file that cannot be read or parsed
//! gives [`State::Broken`]: jobs pass through, hinted jobs are told why.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use dynmig_core::config::{parse_config, Config};
use dynmig_core::estimate::EstimatorConfig;
use dynmig_core::estimate::{EstimateContext, HistorySnapshot, JobIdentity};
use dynmig_core::protocol::catalog::{Catalog, CATALOG_FILE, MAX_CATALOG_BYTES};
use dynmig_core::submit::{decide_with, JobRequest, Outcome, SubmitError, SubmitPolicy};

/// Environment variable of slurmctld naming the configuration file.
pub const CONFIG_ENV: &str = "DYNMIG_CONFIG";
/// The configuration file read when [`CONFIG_ENV`] is not set.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/slurm/dynmig.toml";
/// The largest configuration file read, in bytes.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;
/// The largest history snapshot read, in bytes: the bound the history service writes within
/// (4 MiB); a larger file is not read and the snapshot in use stays.
pub use dynmig_core::estimate::history::MAX_SNAPSHOT_BYTES;

/// What `init` installed. One value per configuration read, held behind an `Arc`: the size
/// of the `Ready` variant costs nothing, so it is not boxed.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum State {
    /// A valid configuration.
    Ready(Ready),
    /// The configuration could not be read or parsed; the message says why (it names the
    /// file).
    Broken {
        /// The error, for the log and for hinted jobs.
        reason: String,
    },
}

/// The settings of a valid configuration and the history snapshot read so far.
#[derive(Debug, Clone)]
pub struct Ready {
    /// The submit policy.
    pub policy: SubmitPolicy,
    /// `[estimator]`.
    pub estimator: EstimatorConfig,
    /// The history snapshot; `None` before one could be read.
    pub snapshot: Option<Arc<HistorySnapshot>>,
    /// `paths.history_snapshot`.
    pub snapshot_path: PathBuf,
    /// `history.snapshot_refresh`: also how often the catalog is looked at.
    pub snapshot_refresh: Duration,
    /// The controller's catalog (`<state_dir>/catalog.json`,
    /// [`dynmig_core::protocol::catalog`]); its profiles are in `policy.catalog`.
    pub catalog_path: PathBuf,
    /// Where the configuration came from, for the log.
    pub source: Source,
}

/// Where the configuration came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A configuration file.
    File(PathBuf),
    /// The built-in defaults, because the default file does not exist.
    Embedded,
}

static STATE: RwLock<Option<Arc<State>>> = RwLock::new(None);
static REFRESHER: Mutex<Option<(Sender<()>, JoinHandle<()>)>> = Mutex::new(None);

/// Reads the configuration: the file named by `env_path` (the value of [`CONFIG_ENV`]),
/// else `default_path`, else (only when `default_path` does not exist) the built-in
/// defaults. Reads the history snapshot once if it exists.
///
/// # Errors
/// A message naming the file: it cannot be read (a file named by [`CONFIG_ENV`] must exist),
/// is larger than [`MAX_CONFIG_BYTES`], or is not a valid configuration.
pub fn load(env_path: Option<&OsStr>, default_path: &Path) -> Result<Ready, String> {
    let (path, required) = match env_path {
        Some(p) if !p.is_empty() => (PathBuf::from(p), true),
        _ => (default_path.to_path_buf(), false),
    };
    let text = dynmig_host::fs::read_text_bounded(&path, MAX_CONFIG_BYTES)
        .map_err(|e| format!("dynmig: cannot read {}: {e}", path.display()))?;
    let (config, source) = match text {
        Some(text) => (
            parse_config(&text).map_err(|e| format!("dynmig: {}: {e}", path.display()))?,
            Source::File(path),
        ),
        None if required => {
            return Err(format!(
                "dynmig: cannot read {}: no such file (named by {CONFIG_ENV})",
                path.display()
            ))
        }
        None => (Config::default_embedded(), Source::Embedded),
    };
    let mut ready = Ready {
        policy: dynmig_core::submit::SubmitPolicy::from_config(&config),
        estimator: config.estimator,
        snapshot: None,
        snapshot_path: config.paths.history_snapshot.clone(),
        snapshot_refresh: config.history.snapshot_refresh,
        catalog_path: config.paths.state_dir.join(CATALOG_FILE),
        source,
    };
    let mut seen = None;
    ready.snapshot = read_snapshot(&ready.snapshot_path, &mut seen).map(Arc::new);
    if let Some(c) = read_catalog(&ready.catalog_path, &mut None) {
        ready.policy.catalog = c;
    }
    Ok(ready)
}

/// Makes `state` the one that `job_submit` and `job_modify` see.
pub fn install(state: State) {
    *STATE.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(state));
}

/// The installed state (an `Arc` clone); `None` before `init` or after `fini`.
pub fn current() -> Option<Arc<State>> {
    STATE.read().unwrap_or_else(PoisonError::into_inner).clone()
}

/// Stops the refresher and drops the state (plugin `fini`).
pub fn clear() {
    stop_refresher();
    *STATE.write().unwrap_or_else(PoisonError::into_inner) = None;
}

/// Starts the thread that keeps the installed [`Ready`] state's history snapshot fresh
/// (stopping one already running). Does nothing when the state is not [`State::Ready`].
///
/// # Errors
/// The thread cannot be started (the message is for the log; the state stays as it is).
pub fn start_refresher() -> Result<(), String> {
    stop_refresher();
    let Some(state) = current() else { return Ok(()) };
    let State::Ready(ready) = &*state else { return Ok(()) };
    let path = ready.snapshot_path.clone();
    let catalog_path = ready.catalog_path.clone();
    let every = ready.snapshot_refresh.max(Duration::from_millis(10));
    let (tx, rx) = mpsc::channel::<()>();
    let handle = std::thread::Builder::new()
        .name("dynmig-history".into())
        .spawn(move || {
            let mut seen = None;
            // The first look re-reads what load read; an unchanged catalog is not installed again.
            let mut catalog_seen = None;
            loop {
                refresh_once(&path, &mut seen);
                refresh_catalog_once(&catalog_path, &mut catalog_seen);
                match rx.recv_timeout(every) {
                    Err(RecvTimeoutError::Timeout) => continue,
                    _ => return,
                }
            }
        })
        .map_err(|e| format!("dynmig: cannot start the history snapshot thread: {e}"))?;
    *REFRESHER.lock().unwrap_or_else(PoisonError::into_inner) = Some((tx, handle));
    Ok(())
}

/// Stops and joins the refresher thread, if one runs.
pub fn stop_refresher() {
    let running = REFRESHER.lock().unwrap_or_else(PoisonError::into_inner).take();
    if let Some((tx, handle)) = running {
        drop(tx);
        let _ = handle.join();
    }
}

/// Whether a refresher thread runs.
pub fn refresher_running() -> bool {
    REFRESHER.lock().unwrap_or_else(PoisonError::into_inner).is_some()
}

/// Reads the snapshot at `path` if its modification time is not `seen`; `None` when it is
/// missing, unchanged, too large or bad (the last good one then stays in use).
fn read_snapshot(path: &Path, seen: &mut Option<SystemTime>) -> Option<HistorySnapshot> {
    let mtime = std::fs::metadata(path).and_then(|m| m.modified()).ok()?;
    if *seen == Some(mtime) {
        return None;
    }
    let text = dynmig_host::fs::read_text_bounded(path, MAX_SNAPSHOT_BYTES).ok()??;
    let snap = HistorySnapshot::parse(&text).ok()?;
    *seen = Some(mtime);
    Some(snap)
}

/// One pass of the refresher: a changed snapshot at `path` replaces the installed state
/// by a copy with the new snapshot, unless `init`/`fini` replaced the state meanwhile.
pub fn refresh_once(path: &Path, seen: &mut Option<SystemTime>) {
    let Some(snap) = read_snapshot(path, seen) else { return };
    let mut slot = STATE.write().unwrap_or_else(PoisonError::into_inner);
    let Some(state) = slot.as_ref() else { return };
    let State::Ready(ready) = &**state else { return };
    if ready.snapshot_path != path {
        return;
    }
    let mut next = ready.clone();
    next.snapshot = Some(Arc::new(snap));
    *slot = Some(Arc::new(State::Ready(next)));
}

/// The catalog at `path` if its modification time is not `seen` (`None`: missing, or never
/// read, when every profile is offered anyway): `Some(catalog)` (a missing, too large or bad
/// file gives the empty catalog, every profile: a bad file never strands a job), `None` when
/// unchanged.
fn read_catalog(path: &Path, seen: &mut Option<SystemTime>) -> Option<Catalog> {
    let mtime = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    if *seen == mtime {
        return None;
    }
    *seen = mtime;
    let text = dynmig_host::fs::read_text_bounded(path, MAX_CATALOG_BYTES)
        .ok()
        .flatten();
    Some(text.and_then(|t| Catalog::parse(&t).ok()).unwrap_or_default())
}

/// One catalog pass of the refresher: a changed catalog at `path` replaces the installed
/// state by a copy with the new catalog, unless `init`/`fini` replaced the state meanwhile.
pub fn refresh_catalog_once(path: &Path, seen: &mut Option<SystemTime>) {
    let Some(catalog) = read_catalog(path, seen) else {
        return;
    };
    let mut slot = STATE.write().unwrap_or_else(PoisonError::into_inner);
    let Some(state) = slot.as_ref() else { return };
    let State::Ready(ready) = &**state else { return };
    if ready.catalog_path != path || ready.policy.catalog == catalog {
        return;
    }
    let mut next = ready.clone();
    next.policy.catalog = catalog;
    *slot = Some(Arc::new(State::Ready(next)));
}

/// [`decide_with`] under `ready`'s policy, estimator settings and history snapshot, for the
/// job of user `uid` named `job_name`.
///
/// # Errors
/// As [`decide_with`].
pub fn decide(ready: &Ready, req: &JobRequest, uid: u32, job_name: Option<&str>) -> Result<Outcome, SubmitError> {
    let cx = EstimateContext {
        settings: Some(&ready.estimator),
        job: job_name.map(|job_name| JobIdentity { uid, job_name }),
        history: ready.snapshot.as_deref(),
    };
    decide_with(req, &ready.policy, &cx)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The tests that use the global state hold this.
    pub(crate) static GLOBAL: Mutex<()> = Mutex::new(());

    pub(crate) fn temp_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("dynmig-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_missing_default_file_gives_the_built_in_defaults() {
        let ready = load(None, Path::new("/nonexistent/dynmig.toml")).unwrap();
        assert_eq!(ready.source, Source::Embedded);
        assert!(!ready.policy.models.is_empty());
    }

    #[test]
    fn a_file_named_by_the_environment_must_exist_and_parse() {
        let err = load(Some(OsStr::new("/nonexistent/x.toml")), Path::new("/x")).unwrap_err();
        assert!(
            err.starts_with("dynmig: cannot read /nonexistent/x.toml: no such file"),
            "{err}"
        );
        let dir = temp_dir("state");
        let bad = dir.join("bad.toml");
        std::fs::write(&bad, "no_such_key = 1\n").unwrap();
        let err = load(Some(bad.as_os_str()), Path::new("/x")).unwrap_err();
        assert!(err.starts_with(&format!("dynmig: {}: ", bad.display())), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_config_that_is_a_fifo_is_refused_without_blocking() {
        let dir = temp_dir("fifo");
        let fifo = dir.join("dynmig.toml");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid C path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = load(Some(fifo.as_os_str()), Path::new("/x")).unwrap_err();
        assert!(err.contains("not a regular file"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn loading_starts_no_thread_and_the_refresher_is_started_and_joined_explicitly() {
        let _g = GLOBAL.lock().unwrap_or_else(PoisonError::into_inner);
        let dir = temp_dir("snap");
        let snap = dir.join("snap.tsv");
        std::fs::write(&snap, "1000\t5\t12884901888\t12884901888\t0\tft\n").unwrap();
        let conf = dir.join("dynmig.toml");
        std::fs::write(
            &conf,
            format!(
                "version = 1\n[paths]\nstate_dir = \"{}\"\nhistory_snapshot = \"{}\"\n[history]\nsnapshot_refresh = \"50ms\"\n\
                 [[node_group]]\nname = \"a\"\nnodes = \"n1\"\ngpu_model = \"A100-80GB\"\ngpus = 1\nbackend = \"simulated\"\n",
                dir.display(),
                snap.display()
            ),
        )
        .unwrap();
        let ready = load(Some(conf.as_os_str()), Path::new("/x")).unwrap();
        assert!(!refresher_running(), "load must not start a thread");
        assert!(ready.snapshot.is_some(), "the snapshot is read once at load");
        install(State::Ready(ready));
        start_refresher().unwrap();
        assert!(refresher_running());
        // A newer snapshot is picked up by the thread.
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(
            &snap,
            "1000\t5\t12884901888\t12884901888\t0\tft\n1000\t5\t1\t1\t0\tother\n",
        )
        .unwrap();
        let before = current().unwrap();
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while Arc::ptr_eq(&before, &current().unwrap()) {
            assert!(std::time::Instant::now() < until, "snapshot never re-read");
            std::thread::sleep(Duration::from_millis(10));
        }
        let state = current().unwrap();
        let State::Ready(ready) = &*state else {
            panic!("not ready")
        };
        let req = JobRequest {
            tres_per_node: Some("gres:gpu:1"),
            ..Default::default()
        };
        let Outcome::Rewrite(r) = decide(ready, &req, 1000, Some("ft")).unwrap() else {
            panic!("expected a rewrite")
        };
        // 12 GiB x 1.1 -> 2g.20gb from the history.
        assert_eq!(
            (r.decision.profile, r.decision.source.to_string().as_str()),
            ("2g.20gb", "history")
        );
        let Outcome::Rewrite(r) = decide(ready, &req, 1001, Some("ft")).unwrap() else {
            panic!("expected a rewrite")
        };
        assert_eq!(r.decision.profile, "7g.80gb");
        // The controller's catalog is picked up too: the same job gets the smallest profile
        // of the catalog that holds it, and every profile again once the file is gone.
        let catalog = ready.catalog_path.clone();
        assert_eq!(catalog, dir.join("catalog.json"));
        std::fs::write(&catalog, r#"{"v":1,"types":{"A100-80GB":["3g.40gb","7g.80gb"]}}"#).unwrap();
        let profile_now = || {
            let state = current().unwrap();
            let State::Ready(ready) = &*state else {
                panic!("not ready")
            };
            match decide(ready, &req, 1000, Some("ft")).unwrap() {
                Outcome::Rewrite(r) => r.decision.profile,
                o => panic!("expected a rewrite, got {o:?}"),
            }
        };
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while profile_now() != "3g.40gb" {
            assert!(std::time::Instant::now() < until, "catalog never read");
            std::thread::sleep(Duration::from_millis(10));
        }
        std::fs::remove_file(&catalog).unwrap();
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while profile_now() != "2g.20gb" {
            assert!(std::time::Instant::now() < until, "a removed catalog never dropped");
            std::thread::sleep(Duration::from_millis(10));
        }
        clear();
        assert!(!refresher_running(), "fini joins the thread");
        assert!(current().is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
