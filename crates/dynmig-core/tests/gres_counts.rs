//! GPU counts read the way Slurm reads them (review findings M2, L1, L2).

use dynmig_core::geometry::A100_80GB;
use dynmig_core::gres::TresList;
use dynmig_core::size::GIB;
use dynmig_core::submit::{decide, JobRequest, MultiGpu, Outcome, SubmitError, SubmitPolicy, WholeGpu};

fn policy(whole_gpu: WholeGpu) -> SubmitPolicy {
    SubmitPolicy {
        models: vec![&A100_80GB],
        whole_gpu,
        multi_gpu: MultiGpu::FullProfile,
        default_mem_bytes: 8 * GIB,
        catalog: Default::default(),
    }
}

fn node(tres: &'static str) -> JobRequest<'static> {
    JobRequest {
        tres_per_node: Some(tres),
        ..Default::default()
    }
}

#[test]
fn a_plus_sign_count_is_rewritten_not_passed_through() {
    for tres in ["gres:gpu:+1", "gres/gpu:+1", "gpu:+1", "gres:gpu=+1"] {
        let Ok(Outcome::Rewrite(r)) = decide(&node(tres), &policy(WholeGpu::FullProfile)) else {
            panic!("{tres}: expected a rewrite")
        };
        let out = r.tres_per_node.unwrap();
        assert!(out.contains("7g.80gb") && !out.contains('+'), "{tres} -> {out}");
    }
}

#[test]
fn a_plus_sign_count_cannot_bypass_whole_gpu_reject() {
    let e = decide(&node("gres:gpu:+1"), &policy(WholeGpu::Reject)).unwrap_err();
    assert!(matches!(e, SubmitError::HintNeeded { .. }), "{e:?}");
}

#[test]
fn a_space_before_the_count_is_read_as_a_count() {
    let t = TresList::parse("gres:gpu: 1").unwrap();
    let g = t.gpu_entries().next().unwrap();
    assert_eq!((g.gres_type.as_deref(), g.count), (None, 1));
    assert!(matches!(
        decide(&node("gres:gpu: 1"), &policy(WholeGpu::FullProfile)),
        Ok(Outcome::Rewrite(_))
    ));
    let t = TresList::parse("gres:gpu:\t2").unwrap();
    assert_eq!(t.gpu_entries().next().unwrap().count, 2);
}

#[test]
fn leading_zero_counts_are_read_as_numbers() {
    let Ok(Outcome::Rewrite(r)) = decide(&node("gres:gpu:001"), &policy(WholeGpu::FullProfile)) else {
        panic!("expected a rewrite")
    };
    assert_eq!(r.tres_per_node.as_deref(), Some("gres:gpu:7g.80gb:1"));
    let t = TresList::parse("gres:gpu:a100:+02").unwrap();
    let g = t.gpu_entries().next().unwrap();
    assert_eq!((g.gres_type.as_deref(), g.count), (Some("a100"), 2));
}

#[test]
fn a_count_0_entry_is_left_unchanged_beside_a_real_request() {
    let Ok(Outcome::Rewrite(r)) = decide(&node("gres:gpu:0,gres:gpu:1"), &policy(WholeGpu::FullProfile)) else {
        panic!("expected a rewrite")
    };
    assert_eq!(r.tres_per_node.as_deref(), Some("gres:gpu:0,gres:gpu:7g.80gb:1"));
    let mut t = TresList::parse("gres:gpu:0").unwrap();
    assert!(!t.set_gpu(Some("1g.10gb"), 1), "nothing to set");
    assert_eq!(t.render(), "gres:gpu:0");
    assert!(t.remove_gpu().is_empty());
}

#[test]
fn a_count_above_u32_max_is_an_error_naming_the_entry_not_clamped() {
    for tres in [
        "gres:gpu:4294967296",
        "gres:gpu=99999999999999999999999",
        "gres:gpu:1g.10gb:4294967296",
    ] {
        let e = TresList::parse(tres).unwrap_err();
        assert!(e.to_string().contains(tres), "{e}");
        assert!(e.why.contains("more than 4294967295"), "{e}");
    }
    let t = TresList::parse("gres:gpu:4294967295").unwrap();
    assert_eq!(t.gpu_entries().next().unwrap().count, u64::from(u32::MAX));
    let e = decide(&node("gres:gpu:4294967296"), &policy(WholeGpu::FullProfile)).unwrap_err();
    assert!(e.to_string().contains("gres:gpu:4294967296"), "{e}");
}

#[test]
fn a_negative_or_suffixed_gpu_count_is_an_error_not_a_type() {
    for (tres, why) in [("gres:gpu:-1", "negative"), ("gres:gpu:1k", "plain digits")] {
        let e = TresList::parse(tres).unwrap_err();
        assert!(e.why.contains(why), "{tres}: {e}");
    }
    // Other GRES keep Slurm's own forms byte for byte.
    assert_eq!(TresList::parse("gres:mps:100k").unwrap().render(), "gres:mps:100k");
}

#[test]
fn a_long_bad_gpu_entry_is_quoted_cut() {
    let long: &'static str = Box::leak(format!("gres:gpu:a:{}:2", "9".repeat(5000)).into_boxed_str());
    let e = TresList::parse(long).unwrap_err().to_string();
    assert!(e.len() < 300 && e.contains("..."), "{} bytes", e.len());
}
