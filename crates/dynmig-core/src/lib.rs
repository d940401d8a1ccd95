//! dynmig-core: the pure logic of dynmig.
//!
//! Data flows one way: hints -> estimate -> profile -> demand -> plan -> apply.
//!
//! - [`geometry`]: MIG profile and placement tables per GPU model, valid layouts.
//!
//! No I/O and no FFI live here: the Slurm plugins, the CLI, the controller, the node agent
//! and the simulator all call this crate.
#![deny(missing_docs)]

pub mod geometry;
