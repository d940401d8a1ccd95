//! What `src/main.rs` dispatches to: the daemons (controller, agent, history service), the
//! node's commands, the administrator's commands, the simulator's; the GPU tools, the pictures.
//! Config loading, the logger and the reload are `dynmig-process`'s, re-exported here.

pub mod admin;
pub mod agent;
pub mod doctor;
pub mod estimate;
pub mod gpu;
pub mod history;
pub mod history_names;
pub mod learn;
pub mod node;
pub mod pictures;
pub mod why;

pub use dynmig_process::{load_config, logging, signals, CONFIG_ENV, DEFAULT_CONFIG, MAX_CONFIG};
