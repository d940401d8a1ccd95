//! The controller serves only demand Slurm would start (issue 25): a pending job that is held,
//! waits for a dependency, a begin time or a limit, cannot start for another reason, or holds
//! a GPU type an update replaced makes no plan and no repartition; the same job pending for
//! `Resources` does.

use dynmig_controller::{pass, JobFeed, ManagedNode, PassReport, PassSettings};
use dynmig_core::geometry::{all_layouts, NodeLayout, A100_80GB};
use dynmig_core::policy::{DemandDriven, PolicyLimits};
use dynmig_core::types::DrainMode;
use dynmig_host::fs::LineLog;
use dynmig_slurm::fake::{pending_job, published_node, running_job, FakeSlurm};
use dynmig_slurm::{JobInfo, NodeInfo, NodeState};
use std::time::Duration;

const NOW: i64 = 1_000_000;

fn managed() -> Vec<ManagedNode> {
    ["n1", "n2"]
        .iter()
        .map(|n| ManagedNode {
            name: (*n).into(),
            model: &A100_80GB,
            gpus: 2,
            allowed: all_layouts(&A100_80GB),
        })
        .collect()
}

fn node(name: &str) -> NodeInfo {
    published_node(name, &NodeLayout::parse(&A100_80GB, 2, "1x7g.80gb,1x7g.80gb").unwrap())
}

/// n1 idle, n2 busy until NOW + 600: an idle node to drain and a busy one to reserve.
fn cluster(job: JobInfo) -> FakeSlurm {
    let mut n1 = node("n1");
    n1.address = "10.0.0.1".into();
    let mut n2 = node("n2");
    n2.address = "10.0.0.2".into();
    n2.state = NodeState::Mixed;
    n2.alloc_cpus = 1;
    n2.gres_used = "gpu:7g.80gb:1(IDX:0)".into();
    FakeSlurm::new(
        vec![n1, n2],
        vec![job, running_job(9, "n2", "gres:gpu:7g.80gb:1", NOW + 600)],
    )
}

fn run(slurm: &FakeSlurm, dir: &std::path::Path) -> PassReport {
    let mut policy = DemandDriven::new(PolicyLimits {
        max_concurrent: 2,
        min_layout_lifetime: Duration::ZERO,
        min_gain: 1,
    });
    pass(
        slurm,
        &managed(),
        &mut policy,
        &mut JobFeed::new(),
        &LineLog::none(),
        &PassSettings {
            drain_timeout: Duration::from_secs(600),
            dry_run: false,
            now: NOW,
            drain: DrainMode::Reservation,
            reservation_duration: Duration::from_secs(600),
            plans: Some(dir.join("controller-plans.json")),
            sweep: false,
            catalog: None,
            retype: false,
        },
    )
    .unwrap()
}

/// A job asking two 3g.40gb instances (more than one node's change serves, so both the idle
/// node and the busy one are candidates).
fn job(reason: &str) -> JobInfo {
    JobInfo {
        reason: reason.into(),
        ..pending_job(1, "gres:gpu:3g.40gb:2")
    }
}

/// `blocked` makes no demand, no plan and no Slurm call; the same job pending for
/// `Resources` drains n1 for it.
fn no_demand_but_resources_does(blocked: JobInfo) {
    let dir = tempfile::tempdir().unwrap();
    let slurm = cluster(blocked.clone());
    let r = run(&slurm, dir.path());
    assert!(r.demand.pending.is_empty(), "{:?}", r.demand);
    assert!(r.drained.is_empty() && r.planned.is_empty(), "{r:?}");
    assert!(slurm.calls().is_empty(), "{:?}", slurm.calls());
    assert!(slurm.state.lock().unwrap().reservations.is_empty());

    let waiting = JobInfo {
        reason: "Resources".into(),
        held: false,
        eligible_time: 0,
        tres_req: String::new(),
        tres_per_node: blocked.tres_per_node.clone(),
        ..blocked
    };
    let dir = tempfile::tempdir().unwrap();
    let slurm = cluster(waiting);
    let r = run(&slurm, dir.path());
    assert_eq!(r.demand.pending.get("3g.40gb"), Some(&2), "{:?}", r.demand);
    assert_eq!(r.drained.len(), 1, "{r:?}");
    assert_eq!(r.drained[0].node, "n1");
    // The drained node's agent is woken at its NodeAddr; no other node's.
    assert_eq!(r.wake, ["10.0.0.1"]);
    assert!(
        slurm.calls()[0].starts_with("drain n1 dynmig/v1 repartition to="),
        "{:?}",
        slurm.calls()
    );
    // Next pass: n1 is drained and free of jobs, its agent not done yet: woken again (a lost
    // wake-up costs one pass), not drained again.
    let calls = slurm.calls().len();
    let r = run(&slurm, dir.path());
    assert!(r.drained.is_empty(), "{r:?}");
    assert_eq!(r.wake, ["10.0.0.1"]);
    assert_eq!(slurm.calls().len(), calls, "{:?}", slurm.calls());
}

#[test]
fn a_held_job_is_no_demand() {
    no_demand_but_resources_does(job("JobHeldUser"));
    no_demand_but_resources_does(job("JobHeldAdmin"));
    // Priority 0 with a reason that does not say so (a hold seen before the scheduler ran).
    no_demand_but_resources_does(JobInfo {
        held: true,
        ..job("None")
    });
}

#[test]
fn a_job_waiting_for_a_dependency_is_no_demand() {
    no_demand_but_resources_does(job("Dependency"));
    no_demand_but_resources_does(job("DependencyNeverSatisfied"));
}

#[test]
fn a_job_whose_begin_time_is_to_come_is_no_demand() {
    no_demand_but_resources_does(JobInfo {
        eligible_time: NOW + 3600,
        ..job("BeginTime")
    });
    // The scheduler has not set the reason yet: the begin time alone says so.
    no_demand_but_resources_does(JobInfo {
        eligible_time: NOW + 60,
        ..job("None")
    });
}

#[test]
fn a_job_blocked_by_a_limit_is_no_demand() {
    for r in [
        "AssocGrpGRES",
        "AssocMaxJobsLimit",
        "QOSMaxJobsPerUserLimit",
        "QOSGrpGRES",
        "PartitionDown",
        "PartitionInactive",
        "PartitionTimeLimit",
        "MaxGRESPerAccount",
    ] {
        no_demand_but_resources_does(job(r));
    }
}

#[test]
fn a_job_slurm_cannot_start_is_no_demand() {
    for r in [
        "BadConstraints",
        "InvalidAccount",
        "InvalidQOS",
        "JobLaunchFailure",
        "Licenses",
    ] {
        no_demand_but_resources_does(job(r));
    }
}

#[test]
fn a_job_holding_a_gpu_type_its_update_replaced_is_no_demand() {
    // Slurm 22.05 after `scontrol update jobid=1 gres=gpu:3g.40gb:2` on a 2g.20gb job: the
    // per-node request is new, the TRES request keeps the old type as well.
    no_demand_but_resources_does(JobInfo {
        tres_req: "cpu=1,mem=16G,node=1,billing=1,gres/gpu=4,gres/gpu:2g.20gb=2,gres/gpu:3g.40gb=2".into(),
        ..job("ReqNodeNotAvail")
    });
}

#[test]
fn every_reason_of_a_job_waiting_for_resources_is_demand() {
    for r in ["None", "Priority", "Resources", "ReqNodeNotAvail", "Reservation"] {
        let dir = tempfile::tempdir().unwrap();
        let slurm = cluster(job(r));
        let r = run(&slurm, dir.path());
        assert_eq!(r.demand.pending.get("3g.40gb"), Some(&2), "{r:?}");
        assert_eq!(r.drained.len(), 1, "{r:?}");
    }
}

#[test]
fn a_busy_node_gets_no_reservation_for_a_held_job() {
    // Only n2 (busy) exists: a job waiting for resources gets a reservation, a held one none.
    let busy_only = |j: JobInfo| {
        let s = cluster(j);
        s.state.lock().unwrap().nodes.retain(|n| n.name == "n2");
        s
    };
    let dir = tempfile::tempdir().unwrap();
    let slurm = busy_only(job("JobHeldUser"));
    let r = run(&slurm, dir.path());
    assert!(r.planned.is_empty() && slurm.calls().is_empty(), "{r:?}");
    let slurm = busy_only(job("Resources"));
    let r = run(&slurm, dir.path());
    assert_eq!(r.planned.len(), 1, "{r:?}");
    assert_eq!(
        slurm.calls(),
        [format!("reserve dynmig_n2 n2 start={} minutes=10", NOW + 600)]
    );
}
