// One piece: the simulated backend's state file and its NVML-like failure modes, which tests inject and read together.
//! [`SimulatedBackend`]: a node's MIG GPUs simulated in a JSON state file, for tests and demos.
//! Fault injection: [`FaultPlan`].
//!
//! It is a fake, named as one: nothing in production code paths picks it unless the config
//! names the simulated backend. What it copies from the hardware:
//! - placement rules: [`dynmig_core::geometry::check_instances`] on the GPU's instances plus
//!   the new one; a clash fails with `InsufficientResources` as NVML does, a start the
//!   profile cannot use or an unknown profile with `InvalidArgument`;
//! - GPU-instance ids: the smallest free id from 1, reused after a destroy (real drivers
//!   also hand out small reused ids, derived from the placement; do not rely on values);
//!   one compute instance per GPU instance, id 0;
//! - `IN_USE`: destroying an instance a job is attached to, or changing MIG mode while any
//!   instance exists;
//! - device files: `<device_dir>/nvidia<gpu>` for each GPU (made on open) and
//!   `<device_dir>/gpu<gpu>/gi<gi_id>` for each instance, an empty plain file made on create
//!   and removed on destroy (slurmd accepts plain files in gres.conf `File=`; tried on Slurm
//!   22.05.8, where only character devices make slurmd export the job's GPU indices, so as
//!   root they are made as devices);
//! - jobs: [`GpuBackend::claim`] attaches a job to an instance (or a whole GPU with MIG off),
//!   which is then busy; [`GpuBackend::release_job`] detaches it everywhere;
//! - MIG mode changes only when allowed ([`SimulatedBackend::allow_mig_mode_change`]; on by
//!   default for tests, as the node group says through [`crate::open_backend`]);
//! - power: the core's [`PowerModel`] of the busy instances (modelled, not measured).
//!
//! Several processes (agent, prolog, epilog, CLI) may open the same state file: every call
//! reads, changes and atomically rewrites it under an exclusive `flock` (see `state`).
//! Faults are injected as [`FaultPlan`] describes,
//! including `crash_after`, which exits the process with status 137 after a change is saved.
//! A refused or faulted call changes nothing on the simulated GPUs.

mod faults;
mod state;

pub use faults::{Fault, FaultKind, FaultOp, FaultPlan, FAULTS_ENV};

use crate::backend::{instance_name, WHOLE_GPU};
use crate::{BackendError, GpuBackend, GpuState, InstanceState};
use dynmig_core::energy::PowerModel;
use dynmig_core::geometry::{check_instances, model_by_name, GpuModel, LayoutError, Placed};
use dynmig_host::fs::remove_if_present;
use state::{SimGpu, SimInstance, SimState, Store};
use std::collections::hash_map::DefaultHasher;
use std::fs::{self, OpenOptions};
use std::hash::{Hash, Hasher};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// A simulated node of `gpu_count` GPUs of one model; see the module documentation.
#[derive(Debug)]
pub struct SimulatedBackend {
    store: Store,
    device_dir: PathBuf,
    model: &'static GpuModel,
    gpu_count: u32,
    env_faults: Mutex<FaultPlan>,
    allow_mig_mode_change: bool,
}

impl SimulatedBackend {
    /// Opens the simulated node kept in `state_file`, creating it (MIG on, no instances) if
    /// the file does not exist, and makes sure the device files under `device_dir` match the
    /// state (missing ones are made, stray instance files removed). Reads the per-process
    /// fault plan from `DYNMIG_SIM_FAULTS`. MIG mode changes are allowed; see
    /// [`Self::allow_mig_mode_change`].
    ///
    /// # Errors
    /// - [`BackendError::InvalidArgument`]: `gpu_count` is 0, the existing state is of another
    ///   model or GPU count, or `DYNMIG_SIM_FAULTS` cannot be read.
    /// - [`BackendError::Io`]: a file cannot be read or written, or the state file is corrupt.
    pub fn open(
        state_file: &Path,
        device_dir: &Path,
        model: &'static GpuModel,
        gpu_count: u32,
    ) -> Result<Self, BackendError> {
        if gpu_count == 0 {
            return Err(BackendError::InvalidArgument {
                what: "a simulated node needs at least one GPU".into(),
            });
        }
        let env_faults = match std::env::var(FAULTS_ENV) {
            Ok(text) => FaultPlan::parse(&text).map_err(|why| BackendError::InvalidArgument {
                what: format!("{FAULTS_ENV}: {why}"),
            })?,
            Err(_) => FaultPlan::default(),
        };
        let this = Self {
            store: Store::new(state_file),
            device_dir: device_dir.to_path_buf(),
            model,
            gpu_count,
            env_faults: Mutex::new(env_faults),
            allow_mig_mode_change: true,
        };
        let seed = node_seed(state_file);
        this.store
            .transact(
                || SimState::fresh(model.name, gpu_count, seed),
                |st, _| -> Result<(), BackendError> {
                    if st.model != model.name || st.gpus.len() != gpu_count as usize {
                        return Err(BackendError::InvalidArgument {
                            what: format!(
                                "{} holds {} GPUs of {}, not {gpu_count} of {}",
                                state_file.display(),
                                st.gpus.len(),
                                st.model,
                                model.name
                            ),
                        });
                    }
                    this.sync_device_files(st)
                },
            )
            .and_then(|r| r)?;
        Ok(this)
    }

    /// Opens an existing simulated node, taking the model and GPU count from its state file.
    ///
    /// # Errors
    /// [`BackendError::NotFound`] if there is no state file; otherwise as [`Self::open`].
    pub fn open_existing(state_file: &Path, device_dir: &Path) -> Result<Self, BackendError> {
        let st = Store::new(state_file).peek()?.ok_or_else(|| BackendError::NotFound {
            what: format!("no simulated node state at {}", state_file.display()),
        })?;
        let model = model_by_name(&st.model).ok_or_else(|| BackendError::InvalidArgument {
            what: format!("{}: unknown GPU model {}", state_file.display(), st.model),
        })?;
        let count = u32::try_from(st.gpus.len()).unwrap_or(u32::MAX);
        Self::open(state_file, device_dir, model, count)
    }

    /// Allows or refuses MIG mode changes ([`GpuBackend::set_mig_mode`] then fails with
    /// [`BackendError::NotAllowed`], as the NVML backend does when the node group does not
    /// set `allow_mig_mode_change`).
    #[must_use]
    pub fn allow_mig_mode_change(mut self, allow: bool) -> Self {
        self.allow_mig_mode_change = allow;
        self
    }

    /// The state file.
    pub fn state_path(&self) -> &Path {
        &self.store.state
    }

    /// The shared faults file, `<state file>.faults.json`.
    pub fn faults_path(&self) -> &Path {
        &self.store.faults
    }

    /// The simulated GPU model.
    pub fn model(&self) -> &'static GpuModel {
        self.model
    }

    /// Number of GPUs.
    pub fn gpu_count(&self) -> u32 {
        self.gpu_count
    }

    /// Replaces the shared fault plan (the faults file) under the lock.
    ///
    /// # Errors
    /// [`BackendError::Io`] if it cannot be written.
    pub fn set_faults(&self, plan: &FaultPlan) -> Result<(), BackendError> {
        self.store.write_faults(plan)
    }

    /// The device file of GPU instance `gi_id` on `gpu`, `<device_dir>/gpu<gpu>/gi<gi_id>`.
    pub fn instance_device_file(&self, gpu: u32, gi_id: u32) -> PathBuf {
        self.device_dir.join(format!("gpu{gpu}")).join(format!("gi{gi_id}"))
    }

    /// The jobs claimed on instance `gi_id` of `gpu` ([`WHOLE_GPU`] for the whole GPU), in
    /// claim order.
    ///
    /// # Errors
    /// [`BackendError::NotFound`] if there is no such instance; `InvalidArgument` for a bad GPU.
    pub fn jobs_on(&self, gpu: u32, gi_id: u32) -> Result<Vec<u32>, BackendError> {
        self.transact(|st| Ok(jobs_mut(gpu_mut(st, gpu)?, gpu, gi_id)?.clone()))
    }

    /// Runs `f` on a copy of the state under the lock; saves the copy only if `f` succeeds.
    fn transact<T>(&self, f: impl FnOnce(&mut SimState) -> Result<T, BackendError>) -> Result<T, BackendError> {
        let seed = node_seed(&self.store.state);
        self.store
            .transact(
                || SimState::fresh(self.model.name, self.gpu_count, seed),
                |st, _| {
                    let mut copy = st.clone();
                    let out = f(&mut copy)?;
                    *st = copy;
                    Ok(out)
                },
            )
            .and_then(|r| r)
    }

    /// A mutating call: counts it against both fault plans, fails it if a fault fires,
    /// otherwise runs `f` as [`Self::transact`] does; exits with 137 if a crash count ends.
    fn mutate<T>(
        &mut self,
        op: FaultOp,
        call: &str,
        f: impl FnOnce(&Self, &mut SimState) -> Result<T, BackendError>,
    ) -> Result<T, BackendError> {
        let env = self
            .env_faults
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let env_fault = env.on_call(op);
        let env_crash = env.on_mutation();
        let seed = node_seed(&self.store.state);
        let this = &*self;
        let (result, file_crash) = this.store.transact(
            || SimState::fresh(this.model.name, this.gpu_count, seed),
            |st, plan| {
                let file_fault = plan.on_call(op);
                let crash = plan.on_mutation();
                let result = match env_fault.or(file_fault) {
                    Some(fault) => Err(fault.to_error(call)),
                    None => {
                        let mut copy = st.clone();
                        f(this, &mut copy).inspect(|_| *st = copy)
                    }
                };
                (result, crash)
            },
        )?;
        if env_crash || file_crash {
            eprintln!("dynmig simulated backend: crash_after reached after {call}; exiting with status 137");
            std::process::exit(137);
        }
        result
    }

    /// Makes the device files match `st`: each GPU's `nvidia<g>` and each instance's file
    /// exist, and no other `gi*` file is left in the GPUs' folders.
    fn sync_device_files(&self, st: &SimState) -> Result<(), BackendError> {
        for (g, gpu) in st.gpus.iter().enumerate() {
            let g = g as u32;
            let file = self.gpu_device_file(g);
            touch(&file).map_err(|e| BackendError::io("create", &file, e))?;
            let wanted: Vec<PathBuf> = gpu
                .instances
                .iter()
                .map(|i| self.instance_device_file(g, i.gi_id))
                .collect();
            for file in &wanted {
                touch(file).map_err(|e| BackendError::io("create", file, e))?;
            }
            let dir = self.device_dir.join(format!("gpu{g}"));
            fs::create_dir_all(&dir).map_err(|e| BackendError::io("create", &dir, e))?;
            let entries = fs::read_dir(&dir).map_err(|e| BackendError::io("list", &dir, e))?;
            for entry in entries.flatten() {
                let path = entry.path();
                let is_gi = entry.file_name().to_string_lossy().starts_with("gi");
                if is_gi && !wanted.contains(&path) {
                    remove_if_present(&path).map_err(|e| BackendError::io("remove", &path, e))?;
                }
            }
        }
        Ok(())
    }

    fn to_instance(&self, gpu: u32, r: &SimInstance) -> Result<InstanceState, BackendError> {
        let profile = self.model.profile(&r.profile).ok_or_else(|| {
            let msg = format!(
                "instance GI {} on GPU {gpu} has profile {} unknown to {}",
                r.gi_id, r.profile, self.model.name
            );
            BackendError::io(
                "read",
                &self.store.state,
                std::io::Error::new(std::io::ErrorKind::InvalidData, msg),
            )
        })?;
        Ok(InstanceState {
            gi_id: r.gi_id,
            ci_id: r.ci_id,
            placed: Placed {
                profile,
                start: r.start,
            },
            uuid: r.uuid.clone(),
            busy: !r.jobs.is_empty(),
            device_files: vec![self.instance_device_file(gpu, r.gi_id)],
        })
    }

    fn placed_on(&self, gpu: &SimGpu) -> Vec<Placed> {
        gpu.instances
            .iter()
            .filter_map(|i| {
                self.model.profile(&i.profile).map(|profile| Placed {
                    profile,
                    start: i.start,
                })
            })
            .collect()
    }
}

impl GpuBackend for SimulatedBackend {
    /// `<device_dir>/nvidia<gpu>`, an empty file made on open.
    fn gpu_device_file(&self, gpu: u32) -> PathBuf {
        self.device_dir.join(format!("nvidia{gpu}"))
    }

    /// Modelled, not measured: [`PowerModel::board_w`] of the busy instances (a busy whole
    /// GPU with MIG off counts as one instance of all compute slices).
    fn power_watts(&self, gpu: u32) -> Result<Option<f64>, BackendError> {
        let st = self.transact(|st| Ok(st.clone()))?;
        let g = st.gpus.get(gpu as usize).ok_or_else(|| no_gpu(gpu, st.gpus.len()))?;
        let busy: Vec<u8> = if g.mig_enabled {
            g.instances
                .iter()
                .filter(|i| !i.jobs.is_empty())
                .filter_map(|i| self.model.profile(&i.profile).map(|p| p.compute_slices))
                .collect()
        } else if g.jobs.is_empty() {
            Vec::new()
        } else {
            vec![self.model.compute_slices]
        };
        Ok(Some(PowerModel::for_model(self.model).board_w(&busy)))
    }

    fn allows_mig_mode_change(&self) -> bool {
        self.allow_mig_mode_change
    }

    /// As the trait says; a whole GPU with MIG off is busy while a job has claimed it.
    fn find_instance(&self, device_files: &[PathBuf]) -> Result<Option<(u32, InstanceState)>, BackendError> {
        let found = crate::backend::find_in(self.gpus()?, |g| self.gpu_device_file(g), device_files);
        // A whole GPU with MIG off is busy while jobs are attached to it (instances carry
        // their own busy flag).
        match found {
            Some((gpu, mut inst)) if inst.gi_id == WHOLE_GPU => {
                let st = self.transact(|st| Ok(st.clone()))?;
                inst.busy = !st.gpus[gpu as usize].jobs.is_empty();
                Ok(Some((gpu, inst)))
            }
            other => Ok(other),
        }
    }

    /// Attaches `job` to the instance (or the whole GPU with MIG off): it is busy until
    /// [`GpuBackend::release_job`].
    fn claim(&mut self, gpu: u32, gi_id: u32, job: u32) -> Result<(), BackendError> {
        self.transact(|st| {
            let jobs = jobs_mut(gpu_mut(st, gpu)?, gpu, gi_id)?;
            if !jobs.contains(&job) {
                jobs.push(job);
            }
            Ok(())
        })
    }

    /// Detaches `job` from every instance and whole GPU.
    fn release_job(&mut self, job: u32) -> Result<(), BackendError> {
        self.transact(|st| {
            for gpu in &mut st.gpus {
                gpu.jobs.retain(|j| *j != job);
                for inst in &mut gpu.instances {
                    inst.jobs.retain(|j| *j != job);
                }
            }
            Ok(())
        })
    }

    fn gpus(&self) -> Result<Vec<GpuState>, BackendError> {
        let env_fault = self
            .env_faults
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .on_call(FaultOp::List);
        let seed = node_seed(&self.store.state);
        let st = self
            .store
            .transact(
                || SimState::fresh(self.model.name, self.gpu_count, seed),
                |st, plan| {
                    let file_fault = plan.on_call(FaultOp::List);
                    match env_fault.or(file_fault) {
                        Some(fault) => Err(fault.to_error("list the GPUs")),
                        None => Ok(st.clone()),
                    }
                },
            )
            .and_then(|r| r)?;
        let mut out = Vec::with_capacity(st.gpus.len());
        for (g, gpu) in st.gpus.iter().enumerate() {
            let g = g as u32;
            let mut instances = gpu
                .instances
                .iter()
                .map(|r| self.to_instance(g, r))
                .collect::<Result<Vec<_>, _>>()?;
            instances.sort_by_key(|i| i.placed.start);
            out.push(GpuState {
                index: g,
                model: self.model,
                mig_enabled: gpu.mig_enabled,
                instances,
            });
        }
        Ok(out)
    }

    fn create_instance(&mut self, gpu: u32, placed: Placed) -> Result<InstanceState, BackendError> {
        let call = format!("create {placed} on GPU {gpu}");
        self.mutate(FaultOp::Create, &call, |this, st| {
            let model = this.model;
            let (spec, start) = (placed.profile, placed.start);
            if !model.profiles.contains(spec) {
                return Err(BackendError::InvalidArgument {
                    what: format!(
                        "{placed}: not a MIG profile of {}; allowed: {}",
                        model.name,
                        model.profiles.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
                    ),
                });
            }
            let seed = st.seed;
            let serial = st.next_serial;
            let g = gpu_mut(st, gpu)?;
            if !g.mig_enabled {
                return Err(BackendError::NotSupported);
            }
            let new = placed;
            // NVML checks the placement argument before the GPU's free resources.
            if !spec.placement_starts.contains(&start) || start.saturating_add(spec.memory_slices) > model.memory_slices
            {
                return Err(BackendError::InvalidArgument {
                    what: format!(
                        "{new}: {} can start only at memory slices {:?}",
                        spec.name, spec.placement_starts
                    ),
                });
            }
            let mut all = this.placed_on(g);
            all.push(new);
            check_instances(model, &all).map_err(|e| match e {
                LayoutError::BadPlacement { .. } => BackendError::InvalidArgument { what: e.to_string() },
                _ => BackendError::InsufficientResources {
                    what: format!("{new} on GPU {gpu}: {e}"),
                },
            })?;
            // At most 8 instances exist on a GPU, so one of the ids 1..=9 is free.
            let gi_id = (1..=g.instances.len() as u32 + 1)
                .find(|id| g.instances.iter().all(|i| i.gi_id != *id))
                .unwrap_or(u32::MAX - 1);
            let record = SimInstance {
                gi_id,
                ci_id: 0,
                profile: spec.name.to_string(),
                start,
                uuid: mig_uuid(seed, gpu, gi_id, serial),
                jobs: Vec::new(),
            };
            let file = this.instance_device_file(gpu, gi_id);
            touch(&file).map_err(|e| BackendError::io("create", &file, e))?;
            g.instances.push(record.clone());
            st.next_serial += 1;
            this.to_instance(gpu, &record)
        })
    }

    fn destroy_instance(&mut self, gpu: u32, gi_id: u32) -> Result<(), BackendError> {
        let call = format!("destroy GI {gi_id} on GPU {gpu}");
        self.mutate(FaultOp::Destroy, &call, |this, st| {
            let g = gpu_mut(st, gpu)?;
            if !g.mig_enabled {
                return Err(BackendError::NotSupported);
            }
            let inst = find_instance(g, gpu, gi_id)?;
            if !inst.jobs.is_empty() {
                return Err(BackendError::InUse {
                    what: format!(
                        "GPU {gpu} GI {gi_id} ({}@{}) runs jobs {:?}",
                        inst.profile, inst.start, inst.jobs
                    ),
                });
            }
            g.instances.retain(|i| i.gi_id != gi_id);
            let file = this.instance_device_file(gpu, gi_id);
            remove_if_present(&file).map_err(|e| BackendError::io("remove", &file, e))
        })
    }

    fn set_mig_mode(&mut self, gpu: u32, enabled: bool) -> Result<(), BackendError> {
        let word = if enabled { "on" } else { "off" };
        let call = format!("set MIG mode {word} on GPU {gpu}");
        self.mutate(FaultOp::SetMigMode, &call, |this, st| {
            let g = gpu_mut(st, gpu)?;
            if g.mig_enabled == enabled {
                return Ok(());
            }
            if !this.allow_mig_mode_change {
                return Err(BackendError::NotAllowed {
                    what: format!("GPU {gpu}: turning MIG {word} (set allow_mig_mode_change = true in the node group)"),
                });
            }
            if !g.jobs.is_empty() {
                return Err(BackendError::InUse {
                    what: format!("GPU {gpu} (MIG off) runs jobs {:?}", g.jobs),
                });
            }
            if !g.instances.is_empty() {
                let ids: Vec<u32> = g.instances.iter().map(|i| i.gi_id).collect();
                return Err(BackendError::InUse {
                    what: format!("GPU {gpu} still has GPU instances {ids:?}"),
                });
            }
            g.mig_enabled = enabled;
            Ok(())
        })
    }
}

fn no_gpu(gpu: u32, count: usize) -> BackendError {
    BackendError::InvalidArgument {
        what: format!("no GPU {gpu} (the node has {count}, numbered from 0)"),
    }
}

fn gpu_mut(st: &mut SimState, gpu: u32) -> Result<&mut SimGpu, BackendError> {
    let count = st.gpus.len();
    st.gpus.get_mut(gpu as usize).ok_or_else(|| no_gpu(gpu, count))
}

/// The job list of instance `gi_id` of `g`, or of the whole GPU for [`WHOLE_GPU`] (only with
/// MIG off).
fn jobs_mut(g: &mut SimGpu, gpu: u32, gi_id: u32) -> Result<&mut Vec<u32>, BackendError> {
    if gi_id == WHOLE_GPU {
        if g.mig_enabled {
            return Err(BackendError::NotFound {
                what: format!("no {} on GPU {gpu}: MIG is on", instance_name(gi_id)),
            });
        }
        return Ok(&mut g.jobs);
    }
    Ok(&mut find_instance(g, gpu, gi_id)?.jobs)
}

/// Creates a fake device file at `path` (and its folder) if it does not exist.
///
/// As root it is a character device with the numbers of /dev/null (1, 3): slurmd hands a job
/// the indices of its GPU GRES (`SLURM_JOB_GPUS`, `CUDA_VISIBLE_DEVICES`) only when gres.conf's
/// files are devices (tried on Slurm 22.05.8), and the Prolog needs them to know which MIG
/// instance the job got. Otherwise (tests as a normal user) an empty plain file.
fn touch(path: &Path) -> io::Result<()> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    if path.symlink_metadata().is_ok() {
        return Ok(());
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(path.as_os_str().as_bytes())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        // SAFETY: `c` is a valid NUL-terminated path; mknod only reads it.
        let rc = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.kind() == io::ErrorKind::AlreadyExists {
            return Ok(());
        }
        // A file system without device nodes: fall back to a plain file.
    }
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map(drop)
}

fn find_instance(g: &mut SimGpu, gpu: u32, gi_id: u32) -> Result<&mut SimInstance, BackendError> {
    g.instances
        .iter_mut()
        .find(|i| i.gi_id == gi_id)
        .ok_or_else(|| BackendError::NotFound {
            what: format!("no GPU instance {gi_id} on GPU {gpu}"),
        })
}

/// A seed for a new state file: its path, the time and the process id, hashed.
fn node_seed(state_file: &Path) -> u64 {
    let mut h = DefaultHasher::new();
    state_file.hash(&mut h);
    std::process::id().hash(&mut h);
    std::time::SystemTime::now().hash(&mut h);
    h.finish()
}

/// A `MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` name, unique per node seed and creation.
fn mig_uuid(seed: u64, gpu: u32, gi_id: u32, serial: u64) -> String {
    let half = |salt: u8| {
        let mut h = DefaultHasher::new();
        (seed, gpu, gi_id, serial, salt).hash(&mut h);
        h.finish()
    };
    let (a, b) = (half(1), half(2));
    format!(
        "MIG-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xffff,
        b >> 48,
        b & 0xffff_ffff_ffff
    )
}
