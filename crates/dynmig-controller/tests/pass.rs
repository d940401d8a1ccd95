//! The controller pass against the fake Slurm.

use dynmig_controller::{pass, JobFeed, ManagedNode, PassSettings};
use dynmig_core::demand::Demand;
use dynmig_core::geometry::{all_layouts, NodeLayout, A100_80GB};
use dynmig_core::policy::{DemandDriven, PolicyLimits};
use dynmig_core::policy::{NodeSnapshot, Policy, Repartition};
use dynmig_core::protocol::intent::NodeIntent;
use dynmig_core::types::DrainMode;
use dynmig_host::fs::LineLog;
use dynmig_slurm::fake::{pending_job, published_node, running_job, FakeSlurm};
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
    published_node(name, &NodeLayout::parse(&A100_80GB, 2, layout).unwrap())
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
        drain: DrainMode::Reservation,
        reservation_duration: Duration::from_secs(600),
        plans: None,
        sweep: false,
        catalog: None,
        retype: false,
    }
}

/// Settings that keep plans in `dir`.
fn with_plans(now: i64, dir: &std::path::Path) -> PassSettings {
    PassSettings {
        plans: Some(dir.join("controller-plans.json")),
        ..settings(now)
    }
}

/// A node running one 7g.80gb job on GPU 0 until `end`.
fn busy(name: &str, layout: &str) -> NodeInfo {
    let mut n = node(name, layout);
    n.state = NodeState::Mixed;
    n.alloc_cpus = 1;
    n.gres_used = "gpu:7g.80gb:1(IDX:0)".into();
    n
}

/// A policy that returns what the test says.
struct Says(Vec<(String, String)>);

impl Policy for Says {
    fn name(&self) -> &'static str {
        "says"
    }
    fn plan(&mut self, nodes: &[NodeSnapshot], _: &Demand) -> Vec<Repartition> {
        self.0
            .iter()
            .map(|(n, t)| Repartition {
                node: n.clone(),
                target: NodeLayout::parse(&A100_80GB, 2, t).unwrap(),
                serves: Default::default(),
            })
            .filter(|r| nodes.iter().any(|s| s.name == r.node))
            .collect()
    }
}

#[test]
fn a_busy_node_gets_a_reservation_at_its_jobs_end_instead_of_a_drain() {
    let slurm = FakeSlurm::new(
        vec![busy("n1", "1x7g.80gb,1x7g.80gb")],
        vec![
            running_job(7, "n1", "gres:gpu:7g.80gb:1", 1000 + 300),
            running_job(8, "n[1-2]", "", 1000 + 120),
            pending_job(1, "gres:gpu:1g.10gb:1"),
        ],
    );
    let dir = tempfile_dir("reserve");
    let log = LineLog::to(dir.join("events.jsonl"));
    let r = pass(
        &slurm,
        &[managed("n1")],
        &mut policy(),
        &mut JobFeed::new(),
        &log,
        &with_plans(1000, &dir),
    )
    .unwrap();
    assert!(r.drained.is_empty(), "{r:?}");
    assert_eq!(r.planned.len(), 1);
    assert_eq!(
        slurm.calls(),
        vec!["reserve dynmig_n1 n1 start=1300 minutes=10".to_string()],
        "the latest time limit of the node's jobs, no drain"
    );
    let n1 = slurm.node("n1").unwrap().unwrap();
    assert!(!n1.is_drain() && n1.reason.is_empty());
    let plans = std::fs::read_to_string(dir.join("controller-plans.json")).unwrap();
    assert!(
        plans.contains("\"node\":\"n1\"") && plans.contains("\"start\":1300"),
        "{plans}"
    );
    assert!(std::fs::read_to_string(dir.join("events.jsonl"))
        .unwrap()
        .contains("\"kind\":\"planned\""));

    // Next pass: the plan is in the snapshot (counted as under way), nothing new happens.
    let r = pass(
        &slurm,
        &[managed("n1")],
        &mut policy(),
        &mut JobFeed::new(),
        &log,
        &with_plans(1010, &dir),
    )
    .unwrap();
    assert!(r.drained.is_empty() && r.planned.is_empty(), "{r:?}");
    assert_eq!(slurm.calls().len(), 1, "{:?}", slurm.calls());

    // The reservation's start comes: drained with the intent, reservation deleted.
    let r = pass(
        &slurm,
        &[managed("n1")],
        &mut policy(),
        &mut JobFeed::new(),
        &log,
        &with_plans(1300, &dir),
    )
    .unwrap();
    assert_eq!(r.drained.len(), 1);
    let calls = slurm.calls();
    assert!(calls[1].starts_with("drain n1 dynmig/v1 repartition to="), "{calls:?}");
    assert_eq!(calls[2], "unreserve dynmig_n1");
    assert!(slurm.state.lock().unwrap().reservations.is_empty());
    assert!(!std::fs::read_to_string(dir.join("controller-plans.json"))
        .unwrap()
        .contains("n1"));
}

#[test]
fn an_idle_node_is_drained_at_once_and_immediate_mode_drains_a_busy_one() {
    let slurm = FakeSlurm::new(
        vec![node("n1", "1x7g.80gb,1x7g.80gb")],
        vec![pending_job(1, "gres:gpu:1g.10gb:1")],
    );
    let dir = tempfile_dir("idle");
    let r = pass(
        &slurm,
        &[managed("n1")],
        &mut policy(),
        &mut JobFeed::new(),
        &LineLog::none(),
        &with_plans(1000, &dir),
    )
    .unwrap();
    assert_eq!((r.drained.len(), r.planned.len()), (1, 0));
    assert_eq!(slurm.calls().len(), 1);
    assert!(slurm.calls()[0].starts_with("drain n1 "));

    let slurm = FakeSlurm::new(
        vec![busy("n1", "1x7g.80gb,1x7g.80gb")],
        vec![
            running_job(7, "n1", "gres:gpu:7g.80gb:1", 1300),
            pending_job(1, "gres:gpu:1g.10gb:1"),
        ],
    );
    let s = PassSettings {
        drain: DrainMode::Immediate,
        ..with_plans(1000, &dir)
    };
    let r = pass(
        &slurm,
        &[managed("n1")],
        &mut policy(),
        &mut JobFeed::new(),
        &LineLog::none(),
        &s,
    )
    .unwrap();
    assert_eq!((r.drained.len(), r.planned.len()), (1, 0));
    assert!(slurm.calls()[0].starts_with("drain n1 "), "{:?}", slurm.calls());
}

#[test]
fn a_planned_node_that_becomes_idle_is_drained_before_its_reservation() {
    let slurm = one_busy_node();
    let dir = tempfile_dir("early");
    plan_n1(&slurm, &[managed("n1")], &dir);
    // The job ends early.
    {
        let mut s = slurm.state.lock().unwrap();
        s.jobs.clear();
        s.nodes[0] = node("n1", "1x7g.80gb,1x7g.80gb");
    }
    let r = pass(
        &slurm,
        &[managed("n1")],
        &mut Says(vec![]),
        &mut JobFeed::new(),
        &LineLog::none(),
        &with_plans(1100, &dir),
    )
    .unwrap();
    assert_eq!(r.drained.len(), 1);
    let n1 = slurm.node("n1").unwrap().unwrap();
    assert_eq!(n1.reason, "dynmig/v1 repartition to=7x1g.10gb,1x7g.80gb");
    assert!(slurm.state.lock().unwrap().reservations.is_empty());
}

#[test]
fn a_reservation_is_brought_forward_when_the_jobs_end_earlier() {
    let slurm = FakeSlurm::new(
        vec![busy("n1", "1x7g.80gb,1x7g.80gb")],
        vec![
            running_job(7, "n1", "gres:gpu:7g.80gb:1", 5000),
            running_job(8, "n1", "gres:gpu:7g.80gb:1", 2000),
        ],
    );
    let dir = tempfile_dir("forward");
    let m = [managed("n1")];
    plan_n1(&slurm, &m, &dir);
    // The long job is cancelled: the reservation starts when the other one ends.
    slurm.state.lock().unwrap().jobs.retain(|j| j.id != 7);
    pass(
        &slurm,
        &m,
        &mut Says(vec![]),
        &mut JobFeed::new(),
        &LineLog::none(),
        &with_plans(1100, &dir),
    )
    .unwrap();
    assert_eq!(slurm.calls().last().unwrap(), "reserve-update dynmig_n1 start=2000");
    assert_eq!(slurm.state.lock().unwrap().reservations[0].start, 2000);
    // A dry run reads the plan but changes nothing.
    let before = std::fs::read_to_string(dir.join("controller-plans.json")).unwrap();
    let s = PassSettings {
        dry_run: true,
        ..with_plans(2000, &dir)
    };
    let r = pass(&slurm, &m, &mut Says(vec![]), &mut JobFeed::new(), &LineLog::none(), &s).unwrap();
    assert_eq!(r.drained.len(), 1, "would start the plan");
    assert_eq!(slurm.calls().len(), 2);
    assert_eq!(
        std::fs::read_to_string(dir.join("controller-plans.json")).unwrap(),
        before
    );
}

#[test]
fn a_plan_is_moved_and_cancelled() {
    let slurm = one_busy_node();
    let dir = tempfile_dir("move");
    let m = [managed("n1")];
    plan_n1(&slurm, &m, &dir);
    // The policy sees the plan, and moves it.
    let mut p = Says(vec![("n1".into(), "2x3g.40gb,1x7g.80gb".into())]);
    let r = pass(
        &slurm,
        &m,
        &mut p,
        &mut JobFeed::new(),
        &LineLog::none(),
        &with_plans(1010, &dir),
    )
    .unwrap();
    assert_eq!(r.moved.len(), 1);
    assert_eq!(slurm.calls().len(), 1, "same reservation: {:?}", slurm.calls());
    let plans = std::fs::read_to_string(dir.join("controller-plans.json")).unwrap();
    assert!(plans.contains("2x3g.40gb,1x7g.80gb"), "{plans}");
    // The current layout cancels it.
    let mut p = Says(vec![("n1".into(), "1x7g.80gb,1x7g.80gb".into())]);
    let r = pass(
        &slurm,
        &m,
        &mut p,
        &mut JobFeed::new(),
        &LineLog::none(),
        &with_plans(1020, &dir),
    )
    .unwrap();
    assert_eq!(r.cancelled, vec!["n1".to_string()]);
    assert_eq!(slurm.calls().last().unwrap(), "unreserve dynmig_n1");
    assert!(slurm.state.lock().unwrap().reservations.is_empty());
    let n1 = slurm.node("n1").unwrap().unwrap();
    assert!(!n1.is_drain());
}

#[test]
fn the_policy_sees_a_plan_as_planned_and_under_way() {
    struct Look(Vec<NodeSnapshot>);
    impl Policy for Look {
        fn name(&self) -> &'static str {
            "look"
        }
        fn plan(&mut self, nodes: &[NodeSnapshot], _: &Demand) -> Vec<Repartition> {
            self.0 = nodes.to_vec();
            vec![]
        }
    }
    let slurm = one_busy_node();
    let dir = tempfile_dir("look");
    plan_n1(&slurm, &[managed("n1")], &dir);
    let mut look = Look(vec![]);
    pass(
        &slurm,
        &[managed("n1")],
        &mut look,
        &mut JobFeed::new(),
        &LineLog::none(),
        &with_plans(1100, &dir),
    )
    .unwrap();
    let st = dynmig_controller::status::read_status(&slurm, &[managed("n1")], &dir, 1100).unwrap();
    let plan = st.nodes[0].plan.as_ref().unwrap();
    assert_eq!(
        (plan.target.as_str(), plan.reservation.as_deref(), plan.start),
        ("7x1g.10gb,1x7g.80gb", Some("dynmig_n1"), Some(1300))
    );
    let status = st.render_text();
    assert!(
        status.contains("planned") && status.contains("reservation dynmig_n1 starts in 200 s"),
        "{status}"
    );
    let n = &look.0[0];
    assert_eq!(n.work_ends_in, Duration::from_secs(200));
    assert_eq!(n.planned.as_ref().unwrap().to_string(), "7x1g.10gb,1x7g.80gb");
    assert!(n.repartitioning && !n.unavailable, "under way, still takes jobs");
    assert_eq!(n.incoming["1g.10gb"], 7);
}

#[test]
fn a_restarted_controller_recovers_its_plan_and_repairs_mismatches() {
    let slurm = FakeSlurm::new(
        vec![busy("n1", "1x7g.80gb,1x7g.80gb"), busy("n2", "1x7g.80gb,1x7g.80gb")],
        vec![
            running_job(7, "n1", "gres:gpu:7g.80gb:1", 1300),
            running_job(8, "n2", "gres:gpu:7g.80gb:1", 2000),
        ],
    );
    let dir = tempfile_dir("restart");
    let m = [managed("n1"), managed("n2")];
    plan_n1(&slurm, &m, &dir);
    // A reservation without a plan (a controller stopped between the two).
    slurm
        .state
        .lock()
        .unwrap()
        .reservations
        .push(dynmig_slurm::MaintReservation {
            name: "dynmig_n2".into(),
            node: "n2".into(),
            start: 1300,
            duration: Duration::from_secs(600),
        });
    // A new controller process: first pass sweeps, the plan of n1 is read back and kept.
    let s = PassSettings {
        sweep: true,
        ..with_plans(1100, &dir)
    };
    let r = pass(&slurm, &m, &mut Says(vec![]), &mut JobFeed::new(), &LineLog::none(), &s).unwrap();
    assert_eq!(r.repaired.len(), 1, "{r:?}");
    assert_eq!(r.repaired[0].0, "n2");
    let names: Vec<String> = slurm
        .state
        .lock()
        .unwrap()
        .reservations
        .iter()
        .map(|r| r.name.clone())
        .collect();
    assert_eq!(names, ["dynmig_n1"]);
    let r = pass(
        &slurm,
        &m,
        &mut Says(vec![]),
        &mut JobFeed::new(),
        &LineLog::none(),
        &with_plans(1300, &dir),
    )
    .unwrap();
    assert_eq!(r.drained.len(), 1, "the recovered plan starts on time");
    assert_eq!(
        slurm.node("n1").unwrap().unwrap().reason,
        "dynmig/v1 repartition to=7x1g.10gb,1x7g.80gb"
    );

    // A plan whose reservation an administrator deleted is dropped; the node is not drained.
    pass(
        &slurm,
        &m,
        &mut Says(vec![("n2".into(), "7x1g.10gb,1x7g.80gb".into())]),
        &mut JobFeed::new(),
        &LineLog::none(),
        &with_plans(1310, &dir),
    )
    .unwrap();
    slurm.state.lock().unwrap().reservations.clear();
    let r = pass(
        &slurm,
        &m,
        &mut Says(vec![]),
        &mut JobFeed::new(),
        &LineLog::none(),
        &with_plans(1320, &dir),
    )
    .unwrap();
    assert_eq!(r.repaired.len(), 1, "{r:?}");
    assert!(r.drained.is_empty());
    assert!(!slurm.node("n2").unwrap().unwrap().is_drain());

    // An unreadable plans file is moved aside, and every dynmig reservation without a plan goes.
    std::fs::write(dir.join("controller-plans.json"), "{nope").unwrap();
    slurm
        .state
        .lock()
        .unwrap()
        .reservations
        .push(dynmig_slurm::MaintReservation {
            name: "dynmig_n2".into(),
            node: "n2".into(),
            start: 1400,
            duration: Duration::from_secs(600),
        });
    let r = pass(
        &slurm,
        &m,
        &mut Says(vec![]),
        &mut JobFeed::new(),
        &LineLog::none(),
        &with_plans(1330, &dir),
    )
    .unwrap();
    assert!(r.repaired.iter().any(|(n, _)| n == "n2"), "{r:?}");
    assert!(slurm.state.lock().unwrap().reservations.is_empty());
    assert!(dir.join("controller-plans.json.bad").exists());
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
    let dir = tempfile_dir("drain");
    let log = LineLog::to(dir.join("events.jsonl"));
    let r = pass(
        &slurm,
        &[managed("n1"), managed("n2")],
        &mut policy(),
        &mut JobFeed::new(),
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
    let r = pass(
        &slurm,
        &[managed("n1")],
        &mut policy(),
        &mut JobFeed::new(),
        &LineLog::none(),
        &s,
    )
    .unwrap();
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
        &mut JobFeed::new(),
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
        &mut JobFeed::new(),
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
    assert!(pass(
        &slurm,
        &[managed("n1")],
        &mut policy(),
        &mut JobFeed::new(),
        &LineLog::none(),
        &settings(1)
    )
    .is_err());
}

/// n1 busy with job 7 until 1300.
fn one_busy_node() -> FakeSlurm {
    FakeSlurm::new(
        vec![busy("n1", "1x7g.80gb,1x7g.80gb")],
        vec![running_job(7, "n1", "gres:gpu:7g.80gb:1", 1300)],
    )
}

/// A first pass at 1000 whose policy plans n1 to `7x1g.10gb,1x7g.80gb`.
fn plan_n1(slurm: &FakeSlurm, m: &[ManagedNode], dir: &std::path::Path) {
    let mut p = Says(vec![("n1".into(), "7x1g.10gb,1x7g.80gb".into())]);
    pass(
        slurm,
        m,
        &mut p,
        &mut JobFeed::new(),
        &LineLog::none(),
        &with_plans(1000, dir),
    )
    .unwrap();
}

fn tempfile_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("dynmig-pass-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn the_configured_planner_reserves_the_node_whose_jobs_end_soonest_for_a_typed_need() {
    let toml = dynmig_core::config::EXAMPLE_TOML.replacen("kind = \"guarded\" ", "kind = \"plan\"    ", 1);
    let config = dynmig_core::config::parse_config(&toml).unwrap();
    let mut planner = dynmig_controller::policy_from_config(&config).unwrap();
    assert_eq!(planner.name(), "plan");
    let slurm = FakeSlurm::new(
        vec![busy("n1", "1x7g.80gb,1x7g.80gb"), busy("n2", "1x7g.80gb,1x7g.80gb")],
        vec![
            running_job(7, "n1", "gres:gpu:7g.80gb:1", 1000 + 3000),
            running_job(8, "n2", "gres:gpu:7g.80gb:1", 1000 + 300),
            pending_job(1, "gres:gpu:2g.20gb:1"),
        ],
    );
    let dir = tempfile_dir("planner");
    let log = LineLog::to(dir.join("events.jsonl"));
    let managed = [managed("n1"), managed("n2")];
    let r = pass(
        &slurm,
        &managed,
        planner.as_mut(),
        &mut JobFeed::new(),
        &log,
        &with_plans(1000, &dir),
    )
    .unwrap();
    assert_eq!(r.planned.len(), 1, "{r:?}");
    assert_eq!(r.planned[0].node, "n2", "n2's job ends first");
    assert!(
        r.planned[0].target.to_string().contains("2g.20gb"),
        "Slurm runs a 2g job only on a 2g instance: {}",
        r.planned[0].target
    );
}

/// The example config with `policy` in place of its `[policy]` kind.
fn config_with(policy: &str) -> dynmig_core::config::Config {
    let toml = dynmig_core::config::EXAMPLE_TOML.replacen("kind = \"guarded\" ", &format!("kind = \"{policy}\" "), 1);
    dynmig_core::config::parse_config(&toml).unwrap()
}

/// n1 (3x2g.20gb+1x1g.10gb on both GPUs) runs six 2g.20gb jobs until `n1_end` (started at 0,
/// their time limits ending then), n2 (whole GPUs) is idle; twelve 2g.20gb jobs with 30 min
/// limits and deadlines at 1000 + `deadline_in` wait (the planner waits out a queue no longer
/// than the running jobs).
fn waiting_2g(n1_end: i64, deadline_in: i64) -> FakeSlurm {
    let mut n1 = node("n1", "3x2g.20gb+1x1g.10gb,3x2g.20gb+1x1g.10gb");
    n1.state = NodeState::Mixed;
    n1.alloc_cpus = 1;
    n1.gres_used = "gpu:2g.20gb:6(IDX:0-1)".into();
    let with_limit = |mut j: dynmig_slurm::JobInfo| {
        j.time_limit_s = Some(j.end_time);
        j
    };
    let mut jobs: Vec<_> = (0..6)
        .map(|i| with_limit(running_job(10 + i, "n1", "gres:gpu:2g.20gb:1", n1_end)))
        .collect();
    for id in 1..=12 {
        let mut j = pending_job(id, "gres:gpu:2g.20gb:1");
        j.submit_time = 990;
        j.time_limit_s = Some(1800);
        j.deadline = 1000 + deadline_in;
        jobs.push(j);
    }
    FakeSlurm::new(vec![n1, node("n2", "1x7g.80gb,1x7g.80gb")], jobs)
}

/// What `policy` decides for `slurm` at 1000: nodes drained or planned.
fn decides(policy: &str, slurm: &FakeSlurm) -> Vec<String> {
    let managed = [managed("n1"), managed("n2")];
    let mut p = dynmig_controller::policy_from_config(&config_with(policy)).unwrap();
    assert_eq!(p.name(), policy);
    let r = pass(
        slurm,
        &managed,
        p.as_mut(),
        &mut JobFeed::new(),
        &LineLog::none(),
        &PassSettings {
            dry_run: true,
            ..settings(1000)
        },
    )
    .unwrap();
    r.drained.iter().chain(&r.planned).map(|d| d.node.clone()).collect()
}

#[test]
fn mpc_makes_the_planners_change_when_the_lookahead_says_it_pays_and_not_when_it_does_not() {
    assert!(dynmig_controller::policy_from_config(&config_with("mpc"))
        .unwrap()
        .observes_jobs());
    // The 2g.20gb instances are busy for another 5 h: without a change the waiting jobs miss
    // their deadline by hours; n2 with 2g.20gb instances meets it.
    let slurm = waiting_2g(1000 + 5 * 3600, 3600);
    assert_eq!(decides("plan", &slurm), ["n2"]);
    assert_eq!(decides("mpc", &slurm), ["n2"]);
    // The 2g.20gb instances free at 1310 and the deadlines are a day away: the jobs are in
    // time on them, in two rounds; the same proposal gains nothing, so mpc does not make it.
    let slurm = waiting_2g(1310, 86_400);
    assert_eq!(decides("plan", &slurm), ["n2"]);
    assert_eq!(decides("mpc", &slurm), Vec::<String>::new());
}

#[test]
fn the_adaptive_policy_follows_jobs_and_changes_nothing_before_a_day_of_history() {
    assert!(dynmig_controller::policy_from_config(&config_with("adaptive"))
        .unwrap()
        .observes_jobs());
    // The planner would take n2 for the waiting jobs; the adaptive policy has seen no past
    // day to search a layout on, so the nodes keep theirs.
    let slurm = waiting_2g(1000 + 5 * 3600, 3600);
    assert_eq!(decides("plan", &slurm), ["n2"]);
    assert_eq!(decides("adaptive", &slurm), Vec::<String>::new());
}

#[test]
fn the_learned_policy_is_served_from_its_model_file_and_a_model_for_other_gpus_is_refused() {
    let dir = tempfile_dir("learned");
    let file = dir.join("model.safetensors");
    let config_for = |file: &std::path::Path| {
        let toml = dynmig_core::config::EXAMPLE_TOML
            .replacen(
                "kind = \"guarded\" ",
                &format!("kind = \"learned\"\nmodel = \"{}\" ", file.display()),
                1,
            )
            .replacen("min_gain = 1 ", "# min_gain = 1", 1);
        dynmig_core::config::parse_config(&toml).unwrap()
    };
    // An untrained model for the example's A100-80GB nodes.
    let m = dynmig_learn::Model::fresh(
        dynmig_learn::catalogue::Catalogue::for_model(&A100_80GB),
        8,
        "test".into(),
        1,
    );
    m.save(&file).unwrap();
    let mut p = dynmig_controller::policy_from_config(&config_for(&file)).unwrap();
    assert_eq!(p.name(), "learned");
    // It decides on the controller's snapshot (an idle node, pending 2g.20gb demand).
    let slurm = FakeSlurm::new(
        vec![node("n1", "1x7g.80gb,1x7g.80gb")],
        vec![pending_job(1, "gres:gpu:2g.20gb:1")],
    );
    let r = pass(
        &slurm,
        &[managed("n1")],
        p.as_mut(),
        &mut JobFeed::new(),
        &LineLog::none(),
        &PassSettings {
            dry_run: true,
            ..settings(1000)
        },
    );
    assert!(r.is_ok(), "{r:?}");
    // A model for H100-80GB GPUs is refused with what it was trained for.
    let h100 = dir.join("h100.safetensors");
    let m = dynmig_learn::Model::fresh(
        dynmig_learn::catalogue::Catalogue::for_model(&dynmig_core::geometry::H100_80GB),
        8,
        "test".into(),
        1,
    );
    m.save(&h100).unwrap();
    let e = dynmig_controller::policy_from_config(&config_for(&h100))
        .err()
        .expect("refused");
    assert!(
        e.contains("was trained for H100-80GB GPUs") && e.contains("this cluster has A100-80GB"),
        "{e}"
    );
    let e = dynmig_controller::policy_from_config(&config_for(&dir.join("missing.safetensors")))
        .err()
        .expect("refused");
    assert!(e.contains("missing.safetensors"), "{e}");
}
