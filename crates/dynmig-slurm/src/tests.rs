//! Unit tests of [`super`].

use super::*;

fn job(reason: &str) -> JobInfo {
    JobInfo {
        reason: reason.into(),
        ..fake::pending_job(1, "gres:gpu:2g.20gb:1")
    }
}

#[test]
fn only_the_reasons_of_a_job_waiting_for_resources_are_demand() {
    for r in DEMAND_REASONS {
        assert_eq!(job(r).blocked(100), None, "{r:?}");
        assert!(job(r).is_demand(100), "{r:?}");
    }
    let cases = [
        ("JobHeldUser", Blocked::Held("JobHeldUser".into())),
        ("JobHeldAdmin", Blocked::Held("JobHeldAdmin".into())),
        ("JobHoldMaxRequeue", Blocked::Held("JobHoldMaxRequeue".into())),
        ("Dependency", Blocked::Dependency("Dependency".into())),
        (
            "DependencyNeverSatisfied",
            Blocked::Dependency("DependencyNeverSatisfied".into()),
        ),
        ("BeginTime", Blocked::BeginTime(0)),
        ("AssocGrpGRES", Blocked::Limit("AssocGrpGRES".into())),
        ("AssociationJobLimit", Blocked::Limit("AssociationJobLimit".into())),
        (
            "QOSMaxJobsPerUserLimit",
            Blocked::Limit("QOSMaxJobsPerUserLimit".into()),
        ),
        ("PartitionDown", Blocked::Limit("PartitionDown".into())),
        ("PartitionInactive", Blocked::Limit("PartitionInactive".into())),
        ("PartitionTimeLimit", Blocked::Limit("PartitionTimeLimit".into())),
        ("MaxJobsPerAccount", Blocked::Limit("MaxJobsPerAccount".into())),
        ("AccountingPolicy", Blocked::Limit("AccountingPolicy".into())),
        ("JobArrayTaskLimit", Blocked::Limit("JobArrayTaskLimit".into())),
        ("BadConstraints", Blocked::Other("BadConstraints".into())),
        ("InvalidAccount", Blocked::Other("InvalidAccount".into())),
        ("InvalidQOS", Blocked::Other("InvalidQOS".into())),
        ("JobLaunchFailure", Blocked::Other("JobLaunchFailure".into())),
        ("Licenses", Blocked::Other("Licenses".into())),
        ("MaxPoweredUpNodes", Blocked::Other("MaxPoweredUpNodes".into())),
        ("SomeReasonOfSlurm27", Blocked::Other("SomeReasonOfSlurm27".into())),
    ];
    for (r, want) in cases {
        assert_eq!(job(r).blocked(100), Some(want), "{r}");
        assert!(!job(r).is_demand(100), "{r}");
    }
    let running = JobInfo {
        state: JobState::Running,
        ..job("None")
    };
    assert!(!running.is_demand(100), "a running job is no pending demand");
}

#[test]
fn priority_zero_and_a_future_begin_time_block_whatever_the_reason() {
    let held = JobInfo {
        held: true,
        ..job("Priority")
    };
    assert_eq!(held.blocked(100), Some(Blocked::Held("priority 0".into())));
    let later = JobInfo {
        eligible_time: 160,
        ..job("None")
    };
    assert_eq!(later.blocked(100), Some(Blocked::BeginTime(160)));
    assert_eq!(later.blocked(160), None, "eligible now");
}

#[test]
fn a_request_holding_a_type_the_update_replaced_is_no_demand() {
    let merged = JobInfo {
        tres_req: "cpu=1,mem=16G,node=1,billing=1,gres/gpu=2,gres/gpu:2g.20gb=1,gres/gpu:3g.40gb=1".into(),
        ..fake::pending_job(1, "gres:gpu:3g.40gb:1")
    };
    assert_eq!(merged.stale_gpu_types(), ["2g.20gb"]);
    assert_eq!(merged.blocked(0), Some(Blocked::MergedGres(vec!["2g.20gb".into()])));
    assert!(merged
        .blocked(0)
        .unwrap()
        .to_string()
        .contains("cancel it and submit it again"));
    let fresh = JobInfo {
        tres_req: "cpu=1,mem=16G,node=1,billing=1,gres/gpu=1,gres/gpu:3g.40gb=1".into(),
        ..merged.clone()
    };
    assert_eq!(fresh.blocked(0), None);
    let untyped = JobInfo {
        tres_req: "cpu=1,gres/gpu=1,gres/gpu:1g.10gb=1".into(),
        ..fake::pending_job(1, "gres:gpu:1")
    };
    assert!(untyped.stale_gpu_types().is_empty(), "an untyped request names no type");
}
