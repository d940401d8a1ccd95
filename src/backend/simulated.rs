//! [`SimulatedBackend`]: a node's MIG GPUs simulated in a JSON state file, for tests and demos.
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
//!   and removed on destroy (Slurm accepts plain files in gres.conf `File=`, notes/slurm.md).
//!
//! Several processes (agent, prolog, epilog, CLI) may open the same state file: every call
//! reads, changes and atomically rewrites it under an exclusive `flock` (see `sim_state`).
//! Faults are injected as [`super::FaultPlan`] describes,
//! including `crash_after`, which exits the process with status 137 after a change is saved.
//! A refused or faulted call changes nothing on the simulated GPUs.

use super::fsutil::{remove_if_present, touch};
use super::sim_state::{SimGpu, SimInstance, SimState, Store};
use super::{BackendError, FaultOp, FaultPlan, GpuBackend, GpuState, InstanceState, FAULTS_ENV};
use dynmig_core::geometry::{check_instances, model_by_name, GpuModel, LayoutError, Placed};
use std::collections::hash_map::DefaultHasher;
use std::fs;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

/// A simulated node of `gpu_count` GPUs of one model; see the module documentation.
#[derive(Debug)]
pub struct SimulatedBackend {
    store: Store,
    device_dir: PathBuf,
    model: &'static GpuModel,
    gpu_count: u32,
    env_faults: FaultPlan,
}

impl SimulatedBackend {
    /// Opens the simulated node kept in `state_file`, creating it (MIG on, no instances) if
    /// the file does not exist, and makes sure the device files under `device_dir` match the
    /// state (missing ones are made, stray instance files removed). Reads the per-process
    /// fault plan from `DYNMIG_SIM_FAULTS`.
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
            env_faults,
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

    /// Marks instance `gi_id` of `gpu` as used by Slurm job `job_id` (the prolog's call).
    /// Attaching twice is the same as once.
    ///
    /// # Errors
    /// [`BackendError::NotFound`] if there is no such instance; `InvalidArgument` for a bad GPU.
    pub fn attach_job(&self, gpu: u32, gi_id: u32, job_id: u32) -> Result<(), BackendError> {
        self.transact(|st| {
            let inst = find_instance(gpu_mut(st, gpu)?, gpu, gi_id)?;
            if !inst.jobs.contains(&job_id) {
                inst.jobs.push(job_id);
            }
            Ok(())
        })
    }

    /// Removes job `job_id` from instance `gi_id` of `gpu`; returns whether it was attached.
    ///
    /// # Errors
    /// [`BackendError::NotFound`] if there is no such instance; `InvalidArgument` for a bad GPU.
    pub fn detach_job(&self, gpu: u32, gi_id: u32, job_id: u32) -> Result<bool, BackendError> {
        self.transact(|st| {
            let inst = find_instance(gpu_mut(st, gpu)?, gpu, gi_id)?;
            let before = inst.jobs.len();
            inst.jobs.retain(|j| *j != job_id);
            Ok(inst.jobs.len() != before)
        })
    }

    /// Removes job `job_id` from every instance (the epilog's call, which need not know where
    /// the job ran); returns the `(gpu, gi_id)` pairs it was attached to.
    ///
    /// # Errors
    /// [`BackendError::Io`] if the state cannot be read or written.
    pub fn detach_job_everywhere(&self, job_id: u32) -> Result<Vec<(u32, u32)>, BackendError> {
        self.transact(|st| {
            let mut found = Vec::new();
            for (g, gpu) in st.gpus.iter_mut().enumerate() {
                for inst in &mut gpu.instances {
                    if inst.jobs.contains(&job_id) {
                        inst.jobs.retain(|j| *j != job_id);
                        found.push((g as u32, inst.gi_id));
                    }
                }
            }
            Ok(found)
        })
    }

    /// The jobs attached to instance `gi_id` of `gpu`, in attach order.
    ///
    /// # Errors
    /// [`BackendError::NotFound`] if there is no such instance; `InvalidArgument` for a bad GPU.
    pub fn jobs_on(&self, gpu: u32, gi_id: u32) -> Result<Vec<u32>, BackendError> {
        self.transact(|st| Ok(find_instance(gpu_mut(st, gpu)?, gpu, gi_id)?.jobs.clone()))
    }

    /// The instance whose device files include `path` (as Slurm hands a job the files of its
    /// GRES), with its GPU index; `None` if no instance has that file. Paths are compared as
    /// given, then canonicalized.
    ///
    /// # Errors
    /// [`BackendError::Io`] if the state cannot be read.
    pub fn instance_by_device_file(&self, path: &Path) -> Result<Option<(u32, InstanceState)>, BackendError> {
        let canon = |p: &Path| fs::canonicalize(p).ok();
        let wanted = canon(path);
        for gpu in self.gpus()? {
            for inst in gpu.instances {
                let hit = inst
                    .device_files
                    .iter()
                    .any(|f| f == path || (wanted.is_some() && canon(f) == wanted));
                if hit {
                    return Ok(Some((gpu.index, inst)));
                }
            }
        }
        Ok(None)
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
        let env_fault = self.env_faults.on_call(op);
        let env_crash = self.env_faults.on_mutation();
        let seed = node_seed(&self.store.state);
        let this = &*self;
        let (result, file_crash) = this.store.transact(
            || SimState::fresh(this.model.name, this.gpu_count, seed),
            |st, plan| {
                let file_fault = plan.on_call(op);
                let crash = plan.on_mutation();
                let result = match env_fault.or(file_fault) {
                    Some(kind) => Err(kind.to_error(call)),
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

    /// Modelled, not measured: [`crate::power::modelled_watts`] of the busy instances.
    fn power_watts(&self, gpu: u32) -> Result<Option<f64>, BackendError> {
        let g = self.gpu(gpu)?;
        let busy: Vec<u8> = g
            .instances
            .iter()
            .filter(|i| i.busy)
            .map(|i| i.placed.profile.compute_slices)
            .collect();
        Ok(Some(crate::power::modelled_watts(self.model, &busy)))
    }

    fn gpus(&self) -> Result<Vec<GpuState>, BackendError> {
        let st = self.transact(|st| Ok(st.clone()))?;
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

    fn create_instance(&mut self, gpu: u32, profile: &str, start: u8) -> Result<InstanceState, BackendError> {
        let call = format!("create {profile}@{start} on GPU {gpu}");
        self.mutate(FaultOp::Create, &call, |this, st| {
            let model = this.model;
            let spec = model.profile(profile).ok_or_else(|| BackendError::InvalidArgument {
                what: format!(
                    "unknown MIG profile '{profile}' for {}; allowed: {}",
                    model.name,
                    model.profiles.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
                ),
            })?;
            let seed = st.seed;
            let serial = st.next_serial;
            let g = gpu_mut(st, gpu)?;
            if !g.mig_enabled {
                return Err(BackendError::NotSupported);
            }
            let new = Placed { profile: spec, start };
            // NVML checks the placement argument before the GPU's free resources.
            if !spec.placement_starts.contains(&start) || start + spec.memory_slices > model.memory_slices {
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
            let gi_id = (1..)
                .find(|id| g.instances.iter().all(|i| i.gi_id != *id))
                .expect("ids are unbounded");
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
        let call = format!("set MIG mode {} on GPU {gpu}", if enabled { "on" } else { "off" });
        self.mutate(FaultOp::SetMigMode, &call, |_, st| {
            let g = gpu_mut(st, gpu)?;
            if g.mig_enabled == enabled {
                return Ok(());
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

fn gpu_mut(st: &mut SimState, gpu: u32) -> Result<&mut SimGpu, BackendError> {
    let count = st.gpus.len();
    st.gpus
        .get_mut(gpu as usize)
        .ok_or_else(|| BackendError::InvalidArgument {
            what: format!("no GPU {gpu} (the node has {count})"),
        })
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
