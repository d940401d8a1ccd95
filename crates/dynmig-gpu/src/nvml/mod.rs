// One piece: the NVML backend's read and apply paths, which share the handles, the timeouts and the error mapping to NVML's return codes.
//! [`NvmlBackend`]: real MIG GPUs through NVML (nvml-wrapper, and its raw bindings for the
//! calls the safe crate lacks, kept in a private module: they take raw NVML handles).
//!
//! - **Reading** ([`GpuBackend::gpus`]): MIG mode, then for every profile of the GPU's model
//!   its GPU instances (`nvmlDeviceGetGpuInstances`, `nvmlGpuInstanceGetInfo`) with their
//!   compute instances; busy = some compute process runs on the instance
//!   (`nvmlDeviceGetComputeRunningProcesses` on the parent reports each process's GI/CI id);
//!   the CUDA name `MIG-<uuid>` from the MIG device handles; device files from
//!   `/proc/driver/nvidia-caps/mig-minors` ([`caps`]).
//! - **Creating** ([`GpuBackend::create_instance`]): the GPU instance at the explicit
//!   placement, then one compute instance covering all its slices; if the compute instance
//!   fails, the GPU instance is destroyed again, so the call happens completely or not at all.
//! - **Destroying**: refused with `InUse` while processes run on the instance (checked first,
//!   then NVML refuses too), compute instances first, then the GPU instance.
//! - **MIG mode**: only when the node group sets `allow_mig_mode_change = true`; otherwise
//!   [`BackendError::NotAllowed`]. Ampere GPUs reset when the mode changes (NVML does it when
//!   the GPU is idle); Hopper and later keep no mode across a reboot or driver reload, so a
//!   site either enables MIG at boot or lets dynmig do it. A mode left pending (a GPU that
//!   needs a reset) is reported as [`BackendError::Unavailable`]; dynmig never resets a GPU.
//! - **Power**: `nvmlDeviceGetPowerUsage` (milliwatts) of the physical GPU.
//!
//! The NVML library is loaded at run time: the binary builds and runs without a driver, and
//! [`NvmlBackend::open`] fails with [`BackendError::Unavailable`] saying so. Which library and
//! where the driver's files are come from the node group ([`NvmlAccess`]): tests and the demo
//! load the NVML stand-in (crates/nvml-standin) through the same code.
//!
//! NVML is initialised once per process and library ([`session`]); every operation of the
//! backend (one read of a GPU, one create, one destroy, one mode change) runs under the node
//! group's `nvml_timeout`.

pub mod caps;
pub mod errors;
mod raw;
mod session;

use crate::probe::{ProbeReport, ProbedGpu, ProbedInstance, ProbedProfile};
use crate::{BackendError, GpuBackend, GpuState, InstanceState};
use caps::MigMinors;
use dynmig_core::config::NvmlAccess;
use dynmig_core::geometry::{cross_check, model_for_device, GpuModel, NvmlGeometry, NvmlProfile, Placed};
use errors::{from_nvml, from_return, return_name};
use nvml_wrapper::Device;
use nvml_wrapper_sys::bindings as sys;
use session::Session;
use std::path::PathBuf;
use std::time::Duration;

/// NVML's GPU-instance profile indices (`NVML_GPU_INSTANCE_PROFILE_*`) the probe asks about.
const PROFILE_INDICES: std::ops::Range<u32> = 0..sys::NVML_GPU_INSTANCE_PROFILE_COUNT;

/// A node's GPUs through NVML.
pub struct NvmlBackend {
    driver: Driver,
    allow_mig_mode_change: bool,
    deadline: Duration,
}

impl std::fmt::Debug for NvmlBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlBackend")
            .field("allow_mig_mode_change", &self.allow_mig_mode_change)
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

/// What one operation needs: the process's session and where the driver's files are. Cheap
/// to clone into the worker thread of [`Session::within`].
#[derive(Clone)]
struct Driver {
    session: &'static Session,
    mig_minors: PathBuf,
    caps_dir: PathBuf,
    dev_dir: PathBuf,
}

impl NvmlBackend {
    /// The system's NVML (`libnvidia-ml.so.1` as the loader finds it, files under `/`, a
    /// 30 s deadline). MIG mode changes are refused unless `allow_mig_mode_change` (the node
    /// group's `allow_mig_mode_change`).
    ///
    /// # Errors
    /// [`BackendError::Unavailable`] when libnvidia-ml.so cannot be loaded or the driver is
    /// not running (the message says which); other NVML errors as [`errors::from_nvml`].
    pub fn open(allow_mig_mode_change: bool) -> Result<Self, BackendError> {
        Self::open_with(&NvmlAccess::default(), allow_mig_mode_change)
    }

    /// NVML as `access` says (a node's settings, `{node}` already replaced): the library,
    /// the root of the driver's files and the deadline of each operation. The process's
    /// session with that library is reused if there is one ([`session`]).
    ///
    /// # Errors
    /// As [`Self::open`].
    pub fn open_with(access: &NvmlAccess, allow_mig_mode_change: bool) -> Result<Self, BackendError> {
        let session = Session::get(access.library.as_deref())?;
        let root = &access.device_root;
        let under = |p: &str| root.join(p.trim_start_matches('/'));
        Ok(Self {
            driver: Driver {
                session,
                mig_minors: under(caps::MIG_MINORS),
                caps_dir: under(caps::CAPS_DIR),
                dev_dir: under("/dev"),
            },
            allow_mig_mode_change,
            deadline: access.timeout,
        })
    }

    /// Opens NVML as `access` says and checks that every GPU is of `expected` (the node
    /// group's `gpu_model`).
    ///
    /// # Errors
    /// As [`Self::open`]; [`BackendError::InvalidArgument`] naming the GPU whose model
    /// differs or that dynmig has no table for.
    pub fn open_expecting(
        access: &NvmlAccess,
        expected: &'static GpuModel,
        allow_mig_mode_change: bool,
    ) -> Result<Self, BackendError> {
        let this = Self::open_with(access, allow_mig_mode_change)?;
        this.run("check the GPU models", move |d| {
            for i in 0..d.count()? {
                let m = d.model(&d.device(i)?, i)?;
                if m.name != expected.name {
                    return Err(BackendError::InvalidArgument {
                        what: format!(
                            "GPU {i} is an {} but the config's gpu_model is {}",
                            m.name, expected.name
                        ),
                    });
                }
            }
            Ok(())
        })?;
        Ok(this)
    }

    /// Runs one operation under the deadline ([`Session::within`]).
    fn run<T, F>(&self, what: &str, op: F) -> Result<T, BackendError>
    where
        T: Send + 'static,
        F: FnOnce(&Driver) -> Result<T, BackendError> + Send + 'static,
    {
        let driver = self.driver.clone();
        self.driver.session.within(what, self.deadline, move |_| op(&driver))
    }

    /// Reads everything `dynmig gpu probe` shows, with read-only NVML queries only.
    ///
    /// # Errors
    /// Only when the GPUs cannot be counted; a failing query of one GPU is recorded in its
    /// [`ProbedGpu::errors`] or [`ProbedGpu::profile_errors`] instead.
    pub fn probe(&self) -> Result<ProbeReport, BackendError> {
        self.run("probe", |d| d.probe())
    }

    /// How many more instances of each of `gpu`'s profiles NVML would create now
    /// (`nvmlDeviceGetGpuInstanceRemainingCapacity`), `(profile name, count)`.
    ///
    /// # Errors
    /// No such GPU, MIG off ([`BackendError::NotSupported`]), or the NVML error.
    pub fn remaining_capacity(&self, gpu: u32) -> Result<Vec<(&'static str, u32)>, BackendError> {
        self.run("remaining capacity", move |d| d.remaining_capacity(gpu))
    }
}

impl Driver {
    fn nvml(&self) -> &'static nvml_wrapper::Nvml {
        &self.session.nvml
    }

    fn count(&self) -> Result<u32, BackendError> {
        self.nvml()
            .device_count()
            .map_err(|e| from_nvml(e, "nvmlDeviceGetCount"))
    }

    fn device(&self, gpu: u32) -> Result<Device<'_>, BackendError> {
        let count = self.count()?;
        if gpu >= count {
            return Err(BackendError::InvalidArgument {
                what: format!("no GPU {gpu} (the node has {count})"),
            });
        }
        self.nvml()
            .device_by_index(gpu)
            .map_err(|e| from_nvml(e, &format!("GPU {gpu}: nvmlDeviceGetHandleByIndex")))
    }

    /// GPU `gpu`'s geometry: read from NVML the first time in this process (profiles,
    /// memory, placements: [`GpuModel::from_nvml`]), checked against dynmig's table of the
    /// board ([`cross_check`]: each difference logged as a warning; what NVML says is used),
    /// then kept for the session. A board that answers no GPU-instance profile gets its table.
    fn model(&self, dev: &Device<'_>, gpu: u32) -> Result<&'static GpuModel, BackendError> {
        if let Some(m) = self.session.models.lock().unwrap_or_else(|p| p.into_inner()).get(&gpu) {
            return Ok(m);
        }
        let name = dev.name().map_err(|e| from_nvml(e, &format!("GPU {gpu}: name")))?;
        let pci = dev
            .pci_info()
            .map_err(|e| from_nvml(e, &format!("GPU {gpu}: PCI info")))?;
        let id = (pci.pci_device_id >> 16) as u16;
        let table = model_for_device(id, &name);
        let geometry = self.geometry(dev, &name, pci.pci_device_id)?;
        let model = if geometry.profiles.is_empty() {
            table.ok_or_else(|| BackendError::InvalidArgument {
                what: format!(
                    "GPU {gpu} ('{name}', PCI device ID 0x{id:04X}) reports no MIG profile and has no MIG table in dynmig; run `dynmig gpu probe`"
                ),
            })?
        } else {
            let built = GpuModel::from_nvml(&geometry, table).map_err(|e| BackendError::InvalidArgument {
                what: format!("GPU {gpu}: the MIG geometry NVML reports cannot be used: {e}"),
            })?;
            if let Some(t) = table {
                for line in cross_check(built, t) {
                    log::warn!(
                        "GPU {gpu}: NVML and dynmig's {} table differ: {line}; dynmig uses what NVML says",
                        t.name
                    );
                }
            }
            built
        };
        self.session
            .models
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(gpu, model);
        Ok(model)
    }

    /// Every GPU-instance profile the device answers, with its placements.
    fn geometry(&self, dev: &Device<'_>, name: &str, pci_device_id: u32) -> Result<NvmlGeometry, BackendError> {
        let handle = unsafe { dev.handle() };
        let memory_total_mib = dev.memory_info().map(|m| m.total / (1024 * 1024)).unwrap_or(0);
        let mut profiles = Vec::new();
        for index in PROFILE_INDICES {
            let Ok(info) = raw::gi_profile_info(self.nvml(), handle, index) else {
                continue;
            };
            let placements = raw::gi_placements(self.nvml(), handle, info.id)
                .map_err(|c| from_return(c, &format!("placements of profile ID {}", info.id)))?;
            profiles.push(NvmlProfile {
                id: info.id,
                name: info.name.unwrap_or_default(),
                slice_count: info.slice_count,
                instance_count: info.instance_count,
                memory_mib: info.memory_mib,
                placements,
            });
        }
        Ok(NvmlGeometry {
            name: name.to_string(),
            pci_device_id,
            memory_total_mib,
            profiles,
        })
    }

    fn mig_enabled(dev: &Device<'_>, gpu: u32) -> Result<bool, BackendError> {
        match dev.mig_mode() {
            Ok(m) => Ok(m.current == sys::NVML_DEVICE_MIG_ENABLE),
            Err(nvml_wrapper::error::NvmlError::NotSupported) => Ok(false),
            Err(e) => Err(from_nvml(e, &format!("GPU {gpu}: nvmlDeviceGetMigMode"))),
        }
    }

    fn minor(dev: &Device<'_>, gpu: u32) -> u32 {
        dev.minor_number().unwrap_or(gpu)
    }

    fn read_gpu(&self, gpu: u32) -> Result<GpuState, BackendError> {
        let dev = self.device(gpu)?;
        let model = self.model(&dev, gpu)?;
        let mig_enabled = Self::mig_enabled(&dev, gpu)?;
        let mut state = GpuState {
            index: gpu,
            model,
            mig_enabled,
            instances: Vec::new(),
        };
        if !mig_enabled {
            return Ok(state);
        }
        let handle = unsafe { dev.handle() };
        let minor = Self::minor(&dev, gpu);
        // A missing mig-minors file (no nvidia-caps) leaves only /dev/nvidiaN per instance.
        let minors = MigMinors::read(&self.mig_minors).unwrap_or_default();
        let busy_gis: Vec<u32> = dev
            .running_compute_processes()
            .map_err(|e| from_nvml(e, &format!("GPU {gpu}: running processes")))?
            .iter()
            .filter_map(|p| p.gpu_instance_id)
            .collect();
        let uuids = self.mig_uuids(&dev);
        for p in model.profiles {
            let gis = raw::gpu_instances(self.nvml(), handle, p.id, u32::from(p.max_instances))
                .map_err(|c| from_return(c, &format!("GPU {gpu}: list {} instances", p.name)))?;
            for gi in gis {
                let placed = self.placed(model, gpu, &gi)?;
                let cis = raw::compute_instances(self.nvml(), gi.handle)
                    .map_err(|c| from_return(c, &format!("GPU {gpu}: compute instances of GI {}", gi.id)))?;
                let ci_id = cis.first().map(|(id, _)| *id);
                state.instances.push(InstanceState {
                    gi_id: gi.id,
                    ci_id: ci_id.unwrap_or(NO_COMPUTE_INSTANCE),
                    placed,
                    uuid: uuids
                        .iter()
                        .find(|(g, c, _)| *g == gi.id && Some(*c) == ci_id)
                        .map(|(_, _, u)| u.clone())
                        .unwrap_or_default(),
                    busy: busy_gis.contains(&gi.id),
                    device_files: minors.device_files(&self.dev_dir, &self.caps_dir, minor, gi.id, ci_id),
                });
            }
        }
        state.instances.sort_by_key(|i| i.placed.start);
        Ok(state)
    }

    fn placed(&self, model: &'static GpuModel, gpu: u32, gi: &raw::GiInfo) -> Result<Placed, BackendError> {
        let profile =
            model
                .profiles
                .iter()
                .find(|p| p.id == gi.profile_id)
                .ok_or_else(|| BackendError::InvalidArgument {
                    what: format!(
                        "GPU {gpu}: GI {} has profile ID {}, which the {} table lacks; run `dynmig gpu probe`",
                        gi.id, gi.profile_id, model.name
                    ),
                })?;
        if gi.size != u32::from(profile.memory_slices) {
            return Err(BackendError::InvalidArgument {
                what: format!(
                    "GPU {gpu}: GI {} ({}) covers {} memory slices, the table says {}",
                    gi.id, profile.name, gi.size, profile.memory_slices
                ),
            });
        }
        Ok(Placed {
            profile,
            start: gi.start as u8,
        })
    }

    /// `(gi id, ci id, "MIG-<uuid>")` of every MIG device of `dev`.
    fn mig_uuids(&self, dev: &Device<'_>) -> Vec<(u32, u32, String)> {
        let max = dev.mig_device_count().unwrap_or(0);
        (0..max)
            .filter_map(|i| dev.mig_device_by_index(i).ok())
            .filter_map(|m| {
                let ids = raw::mig_device_ids(self.nvml(), unsafe { m.handle() }).ok()?;
                let uuid = m.uuid().ok()?;
                Some((ids.0, ids.1, uuid))
            })
            .collect()
    }

    /// Reads everything `dynmig gpu probe` shows, with read-only NVML queries only.
    ///
    /// # Errors
    /// Only when the GPUs cannot be counted; a failing query of one GPU is recorded in its
    /// [`ProbedGpu::errors`] or [`ProbedGpu::profile_errors`] instead.
    fn probe(&self) -> Result<ProbeReport, BackendError> {
        let mut report = ProbeReport {
            driver_version: self.nvml().sys_driver_version().ok(),
            nvml_version: self.nvml().sys_nvml_version().ok(),
            gpus: Vec::new(),
        };
        for i in 0..self.count()? {
            report.gpus.push(self.probe_gpu(i));
        }
        Ok(report)
    }

    fn probe_gpu(&self, index: u32) -> ProbedGpu {
        let mut g = ProbedGpu {
            index,
            ..ProbedGpu::default()
        };
        let dev = match self.device(index) {
            Ok(d) => d,
            Err(e) => {
                g.errors.push(e.to_string());
                return g;
            }
        };
        let mut note = |what: &str, e: String| g.errors.push(format!("{what}: {e}"));
        match dev.name() {
            Ok(n) => g.name = n,
            Err(e) => note("name", e.to_string()),
        }
        match dev.pci_info() {
            Ok(p) => g.pci_device_id = (p.pci_device_id >> 16) as u16,
            Err(e) => note("PCI info", e.to_string()),
        }
        match dev.memory_info() {
            Ok(m) => g.memory_total_mib = Some(m.total / (1024 * 1024)),
            Err(e) => note("memory info", e.to_string()),
        }
        match dev.mig_mode() {
            Ok(m) => {
                g.mig_current = Some(m.current == sys::NVML_DEVICE_MIG_ENABLE);
                g.mig_pending = Some(m.pending == sys::NVML_DEVICE_MIG_ENABLE);
            }
            Err(e) => note("MIG mode", e.to_string()),
        }
        let handle = unsafe { dev.handle() };
        for index in PROFILE_INDICES {
            match raw::gi_profile_info(self.nvml(), handle, index) {
                Ok(info) => {
                    let placements = match raw::gi_placements(self.nvml(), handle, info.id) {
                        Ok(p) => p,
                        Err(c) => {
                            g.errors
                                .push(format!("placements of profile ID {}: {}", info.id, return_name(c)));
                            Vec::new()
                        }
                    };
                    if g.mig_current == Some(true) {
                        if let Ok(gis) = raw::gpu_instances(self.nvml(), handle, info.id, info.instance_count) {
                            for gi in gis {
                                let ci_ids = raw::compute_instances(self.nvml(), gi.handle)
                                    .map(|v| v.into_iter().map(|(id, _)| id).collect())
                                    .unwrap_or_default();
                                g.instances.push(ProbedInstance {
                                    gi_id: gi.id,
                                    profile_id: gi.profile_id,
                                    start: gi.start,
                                    size: gi.size,
                                    ci_ids,
                                });
                            }
                        }
                    }
                    g.profiles.push(ProbedProfile {
                        index,
                        id: info.id,
                        name: info.name,
                        slice_count: info.slice_count,
                        instance_count: info.instance_count,
                        multiprocessor_count: info.multiprocessor_count,
                        memory_mib: info.memory_mib,
                        placements,
                    });
                }
                Err(c) => g.profile_errors.push((index, return_name(c))),
            }
        }
        g.instances.sort_by_key(|i| i.start);
        g
    }

    /// How many more instances of each of `gpu`'s profiles NVML would create now
    /// (`nvmlDeviceGetGpuInstanceRemainingCapacity`), `(profile name, count)`.
    ///
    /// # Errors
    /// No such GPU, MIG off ([`BackendError::NotSupported`]), or the NVML error.
    fn remaining_capacity(&self, gpu: u32) -> Result<Vec<(&'static str, u32)>, BackendError> {
        let dev = self.device(gpu)?;
        let model = self.model(&dev, gpu)?;
        let handle = unsafe { dev.handle() };
        model
            .profiles
            .iter()
            .map(|p| {
                raw::gi_remaining(self.nvml(), handle, p.id)
                    .map(|n| (p.name, n))
                    .map_err(|c| from_return(c, &format!("GPU {gpu}: remaining {}", p.name)))
            })
            .collect()
    }
}

/// The `ci_id` of an instance that has no compute instance (left so by another tool): it
/// cannot run jobs until one is created; dynmig's own creates always make one.
pub const NO_COMPUTE_INSTANCE: u32 = u32::MAX;

impl Driver {
    fn all_gpus(&self) -> Result<Vec<GpuState>, BackendError> {
        (0..self.count()?).map(|i| self.read_gpu(i)).collect()
    }

    fn create_instance(&self, gpu: u32, placed: Placed) -> Result<InstanceState, BackendError> {
        let dev = self.device(gpu)?;
        let model = self.model(&dev, gpu)?;
        let start = placed.start;
        // The profile as this GPU's NVML geometry has it (the caller's may come from a table).
        let found = model.profile(placed.profile.name);
        let Some(p) = found else {
            return Err(BackendError::InvalidArgument {
                what: format!(
                    "{placed}: not a MIG profile of {}; allowed: {}",
                    model.name,
                    model.profiles.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
                ),
            });
        };
        if !p.placement_starts.contains(&start) {
            return Err(BackendError::InvalidArgument {
                what: format!(
                    "{placed}: {} can start only at memory slices {:?}",
                    p.name, p.placement_starts
                ),
            });
        }
        if !Self::mig_enabled(&dev, gpu)? {
            return Err(BackendError::NotSupported);
        }
        let call = format!("GPU {gpu}: create {}@{start}", p.name);
        let handle = unsafe { dev.handle() };
        let gi = raw::create_gpu_instance(self.nvml(), handle, p.id, u32::from(start), u32::from(p.memory_slices))
            .map_err(|c| from_return(c, &call))?;
        let ci = raw::ci_profile_for(self.nvml(), gi, u32::from(p.compute_slices))
            .and_then(|ci_profile| raw::create_compute_instance(self.nvml(), gi, ci_profile));
        if let Err(c) = ci {
            // All or nothing: take the GPU instance away again.
            let undo = raw::destroy_gpu_instance(self.nvml(), gi);
            let mut e = from_return(c, &format!("{call}: compute instance"));
            if let Err(u) = undo {
                e = BackendError::Unavailable {
                    what: format!(
                        "{call}: compute instance failed ({}) and destroying the new GPU instance failed too ({}): GPU {gpu} holds a GPU instance without compute instance at slice {start}",
                        return_name(c),
                        return_name(u)
                    ),
                };
            }
            return Err(e);
        }
        let gi_id = raw::gi_info(self.nvml(), gi).map_err(|c| from_return(c, &call))?.id;
        self.read_gpu(gpu)?
            .instances
            .into_iter()
            .find(|i| i.gi_id == gi_id)
            .ok_or_else(|| BackendError::NotFound {
                what: format!("{call}: GI {gi_id} was created but is not listed"),
            })
    }

    fn destroy_instance(&self, gpu: u32, gi_id: u32) -> Result<(), BackendError> {
        let state = self.read_gpu(gpu)?;
        if !state.mig_enabled {
            return Err(BackendError::NotSupported);
        }
        let inst = state.instance(gi_id).ok_or_else(|| BackendError::NotFound {
            what: format!("GPU {gpu} has no GPU instance {gi_id}"),
        })?;
        if inst.busy {
            return Err(BackendError::InUse {
                what: format!("GPU {gpu} GI {gi_id} ({}) has processes", inst.placed),
            });
        }
        let call = format!("GPU {gpu}: destroy GI {gi_id} ({})", inst.placed);
        let dev = self.device(gpu)?;
        let gi =
            raw::gpu_instance_by_id(self.nvml(), unsafe { dev.handle() }, gi_id).map_err(|c| from_return(c, &call))?;
        let cis = raw::compute_instances(self.nvml(), gi).map_err(|c| from_return(c, &call))?;
        let had_ci = !cis.is_empty();
        for (ci_id, ci) in cis {
            raw::destroy_compute_instance(self.nvml(), ci)
                .map_err(|c| from_return(c, &format!("{call}: CI {ci_id}")))?;
        }
        let Err(c) = raw::destroy_gpu_instance(self.nvml(), gi) else {
            return Ok(());
        };
        // All or nothing: the GPU instance stays, so it gets its compute instance back (with
        // a new MIG device UUID); found by the fault campaign on the NVML stand-in, where a
        // failed GPU-instance destroy left an instance no job could use.
        let e = from_return(c, &call);
        if !had_ci {
            return Err(e);
        }
        let restored = raw::ci_profile_for(self.nvml(), gi, u32::from(inst.placed.profile.compute_slices))
            .and_then(|p| raw::create_compute_instance(self.nvml(), gi, p));
        match restored {
            Ok(_) => Err(e),
            Err(u) => Err(BackendError::Unavailable {
                what: format!(
                    "{call}: {} ({e}), and making its compute instance again failed too ({}): GPU {gpu} holds a GPU instance without compute instance at slice {}",
                    return_name(c),
                    return_name(u),
                    inst.placed.start
                ),
            }),
        }
    }

    fn set_mig_mode(&self, gpu: u32, enabled: bool, allowed: bool) -> Result<(), BackendError> {
        let state = self.read_gpu(gpu)?;
        if state.mig_enabled == enabled {
            return Ok(());
        }
        let word = if enabled { "on" } else { "off" };
        if !allowed {
            return Err(BackendError::NotAllowed {
                what: format!(
                    "GPU {gpu}: turning MIG {word} (set allow_mig_mode_change = true in the node group, or run `nvidia-smi -i {gpu} -mig {}` yourself)",
                    u8::from(enabled)
                ),
            });
        }
        if !state.instances.is_empty() {
            return Err(BackendError::InUse {
                what: format!("GPU {gpu}: {} MIG instance(s) exist", state.instances.len()),
            });
        }
        let dev = self.device(gpu)?;
        dev.set_mig_mode(enabled)
            .map_err(|e| from_nvml(e, &format!("GPU {gpu}: MIG {word}")))?;
        if Self::mig_enabled(&dev, gpu)? != enabled {
            return Err(BackendError::Unavailable {
                what: format!(
                    "GPU {gpu}: MIG {word} is pending; the GPU needs a reset or reboot (dynmig never resets a GPU)"
                ),
            });
        }
        Ok(())
    }

    fn gpu_device_file(&self, gpu: u32) -> PathBuf {
        let minor = self.device(gpu).map(|d| Self::minor(&d, gpu)).unwrap_or(gpu);
        self.dev_dir.join(format!("nvidia{minor}"))
    }

    fn power_watts(&self, gpu: u32) -> Result<Option<f64>, BackendError> {
        let dev = self.device(gpu)?;
        match dev.power_usage() {
            Ok(mw) => Ok(Some(f64::from(mw) / 1000.0)),
            Err(nvml_wrapper::error::NvmlError::NotSupported) => Ok(None),
            Err(e) => Err(from_nvml(e, &format!("GPU {gpu}: power usage"))),
        }
    }
}

impl GpuBackend for NvmlBackend {
    fn gpus(&self) -> Result<Vec<GpuState>, BackendError> {
        self.run("read the GPUs", |d| d.all_gpus())
    }

    fn gpu(&self, index: u32) -> Result<GpuState, BackendError> {
        self.run(&format!("read GPU {index}"), move |d| d.read_gpu(index))
    }

    fn create_instance(&mut self, gpu: u32, placed: Placed) -> Result<InstanceState, BackendError> {
        self.run(&format!("GPU {gpu}: create {placed}"), move |d| {
            d.create_instance(gpu, placed)
        })
    }

    fn destroy_instance(&mut self, gpu: u32, gi_id: u32) -> Result<(), BackendError> {
        self.run(&format!("GPU {gpu}: destroy GI {gi_id}"), move |d| {
            d.destroy_instance(gpu, gi_id)
        })
    }

    fn allows_mig_mode_change(&self) -> bool {
        self.allow_mig_mode_change
    }

    fn set_mig_mode(&mut self, gpu: u32, enabled: bool) -> Result<(), BackendError> {
        let allowed = self.allow_mig_mode_change;
        self.run(&format!("GPU {gpu}: set MIG mode"), move |d| {
            d.set_mig_mode(gpu, enabled, allowed)
        })
    }

    fn gpu_device_file(&self, gpu: u32) -> PathBuf {
        let fallback = self.driver.dev_dir.join(format!("nvidia{gpu}"));
        self.run(&format!("GPU {gpu}: device file"), move |d| Ok(d.gpu_device_file(gpu)))
            .unwrap_or(fallback)
    }

    fn power_watts(&self, gpu: u32) -> Result<Option<f64>, BackendError> {
        self.run(&format!("GPU {gpu}: power"), move |d| d.power_watts(gpu))
    }
}
