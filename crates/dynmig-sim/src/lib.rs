//! dynmig-sim: a deterministic discrete-event simulator of a cluster of MIG GPUs under any
//! repartitioning policy, and the research comparisons on the real Alibaba trace.
//!
//! - [`workload`]: the trace loader ([`workload::alibaba`], [`workload::trace`]) and a
//!   SMART-MIG-like generator ([`workload::synthetic`]), producing [`model::Job`]s.
//! - [`model`]: run time on an instance (sublinear scaling), due dates.
//! - [`power`]: idle + concave per-instance power fitted to A100 measurements.
//! - [`cluster`], [`engine`]: the simulated state and the event loop ([`engine::simulate`]).
//! - [`placement`]: Slurm-like, EDF, EFT, largest-first, smallest-first, random;
//!   [`backfill`]: Slurm's typed placement and backfill on time limits, and the what-ifs.
//! - [`policies`]: none, static, twice-daily, dynamic (the controller's
//!   `dynmig_core::policy::DemandDriven`), learned time-of-day; all through
//!   `dynmig_core::policy::Policy`.
//! - [`metrics`], [`bounds`]: energy, tardiness, ET, waits; lower bounds.
//! - [`evaluate`]: every policy side by side; [`report`], [`charts`]: tables and SVG.
//! - [`requests`]: what jobs ask for (whole GPU, exact need, the estimator's estimate) and
//!   out-of-memory restarts; [`compare`]: the three request modes side by side.
//! - [`cli`]: `dynmig simulate`.
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

pub mod args;
pub mod backfill;
pub mod bounds;
pub mod ceilings;
pub mod charts;
pub mod cli;
pub mod cluster;
pub mod compare;
pub mod engine;
pub mod evaluate;
pub mod matrix;
pub mod matrix_cli;
pub mod matrix_report;
pub mod metrics;
pub mod model;
pub mod per_allocation;
pub mod placement;
pub mod policies;
pub mod power;
pub mod report;
pub mod requests;
pub mod search;
pub mod window;
pub mod workload;
