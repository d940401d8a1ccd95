//! dynmig-train: training of the learned policies (docs/learned.md), apart from their
//! runtime (crate dynmig-learn) so that the controller does not link candle. The learned
//! policy is trained in the simulator's engine by REINFORCE over a candle copy of the
//! runtime's network ([`net`], [`mod@train`]), and saved in the runtime's model file, which
//! [`dynmig_learn::Model::load`] reads; the residual on the guarded default is trained in
//! [`residual`]. The simulator's `learned` policy from a model file is built here too
//! ([`external`], [`load_external`], [`load_externals`]).
#![deny(missing_docs)]

pub mod net;
pub mod residual;
pub mod train;

pub use dynmig_learn::Model;
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

/// The simulator's `learned` policies from model files, each for the GPU model it was
/// trained for ([`Model::trained_for`]), greedy, under `limits`.
///
/// # Errors
/// A file that is not a model, a model for a GPU model this dynmig does not know, or two
/// files for the same GPU model.
pub fn load_externals(
    paths: &[std::path::PathBuf],
    limits: &dynmig_core::policy::PolicyLimits,
) -> anyhow::Result<Vec<dynmig_sim::policies::ExternalPolicy>> {
    let mut out: Vec<dynmig_sim::policies::ExternalPolicy> = Vec::new();
    for p in paths {
        let model = Model::trained_for(p)?;
        if out.iter().any(|e| e.gpu_model == Some(model.name)) {
            anyhow::bail!(
                "two learned models for {} GPUs (the second: {}); give one per GPU model",
                model.name,
                p.display()
            );
        }
        out.push(load_external(p, model, limits)?);
    }
    Ok(out)
}
