//! Unit tests of [`super`]'s model hints.

use super::*;

#[test]
fn model_options() {
    let env = [
        "_SLURM_SPANK_OPTION_dynmig_mig_model_params=7B",
        "_SLURM_SPANK_OPTION_dynmig_mig_dtype=BF16",
        "_SLURM_SPANK_OPTION_dynmig_mig_phase=infer",
        "_SLURM_SPANK_OPTION_dynmig_mig_batch=4",
        "_SLURM_SPANK_OPTION_dynmig_mig_seq=4096",
    ];
    let h = hints_from_spank_env(&env).unwrap();
    let spec = h.model.spec().unwrap();
    assert_eq!(
        (spec.params, spec.dtype, spec.phase, spec.batch, spec.seq),
        (7_000_000_000, Dtype::Bf16, Phase::Infer, 4, 4096)
    );
    assert!(!h.is_empty());
    assert_eq!(h.describe().as_deref(), Some("--mig-model-params=7000000000"));
}

/// Issue 25: fp8 was refused everywhere; it is refused only where no configured model
/// runs it, and the formats listed are the cluster's.
#[test]
fn fp8_where_a_configured_model_runs_it() {
    use crate::geometry::{A100_80GB, A30_24GB, B200_180GB, H100_80GB};
    let e = parse_hint_for("mig-dtype", "fp8", Some(&[&A100_80GB])).unwrap_err();
    assert_eq!(
        e.to_string(),
        "dynmig: --mig-dtype=fp8: no GPU model of this cluster runs fp8 (A100-80GB); allowed: fp32, fp16, bf16, int8, int4"
    );
    let e = parse_hint_for("mig-dtype", "FP8", Some(&[&A100_80GB, &A30_24GB])).unwrap_err();
    assert!(e.to_string().contains("(A100-80GB, A30-24GB)"), "{e}");
    for cluster in [&[&H100_80GB][..], &[&A100_80GB, &B200_180GB][..]] {
        assert_eq!(
            parse_hint_for("mig-dtype", "fp8", Some(cluster)),
            Ok(Hint::Dtype(Dtype::Fp8))
        );
    }
    // The SPANK plugin does not know the cluster: fp8 passes there.
    assert_eq!(parse_hint("mig-dtype", "fp8"), Ok(Hint::Dtype(Dtype::Fp8)));
    let e = parse_hint_for("mig-dtype", "fp4", Some(&[&A100_80GB]))
        .unwrap_err()
        .to_string();
    assert!(
        e.ends_with("unknown number format; allowed: fp32, fp16, bf16, int8, int4"),
        "{e}"
    );
    let e = parse_hint_for("mig-dtype", "fp4", Some(&[&H100_80GB]))
        .unwrap_err()
        .to_string();
    assert!(e.ends_with("allowed: fp32, fp16, bf16, fp8, int8, int4"), "{e}");
    // Integer training names the formats the cluster trains in.
    let env = [
        "_SLURM_SPANK_OPTION_dynmig_mig_model_params=7B",
        "_SLURM_SPANK_OPTION_dynmig_mig_dtype=int8",
    ];
    let e = hints_from_spank_env_for(&env, Some(&[&A100_80GB]))
        .unwrap_err()
        .to_string();
    assert!(e.ends_with("train in fp32, fp16 or bf16"), "{e}");
    let e = hints_from_spank_env_for(&env, Some(&[&H100_80GB]))
        .unwrap_err()
        .to_string();
    assert!(e.ends_with("train in fp32, fp16, bf16 or fp8"), "{e}");
}

#[test]
fn bad_model_options_say_what_is_allowed() {
    let e = parse_hint("mig-dtype", "fp4").unwrap_err().to_string();
    assert_eq!(
        e,
        "dynmig: --mig-dtype=fp4: unknown number format; allowed: fp32, fp16, bf16, fp8, int8, int4"
    );
    let e = parse_hint("mig-phase", "serve").unwrap_err().to_string();
    assert!(e.ends_with("allowed: train, infer"), "{e}");
    let e = parse_hint("mig-batch", "0").unwrap_err().to_string();
    assert_eq!(e, "dynmig: --mig-batch=0: not a whole number from 1 to 65536");
    assert!(parse_hint("mig-seq", "99999999").is_err());
    let e = parse_hint("mig-model-params", "5000T").unwrap_err().to_string();
    assert!(e.contains("more than any GPU holds"), "{e}");
    let e = hints_from_spank_env(&["_SLURM_SPANK_OPTION_dynmig_mig_seq=128"])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("--mig-seq describes a model: give --mig-model-params too"),
        "{e}"
    );
    let env = [
        "_SLURM_SPANK_OPTION_dynmig_mig_model_params=7B",
        "_SLURM_SPANK_OPTION_dynmig_mig_dtype=int4",
    ];
    let e = hints_from_spank_env(&env).unwrap_err().to_string();
    assert!(e.contains("training in int4 is not supported"), "{e}");
}
