//! `dynmig estimate` through the binary, on a real TOML config of two GPU models: a user's
//! check of a job before submitting it (docs/estimator.md, "Check a job before submitting it").

use std::process::Command;

/// The embedded example with a second node group of H100-80GB nodes (policy `demand`).
fn two_model_config(dir: &std::path::Path) -> std::path::PathBuf {
    // Two GPU models need a policy that handles mixed groups (the config check says so).
    let kind = dynmig_core::config::EXAMPLE_TOML
        .lines()
        .find(|l| l.starts_with("kind"))
        .expect("the example's policy kind");
    let mut text = dynmig_core::config::EXAMPLE_TOML.replacen(kind, "kind = \"demand\"", 1);
    text += r#"
[[node_group]]
name = "h100"
nodes = "h[1-2]"
gpu_model = "H100-80GB"
gpus = 2
backend = "simulated"
initial_layout = "1x7g.80gb"
allowed_layouts = "all"
node_conf = "CPUs=4 RealMemory=4000"
"#;
    let path = dir.join("dynmig.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn estimate(config: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_dynmig"))
        .arg("--config")
        .arg(config)
        .arg("estimate")
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn a_model_gets_its_terms_its_profile_and_the_next_size_up_on_each_gpu_model() {
    let d = tempfile::tempdir().unwrap();
    let config = two_model_config(d.path());
    let hints = [
        "--mig-model-params=6.7B",
        "--mig-dtype=bf16",
        "--mig-phase=infer",
        "--mig-seq=4096",
    ];
    let out = estimate(&config, &[&hints[..], &["--json"]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["source"], "model");
    assert!(v["terms"]["kv_cache"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(
        v["terms"]["gradients"].as_u64(),
        Some(0),
        "inference keeps no gradients"
    );
    let models: Vec<&str> = v["per_model"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["gpu_model"].as_str().unwrap())
        .collect();
    assert_eq!(models, ["A100-80GB", "H100-80GB"]);
    let est = v["estimate_bytes"].as_u64().unwrap();
    for m in v["per_model"].as_array().unwrap() {
        assert!(m["profile_bytes"].as_u64().unwrap() >= est, "{m}");
        assert!(m["next_size_up"].is_string(), "{m}");
    }
    assert_eq!(
        v["gres"].as_str().unwrap(),
        format!("gpu:{}:1", v["profile"].as_str().unwrap())
    );
    // The text form says the same.
    let out = estimate(&config, &hints);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("KV cache"), "{text}");
    assert!(
        text.contains(&format!("sbatch gives: --gres={}", v["gres"].as_str().unwrap())),
        "{text}"
    );
    assert!(text.contains("H100-80GB"), "{text}");
}

#[test]
fn a_hint_sbatch_refuses_is_refused_with_the_same_message_and_exit_1() {
    let d = tempfile::tempdir().unwrap();
    let config = two_model_config(d.path());
    let out = estimate(&config, &["--mig-dtype=fp9", "--mig-model-params=1B"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("dynmig: --mig-dtype=fp9"), "{err}");
    assert!(err.contains("allowed"), "{err}");
    assert!(!err.contains("dynmig: dynmig:"), "{err}");
    let out = estimate(&config, &["--mig-mem=500G"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("500"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
