//! The time of each step of an apply: recorded by the agent, written into the `applied`
//! event, observed in its metrics; and the calls it saves.

use dynmig_core::protocol::event::{Event, EventKind};
use dynmig_core::protocol::intent::NodeIntent;
use dynmig_node::agent::{Agent, Step, StepTimes, FAST_POLL, IDLE_POLL};
use dynmig_node::reregister::Reregister;
use dynmig_slurm::fake::{idle_node, FakeSlurm};
use dynmig_slurm::{NodeState, SlurmApi};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

mod common;
use common::{agent_with, layout};

/// Stands in for the dynamic-node sequence: each step takes a known time and passes its
/// point, as `DynamicNode` does.
struct TimedRegister(Arc<FakeSlurm>);

impl Reregister for TimedRegister {
    fn reregister(
        &self,
        slurm: &dyn SlurmApi,
        node: &str,
        gres: &str,
        checkpoint: &mut dyn FnMut(&str),
    ) -> anyhow::Result<()> {
        std::thread::sleep(Duration::from_millis(60));
        checkpoint("register:stopped");
        slurm.delete_node(node)?;
        checkpoint("register:deleted");
        std::thread::sleep(Duration::from_millis(30));
        self.0.state.lock().unwrap().nodes.push(idle_node(node, gres));
        checkpoint("register:started");
        Ok(())
    }
}

fn agent(dir: &Path, slurm: &Arc<FakeSlurm>) -> Agent {
    agent_with(dir, slurm, Box::new(TimedRegister(slurm.clone())))
}

#[test]
fn each_step_of_an_apply_is_timed_logged_in_the_event_and_observed_in_the_metrics() {
    let d = tempfile::tempdir().unwrap();
    let mut n = idle_node("n1", "gpu:7g.80gb:2");
    n.flags.push("DRAIN".into());
    n.reason = NodeIntent::Repartition(layout("2x3g.40gb,1x7g.80gb")).encode();
    n.state = NodeState::Mixed;
    n.alloc_cpus = 1;
    let slurm = Arc::new(FakeSlurm::new(vec![n], vec![]));
    let mut a = agent(d.path(), &slurm);
    assert_eq!(a.step().unwrap(), Step::WaitingForJobs);
    assert!(!a.may_be_drained_soon(), "jobs still run");
    std::thread::sleep(Duration::from_millis(80));
    {
        let mut st = slurm.state.lock().unwrap();
        st.nodes[0].alloc_cpus = 0;
        st.nodes[0].state = NodeState::Idle;
    }
    assert_eq!(a.step().unwrap(), Step::Applied(layout("2x3g.40gb,1x7g.80gb")));
    let t = a.last_steps.clone().expect("step times of the apply");
    let ms = |s: &str| t.get(s).map(|d| d.as_millis());
    assert!(ms("idle_wait").is_some_and(|w| w >= 80), "{t:?}");
    assert!(ms("slurmd_stop").is_some_and(|w| (60..1000).contains(&w)), "{t:?}");
    assert!(ms("slurmd_start").is_some_and(|w| (30..1000).contains(&w)), "{t:?}");
    for s in ["instances", "gres_conf", "delete", "registration", "publish"] {
        assert!(t.get(s).is_some(), "{s} timed: {t:?}");
    }
    // The node was seen drained for the target just now: Slurm is not asked again whether
    // it is back before re-registering (one `nodes` call at each look, one per wait poll).
    let log = std::fs::read_to_string(d.path().join("events.jsonl")).unwrap();
    let applied = Event::parse_lines(&log)
        .into_iter()
        .find(|e| e.kind == EventKind::Applied)
        .unwrap();
    let back = StepTimes::parse(applied.detail.as_deref().unwrap());
    assert_eq!(back.0.len(), t.0.len(), "{applied:?}");
    assert!(
        (back.get("slurmd_stop").unwrap().as_secs_f64() - t.get("slurmd_stop").unwrap().as_secs_f64()).abs() < 0.001
    );
    let text = a.metrics.render();
    assert!(
        text.contains("dynmig_agent_apply_step_seconds_count{node=\"n1\",step=\"slurmd_stop\"} 1")
            || text.contains("dynmig_agent_apply_step_seconds_count{step=\"slurmd_stop\",node=\"n1\"} 1"),
        "{text}"
    );
    assert!(a.may_be_drained_soon(), "the node has just become free of jobs");
}

#[test]
fn step_times_round_trip_through_text_and_skip_what_they_do_not_know() {
    let mut t = StepTimes::default();
    t.add("registration", Duration::from_millis(700));
    t.add("slurmd_stop", Duration::from_millis(100));
    t.add("registration", Duration::from_millis(200));
    assert_eq!(t.encode(), "steps slurmd_stop=0.100 registration=0.900");
    let parsed = StepTimes::parse(&format!("4 instance operations, 1.2 s; {} ", t.encode()));
    assert_eq!(parsed.encode(), t.encode());
    assert_eq!(parsed.get("registration"), Some(Duration::from_millis(900)));
    let odd = StepTimes::parse("steps nope=1 instances=x delete=-1 publish=0.250");
    assert_eq!(odd.0, vec![("publish", Duration::from_millis(250))]);
    assert!(StepTimes::parse("6 instance operations, 2.11 s").0.is_empty());
}

#[test]
fn the_agent_looks_often_while_its_node_is_idle_or_just_freed_and_seldom_while_it_runs_jobs() {
    let d = tempfile::tempdir().unwrap();
    let mut n = idle_node("n1", "gpu:7g.80gb:2");
    n.state = NodeState::Mixed;
    n.alloc_cpus = 1;
    let slurm = Arc::new(FakeSlurm::new(vec![n], vec![]));
    let mut a = agent(d.path(), &slurm);
    assert_eq!(a.step().unwrap(), Step::Nothing);
    assert_eq!(a.next_look(None), Duration::from_secs(1), "busy: its poll");
    assert!(a.settings.paths.waiting_marker().exists(), "the Epilog is to wake it");
    assert_eq!(
        a.next_look(Some(std::time::Instant::now())),
        FAST_POLL,
        "woken by an Epilog"
    );
    {
        let mut st = slurm.state.lock().unwrap();
        st.nodes[0].alloc_cpus = 0;
        st.nodes[0].state = NodeState::Idle;
    }
    assert_eq!(a.step().unwrap(), Step::Nothing);
    assert_eq!(a.next_look(None), FAST_POLL, "just freed");
    assert!(!a.settings.paths.waiting_marker().exists());
    // A fresh agent of an idle node: not just freed, but idle in service.
    let mut b = agent(&d.path().join("b"), &slurm);
    assert_eq!(b.step().unwrap(), Step::Nothing);
    assert_eq!(b.next_look(None), IDLE_POLL);
    slurm.state.lock().unwrap().nodes[0].flags.push("DRAIN".into());
    assert_eq!(b.step().unwrap(), Step::Nothing);
    assert_eq!(
        b.next_look(None),
        Duration::from_secs(1),
        "drained by someone else: its poll"
    );
}

/// With the controller's wake-ups, the Epilog is asked to wake the agent (the waiting marker)
/// only while its node is drained for it and jobs still run; without them, whenever the node
/// runs jobs.
#[test]
fn with_wake_ups_the_epilog_wakes_the_agent_only_while_its_drained_node_runs_jobs() {
    let d = tempfile::tempdir().unwrap();
    let mut busy = idle_node("n1", "gpu:7g.80gb:2");
    busy.state = NodeState::Mixed;
    busy.alloc_cpus = 1;
    let slurm = Arc::new(FakeSlurm::new(vec![busy], vec![]));
    let mut a = agent(d.path(), &slurm);
    a.woken_by_controller = true;
    let marker = a.settings.paths.waiting_marker();
    assert_eq!(a.step().unwrap(), Step::Nothing);
    assert!(!marker.exists(), "in service: the controller wakes it after a drain");
    {
        let mut st = slurm.state.lock().unwrap();
        st.nodes[0].flags.push("DRAIN".into());
        st.nodes[0].reason = NodeIntent::Repartition(layout("2x3g.40gb,1x7g.80gb")).encode();
    }
    assert_eq!(a.step().unwrap(), Step::WaitingForJobs);
    assert!(marker.exists(), "drained for it with jobs: each job's end wakes it");
    // Without wake-ups: in service with jobs, the marker is there too.
    let mut b = agent(&d.path().join("b"), &slurm);
    slurm.state.lock().unwrap().nodes[0].flags.clear();
    assert_eq!(b.step().unwrap(), Step::Nothing);
    assert!(b.settings.paths.waiting_marker().exists());
}
