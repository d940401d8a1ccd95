//! The policy network and its file: a two-layer perceptron from one observation
//! ([`crate::features`]) to one logit per action (keep, or each catalogue layout), evaluated
//! in plain Rust, and the one safetensors file that holds it: the weights as candle's `linear`
//! stores them (`l1.weight` `[hidden, inputs]`, `l1.bias`, `l2.*`, `out.*`, row-major `f32`)
//! and a `meta` tensor (`u8`) holding what the model was trained for ([`ModelMeta`], JSON).
//! Training (crate dynmig-train) writes the same file from its candle network.

use crate::catalogue::Catalogue;
use crate::features::input_len;
use anyhow::{anyhow, bail, Context, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::path::Path;

/// Version of the file format ([`ModelMeta::format`]). 2: the observation holds the
/// time-of-day forecast and queue age ([`crate::features::Outlook`]); a format-1 model is
/// refused (train it again).
pub const FORMAT: u32 = 2;

/// The largest model file read (64 MiB): a model of the default size is about 10 KiB, so a
/// larger file is not one, and is refused before it is read whole.
pub const MAX_FILE_BYTES: u64 = 64 << 20;

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

/// One fully connected layer, `y = W x + b`, as candle's `linear` holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct Dense {
    /// Weights `[outputs, inputs]`, row-major.
    pub weight: Vec<f32>,
    /// Biases `[outputs]`.
    pub bias: Vec<f32>,
    /// Input width.
    pub inputs: usize,
}

impl Dense {
    /// A layer of zeros from `inputs` to `outputs`.
    pub fn zeros(inputs: usize, outputs: usize) -> Self {
        Self {
            weight: vec![0.0; inputs * outputs],
            bias: vec![0.0; outputs],
            inputs,
        }
    }

    /// Output width.
    pub fn outputs(&self) -> usize {
        self.bias.len()
    }

    /// `W x + b` (`x` of length [`Dense::inputs`]) into `y`, then `tanh` of each if `tanh`.
    fn apply(&self, x: &[f32], tanh: bool, y: &mut Vec<f32>) {
        y.clear();
        y.extend(
            self.weight
                .chunks_exact(self.inputs.max(1))
                .zip(&self.bias)
                .map(|(row, b)| {
                    let v = dot(row, x) + b;
                    if tanh {
                        v.tanh()
                    } else {
                        v
                    }
                }),
        );
    }
}

/// `a . b` over their common length, in eight independent sums that the compiler vectorises
/// (with one running sum, each addition waits on the last: a call on 1,000 nodes took 1.2 to
/// 1.4 times candle's time, against 0.8 times with these).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    const LANES: usize = 8;
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f32; LANES];
    let (a8, b8) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: f32 = a8.remainder().iter().zip(b8.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in a8.zip(b8) {
        for i in 0..LANES {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// The network: `out(tanh(l2(tanh(l1(x)))))`.
#[derive(Debug, Clone, PartialEq)]
pub struct Network {
    /// First hidden layer.
    pub l1: Dense,
    /// Second hidden layer.
    pub l2: Dense,
    /// Output layer: one logit per action.
    pub out: Dense,
}

impl Network {
    /// The names of the network's tensors in its file (candle's `linear` names), sorted.
    pub const TENSORS: [&'static str; 6] = ["l1.bias", "l1.weight", "l2.bias", "l2.weight", "out.bias", "out.weight"];

    /// A network of zeros for `inputs` observations and `actions` logits with `hidden` units.
    pub fn zeros(inputs: usize, hidden: usize, actions: usize) -> Self {
        Self {
            l1: Dense::zeros(inputs, hidden),
            l2: Dense::zeros(hidden, hidden),
            out: Dense::zeros(hidden, actions),
        }
    }

    /// The weights training starts from, drawn from `seed`: Glorot uniform for matrices
    /// (Glorot and Bengio 2010, suited to tanh), biases 0, the output layer scaled by 0.1 so
    /// that training starts near uniform choices, and keep's bias 2 (keep 7.4 times likelier
    /// than each change: a random start that repartitions most nodes every decision never
    /// lets a day's jobs finish). The same seed gives the same weights.
    pub fn seeded(inputs: usize, hidden: usize, actions: usize, seed: u64) -> Self {
        let mut net = Self::zeros(inputs, hidden, actions);
        let mut rng = ChaCha8Rng::seed_from_u64(seed.wrapping_add(0x5eed));
        // Drawn in the order of the tensors' names (biases draw nothing), as training did
        // when it drew them into candle's variables: the same seed gives the same model file.
        for (name, layer) in [("l1", &mut net.l1), ("l2", &mut net.l2), ("out", &mut net.out)] {
            let (rows, cols) = (layer.outputs(), layer.inputs);
            let bound = (6.0 / (rows + cols) as f64).sqrt() * if name == "out" { 0.1 } else { 1.0 };
            for w in &mut layer.weight {
                *w = rng.gen_range(-bound..bound) as f32;
            }
        }
        if let Some(keep) = net.out.bias.first_mut() {
            *keep = 2.0;
        }
        net
    }

    /// Observation length.
    pub fn inputs(&self) -> usize {
        self.l1.inputs
    }

    /// Hidden units per layer.
    pub fn hidden(&self) -> usize {
        self.l1.outputs()
    }

    /// Number of actions (logits).
    pub fn actions(&self) -> usize {
        self.out.outputs()
    }

    /// The logits of one observation.
    ///
    /// # Errors
    /// `x` is not [`Network::inputs`] long.
    pub fn forward(&self, x: &[f32]) -> Result<Vec<f32>> {
        if x.len() != self.inputs() {
            bail!(
                "an observation of {} numbers for a network of {} inputs",
                x.len(),
                self.inputs()
            );
        }
        let (mut h1, mut h2, mut y) = (Vec::new(), Vec::new(), Vec::new());
        self.l1.apply(x, true, &mut h1);
        self.l2.apply(&h1, true, &mut h2);
        self.out.apply(&h2, false, &mut y);
        Ok(y)
    }

    /// Each tensor by name ([`Network::TENSORS`]), with its shape and values.
    pub fn tensors(&self) -> [(&'static str, Vec<usize>, &[f32]); 6] {
        let [b1, w1, b2, w2, bo, wo] = Self::TENSORS;
        let (l1, l2, out) = (&self.l1, &self.l2, &self.out);
        [
            (b1, vec![l1.outputs()], &l1.bias),
            (w1, vec![l1.outputs(), l1.inputs], &l1.weight),
            (b2, vec![l2.outputs()], &l2.bias),
            (w2, vec![l2.outputs(), l2.inputs], &l2.weight),
            (bo, vec![out.outputs()], &out.bias),
            (wo, vec![out.outputs(), out.inputs], &out.weight),
        ]
    }

    /// Sets the tensor `name` ([`Network::TENSORS`]) to `values` (row-major).
    ///
    /// # Errors
    /// No such tensor, or `values` of another length than it has.
    pub fn set(&mut self, name: &str, values: &[f32]) -> Result<()> {
        let (layer, part) = name.split_once('.').ok_or_else(|| anyhow!("no tensor {name}"))?;
        let layer = match layer {
            "l1" => &mut self.l1,
            "l2" => &mut self.l2,
            "out" => &mut self.out,
            _ => bail!("no tensor {name}"),
        };
        let to = match part {
            "weight" => &mut layer.weight,
            "bias" => &mut layer.bias,
            _ => bail!("no tensor {name}"),
        };
        if to.len() != values.len() {
            bail!("{name}: {} values, the network has {}", values.len(), to.len());
        }
        to.copy_from_slice(values);
        Ok(())
    }
}

/// A trained model: its network and what it was trained for.
#[derive(Debug, Clone)]
pub struct Model {
    /// The network.
    pub net: Network,
    /// What it was trained for.
    pub meta: ModelMeta,
    /// The catalogue of its GPU model.
    pub catalogue: Catalogue,
}

/// The bytes of `path`, at most [`MAX_FILE_BYTES`].
fn read_bounded(path: &Path) -> Result<Vec<u8>> {
    let file = std::fs::File::open(path)?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        bail!(
            "larger than {} MiB, far more than a model file (about 10 KiB)",
            MAX_FILE_BYTES >> 20
        );
    }
    Ok(bytes)
}

/// The `f32` values of a tensor of `shape` in a model file.
fn f32_tensor(file: &SafeTensors<'_>, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
    let t = file.tensor(name).map_err(|_| anyhow!("no tensor {name}"))?;
    if t.dtype() != Dtype::F32 || t.shape() != shape {
        bail!("{name} is {:?} {:?}; the meta says F32 {shape:?}", t.dtype(), t.shape());
    }
    Ok(t.data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

impl Model {
    /// A new, untrained model for `catalogue` with `hidden` units per layer, its weights
    /// drawn from `seed` ([`Network::seeded`]): where training starts, and a model for tests.
    pub fn fresh(catalogue: Catalogue, hidden: usize, trained_on: String, seed: u64) -> Self {
        let inputs = input_len(&catalogue);
        Self {
            net: Network::seeded(inputs, hidden, catalogue.layouts.len() + 1, seed),
            meta: ModelMeta {
                format: FORMAT,
                gpu_model: catalogue.model.name.to_string(),
                layouts: catalogue.names(),
                inputs,
                hidden,
                trained_on,
            },
            catalogue,
        }
    }

    /// Saves the model to `path` (one safetensors file, module docs).
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn save(&self, path: &Path) -> Result<()> {
        let json = serde_json::to_vec(&self.meta)?;
        let tensors = self.net.tensors();
        let bytes: Vec<Vec<u8>> = tensors
            .iter()
            .map(|(_, _, v)| v.iter().flat_map(|x| x.to_le_bytes()).collect())
            .collect();
        let mut views = Vec::with_capacity(tensors.len() + 1);
        for ((name, shape, _), b) in tensors.iter().zip(&bytes) {
            views.push((name.to_string(), TensorView::new(Dtype::F32, shape.clone(), b)?));
        }
        views.push(("meta".to_string(), TensorView::new(Dtype::U8, vec![json.len()], &json)?));
        safetensors::serialize_to_file(views, None, path).with_context(|| format!("writing {}", path.display()))
    }

    /// The GPU model a model file was trained for.
    ///
    /// # Errors
    /// The file is not a dynmig model, or names a GPU model this dynmig does not know.
    pub fn trained_for(path: &Path) -> Result<&'static dynmig_core::geometry::GpuModel> {
        let bytes = Self::read(path)?;
        let meta = Self::meta(path, &Self::parse(path, &bytes)?)?;
        dynmig_core::geometry::model_by_name(&meta.gpu_model).ok_or_else(|| {
            anyhow!(
                "{} was trained for {} GPUs, a GPU model this dynmig does not know ({})",
                path.display(),
                meta.gpu_model,
                meta.trained_on
            )
        })
    }

    /// The bytes of a model file.
    fn read(path: &Path) -> Result<Vec<u8>> {
        read_bounded(path).with_context(|| format!("reading model {}", path.display()))
    }

    /// The tensors of a model file's bytes.
    fn parse<'a>(path: &Path, bytes: &'a [u8]) -> Result<SafeTensors<'a>> {
        SafeTensors::deserialize(bytes).with_context(|| format!("reading model {}", path.display()))
    }

    /// The meta of a model file, of this dynmig's [`FORMAT`].
    fn meta(path: &Path, file: &SafeTensors<'_>) -> Result<ModelMeta> {
        let meta = file
            .tensor("meta")
            .map_err(|_| anyhow!("{} is not a dynmig model (no meta)", path.display()))?;
        if meta.dtype() != Dtype::U8 {
            bail!(
                "{} is not a dynmig model (its meta is {:?})",
                path.display(),
                meta.dtype()
            );
        }
        let meta: ModelMeta =
            serde_json::from_slice(meta.data()).with_context(|| format!("{}: bad meta", path.display()))?;
        if meta.format != FORMAT {
            bail!(
                "{}: model format {} (this dynmig reads {FORMAT}: train it again with `dynmig train`)",
                path.display(),
                meta.format
            );
        }
        Ok(meta)
    }

    /// Loads a model file for a cluster of `gpu_model` GPUs.
    ///
    /// # Errors
    /// The file is not a dynmig model (or is over [`MAX_FILE_BYTES`]), or was trained for
    /// another GPU model or catalogue (the message says what it was trained for).
    pub fn load(path: &Path, gpu_model: &'static dynmig_core::geometry::GpuModel) -> Result<Self> {
        let bytes = Self::read(path)?;
        let file = Self::parse(path, &bytes)?;
        let meta = Self::meta(path, &file)?;
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
        let mut net = Network::zeros(meta.inputs, meta.hidden, catalogue.layouts.len() + 1);
        let shapes: Vec<(&str, Vec<usize>)> = net.tensors().iter().map(|(n, s, _)| (*n, s.clone())).collect();
        for (name, shape) in shapes {
            let values = f32_tensor(&file, name, &shape)
                .with_context(|| format!("{}: weights do not match the meta", path.display()))?;
            net.set(name, &values)?;
        }
        Ok(Self { net, meta, catalogue })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_network_computes_the_two_tanh_layers_and_the_linear_output() {
        // 2 inputs, 2 hidden, 2 actions, with weights small enough to check by hand.
        let mut net = Network::zeros(2, 2, 2);
        net.set("l1.weight", &[1.0, 0.0, 0.0, -1.0]).unwrap();
        net.set("l1.bias", &[0.0, 0.5]).unwrap();
        net.set("l2.weight", &[1.0, 1.0, 0.0, 2.0]).unwrap();
        net.set("out.weight", &[1.0, 0.0, 0.0, 1.0]).unwrap();
        net.set("out.bias", &[0.25, -0.25]).unwrap();
        let x = [0.3f32, 0.2];
        let h1 = [0.3f32.tanh(), (0.5f32 - 0.2).tanh()];
        let h2 = [(h1[0] + h1[1]).tanh(), (2.0 * h1[1]).tanh()];
        let y = net.forward(&x).unwrap();
        assert!((y[0] - (h2[0] + 0.25)).abs() < 1e-6, "{y:?}");
        assert!((y[1] - (h2[1] - 0.25)).abs() < 1e-6, "{y:?}");
        assert!(
            net.forward(&[0.0; 3]).is_err(),
            "a wrong width is an error, not a panic"
        );
        assert!(net.set("l3.weight", &[]).is_err() && net.set("l1.weight", &[1.0]).is_err());
    }

    #[test]
    fn a_seed_gives_the_same_weights_glorot_bounded_with_keep_favoured() {
        let (a, b, c) = (
            Network::seeded(35, 32, 7, 1),
            Network::seeded(35, 32, 7, 1),
            Network::seeded(35, 32, 7, 2),
        );
        assert_eq!(a, b);
        assert_ne!(a, c);
        let bound = (6.0f32 / (32.0 + 35.0)).sqrt();
        assert!(a.l1.weight.iter().all(|w| w.abs() < bound));
        assert!(a.l1.weight.iter().any(|w| w.abs() > bound / 2.0), "not all near 0");
        assert!(a.out.weight.iter().all(|w| w.abs() < 0.1 * (6.0f32 / 39.0).sqrt()));
        assert_eq!(a.out.bias, [2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
        assert!(a.l1.bias.iter().chain(&a.l2.bias).all(|b| *b == 0.0));
    }
}
