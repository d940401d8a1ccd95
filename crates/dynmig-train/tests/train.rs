//! The learned policy end to end: training reproduces with a seed, the model file says what it
//! was trained for and is refused elsewhere, and the simulator runs it.

use clap::Parser;
use dynmig_core::geometry::{A100_40GB, H100_80GB};
use dynmig_core::policy::PolicyLimits;
use dynmig_sim::engine::{simulate, SimConfig};
use dynmig_sim::model::ModelParams;
use dynmig_sim::policies::PolicySpec;
use dynmig_sim::workload::synthetic::{synthetic_workload, SyntheticParams};
use dynmig_train::{train, Model, TrainArgs};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: TrainArgs,
}

fn tiny(out: &std::path::Path) -> TrainArgs {
    Cli::parse_from([
        "train",
        "--synthetic",
        "--days",
        "3",
        "--nodes",
        "2",
        "--gpus-per-node",
        "8",
        "--load",
        "10",
        "--train-days",
        "0,3",
        "--iterations",
        "3",
        "--days-per-iteration",
        "1",
        "--episodes-per-day",
        "2",
        "--hidden",
        "8",
        "--out",
        out.to_str().unwrap(),
    ])
    .args
}

fn dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("dynmig-train-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn a_seed_reproduces_training_and_the_model_runs_in_the_simulator() {
    let (a, b) = (dir("a"), dir("b"));
    let ta = train(&tiny(&a)).unwrap();
    let tb = train(&tiny(&b)).unwrap();
    let ets = |t: &dynmig_train::train::Trained| -> Vec<(f64, Option<f64>)> {
        t.curve.iter().map(|p| (p.sampled_et, p.greedy_et)).collect()
    };
    assert_eq!(ets(&ta), ets(&tb), "the same seed gives the same learning curve");
    assert_eq!(
        std::fs::read(&ta.model).unwrap(),
        std::fs::read(&tb.model).unwrap(),
        "and the same model"
    );
    assert_eq!(ta.curve.len(), 3);
    assert!(
        a.join("curve.svg").exists() && a.join("curve.csv").exists() && a.join("checkpoint-1.safetensors").exists()
    );
    let svg = std::fs::read_to_string(a.join("curve.svg")).unwrap();
    assert!(svg.contains("greedy, all training days"), "the curve has its legend");

    // The simulator runs the model as its `learned` policy.
    let limits = PolicyLimits {
        max_concurrent: 1,
        ..PolicyLimits::default()
    };
    let policy = dynmig_sim::policies::learned_model::from_file(&ta.model, &A100_40GB, &limits, false).unwrap();
    let wl = synthetic_workload(
        &SyntheticParams {
            days: 1.0,
            jobs_per_hour: 4.0,
            ..SyntheticParams::default()
        },
        &ModelParams::default(),
    )
    .unwrap();
    let r = simulate(
        &wl,
        &PolicySpec::External(policy),
        &SimConfig::new(&A100_40GB, 2, 8),
        &|_| {},
    )
    .unwrap();
    assert_eq!(r.policy, "learned");
    assert_eq!(r.jobs.len(), wl.jobs.len());
}

#[test]
fn a_model_for_another_gpu_model_is_refused_with_what_it_was_trained_for() {
    let d = dir("refuse");
    let t = train(&tiny(&d)).unwrap();
    let m = Model::load(&t.model, &A100_40GB).unwrap();
    assert_eq!(m.meta.gpu_model, "A100-40GB");
    let e = Model::load(&t.model, &H100_80GB).unwrap_err().to_string();
    assert!(
        e.contains("was trained for A100-40GB GPUs") && e.contains("this cluster has H100-80GB GPUs"),
        "{e}"
    );
    std::fs::write(d.join("junk.safetensors"), b"not a model").unwrap();
    let e = Model::load(&d.join("junk.safetensors"), &A100_40GB)
        .unwrap_err()
        .to_string();
    assert!(e.contains("reading model"), "{e}");
}

/// A model that, wherever it may, takes the catalogue's last layout (seven 1g instances per
/// GPU): the worst a trained model could choose for whole-GPU jobs.
fn always_smallest(model: &'static dynmig_core::geometry::GpuModel) -> Model {
    let mut m = Model::fresh(
        dynmig_learn::catalogue::Catalogue::for_model(model),
        8,
        "test".into(),
        1,
    );
    let mut net = dynmig_learn::net::Network::zeros(m.net.inputs(), 8, m.net.actions());
    let last = net.out.bias.len() - 1;
    net.out.bias[last] = 10.0;
    m.net = net;
    m
}

#[test]
fn the_shield_runs_every_job_under_a_model_that_would_split_every_gpu() {
    let model = always_smallest(&A100_40GB);
    let limits = PolicyLimits {
        max_concurrent: 1,
        min_layout_lifetime: std::time::Duration::from_secs(600),
        ..PolicyLimits::default()
    };
    let wl = synthetic_workload(
        &SyntheticParams {
            days: 1.0,
            jobs_per_hour: 30.0,
            multi_gpu_share: 0.2,
            seed: 3,
            ..SyntheticParams::default()
        },
        &ModelParams::default(),
    )
    .unwrap();
    let whole = wl.jobs.iter().filter(|j| j.gpus > 1).count();
    assert!(whole > 0, "the workload has multi-GPU (whole-GPU) jobs");
    // Typed placement (Slurm's): the multi-GPU jobs all run on the node of whole GPUs the
    // shield keeps; single-GPU jobs of a type the model never makes (it splits every other GPU
    // into 1g instances) wait and are reported as never started.
    let spec = PolicySpec::External(dynmig_sim::policies::learned_model::external(
        &model, &limits, false, None,
    ));
    let mut cfg = SimConfig::new(&A100_40GB, 2, 8);
    let r = simulate(&wl, &spec, &cfg, &|_| {}).unwrap();
    assert!(r.reconfigs > 0, "the model did split GPUs");
    for (j, o) in wl.jobs.iter().zip(&r.jobs).filter(|(j, _)| j.gpus > 1) {
        assert_eq!(o.slices, 7, "multi-GPU job {} ran on whole GPUs", j.id);
    }
    // With the `spill-up` what-if (a job may take a larger instance), every job runs.
    cfg.what_if.spill_up = true;
    let r = simulate(&wl, &spec, &cfg, &|_| {}).unwrap();
    let never = r.jobs.iter().filter(|o| o.slices == 0).count();
    assert_eq!(
        never, 0,
        "every job ran: the last node of whole GPUs stayed while they waited"
    );
}

#[test]
fn each_gpu_model_gets_its_own_model_and_a_cluster_without_one_has_no_learned_row() {
    use dynmig_lab::evaluate::{evaluate, EvalOptions, PolicyName};
    let d = dir("per-model");
    let t = train(&tiny(&d)).unwrap();
    let limits = PolicyLimits {
        max_concurrent: 1,
        ..PolicyLimits::default()
    };
    let policies =
        dynmig_sim::policies::learned_model::load_externals(std::slice::from_ref(&t.model), &limits).unwrap();
    assert_eq!(policies[0].gpu_model, Some("A100-40GB"));
    let e = dynmig_sim::policies::learned_model::load_externals(&[t.model.clone(), t.model.clone()], &limits)
        .unwrap_err()
        .to_string();
    assert!(e.contains("two learned models for A100-40GB GPUs"), "{e}");

    let wl = synthetic_workload(
        &SyntheticParams {
            days: 2.0,
            jobs_per_hour: 4.0,
            ..SyntheticParams::default()
        },
        &ModelParams::default(),
    )
    .unwrap();
    let opts = EvalOptions {
        policies: vec![PolicyName::None, PolicyName::Learned],
        learned: policies,
        warn: false,
        threads: 1,
        limits,
        frozen: false,
        ..EvalOptions::default()
    };
    let rows = |m: &'static dynmig_core::geometry::GpuModel| {
        let ev = evaluate(&wl, &SimConfig::new(m, 2, 8), &opts, &|_, _| {}).unwrap();
        (ev.rows.iter().map(|r| r.policy.clone()).collect::<Vec<_>>(), ev.skipped)
    };
    let (a100, _) = rows(&A100_40GB);
    assert_eq!(a100, ["none", "learned"]);
    let (h100, skipped) = rows(&H100_80GB);
    assert_eq!(h100, ["none"]);
    assert!(
        skipped
            .iter()
            .any(|w| w.contains("no model was trained for H100-80GB GPUs (models given for A100-40GB)")),
        "{skipped:?}"
    );
}
