//! The estimator: the model formula against published measurements, the order of the
//! sources in the submit decision, and the error model the simulator samples.
//!
//! `cargo test -p dynmig-core --test estimate -- --nocapture` prints the error table.

use dynmig_core::config::Config;
use dynmig_core::estimate::error_model::{model_errors, point_errors};
use dynmig_core::estimate::history::{HistorySnapshot, PastJob};
use dynmig_core::estimate::measured::{MEASURED, MEASURED_CUDA_CONTEXT_BYTES, MEASURED_NOT_TRANSFORMER};
use dynmig_core::estimate::model_formula::{Phase, DEFAULT_CUDA_CONTEXT_BYTES};
use dynmig_core::estimate::reference::REFERENCE;
use dynmig_core::estimate::{next_larger_profile, ErrorModel, EstimateContext, EstimatorConfig, JobIdentity};
use dynmig_core::geometry::{GpuModel, A100_80GB, H100_80GB};
use dynmig_core::hints::smallest_fitting;
use dynmig_core::size::{format_size, GIB, MIB};
use dynmig_core::submit::{decide_with, JobRequest, Outcome, SubmitPolicy};
use dynmig_core::types::{EstimateSource, MultiGpu, WholeGpu};

fn policy(whole_gpu: WholeGpu) -> SubmitPolicy {
    SubmitPolicy {
        models: vec![&A100_80GB],
        whole_gpu,
        multi_gpu: MultiGpu::FullProfile,
        catalog: Default::default(),
        default_mem_bytes: 8 * GIB,
    }
}

fn gpu1(env: &[&'static str]) -> JobRequest<'static> {
    JobRequest {
        tres_per_node: Some("gres:gpu:1"),
        spank_env: env.to_vec(),
        ..Default::default()
    }
}

fn decided(req: &JobRequest, p: &SubmitPolicy, cx: &EstimateContext) -> (String, EstimateSource, u64) {
    match decide_with(req, p, cx) {
        Ok(Outcome::Rewrite(r)) => (
            r.decision.profile.to_string(),
            r.decision.source,
            r.decision.memory_bytes,
        ),
        other => panic!("expected a rewrite, got {other:?}"),
    }
}

#[test]
fn formula_against_published_measurements() {
    let cfg = EstimatorConfig::default();
    let rows = model_errors(&cfg);
    assert_eq!(rows.len(), REFERENCE.len());
    println!(
        "{:<32} {:>10} {:>10} {:>8}",
        "workload", "estimate", "published", "error"
    );
    for (name, est, measured, r) in &rows {
        println!(
            "{name:<32} {:>10} {:>10} {:>+7.1}%",
            format_size(*est),
            format_size(*measured),
            r * 100.0
        );
    }
    let m = ErrorModel::reference(&cfg);
    let s = m.summary(EstimateSource::Model).unwrap();
    println!(
        "model formula: n={} median |error| {:.1}%, worst {:.1}%, underestimates {:.0}% of rows",
        s.n,
        s.median_abs * 100.0,
        s.worst_abs * 100.0,
        s.under_rate * 100.0
    );
    // Large models are dominated by weights and KV cache, which the formula gets right; the
    // fitted margins (1.34 training, 1.29 inference) put these rows up to a third over.
    for (name, est, measured, r) in &rows {
        if *measured > 12 * GIB {
            assert!(
                (-0.10..0.45).contains(r),
                "{name}: estimate {est} vs published {measured}: {r}"
            );
        }
    }
    assert!(s.median_abs < 0.25, "median error {}", s.median_abs);
}

/// The profile `smallest_fitting` picks for `bytes` on `model`, or "none" above the largest.
fn chosen(model: &'static GpuModel, bytes: u64) -> &'static str {
    smallest_fitting(&[model], bytes).map_or("none", |(_, p)| p.name)
}

/// The formula against the peaks measured on an H100 (estimate::measured, docs/results/
/// estimator-gpu-2026-11-26.md): the error, and whether the profile chosen from the estimate
/// holds the measured peak (too small = the job runs out of memory).
#[test]
fn formula_against_gpu_measurements() {
    let cfg = EstimatorConfig::default();
    let rows = point_errors(&MEASURED, &cfg);
    // Every row's estimate is computed (none is refused).
    assert_eq!(rows.len(), 8);
    assert_eq!(rows.len(), MEASURED.len());
    let other = point_errors(&MEASURED_NOT_TRANSFORMER, &cfg);
    assert_eq!(other.len(), 2);
    println!(
        "{:<32} {:>10} {:>10} {:>8}  {:<9} {:<9} {:<9}",
        "workload (H100 80GB HBM3)", "estimate", "measured", "error", "chosen", "needed", "holds"
    );
    let mut too_small = Vec::new();
    let mut oversized = Vec::new();
    for (i, (name, est, measured, r)) in rows.iter().chain(other.iter()).enumerate() {
        let pick = chosen(&H100_80GB, *est);
        let need = chosen(&H100_80GB, *measured);
        let holds = H100_80GB.profile(pick).is_some_and(|p| p.memory_mib * MIB >= *measured);
        let note = if i >= rows.len() {
            "  (not a transformer: does not apply)"
        } else {
            ""
        };
        println!(
            "{name:<32} {:>10} {:>10} {:>+7.1}%  {pick:<9} {need:<9} {:<9}{note}",
            format_size(*est),
            format_size(*measured),
            r * 100.0,
            if holds { "yes" } else { "NO (OOM)" }
        );
        if i < rows.len() {
            if !holds {
                too_small.push(*name);
            }
            if pick != need {
                oversized.push(*name);
            }
            // The A100-80GB table chooses the same profile for these estimates.
            assert_eq!(chosen(&A100_80GB, *est), pick, "{name}");
        }
    }
    let mut abs: Vec<f64> = rows.iter().map(|r| r.3.abs()).collect();
    abs.sort_by(f64::total_cmp);
    let median = (abs[3] + abs[4]) / 2.0;
    println!(
        "measured table: n={} median |error| {:.1}%, worst {:.1}%, underestimates {} of {}; \
         CUDA context measured {} (formula: {})",
        rows.len(),
        median * 100.0,
        abs[abs.len() - 1] * 100.0,
        rows.iter().filter(|r| r.3 < 0.0).count(),
        rows.len(),
        format_size(MEASURED_CUDA_CONTEXT_BYTES),
        format_size(DEFAULT_CUDA_CONTEXT_BYTES)
    );
    // No measured transformer row runs out of memory on the profile its estimate chooses.
    assert_eq!(too_small, Vec::<&str>::new());
    // At most one row gets a larger profile than its peak needs, and never by more than one
    // size: Llama 7B inference at 4096 tokens (16.5 GiB) gets a 3g.40gb for the fitted
    // inference margin of 1.29.
    assert!(oversized.len() <= 1, "{oversized:?}");
    for ((name, _, _, r), p) in rows.iter().zip(MEASURED.iter()) {
        // None is under (the margins were fitted so that no fit row gets too small a
        // profile); inference within 25%, training (Llama 1B's bf16 is the widest) within 35%.
        let top = match p.spec.phase {
            Phase::Infer => 0.25,
            Phase::Train => 0.35,
        };
        assert!((0.0..top).contains(r), "{name}: {r}");
    }
}

#[test]
fn error_model_samples_are_the_distribution() {
    let cfg = EstimatorConfig::default();
    let m = ErrorModel::reference(&cfg);
    let v = m.relative_errors(EstimateSource::Model).unwrap().to_vec();
    // The published table's whole-process rows (both halves) join the two tables.
    let published = dynmig_core::estimate::published::nvml_errors(&cfg);
    assert!(published.len() >= 36, "{} published rows", published.len());
    assert_eq!(v.len(), REFERENCE.len() + MEASURED.len() + published.len());
    assert_eq!(m.sample(EstimateSource::Model, 0.0), Some(v[0]));
    assert_eq!(m.sample(EstimateSource::Model, 1.0), Some(*v.last().unwrap()));
    let mid = m.sample(EstimateSource::Model, 0.5).unwrap();
    assert!(v[0] <= mid && mid <= *v.last().unwrap());
    let h = m.sample(EstimateSource::History, 0.3).unwrap();
    assert!((h - (cfg.history_margin - 1.0)).abs() < 1e-12);
    assert_eq!(
        m.estimate_bytes(EstimateSource::MigMemHint, 10 * GIB, 0.7),
        Some(10 * GIB)
    );
    assert_eq!(m.sample(EstimateSource::Default, 0.5), None);
    let mut custom = m.clone();
    custom.set(EstimateSource::Model, vec![-0.5, f64::NAN, 0.5]);
    assert_eq!(custom.relative_errors(EstimateSource::Model), Some(&[-0.5, 0.5][..]));
    assert_eq!(custom.estimate_bytes(EstimateSource::Model, 100, 0.5), Some(100));
    assert_eq!(custom.summary(EstimateSource::Model).unwrap().under_rate, 0.5);
}

#[test]
fn submit_uses_the_sources_in_order() {
    let cfg = Config::default_embedded().estimator;
    let jobs: Vec<PastJob> = [12u64, 13, 14]
        .iter()
        .map(|g| PastJob {
            uid: 1000,
            job_name: "ft".into(),
            peak_bytes: g * GIB,
            oom: false,
        })
        .collect();
    let snap = HistorySnapshot::from_jobs(&jobs, cfg.history_quantile, cfg.history_window as usize);
    let cx = EstimateContext {
        settings: Some(&cfg),
        job: Some(JobIdentity {
            uid: 1000,
            job_name: "ft",
        }),
        history: Some(&snap),
    };
    let p = policy(WholeGpu::FullProfile);
    // History: 14 GiB x 1.1 = 15.4 GiB -> 2g.20gb.
    let (profile, source, mem) = decided(&gpu1(&[]), &p, &cx);
    assert_eq!((profile.as_str(), source), ("2g.20gb", EstimateSource::History));
    assert!(mem > 15 * GIB && mem < 16 * GIB, "{mem}");
    // A model description beats the history: 1.3B bf16 inference -> about 3.2 GiB -> 1g.10gb.
    let model = gpu1(&[
        "_SLURM_SPANK_OPTION_dynmig_mig_model_params=1.3B",
        "_SLURM_SPANK_OPTION_dynmig_mig_phase=infer",
    ]);
    let (profile, source, _) = decided(&model, &p, &cx);
    assert_eq!((profile.as_str(), source), ("1g.10gb", EstimateSource::Model));
    // --mig-mem beats both.
    let mem = gpu1(&[
        "_SLURM_SPANK_OPTION_dynmig_mig_mem=30G",
        "_SLURM_SPANK_OPTION_dynmig_mig_model_params=1.3B",
    ]);
    assert_eq!(decided(&mem, &p, &cx).1, EstimateSource::MigMemHint);
    // Without history: the full profile, as before.
    let (profile, source, _) = decided(&gpu1(&[]), &p, &EstimateContext::default());
    assert_eq!((profile.as_str(), source), ("7g.80gb", EstimateSource::WholeGpu));
    // Too few samples: no history.
    let few = HistorySnapshot::from_jobs(&jobs[..2], 0.95, 50);
    let cx_few = EstimateContext {
        history: Some(&few),
        ..cx
    };
    assert_eq!(
        decided(&gpu1(&[]), &policy(WholeGpu::Estimate), &cx_few).1,
        EstimateSource::Default
    );
}

#[test]
fn absurd_models_are_refused_with_the_terms() {
    let p = policy(WholeGpu::FullProfile);
    let req = gpu1(&["_SLURM_SPANK_OPTION_dynmig_mig_model_params=7B"]);
    let e = decide_with(&req, &p, &EstimateContext::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("dynmig: --mig-model-params=7B --mig-dtype=bf16 --mig-phase=train"),
        "{e}"
    );
    assert!(
        e.contains("optimizer 78.2GiB") && e.contains("7g.80gb (79.0GiB)"),
        "{e}"
    );
    let no_gpu = JobRequest {
        spank_env: vec!["_SLURM_SPANK_OPTION_dynmig_mig_model_params=7B"],
        ..Default::default()
    };
    let e = decide_with(&no_gpu, &p, &EstimateContext::default())
        .unwrap_err()
        .to_string();
    assert_eq!(e, "dynmig: --mig-model-params needs a GPU request: add --gres=gpu:1");
}

#[test]
fn out_of_memory_moves_to_the_next_profile() {
    let models = [&A100_80GB];
    let chain: Vec<&str> =
        std::iter::successors(Some("1g.10gb"), |p| next_larger_profile(&models, p).map(|s| s.name)).collect();
    assert_eq!(chain, ["1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"]);
}
