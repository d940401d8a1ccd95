//! Unit tests of [`super`].

use super::*;
use crate::geometry::{A100_40GB, A100_80GB, H200_141GB};
use crate::size::{GIB, MIB};

#[test]
fn the_model_options_parse_check_and_need_the_parameter_count() {
    use crate::estimate::model_formula::{Attention, Optimizer};
    assert_eq!(parse_hint("mig-optimizer", "SGD"), Ok(Hint::Optimizer(Optimizer::Sgd)));
    assert_eq!(
        parse_hint("mig-attention", "eager"),
        Ok(Hint::Attention(Attention::Eager))
    );
    assert_eq!(parse_hint("mig-vocab", "0"), Ok(Hint::Vocab(0)));
    assert_eq!(parse_hint("mig_kv_heads", "8"), Ok(Hint::KvHeads(8)));
    assert_eq!(parse_hint("mig-lora-rank", "16"), Ok(Hint::LoraRank(16)));
    assert_eq!(
        parse_hint("mig-act-per-sample", "100M"),
        Ok(Hint::ActPerSample(100 * MIB))
    );
    let e = parse_hint("mig-act-per-sample", "0").unwrap_err().to_string();
    assert!(e.contains("more than 0") && e.contains("e.g. 100M"), "{e}");
    let e = parse_hint("mig-optimizer", "lion").unwrap_err().to_string();
    assert_eq!(
        e,
        "dynmig: --mig-optimizer=lion: unknown optimizer; allowed: adamw, sgd, adam8bit, none"
    );
    assert!(parse_hint("mig-vocab", "-1")
        .unwrap_err()
        .to_string()
        .contains("from 0"));
    assert!(parse_hint("mig-lora-rank", "0").is_err());
    let e = hints_from_spank_env(&["_SLURM_SPANK_OPTION_dynmig_mig_lora_rank=8"]).unwrap_err();
    assert!(e.to_string().contains("--mig-lora-rank describes a model"), "{e}");
    // Key/value heads must divide the shape's heads (6.7B: 32).
    let e = hints_from_spank_env(&[
        "_SLURM_SPANK_OPTION_dynmig_mig_model_params=6.7B",
        "_SLURM_SPANK_OPTION_dynmig_mig_kv_heads=5",
    ])
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("dynmig: --mig-kv-heads=5: 5 key/value heads"), "{e}");
    assert!(e.contains("divisor of 32"), "{e}");
    let ok = hints_from_spank_env(&[
        "_SLURM_SPANK_OPTION_dynmig_mig_model_params=6.7B",
        "_SLURM_SPANK_OPTION_dynmig_mig_kv_heads=8",
        "_SLURM_SPANK_OPTION_dynmig_mig_phase=infer",
    ])
    .unwrap();
    assert_eq!(ok.model.spec().unwrap().options.kv_heads, Some(8));
}

#[test]
fn parses_both_options() {
    assert_eq!(parse_hint("mig-mem", "18G"), Ok(Hint::MigMem(18 * GIB)));
    assert_eq!(parse_hint("mig_mem", "18G"), Ok(Hint::MigMem(18 * GIB)));
    assert_eq!(
        parse_hint("mig-profile", "2G.20GB"),
        Ok(Hint::MigProfile("2g.20gb".into()))
    );
}

/// Issue 25: `--mig-profile=5g.50gb` listed the ~40 profiles of every known model; the
/// list is the configured models' profiles.
#[test]
fn an_unknown_profile_lists_only_the_clusters_profiles() {
    let a100 = [&A100_80GB];
    let e = parse_hint_for("mig-profile", "5g.50gb", Some(&a100))
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "dynmig: --mig-profile=5g.50gb: unknown MIG profile; allowed: 1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb"
    );
    // A profile of another model is not on this cluster.
    let e = parse_hint_for("mig-profile", "1g.5gb", Some(&a100))
        .unwrap_err()
        .to_string();
    assert!(
        e.ends_with("allowed: 1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb"),
        "{e}"
    );
    let e = parse_hint_for("mig-profile", "1g.10gb+me", Some(&a100)).unwrap_err();
    assert!(matches!(e, HintError::UnknownProfile { .. }));
    let mixed = [&A100_80GB, &H200_141GB];
    let e = parse_hint_for("mig-profile", "5g.50gb", Some(&mixed))
        .unwrap_err()
        .to_string();
    assert!(e.contains("7g.80gb, 1g.18gb,") && e.ends_with("7g.141gb"), "{e}");
    assert!(!e.contains("1g.5gb") && !e.contains("+me"), "{e}");
    assert_eq!(
        parse_hint_for("mig-profile", "3G.40GB", Some(&a100)),
        Ok(Hint::MigProfile("3g.40gb".into()))
    );
}

/// Without the cluster's models (the SPANK plugin), only the shape is checked and no
/// model's profiles are listed.
#[test]
fn without_the_models_only_the_profile_shape_is_checked() {
    assert_eq!(
        parse_hint("mig-profile", "5G.50GB"),
        Ok(Hint::MigProfile("5g.50gb".into()))
    );
    let e = parse_hint("mig-profile", "big").unwrap_err().to_string();
    assert!(
        e.starts_with("dynmig: --mig-profile=big: unknown MIG profile; a MIG profile is named"),
        "{e}"
    );
    assert!(!e.contains("1g.5gb") && !e.contains("allowed"), "{e}");
    for me in ["1g.10gb+me", "5g.50gb+ME"] {
        let e = parse_hint("mig-profile", me).unwrap_err();
        assert!(matches!(e, HintError::UnknownProfile { .. }), "{me}");
    }
}

#[test]
fn messages_say_what_is_wrong_and_allowed() {
    let e = parse_hint("mig-mem", "-1G").unwrap_err().to_string();
    assert_eq!(
        e,
        "dynmig: --mig-mem=-1G: a size cannot be negative, e.g. --mig-mem=18G"
    );
    let e = parse_hint("mig-model", "x").unwrap_err().to_string();
    assert!(e.contains("unknown option --mig-model"), "{e}");
}

#[test]
fn spank_env_entries() {
    let env = [
        "OTHER=1",
        "_SLURM_SPANK_OPTION_other_mig_mem=99Q",
        "_SLURM_SPANK_OPTION_dynmig_mig_mem=4G",
        "_SLURM_SPANK_OPTION_dynmig_future_option=1",
        "_SLURM_SPANK_OPTION_dynmig_mig_mem=18G",
        "_SLURM_SPANK_OPTION_dynmig_mig_profile=3g.40gb",
    ];
    let h = hints_from_spank_env(&env).unwrap();
    assert_eq!(
        h,
        Hints {
            mem_bytes: Some(18 * GIB),
            profile: Some("3g.40gb".into()),
            model: ModelHints::default(),
        }
    );
    assert!(hints_from_spank_env(&[]).unwrap().is_empty());
    let bad = ["_SLURM_SPANK_OPTION_dynmig_mig_mem=18Q"];
    assert!(hints_from_spank_env(&bad)
        .unwrap_err()
        .to_string()
        .contains("unknown unit 'Q'"));
}

#[test]
fn profile_must_hold_the_memory_hint() {
    let env = [
        "_SLURM_SPANK_OPTION_dynmig_mig_mem=30G",
        "_SLURM_SPANK_OPTION_dynmig_mig_profile=2g.20gb",
    ];
    let e = hints_from_spank_env(&env).unwrap_err().to_string();
    // The largest 2g.20gb of the known models: the H100's 20096 MiB (NVML).
    assert!(e.contains("--mig-profile=2g.20gb has 19.6GiB"), "{e}");
    // The smallest profile holding 30G on the models that have a 2g.20gb (A100-80GB,
    // H100-80GB), not another model's (the H200's 2g.35gb).
    assert!(e.contains("(e.g. 3g.40gb)"), "{e}");
    let e = hints_from_spank_env_for(&env, Some(&[&A100_80GB]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("has 19.5GiB") && e.contains("(e.g. 3g.40gb)"), "{e}");
}

/// Issue 25: user text reaches slurmctld's log; a newline or an ESC in it must come out
/// escaped, so it can neither start a forged log line nor drive a terminal.
#[test]
fn control_characters_in_user_text_are_escaped() {
    let name = "train\nslurmctld: fake line\x1b[2J\r\t\x7f\u{85}\u{202e}end\\n";
    let shown = escape_control(name);
    assert_eq!(
        shown,
        "train\\nslurmctld: fake line\\x1b[2J\\r\\t\\x7f\\u{0085}\\u{202e}end\\n"
    );
    assert!(!shown.chars().any(|c| c.is_control()), "{shown}");
    assert_eq!(shorten(name, MAX_QUOTED), shown);
    // Cut after escaping, never inside an escape.
    assert_eq!(shorten("ab\x1bcd", 4), "ab...");
    assert_eq!(shorten("ab\x1bcd", 6), "ab\\x1b...");
    assert_eq!(shorten("\x1b", 4), "\\x1b");
    // Values quoted in messages are escaped too.
    let e = parse_hint("mig-mem", "18\nQ").unwrap_err().to_string();
    assert!(e.starts_with("dynmig: --mig-mem=18\\nQ:"), "{e}");
    assert!(!e.contains('\n'), "{e}");
    let e = parse_hint("mig-model-params", "7\x1bX").unwrap_err().to_string();
    assert!(
        !e.contains('\x1b') && e.contains("'7\\x1bX' is not a parameter count"),
        "{e}"
    );
    let e = parse_hint("mig-profile", "big\n").unwrap_err().to_string();
    assert!(!e.contains('\n'), "{e}");
}

#[test]
fn smallest_fitting_skips_double_memory_1g() {
    let m = [&A100_80GB];
    assert_eq!(smallest_fitting(&m, 18 * GIB).unwrap().1.name, "2g.20gb");
    assert_eq!(smallest_fitting(&m, 9 * GIB).unwrap().1.name, "1g.10gb");
    assert_eq!(smallest_fitting(&m, 20 * GIB).unwrap().1.name, "3g.40gb");
    assert!(smallest_fitting(&m, 80 * GIB).is_none());
    let both = [&A100_40GB, &A100_80GB];
    assert_eq!(smallest_fitting(&both, 4 * GIB).unwrap().1.name, "1g.5gb");
    assert_eq!(smallest_fitting(&both, 18 * GIB).unwrap().1.name, "2g.20gb");
}

#[test]
fn smallest_fitting_in_skips_what_is_not_auto_selectable_and_keeps_the_tag() {
    let m = &A100_80GB;
    let tagged = || m.profiles.iter().enumerate().rev();
    let (i, p) = smallest_fitting_in(tagged(), 9728 * MIB).unwrap();
    assert_eq!((p.name, std::ptr::eq(p, &m.profiles[i])), ("1g.10gb", true));
    assert!(
        smallest_fitting_in(tagged().filter(|(_, p)| p.name != "2g.20gb"), 18 * GIB)
            .is_some_and(|(_, p)| p.name == "3g.40gb")
    );
    assert_eq!(smallest_fitting_in(tagged(), 0).unwrap().1.name, "1g.10gb");
    assert!(smallest_fitting_in(tagged(), u64::MAX).is_none());
    assert!(smallest_fitting_in(std::iter::empty::<((), &ProfileSpec)>(), 1).is_none());
}

/// The H200's 1g.18gb holds 16384 MiB as NVML reports it (docs/results/hardware-2026-11-26.md),
/// not the nominal 17472 the table held before: a job between the two needs a 2g.35gb.
#[test]
fn h200_one_slice_holds_what_nvml_reports() {
    let m = [&H200_141GB];
    assert_eq!(smallest_fitting(&m, 16384 * MIB).unwrap().1.name, "1g.18gb");
    assert_eq!(smallest_fitting(&m, 17000 * MIB).unwrap().1.name, "2g.35gb");
    assert_eq!(smallest_fitting(&m, 33281 * MIB).unwrap().1.name, "3g.71gb");
}
