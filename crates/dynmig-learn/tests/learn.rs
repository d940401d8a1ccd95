//! The learned policy end to end: training reproduces with a seed, the model file says what it
//! was trained for and is refused elsewhere, and the simulator runs it.

use clap::Parser;
use dynmig_core::geometry::{A100_40GB, H100_80GB};
use dynmig_core::policy::PolicyLimits;
use dynmig_learn::{load_external, train, Model, TrainArgs};
use dynmig_sim::engine::{simulate, SimConfig};
use dynmig_sim::model::ModelParams;
use dynmig_sim::policies::PolicySpec;
use dynmig_sim::workload::synthetic::{synthetic_workload, SyntheticParams};

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
    let d = std::env::temp_dir().join(format!("dynmig-learn-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn a_seed_reproduces_training_and_the_model_runs_in_the_simulator() {
    let (a, b) = (dir("a"), dir("b"));
    let ta = train(&tiny(&a)).unwrap();
    let tb = train(&tiny(&b)).unwrap();
    let ets = |t: &dynmig_learn::train::Trained| -> Vec<(f64, Option<f64>)> {
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
    let policy = load_external(&ta.model, &A100_40GB, &limits).unwrap();
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
