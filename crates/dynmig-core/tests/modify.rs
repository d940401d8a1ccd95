//! The decision for a job update (`modify::decide_update`).

use dynmig_core::geometry::A100_80GB;
use dynmig_core::modify::{decide_update, UpdateError};
use dynmig_core::size::GIB;
use dynmig_core::submit::{JobRequest, Outcome, SubmitError, SubmitPolicy};
use dynmig_core::types::{MultiGpu, WholeGpu};

fn policy() -> SubmitPolicy {
    SubmitPolicy {
        models: vec![&A100_80GB],
        whole_gpu: WholeGpu::FullProfile,
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
fn an_update_with_a_known_profile_passes_unchanged() {
    let out = decide_update(&node("gres:gpu:2g.20gb:1"), &policy()).unwrap();
    assert!(matches!(out, Outcome::Unchanged { .. }), "{out:?}");
}

#[test]
fn an_update_with_a_profile_the_cluster_lacks_is_refused_as_at_submit() {
    let e = decide_update(&node("gres:gpu:9g.99gb:1"), &policy()).unwrap_err();
    assert!(
        matches!(e, UpdateError::Submit(SubmitError::TypeNotOnCluster { .. })),
        "{e:?}"
    );
}

#[test]
fn an_untyped_single_gpu_update_is_refused_with_the_typed_form_to_use() {
    for tres in ["gres:gpu:1", "gres/gpu", "gres:gpu:+1"] {
        let e = decide_update(&node(tres), &policy()).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, UpdateError::UntypedSingleGpu { .. }), "{tres}: {e:?}");
        assert!(msg.starts_with("dynmig: a job update cannot size"), "{msg}");
        assert!(msg.contains("gres=gpu:2g.20gb:1"), "{msg}");
        assert!(msg.contains("profiles: 1g.10gb,"), "{msg}");
    }
    let gpus = JobRequest {
        tres_per_job: Some("gres:gpu:1"),
        ..Default::default()
    };
    assert!(matches!(
        decide_update(&gpus, &policy()),
        Err(UpdateError::UntypedSingleGpu { option: "--gpus", .. })
    ));
}

#[test]
fn an_untyped_single_gpu_update_is_refused_even_with_hints_in_the_request() {
    // An update carries no hints; anything in spank_env is not the job's and is ignored.
    let req = JobRequest {
        tres_per_node: Some("gres:gpu:1"),
        spank_env: vec!["_SLURM_SPANK_OPTION_dynmig_mig_mem=9G"],
        ..Default::default()
    };
    assert!(matches!(
        decide_update(&req, &policy()),
        Err(UpdateError::UntypedSingleGpu { .. })
    ));
}

#[test]
fn an_untyped_multi_gpu_update_is_rewritten_to_whole_gpus_as_at_submit() {
    let Outcome::Rewrite(r) = decide_update(&node("gres:gpu:2"), &policy()).unwrap() else {
        panic!("expected a rewrite")
    };
    assert_eq!(r.tres_per_node.as_deref(), Some("gres:gpu:7g.80gb:2"));
    assert_eq!(r.decision.count, 2);
    let mut p = policy();
    p.multi_gpu = MultiGpu::Reject;
    assert!(matches!(
        decide_update(&node("gres:gpu:2"), &p),
        Err(UpdateError::Submit(SubmitError::MultiGpuRejected { .. }))
    ));
}

#[test]
fn an_update_without_gpus_or_with_gpu_zero_is_left_alone() {
    assert_eq!(decide_update(&node("gres:shard:2"), &policy()), Ok(Outcome::NoGpu));
    assert_eq!(decide_update(&node("gres:gpu:0"), &policy()), Ok(Outcome::NoGpu));
    assert_eq!(decide_update(&JobRequest::default(), &policy()), Ok(Outcome::NoGpu));
}

#[test]
fn an_update_with_an_unreadable_gpu_entry_is_refused() {
    let e = decide_update(&node("gres:gpu:-1"), &policy()).unwrap_err();
    assert!(
        matches!(e, UpdateError::Submit(SubmitError::BadRequest { .. })),
        "{e:?}"
    );
}
