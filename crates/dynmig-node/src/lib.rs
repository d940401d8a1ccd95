//! dynmig-node: what runs as root on each GPU node.
//!
//! - [`agent`]: applies the layout the controller chose, between allocations, journalled and
//!   resumable; [`reregister`]: how the node re-registers with Slurm;
//! - [`hooks`]: the Prolog and Epilog; [`oom`]: out-of-memory detection and restart;
//! - [`as_user`]: reading and appending to user-chosen files with the user's rights;
//! - [`metrics`]: the agent's Prometheus metrics;
//! - [`pidfile`]: pid files checked against the process's name and start time;
//! - [`paths`]: where a node's files are; [`setup`]: a node's initial layout and its agent
//!   from the config.
//!
//! Root never trusts user text here: jobs are read through Slurm's JSON
//! ([`dynmig_slurm::SlurmApi`]), user-chosen paths are opened as the user, every read is
//! bounded and every external call times out.
#![deny(missing_docs)]

pub mod agent;
pub mod as_user;
pub mod dcgm;
pub mod hooks;
pub mod metrics;
pub mod oom;
pub mod paths;
pub mod pidfile;
pub mod reregister;
pub mod setup;
pub mod testpoints;
