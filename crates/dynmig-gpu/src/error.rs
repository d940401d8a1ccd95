//! [`BackendError`]: what a GPU backend operation can fail with.
//!
//! The variants mirror NVML's return codes (`nvml.h`, `nvmlReturn_t`) so that the NVML
//! backend maps them one to one and the simulated backend fails the same way real hardware
//! does. Callers decide on the variant: `InUse` means "wait and retry later",
//! `InsufficientResources` means "the plan does not fit what is there", the others are bugs
//! or broken nodes.

use std::path::Path;

/// A failed backend operation.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// `NVML_ERROR_NOT_SUPPORTED`: the GPU or driver cannot do this, or MIG is off on the GPU
    /// (NVML answers instance operations on a GPU without MIG mode this way).
    #[error("not supported (NVML_ERROR_NOT_SUPPORTED): MIG is off on this GPU or the GPU lacks the feature")]
    NotSupported,
    /// `NVML_ERROR_NO_PERMISSION`: MIG changes need root (or read access to
    /// `/proc/driver/nvidia/capabilities/mig/config`).
    #[error("no permission (NVML_ERROR_NO_PERMISSION): MIG changes need root")]
    NoPermission,
    /// `NVML_ERROR_IN_USE`: an instance has processes, or a MIG mode change was asked for
    /// while instances (or processes) exist.
    #[error("in use (NVML_ERROR_IN_USE): {what}")]
    InUse {
        /// What is in use, e.g. `GPU 0 GI 3 (3g.40gb@0) runs jobs [12]`.
        what: String,
    },
    /// `NVML_ERROR_INSUFFICIENT_RESOURCES`: the instance does not fit next to those that
    /// exist (overlapping slices, too many of a profile, not enough compute slices).
    #[error("insufficient resources (NVML_ERROR_INSUFFICIENT_RESOURCES): {what}")]
    InsufficientResources {
        /// Why it does not fit.
        what: String,
    },
    /// `NVML_ERROR_INVALID_ARGUMENT`: no such GPU index, an unknown profile, or a start
    /// slice the profile cannot use.
    #[error("invalid argument (NVML_ERROR_INVALID_ARGUMENT): {what}")]
    InvalidArgument {
        /// The bad argument and what is allowed.
        what: String,
    },
    /// `NVML_ERROR_NOT_FOUND`: no GPU instance with that id.
    #[error("not found (NVML_ERROR_NOT_FOUND): {what}")]
    NotFound {
        /// What was looked for.
        what: String,
    },
    /// `NVML_ERROR_UNKNOWN`: the driver failed without saying why.
    #[error("unknown error (NVML_ERROR_UNKNOWN)")]
    Unknown,
    /// The backend cannot be used at all: NVML's library is missing, the driver is not
    /// loaded, the GPU fell off the bus or needs a reset, or a MIG mode change is still
    /// pending (`NVML_ERROR_LIBRARY_NOT_FOUND`, `..._DRIVER_NOT_LOADED`, `..._GPU_IS_LOST`,
    /// `..._RESET_REQUIRED`, ...).
    #[error("GPU backend unavailable: {what}")]
    Unavailable {
        /// What is missing or broken, and what to do.
        what: String,
    },
    /// The config forbids the operation (e.g. a MIG mode change while
    /// `node_group.allow_mig_mode_change = false`). Nothing was changed.
    #[error("not allowed by the config: {what}")]
    NotAllowed {
        /// What was refused and which setting allows it.
        what: String,
    },
    /// A file operation of the backend failed (the simulated backend's state, lock, faults
    /// or device files).
    #[error("{what}: {source}")]
    Io {
        /// What was being done, naming the file.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl BackendError {
    /// The NVML return-code name of this error (`"NVML_ERROR_IN_USE"`), for logs and drain
    /// reasons; `Io`, `Unavailable` and `NotAllowed`, which are not NVML codes, give `"IO"`,
    /// `"UNAVAILABLE"` and `"NOT_ALLOWED"`.
    pub fn nvml_name(&self) -> &'static str {
        match self {
            Self::NotSupported => "NVML_ERROR_NOT_SUPPORTED",
            Self::NoPermission => "NVML_ERROR_NO_PERMISSION",
            Self::InUse { .. } => "NVML_ERROR_IN_USE",
            Self::InsufficientResources { .. } => "NVML_ERROR_INSUFFICIENT_RESOURCES",
            Self::InvalidArgument { .. } => "NVML_ERROR_INVALID_ARGUMENT",
            Self::NotFound { .. } => "NVML_ERROR_NOT_FOUND",
            Self::Unknown => "NVML_ERROR_UNKNOWN",
            Self::Io { .. } => "IO",
            Self::Unavailable { .. } => "UNAVAILABLE",
            Self::NotAllowed { .. } => "NOT_ALLOWED",
        }
    }

    /// An [`BackendError::Io`] for `action` ("write", "lock", ...) on `path`.
    pub fn io(action: &str, path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            what: format!("cannot {action} {}", path.display()),
            source,
        }
    }
}
