//! Peak GPU memory measured on a GPU for the model formula's error table (issue 4 item 5):
//! GPT-2 small/medium/large, a Llama-style 1B and 7B, and ResNet-50, run by
//! `slurm/bench/estimator_gpu.py` on an NVIDIA H100 80GB HBM3 (driver 580.159.04, PyTorch
//! 2.11.0+cu130), random weights, each workload in a fresh process, 2026-11-26. The raw lines
//! and docs/results/estimator-gpu-2026-11-26.md are the record.
//!
//! `measured_bytes` is the script's `nvml_peak_bytes`: the peak of NVML's used memory
//! (sampled every 5 ms) less what was used before the process started CUDA, i.e. what a MIG
//! instance must hold, CUDA context included (650,969,088 bytes = 621 MiB on that machine).
//! Each row's `spec` is the hints a user would give for the workload: the parameter count as
//! a user writes it (124M, 355M, 774M, 1B, 6.7B), not the exact count, which `assumed` gives.
//!
//! [`super::ErrorModel::reference`] samples the transformer rows' errors with the published
//! table's ([`super::reference::REFERENCE`]) for the simulator's estimated requests.

use super::model_formula::{Dtype, ModelOptions, ModelSpec, Phase};
use super::reference::ReferencePoint;

/// Where every measured row comes from.
pub const MEASURED_SOURCE: &str = "measured: NVIDIA H100 80GB HBM3, driver 580.159.04, \
    PyTorch 2.11.0, slurm/bench/estimator_gpu.py, 2026-11-26, \
    docs/results/estimator-gpu-2026-11-26/";

/// The CUDA context measured by the script (NVML used memory after CUDA init less before),
/// bytes: 621 MiB, the same in every workload's process. The formula assumes this value
/// for CUDA 12 and 13 ([`super::model_formula::CUDA_CONTEXT_BY_MAJOR`]).
pub const MEASURED_CUDA_CONTEXT_BYTES: u64 = 650_969_088;

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

/// [`spec`] with GPT-2's vocabulary of 50,257 tokens (`--mig-vocab=50257`; Radford et al.,
/// "Language Models are Unsupervised Multitask Learners", 2019, section 2.2).
const fn gpt2(params: u64, dtype: Dtype, phase: Phase, batch: u32, seq: u32) -> ModelSpec {
    let mut s = spec(params, dtype, phase, batch, seq);
    s.options.vocab = 50_257;
    s
}

const fn row(name: &'static str, spec: ModelSpec, measured_bytes: u64, assumed: &'static str) -> ReferencePoint {
    ReferencePoint {
        name,
        spec,
        measured_bytes,
        source: MEASURED_SOURCE,
        assumed,
    }
}

/// The measured transformer workloads, in the order the script ran them.
pub const MEASURED: [ReferencePoint; 8] = [
    row(
        "gpt2-small train fp32 b8 s1024",
        gpt2(124_000_000, Dtype::Fp32, Phase::Train, 8, 1024),
        17_310_744_576,
        "GPT2LMHeadModel 12 layers h768 12 heads, 124,439,808 params counted; fp32 weights, \
         AdamW, 3 steps of LM loss on the input (full-vocabulary fp32 logits, which the \
         formula does not count)",
    ),
    row(
        "gpt2-medium train fp32 b8 s1024",
        gpt2(355_000_000, Dtype::Fp32, Phase::Train, 8, 1024),
        35_321_085_952,
        "GPT2LMHeadModel 24 layers h1024 16 heads, 354,823,168 params counted; fp32 weights, \
         AdamW, 3 steps of LM loss (fp32 logits not counted by the formula)",
    ),
    row(
        "gpt2-large train fp32 b4 s1024",
        gpt2(774_000_000, Dtype::Fp32, Phase::Train, 4, 1024),
        36_044_603_392,
        "GPT2LMHeadModel 36 layers h1280 20 heads, 774,030,080 params counted; fp32 weights, \
         AdamW, 3 steps of LM loss (fp32 logits not counted by the formula)",
    ),
    row(
        "gpt2-large infer fp16 b1 s1024",
        gpt2(774_000_000, Dtype::Fp16, Phase::Infer, 1, 1024),
        2_815_229_952,
        "GPT2LMHeadModel 36 layers h1280, 774,030,080 params counted, built in fp16; 2 forward \
         passes with use_cache over the whole 1024-token prompt, no generation",
    ),
    row(
        "llama-1b train bf16 b4 s1024",
        spec(1_000_000_000, Dtype::Bf16, Phase::Train, 4, 1024),
        25_248_464_896,
        "LlamaForCausalLM 16 layers h2048 32 heads, MLP 5632, vocab 32000, 953,223,168 params \
         counted (a user writes 1B); fp32 weights + AdamW, bf16 through autocast (mixed \
         precision with fp32 master weights), 3 steps of LM loss",
    ),
    row(
        "llama-1b infer bf16 b1 s2048",
        spec(1_000_000_000, Dtype::Bf16, Phase::Infer, 1, 2048),
        3_423_404_032,
        "LlamaForCausalLM 16 layers h2048, 953,223,168 params counted (a user writes 1B), \
         built in bf16; 2 forward passes with use_cache over the whole 2048-token prompt",
    ),
    row(
        "llama-7b infer bf16 b1 s4096",
        spec(6_700_000_000, Dtype::Bf16, Phase::Infer, 1, 4096),
        17_803_575_296,
        "LlamaForCausalLM 32 layers h4096 32 heads, MLP 11008, vocab 32000, 6,738,415,616 \
         params counted (a user writes 6.7B), built in bf16; 2 forward passes with use_cache \
         over the whole 4096-token prompt",
    ),
    row(
        "llama-7b infer bf16 b8 s2048",
        spec(6_700_000_000, Dtype::Bf16, Phase::Infer, 8, 2048),
        28_471_787_520,
        "as llama-7b infer b1, batch 8 of 2048-token prompts",
    ),
];

/// ResNet-50 (torchvision, 25,557,032 params counted), measured by the same script. It is
/// not a transformer, so the model formula does not apply to it; the rows are kept to show
/// what the formula gives anyway when a user passes `--mig-model-params=25.6M` with the
/// batch and the image side as `--mig-seq`.
pub const MEASURED_NOT_TRANSFORMER: [ReferencePoint; 2] = [
    row(
        "resnet50 train fp32 b64 224px",
        spec(25_600_000, Dtype::Fp32, Phase::Train, 64, 224),
        7_873_560_576,
        "torchvision resnet50, fp32, AdamW, 3 steps of cross-entropy on 64 random 224x224 \
         images; seq = image side (224), as the script records it; not a transformer",
    ),
    row(
        "resnet50 infer fp32 b64 224px",
        spec(25_600_000, Dtype::Fp32, Phase::Infer, 64, 224),
        1_756_168_192,
        "torchvision resnet50, fp32, eval, 3 forward passes without gradients on 64 random \
         224x224 images; seq = image side (224); not a transformer",
    ),
];
