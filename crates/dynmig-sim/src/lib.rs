//! dynmig-sim: the simulator's engine, a deterministic discrete-event simulator of a cluster of
//! MIG GPUs under any repartitioning policy. It is a library the controller may use (the
//! `mpc`, `adaptive` and `guarded` policies run it to judge layouts); the lab that compares
//! policies (the matrix, reports, charts and the `dynmig simulate` command) is `dynmig-lab`.
//!
//! - [`workload`]: the trace loader ([`workload::alibaba`], [`workload::trace`]) and a
//!   SMART-MIG-like generator ([`workload::synthetic`]), producing [`model::Job`]s.
//! - [`model`]: run time on an instance (sublinear scaling), due dates.
//! - [`power`]: idle + concave per-instance power fitted to A100 measurements.
//! - [`cluster`], [`engine`]: the simulated state and the event loop ([`engine::simulate`]).
//! - [`placement`]: Slurm-like, EDF, EFT, largest-first, smallest-first, random;
//!   [`backfill`]: Slurm's typed placement and backfill on time limits, and the what-ifs.
//! - [`policies`]: none, static, twice-daily, dynamic (the controller's
//!   `dynmig_core::policy::DemandDriven`), learned time-of-day, mpc, adaptive, guarded,
//!   clairvoyant; all through `dynmig_core::policy::Policy`.
//! - [`metrics`], [`bounds`]: energy, tardiness, ET, waits; lower bounds.
//! - [`search`]: the best static layouts of a workload (the fair static baseline, and the
//!   searches of `adaptive` and `guarded`).
//! - [`requests`]: what jobs ask for (whole GPU, exact need, the estimator's estimate) and
//!   out-of-memory restarts.
//!
//! ```no_run
//! use dynmig_sim::engine::{simulate, SimConfig};
//! use dynmig_sim::policies::PolicySpec;
//! use dynmig_sim::workload::synthetic::{synthetic_workload, SyntheticParams};
//! use dynmig_core::geometry::A100_40GB;
//! let wl = synthetic_workload(&SyntheticParams::default(), &Default::default()).unwrap();
//! let r = simulate(&wl, &PolicySpec::None, &SimConfig::new(&A100_40GB, 4, 8), &|_| {}).unwrap();
//! println!("{} J", r.energy_j);
//! ```
#![deny(missing_docs)]

pub mod backfill;
pub mod bounds;
pub mod cluster;
pub mod engine;
pub mod metrics;
pub mod model;
pub mod placement;
pub mod policies;
pub mod power;
pub mod requests;
pub mod search;
pub mod workload;
