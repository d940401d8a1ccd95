//! dynmig-lab: the simulator's lab, on the engine of `dynmig-sim`. It runs the policies side
//! by side and says which is better, for people: the controller links none of it.
//!
//! - [`evaluate`]: every policy side by side on one workload and cluster, on a judged
//!   window ([`window`]) apart from the days the fair static is searched on.
//! - [`compare`]: the three request modes (whole GPU, exact need, the estimator's estimate).
//! - [`matrix`], [`matrix_report`], [`matrix_cli`]: the policies over clusters, loads,
//!   GPU models, drain modes and seeds, and the sensitivity sweep.
//! - [`ceilings`], [`per_allocation`]: what no layout policy can pass (per-allocation
//!   instances, the floor).
//! - [`report`], [`charts`]: tables, CSV and SVG.
//! - [`args`], [`cli`]: `dynmig simulate`.
#![deny(missing_docs)]

pub mod args;
pub mod ceilings;
pub mod charts;
pub mod cli;
pub mod compare;
pub mod evaluate;
pub mod matrix;
pub mod matrix_cli;
pub mod matrix_report;
pub mod per_allocation;
pub mod report;
pub mod window;
