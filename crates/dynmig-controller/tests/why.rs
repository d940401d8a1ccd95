//! `dynmig why`: one test per answer, against the fake Slurm.

use dynmig_controller::why::{explain, Outcome, WhyError, WhyInputs, WhyReport};
use dynmig_controller::{ManagedNode, PassSettings};
use dynmig_core::geometry::{all_layouts, NodeLayout, ProfileCounts, A100_80GB};
use dynmig_core::policy::{DemandDriven, PolicyLimits};
use dynmig_core::protocol::intent::NodeIntent;
use dynmig_core::protocol::plan::{Plan, Plans};
use dynmig_core::types::DrainMode;
use dynmig_slurm::fake::{pending_job, published_node, running_job, FakeSlurm};
use dynmig_slurm::{JobInfo, NodeInfo, NodeState};
use std::time::Duration;

const NOW: i64 = 1_800_000_000;
const ALICE: u32 = 1000;

fn managed(name: &str, allowed: Vec<ProfileCounts>) -> ManagedNode {
    ManagedNode {
        name: name.into(),
        model: &A100_80GB,
        gpus: 2,
        allowed,
    }
}

fn layout(l: &str) -> NodeLayout {
    NodeLayout::parse(&A100_80GB, 2, l).unwrap()
}

/// n1 runs job 9 (7g.80gb) until NOW + 900.
fn busy_n1() -> NodeInfo {
    let mut n = published_node("n1", &layout("1x7g.80gb,1x7g.80gb"));
    n.state = NodeState::Mixed;
    n.alloc_cpus = 1;
    n.gres_used = "gpu:7g.80gb:1(IDX:0)".into();
    n
}

/// Job 1 of alice, 2g.20gb as job_submit/dynmig decided from --mig-mem.
fn job1() -> JobInfo {
    JobInfo {
        reason: "ReqNodeNotAvail".into(),
        reason_detail: "ReqNodeNotAvail, UnavailableNodes:catalog".into(),
        admin_comment: "dynmig/v1 profile=2g.20gb count=1 mem=19327352832 source=mig-mem".into(),
        ..pending_job(1, "gres:gpu:2g.20gb:1")
    }
}

fn ask(
    slurm: &FakeSlurm,
    managed: &[ManagedNode],
    limits: PolicyLimits,
    dir: &std::path::Path,
    caller: u32,
) -> Result<WhyReport, WhyError> {
    ask_job(slurm, managed, limits, dir, 1, caller)
}

/// Why job `id` waits, asked by `caller`, with the pass settings every test here uses.
fn ask_job(
    slurm: &FakeSlurm,
    managed: &[ManagedNode],
    limits: PolicyLimits,
    dir: &std::path::Path,
    id: u32,
    caller: u32,
) -> Result<WhyReport, WhyError> {
    let mut policy = DemandDriven::new(limits.clone());
    explain(
        slurm,
        WhyInputs {
            managed,
            policy: &mut policy,
            limits,
            settings: PassSettings {
                drain_timeout: Duration::from_secs(3600),
                dry_run: true,
                now: NOW,
                drain: DrainMode::Reservation,
                reservation_duration: Duration::from_secs(600),
                plans: Some(dir.join("controller-plans.json")),
                sweep: false,
                catalog: None,
                retype: false,
            },
        },
        id,
        caller,
    )
}

fn limits() -> PolicyLimits {
    PolicyLimits {
        max_concurrent: 1,
        min_layout_lifetime: Duration::ZERO,
        min_gain: 1,
    }
}

#[test]
fn a_busy_node_planned_for_the_job_says_which_node_and_when() {
    let dir = tempfile::tempdir().unwrap();
    let slurm = FakeSlurm::new(
        vec![busy_n1()],
        vec![job1(), running_job(9, "n1", "gres:gpu:7g.80gb:1", NOW + 900)],
    );
    let m = [managed("n1", all_layouts(&A100_80GB))];
    let r = ask(&slurm, &m, limits(), dir.path(), ALICE).unwrap();
    match &r.outcome {
        Outcome::Repartition {
            node,
            step,
            start,
            target,
        } => {
            assert_eq!((node.as_str(), step.as_str(), *start), ("n1", "next_pass", NOW + 900));
            assert!(target.contains("2g.20gb"), "{target}");
        }
        o => panic!("{o:?}"),
    }
    assert!(slurm.calls().is_empty(), "a dry run: {:?}", slurm.calls());
    let text = r.render_text();
    assert!(
        text.contains(
            "profile: 2g.20gb x1, chosen by dynmig at submission from your --mig-mem hint (estimate 18.0 GiB)"
        ),
        "{text}"
    );
    assert!(text.contains("UnavailableNodes:catalog"), "{text}");
    assert!(text.contains("n1") && text.contains("(in 900 s)"), "{text}");
    // The JSON form reads back.
    let back: WhyReport = serde_json::from_str(&r.render_json()).unwrap();
    assert_eq!(back, r);

    // Once the controller reserved n1 (its plan on file), the answer is the reservation's start.
    let plans = Plans {
        plans: vec![Plan {
            node: "n1".into(),
            target: layout("7x1g.10gb,3x2g.20gb"),
            start: NOW + 840,
            reservation: "dynmig_n1".into(),
            since: NOW,
        }],
    };
    std::fs::write(dir.path().join("controller-plans.json"), plans.encode()).unwrap();
    let r = ask(&slurm, &m, limits(), dir.path(), 0).unwrap();
    assert_eq!(
        r.outcome,
        Outcome::Repartition {
            node: "n1".into(),
            target: "7x1g.10gb,3x2g.20gb".into(),
            step: "reserved".into(),
            start: NOW + 840
        },
        "root may ask too"
    );

    // Drained with the intent: draining until its job's time limit.
    slurm.with_node("n1", |n| {
        n.flags.push("DRAIN".into());
        n.reason = NodeIntent::Repartition(layout("7x1g.10gb,3x2g.20gb")).encode();
    });
    std::fs::remove_file(dir.path().join("controller-plans.json")).unwrap();
    let r = ask(&slurm, &m, limits(), dir.path(), ALICE).unwrap();
    assert!(
        matches!(&r.outcome, Outcome::Repartition { step, start, .. } if step == "draining" && *start == NOW + 900),
        "{r:?}"
    );
}

#[test]
fn a_request_changed_by_an_out_of_memory_restart_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let restarted = JobInfo {
        admin_comment:
            "dynmig/v1 profile=3g.40gb count=1 mem=19327352832 source=mig-mem restarts=1 prev=2g.20gb by=oom-restart"
                .into(),
        tres_per_node: "gres:gpu:3g.40gb:1".into(),
        ..job1()
    };
    let slurm = FakeSlurm::new(
        vec![published_node("n1", &layout("1x4g.40gb+1x3g.40gb,1x7g.80gb"))],
        vec![restarted],
    );
    let r = ask(
        &slurm,
        &[managed("n1", all_layouts(&A100_80GB))],
        limits(),
        dir.path(),
        ALICE,
    )
    .unwrap();
    let text = r.render_text();
    assert!(
        text.contains("changed by an out-of-memory restart on a larger profile (restart 1); asked before: 2g.20gb"),
        "{text}"
    );
    assert_eq!(
        r.outcome,
        Outcome::Free {
            nodes: vec!["n1".into()]
        }
    );
}

#[test]
fn a_held_job_is_told_it_is_held() {
    let dir = tempfile::tempdir().unwrap();
    let held = JobInfo {
        reason: "JobHeldUser".into(),
        held: true,
        ..job1()
    };
    let slurm = FakeSlurm::new(vec![published_node("n1", &layout("1x7g.80gb,1x7g.80gb"))], vec![held]);
    let r = ask(
        &slurm,
        &[managed("n1", all_layouts(&A100_80GB))],
        limits(),
        dir.path(),
        ALICE,
    )
    .unwrap();
    assert!(
        matches!(&r.outcome, Outcome::Blocked { class, .. } if class == "held"),
        "{r:?}"
    );
    assert!(r.render_text().contains("scontrol release"), "{}", r.render_text());
}

#[test]
fn no_allowed_layout_holding_the_profile_is_said() {
    let dir = tempfile::tempdir().unwrap();
    let slurm = FakeSlurm::new(vec![published_node("n1", &layout("1x7g.80gb,1x7g.80gb"))], vec![job1()]);
    // n1 may only be 1x7g.80gb or 7x1g.10gb per GPU.
    let only: Vec<ProfileCounts> = layout("1x7g.80gb,7x1g.10gb").gpus;
    let r = ask(&slurm, &[managed("n1", only)], limits(), dir.path(), ALICE).unwrap();
    assert_eq!(r.outcome, Outcome::NoLayout);
    assert!(r.render_text().contains("no allowed layout"), "{}", r.render_text());
}

#[test]
fn the_concurrency_limit_and_the_layout_lifetime_are_said() {
    let dir = tempfile::tempdir().unwrap();
    // n2 is being repartitioned to 7g.80gb (not the job's profile); the limit is 1.
    let mut n2 = published_node("n2", &layout("1x7g.80gb,1x7g.80gb"));
    n2.flags.push("DRAIN".into());
    n2.reason = NodeIntent::Repartition(layout("7x1g.10gb,7x1g.10gb")).encode();
    let slurm = FakeSlurm::new(
        vec![published_node("n1", &layout("1x7g.80gb,1x7g.80gb")), n2],
        vec![job1()],
    );
    let m = [
        managed("n1", all_layouts(&A100_80GB)),
        managed("n2", all_layouts(&A100_80GB)),
    ];
    let r = ask(&slurm, &m, limits(), dir.path(), ALICE).unwrap();
    assert_eq!(
        r.outcome,
        Outcome::ConcurrencyLimit {
            under_way: vec!["n2".into()],
            max: 1
        }
    );
    // With room for two, n1's young layout (registered 30 s ago, lifetime 10 min) holds it.
    slurm.with_node("n1", |n| n.slurmd_start_time = NOW - 30);
    let young = PolicyLimits {
        max_concurrent: 2,
        min_layout_lifetime: Duration::from_secs(600),
        ..limits()
    };
    let r = ask(&slurm, &m, young, dir.path(), ALICE).unwrap();
    assert_eq!(r.outcome, Outcome::LayoutLifetime { earliest: NOW + 570 });
}

#[test]
fn a_free_instance_and_a_non_mig_job_are_said() {
    let dir = tempfile::tempdir().unwrap();
    let slurm = FakeSlurm::new(
        vec![published_node("n1", &layout("3x2g.20gb+1x1g.10gb,1x7g.80gb"))],
        vec![job1()],
    );
    let m = [managed("n1", all_layouts(&A100_80GB))];
    let r = ask(&slurm, &m, limits(), dir.path(), ALICE).unwrap();
    assert_eq!(
        r.outcome,
        Outcome::Free {
            nodes: vec!["n1".into()]
        }
    );
    slurm.state.lock().unwrap().jobs[0].tres_per_node = "gres:gpu:1".into();
    let r = ask(&slurm, &m, limits(), dir.path(), ALICE).unwrap();
    assert!(matches!(r.outcome, Outcome::NotMig { .. }), "{r:?}");
}

#[test]
fn another_users_job_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let slurm = FakeSlurm::new(vec![published_node("n1", &layout("1x7g.80gb,1x7g.80gb"))], vec![job1()]);
    let e = ask(
        &slurm,
        &[managed("n1", all_layouts(&A100_80GB))],
        limits(),
        dir.path(),
        1001,
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            WhyError::NotYourJob {
                job: 1,
                owner: Some(ALICE),
                caller: 1001
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("only its user and root"), "{e}");
    let mut policy = DemandDriven::new(limits());
    let e = explain(
        &slurm,
        WhyInputs {
            managed: &[],
            policy: &mut policy,
            limits: limits(),
            settings: PassSettings {
                drain_timeout: Duration::ZERO,
                dry_run: true,
                now: NOW,
                drain: DrainMode::Reservation,
                reservation_duration: Duration::ZERO,
                plans: None,
                sweep: false,
                catalog: None,
                retype: false,
            },
        },
        77,
        0,
    )
    .unwrap_err();
    assert!(matches!(e, WhyError::NoSuchJob(77)), "{e:?}");
}

#[test]
fn a_job_below_the_top_of_a_long_queue_is_explained_without_reading_the_whole_queue() {
    // 3,000 pending jobs ahead of job 9000 (the fake gives every job one priority; ties go
    // by id): `why` reads what the controller's first pass reads (running jobs and the top
    // of the queue), and job 9000 itself.
    let dir = tempfile::tempdir().unwrap();
    let mut jobs: Vec<JobInfo> = (2..3002).map(|id| pending_job(id, "gres:gpu:1g.10gb:1")).collect();
    jobs.push(running_job(1, "n1", "gres:gpu:7g.80gb:1", NOW + 900));
    jobs.push(JobInfo { id: 9000, ..job1() });
    let slurm = FakeSlurm::new(vec![busy_n1()], jobs);
    let m = [managed("n1", all_layouts(&A100_80GB))];
    let r = ask_job(&slurm, &m, limits(), dir.path(), 9000, ALICE).unwrap();
    assert_eq!(r.job, 9000);
    assert_eq!(r.profile.as_deref(), Some("2g.20gb"));
    assert!(
        !matches!(r.outcome, Outcome::NotPending),
        "job 9000 is pending: {:?}",
        r.outcome
    );
    let read = slurm.state.lock().unwrap().jobs_read;
    assert!(
        read <= 2 * (dynmig_controller::queue::READS_PER_PASS as u64 + 2),
        "{read} job records read of 3,002"
    );
}
