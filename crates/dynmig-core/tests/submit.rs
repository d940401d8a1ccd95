//! The job_submit decision on representative requests.

use dynmig_core::geometry::{A100_40GB, A100_80GB};
use dynmig_core::size::GIB;
use dynmig_core::submit::{decide, Decision, JobRequest, Outcome, Rewrite, SubmitError, SubmitPolicy};
use dynmig_core::types::{EstimateSource, MultiGpu, WholeGpu};

fn policy() -> SubmitPolicy {
    SubmitPolicy {
        models: vec![&A100_80GB],
        whole_gpu: WholeGpu::FullProfile,
        multi_gpu: MultiGpu::FullProfile,
        default_mem_bytes: 8 * GIB,
        catalog: Default::default(),
    }
}

const MEM18: &str = "_SLURM_SPANK_OPTION_dynmig_mig_mem=18G";

fn node(tres: &str, env: &[&'static str]) -> JobRequest<'static> {
    JobRequest {
        tres_per_node: Some(Box::leak(tres.to_string().into_boxed_str())),
        spank_env: env.to_vec(),
        ..Default::default()
    }
}

fn rewrite(req: &JobRequest, p: &SubmitPolicy) -> Rewrite {
    match decide(req, p) {
        Ok(Outcome::Rewrite(r)) => r,
        other => panic!("expected a rewrite, got {other:?}"),
    }
}

fn error(req: &JobRequest, p: &SubmitPolicy) -> String {
    let e = decide(req, p).expect_err("expected an error");
    let s = e.to_string();
    assert!(s.starts_with("dynmig: "), "{s}");
    s
}

#[test]
fn no_gpu_request_is_left_alone() {
    assert_eq!(decide(&JobRequest::default(), &policy()), Ok(Outcome::NoGpu));
    let req = node("gres:shard:2", &["OTHER=1"]);
    assert_eq!(decide(&req, &policy()), Ok(Outcome::NoGpu));
    assert_eq!(decide(&node("gres:gpu:0", &[]), &policy()), Ok(Outcome::NoGpu));
}

#[test]
fn mig_mem_18g_on_a100_80gb_gets_2g_20gb_not_the_double_memory_1g() {
    let r = rewrite(&node("gres:gpu:1", &[MEM18]), &policy());
    assert_eq!(r.tres_per_node.as_deref(), Some("gres:gpu:2g.20gb:1"));
    assert_eq!(
        (
            r.tres_per_job.as_deref(),
            r.tres_per_socket.as_deref(),
            r.tres_per_task.as_deref()
        ),
        (None, None, None)
    );
    assert_eq!(
        r.decision,
        Decision {
            profile: "2g.20gb",
            count: 1,
            memory_bytes: 18 * GIB,
            source: EstimateSource::MigMemHint
        }
    );
    assert_eq!(
        r.decision.to_string(),
        "dynmig: profile=2g.20gb count=1 mem=18.0GiB source=mig-mem"
    );
}

#[test]
fn slash_form_and_other_entries_are_kept() {
    let r = rewrite(
        &node("gres/gpu:1,gres/shard:4", &["_SLURM_SPANK_OPTION_dynmig_mig_mem=4G"]),
        &policy(),
    );
    assert_eq!(r.tres_per_node.as_deref(), Some("gres/gpu:1g.10gb:1,gres/shard:4"));
    let r = rewrite(&node("gres:gpu", &[MEM18]), &policy());
    assert_eq!(r.tres_per_node.as_deref(), Some("gres:gpu:2g.20gb:1"));
}

#[test]
fn gpus_1_moves_to_tres_per_node() {
    let req = JobRequest {
        tres_per_job: Some("gres:gpu:1"),
        spank_env: vec![MEM18],
        ..Default::default()
    };
    let r = rewrite(&req, &policy());
    assert_eq!(r.tres_per_job.as_deref(), Some(""));
    assert_eq!(r.tres_per_node.as_deref(), Some("gres:gpu:2g.20gb:1"));

    let req = JobRequest {
        tres_per_node: Some("gres/shard:2"),
        tres_per_job: Some("gres/gpu:1"),
        spank_env: vec![MEM18],
        ..Default::default()
    };
    let r = rewrite(&req, &policy());
    assert_eq!(r.tres_per_job.as_deref(), Some(""));
    assert_eq!(r.tres_per_node.as_deref(), Some("gres/shard:2,gres/gpu:2g.20gb:1"));
}

#[test]
fn one_gpu_without_hint_follows_whole_gpu() {
    let r = rewrite(&node("gres:gpu:1", &[]), &policy());
    assert_eq!(r.tres_per_node.as_deref(), Some("gres:gpu:7g.80gb:1"));
    assert_eq!(r.decision.source, EstimateSource::WholeGpu);

    let p = SubmitPolicy {
        whole_gpu: WholeGpu::Estimate,
        ..policy()
    };
    let r = rewrite(&node("gres:gpu:1", &[]), &p);
    assert_eq!(r.tres_per_node.as_deref(), Some("gres:gpu:1g.10gb:1"));
    assert_eq!(
        (r.decision.source, r.decision.memory_bytes),
        (EstimateSource::Default, 8 * GIB)
    );

    let p = SubmitPolicy {
        whole_gpu: WholeGpu::Reject,
        ..policy()
    };
    let e = error(&node("gres:gpu:1", &[]), &p);
    assert!(e.contains("--mig-mem=<size>") && e.contains("2g.20gb"), "{e}");
}

#[test]
fn multi_gpu_gets_whole_gpus_or_is_rejected() {
    let r = rewrite(&node("gres:gpu:2", &[]), &policy());
    assert_eq!(r.tres_per_node.as_deref(), Some("gres:gpu:7g.80gb:2"));
    assert_eq!(r.decision.count, 2);

    let req = JobRequest {
        tres_per_job: Some("gres/gpu:4"),
        ..Default::default()
    };
    let r = rewrite(&req, &policy());
    assert_eq!(
        (r.tres_per_job.as_deref(), r.tres_per_node.as_deref()),
        (Some("gres/gpu:7g.80gb:4"), None)
    );

    let e = error(
        &node("gres:gpu:2", &["_SLURM_SPANK_OPTION_dynmig_mig_profile=2g.20gb"]),
        &policy(),
    );
    assert!(
        e.contains("--mig-profile=2g.20gb with 2 GPUs") && e.contains("7g.80gb"),
        "{e}"
    );

    let p = SubmitPolicy {
        multi_gpu: MultiGpu::Reject,
        ..policy()
    };
    let e = error(&node("gres:gpu:2", &[]), &p);
    assert!(e.contains("more than one GPU (2 asked for with --gres)"), "{e}");
}

#[test]
fn per_task_single_gpu_is_rewritten_in_place() {
    let req = JobRequest {
        tres_per_task: Some("cpu=2,gres/gpu:1"),
        spank_env: vec![MEM18],
        ..Default::default()
    };
    let r = rewrite(&req, &policy());
    assert_eq!(r.tres_per_task.as_deref(), Some("cpu=2,gres/gpu:2g.20gb:1"));
    assert_eq!(r.tres_per_node, None);
}

#[test]
fn already_typed_requests_are_validated_and_left_alone() {
    assert!(matches!(
        decide(&node("gres:gpu:3g.40gb:2", &[]), &policy()),
        Ok(Outcome::Unchanged { .. })
    ));
    assert!(matches!(
        decide(&node("gres:gpu:2g.20gb:1", &[MEM18]), &policy()),
        Ok(Outcome::Unchanged { .. })
    ));
    let e = error(&node("gres:gpu:1g.10gb:1", &[MEM18]), &policy());
    assert!(e.contains("1g.10gb has only 9.5GiB"), "{e}");
    let e = error(&node("gres:gpu:1g.5gb:1", &[]), &policy());
    assert!(
        e.contains("GPU type '1g.5gb' is not a MIG profile of this cluster"),
        "{e}"
    );
    // A non-MIG type belongs to GPUs dynmig does not manage.
    match decide(&node("gres:gpu:v100:1", &[]), &policy()) {
        Ok(Outcome::Unchanged { reason }) => assert!(reason.contains("v100"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn profile_hint_wins_when_it_holds_the_memory() {
    let env = [MEM18, "_SLURM_SPANK_OPTION_dynmig_mig_profile=3g.40gb"];
    let r = rewrite(&node("gres:gpu:1", &env), &policy());
    assert_eq!(r.tres_per_node.as_deref(), Some("gres:gpu:3g.40gb:1"));
    assert_eq!(r.decision.source, EstimateSource::MigProfileHint);
    assert_eq!(r.decision.memory_bytes, 18 * GIB);

    // Named explicitly, the double-memory 1g profile is allowed.
    let r = rewrite(
        &node("gres:gpu:1", &["_SLURM_SPANK_OPTION_dynmig_mig_profile=1g.20gb"]),
        &policy(),
    );
    assert_eq!(r.tres_per_node.as_deref(), Some("gres:gpu:1g.20gb:1"));

    let env = [
        "_SLURM_SPANK_OPTION_dynmig_mig_mem=30G",
        "_SLURM_SPANK_OPTION_dynmig_mig_profile=2g.20gb",
    ];
    let e = error(&node("gres:gpu:1", &env), &policy());
    assert!(
        // The 2g.20gb of this cluster's A100-80GB (19968 MiB), not another model's.
        e.contains("2g.20gb has 19.5GiB of GPU memory, less than --mig-mem=30.0GiB"),
        "{e}"
    );

    // Known profile, but not on this cluster's GPUs: the list is this cluster's profiles
    // only (issue 25).
    let e = error(
        &node("gres:gpu:1", &["_SLURM_SPANK_OPTION_dynmig_mig_profile=1g.5gb"]),
        &policy(),
    );
    assert!(
        e.contains("--mig-profile=1g.5gb: unknown MIG profile; allowed: 1g.10gb"),
        "{e}"
    );
}

#[test]
fn bad_hints_are_errors() {
    let e = error(
        &node("gres:gpu:1", &["_SLURM_SPANK_OPTION_dynmig_mig_mem=18Q"]),
        &policy(),
    );
    assert_eq!(
        e,
        "dynmig: --mig-mem=18Q: unknown unit 'Q'; use a number with K, M, G or T (binary units), e.g. --mig-mem=18G"
    );
    let e = error(
        &node("gres:gpu:1", &["_SLURM_SPANK_OPTION_dynmig_mig_mem=100G"]),
        &policy(),
    );
    assert!(
        e.contains("more than the largest MIG profile of this cluster, 7g.80gb (79.0GiB)"),
        "{e}"
    );
    let e = error(
        &JobRequest {
            spank_env: vec![MEM18],
            ..Default::default()
        },
        &policy(),
    );
    assert_eq!(e, "dynmig: --mig-mem needs a GPU request: add --gres=gpu:1");
}

#[test]
fn conflicting_requests_and_unreadable_gpu_entries_are_errors() {
    let req = JobRequest {
        tres_per_node: Some("gres:gpu:1"),
        tres_per_job: Some("gres:gpu:1"),
        ..Default::default()
    };
    let e = error(&req, &policy());
    assert!(
        e.contains("more than one way (--gres gres:gpu:1, --gpus gres:gpu:1)"),
        "{e}"
    );
    let e = error(&node("gres:gpu:a:b:1", &[]), &policy());
    assert!(
        e.starts_with("dynmig: --gres: cannot read GPU request 'gres:gpu:a:b:1'"),
        "{e}"
    );
    let p = SubmitPolicy {
        models: vec![],
        ..policy()
    };
    assert_eq!(decide(&node("gres:gpu:1", &[]), &p), Err(SubmitError::NoModels));
}

#[test]
fn mixed_models_pick_smallest_over_all() {
    let p = SubmitPolicy {
        models: vec![&A100_40GB, &A100_80GB],
        ..policy()
    };
    let r = rewrite(&node("gres:gpu:1", &["_SLURM_SPANK_OPTION_dynmig_mig_mem=3G"]), &p);
    assert_eq!(r.decision.profile, "1g.5gb");
    // Whole GPU without a hint: the first configured model's full profile.
    assert_eq!(rewrite(&node("gres:gpu:1", &[]), &p).decision.profile, "7g.40gb");
    // Multi-GPU with a memory hint: the smallest full profile that holds it.
    let r = rewrite(&node("gres:gpu:2", &["_SLURM_SPANK_OPTION_dynmig_mig_mem=50G"]), &p);
    assert_eq!(r.decision.profile, "7g.80gb");
}

mod properties {
    use super::*;
    use dynmig_core::gres::TresList;
    use dynmig_core::hints::auto_selectable;
    use dynmig_core::size::MIB;
    use proptest::prelude::*;

    proptest! {
        /// Any memory hint up to the full profile gets a profile that holds it, and no
        /// smaller auto-selectable profile of the model would.
        #[test]
        fn chosen_profile_is_the_smallest_that_holds_the_hint(mib in 1u64..=80896) {
            let env = format!("_SLURM_SPANK_OPTION_dynmig_mig_mem={mib}M");
            let req = JobRequest {
                tres_per_node: Some("gres:gpu:1"),
                spank_env: vec![env.as_str()],
                ..Default::default()
            };
            let r = rewrite(&req, &policy());
            let chosen = A100_80GB.profile(r.decision.profile).unwrap();
            prop_assert!(chosen.memory_mib >= mib);
            for p in A100_80GB.schedulable_profiles() {
                if auto_selectable(p) && p.memory_mib >= mib {
                    prop_assert!((p.memory_mib, p.compute_slices) >= (chosen.memory_mib, chosen.compute_slices));
                }
            }
            prop_assert_eq!(r.decision.memory_bytes, mib * MIB);
            let expected = format!("gres:gpu:{}:1", chosen.name);
            prop_assert_eq!(r.tres_per_node.as_deref(), Some(expected.as_str()));
        }

        /// Rewriting the GPU entry keeps every other entry byte for byte, in order.
        #[test]
        fn other_entries_survive_a_rewrite(
            before in proptest::collection::vec("gres[:/](shard|mps|foo)(:[0-9]{1,3})?|cpu=[0-9]", 0..3),
            after in proptest::collection::vec("gres[:/](shard|mps|foo)(:[0-9]{1,3})?|license/x:1", 0..3),
            slash in any::<bool>(),
        ) {
            let gpu = if slash { "gres/gpu:1" } else { "gres:gpu:1" };
            let text = before.iter().map(String::as_str).chain([gpu]).chain(after.iter().map(String::as_str)).collect::<Vec<_>>().join(",");
            let req = JobRequest { tres_per_node: Some(&text), spank_env: vec![MEM18], ..Default::default() };
            let new = rewrite(&req, &policy()).tres_per_node.unwrap();
            let typed = gpu.replace(":1", ":2g.20gb:1");
            let expected = before.iter().map(String::as_str).chain([typed.as_str()]).chain(after.iter().map(String::as_str)).collect::<Vec<_>>().join(",");
            prop_assert_eq!(&new, &expected);
            prop_assert_eq!(TresList::parse(&new).unwrap().render(), new.clone());
        }
    }
}

/// The guarded default's catalog (docs/policy.md, "Guarded", step 1): a sized job gets the
/// smallest type of the catalog that holds it; a named profile and a job no catalog type
/// holds are as without a catalog.
#[test]
fn a_sized_job_gets_the_smallest_type_of_the_catalog_that_holds_it() {
    let mut p = policy();
    p.catalog =
        dynmig_core::protocol::catalog::Catalog::parse(r#"{"v":1,"types":{"A100-80GB":["3g.40gb","4g.40gb"]}}"#)
            .unwrap();
    assert_eq!(rewrite(&node("gres:gpu:1", &[MEM18]), &p).decision.profile, "3g.40gb");
    // 45 GiB: no catalog type holds it; the smallest profile that does, as without one.
    let big = node("gres:gpu:1", &["_SLURM_SPANK_OPTION_dynmig_mig_mem=45G"]);
    assert_eq!(rewrite(&big, &p).decision.profile, "7g.80gb");
    // A profile the user names is theirs.
    let named = node("gres:gpu:1", &["_SLURM_SPANK_OPTION_dynmig_mig_profile=1g.10gb"]);
    assert_eq!(rewrite(&named, &p).decision.profile, "1g.10gb");
    // Without the catalog the same job gets 2g.20gb.
    assert_eq!(
        rewrite(&node("gres:gpu:1", &[MEM18]), &policy()).decision.profile,
        "2g.20gb"
    );
}
