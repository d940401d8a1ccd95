//! dynmig-learn: a learned repartitioning policy (docs/learned.md). The model chooses, per
//! node that may change, keep or one of a small catalogue of layouts ([`catalogue`]) from an
//! observation of shares of the cluster ([`features`]), so one model serves any cluster size;
//! it is trained in the simulator's engine ([`train`]), saved as one file ([`net`]), and served
//! by the simulator and the controller through the one `Policy` trait ([`policy`]).
#![deny(missing_docs)]

pub mod catalogue;
pub mod features;
pub mod net;
pub mod policy;
pub mod train;

pub use net::Model;
pub use policy::LearnedPolicy;
pub use train::{external, train, TrainArgs};

/// The simulator's `learned` policy from a model file, for a cluster of `gpu_model` GPUs,
/// greedy, under `limits`.
///
/// # Errors
/// The file is not a model for `gpu_model` ([`Model::load`]).
pub fn load_external(
    path: &std::path::Path,
    gpu_model: &'static dynmig_core::geometry::GpuModel,
    limits: &dynmig_core::policy::PolicyLimits,
) -> anyhow::Result<dynmig_sim::policies::ExternalPolicy> {
    Ok(external(&Model::load(path, gpu_model)?, limits, None))
}
