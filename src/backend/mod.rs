//! GPU backends: the operations the node agent needs on a node's GPUs, behind one trait.
//!
//! [`GpuBackend`] is shaped after NVML's MIG calls (notes/mig.md, "Reconfiguration
//! mechanics"): read the GPUs and their instances, create a GPU instance at an explicit
//! placement with one compute instance covering it, destroy a GPU instance, switch MIG mode.
//! Two implementations:
//! - [`NvmlBackend`], on real GPUs;
//! - [`SimulatedBackend`], a stateful fake kept in a JSON file with fake device files and
//!   fault injection, for tests and demos. It follows the same placement rules
//!   ([`dynmig_core::geometry::check_instances`]) and fails with the same [`BackendError`]s.
//!
//! Every operation works on one GPU at a time and is checked where it runs: the backend never
//! trusts a plan, it refuses what the hardware would refuse.

mod error;
mod fsutil;
pub mod nvml;
mod sim_faults;
mod sim_state;
pub mod simulated;

pub use error::BackendError;
pub(crate) use fsutil::write_atomically;
pub use nvml::NvmlBackend;
pub use sim_faults::{Fault, FaultKind, FaultOp, FaultPlan, FAULTS_ENV};
pub use simulated::SimulatedBackend;

use dynmig_core::geometry::{GpuModel, Placed, ProfileCounts};
use std::path::PathBuf;

/// One GPU of the node as the backend sees it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuState {
    /// The GPU's index on the node (NVML device index, `/dev/nvidia<index>`).
    pub index: u32,
    /// The GPU's model and its profile tables.
    pub model: &'static GpuModel,
    /// Whether MIG mode is on (the current mode, not a pending one).
    pub mig_enabled: bool,
    /// The GPU instances, ordered by start memory slice; empty when MIG is off.
    pub instances: Vec<InstanceState>,
}

impl GpuState {
    /// The placements of the instances, in the order of [`GpuState::instances`].
    pub fn placed(&self) -> Vec<Placed> {
        self.instances.iter().map(|i| i.placed).collect()
    }

    /// The profile multiset of the instances (`3x2g.20gb+1x1g.10gb`).
    pub fn layout(&self) -> ProfileCounts {
        ProfileCounts::of(&self.placed())
    }

    /// The instance with GPU-instance id `gi_id`, if any.
    pub fn instance(&self, gi_id: u32) -> Option<&InstanceState> {
        self.instances.iter().find(|i| i.gi_id == gi_id)
    }
}

/// One MIG GPU instance with its (single, full-size) compute instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceState {
    /// GPU-instance id, unique on its GPU while it exists (NVML `nvmlGpuInstanceInfo_t.id`).
    /// Ids are reused after a destroy; do not keep them across reconfigurations.
    pub gi_id: u32,
    /// Compute-instance id inside the GPU instance (NVML `nvmlComputeInstanceInfo_t.id`).
    pub ci_id: u32,
    /// Profile and start memory slice.
    pub placed: Placed,
    /// The CUDA device name, `MIG-<uuid>` (what `CUDA_VISIBLE_DEVICES` takes).
    pub uuid: String,
    /// Whether processes run on the instance (NVML: destroy would return `IN_USE`).
    pub busy: bool,
    /// Device files a job needs for this instance. The first one is unique to the instance
    /// (the file gres.conf names); the others, if any, are shared with other instances
    /// (e.g. `/dev/nvidia0`).
    pub device_files: Vec<PathBuf>,
}

/// The MIG operations a node agent needs, after NVML.
///
/// Object safe and `Send`, so that the agent holds a `Box<dyn GpuBackend>` chosen by config.
/// GPUs are addressed by node index (`0..gpu_count`). Every mutating call changes one GPU and
/// either happens completely or not at all.
pub trait GpuBackend: Send {
    /// All GPUs of the node with their MIG mode and instances, GPU 0 first.
    ///
    /// # Errors
    /// [`BackendError::Io`] or a driver error if the GPUs cannot be read.
    fn gpus(&self) -> Result<Vec<GpuState>, BackendError>;

    /// Creates a GPU instance of `profile` (a name such as `"3g.40gb"`) at memory slice
    /// `start`, and one compute instance covering all of it (NVML
    /// `nvmlDeviceCreateGpuInstanceWithPlacement` + `nvmlGpuInstanceCreateComputeInstance`).
    ///
    /// # Errors
    /// - [`BackendError::InvalidArgument`]: no such GPU, unknown profile, or a start the
    ///   profile cannot use.
    /// - [`BackendError::NotSupported`]: MIG is off on the GPU.
    /// - [`BackendError::InsufficientResources`]: overlaps an existing instance, or too many
    ///   instances of the profile, or not enough compute slices left.
    fn create_instance(&mut self, gpu: u32, profile: &str, start: u8) -> Result<InstanceState, BackendError>;

    /// Destroys the GPU instance `gi_id` of `gpu` and its compute instances.
    ///
    /// # Errors
    /// - [`BackendError::InUse`]: the instance has processes; nothing is destroyed.
    /// - [`BackendError::NotFound`]: no such instance.
    /// - [`BackendError::InvalidArgument`] / [`BackendError::NotSupported`]: no such GPU / MIG off.
    fn destroy_instance(&mut self, gpu: u32, gi_id: u32) -> Result<(), BackendError>;

    /// Turns MIG mode on or off. Setting the mode the GPU already has succeeds and does
    /// nothing. On Ampere this resets the GPU (notes/mig.md).
    ///
    /// # Errors
    /// - [`BackendError::InUse`]: instances (or processes) exist on the GPU.
    /// - [`BackendError::InvalidArgument`]: no such GPU.
    fn set_mig_mode(&mut self, gpu: u32, enabled: bool) -> Result<(), BackendError>;

    /// The device file of the whole GPU `gpu`, which gres.conf names for a GPU with MIG off;
    /// the default is the driver's `/dev/nvidia<gpu>`.
    fn gpu_device_file(&self, gpu: u32) -> PathBuf {
        PathBuf::from(format!("/dev/nvidia{gpu}"))
    }

    /// The power the physical GPU `gpu` draws now, in watts, or `None` if the backend cannot
    /// tell (the default). NVML: `nvmlDeviceGetPowerUsage`; simulated: the model of
    /// [`crate::power::modelled_watts`].
    ///
    /// # Errors
    /// No such GPU, or the backend failed to read it.
    fn power_watts(&self, gpu: u32) -> Result<Option<f64>, BackendError> {
        let _ = gpu;
        Ok(None)
    }

    /// One GPU by index; the default reads all of them with [`GpuBackend::gpus`].
    ///
    /// # Errors
    /// [`BackendError::InvalidArgument`] if there is no GPU `index`, or any error of `gpus`.
    fn gpu(&self, index: u32) -> Result<GpuState, BackendError> {
        let gpus = self.gpus()?;
        let count = gpus.len();
        gpus.into_iter()
            .find(|g| g.index == index)
            .ok_or_else(|| BackendError::InvalidArgument {
                what: format!("no GPU {index} (the node has {count})"),
            })
    }
}
