//! `dynmig estimate`: what a job would be given, before it is submitted (docs/estimator.md,
//! "Check a job before submitting it").
//!
//! It takes the same `--mig-*` options as sbatch and the same `--gres`, checks them as the
//! SPANK plugin and the job_submit plugin do (the same `dynmig_core::hints` and
//! `dynmig_core::submit::decide_with`), and prints each term of the estimate, the total,
//! the profile sbatch would give, and on each GPU model of the cluster the profile chosen and
//! the next size up (the profile a job that runs out of memory is requeued on). With `--json`
//! the same as one JSON object. It reads the config (and, where it can, the guarded default's
//! catalog in the state dir), never Slurm, and never the job history: sbatch uses a user's
//! history only for a job with no hint, and says so in the decision record.

use crate::cli::load_config;
use anyhow::{bail, Result};
use dynmig_core::config::Config;
use dynmig_core::estimate::{estimate, next_larger_profile, EstimateContext};
use dynmig_core::geometry::GpuModel;
use dynmig_core::hints::{
    hints_from_spank_env_for, smallest_fitting, MIG_ACT_PER_SAMPLE, MIG_ATTENTION, MIG_BATCH, MIG_DTYPE, MIG_KV_HEADS,
    MIG_LORA_RANK, MIG_MEM, MIG_MODEL_PARAMS, MIG_OPTIMIZER, MIG_PHASE, MIG_PROFILE, MIG_SEQ, MIG_VOCAB,
    SPANK_ENV_PREFIX,
};
use dynmig_core::protocol::catalog::{Catalog, CATALOG_FILE, MAX_CATALOG_BYTES};
use dynmig_core::size::{format_size, MIB};
use dynmig_core::submit::{decide_with, JobRequest, Outcome, SubmitPolicy};
use serde_json::{json, Value};
use std::path::Path;

/// The options of `dynmig estimate`: sbatch's `--mig-*` options and `--gres`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct EstimateArgs {
    /// GPU memory the job needs, e.g. 18G (as sbatch --mig-mem).
    #[arg(long = "mig-mem", value_name = "SIZE")]
    pub mig_mem: Option<String>,
    /// A MIG profile, e.g. 3g.40gb (as sbatch --mig-profile).
    #[arg(long = "mig-profile", value_name = "PROFILE")]
    pub mig_profile: Option<String>,
    /// The model's parameter count, e.g. 7B or 350M (as sbatch --mig-model-params).
    #[arg(long = "mig-model-params", value_name = "COUNT")]
    pub mig_model_params: Option<String>,
    /// The number format: fp32, fp16, bf16, fp8, int8, int4 (as sbatch --mig-dtype).
    #[arg(long = "mig-dtype", value_name = "DTYPE")]
    pub mig_dtype: Option<String>,
    /// train or infer (as sbatch --mig-phase).
    #[arg(long = "mig-phase", value_name = "PHASE")]
    pub mig_phase: Option<String>,
    /// Batch size (as sbatch --mig-batch).
    #[arg(long = "mig-batch", value_name = "N")]
    pub mig_batch: Option<String>,
    /// Sequence length in tokens (as sbatch --mig-seq).
    #[arg(long = "mig-seq", value_name = "N")]
    pub mig_seq: Option<String>,
    /// Optimizer of a training job: adamw, sgd, adam8bit, none (as sbatch --mig-optimizer).
    #[arg(long = "mig-optimizer", value_name = "NAME")]
    pub mig_optimizer: Option<String>,
    /// Attention: fused (FlashAttention, SDPA) or eager (as sbatch --mig-attention).
    #[arg(long = "mig-attention", value_name = "KIND")]
    pub mig_attention: Option<String>,
    /// Vocabulary size in tokens (as sbatch --mig-vocab).
    #[arg(long = "mig-vocab", value_name = "N")]
    pub mig_vocab: Option<String>,
    /// Key/value heads, for grouped-query attention (as sbatch --mig-kv-heads).
    #[arg(long = "mig-kv-heads", value_name = "N")]
    pub mig_kv_heads: Option<String>,
    /// LoRA rank of a fine-tuning job (as sbatch --mig-lora-rank).
    #[arg(long = "mig-lora-rank", value_name = "R")]
    pub mig_lora_rank: Option<String>,
    /// Activations one sample keeps, for a model that is not a transformer, e.g. 100M (as
    /// sbatch --mig-act-per-sample).
    #[arg(long = "mig-act-per-sample", value_name = "SIZE")]
    pub mig_act_per_sample: Option<String>,
    /// The GPU request as sbatch --gres gives it.
    #[arg(long, default_value = "gpu:1")]
    pub gres: String,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

impl EstimateArgs {
    /// The options given, as `(option, value)`, in sbatch's order.
    fn given(&self) -> Vec<(&'static str, &str)> {
        [
            (MIG_MEM, &self.mig_mem),
            (MIG_PROFILE, &self.mig_profile),
            (MIG_MODEL_PARAMS, &self.mig_model_params),
            (MIG_DTYPE, &self.mig_dtype),
            (MIG_PHASE, &self.mig_phase),
            (MIG_BATCH, &self.mig_batch),
            (MIG_SEQ, &self.mig_seq),
            (MIG_OPTIMIZER, &self.mig_optimizer),
            (MIG_ATTENTION, &self.mig_attention),
            (MIG_VOCAB, &self.mig_vocab),
            (MIG_KV_HEADS, &self.mig_kv_heads),
            (MIG_LORA_RANK, &self.mig_lora_rank),
            (MIG_ACT_PER_SAMPLE, &self.mig_act_per_sample),
        ]
        .into_iter()
        .filter_map(|(o, v)| v.as_deref().map(|v| (o, v)))
        .collect()
    }
}

/// The answer of [`report`]: JSON (the `--json` output; the text is written from it).
///
/// Shape: `{"config", "hints": {option: value}, "terms": {name: bytes} | null,
/// "terms_sum_bytes", "model_margin", "estimate_bytes" | null, "source", "gres", "profile",
/// "count", "per_model": [{"gpu_model", "profile", "profile_bytes", "next_size_up"}],
/// "catalog"}`; sizes in bytes.
///
/// # Errors
/// The message sbatch would give for these options (a bad hint, a request the cluster
/// cannot hold), starting `dynmig: `.
pub fn report(args: &EstimateArgs, config: &Config, config_name: &str, catalog: Option<Catalog>) -> Result<Value> {
    let mut policy = SubmitPolicy::from_config(config);
    let catalog_used = catalog.is_some();
    if let Some(c) = catalog {
        policy.catalog = c;
    }
    let env: Vec<String> = args
        .given()
        .iter()
        .map(|(o, v)| format!("{SPANK_ENV_PREFIX}{}={v}", o.replace('-', "_")))
        .collect();
    let env_refs: Vec<&str> = env.iter().map(String::as_str).collect();
    let cluster = Some(policy.models.as_slice()).filter(|m| !m.is_empty());
    let hints = match hints_from_spank_env_for(&env_refs, cluster) {
        Ok(h) => h,
        Err(e) => bail!("{e}"),
    };
    let cx = EstimateContext {
        settings: Some(&config.estimator),
        job: None,
        history: None,
    };
    let est = estimate(&hints, &cx);
    let req = JobRequest {
        tres_per_node: Some(&args.gres),
        spank_env: env_refs.clone(),
        ..JobRequest::default()
    };
    let (gres, profile, count, source, bytes) = match decide_with(&req, &policy, &cx) {
        Ok(Outcome::Rewrite(r)) => (
            r.tres_per_node.clone().unwrap_or_default(),
            Some(r.decision.profile),
            Some(r.decision.count),
            r.decision.source.to_string(),
            Some(r.decision.memory_bytes),
        ),
        Ok(Outcome::Unchanged { reason }) => (
            args.gres.clone(),
            None,
            None,
            format!("unchanged: {reason}"),
            est.as_ref().map(|e| e.bytes),
        ),
        Ok(Outcome::NoGpu) => bail!("dynmig: --gres={} asks for no GPU: nothing to estimate", args.gres),
        Err(e) => bail!("{e}"),
    };
    let terms = est.as_ref().and_then(|e| e.breakdown.as_ref()).map(|b| {
        json!({
            "weights": b.weights,
            "gradients": b.gradients,
            "optimizer": b.optimizer,
            "activations": b.activations,
            "kv_cache": b.kv_cache,
            "logits": b.logits,
            "cuda_context": b.cuda_context,
        })
    });
    let per_model: Vec<Value> = match bytes {
        Some(b) => policy.models.iter().map(|m| per_model(m, b)).collect(),
        None => Vec::new(),
    };
    Ok(json!({
        "config": config_name,
        "hints": args.given().into_iter().map(|(o, v)| (o.to_string(), Value::from(v))).collect::<serde_json::Map<_, _>>(),
        "terms": terms,
        "terms_sum_bytes": est.as_ref().and_then(|e| e.breakdown.as_ref()).map(|b| b.total()),
        "model_margin": hints.model.spec().map(|s| config.estimator.margin_for(s.phase)),
        "estimate_bytes": bytes,
        "source": source,
        "gres": gres,
        "profile": profile,
        "count": count,
        "per_model": per_model,
        "catalog": catalog_used,
    }))
}

/// The smallest profile of one GPU model that holds `bytes`, and the next size up.
fn per_model(m: &'static GpuModel, bytes: u64) -> Value {
    let chosen = smallest_fitting(&[m], bytes).map(|(_, p)| p);
    json!({
        "gpu_model": m.name,
        "profile": chosen.map(|p| p.name),
        "profile_bytes": chosen.map(|p| p.memory_mib * MIB),
        "next_size_up": chosen.and_then(|p| next_larger_profile(&[m], p.name)).map(|p| p.name),
    })
}

/// The text form of a [`report`].
pub fn text(r: &Value) -> String {
    let mut s = format!("config: {}\n", r["config"].as_str().unwrap_or("?"));
    let hints: Vec<String> = r["hints"]
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| format!("--{k}={}", v.as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    s += &format!(
        "hints: {}\n",
        if hints.is_empty() {
            "none".to_string()
        } else {
            hints.join(" ")
        }
    );
    let size = |v: &Value| v.as_u64().map(format_size).unwrap_or_else(|| "-".into());
    if let Some(t) = r["terms"].as_object() {
        s += "terms (docs/estimator.md has each one's source):\n";
        for (name, key) in [
            ("weights", "weights"),
            ("gradients", "gradients"),
            ("optimizer state", "optimizer"),
            ("activations", "activations"),
            ("KV cache", "kv_cache"),
            ("logits", "logits"),
            ("CUDA context", "cuda_context"),
        ] {
            if t[key].as_u64().unwrap_or(0) > 0 {
                s += &format!("  {name:<16} {:>10}\n", size(&t[key]));
            }
        }
        s += &format!("  {:<16} {:>10}\n", "sum", size(&r["terms_sum_bytes"]));
        s += &format!(
            "  {:<16} {:>10}  (estimator.model_margin, or model_margin_infer for inference: the allocator's reserve)\n",
            "x margin",
            r["model_margin"]
                .as_f64()
                .map(|m| format!("{m:.2}"))
                .unwrap_or_default()
        );
    }
    s += &format!(
        "estimate: {} (source: {})\n",
        size(&r["estimate_bytes"]),
        r["source"].as_str().unwrap_or("?")
    );
    match r["profile"].as_str() {
        Some(p) => {
            s += &format!(
                "sbatch gives: --gres={} ({} x {p})\n",
                r["gres"].as_str().unwrap_or(""),
                r["count"].as_u64().unwrap_or(1)
            )
        }
        None => s += &format!("sbatch keeps: --gres={}\n", r["gres"].as_str().unwrap_or("")),
    }
    if let Some(models) = r["per_model"].as_array().filter(|m| !m.is_empty()) {
        s += "on each GPU model of the cluster (profile chosen; next size up, where a job that runs out of memory is requeued):\n";
        for m in models {
            s += &format!(
                "  {:<12} {} ({}); next size up: {}\n",
                m["gpu_model"].as_str().unwrap_or("?"),
                m["profile"].as_str().unwrap_or("none holds it"),
                size(&m["profile_bytes"]),
                m["next_size_up"].as_str().unwrap_or("none")
            );
        }
    }
    if r["catalog"] == Value::Bool(false) {
        s += "(without the guarded default's catalog: sbatch may give a larger profile the cluster's layouts offer)\n";
    }
    s += "(without your job history: sbatch uses it only for a job with no hint)\n";
    s
}

/// `dynmig estimate`: prints [`report`] as text or JSON.
///
/// # Errors
/// The config cannot be read, or the options are refused (the message sbatch would give).
pub fn run(config_path: Option<&Path>, args: &EstimateArgs) -> Result<()> {
    let (config, from) = load_config(config_path)?;
    let name = from
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "the embedded defaults".into());
    let catalog = dynmig_host::fs::read_text_bounded(&config.paths.state_dir.join(CATALOG_FILE), MAX_CATALOG_BYTES)
        .ok()
        .flatten()
        .and_then(|t| Catalog::parse(&t).ok());
    let r = match report(args, &config, &name, catalog) {
        Ok(r) => r,
        Err(e) => {
            // sbatch's own message, which starts `dynmig: ` already.
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print!("{}", text(&r));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(f: impl FnOnce(&mut EstimateArgs)) -> EstimateArgs {
        let mut a = EstimateArgs {
            gres: "gpu:1".into(),
            ..EstimateArgs::default()
        };
        f(&mut a);
        a
    }

    #[test]
    fn a_model_is_estimated_term_by_term_and_gets_the_profile_sbatch_gives() {
        let config = Config::default_embedded();
        let a = args(|a| {
            a.mig_model_params = Some("1B".into());
            a.mig_dtype = Some("bf16".into());
            a.mig_phase = Some("infer".into());
            a.mig_seq = Some("2048".into());
        });
        let r = report(&a, &config, "test", None).unwrap();
        let terms = r["terms"].as_object().unwrap();
        let sum: u64 = terms.values().map(|v| v.as_u64().unwrap()).sum();
        assert_eq!(r["terms_sum_bytes"].as_u64(), Some(sum));
        let est = r["estimate_bytes"].as_u64().unwrap();
        assert_eq!(est, (sum as f64 * r["model_margin"].as_f64().unwrap()).ceil() as u64);
        assert_eq!(r["source"], "model");
        // The same decision as the job_submit plugin's.
        let env = [
            "_SLURM_SPANK_OPTION_dynmig_mig_model_params=1B",
            "_SLURM_SPANK_OPTION_dynmig_mig_dtype=bf16",
            "_SLURM_SPANK_OPTION_dynmig_mig_phase=infer",
            "_SLURM_SPANK_OPTION_dynmig_mig_seq=2048",
        ];
        let req = JobRequest {
            tres_per_node: Some("gpu:1"),
            spank_env: env.to_vec(),
            ..JobRequest::default()
        };
        let cx = EstimateContext {
            settings: Some(&config.estimator),
            ..EstimateContext::default()
        };
        let Ok(Outcome::Rewrite(w)) = decide_with(&req, &SubmitPolicy::from_config(&config), &cx) else {
            panic!("a rewrite")
        };
        assert_eq!(r["profile"], w.decision.profile);
        assert_eq!(r["gres"].as_str(), w.tres_per_node.as_deref());
        let m = &r["per_model"][0];
        assert_eq!(m["gpu_model"], "A100-80GB");
        assert_eq!(m["profile"], w.decision.profile);
        assert!(m["profile_bytes"].as_u64().unwrap() >= est);
        assert_ne!(m["next_size_up"], m["profile"]);
        let t = text(&r);
        for want in [
            "weights",
            "KV cache",
            "CUDA context",
            "x margin",
            "sbatch gives: --gres=gpu:",
            "next size up",
        ] {
            assert!(t.contains(want), "{want} in {t}");
        }
    }

    #[test]
    fn a_bad_hint_gets_the_message_sbatch_gives() {
        let config = Config::default_embedded();
        let e = report(&args(|a| a.mig_mem = Some("lots".into())), &config, "test", None).unwrap_err();
        assert!(e.to_string().starts_with("dynmig: "), "{e}");
        assert!(e.to_string().contains("mig-mem"), "{e}");
        let e = report(&args(|a| a.mig_mem = Some("900G".into())), &config, "test", None).unwrap_err();
        assert!(e.to_string().contains("dynmig"), "{e}");
    }

    #[test]
    fn a_memory_hint_has_no_terms_and_a_gres_without_gpu_is_refused() {
        let config = Config::default_embedded();
        let r = report(&args(|a| a.mig_mem = Some("18G".into())), &config, "test", None).unwrap();
        assert!(r["terms"].is_null());
        assert_eq!(r["source"], "mig-mem");
        assert_eq!(r["profile"], "2g.20gb");
        assert!(!text(&r).contains("terms"));
        let e = report(&args(|a| a.gres = "gpu:0".into()), &config, "test", None).unwrap_err();
        assert!(e.to_string().contains("no GPU"), "{e}");
    }
}
