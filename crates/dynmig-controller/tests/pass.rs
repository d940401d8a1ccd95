//! The controller pass against the fake Slurm.

use dynmig_controller::{pass, ManagedNode, PassSettings};
use dynmig_core::geometry::{all_layouts, NodeLayout, A100_80GB};
use dynmig_core::policy::{DemandDriven, PolicyLimits};
use dynmig_core::protocol::intent::NodeIntent;
use dynmig_core::protocol::layout::PublishedLayout;
use dynmig_host::fs::LineLog;
use dynmig_slurm::fake::{idle_node, pending_job, FakeSlurm};
use dynmig_slurm::{NodeInfo, NodeState, SlurmApi};
use std::time::Duration;

fn managed(name: &str) -> ManagedNode {
    ManagedNode {
        name: name.into(),
        model: &A100_80GB,
        gpus: 2,
        allowed: all_layouts(&A100_80GB),
    }
}

fn node(name: &str, layout: &str) -> NodeInfo {
    let l = NodeLayout::parse(&A100_80GB, 2, layout).unwrap();
    let mut n = idle_node(name, &l.gres());
    n.extra = PublishedLayout(l).encode();
    n
}

fn policy() -> DemandDriven {
    DemandDriven::new(PolicyLimits {
        max_concurrent: 1,
        min_layout_lifetime: Duration::ZERO,
        min_gain: 1,
    })
}

fn settings(now: i64) -> PassSettings {
    PassSettings {
        drain_timeout: Duration::from_secs(600),
        dry_run: false,
        now,
    }
}

#[test]
fn unmet_demand_drains_one_node_with_a_versioned_intent() {
    let slurm = FakeSlurm::new(
        vec![node("n1", "1x7g.80gb,1x7g.80gb"), node("n2", "1x7g.80gb,1x7g.80gb")],
        vec![
            pending_job(1, "gres:gpu:1g.10gb:1"),
            pending_job(2, "gres:gpu:1g.10gb:1"),
        ],
    );
    let dir = tempfile_dir();
    let log = LineLog::to(dir.join("events.jsonl"));
    let r = pass(
        &slurm,
        &[managed("n1"), managed("n2")],
        &mut policy(),
        &log,
        &settings(1000),
    )
    .unwrap();
    assert_eq!(r.drained.len(), 1, "one repartition at a time");
    let calls = slurm.calls();
    assert_eq!(calls.len(), 1);
    assert!(calls[0].starts_with("drain n1 dynmig/v1 repartition to="), "{calls:?}");
    let n1 = slurm.node("n1").unwrap().unwrap();
    let intent = NodeIntent::parse(&n1.reason, &A100_80GB, 2).unwrap().unwrap();
    assert!(matches!(intent, NodeIntent::Repartition(t) if t.totals().contains_key("1g.10gb")));
    assert!(std::fs::read_to_string(dir.join("events.jsonl"))
        .unwrap()
        .contains("\"kind\":\"drain\""));
}

#[test]
fn a_dry_run_changes_nothing() {
    let slurm = FakeSlurm::new(
        vec![node("n1", "1x7g.80gb,1x7g.80gb")],
        vec![pending_job(1, "gres:gpu:1g.10gb:1")],
    );
    let s = PassSettings {
        dry_run: true,
        ..settings(1000)
    };
    let r = pass(&slurm, &[managed("n1")], &mut policy(), &LineLog::none(), &s).unwrap();
    assert_eq!(r.drained.len(), 1);
    assert!(slurm.calls().is_empty());
}

#[test]
fn a_repartition_whose_jobs_outlive_the_drain_timeout_is_dropped() {
    let mut n = node("n1", "1x7g.80gb,1x7g.80gb");
    n.flags.push("DRAIN".into());
    n.state = NodeState::Mixed;
    n.alloc_cpus = 1;
    n.reason = NodeIntent::Repartition(NodeLayout::parse(&A100_80GB, 2, "7x1g.10gb,1x7g.80gb").unwrap()).encode();
    n.reason_changed_at = 100;
    let slurm = FakeSlurm::new(vec![n], vec![]);
    let r = pass(
        &slurm,
        &[managed("n1")],
        &mut policy(),
        &LineLog::none(),
        &settings(100 + 601),
    )
    .unwrap();
    assert_eq!(r.timed_out, vec!["n1".to_string()]);
    assert_eq!(slurm.calls(), vec!["resume n1".to_string()]);
}

#[test]
fn an_admins_drain_and_a_failed_repartition_are_never_touched() {
    let mut admin = node("a", "1x7g.80gb,1x7g.80gb");
    admin.flags.push("DRAIN".into());
    admin.reason = "bad fan".into();
    admin.reason_changed_at = 1;
    let mut failed = node("f", "1x7g.80gb,1x7g.80gb");
    failed.flags.push("DRAIN".into());
    failed.reason = NodeIntent::Failed("GPU 0: boom".into()).encode();
    let slurm = FakeSlurm::new(vec![admin, failed], vec![pending_job(1, "gres:gpu:1g.10gb:7")]);
    let r = pass(
        &slurm,
        &[managed("a"), managed("f")],
        &mut policy(),
        &LineLog::none(),
        &settings(10_000),
    )
    .unwrap();
    assert!(r.drained.is_empty());
    assert!(slurm.calls().is_empty(), "{:?}", slurm.calls());
}

#[test]
fn slurm_unreadable_is_an_error_not_a_decision() {
    let slurm = FakeSlurm::new(vec![node("n1", "1x7g.80gb,1x7g.80gb")], vec![]);
    slurm.state.lock().unwrap().fail = Some("slurmctld down".into());
    assert!(pass(&slurm, &[managed("n1")], &mut policy(), &LineLog::none(), &settings(1)).is_err());
}

fn tempfile_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!(
        "dynmig-pass-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}
