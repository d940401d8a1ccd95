//! [`open_backend`]: the backend a node group names, built from explicit settings.

use crate::{Backend, BackendError, GpuBackend, NvmlBackend, SimulatedBackend};
use dynmig_core::config::NvmlAccess;
use dynmig_core::geometry::GpuModel;
use std::path::PathBuf;

/// What [`open_backend`] needs, whichever the kind.
#[derive(Debug, Clone)]
pub struct BackendSettings {
    /// The node group's GPU model; every GPU must be of it.
    pub model: &'static GpuModel,
    /// The node's GPU count (simulated: the GPUs simulated; NVML: checked against NVML).
    pub gpus: u32,
    /// Whether MIG mode may be changed (the node group's `allow_mig_mode_change`).
    pub allow_mig_mode_change: bool,
    /// Simulated backend only: the state file (e.g. `<state dir>/sim-gpus.json`).
    pub sim_state_file: PathBuf,
    /// Simulated backend only: the folder of the fake device files.
    pub sim_device_dir: PathBuf,
    /// NVML backend only: the library, the driver's files and the deadline, for this node
    /// (`{node}` already replaced: [`NvmlAccess::for_node`]).
    pub nvml: NvmlAccess,
}

/// Opens the backend of kind `kind` with `settings`: the simulated node in
/// `settings.sim_state_file` (created if missing), or NVML checked to hold exactly
/// `settings.gpus` GPUs of `settings.model`. Both honour `allow_mig_mode_change`.
///
/// # Errors
/// - NVML: [`BackendError::Unavailable`] without a driver; [`BackendError::InvalidArgument`]
///   when a GPU is of another model or the GPU count differs.
/// - Simulated: as [`SimulatedBackend::open`] (a state file of another model or count, a
///   bad fault plan, I/O).
pub fn open_backend(kind: Backend, settings: &BackendSettings) -> Result<Box<dyn GpuBackend>, BackendError> {
    match kind {
        Backend::Simulated => Ok(Box::new(
            SimulatedBackend::open(
                &settings.sim_state_file,
                &settings.sim_device_dir,
                settings.model,
                settings.gpus,
            )?
            .allow_mig_mode_change(settings.allow_mig_mode_change),
        )),
        Backend::Nvml => {
            let b = NvmlBackend::open_expecting(&settings.nvml, settings.model, settings.allow_mig_mode_change)?;
            let found = b.gpus()?.len();
            if found != settings.gpus as usize {
                return Err(BackendError::InvalidArgument {
                    what: format!(
                        "NVML lists {found} GPUs but the node group says gpus = {}; fix the config",
                        settings.gpus
                    ),
                });
            }
            Ok(Box::new(b))
        }
    }
}
