//! dynmig: dynamic NVIDIA MIG partitioning for Slurm.
//!
//! This crate holds everything that does I/O around the pure logic of [`dynmig_core`]:
//! - [`slurm`]: reading jobs and nodes from Slurm and changing node state, through Slurm's
//!   own commands;
//! - [`backend`]: the GPU backend trait, the simulated backend (and NVML on real GPUs);
//! - [`gres_conf`]: gres.conf generation for a node's MIG instances;
//! - [`trace`]: the Alibaba GPU trace and its mapping to demo jobs.

pub mod agent;
pub mod backend;
pub mod context;
pub mod controller;
pub mod demo;
pub mod events;
pub mod fake_job;
pub mod gpu_cli;
pub mod gpu_probe;
pub mod gres_conf;
pub mod history;
pub mod hooks;
pub mod oom;
pub mod power;
pub mod slurm;
pub mod status;
pub mod trace;
