//! The learned policy of `dynmig-learn` (a model file) as the engine and the controller run
//! it: a [`PolicySpec::External`](super::PolicySpec::External) whose maker checks the
//! cluster's GPU model and builds a [`LearnedPolicy`], greedy or sampling (training). The
//! one factory ([`super::from_config`]) builds the config's `learned` kind here;
//! `dynmig simulate --learned-model` ([`load_externals`]) and training (crate dynmig-train)
//! too.

use super::{ExternalPolicy, PolicyLimits};
use crate::engine::SimConfig;
use anyhow::{bail, Result};
use dynmig_core::geometry::GpuModel;
use dynmig_learn::policy::{LearnedPolicy, Mode, Step, MAX_WAIT};
use dynmig_learn::Model;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The policy `model` as the engine runs it under `limits`: greedy (`sample` `None`), or
/// drawing its actions from a generator seeded with `sample.0` and recording each decision
/// into `sample.1` (training's episodes). `exact_profiles`: a waiting job counts only its
/// own profile ([`LearnedPolicy::with_exact_profiles`]; the controller, as Slurm places).
/// Its maker refuses a cluster of other GPUs than the model's.
pub fn external(
    model: &Model,
    limits: &PolicyLimits,
    exact_profiles: bool,
    sample: Option<(u64, Arc<Mutex<Vec<Step>>>)>,
) -> ExternalPolicy {
    let (model, limits) = (model.clone(), limits.clone());
    ExternalPolicy {
        name: "learned",
        gpu_model: Some(model.catalogue.model.name),
        make: Arc::new(move |cfg: &SimConfig| {
            if cfg.model.name != model.meta.gpu_model {
                bail!(
                    "the learned model was trained for {} GPUs ({}); this simulated cluster has {} GPUs",
                    model.meta.gpu_model,
                    model.meta.trained_on,
                    cfg.model.name
                );
            }
            Ok(Box::new(
                LearnedPolicy::new(model.clone(), limits.clone(), MAX_WAIT, mode(&sample))
                    .with_exact_profiles(exact_profiles),
            ) as _)
        }),
    }
}

/// Greedy (`None`), or drawing from a generator seeded with `sample.0` and recording each
/// decision into `sample.1`.
pub fn mode(sample: &Option<(u64, Arc<Mutex<Vec<Step>>>)>) -> Mode {
    match sample {
        None => Mode::Greedy,
        Some((seed, steps)) => Mode::Sample {
            rng: Box::new(ChaCha8Rng::seed_from_u64(*seed)),
            steps: steps.clone(),
        },
    }
}

/// The learned policy of the model file `path` for a cluster of `gpu_model` GPUs, greedy,
/// under `limits` ([`external`]).
///
/// # Errors
/// The file is not a model for `gpu_model` ([`Model::load`]: the message names the file and
/// what it was trained for).
pub fn from_file(
    path: &Path,
    gpu_model: &'static GpuModel,
    limits: &PolicyLimits,
    exact_profiles: bool,
) -> Result<ExternalPolicy> {
    Ok(external(&Model::load(path, gpu_model)?, limits, exact_profiles, None))
}

/// The simulator's `learned` policies from model files, each for the GPU model it was
/// trained for ([`Model::trained_for`]), greedy, under `limits`.
///
/// # Errors
/// A file that is not a model, a model for a GPU model this dynmig does not know, or two
/// files for the same GPU model.
pub fn load_externals(paths: &[PathBuf], limits: &PolicyLimits) -> Result<Vec<ExternalPolicy>> {
    let mut out: Vec<ExternalPolicy> = Vec::new();
    for p in paths {
        let model = Model::trained_for(p)?;
        if out.iter().any(|e| e.gpu_model == Some(model.name)) {
            bail!(
                "two learned models for {} GPUs (the second: {}); give one per GPU model",
                model.name,
                p.display()
            );
        }
        out.push(from_file(p, model, limits, false)?);
    }
    Ok(out)
}
