//! The policy network and its file: a two-layer perceptron from one observation
//! ([`crate::features`]) to one logit per action (keep, or each catalogue layout), in candle
//! (a Rust tensor library with autodiff and optimisers), saved as one safetensors file whose
//! `meta` tensor holds what the model was trained for ([`ModelMeta`], JSON).

use crate::catalogue::Catalogue;
use crate::features::input_len;
use anyhow::{anyhow, bail, Context, Result};
use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{linear, Linear, VarBuilder, VarMap};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;

/// Version of the file format ([`ModelMeta::format`]). 2: the observation holds the
/// time-of-day forecast and queue age ([`crate::features::Outlook`]); a format-1 model is
/// refused (train it again).
pub const FORMAT: u32 = 2;

/// What a model was trained for, kept in its file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelMeta {
    /// [`FORMAT`].
    pub format: u32,
    /// GPU model name (`A100-40GB`).
    pub gpu_model: String,
    /// The catalogue's layouts, in action order after keep.
    pub layouts: Vec<String>,
    /// Observation length.
    pub inputs: usize,
    /// Hidden units per layer.
    pub hidden: usize,
    /// How it was trained (workload, days, seed, iterations), for people.
    pub trained_on: String,
}

/// The network.
#[derive(Debug, Clone)]
pub struct PolicyNet {
    l1: Linear,
    l2: Linear,
    out: Linear,
}

impl PolicyNet {
    /// A network for `inputs` observations and `actions` logits with `hidden` units, its
    /// weights in `vb` (new ones are initialised as candle's `linear` does).
    ///
    /// # Errors
    /// Weights of the wrong shape in `vb`.
    pub fn new(vb: &VarBuilder, inputs: usize, hidden: usize, actions: usize) -> Result<Self> {
        Ok(Self {
            l1: linear(inputs, hidden, vb.pp("l1"))?,
            l2: linear(hidden, hidden, vb.pp("l2"))?,
            out: linear(hidden, actions, vb.pp("out"))?,
        })
    }

    /// Logits `[n, actions]` for observations `[n, inputs]`.
    ///
    /// # Errors
    /// A tensor of the wrong shape.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.l1.forward(x)?.tanh()?;
        let h = self.l2.forward(&h)?.tanh()?;
        Ok(self.out.forward(&h)?)
    }
}

/// A trained model: its network and what it was trained for.
#[derive(Debug, Clone)]
pub struct Model {
    /// The network.
    pub net: PolicyNet,
    /// What it was trained for.
    pub meta: ModelMeta,
    /// The catalogue of its GPU model.
    pub catalogue: Catalogue,
}

impl Model {
    /// A new, untrained model for `catalogue` (weights from `varmap`).
    ///
    /// # Errors
    /// candle failed to make the weights.
    pub fn fresh(catalogue: Catalogue, hidden: usize, varmap: &VarMap, trained_on: String) -> Result<Self> {
        let vb = VarBuilder::from_varmap(varmap, DType::F32, &Device::Cpu);
        let inputs = input_len(&catalogue);
        let net = PolicyNet::new(&vb, inputs, hidden, catalogue.layouts.len() + 1)?;
        Ok(Self {
            net,
            meta: ModelMeta {
                format: FORMAT,
                gpu_model: catalogue.model.name.to_string(),
                layouts: catalogue.names(),
                inputs,
                hidden,
                trained_on,
            },
            catalogue,
        })
    }

    /// Saves the weights of `varmap` and `meta` to `path`.
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn save(varmap: &VarMap, meta: &ModelMeta, path: &Path) -> Result<()> {
        let mut tensors: HashMap<String, Tensor> = varmap
            .data()
            .lock()
            .map_err(|_| anyhow!("weights lock poisoned"))?
            .iter()
            .map(|(k, v)| (k.clone(), v.as_tensor().clone()))
            .collect();
        let json = serde_json::to_vec(meta)?;
        let n = json.len();
        tensors.insert("meta".into(), Tensor::from_vec(json, n, &Device::Cpu)?);
        candle_core::safetensors::save(&tensors, path).with_context(|| format!("writing {}", path.display()))
    }

    /// The GPU model a model file was trained for.
    ///
    /// # Errors
    /// The file is not a dynmig model, or names a GPU model this dynmig does not know.
    pub fn trained_for(path: &Path) -> Result<&'static dynmig_core::geometry::GpuModel> {
        let meta = Self::read(path)?.1;
        dynmig_core::geometry::model_by_name(&meta.gpu_model).ok_or_else(|| {
            anyhow!(
                "{} was trained for {} GPUs, a GPU model this dynmig does not know ({})",
                path.display(),
                meta.gpu_model,
                meta.trained_on
            )
        })
    }

    /// The tensors and meta of a model file.
    fn read(path: &Path) -> Result<(HashMap<String, Tensor>, ModelMeta)> {
        let mut tensors = candle_core::safetensors::load(path, &Device::Cpu)
            .with_context(|| format!("reading model {}", path.display()))?;
        let meta = tensors
            .remove("meta")
            .ok_or_else(|| anyhow!("{} is not a dynmig model (no meta)", path.display()))?;
        let meta: ModelMeta =
            serde_json::from_slice(&meta.to_vec1::<u8>()?).with_context(|| format!("{}: bad meta", path.display()))?;
        if meta.format != FORMAT {
            bail!(
                "{}: model format {} (this dynmig reads {FORMAT}: train it again with `dynmig train`)",
                path.display(),
                meta.format
            );
        }
        Ok((tensors, meta))
    }

    /// Loads a model file for a cluster of `gpu_model` GPUs.
    ///
    /// # Errors
    /// The file is not a dynmig model, or was trained for another GPU model or catalogue (the
    /// message says what it was trained for).
    pub fn load(path: &Path, gpu_model: &'static dynmig_core::geometry::GpuModel) -> Result<Self> {
        let (tensors, meta) = Self::read(path)?;
        let catalogue = Catalogue::for_model(gpu_model);
        if meta.gpu_model != gpu_model.name || meta.layouts != catalogue.names() || meta.inputs != input_len(&catalogue)
        {
            bail!(
                "{} was trained for {} GPUs with layouts {} ({}); this cluster has {} GPUs with layouts {}",
                path.display(),
                meta.gpu_model,
                meta.layouts.join(", "),
                meta.trained_on,
                gpu_model.name,
                catalogue.names().join(", ")
            );
        }
        let vb = VarBuilder::from_tensors(tensors, DType::F32, &Device::Cpu);
        let net = PolicyNet::new(&vb, meta.inputs, meta.hidden, catalogue.layouts.len() + 1)
            .with_context(|| format!("{}: weights do not match the meta", path.display()))?;
        Ok(Self { net, meta, catalogue })
    }
}
