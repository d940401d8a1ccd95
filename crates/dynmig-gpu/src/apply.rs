//! [`apply_transition`]: the one place where a node's GPUs are moved to a target layout.
//!
//! Per GPU, in index order:
//! 1. read it; if MIG is off, turn it on, but only when the backend allows mode changes
//!    ([`GpuBackend::allows_mig_mode_change`]);
//! 2. plan with [`plan_transition`]: only what must change changes, busy instances stay
//!    where they are (a plan that would have to move one is refused), and so do instances
//!    dynmig did not create ([`Ownership`]: a plan that needs one gone is refused with
//!    [`ApplyError::Foreign`]);
//! 3. destroy, then create at the planned placements, each create written down in the
//!    [`Ownership`] record before it is made and confirmed after;
//! 4. read the GPU back and check that it holds the target.
//!
//! A GPU that fails after some operations succeeded (halfway) is put back to the layout it
//! had, by the same planning; if that fails too, the error says exactly what the GPU holds
//! ([`describe`]). The GPUs changed before it are then put back too, last first, the same
//! way: a failed apply leaves the node as it was (what gres.conf and Slurm still say), or
//! says which GPU holds what. Later GPUs are not touched. (Before, GPUs already done stayed
//! done, and a node whose second GPU failed kept a first GPU that gres.conf and Slurm did not
//! describe: found by tests/cluster/faults.rs with a failed read of GPU 1.)

use crate::{BackendError, GpuBackend, GpuState, Ownership};
use dynmig_core::geometry::{plan_transition, GpuModel, NodeLayout, ProfileCounts, TransitionError};

/// Why [`apply_transition`] stopped. The `Display` text is meant for a drain reason and a
/// log line: it names the GPU, the operation and the backend's error.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The target does not fit the node (other GPU count or model).
    #[error("target {target} does not fit the node: {why}")]
    Target {
        /// The target layout.
        target: String,
        /// What differs.
        why: String,
    },
    /// The node's GPUs could not be listed.
    #[error("cannot read the node's GPUs: {source}")]
    ReadAll {
        /// The backend's error.
        #[source]
        source: BackendError,
    },
    /// A GPU could not be read.
    #[error("GPU {gpu}: cannot read it: {source}")]
    Read {
        /// GPU index.
        gpu: u32,
        /// The backend's error.
        #[source]
        source: BackendError,
    },
    /// MIG is off and the backend may not turn it on.
    #[error("GPU {gpu}: MIG is off and mode changes are not allowed (set allow_mig_mode_change = true in the node group, or enable MIG at boot with `nvidia-smi -i {gpu} -mig 1`)")]
    MigOff {
        /// GPU index.
        gpu: u32,
    },
    /// Turning MIG on failed.
    #[error("GPU {gpu}: enabling MIG: {source}")]
    EnableMig {
        /// GPU index.
        gpu: u32,
        /// The backend's error.
        #[source]
        source: BackendError,
    },
    /// No plan reaches the target from what the GPU holds (e.g. a busy instance is in the way).
    #[error("GPU {gpu}: cannot reach {want}: {source}")]
    Plan {
        /// GPU index.
        gpu: u32,
        /// The GPU's target layout.
        want: String,
        /// Why.
        #[source]
        source: TransitionError,
    },
    /// The target needs an instance gone that dynmig did not create; dynmig never destroys
    /// those ([`Ownership`]).
    #[error("GPU {gpu}: cannot reach {want}: {foreign} not created by dynmig (not in its instance record); dynmig never destroys such instances: remove them (`nvidia-smi mig -dci` and `-dgi`) or fit the target around them")]
    Foreign {
        /// GPU index.
        gpu: u32,
        /// The GPU's target layout.
        want: String,
        /// The instances in the way, e.g. `1g.10gb@0 (MIG-...)`.
        foreign: String,
    },
    /// The instance record could not be read or written.
    #[error("GPU {gpu}: instance record: {source}")]
    Record {
        /// GPU index.
        gpu: u32,
        /// The error.
        #[source]
        source: BackendError,
    },
    /// A destroy or create failed.
    #[error("GPU {gpu}: {op} {what}: {source}")]
    Operation {
        /// GPU index.
        gpu: u32,
        /// `"destroy"` or `"create"`.
        op: &'static str,
        /// The instance, e.g. `3g.40gb@4`.
        what: String,
        /// The backend's error.
        #[source]
        source: BackendError,
    },
    /// The plan named an instance the GPU does not hold (the GPU changed under the agent).
    #[error("GPU {gpu}: planned destroy of {what} which does not exist")]
    Vanished {
        /// GPU index.
        gpu: u32,
        /// The instance.
        what: String,
    },
    /// After the operations the GPU holds something else.
    #[error("GPU {gpu}: after apply the layout is {now}, not {want}")]
    Verify {
        /// GPU index.
        gpu: u32,
        /// What it holds.
        now: String,
        /// The target.
        want: String,
    },
    /// A GPU failed halfway and was put back as it was.
    #[error("GPU {gpu} rolled back to {original} ({undo_ops} operations) after: {cause}")]
    RolledBack {
        /// GPU index.
        gpu: u32,
        /// The layout it holds again.
        original: String,
        /// Operations the rollback took.
        undo_ops: usize,
        /// The failure.
        cause: Box<ApplyError>,
    },
    /// A GPU failed halfway and could not be put back.
    #[error("GPU {gpu} left as {left}: rollback to {original} failed ({rollback}) after: {cause}")]
    RollbackFailed {
        /// GPU index.
        gpu: u32,
        /// What it holds now ([`describe`]), or `unknown (...)`.
        left: String,
        /// The layout it had.
        original: String,
        /// Why the rollback failed.
        rollback: Box<ApplyError>,
        /// The failure.
        cause: Box<ApplyError>,
    },
    /// A GPU failed halfway and cannot even be read.
    #[error("GPU {gpu} in unknown state (cannot read it: {read}) after: {cause}")]
    Unknown {
        /// GPU index.
        gpu: u32,
        /// The read error.
        read: BackendError,
        /// The failure.
        cause: Box<ApplyError>,
    },
}

/// Moves every GPU of `backend` to its layout in `target` (GPU `i` to `target.gpus[i]`), as
/// the module documentation says, and returns the number of operations done (MIG mode
/// changes, destroys and creates; 0 when the node already holds the target).
///
/// # Errors
/// [`ApplyError`]: the target does not fit the node (its GPU count differs from the
/// backend's, or a GPU is not a `model`), a GPU cannot be read, MIG is off and may not be
/// turned on, a plan cannot keep a busy instance, an operation failed (the GPU is then rolled
/// back: [`ApplyError::RolledBack`], or [`ApplyError::RollbackFailed`] saying what it holds),
/// or the result differs from the target; [`ApplyError::Foreign`] when the target needs an
/// instance gone that `owned` does not name; [`ApplyError::Record`] when `owned` cannot be
/// saved.
pub fn apply_transition(
    backend: &mut dyn GpuBackend,
    model: &'static GpuModel,
    target: &NodeLayout,
    owned: &mut Ownership,
) -> Result<usize, ApplyError> {
    let all = backend.gpus().map_err(|source| ApplyError::ReadAll { source })?;
    let count = all.len();
    owned
        .forget_gone(&all)
        .map_err(|source| ApplyError::Record { gpu: 0, source })?;
    if count != target.gpus.len() {
        return Err(ApplyError::Target {
            target: target.to_string(),
            why: format!("it has {} GPU layouts, the node {count} GPUs", target.gpus.len()),
        });
    }
    let mut ops = 0;
    // GPUs changed so far, with the layout each had, for a rollback if a later GPU fails.
    let mut changed: Vec<(u32, ProfileCounts)> = Vec::new();
    for (index, want) in target.gpus.iter().enumerate() {
        let index = index as u32;
        match apply_gpu(backend, model, target, index, want, owned) {
            Ok((0, _)) => {}
            Ok((done, original)) => {
                ops += done;
                changed.push((index, original));
            }
            Err(mut e) => {
                for (gpu, original) in changed.iter().rev() {
                    e = roll_back(backend, model, *gpu, original, e, owned);
                }
                return Err(e);
            }
        }
    }
    Ok(ops)
}

/// Moves GPU `index` to `want` (turning MIG on first if needed and allowed); the operations
/// done and the layout it had. A GPU that fails halfway is rolled back ([`roll_back`]).
fn apply_gpu(
    backend: &mut dyn GpuBackend,
    model: &'static GpuModel,
    target: &NodeLayout,
    index: u32,
    want: &ProfileCounts,
    owned: &mut Ownership,
) -> Result<(usize, ProfileCounts), ApplyError> {
    let mut ops = 0;
    let mut gpu = read(backend, index)?;
    if gpu.model.name != model.name {
        return Err(ApplyError::Target {
            target: target.to_string(),
            why: format!("GPU {index} is an {}, the target is for {}", gpu.model.name, model.name),
        });
    }
    if !gpu.mig_enabled {
        if !backend.allows_mig_mode_change() {
            return Err(ApplyError::MigOff { gpu: index });
        }
        backend
            .set_mig_mode(index, true)
            .map_err(|source| ApplyError::EnableMig { gpu: index, source })?;
        ops += 1;
        gpu = read(backend, index)?;
    }
    let original = gpu.layout();
    let mut done = 0;
    if let Err(e) = change_gpu(backend, model, &gpu, want, &mut done, owned) {
        if done == 0 {
            return Err(e);
        }
        return Err(roll_back(backend, model, index, &original, e, owned));
    }
    ops += done;
    Ok((ops, original))
}

fn read(backend: &dyn GpuBackend, gpu: u32) -> Result<GpuState, ApplyError> {
    backend.gpu(gpu).map_err(|source| ApplyError::Read { gpu, source })
}

/// Puts GPU `index` back to `original` after `cause` failed it halfway.
fn roll_back(
    backend: &mut dyn GpuBackend,
    model: &'static GpuModel,
    index: u32,
    original: &ProfileCounts,
    cause: ApplyError,
    owned: &mut Ownership,
) -> ApplyError {
    let cause = Box::new(cause);
    let now = match backend.gpu(index) {
        Ok(now) => now,
        Err(read) => {
            return ApplyError::Unknown {
                gpu: index,
                read,
                cause,
            }
        }
    };
    let mut undo = 0;
    match change_gpu(backend, model, &now, original, &mut undo, owned) {
        Ok(()) => ApplyError::RolledBack {
            gpu: index,
            original: original.to_string(),
            undo_ops: undo,
            cause,
        },
        Err(r) => ApplyError::RollbackFailed {
            gpu: index,
            left: backend
                .gpu(index)
                .map_or_else(|x| format!("unknown ({x})"), |g| describe(&g)),
            original: original.to_string(),
            rollback: Box::new(r),
            cause,
        },
    }
}

/// Moves `gpu` (as read just before) to `want` with [`plan_transition`] and verifies the
/// result; `done` counts the operations that succeeded, also on failure.
fn change_gpu(
    backend: &mut dyn GpuBackend,
    model: &'static GpuModel,
    gpu: &GpuState,
    want: &ProfileCounts,
    done: &mut usize,
    owned: &mut Ownership,
) -> Result<(), ApplyError> {
    let index = gpu.index;
    // A GPU instance of dynmig's without a compute instance (a create or destroy cut short:
    // it has no MIG device, so no job can use it) is destroyed first, then the GPU is planned
    // as it is without it.
    let broken: Vec<_> = gpu
        .instances
        .iter()
        .filter(|i| i.uuid.is_empty() && !i.busy && owned.owns(index, i))
        .cloned()
        .collect();
    let reread;
    let gpu = if broken.is_empty() {
        gpu
    } else {
        for inst in &broken {
            backend
                .destroy_instance(index, inst.gi_id)
                .map_err(|source| ApplyError::Operation {
                    gpu: index,
                    op: "destroy",
                    what: format!("{} (no compute instance)", inst.placed),
                    source,
                })?;
            *done += 1;
            owned
                .destroyed(index, inst)
                .map_err(|source| ApplyError::Record { gpu: index, source })?;
        }
        reread = read(backend, index)?;
        &reread
    };
    // Instances dynmig did not create stay, as busy ones do.
    let current: Vec<_> = gpu
        .instances
        .iter()
        .map(|i| (i.placed, i.busy || !owned.owns(index, i)))
        .collect();
    let plan = plan_transition(model, &current, want).map_err(|source| {
        let foreign: Vec<String> = gpu
            .instances
            .iter()
            .filter(|i| !i.busy && !owned.owns(index, i))
            .map(|i| {
                format!(
                    "{} ({})",
                    i.placed,
                    if i.uuid.is_empty() { "no MIG device" } else { &i.uuid }
                )
            })
            .collect();
        let target_invalid = matches!(source, TransitionError::TargetInvalid(_));
        if foreign.is_empty() || target_invalid {
            ApplyError::Plan {
                gpu: index,
                want: want.to_string(),
                source,
            }
        } else {
            ApplyError::Foreign {
                gpu: index,
                want: want.to_string(),
                foreign: foreign.join(", "),
            }
        }
    })?;
    let record = |source| ApplyError::Record { gpu: index, source };
    for d in &plan.destroy {
        let inst = gpu
            .instances
            .iter()
            .find(|i| i.placed == *d)
            .ok_or_else(|| ApplyError::Vanished {
                gpu: index,
                what: d.to_string(),
            })?;
        if let Err(source) = backend.destroy_instance(index, inst.gi_id) {
            // A destroy that failed halfway may leave the instance with a new MIG device (its
            // compute instance made again): it is still dynmig's.
            if let Ok(now) = backend.gpu(index) {
                if let Some(again) = now.instances.iter().find(|i| i.placed == inst.placed) {
                    owned.remade(index, inst, again).map_err(record)?;
                }
            }
            return Err(ApplyError::Operation {
                gpu: index,
                op: "destroy",
                what: d.to_string(),
                source,
            });
        }
        *done += 1;
        owned.destroyed(index, inst).map_err(record)?;
    }
    for c in &plan.create {
        owned.creating(index, *c).map_err(record)?;
        let made = backend.create_instance(index, *c);
        owned.created(index, *c, made.as_ref().ok()).map_err(record)?;
        made.map_err(|source| ApplyError::Operation {
            gpu: index,
            op: "create",
            what: c.to_string(),
            source,
        })?;
        *done += 1;
    }
    let now = read(backend, index)?.layout();
    if &now != want {
        return Err(ApplyError::Verify {
            gpu: index,
            now: now.to_string(),
            want: want.to_string(),
        });
    }
    Ok(())
}

/// A GPU's instances for a drain reason: `3g.40gb@0(busy) 1g.10gb@4`, `no instances`, or
/// `MIG off`.
pub fn describe(g: &GpuState) -> String {
    if !g.mig_enabled {
        return "MIG off".into();
    }
    if g.instances.is_empty() {
        return "no instances".into();
    }
    let v: Vec<String> = g
        .instances
        .iter()
        .map(|i| format!("{}{}", i.placed, if i.busy { "(busy)" } else { "" }))
        .collect();
    v.join(" ")
}
