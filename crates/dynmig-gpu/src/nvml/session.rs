//! One NVML session per process, and a deadline on every NVML operation.
//!
//! - **One session.** `nvmlInit` loads the driver's state and takes its locks; tools that
//!   call it per operation (a known mistake in peers' code: NVIDIA k8s-device-plugin and
//!   HAMi issues about per-call `nvmlInit`/`nvmlShutdown`) pay that each time and race other
//!   callers' shutdowns. [`Session::get`] initialises NVML once per library path and keeps
//!   the session for the life of the process (never shut down: the process exit releases it,
//!   as the NVML reference allows).
//! - **A deadline.** A driver call can block for minutes when the GPU or its driver is wedged
//!   (`NVML_ERROR_TIMEOUT` is what NVML returns when it notices; a hung ioctl returns
//!   nothing). [`Session::within`] runs one backend operation on a worker thread and waits
//!   at most the node group's `nvml_timeout`. When that passes, the operation is abandoned
//!   (the thread stays blocked in the driver), the caller gets
//!   [`BackendError::Unavailable`] naming the call and `NVML_ERROR_TIMEOUT`, and the session
//!   is marked hung: every later operation in this process fails at once with the same
//!   reason instead of piling more threads onto a driver that does not answer. The agent
//!   reports the failure and exits; its next start opens a fresh session.

use crate::nvml::errors::from_nvml;
use crate::BackendError;
use nvml_wrapper::Nvml;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// An initialised NVML library, shared by every backend of the process that names the same
/// library.
pub(crate) struct Session {
    /// The library.
    pub nvml: Nvml,
    /// Set once an operation overran its deadline: what it was.
    hung: Mutex<Option<String>>,
    /// Each GPU's geometry as NVML reported it the first time it was read (GPU index ->
    /// model).
    pub models: Mutex<HashMap<u32, &'static dynmig_core::geometry::GpuModel>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("hung", &self.hung)
            .finish_non_exhaustive()
    }
}

/// The sessions by library path (`None`: the loader's default, `libnvidia-ml.so.1`).
fn sessions() -> &'static Mutex<HashMap<Option<PathBuf>, &'static Session>> {
    static SESSIONS: OnceLock<Mutex<HashMap<Option<PathBuf>, &'static Session>>> = OnceLock::new();
    SESSIONS.get_or_init(|| Mutex::new(HashMap::new()))
}

impl Session {
    /// The process's session with `library` (`None`: the driver's `libnvidia-ml.so.1` as the
    /// dynamic loader finds it), initialising NVML on first use. A failed initialisation is
    /// not kept: the next call tries again.
    ///
    /// # Errors
    /// [`BackendError::Unavailable`] when the library cannot be loaded or the driver is not
    /// running; other NVML errors as [`from_nvml`].
    pub fn get(library: Option<&Path>) -> Result<&'static Session, BackendError> {
        let key = library.map(Path::to_path_buf);
        let mut all = sessions().lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = all.get(&key) {
            return Ok(s);
        }
        let nvml = match library {
            None => Nvml::init(),
            Some(p) => Nvml::builder().lib_path(p.as_os_str()).init(),
        }
        .map_err(|e| {
            let what = library.map_or_else(|| "nvmlInit".to_string(), |p| format!("nvmlInit ({})", p.display()));
            from_nvml(e, &what)
        })?;
        // Leaked on purpose: one per library per process, alive until the process exits.
        let session: &'static Session = Box::leak(Box::new(Session {
            nvml,
            hung: Mutex::new(None),
            models: Mutex::new(HashMap::new()),
        }));
        all.insert(key, session);
        Ok(session)
    }

    /// Runs `op` (one backend operation, described by `what` for errors) on a worker thread
    /// and waits at most `deadline` for it (module docs).
    ///
    /// # Errors
    /// `op`'s error; [`BackendError::Unavailable`] with `NVML_ERROR_TIMEOUT` when the deadline
    /// passes or an earlier operation of this process overran its own; [`BackendError::Io`]
    /// when no thread can be started.
    pub fn within<T, F>(&'static self, what: &str, deadline: Duration, op: F) -> Result<T, BackendError>
    where
        T: Send + 'static,
        F: FnOnce(&'static Session) -> Result<T, BackendError> + Send + 'static,
    {
        if let Some(earlier) = self.hung.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            return Err(BackendError::Unavailable {
                what: format!(
                    "{what}: not tried: an earlier NVML call ({earlier}) did not return within its deadline (NVML_ERROR_TIMEOUT); restart the process once the driver answers again"
                ),
            });
        }
        let (tx, rx) = mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("dynmig-nvml".into())
            .spawn(move || {
                let _ = tx.send(op(self));
            })
            .map_err(|source| BackendError::Io {
                what: format!("{what}: cannot start an NVML worker thread"),
                source,
            })?;
        match rx.recv_timeout(deadline) {
            Ok(r) => r,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                *self.hung.lock().unwrap_or_else(|p| p.into_inner()) = Some(what.to_string());
                Err(BackendError::Unavailable {
                    what: format!(
                        "{what}: NVML did not answer within {} s (NVML_ERROR_TIMEOUT); the call is abandoned, and this process makes no further NVML call",
                        deadline.as_secs_f64()
                    ),
                })
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(BackendError::Unavailable {
                what: format!("{what}: the NVML worker thread died (a panic in the NVML wrapper)"),
            }),
        }
    }
}
