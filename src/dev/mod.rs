//! Developer tools, apart from production code: the demo and its comparison with the
//! simulator, trace slicing, the fake GPU workload. Nothing in the member crates imports them.

pub mod demo;
pub mod fake_job;
pub mod sim_compare;
pub mod trace;
