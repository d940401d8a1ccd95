//! nvml-standin: our own stand-in for NVIDIA's `libnvidia-ml.so.1` (NVML), written from
//! NVIDIA's public NVML API reference (<https://docs.nvidia.com/deploy/nvml-api/>, nvml.h) and
//! the NVIDIA Multi-Instance GPU User Guide, so that dynmig's NVML backend (nvml-wrapper and
//! its raw bindings), its agent, Prolog and Epilog can run against MIG GPUs that do not exist.
//!
//! - The cdylib exports the NVML functions dynmig calls and their neighbours ([`ffi`]; the
//!   list with who calls each is crates/nvml-standin/FUNCTIONS.md), with nvml.h's C types
//!   (from nvml-wrapper-sys) and the return codes the reference documents.
//! - The node's state is one JSON file, `standin.json`, next to the loaded library file (or in
//!   `$DYNMIG_NVML_STANDIN_DIR`), under the exclusive lock `standin.lock`: every process that
//!   loads the library sees one node, as with a real driver ([`state`]).
//! - Boards come from committed NVML captures or dynmig-core's geometry tables ([`boards`]).
//! - Faults are planned in the state: a call that fails once, a call that hangs, a process
//!   that dies mid-apply, a lost GPU.
//! - The rlib side, [`StandIn`], installs the library into a folder and works the state from
//!   tests and tools.
//!
//! ```no_run
//! use nvml_standin::{NodeSpec, StandIn};
//! let dir = tempfile::tempdir().unwrap();
//! let node = StandIn::install(dir.path(), &NodeSpec::new("capture:h100-80gb", 2)).unwrap();
//! // nvml_wrapper::Nvml::builder().lib_path(node.library_path().as_os_str()).init()
//! # let _ = node;
//! ```
#![deny(missing_docs)]

mod api;
pub mod boards;
pub mod ffi;
pub mod state;

pub use api::{built_cdylib, StandIn, BUILD_HINT, CDYLIB_NAME, DEV_LINK_NAME, LIBRARY_NAME};
pub use boards::{Board, BoardProfile};
pub use state::{ComputeInstance, Fault, Gpu, GpuInstance, NodeSpec, ProcessEntry, State, FORMAT};
