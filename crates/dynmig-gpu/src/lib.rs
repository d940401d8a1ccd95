//! dynmig-gpu: everything dynmig does to a node's GPUs, behind one trait.
//!
//! - [`GpuBackend`]: the MIG operations (read, create at a [`Placed`] placement, destroy,
//!   MIG mode, power) and what the Prolog/Epilog need ([`GpuBackend::find_instance`],
//!   [`GpuBackend::claim`], [`GpuBackend::release_job`]). Implemented by [`NvmlBackend`] (real
//!   GPUs) and [`SimulatedBackend`] (a stateful fake with fault injection); [`open_backend`]
//!   builds either from explicit settings, so that no caller branches on the kind.
//! - [`apply_transition`]: the one way a node's GPUs move to a target [`NodeLayout`]: per GPU,
//!   MIG on if needed, [`dynmig_core::geometry::plan_transition`] (busy instances stay),
//!   destroys, creates, a check, and a rollback of a GPU that fails halfway; it destroys only
//!   instances dynmig created ([`Ownership`]).
//! - [`gres_conf`]: the node's gres.conf and `Gres=` string from what the backend reports.
//! - [`probe`]: what NVML reports, compared with dynmig's geometry tables.
//! - [`transitions`]: instance operations between representative layouts, dynmig against
//!   mig-parted's destroy-all-and-recreate, measured on the simulated backend.
//! - [`energy`]: per-job energy: a GPU's power split over the jobs on its instances, kept in
//!   a ledger file.
//!
//! ```
//! use dynmig_core::geometry::{NodeLayout, A100_80GB};
//! use dynmig_gpu::{apply_transition, GpuBackend, Ownership, SimulatedBackend};
//! let dir = tempfile::tempdir().unwrap();
//! let mut b = SimulatedBackend::open(&dir.path().join("sim.json"), &dir.path().join("dev"), &A100_80GB, 1).unwrap();
//! let target = NodeLayout::parse(&A100_80GB, 1, "1x3g.40gb+2x2g.20gb").unwrap();
//! let mut owned = Ownership::in_memory_owning(&b.gpus().unwrap());
//! let ops = apply_transition(&mut b, &A100_80GB, &target, &mut owned).unwrap();
//! assert_eq!(ops, 3);
//! assert_eq!(b.gpu(0).unwrap().layout().to_string(), "1x3g.40gb+2x2g.20gb");
//! ```
#![deny(missing_docs)]

mod apply;
mod backend;
pub mod energy;
mod error;
pub mod gres_conf;
pub mod nvml;
mod open;
pub mod ownership;
pub mod probe;
pub mod simulated;
pub mod transitions;

pub use apply::{apply_transition, describe, ApplyError};
pub use backend::{GpuBackend, GpuState, InstanceState, WHOLE_GPU};
pub use error::BackendError;
pub use nvml::NvmlBackend;
pub use open::{open_backend, BackendSettings};
pub use ownership::Ownership;
pub use simulated::{Fault, FaultKind, FaultOp, FaultPlan, SimulatedBackend, FAULTS_ENV};

pub use dynmig_core::config::Backend;
pub use dynmig_core::geometry::{NodeLayout, Placed};
