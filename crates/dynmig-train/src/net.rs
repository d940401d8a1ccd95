//! The policy network in candle (a Rust tensor library with autodiff and optimisers), for
//! training only: the same two-layer perceptron as the runtime's
//! [`dynmig_learn::net::Network`], its weights in a candle [`VarMap`] under the same names
//! (`l1.weight`, `l1.bias`, ...), copied from the runtime's model where training starts
//! ([`to_candle`]) and back into it after each update ([`copy_to_runtime`]), so that the
//! rollouts run the runtime's network and the file saved is the runtime's
//! ([`dynmig_learn::Model::save`]).

use anyhow::{anyhow, Result};
use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{linear, Linear, VarBuilder, VarMap};
use dynmig_learn::net::Network;
use dynmig_learn::Model;

/// The network in candle.
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

/// The candle network of `model`'s weights: the variables (for the optimiser) and the
/// network that reads them.
///
/// # Errors
/// candle failed to make the variables.
pub fn to_candle(model: &Model) -> Result<(VarMap, PolicyNet)> {
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    let net = PolicyNet::new(&vb, model.net.inputs(), model.net.hidden(), model.net.actions())?;
    {
        let data = varmap.data().lock().map_err(|_| anyhow!("weights lock poisoned"))?;
        for (name, shape, values) in model.net.tensors() {
            let var = data.get(name).ok_or_else(|| anyhow!("no variable {name}"))?;
            var.set(&Tensor::from_slice(values, shape, &Device::Cpu)?)?;
        }
    }
    Ok((varmap, net))
}

/// Copies the weights of `varmap` (made by [`to_candle`]) into `net`.
///
/// # Errors
/// A variable `net` does not have, or of another size.
pub fn copy_to_runtime(varmap: &VarMap, net: &mut Network) -> Result<()> {
    let data = varmap.data().lock().map_err(|_| anyhow!("weights lock poisoned"))?;
    for name in Network::TENSORS {
        let var = data.get(name).ok_or_else(|| anyhow!("no variable {name}"))?;
        net.set(name, &var.as_tensor().flatten_all()?.to_vec1::<f32>()?)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use dynmig_core::geometry::A100_40GB;
    use dynmig_learn::catalogue::Catalogue;

    #[test]
    fn weights_go_to_candle_and_back_unchanged() {
        let model = Model::fresh(Catalogue::for_model(&A100_40GB), 8, "test".into(), 3);
        let (varmap, _) = to_candle(&model).unwrap();
        let mut back = Network::zeros(model.net.inputs(), 8, model.net.actions());
        copy_to_runtime(&varmap, &mut back).unwrap();
        assert_eq!(back, model.net);
        let mut other = Network::zeros(model.net.inputs() + 1, 8, model.net.actions());
        assert!(
            copy_to_runtime(&varmap, &mut other).is_err(),
            "another shape is refused"
        );
    }
}
