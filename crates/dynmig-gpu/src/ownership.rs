//! [`Ownership`]: which MIG instances dynmig created on a node, kept in a file
//! ([`dynmig_core::protocol::owned`]), so that [`crate::apply_transition`] destroys only those.
//!
//! - Before a create, the create is written down as pending; after it, the instance is
//!   recorded by its MIG UUID. After a crash in between, the instance found where a pending
//!   create was is dynmig's.
//! - An instance not recorded (made by an administrator, a boot unit, another tool) counts as
//!   busy for the plan: it stays where it is, and a target that needs it gone fails with
//!   [`crate::ApplyError::Foreign`], naming it.
//! - `dynmig init-node` adopts the instances it finds when the node has no record yet: running
//!   it is the administrator handing the node's GPUs to dynmig.
//! - Records of instances that no longer exist (destroyed by someone else) are dropped when
//!   the GPUs are next read through [`Ownership::forget_gone`].

use crate::{BackendError, GpuState, InstanceState};
use dynmig_core::geometry::Placed;
use dynmig_core::protocol::owned::{OwnedInstance, OwnedInstances, PendingCreate};
use std::path::{Path, PathBuf};

/// The largest record read, bytes (a node has at most 16 GPUs of at most 7 instances).
pub const MAX_RECORD: u64 = 1 << 20;

/// The instances dynmig created on a node, in memory and (unless in memory only) in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ownership {
    path: Option<PathBuf>,
    record: OwnedInstances,
}

impl Ownership {
    /// The record in `path`; an empty one when the file does not exist yet.
    ///
    /// # Errors
    /// [`BackendError::Io`] when the file cannot be read or is larger than [`MAX_RECORD`];
    /// [`BackendError::InvalidArgument`] when it is not a record this dynmig reads (nothing
    /// is then destroyed: the caller stops).
    pub fn load(path: &Path) -> Result<Self, BackendError> {
        let text =
            dynmig_host::fs::read_text_bounded(path, MAX_RECORD).map_err(|e| BackendError::io("read", path, e))?;
        let record = match text {
            None => OwnedInstances::default(),
            Some(t) => OwnedInstances::parse(&t).map_err(|e| BackendError::InvalidArgument {
                what: format!(
                    "{}: {e}; dynmig destroys no instance until it is fixed or removed (removing it makes every instance foreign until `dynmig init-node` adopts them)",
                    path.display()
                ),
            })?,
        };
        Ok(Self {
            path: Some(path.to_path_buf()),
            record,
        })
    }

    /// A record kept in memory only, owning every instance of `gpus` (tests, measurements
    /// and tools that created the instances themselves).
    pub fn in_memory_owning(gpus: &[GpuState]) -> Self {
        let mut o = Self {
            path: None,
            record: OwnedInstances::default(),
        };
        o.add_all(gpus);
        o
    }

    /// The record as it stands.
    pub fn record(&self) -> &OwnedInstances {
        &self.record
    }

    /// Records every instance of `gpus` as dynmig's and saves (`dynmig init-node` on a node
    /// without a record).
    ///
    /// # Errors
    /// The record cannot be written.
    pub fn adopt(&mut self, gpus: &[GpuState]) -> Result<(), BackendError> {
        self.add_all(gpus);
        self.save()
    }

    fn add_all(&mut self, gpus: &[GpuState]) {
        for g in gpus {
            for i in &g.instances {
                if !self.owns(g.index, i) && !i.uuid.is_empty() {
                    self.record.instances.push(OwnedInstance {
                        gpu: g.index,
                        uuid: i.uuid.clone(),
                        instance: i.placed.to_string(),
                    });
                }
            }
        }
    }

    /// Whether dynmig created `inst` on GPU `gpu`: its UUID is recorded, or a pending create
    /// names its place.
    pub fn owns(&self, gpu: u32, inst: &InstanceState) -> bool {
        let by_uuid = !inst.uuid.is_empty()
            && self
                .record
                .instances
                .iter()
                .any(|o| o.gpu == gpu && o.uuid == inst.uuid);
        by_uuid || self.pending_at(gpu, inst.placed) || self.half_destroyed(gpu, inst)
    }

    /// Whether `inst` is a GPU instance without a compute instance (so without a MIG device
    /// and UUID) where dynmig recorded one of its own: a destroy cut between the compute
    /// instance and the GPU instance (the agent killed there).
    fn half_destroyed(&self, gpu: u32, inst: &InstanceState) -> bool {
        let name = inst.placed.to_string();
        inst.uuid.is_empty() && self.record.instances.iter().any(|o| o.gpu == gpu && o.instance == name)
    }

    fn pending_at(&self, gpu: u32, placed: Placed) -> bool {
        let name = placed.to_string();
        self.record.pending.iter().any(|p| p.gpu == gpu && p.instance == name)
    }

    /// Drops records of instances that no longer exist on the GPUs read in `gpus`, and
    /// confirms pending creates whose instance exists (recording its UUID); saves if
    /// anything changed.
    ///
    /// # Errors
    /// The record cannot be written.
    pub fn forget_gone(&mut self, gpus: &[GpuState]) -> Result<(), BackendError> {
        let before = self.record.clone();
        for g in gpus {
            for i in &g.instances {
                if !self.pending_at(g.index, i.placed) {
                    continue;
                }
                if i.uuid.is_empty() {
                    // Made, but cut before its compute instance (no UUID yet): dynmig's, known
                    // by its place until it is destroyed and made again.
                    let name = i.placed.to_string();
                    self.record
                        .pending
                        .retain(|p| !(p.gpu == g.index && p.instance == name));
                    if !self.half_destroyed(g.index, i) {
                        self.record.instances.push(OwnedInstance {
                            gpu: g.index,
                            uuid: String::new(),
                            instance: name,
                        });
                    }
                } else {
                    self.confirm(g.index, i);
                }
            }
        }
        let read: Vec<u32> = gpus.iter().map(|g| g.index).collect();
        self.record.instances.retain(|o| {
            !read.contains(&o.gpu)
                || gpus.iter().any(|g| {
                    g.index == o.gpu
                        && g.instances
                            .iter()
                            .any(|i| i.uuid == o.uuid || (i.uuid.is_empty() && i.placed.to_string() == o.instance))
                })
        });
        self.record.pending.retain(|p| !read.contains(&p.gpu));
        if self.record != before {
            self.save()?;
        }
        Ok(())
    }

    /// Writes down a create before it is made.
    ///
    /// # Errors
    /// The record cannot be written (the create must then not be made).
    pub fn creating(&mut self, gpu: u32, placed: Placed) -> Result<(), BackendError> {
        self.record.pending.push(PendingCreate {
            gpu,
            instance: placed.to_string(),
        });
        self.save()
    }

    /// Records the outcome of a create written down with [`Self::creating`]: the instance
    /// made, or `None` when the call failed. A failed call keeps the create pending: the
    /// driver may have made the instance before the call failed (a read after the create
    /// timing out, found by the NVML stand-in), so the instance at that place stays
    /// dynmig's to roll back; the next [`Self::forget_gone`] settles it.
    ///
    /// # Errors
    /// The record cannot be written.
    pub fn created(&mut self, gpu: u32, placed: Placed, made: Option<&InstanceState>) -> Result<(), BackendError> {
        let _ = placed;
        if let Some(i) = made {
            self.confirm(gpu, i);
        }
        self.save()
    }

    fn confirm(&mut self, gpu: u32, i: &InstanceState) {
        let name = i.placed.to_string();
        self.record.pending.retain(|p| !(p.gpu == gpu && p.instance == name));
        if !i.uuid.is_empty() && !self.record.instances.iter().any(|o| o.uuid == i.uuid) {
            self.record.instances.push(OwnedInstance {
                gpu,
                uuid: i.uuid.clone(),
                instance: name,
            });
        }
    }

    /// Records that `inst` of GPU `gpu` was destroyed.
    ///
    /// # Errors
    /// The record cannot be written.
    pub fn destroyed(&mut self, gpu: u32, inst: &InstanceState) -> Result<(), BackendError> {
        let name = inst.placed.to_string();
        self.record.instances.retain(|o| {
            let same = if inst.uuid.is_empty() {
                o.instance == name
            } else {
                o.uuid == inst.uuid
            };
            !(o.gpu == gpu && same)
        });
        self.record.pending.retain(|p| !(p.gpu == gpu && p.instance == name));
        self.save()
    }

    /// Records that dynmig's instance `was` of GPU `gpu` is now `now` (same place, another
    /// MIG device: a destroy that failed after the compute instance went and the backend made
    /// it again). Nothing changes unless `was` is dynmig's.
    ///
    /// # Errors
    /// The record cannot be written.
    pub fn remade(&mut self, gpu: u32, was: &InstanceState, now: &InstanceState) -> Result<(), BackendError> {
        if !self.owns(gpu, was) || was.uuid == now.uuid || now.uuid.is_empty() {
            return Ok(());
        }
        let name = was.placed.to_string();
        self.record
            .instances
            .retain(|o| !(o.gpu == gpu && (o.uuid == was.uuid || o.instance == name)));
        self.record.instances.push(OwnedInstance {
            gpu,
            uuid: now.uuid.clone(),
            instance: now.placed.to_string(),
        });
        self.save()
    }

    fn save(&self) -> Result<(), BackendError> {
        let Some(path) = &self.path else { return Ok(()) };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| BackendError::io("create", dir, e))?;
        }
        dynmig_host::fs::write_atomically(path, self.record.encode().as_bytes(), 0o600)
            .map_err(|e| BackendError::io("write", path, e))
    }
}
