//! dynmig-core: the pure logic of dynmig.
//!
//! Data flows one way: hints -> estimate -> profile -> demand -> plan -> apply.
//!
//! - [`geometry`]: MIG profile and placement tables per GPU model, valid layouts.
//! - [`size`], [`hints`], [`gres`]: memory sizes, the users' `--mig-*` hints, Slurm TRES strings.
//! - [`estimate`]: a job's GPU memory from its hints, its model or its history.
//! - [`submit`]: the job_submit decision: which MIG profile a GPU request becomes.
//! - [`config`]: dynmig.toml, read and checked.
//! - [`demand`]: pending instances per profile.
//! - [`migparted`]: NVIDIA mig-parted v1 YAML configs, imported and exported.
//! - [`snapshot`]: the cluster as a policy sees it, built the same way by the controller and
//!   the simulator.
//! - [`policy`]: the [`policy::Policy`] trait and the repartitioning policies.
//! - [`protocol`]: the typed codecs of everything that crosses a process boundary.
//! - [`energy`]: the GPU power model (a power law fitted to A100 measurements).
//! - [`types`]: small enums the config, the estimator and the submit decision share.
//!
//! No I/O and no FFI live here: the Slurm plugins, the CLI, the controller, the node agent
//! and the simulator all call this crate.
#![deny(missing_docs)]

pub mod config;
pub mod demand;
pub mod energy;
pub mod estimate;
pub mod geometry;
pub mod gres;
pub mod hints;
pub mod migparted;
pub mod modify;
pub mod policy;
pub mod protocol;
pub mod size;
pub mod snapshot;
pub mod submit;
pub mod types;
