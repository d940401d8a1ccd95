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
use common::{agent, agent_losing_daemons, agent_simulated, agent_with_killable_daemon, drained_node, layout, standin};

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
fn a_drained_node_backfill_still_plans_on_is_not_deleted_until_the_flag_clears() {
    // 22.05.8's slurmctld crashed in its next backfill cycle after the agent deleted a node
    // flagged PLANNED (queue campaign, 2026-11-28; SchedMD bug 16165, fixed in 22.05.9).
    let d = tempfile::tempdir().unwrap();
    let mut n = drained_node("7x1g.10gb,1x7g.80gb");
    n.flags.push("PLANNED".into());
    let slurm = Arc::new(FakeSlurm::new(vec![n], vec![]));
    let mut a = agent(d.path(), &slurm, false);
    assert_eq!(a.step().unwrap(), Step::WaitingForBackfill);
    assert_eq!(a.step().unwrap(), Step::WaitingForBackfill);
    assert!(slurm.calls().is_empty(), "nothing changed: {:?}", slurm.calls());
    assert!(!a.settings.paths.journal().exists(), "no apply begun");
    slurm.state.lock().unwrap().nodes[0].flags.retain(|f| f != "PLANNED");
    assert_eq!(a.step().unwrap(), Step::Applied(layout("7x1g.10gb,1x7g.80gb")));
    assert!(
        slurm.calls().iter().any(|c| c.starts_with("delete")),
        "{:?}",
        slurm.calls()
    );
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

#[test]
fn one_failed_read_of_the_gpus_anywhere_in_an_apply_leaves_gpus_and_gres_conf_agreeing() {
    // Found by fault injection on the local cluster (tests/cluster/faults.rs): a failed read
    // of GPU 1 left GPU 0 changed, and one during the gres.conf write left every GPU changed,
    // while gres.conf (and so Slurm) still described the old layout.
    // On both backends: the simulated one's list faults, and NVML's TIMEOUT on the n-th
    // nvmlDeviceGetMigMode (every read of a GPU asks it) from the stand-in.
    for (simulated, n) in (1..=10).map(|n| (true, n)).chain((1..=12).map(|n| (false, n))) {
        let d = tempfile::tempdir().unwrap();
        let slurm = Arc::new(FakeSlurm::new(vec![drained_node("2x3g.40gb,7x1g.10gb")], vec![]));
        let mut a = if simulated {
            agent_simulated(d.path(), &slurm)
        } else {
            agent(d.path(), &slurm, false)
        };
        let conf = a.settings.paths.gres_conf.clone();
        dynmig_gpu::gres_conf::write_for(a.backend.as_ref(), &conf).unwrap();
        let faults = format!("{}.faults.json", a.settings.paths.sim_state().display());
        let fault = |after: u32| nvml_standin::Fault {
            function: "nvmlDeviceGetMigMode".into(),
            after,
            error: Some("TIMEOUT".into()),
            hang_ms: None,
        };
        if simulated {
            let plan = format!(r#"[{{"op": "list", "after": {n}, "error": "timeout"}}]"#);
            std::fs::write(&faults, plan).unwrap();
        } else {
            standin(d.path()).set_faults(vec![fault(n)]).unwrap();
        }
        let step = a.step().unwrap();
        // An n past the apply's reads did not fire.
        if simulated {
            std::fs::write(&faults, "[]").unwrap();
        } else {
            standin(d.path()).set_faults(vec![]).unwrap();
        }
        let now = d.path().join("now.conf");
        dynmig_gpu::gres_conf::write_for(a.backend.as_ref(), &now).unwrap();
        assert_eq!(
            std::fs::read_to_string(&conf).unwrap(),
            std::fs::read_to_string(&now).unwrap(),
            "list #{n}: gres.conf differs from the GPUs after {step:?}"
        );
        let held: Vec<String> = a
            .backend
            .gpus()
            .unwrap()
            .iter()
            .map(|g| g.layout().to_string())
            .collect();
        match step {
            Step::Applied(_) => assert_eq!(held, ["2x3g.40gb", "7x1g.10gb"], "list #{n}"),
            Step::Failed(why) => {
                assert_eq!(held, ["1x7g.80gb", "1x7g.80gb"], "list #{n}: {why}");
                assert!(why.contains("NVML_ERROR_TIMEOUT"), "list #{n}: {why}");
            }
            other => panic!("list #{n}: {other:?}"),
        }
    }
}

#[test]
fn a_slurmd_killed_before_it_registered_is_started_again_and_the_node_comes_back() {
    // Found by fault injection on the local cluster (tests/cluster/faults.rs): slurmd killed
    // right after it daemonised left the node deleted from Slurm; the agent waited
    // register_timeout and failed with no node left to drain.
    let d = tempfile::tempdir().unwrap();
    let slurm = Arc::new(FakeSlurm::new(vec![drained_node("7x1g.10gb,1x7g.80gb")], vec![]));
    let (mut a, calls) = agent_losing_daemons(d.path(), &slurm, 1);
    a.settings.register_timeout = std::time::Duration::from_secs(10);
    assert_eq!(a.step().unwrap(), Step::Applied(layout("7x1g.10gb,1x7g.80gb")));
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);
    let n = slurm.node("n1").unwrap().unwrap();
    assert!(!n.is_drain());
    assert!(!a.settings.paths.journal().exists());
}

#[test]
fn a_slurmd_the_agent_started_that_dies_later_is_started_again_with_the_applied_gres() {
    // Found by tests/cluster/faults.rs on 26.05 (CI, 2026-11-29): a slurmd killed right
    // after it registered left the node not responding, and the job Slurm sent there was
    // requeued and stuck.
    use std::sync::atomic::Ordering::SeqCst;
    let d = tempfile::tempdir().unwrap();
    let slurm = Arc::new(FakeSlurm::new(vec![drained_node("7x1g.10gb,1x7g.80gb")], vec![]));
    let (mut a, calls, running) = agent_with_killable_daemon(d.path(), &slurm);
    assert!(a.keep_slurmd().is_none(), "nothing started yet: nothing to keep");
    assert_eq!(a.step().unwrap(), Step::Applied(layout("7x1g.10gb,1x7g.80gb")));
    assert_eq!(calls.load(SeqCst), 1);
    assert!(a.keep_slurmd().is_none(), "alive: nothing to do");
    running.store(false, SeqCst);
    assert!(a.keep_slurmd().is_none(), "dead for less than the grace: not yet");
    assert_eq!(calls.load(SeqCst), 1);
    std::thread::sleep(dynmig_node::agent::DAEMON_GONE_GRACE + std::time::Duration::from_millis(100));
    assert!(matches!(a.keep_slurmd(), Some(Ok(()))));
    assert_eq!(calls.load(SeqCst), 2, "registered again");
    assert!(running.load(SeqCst));
    let n = slurm.node("n1").unwrap().unwrap();
    assert_eq!(
        n.gres.split(',').count(),
        2,
        "with the applied layout's GRES: {}",
        n.gres
    );
    assert!(n.gres.contains("1g.10gb") && n.gres.contains("7g.80gb"), "{}", n.gres);
    let events = std::fs::read_to_string(d.path().join("events.jsonl")).unwrap_or_default();
    assert!(events.contains("slurmd_restarted"), "{events}");
}

/// Runs `run_forever` on a thread until `stop` is set, taking wake-ups on `wake`.
fn run_agent_thread(
    dir: std::path::PathBuf,
    slurm: Arc<FakeSlurm>,
    wake: Option<dynmig_node::agent::WakeOn>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut a = agent(&dir, &slurm, false);
        let harness = dynmig_host::daemon::Harness::with_signals(dynmig_host::daemon::Signals {
            stop,
            reload: Arc::default(),
        });
        dynmig_node::agent::run_forever(&mut a, harness, None, wake, &mut |_| {}).unwrap();
    })
}

#[test]
fn with_wake_ups_an_idle_agent_reads_its_node_rarely_and_a_wake_up_starts_the_apply() {
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};
    let d = tempfile::tempdir().unwrap();
    let mut idle = idle_node("n1", "gpu:7g.80gb:2");
    idle.extra = PublishedLayout(layout("1x7g.80gb,1x7g.80gb")).encode();
    let slurm = Arc::new(FakeSlurm::new(vec![idle], vec![]));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let listener = dynmig_host::wake::Listener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = listener.local_addr().port();
    let t = run_agent_thread(
        d.path().to_path_buf(),
        Arc::clone(&slurm),
        Some(dynmig_node::agent::WakeOn::Listener(listener)),
        Arc::clone(&stop),
    );
    let started = Instant::now();
    while slurm.state.lock().unwrap().node_reads == 0 {
        assert!(started.elapsed() < Duration::from_secs(5), "no look at the node in 5 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Idle and in service for 3 s after its first look: no other look (without wake-ups: one
    // every 0.5 s, see the next test).
    let first = slurm.state.lock().unwrap().node_reads;
    std::thread::sleep(Duration::from_secs(3));
    let reads = slurm.state.lock().unwrap().node_reads;
    assert!(
        reads - first <= 1,
        "{} node reads in the 3 s after the first {first}",
        reads - first
    );
    // The controller drains the node, then wakes the agent: the apply starts within a second
    // or so, not at the 30 s fallback look.
    slurm.state.lock().unwrap().nodes[0] = drained_node("7x1g.10gb,1x7g.80gb");
    let woke = Instant::now();
    assert_eq!(
        dynmig_host::wake::send("127.0.0.1", port),
        dynmig_host::wake::Sent::Woken
    );
    let applied = || {
        let n = slurm.node("n1").unwrap().unwrap();
        !n.is_drain() && n.gres.contains("1g.10gb")
    };
    while !applied() && woke.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(applied(), "not applied {:?} after the wake-up", woke.elapsed());
    assert!(woke.elapsed() < Duration::from_secs(5), "{:?}", woke.elapsed());
    stop.store(true, Ordering::SeqCst);
    t.join().unwrap();
}

#[test]
fn without_wake_ups_an_idle_agent_polls_its_node() {
    use std::sync::atomic::Ordering;
    use std::time::Duration;
    let d = tempfile::tempdir().unwrap();
    let mut idle = idle_node("n1", "gpu:7g.80gb:2");
    idle.extra = PublishedLayout(layout("1x7g.80gb,1x7g.80gb")).encode();
    let slurm = Arc::new(FakeSlurm::new(vec![idle], vec![]));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let t = run_agent_thread(d.path().to_path_buf(), Arc::clone(&slurm), None, Arc::clone(&stop));
    // IDLE_POLL (0.5 s): about 6 looks in 3 s on an idle machine; a loaded one (CI beside a
    // build) may take longer, so wait up to 15 s for 4 looks (with wake-ups: one in 30 s).
    let started = std::time::Instant::now();
    while slurm.state.lock().unwrap().node_reads < 4 && started.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::SeqCst);
    t.join().unwrap();
    let reads = slurm.state.lock().unwrap().node_reads;
    assert!(reads >= 4, "{reads} node reads in {:?}", started.elapsed());
}
