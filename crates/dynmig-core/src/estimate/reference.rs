//! Published peak-memory figures the model formula is checked against. The table measured on a
//! GPU (issue 4 item 5) is [`super::measured`]; [`super::ErrorModel::reference`] uses this one.
//!
//! Every row names where its figure comes from. Where the source leaves a setting open, the
//! row's `assumed` says what we took. Figures given in "MB" by tools that divide by 2^20
//! (`nvidia-smi`, pynvml `used // 1024**2`) are read as MiB; "GB" in the Dell guide as 10^9.

use super::model_formula::{Attention, Dtype, ModelOptions, ModelSpec, Phase};
use crate::size::MIB;

/// One published measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReferencePoint {
    /// The workload.
    pub name: &'static str,
    /// The model description the formula gets.
    pub spec: ModelSpec,
    /// The published peak GPU memory, bytes (whole-process, as NVML reports it).
    pub measured_bytes: u64,
    /// Where the figure is published.
    pub source: &'static str,
    /// What the source leaves open and we assumed.
    pub assumed: &'static str,
}

const HF_ANATOMY: &str = "Hugging Face Transformers docs, \"Model training anatomy\" \
    (huggingface.co/docs/transformers/model_memory_anatomy): bert-large-uncased, Trainer \
    defaults (fp32, AdamW), seq 512, pynvml used memory";
const HF_BENCH: &str = "Hugging Face Transformers v2.11 docs, \"Benchmarks\" example output: \
    bert-base-uncased inference, fp32, TITAN RTX, PyTorch 1.4";
const DELL: &str = "Dell Technologies, \"Generative AI in the Enterprise - Inferencing\" \
    design guide H19686 (2023), Table 9: GPU memory consumed for one concurrent request";

const fn spec(params: u64, dtype: Dtype, phase: Phase, batch: u32, seq: u32) -> ModelSpec {
    ModelSpec {
        params,
        dtype,
        phase,
        batch,
        seq,
        options: ModelOptions::DEFAULT,
    }
}

/// [`spec`] of an encoder without a language-model head, with eager attention
/// (`--mig-vocab=0 --mig-attention=eager`): the BERT rows, measured with transformers
/// releases whose BERT computed attention eagerly (SDPA came to BERT in transformers 4.41,
/// 2024), as a sequence classifier (the training anatomy guide) or the bare model (the
/// benchmarks).
const fn encoder(params: u64, dtype: Dtype, phase: Phase, batch: u32, seq: u32) -> ModelSpec {
    let mut s = spec(params, dtype, phase, batch, seq);
    s.options.vocab = 0;
    s.options.attention = Attention::Eager;
    s
}

/// [`spec`] with the model's vocabulary (`--mig-vocab`).
const fn vocab(params: u64, dtype: Dtype, phase: Phase, batch: u32, seq: u32, vocab: u32) -> ModelSpec {
    let mut s = spec(params, dtype, phase, batch, seq);
    s.options.vocab = vocab;
    s
}

/// The reference table.
pub const REFERENCE: [ReferencePoint; 12] = [
    ReferencePoint {
        name: "bert-large train fp32 b4 s512",
        spec: encoder(335_000_000, Dtype::Fp32, Phase::Train, 4, 512),
        measured_bytes: 14949 * MIB,
        source: HF_ANATOMY,
        assumed: "335M parameters (BERT paper: 340M)",
    },
    ReferencePoint {
        name: "bert-large train fp32 b1 s512",
        spec: encoder(335_000_000, Dtype::Fp32, Phase::Train, 1, 512),
        measured_bytes: 8681 * MIB,
        source: HF_ANATOMY,
        assumed: "batch 1 with gradient accumulation 4 (accumulation adds no memory)",
    },
    ReferencePoint {
        name: "bert-base infer fp32 b8 s8",
        spec: encoder(110_000_000, Dtype::Fp32, Phase::Infer, 8, 8),
        measured_bytes: 1227 * MIB,
        source: HF_BENCH,
        assumed: "MB read as MiB",
    },
    ReferencePoint {
        name: "bert-base infer fp32 b8 s32",
        spec: encoder(110_000_000, Dtype::Fp32, Phase::Infer, 8, 32),
        measured_bytes: 1281 * MIB,
        source: HF_BENCH,
        assumed: "MB read as MiB",
    },
    ReferencePoint {
        name: "bert-base infer fp32 b8 s128",
        spec: encoder(110_000_000, Dtype::Fp32, Phase::Infer, 8, 128),
        measured_bytes: 1307 * MIB,
        source: HF_BENCH,
        assumed: "MB read as MiB",
    },
    ReferencePoint {
        name: "bert-base infer fp32 b8 s512",
        spec: encoder(110_000_000, Dtype::Fp32, Phase::Infer, 8, 512),
        measured_bytes: 1539 * MIB,
        source: HF_BENCH,
        assumed: "MB read as MiB",
    },
    ReferencePoint {
        name: "NeMo GPT 345M infer bf16",
        spec: vocab(345_000_000, Dtype::Bf16, Phase::Infer, 1, 2048, 50_257),
        measured_bytes: 3_100_000_000,
        source: DELL,
        assumed: "batch 1, context 2048",
    },
    ReferencePoint {
        name: "NeMo GPT 1.3B infer bf16",
        spec: vocab(1_300_000_000, Dtype::Bf16, Phase::Infer, 1, 2048, 50_257),
        measured_bytes: 4_100_000_000,
        source: DELL,
        assumed: "batch 1, context 2048",
    },
    ReferencePoint {
        name: "NeMo GPT 5B infer bf16",
        spec: vocab(5_000_000_000, Dtype::Bf16, Phase::Infer, 1, 2048, 50_257),
        measured_bytes: 12_410_000_000,
        source: DELL,
        assumed: "batch 1, context 2048",
    },
    ReferencePoint {
        name: "NeMo GPT 20B infer bf16",
        spec: vocab(20_000_000_000, Dtype::Bf16, Phase::Infer, 1, 2048, 50_257),
        measured_bytes: 42_440_000_000,
        source: DELL,
        assumed: "batch 1, context 2048",
    },
    ReferencePoint {
        name: "Bloom 7B infer bf16",
        spec: vocab(7_070_000_000, Dtype::Bf16, Phase::Infer, 1, 2048, 250_880),
        measured_bytes: 16_630_000_000,
        source: DELL,
        assumed: "7.07B parameters (bloom-7b1), batch 1, context 2048",
    },
    ReferencePoint {
        name: "Llama-2-7b infer fp16",
        spec: spec(6_740_000_000, Dtype::Fp16, Phase::Infer, 1, 2048),
        measured_bytes: 14_200_000_000,
        source: DELL,
        assumed: "6.74B parameters, batch 1, context 2048",
    },
];
