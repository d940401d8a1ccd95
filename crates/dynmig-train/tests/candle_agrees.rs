//! The runtime's plain-Rust network (dynmig-learn) computes what training's candle network
//! computes: a file candle writes loads with the runtime and gives the same logits (within
//! 1e-5) and the same greedy actions, the shipped models included; and the runtime writes the
//! same bytes candle wrote.

use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};
use dynmig_core::demand::Demand;
use dynmig_core::geometry::{all_layouts, GpuModel, A100_40GB, A100_80GB, H100_80GB};
use dynmig_core::policy::NodeSnapshot;
use dynmig_learn::catalogue::Catalogue;
use dynmig_learn::features::{cluster_features, input_len, node_features, Outlook};
use dynmig_learn::net::{ModelMeta, FORMAT};
use dynmig_learn::Model;
use dynmig_train::net::PolicyNet;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("dynmig-train-agree-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The candle network of a model file, read as training's candle read it before the runtime
/// had its own reader.
fn candle_net(path: &Path) -> PolicyNet {
    let mut tensors = candle_core::safetensors::load(path, &Device::Cpu).unwrap();
    let meta = tensors.remove("meta").unwrap().to_vec1::<u8>().unwrap();
    let meta: ModelMeta = serde_json::from_slice(&meta).unwrap();
    let vb = VarBuilder::from_tensors(tensors, DType::F32, &Device::Cpu);
    PolicyNet::new(&vb, meta.inputs, meta.hidden, meta.layouts.len() + 1).unwrap()
}

/// Logits of `xs` (rows) by candle.
fn candle_logits(net: &PolicyNet, xs: &[Vec<f32>]) -> Vec<Vec<f32>> {
    let width = xs[0].len();
    let flat: Vec<f32> = xs.iter().flatten().copied().collect();
    let x = Tensor::from_vec(flat, (xs.len(), width), &Device::Cpu).unwrap();
    net.forward(&x).unwrap().to_vec2::<f32>().unwrap()
}

/// The largest logit's action among `allowed` (the policy's greedy choice).
fn greedy(logits: &[f32], allowed: impl Fn(usize) -> bool) -> usize {
    (0..logits.len())
        .filter(|a| allowed(*a))
        .fold(None, |best: Option<usize>, a| match best {
            Some(b) if logits[b] >= logits[a] => Some(b),
            _ => Some(a),
        })
        .unwrap_or(0)
}

/// Largest difference between two sets of logits.
fn max_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| {
            assert_eq!(x.len(), y.len());
            x.iter().zip(y).map(|(p, q)| (p - q).abs())
        })
        .fold(0.0, f32::max)
}

/// Observations a model of `model` sees: each node of clusters of catalogue layouts under
/// drawn queues, forecasts, times of day and queue ages; then plain random vectors in [0, 1).
fn observations(model: &'static GpuModel, rng: &mut ChaCha8Rng) -> Vec<Vec<f32>> {
    let cat = Catalogue::for_model(model);
    let allowed: Arc<[_]> = all_layouts(model).into();
    let mut out = Vec::new();
    for round in 0..8 {
        let nodes: Vec<NodeSnapshot> = (0..6)
            .map(|i| NodeSnapshot {
                name: format!("n{i}"),
                model,
                layout: cat.node_layout((i + round) % cat.layouts.len(), 8),
                allowed: allowed.clone(),
                busy: Default::default(),
                running: Default::default(),
                unavailable: false,
                repartitioning: rng.gen_bool(0.1),
                layout_age: Duration::from_secs(3600),
                incoming: Default::default(),
                schedulable_free: Default::default(),
                work_ends_in: Duration::from_secs(rng.gen_range(0..14_400)),
                planned: None,
                version: 0,
            })
            .collect();
        let mut demand = Demand::default();
        let mut outlook = Outlook {
            queue_age: Duration::from_secs(rng.gen_range(0..20_000)),
            ..Outlook::default()
        };
        for p in model.schedulable_profiles() {
            if rng.gen_bool(0.5) {
                demand.add_pending(p.name, rng.gen_range(1..40));
            }
            outlook.forecast.insert(p.name.to_string(), rng.gen_range(0.0..30.0));
        }
        let t = Duration::from_secs(rng.gen_range(0..86_400));
        let global = cluster_features(&cat, t, &nodes, &demand, &outlook);
        for n in &nodes {
            let mut x = global.clone();
            x.extend(node_features(&cat, n));
            assert_eq!(x.len(), input_len(&cat));
            out.push(x);
        }
    }
    for _ in 0..32 {
        out.push((0..input_len(&cat)).map(|_| rng.gen::<f32>()).collect());
    }
    out
}

#[test]
fn a_file_candle_writes_loads_with_the_runtime_and_gives_candles_logits() {
    let d = dir("fixed");
    let cat = Catalogue::for_model(&A100_40GB);
    let (inputs, hidden, actions) = (input_len(&cat), 32, cat.layouts.len() + 1);
    // Fixed weights, larger than training's start (the tanh units away from 0).
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    let net = PolicyNet::new(&vb, inputs, hidden, actions).unwrap();
    let mut tensors: HashMap<String, Tensor> = HashMap::new();
    for (name, var) in varmap.data().lock().unwrap().iter() {
        let dims = var.as_tensor().dims().to_vec();
        let n: usize = dims.iter().product();
        let salt = name.len() as f32;
        let values: Vec<f32> = (0..n).map(|i| 0.6 * ((i as f32 + salt) * 0.731).sin()).collect();
        var.set(&Tensor::from_vec(values, dims, &Device::Cpu).unwrap()).unwrap();
        tensors.insert(name.clone(), var.as_tensor().clone());
    }
    // The file as training wrote it with candle: the weights and the meta tensor.
    let meta = ModelMeta {
        format: FORMAT,
        gpu_model: "A100-40GB".into(),
        layouts: cat.names(),
        inputs,
        hidden,
        trained_on: "fixed weights".into(),
    };
    let json = serde_json::to_vec(&meta).unwrap();
    let n = json.len();
    tensors.insert("meta".into(), Tensor::from_vec(json, n, &Device::Cpu).unwrap());
    let file = d.join("candle.safetensors");
    candle_core::safetensors::save(&tensors, &file).unwrap();

    let model = Model::load(&file, &A100_40GB).unwrap();
    assert_eq!(model.meta, meta);
    let xs = observations(&A100_40GB, &mut ChaCha8Rng::seed_from_u64(11));
    let plain: Vec<Vec<f32>> = xs.iter().map(|x| model.net.forward(x).unwrap()).collect();
    let by_candle = candle_logits(&net, &xs);
    let diff = max_diff(&plain, &by_candle);
    eprintln!(
        "fixed weights: max |logit difference| candle vs plain Rust over {} observations: {diff:e}",
        xs.len()
    );
    assert!(diff < 1e-5, "max logit difference {diff}");
    assert!(
        by_candle.iter().flatten().any(|l| l.abs() > 1.0),
        "the logits are not all near 0"
    );
    // The runtime writes the bytes candle wrote.
    let again = d.join("runtime.safetensors");
    model.save(&again).unwrap();
    assert_eq!(std::fs::read(&file).unwrap(), std::fs::read(&again).unwrap());
}

#[test]
fn the_shipped_models_give_candles_logits_and_greedy_actions_with_the_runtime() {
    let mut worst = 0.0f32;
    for (gpu, model) in [
        ("A100-40GB", &A100_40GB),
        ("A100-80GB", &A100_80GB),
        ("H100-80GB", &H100_80GB),
    ] {
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../models/learned-{gpu}.safetensors"));
        let runtime = Model::load(&file, model).unwrap();
        let net = candle_net(&file);
        let xs = observations(model, &mut ChaCha8Rng::seed_from_u64(5));
        let plain: Vec<Vec<f32>> = xs.iter().map(|x| runtime.net.forward(x).unwrap()).collect();
        let by_candle = candle_logits(&net, &xs);
        let diff = max_diff(&plain, &by_candle);
        worst = worst.max(diff);
        assert!(diff < 1e-5, "{gpu}: max logit difference {diff}");
        let mut changes = 0;
        for (p, c) in plain.iter().zip(&by_candle) {
            // Every action allowed, and keep masked (the shield's second rule).
            assert_eq!(greedy(p, |_| true), greedy(c, |_| true), "{gpu}: {c:?}");
            assert_eq!(greedy(p, |a| a > 0), greedy(c, |a| a > 0), "{gpu}: {c:?}");
            changes += usize::from(greedy(c, |_| true) > 0);
        }
        eprintln!(
            "{gpu}: max |logit difference| {diff:e} over {} observations; greedy action the same in all ({changes} changes)",
            xs.len()
        );
    }
    eprintln!("shipped models: max |logit difference| candle vs plain Rust {worst:e}");
}
