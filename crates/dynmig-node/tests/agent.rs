//! The agent's step against the fake Slurm and the simulated backend: apply, wait, refusal,
//! corrupt journal, failure.

use dynmig_core::geometry::A100_80GB;
use dynmig_core::protocol::intent::NodeIntent;
use dynmig_core::protocol::journal::{Journal, JournalStep};
use dynmig_core::protocol::layout::PublishedLayout;
use dynmig_node::agent::Step;
use dynmig_slurm::fake::{idle_node, FakeSlurm};
use dynmig_slurm::{NodeState, SlurmApi};
use std::sync::Arc;

mod common;
use common::{agent, drained_node, layout};

#[test]
fn a_node_drained_by_dynmig_and_idle_gets_its_target_and_publishes_it() {
    let d = tempfile::tempdir().unwrap();
    let slurm = Arc::new(FakeSlurm::new(vec![drained_node("7x1g.10gb,1x7g.80gb")], vec![]));
    let mut a = agent(d.path(), &slurm, false);
    assert_eq!(a.step().unwrap(), Step::Applied(layout("7x1g.10gb,1x7g.80gb")));
    let n = slurm.node("n1").unwrap().unwrap();
    assert!(!n.is_drain());
    assert_eq!(
        PublishedLayout::parse(&n.extra, &A100_80GB, 2).unwrap(),
        Some(PublishedLayout(layout("7x1g.10gb,1x7g.80gb")))
    );
    assert!(std::fs::read_to_string(d.path().join("gres.conf"))
        .unwrap()
        .contains("1g.10gb"));
    assert!(!a.settings.paths.journal().exists(), "the journal is cleared");
}

#[test]
fn a_drained_node_with_jobs_is_waited_for_and_the_epilog_marker_is_left() {
    let d = tempfile::tempdir().unwrap();
    let mut n = drained_node("7x1g.10gb,1x7g.80gb");
    n.state = NodeState::Mixed;
    n.alloc_cpus = 1;
    let slurm = Arc::new(FakeSlurm::new(vec![n], vec![]));
    let mut a = agent(d.path(), &slurm, false);
    assert_eq!(a.step().unwrap(), Step::WaitingForJobs);
    assert!(a.settings.paths.waiting_marker().exists());
    assert!(slurm.calls().is_empty());
}

#[test]
fn the_agent_refuses_to_resume_a_journal_when_the_node_is_not_drained_by_dynmig_and_says_why() {
    let d = tempfile::tempdir().unwrap();
    let mut n = idle_node("n1", "gpu:7g.80gb:2");
    n.state = NodeState::Allocated;
    n.alloc_cpus = 2;
    let slurm = Arc::new(FakeSlurm::new(vec![n], vec![]));
    let mut a = agent(d.path(), &slurm, false);
    let j = Journal {
        target: layout("7x1g.10gb,7x1g.10gb"),
        step: JournalStep::Instances,
        started: 1,
    };
    std::fs::write(a.settings.paths.journal(), j.encode()).unwrap();
    let Step::Refused(why) = a.step().unwrap() else {
        panic!("the agent acted on a node that is not drained by dynmig")
    };
    assert!(why.contains("not drained by dynmig"), "{why}");
    assert!(slurm.calls().is_empty(), "Slurm untouched: {:?}", slurm.calls());
    assert_eq!(
        a.backend.gpus().unwrap()[0].layout().to_string(),
        "1x7g.80gb",
        "GPUs untouched"
    );
    assert!(
        a.settings.paths.journal().exists(),
        "the journal is kept for an administrator"
    );
    let events = std::fs::read_to_string(d.path().join("events.jsonl")).unwrap();
    assert!(events.contains("agent_refused"));
}

#[test]
fn a_corrupt_journal_drains_the_node_with_a_reason_instead_of_wedging() {
    let d = tempfile::tempdir().unwrap();
    let slurm = Arc::new(FakeSlurm::new(vec![idle_node("n1", "gpu:7g.80gb:2")], vec![]));
    let mut a = agent(d.path(), &slurm, false);
    std::fs::write(a.settings.paths.journal(), "{not json").unwrap();
    let Step::Failed(why) = a.step().unwrap() else {
        panic!("a corrupt journal was not reported")
    };
    assert!(why.contains("unreadable journal"), "{why}");
    let n = slurm.node("n1").unwrap().unwrap();
    assert!(n.is_drain());
    assert!(matches!(
        NodeIntent::parse(&n.reason, &A100_80GB, 2).unwrap(),
        Some(NodeIntent::Failed(_))
    ));
    assert!(
        !a.settings.paths.journal().exists(),
        "moved aside, so the next step is not wedged"
    );
    assert_eq!(a.step().unwrap(), Step::Nothing);
}

#[test]
fn a_failed_reregistration_leaves_the_node_drained_with_the_reason() {
    let d = tempfile::tempdir().unwrap();
    let slurm = Arc::new(FakeSlurm::new(vec![drained_node("7x1g.10gb,1x7g.80gb")], vec![]));
    let mut a = agent(d.path(), &slurm, true);
    let Step::Failed(why) = a.step().unwrap() else {
        panic!("the failure was not reported")
    };
    assert!(why.contains("slurmd would not start"), "{why}");
    let n = slurm.node("n1").unwrap().unwrap();
    assert!(n.reason.starts_with("dynmig/v1 failed:"), "{}", n.reason);
    assert!(!a.settings.paths.journal().exists());
}
