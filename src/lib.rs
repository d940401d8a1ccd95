//! dynmig: dynamic NVIDIA MIG partitioning for Slurm — the `dynmig` command's own code.
//!
//! The work lives in the member crates (docs/architecture.md): `dynmig-core` (pure logic),
//! `dynmig-slurm`, `dynmig-gpu`, `dynmig-node`, `dynmig-controller`, `dynmig-history`,
//! `dynmig-sim`. Here are only:
//! - [`cli`]: argument types and glue of the administrator's commands;
//! - [`dev`]: developer tools, apart from production code: the demo, trace slicing, the fake
//!   GPU workload.

pub mod cli;
pub mod dev;
