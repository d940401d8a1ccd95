//! dynmig-host: the host plumbing every dynmig process shares, and nothing else.
//!
//! - [`clock`]: the wall clock as epoch seconds;
//! - [`daemon`]: the daemons' one harness: signals, reload, metrics endpoint, loop and stop;
//! - [`fs`]: atomic replacement of a file with a chosen mode, reads with a size bound;
//! - [`metrics`]: the daemons' Prometheus endpoint (`GET /metrics` on a thread of its own);
//! - [`process`]: external commands run with a timeout and a cap on what they print;
//! - [`signals`]: the daemons' stop and reload flags, set by SIGTERM/SIGINT and SIGHUP;
//! - [`wake`]: the controller's wake-up of a node agent after it drains the node.
//!
//! Root-side code (agent, Prolog, Epilog) uses only these for files and commands, so every
//! read is bounded and every external call times out (docs/architecture.md, "Root side").
#![deny(missing_docs)]

pub mod clock;
pub mod daemon;
pub mod fs;
pub mod metrics;
pub mod process;
pub mod signals;
pub mod wake;
