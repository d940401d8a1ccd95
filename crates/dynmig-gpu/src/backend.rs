//! The [`GpuBackend`] trait and the GPU state it reports.
//!
//! [`GpuBackend`] is shaped after NVML's MIG calls (NVIDIA NVML API Reference, "Multi
//! Instance GPU Management"): read the GPUs and their instances, create a GPU instance at an
//! explicit placement with one compute instance covering it, destroy a GPU instance, switch
//! MIG mode. The Prolog and Epilog need three more: find the instance behind a job's device
//! files, claim it for a job, release a job. Two implementations:
//! - [`crate::NvmlBackend`], on real GPUs;
//! - [`crate::SimulatedBackend`], a stateful fake kept in a JSON file with fake device files
//!   and fault injection, for tests and demos. It follows the same placement rules
//!   ([`dynmig_core::geometry::check_instances`]) and fails with the same [`BackendError`]s.
//!
//! Every operation works on one GPU at a time and is checked where it runs: the backend never
//! trusts a plan, it refuses what the hardware would refuse.

use crate::BackendError;
use dynmig_core::geometry::{GpuModel, Placed, ProfileCounts};
use std::path::{Path, PathBuf};

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
/// Object safe, `Send` and `Debug`, so that the agent holds a `Box<dyn GpuBackend>` chosen by config.
/// GPUs are addressed by node index (`0..gpu_count`). Every mutating call changes one GPU and
/// either happens completely or not at all.
pub trait GpuBackend: Send + std::fmt::Debug {
    /// All GPUs of the node with their MIG mode and instances, GPU 0 first.
    ///
    /// # Errors
    /// [`BackendError::Io`] or a driver error if the GPUs cannot be read.
    fn gpus(&self) -> Result<Vec<GpuState>, BackendError>;

    /// Creates a GPU instance at the placement `placed` (profile and start memory slice),
    /// and one compute instance covering all of it (NVML
    /// `nvmlDeviceCreateGpuInstanceWithPlacement` + `nvmlGpuInstanceCreateComputeInstance`).
    ///
    /// # Errors
    /// - [`BackendError::InvalidArgument`]: no such GPU, a profile not of the GPU's model, or
    ///   a start the profile cannot use.
    /// - [`BackendError::NotSupported`]: MIG is off on the GPU.
    /// - [`BackendError::InsufficientResources`]: overlaps an existing instance, or too many
    ///   instances of the profile, or not enough compute slices left.
    fn create_instance(&mut self, gpu: u32, placed: Placed) -> Result<InstanceState, BackendError>;

    /// Destroys the GPU instance `gi_id` of `gpu` and its compute instances.
    ///
    /// # Errors
    /// - [`BackendError::InUse`]: the instance has processes; nothing is destroyed.
    /// - [`BackendError::NotFound`]: no such instance.
    /// - [`BackendError::InvalidArgument`] / [`BackendError::NotSupported`]: no such GPU / MIG off.
    fn destroy_instance(&mut self, gpu: u32, gi_id: u32) -> Result<(), BackendError>;

    /// Turns MIG mode on or off. Setting the mode the GPU already has succeeds and does
    /// nothing. On Ampere the GPU is reset when the mode changes (NVIDIA MIG User Guide,
    /// "Enable MIG Mode").
    ///
    /// # Errors
    /// - [`BackendError::NotAllowed`]: the mode would change but
    ///   [`GpuBackend::allows_mig_mode_change`] is false.
    /// - [`BackendError::InUse`]: instances (or processes) exist on the GPU.
    /// - [`BackendError::InvalidArgument`]: no such GPU.
    fn set_mig_mode(&mut self, gpu: u32, enabled: bool) -> Result<(), BackendError>;

    /// Whether [`GpuBackend::set_mig_mode`] may change a GPU's mode (the node group's
    /// `allow_mig_mode_change`). [`crate::apply_transition`] turns MIG on only when this is
    /// true, and otherwise says which setting would allow it.
    fn allows_mig_mode_change(&self) -> bool;

    /// The device file of the whole GPU `gpu`, which gres.conf names for a GPU with MIG off;
    /// the default is the driver's `/dev/nvidia<gpu>`.
    fn gpu_device_file(&self, gpu: u32) -> PathBuf {
        PathBuf::from(format!("/dev/nvidia{gpu}"))
    }

    /// The power the physical GPU `gpu` draws now, in watts, or `None` if the backend cannot
    /// tell (the default). NVML: `nvmlDeviceGetPowerUsage`; simulated: the core's power model
    /// ([`dynmig_core::energy::PowerModel::board_w`] of the busy instances).
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

    /// The instance whose device files are `device_files` (the files of one gres.conf line,
    /// `File=` or all of `MultipleFiles=`, in order), with its GPU index; `None` if none has
    /// them. Lists are compared file by file, each as given or else canonicalized.
    ///
    /// A GPU with MIG off counts as one instance when `device_files` is exactly
    /// `[gpu_device_file(gpu)]`: it is returned with `gi_id` [`WHOLE_GPU`], `ci_id`
    /// [`WHOLE_GPU`], the model's full profile at slice 0 as `placed`, an empty `uuid`, and
    /// `busy` as the backend knows it (simulated: a job claimed it; NVML: false).
    ///
    /// The default reads [`GpuBackend::gpus`]. It does not check that the files exist: the
    /// simulated backend re-creates missing device files when opened, so a caller that must
    /// notice a missing file checks before opening the backend.
    ///
    /// # Errors
    /// The GPUs cannot be read.
    fn find_instance(&self, device_files: &[PathBuf]) -> Result<Option<(u32, InstanceState)>, BackendError> {
        Ok(find_in(self.gpus()?, |g| self.gpu_device_file(g), device_files))
    }

    /// Marks instance `gi_id` of `gpu` ([`WHOLE_GPU`] for a GPU with MIG off) as used by Slurm
    /// job `job` (the Prolog's call). Simulated: the job is attached, so the instance is busy
    /// and cannot be destroyed until [`GpuBackend::release_job`]. NVML: nothing is recorded,
    /// the job's processes make the instance busy; the default only checks that the instance
    /// exists. Claiming twice is the same as once.
    ///
    /// # Errors
    /// [`BackendError::NotFound`]: no such instance (or `WHOLE_GPU` on a GPU with MIG on);
    /// [`BackendError::InvalidArgument`]: no such GPU.
    fn claim(&mut self, gpu: u32, gi_id: u32, job: u32) -> Result<(), BackendError> {
        let _ = job;
        let g = self.gpu(gpu)?;
        let exists = if gi_id == WHOLE_GPU {
            !g.mig_enabled
        } else {
            g.instance(gi_id).is_some()
        };
        if exists {
            Ok(())
        } else {
            Err(BackendError::NotFound {
                what: format!("no {} on GPU {gpu}", instance_name(gi_id)),
            })
        }
    }

    /// Releases everything Slurm job `job` claimed, wherever it was (the Epilog's call, which
    /// need not know where the job ran). Simulated: the job is detached from every instance
    /// and whole GPU. NVML: nothing to do (the default). Releasing a job that holds nothing
    /// succeeds.
    ///
    /// # Errors
    /// The backend's state cannot be read or written.
    fn release_job(&mut self, job: u32) -> Result<(), BackendError> {
        let _ = job;
        Ok(())
    }
}

/// The `gi_id` (and `ci_id`) that stands for a whole GPU with MIG off, in
/// [`GpuBackend::find_instance`], [`GpuBackend::claim`] and the energy ledger.
pub const WHOLE_GPU: u32 = u32::MAX;

/// `GI 3`, or `whole GPU` for [`WHOLE_GPU`].
/// The GPU and instance whose device files are exactly `device_files` among `gpus`; a GPU
/// with MIG off matches its single whole-GPU file (`whole_file`) as [`WHOLE_GPU`].
pub(crate) fn find_in(
    gpus: Vec<GpuState>,
    whole_file: impl Fn(u32) -> PathBuf,
    device_files: &[PathBuf],
) -> Option<(u32, InstanceState)> {
    if device_files.is_empty() {
        return None;
    }
    for g in gpus {
        if !g.mig_enabled {
            let whole = whole_file(g.index);
            if device_files.len() == 1 && same_file(&device_files[0], &whole) {
                return Some((g.index, whole_gpu_instance(&g, whole)));
            }
            continue;
        }
        for inst in g.instances {
            let hit = inst.device_files.len() == device_files.len()
                && inst.device_files.iter().zip(device_files).all(|(a, b)| same_file(a, b));
            if hit {
                return Some((g.index, inst));
            }
        }
    }
    None
}

pub(crate) fn instance_name(gi_id: u32) -> String {
    if gi_id == WHOLE_GPU {
        "whole GPU (MIG off)".into()
    } else {
        format!("GPU instance {gi_id}")
    }
}

/// The pseudo-instance of a GPU with MIG off, as [`GpuBackend::find_instance`] describes.
pub(crate) fn whole_gpu_instance(g: &GpuState, device_file: PathBuf) -> InstanceState {
    InstanceState {
        gi_id: WHOLE_GPU,
        ci_id: WHOLE_GPU,
        placed: Placed {
            profile: g.model.full_profile(),
            start: 0,
        },
        uuid: String::new(),
        busy: false,
        device_files: vec![device_file],
    }
}

/// Whether `a` and `b` name the same file: equal as given, or equal once canonicalized.
fn same_file(a: &Path, b: &Path) -> bool {
    a == b
        || match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
            (Ok(x), Ok(y)) => x == y,
            _ => false,
        }
}
