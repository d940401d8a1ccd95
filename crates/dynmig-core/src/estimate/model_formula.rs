// One piece: the formula's terms and their inputs' types, each term beside its public source; its tests are in model_formula/.
//! GPU memory of a transformer job from its description: parameters, data type, phase,
//! batch size and sequence length (`--mig-model-params=7B --mig-dtype=bf16 --mig-phase=train
//! --mig-batch=4 --mig-seq=2048`), and optionally the optimizer, the attention, the
//! vocabulary, grouped-query heads and a LoRA rank ([`ModelOptions`]).
//!
//! [`breakdown`] adds up, in bytes (docs/estimator.md has the derivation):
//!
//! | term | train | infer | source |
//! |---|---|---|---|
//! | weights | `P x w` (+ LoRA adapters in fp32) | `P x w` | `w` = bytes of the dtype: fp32 4, fp16/bf16 2, fp8/int8 1, int4 0.5 (fp8 training stores bf16: [`Dtype::Fp8`]) |
//! | gradients | `T x w` (LoRA: `T x 4`) | - | one gradient per trained weight `T` (all `P`, or LoRA's `4 L h r`: Hu et al. 2022, sections 4 and 7.1) |
//! | optimizer | `T x (m + o)`: `m` = 4 fp32 master weights in 16-bit training, `o` = 8 AdamW, 4 SGD with momentum, 2 8-bit Adam | - | Rajbhandari et al., "ZeRO", SC 2020, section 3.1 (2+2+12 bytes for mixed-precision Adam); Dettmers et al., "8-bit Optimizers via Block-wise Quantization", ICLR 2022 |
//! | activations | `L x s b h (34 + attention) x w/2`; attention: fused `4 a s b` (fp32 log-sum-exp), eager `5 a s^2 b` | `8 s b h x w` (one layer's MLP transients; eager adds `2 a s^2 b w`) | Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models", 2022, eq. 1; Dao et al., "FlashAttention", NeurIPS 2022, Algorithm 2 |
//! | KV cache | - | `2 x L x h x (kv/a) x s x b x w` | two tensors (K, V) per layer and token; grouped-query attention keeps `kv` of `a` heads (Ainslie et al., "GQA", EMNLP 2023) |
//! | logits | `b s V (w + 8)` | `b s V w` | the output layer over the vocabulary `V`; training upcasts them to fp32 for the loss and keeps the fp32 log-softmax and its gradient (transformers' `ForCausalLMLoss`, PyTorch `cross_entropy`) |
//! | CUDA context | `C` | `C` | per CUDA major version ([`CUDA_CONTEXT_BY_MAJOR`]: 11 1,343 MiB, 12 and 13 621 MiB; `estimator.cuda_context`, default CUDA 12's) | Hugging Face "Efficient training on a single GPU" (V100, CUDA 11.2); measured with PyTorch 2.11 and CUDA 13.0 on an H100 ([`super::measured`]) |
//!
//! `P` parameters, `w` bytes per value, `L` layers, `h` hidden size, `a` attention heads,
//! `s` sequence length, `b` batch size. Training with `int8`/`int4` is refused; fp8 is for
//! GPU models with FP8 Tensor Cores only (checked by [`crate::hints`] against the cluster).
//!
//! The shape (`L`, `h`, `a`) is not given by the user: [`shape_for`] takes the published
//! shape with the nearest parameter count (GPT-3, Brown et al. 2020, Table 2.1; LLaMA,
//! Touvron et al. 2023, Table 2) and scales its hidden size by `sqrt(P / P_ref)`, since a
//! transformer has about `12 L h^2` parameters (Kaplan et al. 2020, section 2.1). Heads have
//! 64 dimensions below a hidden size of 2560 and 128 from there (as in GPT-3 and LLaMA).

use crate::size::MIB;
use std::fmt;

/// Fewest parameters [`parse_params`] accepts: 1 million (smaller models need no estimate).
pub const MIN_PARAMS: u64 = 1_000_000;
/// Most parameters [`parse_params`] accepts: 2 trillion (no single GPU holds more).
pub const MAX_PARAMS: u64 = 2_000_000_000_000;
/// Largest `--mig-batch`.
pub const MAX_BATCH: u32 = 65_536;
/// Largest `--mig-seq` (1 Mi tokens).
pub const MAX_SEQ: u32 = 1 << 20;
/// Batch size assumed when `--mig-batch` is not given.
pub const DEFAULT_BATCH: u32 = 1;
/// Sequence length assumed when `--mig-seq` is not given (GPT-3's context, Table 2.1).
pub const DEFAULT_SEQ: u32 = 2048;
/// GPU memory a PyTorch process holds before its first tensor (CUDA context, kernels, cuBLAS
/// handles), bytes, per CUDA major version (`estimator.cuda_context = "cuda11"`, ...):
/// - 11: 1,343 MiB, Hugging Face's "Efficient training on a single GPU" guide (Tesla V100,
///   CUDA 11.2, `torch.ones((1, 1)).to("cuda")` then NVML used memory), before CUDA's lazy
///   module loading (CUDA 11.7; PyTorch turns it on by default since 1.13);
/// - 13: 621 MiB (650,969,088 bytes), measured by dynmig on an H100 with PyTorch 2.11 and
///   CUDA 13.0 ([`super::measured::MEASURED_CUDA_CONTEXT_BYTES`]);
/// - 12: no published measurement was found; it takes 13's value, as both load modules
///   lazily.
pub const CUDA_CONTEXT_BY_MAJOR: [(u32, u64); 3] = [(11, 1343 * MIB), (12, 650_969_088), (13, 650_969_088)];
/// The CUDA context the estimator assumes unless `estimator.cuda_context` says otherwise:
/// CUDA 12's ([`CUDA_CONTEXT_BY_MAJOR`]).
pub const DEFAULT_CUDA_CONTEXT_BYTES: u64 = 650_969_088;

/// The CUDA context of CUDA major version `major` ([`CUDA_CONTEXT_BY_MAJOR`]); `None` for a
/// version the table does not hold.
pub fn cuda_context_for_major(major: u32) -> Option<u64> {
    CUDA_CONTEXT_BY_MAJOR.iter().find(|(m, _)| *m == major).map(|(_, b)| *b)
}

/// Number format of weights and activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// 32-bit float.
    Fp32,
    /// 16-bit float (IEEE half).
    Fp16,
    /// bfloat16.
    Bf16,
    /// 8-bit floating point (E4M3 or E5M2: 1 sign bit, 4 or 5 exponent bits, 3 or 2 mantissa
    /// bits), 1 byte per weight; only on GPU models with FP8 Tensor Cores
    /// ([`crate::geometry::GpuModel::fp8`]: Hopper and later). Source: NVIDIA Transformer
    /// Engine, "Using FP8 with Transformer Engine"
    /// (<https://docs.nvidia.com/deeplearning/transformer-engine/user-guide/examples/fp8_primer.html>).
    /// Inference keeps 16-bit activations and KV cache (as the integer formats; an FP8 KV
    /// cache is a serving option, not assumed). Training counts as bf16 training
    /// ([`Dtype::stored_for_training`]): Transformer Engine's `fp8_autocast` casts the inputs
    /// of the matrix multiplies to FP8 while the parameters, gradients and Adam state stay in
    /// their higher-precision formats.
    Fp8,
    /// 8-bit integer weights (inference only).
    Int8,
    /// 4-bit integer weights (inference only); activations and KV cache stay 16-bit.
    Int4,
}

impl Dtype {
    /// Every dtype, in the order messages list them.
    pub const ALL: [Dtype; 6] = [
        Dtype::Fp32,
        Dtype::Fp16,
        Dtype::Bf16,
        Dtype::Fp8,
        Dtype::Int8,
        Dtype::Int4,
    ];

    /// Reads `fp32`, `float32`, `fp16`, `float16`, `half`, `bf16`, `bfloat16`, `fp8`,
    /// `float8`, `int8`, `int4` (any case).
    pub fn parse(s: &str) -> Option<Dtype> {
        Some(match s.trim().to_ascii_lowercase().as_str() {
            "fp32" | "float32" | "float" => Dtype::Fp32,
            "fp16" | "float16" | "half" => Dtype::Fp16,
            "bf16" | "bfloat16" => Dtype::Bf16,
            "fp8" | "float8" => Dtype::Fp8,
            "int8" => Dtype::Int8,
            "int4" => Dtype::Int4,
            _ => return None,
        })
    }

    /// Whether the format needs FP8 Tensor Cores ([`crate::geometry::GpuModel::fp8`]).
    pub fn needs_fp8(self) -> bool {
        self == Dtype::Fp8
    }

    /// Whether the format can be trained in (int8 and int4 are for inference only).
    pub fn trainable(self) -> bool {
        !matches!(self, Dtype::Int8 | Dtype::Int4)
    }

    /// The format whose bytes training in `self` keeps: fp8 training keeps bf16 weights and
    /// gradients (FP8 is the matrix multiplies' input format only, per Transformer Engine's
    /// FP8 primer); every other format keeps its own.
    pub fn stored_for_training(self) -> Dtype {
        match self {
            Dtype::Fp8 => Dtype::Bf16,
            d => d,
        }
    }

    /// Bytes of one weight, in tenths of a byte: fp32 4, fp16/bf16 2, fp8 and int8 1 (8 bits),
    /// int4 0.5.
    fn weight_tenths(self) -> u64 {
        match self {
            Dtype::Fp32 => 40,
            Dtype::Fp16 | Dtype::Bf16 => 20,
            Dtype::Fp8 | Dtype::Int8 => 10,
            Dtype::Int4 => 5,
        }
    }

    /// Bytes of one activation or KV-cache value (16-bit for fp8 and the integer formats).
    pub fn activation_bytes(self) -> u64 {
        match self {
            Dtype::Fp32 => 4,
            _ => 2,
        }
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dtype::Fp32 => "fp32",
            Dtype::Fp16 => "fp16",
            Dtype::Bf16 => "bf16",
            Dtype::Fp8 => "fp8",
            Dtype::Int8 => "int8",
            Dtype::Int4 => "int4",
        })
    }
}

/// What the job does with the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Training or full fine-tuning with Adam.
    Train,
    /// Inference (generation with a KV cache).
    Infer,
}

impl Phase {
    /// Reads `train`/`training`/`finetune` or `infer`/`inference` (any case).
    pub fn parse(s: &str) -> Option<Phase> {
        match s.trim().to_ascii_lowercase().as_str() {
            "train" | "training" | "finetune" | "fine-tune" => Some(Phase::Train),
            "infer" | "inference" => Some(Phase::Infer),
            _ => None,
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Train => "train",
            Phase::Infer => "infer",
        })
    }
}

/// A job's model, as the hints describe it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ModelSpec {
    /// Parameters.
    pub params: u64,
    /// Weights' number format.
    pub dtype: Dtype,
    /// Training or inference.
    pub phase: Phase,
    /// Sequences per step.
    pub batch: u32,
    /// Tokens per sequence (training) or context length (inference).
    pub seq: u32,
    /// The rest of the description, each with its default ([`ModelOptions::DEFAULT`]).
    pub options: ModelOptions,
}

/// The optimizer of a training job (`--mig-optimizer`): its state in bytes per trained
/// parameter, besides the fp32 master weights of 16-bit training.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Optimizer {
    /// AdamW (Loshchilov and Hutter, "Decoupled Weight Decay Regularization", ICLR 2019), as
    /// `torch.optim.AdamW` keeps it: two fp32 moments (`exp_avg`, `exp_avg_sq`), 8 bytes.
    AdamW,
    /// SGD with momentum (`torch.optim.SGD(momentum>0)`): one fp32 momentum buffer, 4 bytes.
    Sgd,
    /// 8-bit Adam (Dettmers et al., "8-bit Optimizers via Block-wise Quantization", ICLR
    /// 2022; bitsandbytes `Adam8bit`): two 8-bit moments, 2 bytes (the block-wise
    /// quantisation constants, one fp32 per 2048 values, are left out: under 0.2%).
    Adam8bit,
    /// No optimizer state on the GPU (`--mig-optimizer=none`): the optimizer runs elsewhere
    /// (DeepSpeed ZeRO-Offload keeps it and the fp32 master weights in host memory, Ren et
    /// al., "ZeRO-Offload", USENIX ATC 2021) or the job only computes gradients. Neither
    /// moments nor master weights are counted.
    None,
}

impl Optimizer {
    /// Every optimizer, in the order messages list them.
    pub const ALL: [Optimizer; 4] = [Optimizer::AdamW, Optimizer::Sgd, Optimizer::Adam8bit, Optimizer::None];

    /// Reads `adamw`/`adam`, `sgd`, `adam8bit`/`8bit-adam`, `none` (any case).
    pub fn parse(s: &str) -> Option<Optimizer> {
        Some(match s.trim().to_ascii_lowercase().as_str() {
            "adamw" | "adam" => Optimizer::AdamW,
            "sgd" => Optimizer::Sgd,
            "adam8bit" | "8bit-adam" | "adamw8bit" => Optimizer::Adam8bit,
            "none" => Optimizer::None,
            _ => return None,
        })
    }

    /// Optimizer state per trained parameter, bytes.
    pub fn state_bytes(self) -> u64 {
        match self {
            Optimizer::AdamW => 8,
            Optimizer::Sgd => 4,
            Optimizer::Adam8bit => 2,
            Optimizer::None => 0,
        }
    }
}

impl fmt::Display for Optimizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Optimizer::AdamW => "adamw",
            Optimizer::Sgd => "sgd",
            Optimizer::Adam8bit => "adam8bit",
            Optimizer::None => "none",
        })
    }
}

/// How attention is computed (`--mig-attention`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Attention {
    /// Fused attention (FlashAttention, Dao et al., NeurIPS 2022; PyTorch
    /// `scaled_dot_product_attention`, the default of Hugging Face transformers): the
    /// `a x s x s` scores are never stored; the backward keeps the softmax's log-sum-exp, one
    /// fp32 value per head and token (FlashAttention, Algorithm 2).
    Fused,
    /// Eager attention (`attn_implementation="eager"`): scores, softmax output and dropout
    /// mask are kept, `5 a s^2 b` bytes per layer at 16 bits (Korthikanti et al. 2022, eq. 1).
    Eager,
}

impl Attention {
    /// Reads `fused`/`sdpa`/`flash` or `eager` (any case).
    pub fn parse(s: &str) -> Option<Attention> {
        match s.trim().to_ascii_lowercase().as_str() {
            "fused" | "sdpa" | "flash" | "flash-attention" => Some(Attention::Fused),
            "eager" => Some(Attention::Eager),
            _ => None,
        }
    }
}

impl fmt::Display for Attention {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Attention::Fused => "fused",
            Attention::Eager => "eager",
        })
    }
}

/// Vocabulary assumed when `--mig-vocab` is not given: 32,000 tokens (the LLaMA and Llama 2
/// tokenizer, Touvron et al. 2023; Mistral 7B's too).
pub const DEFAULT_VOCAB: u32 = 32_000;
/// Largest `--mig-vocab` (1 Mi tokens; Llama 3 has 128,256, Gemma 256,000).
pub const MAX_VOCAB: u32 = 1 << 20;
/// Largest `--mig-kv-heads` and `--mig-lora-rank`.
pub const MAX_HEADS_OR_RANK: u32 = 65_536;

/// The description beyond parameters, format, phase, batch and sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ModelOptions {
    /// `--mig-optimizer` (training).
    pub optimizer: Optimizer,
    /// `--mig-attention`.
    pub attention: Attention,
    /// `--mig-vocab`: tokens of the vocabulary (the logits' width).
    pub vocab: u32,
    /// `--mig-kv-heads`: key/value heads (grouped-query attention, Ainslie et al., "GQA",
    /// EMNLP 2023); `None`: as many as attention heads.
    pub kv_heads: Option<u32>,
    /// `--mig-lora-rank`: LoRA fine-tuning of rank r (Hu et al., "LoRA", ICLR 2022); `None`:
    /// every weight is trained.
    pub lora_rank: Option<u32>,
    /// `--mig-act-per-sample`: bytes of activations one sample (image, sequence) keeps, for a
    /// model that is not a transformer (a CNN); `None`: a transformer of [`shape_for`]'s
    /// shape. Given, the activations are `b x` this, and the transformer's terms (attention,
    /// KV cache, logits) are not counted.
    pub act_per_sample: Option<u64>,
}

impl ModelOptions {
    /// AdamW, fused attention, a 32,000-token vocabulary, no grouped-query attention, no LoRA.
    pub const DEFAULT: ModelOptions = ModelOptions {
        optimizer: Optimizer::AdamW,
        attention: Attention::Fused,
        vocab: DEFAULT_VOCAB,
        kv_heads: None,
        lora_rank: None,
        act_per_sample: None,
    };
}

impl Default for ModelOptions {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Layers, hidden size and attention heads of a transformer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Transformer layers `L`.
    pub layers: u64,
    /// Hidden size `h`.
    pub hidden: u64,
    /// Attention heads `a`.
    pub heads: u64,
}

/// Published shapes: (parameters, layers, hidden). GPT-3 (Brown et al. 2020, Table 2.1) and
/// LLaMA (Touvron et al. 2023, Table 2).
const SHAPES: [(u64, u64, u64); 12] = [
    (125_000_000, 12, 768),
    (350_000_000, 24, 1024),
    (760_000_000, 24, 1536),
    (1_300_000_000, 24, 2048),
    (2_700_000_000, 32, 2560),
    (6_700_000_000, 32, 4096),
    (13_000_000_000, 40, 5120),
    (32_500_000_000, 60, 6656),
    (65_200_000_000, 80, 8192),
    (175_000_000_000, 96, 12288),
    (540_000_000_000, 118, 18432),
    (1_000_000_000_000, 128, 25600),
];

/// The shape of a transformer with `params` parameters: the published shape with the nearest
/// parameter count (log scale), its hidden size scaled by `sqrt(params / ref)`.
///
/// ```
/// use dynmig_core::estimate::model_formula::shape_for;
/// let s = shape_for(6_700_000_000);
/// assert_eq!((s.layers, s.hidden, s.heads), (32, 4096, 32));
/// ```
pub fn shape_for(params: u64) -> Shape {
    let p = params.max(1) as f64;
    let &(rp, layers, rh) = SHAPES
        .iter()
        .min_by(|a, b| {
            let da = (p / a.0 as f64).ln().abs();
            let db = (p / b.0 as f64).ln().abs();
            da.total_cmp(&db)
        })
        .expect("table is not empty");
    let hidden = ((rh as f64) * (p / rp as f64).sqrt()).round().max(64.0) as u64;
    let head_dim = if hidden < 2560 { 64 } else { 128 };
    Shape {
        layers,
        hidden,
        heads: (hidden / head_dim).max(1),
    }
}

/// The terms of a memory estimate, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Breakdown {
    /// Model weights.
    pub weights: u64,
    /// Gradients (training).
    pub gradients: u64,
    /// Optimizer state: Adam moments, and fp32 master weights for 16-bit training.
    pub optimizer: u64,
    /// Activations kept for the backward pass (training) or one layer's transients (inference).
    pub activations: u64,
    /// Keys and values of every layer (inference).
    pub kv_cache: u64,
    /// The output layer's logits over the vocabulary.
    pub logits: u64,
    /// CUDA context and kernels.
    pub cuda_context: u64,
}

impl Breakdown {
    /// The sum of the terms (saturating).
    pub fn total(&self) -> u64 {
        [
            self.weights,
            self.gradients,
            self.optimizer,
            self.activations,
            self.kv_cache,
            self.logits,
            self.cuda_context,
        ]
        .iter()
        .fold(0u64, |a, b| a.saturating_add(*b))
    }
}

/// Why a model description cannot be used. Display gives the reason and what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// Training with an integer format.
    #[error("training in {0} is not supported; train in fp32, fp16 or bf16")]
    IntegerTraining(Dtype),
    /// More key/value heads than the model's shape has attention heads, or a count that does
    /// not divide them.
    #[error("{kv_heads} key/value heads do not fit the {heads} attention heads of this model's shape; give a divisor of {heads}")]
    KvHeads {
        /// `--mig-kv-heads`.
        kv_heads: u32,
        /// The shape's attention heads ([`shape_for`]).
        heads: u64,
    },
}

/// The memory a job described by `spec` needs. See the [module docs](self) for the formula.
///
/// # Errors
/// [`ModelError::IntegerTraining`] for `int8`/`int4` with [`Phase::Train`];
/// [`ModelError::KvHeads`] for more key/value heads than the shape has attention heads, or a
/// count that does not divide them.
pub fn breakdown(spec: &ModelSpec, cuda_context: u64) -> Result<Breakdown, ModelError> {
    breakdown_with(spec, cuda_context, &ActivationCoefficients::FITTED)
}

/// Bytes of activations a training job keeps per layer and per `s x b x h` (token times
/// hidden unit) at 16 bits, besides the attention scores: Korthikanti et al. 2022, eq. 1,
/// derive 34 for Megatron's layer with eager attention. dynmig fits it once per attention
/// kind on published measurements (docs/estimator-data/split.md); [`Self::FITTED`] holds
/// the values the estimator uses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ActivationCoefficients {
    /// With fused attention ([`Attention::Fused`]).
    pub fused: f64,
    /// With eager attention ([`Attention::Eager`]).
    pub eager: f64,
}

impl ActivationCoefficients {
    /// Korthikanti et al.'s 34 for both kinds, as derived (before any fit).
    pub const DERIVED: ActivationCoefficients = ActivationCoefficients {
        fused: 34.0,
        eager: 34.0,
    };
    /// The values fitted on the fit half of the published measurements
    /// (docs/estimator-data/split.md, step 2; docs/results/estimator-fit-2026-11-29.md):
    /// fused 39 (5 rows, Pythia-410m with SDPA), eager 12.5 (27 rows, OPT-350m and
    /// Pythia-410m eager; the `5 a s^2 b` scores keep their derived factor, so the fit lowers
    /// the rest).
    pub const FITTED: ActivationCoefficients = ActivationCoefficients {
        fused: 39.0,
        eager: 12.5,
    };

    /// The coefficient for `attention`.
    pub fn for_attention(&self, attention: Attention) -> f64 {
        match attention {
            Attention::Fused => self.fused,
            Attention::Eager => self.eager,
        }
    }
}

/// [`breakdown`] with the activation coefficients given (the fit tries candidates).
///
/// # Errors
/// As [`breakdown`].
pub fn breakdown_with(
    spec: &ModelSpec,
    cuda_context: u64,
    coefficients: &ActivationCoefficients,
) -> Result<Breakdown, ModelError> {
    let p = u128::from(spec.params);
    let w = u128::from(spec.dtype.activation_bytes());
    let opts = &spec.options;
    let shape = shape_for(spec.params);
    let (l, h, a) = (
        u128::from(shape.layers),
        u128::from(shape.hidden),
        u128::from(shape.heads),
    );
    let (s, b) = (u128::from(spec.seq), u128::from(spec.batch));
    let v = u128::from(opts.vocab);
    // Grouped-query attention keeps kv_heads of the a heads' keys and values; checked in
    // every phase, so that a bad count is refused however the job runs.
    let kv = u128::from(kv_heads_for(&shape, opts.kv_heads)?);
    // What is stored: fp8 training keeps bf16 weights and gradients (Dtype::Fp8).
    let stored = match spec.phase {
        Phase::Train => spec.dtype.stored_for_training(),
        Phase::Infer => spec.dtype,
    };
    let weights = p * u128::from(stored.weight_tenths()) / 10;
    let clamp = |v: u128| u64::try_from(v).unwrap_or(u64::MAX);
    let mut out = Breakdown {
        weights: clamp(weights),
        cuda_context,
        ..Breakdown::default()
    };
    match spec.phase {
        Phase::Train => {
            if !spec.dtype.trainable() {
                return Err(ModelError::IntegerTraining(spec.dtype));
            }
            // The parameters trained: all, or LoRA's adapters (Hu et al. 2022, section 4:
            // two matrices of h x r and r x h on the query and value projections of every
            // layer, section 7.1), 4 L h r.
            let trained = match opts.lora_rank {
                None => p,
                Some(r) => 4 * l * h * u128::from(r),
            };
            // Gradients in the stored format; 16-bit training keeps fp32 master weights
            // (ZeRO, Rajbhandari et al. 2020, section 3.1: 2 + 2 + 12 bytes per parameter
            // with Adam); a LoRA job's adapters are fp32 (PEFT keeps them so under
            // autocast), the frozen weights get neither gradient nor state.
            let (grad_bytes, master) = match (opts.lora_rank, stored) {
                (Some(_), _) | (None, Dtype::Fp32) => (4, 0),
                (None, _) if opts.optimizer == Optimizer::None => (u128::from(stored.weight_tenths()) / 10, 0),
                (None, _) => (u128::from(stored.weight_tenths()) / 10, 4),
            };
            out.gradients = clamp(trained * grad_bytes);
            out.optimizer = clamp(trained * (master + u128::from(opts.optimizer.state_bytes())));
            if opts.lora_rank.is_some() {
                out.weights = clamp(weights + trained * 4);
            }
            // Korthikanti et al. 2022, eq. 1: s b h (34 + 5 a s / h) bytes per layer with
            // 16-bit activations, scaled by w/2 for fp32. Fused attention keeps no scores
            // (the 5 a s^2 b) but the softmax's fp32 log-sum-exp, 4 a s b.
            let attention = match opts.attention {
                Attention::Eager => 5 * a * s * s * b,
                Attention::Fused => 4 * a * s * b * 2 / w,
            };
            let per_token = coefficients.for_attention(opts.attention);
            let linear = (s * b * h) as f64 * per_token;
            let per_layer_2byte = linear as u128 + attention;
            out.activations = clamp(l * per_layer_2byte * w / 2);
            if let Some(per_sample) = opts.act_per_sample {
                out.activations = clamp(b * u128::from(per_sample));
                return Ok(out);
            }
            // The logits over the vocabulary in the activation format, their fp32 log-softmax
            // kept for the backward (Hugging Face transformers' ForCausalLMLoss upcasts the
            // logits to fp32; PyTorch's cross_entropy is log_softmax + nll_loss) and its fp32
            // gradient: b s V (w + 8).
            out.logits = clamp(b * s * v * (w + 8));
        }
        Phase::Infer => {
            if let Some(per_sample) = opts.act_per_sample {
                out.activations = clamp(b * u128::from(per_sample));
                return Ok(out);
            }
            out.kv_cache = clamp(2 * l * h * kv / a * s * b * w);
            // One layer's largest transients, freed layer by layer: the MLP's 4h-wide input
            // and output. Inference runs fused attention (FlashAttention, Dao et al. 2022;
            // PyTorch SDPA), which never holds the a x s x s scores; eager attention holds one
            // layer's scores and softmax, 2 a s^2 b values.
            let scores = match opts.attention {
                Attention::Fused => 0,
                Attention::Eager => 2 * a * s * s * b * w,
            };
            out.activations = clamp(s * b * 8 * h * w + scores);
            // The logits of every prompt position in the activation format (transformers'
            // forward computes all positions unless told `logits_to_keep`).
            out.logits = clamp(b * s * v * w);
        }
    }
    Ok(out)
}

/// The key/value heads of a model of `shape` given `--mig-kv-heads` (`None`: as many as
/// attention heads).
///
/// # Errors
/// [`ModelError::KvHeads`] for more key/value heads than the shape has attention heads, or a
/// count that does not divide them.
pub fn kv_heads_for(shape: &Shape, kv_heads: Option<u32>) -> Result<u64, ModelError> {
    match kv_heads {
        None => Ok(shape.heads),
        Some(k) if u64::from(k) <= shape.heads && shape.heads.is_multiple_of(u64::from(k)) => Ok(u64::from(k)),
        Some(k) => Err(ModelError::KvHeads {
            kv_heads: k,
            heads: shape.heads,
        }),
    }
}

/// Reads a parameter count: `7B`, `1.3b`, `350M`, `125m`, `1T`, `7e9` or a plain number.
///
/// # Errors
/// A message saying what is wrong and what is allowed (without the option name), for a
/// value that is not a count or is outside [`MIN_PARAMS`]..=[`MAX_PARAMS`].
pub fn parse_params(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.chars().last().map(|c| c.to_ascii_lowercase()) {
        Some('k') => (&t[..t.len() - 1], 1e3),
        Some('m') => (&t[..t.len() - 1], 1e6),
        Some('b') | Some('g') => (&t[..t.len() - 1], 1e9),
        Some('t') => (&t[..t.len() - 1], 1e12),
        _ => (t, 1.0),
    };
    let v: f64 = num
        .trim()
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite())
        .ok_or_else(|| format!("'{t}' is not a parameter count; write e.g. 7B, 1.3B or 350M"))?;
    let n = v * mult;
    if n < MIN_PARAMS as f64 {
        return Err(format!("{t} parameters is too few; allowed: 1M to 2T, e.g. 7B"));
    }
    if n > MAX_PARAMS as f64 {
        return Err(format!("{t} parameters is more than any GPU holds; allowed: 1M to 2T"));
    }
    Ok(n as u64)
}

#[cfg(test)]
mod tests;
