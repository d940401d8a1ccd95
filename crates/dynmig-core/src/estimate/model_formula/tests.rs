//! Unit tests of [`super`].

use super::*;
use crate::size::GIB;

#[test]
fn params() {
    assert_eq!(parse_params("7B"), Ok(7_000_000_000));
    assert_eq!(parse_params("1.3b"), Ok(1_300_000_000));
    assert_eq!(parse_params("350M"), Ok(350_000_000));
    assert_eq!(parse_params("7e9"), Ok(7_000_000_000));
    assert!(parse_params("7X").unwrap_err().contains("not a parameter count"));
    assert!(parse_params("10").unwrap_err().contains("too few"));
    assert!(parse_params("3T").unwrap_err().contains("more than any GPU"));
    assert!(parse_params("-7B").is_err());
}

#[test]
fn mixed_precision_adam_is_16_bytes_per_param_plus_activations() {
    let spec = ModelSpec {
        params: 1_000_000_000,
        dtype: Dtype::Bf16,
        phase: Phase::Train,
        batch: 1,
        seq: 1,
        options: ModelOptions::DEFAULT,
    };
    let b = breakdown(&spec, 0).unwrap();
    assert_eq!(b.weights + b.gradients + b.optimizer, 16_000_000_000);
    assert!(b.activations < 10_000_000, "{b:?}");
    let fp32 = breakdown(
        &ModelSpec {
            dtype: Dtype::Fp32,
            ..spec
        },
        0,
    )
    .unwrap();
    assert_eq!(fp32.weights + fp32.gradients + fp32.optimizer, 16_000_000_000);
    let e = breakdown(
        &ModelSpec {
            dtype: Dtype::Int8,
            ..spec
        },
        0,
    )
    .unwrap_err();
    assert!(e.to_string().contains("train in fp32, fp16 or bf16"));
}

/// fp8 weights are 1 byte per parameter for inference (Transformer Engine's FP8 primer:
/// E4M3/E5M2 are 8-bit formats); fp8 training stores what bf16 training does.
#[test]
fn fp8_is_one_byte_per_weight_for_inference_and_bf16_for_training() {
    let infer = ModelSpec {
        params: 7_000_000_000,
        dtype: Dtype::Fp8,
        phase: Phase::Infer,
        batch: 1,
        seq: 2048,
        options: ModelOptions::DEFAULT,
    };
    let fp8 = breakdown(&infer, 0).unwrap();
    let bf16 = breakdown(
        &ModelSpec {
            dtype: Dtype::Bf16,
            ..infer
        },
        0,
    )
    .unwrap();
    assert_eq!(fp8.weights, 7_000_000_000);
    assert_eq!(bf16.weights, 14_000_000_000);
    assert_eq!((fp8.kv_cache, fp8.activations), (bf16.kv_cache, bf16.activations));
    let train = ModelSpec {
        phase: Phase::Train,
        ..infer
    };
    let t8 = breakdown(&train, 0).unwrap();
    let t16 = breakdown(
        &ModelSpec {
            dtype: Dtype::Bf16,
            ..train
        },
        0,
    )
    .unwrap();
    assert_eq!(t8, t16);
    assert_eq!(t8.weights + t8.gradients + t8.optimizer, 16 * 7_000_000_000);
    assert_eq!(Dtype::parse("FP8"), Some(Dtype::Fp8));
    assert_eq!(Dtype::parse("float8"), Some(Dtype::Fp8));
    assert_eq!(Dtype::Fp8.to_string(), "fp8");
    assert!(Dtype::Fp8.needs_fp8() && Dtype::Fp8.trainable() && !Dtype::Bf16.needs_fp8());
}

#[test]
fn llama_7b_inference_kv_cache() {
    let spec = ModelSpec {
        params: 6_700_000_000,
        dtype: Dtype::Fp16,
        phase: Phase::Infer,
        batch: 1,
        seq: 4096,
        options: ModelOptions::DEFAULT,
    };
    let b = breakdown(&spec, DEFAULT_CUDA_CONTEXT_BYTES).unwrap();
    // 2 x 32 layers x 4096 x 4096 tokens x 2 bytes = 2 GiB.
    assert_eq!(b.kv_cache, 2 * GIB);
    assert_eq!(b.weights, 13_400_000_000);
    assert_eq!(b.gradients + b.optimizer, 0);
    assert!(b.total() > 15 * GIB && b.total() < 16 * GIB, "{}", b.total());
}

fn with(spec: ModelSpec, f: impl FnOnce(&mut ModelOptions)) -> ModelSpec {
    let mut s = spec;
    f(&mut s.options);
    s
}

#[test]
fn each_optimizer_keeps_its_published_state_per_parameter() {
    let spec = ModelSpec {
        params: 1_000_000_000,
        dtype: Dtype::Fp32,
        phase: Phase::Train,
        batch: 1,
        seq: 1,
        options: ModelOptions::DEFAULT,
    };
    let state = |o: Optimizer| breakdown(&with(spec, |m| m.optimizer = o), 0).unwrap().optimizer;
    assert_eq!(state(Optimizer::AdamW), 8_000_000_000);
    assert_eq!(state(Optimizer::Sgd), 4_000_000_000);
    assert_eq!(state(Optimizer::Adam8bit), 2_000_000_000);
    // 16-bit training adds the fp32 master weights.
    let bf16 = ModelSpec {
        dtype: Dtype::Bf16,
        ..spec
    };
    assert_eq!(
        breakdown(&with(bf16, |m| m.optimizer = Optimizer::Adam8bit), 0)
            .unwrap()
            .optimizer,
        6_000_000_000
    );
    assert_eq!(Optimizer::parse("AdamW"), Some(Optimizer::AdamW));
    assert_eq!(Optimizer::parse("adam8bit"), Some(Optimizer::Adam8bit));
    assert_eq!(Optimizer::parse("lion"), None);
}

#[test]
fn fused_attention_keeps_no_scores_and_eager_keeps_them() {
    let spec = ModelSpec {
        params: 355_000_000,
        dtype: Dtype::Bf16,
        phase: Phase::Train,
        batch: 8,
        seq: 1024,
        options: ModelOptions::DEFAULT,
    };
    let fused = breakdown(&spec, 0).unwrap();
    let eager = breakdown(&with(spec, |m| m.attention = Attention::Eager), 0).unwrap();
    let sh = shape_for(spec.params);
    let (l, h, a, s, b) = (sh.layers, sh.hidden, sh.heads, 1024u64, 8u64);
    let c = ActivationCoefficients::FITTED;
    let linear = |k: f64| ((s * b * h) as f64 * k) as u64;
    assert_eq!(fused.activations, l * (linear(c.fused) + 4 * a * s * b));
    assert_eq!(eager.activations, l * (linear(c.eager) + 5 * a * s * s * b));
    assert_eq!(Attention::parse("SDPA"), Some(Attention::Fused));
    assert_eq!(Attention::parse("eager"), Some(Attention::Eager));
}

#[test]
fn logits_cover_the_vocabulary_in_fp32_for_the_loss_and_none_without_one() {
    let spec = ModelSpec {
        params: 124_000_000,
        dtype: Dtype::Bf16,
        phase: Phase::Train,
        batch: 8,
        seq: 1024,
        options: ModelOptions::DEFAULT,
    };
    let v = u64::from(DEFAULT_VOCAB);
    // bf16 logits + fp32 log-softmax + its fp32 gradient.
    assert_eq!(breakdown(&spec, 0).unwrap().logits, 8 * 1024 * v * (2 + 8));
    let infer = ModelSpec {
        phase: Phase::Infer,
        ..spec
    };
    assert_eq!(breakdown(&infer, 0).unwrap().logits, 8 * 1024 * v * 2);
    assert_eq!(breakdown(&with(spec, |m| m.vocab = 0), 0).unwrap().logits, 0);
}

#[test]
fn grouped_query_attention_shrinks_the_kv_cache_by_heads_over_kv_heads() {
    let spec = ModelSpec {
        params: 6_700_000_000,
        dtype: Dtype::Bf16,
        phase: Phase::Infer,
        batch: 1,
        seq: 4096,
        options: ModelOptions::DEFAULT,
    };
    let mha = breakdown(&spec, 0).unwrap();
    let gqa = breakdown(&with(spec, |m| m.kv_heads = Some(8)), 0).unwrap();
    assert_eq!(mha.kv_cache, 2 * GIB);
    assert_eq!(gqa.kv_cache * 4, mha.kv_cache, "32 heads, 8 key/value heads");
    assert_eq!(
        breakdown(&with(spec, |m| m.kv_heads = Some(5)), 0).unwrap_err(),
        ModelError::KvHeads { kv_heads: 5, heads: 32 }
    );
    assert!(breakdown(&with(spec, |m| m.kv_heads = Some(64)), 0).is_err());
}

#[test]
fn lora_trains_only_its_adapters() {
    let spec = ModelSpec {
        params: 6_700_000_000,
        dtype: Dtype::Bf16,
        phase: Phase::Train,
        batch: 1,
        seq: 2048,
        options: ModelOptions::DEFAULT,
    };
    let full = breakdown(&spec, 0).unwrap();
    let lora = breakdown(&with(spec, |m| m.lora_rank = Some(16)), 0).unwrap();
    // 4 L h r adapter parameters: 4 x 32 x 4096 x 16 = 8.4M, fp32, with AdamW.
    let adapters = 4 * 32 * 4096 * 16;
    assert_eq!(lora.gradients, adapters * 4);
    assert_eq!(lora.optimizer, adapters * 8);
    assert_eq!(lora.weights, 13_400_000_000 + adapters * 4);
    assert_eq!(lora.activations, full.activations);
    assert!(lora.total() < full.total() / 3, "{lora:?} vs {full:?}");
}

#[test]
fn a_model_described_by_its_activations_per_sample_gets_no_transformer_terms() {
    let spec = ModelSpec {
        params: 25_600_000,
        dtype: Dtype::Fp32,
        phase: Phase::Train,
        batch: 64,
        seq: DEFAULT_SEQ,
        options: ModelOptions::DEFAULT,
    };
    let cnn = with(spec, |m| m.act_per_sample = Some(100 * MIB));
    let b = breakdown(&cnn, 0).unwrap();
    assert_eq!(b.activations, 64 * 100 * MIB);
    assert_eq!((b.kv_cache, b.logits), (0, 0));
    assert_eq!(b.weights + b.gradients + b.optimizer, 16 * 25_600_000);
    let infer = breakdown(
        &ModelSpec {
            phase: Phase::Infer,
            ..cnn
        },
        0,
    )
    .unwrap();
    assert_eq!(
        (infer.activations, infer.kv_cache, infer.logits),
        (64 * 100 * MIB, 0, 0)
    );
}

#[test]
fn shapes_follow_the_published_ones() {
    assert_eq!(
        shape_for(125_000_000),
        Shape {
            layers: 12,
            hidden: 768,
            heads: 12
        }
    );
    assert_eq!(shape_for(13_000_000_000).heads, 40);
    let s = shape_for(7_000_000_000);
    assert_eq!(s.layers, 32);
    assert!((4100..4300).contains(&s.hidden), "{s:?}");
}
