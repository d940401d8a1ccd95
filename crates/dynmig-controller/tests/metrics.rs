//! The controller's metrics after a pass against the fake Slurm, scraped over loopback and
//! checked with `promtool check metrics` where promtool is installed.

use dynmig_controller::metrics::ControllerMetrics;
use dynmig_controller::{pass, JobFeed, ManagedNode, PassSettings};
use dynmig_core::geometry::{all_layouts, NodeLayout, A100_80GB};
use dynmig_core::policy::{DemandDriven, PolicyLimits};
use dynmig_core::protocol::decision::DecisionRecord;
use dynmig_core::protocol::intent::NodeIntent;
use dynmig_core::types::{DrainMode, EstimateSource};
use dynmig_host::fs::LineLog;
use dynmig_host::metrics::{promtool_check, scrape, serve, PromtoolCheck};
use dynmig_slurm::fake::{pending_job, published_node, FakeSlurm};
use dynmig_slurm::{NodeInfo, NodeState};
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

/// n1 idle with two full GPUs, n2 failed; two pending 1g.10gb jobs, one decided from
/// --mig-mem, one from the history.
fn one_pass(m: &mut ControllerMetrics) {
    let mut failed = node("n2", "1x7g.80gb,1x7g.80gb");
    failed.state = NodeState::Idle;
    failed.flags.push("DRAIN".into());
    failed.reason = NodeIntent::Failed("nvml: busy".into()).encode();
    let decided = |id, source| {
        let mut j = pending_job(id, "gres:gpu:1g.10gb:1");
        j.admin_comment = DecisionRecord::new("1g.10gb", 1, 8 << 30, source).encode();
        j
    };
    let slurm = FakeSlurm::new(
        vec![node("n1", "1x7g.80gb,1x7g.80gb"), failed],
        vec![
            decided(1, EstimateSource::MigMemHint),
            decided(2, EstimateSource::History),
        ],
    );
    let settings = PassSettings {
        drain_timeout: Duration::from_secs(600),
        dry_run: false,
        now: 1000,
        drain: DrainMode::Reservation,
        reservation_duration: Duration::from_secs(600),
        plans: None,
        sweep: false,
        catalog: None,
        retype: false,
    };
    let mut policy = DemandDriven::new(PolicyLimits {
        max_concurrent: 1,
        min_layout_lifetime: Duration::ZERO,
        min_gain: 1,
    });
    let r = pass(
        &slurm,
        &[managed("n1"), managed("n2")],
        &mut policy,
        &mut JobFeed::new(),
        &LineLog::none(),
        &settings,
    )
    .unwrap();
    assert_eq!(r.drained.len(), 1, "{r:?}");
    m.pass_ok(&r, Duration::from_millis(30));
}

#[test]
fn a_scrape_over_loopback_shows_demand_supply_roles_repartitions_and_sources() {
    let mut m = ControllerMetrics::new();
    one_pass(&mut m);
    m.pass_failed(Duration::from_millis(5));
    let server = serve("127.0.0.1:0".parse().unwrap(), m.registry(), "controller").unwrap();
    let (status, body) = scrape(server.local_addr()).unwrap();
    assert_eq!(status, "HTTP/1.1 200 OK");
    for line in [
        "dynmig_controller_pending_instances{profile=\"1g.10gb\"} 2",
        "dynmig_controller_instances{node=\"n1\",profile=\"7g.80gb\"} 2",
        "dynmig_controller_free_instances{node=\"n1\",profile=\"7g.80gb\"} 2",
        "dynmig_controller_nodes{role=\"in_service\"} 1",
        "dynmig_controller_nodes{role=\"failed\"} 1",
        "dynmig_controller_repartitions_started_total 1",
        "dynmig_controller_repartitions_planned_total 0",
        "dynmig_controller_drain_waste_instances 0",
        "dynmig_controller_decided_jobs{state=\"pending\",source=\"mig-mem\"} 1",
        "dynmig_controller_decided_jobs{state=\"pending\",source=\"history\"} 1",
        "dynmig_controller_passes_total{result=\"ok\"} 1",
        "dynmig_controller_passes_total{result=\"error\"} 1",
        "dynmig_controller_pass_duration_seconds_count 2",
        "# TYPE dynmig_controller_repartitions_started_total counter",
    ] {
        assert!(body.lines().any(|l| l == line), "no line {line:?} in\n{body}");
    }
    // The failed node is not supply: its layout is not trusted.
    assert!(!body.contains("node=\"n2\""), "{body}");
    // A second pass counts again; gauges are replaced, not added.
    one_pass(&mut m);
    let body = scrape(server.local_addr()).unwrap().1;
    assert!(
        body.contains("\ndynmig_controller_repartitions_started_total 2\n"),
        "{body}"
    );
    assert!(
        body.contains("\ndynmig_controller_pending_instances{profile=\"1g.10gb\"} 2\n"),
        "{body}"
    );
}

#[test]
fn promtool_accepts_the_scrape() {
    let mut m = ControllerMetrics::new();
    one_pass(&mut m);
    let server = serve("127.0.0.1:0".parse().unwrap(), m.registry(), "controller").unwrap();
    let body = scrape(server.local_addr()).unwrap().1;
    match promtool_check(&body) {
        PromtoolCheck::Absent => eprintln!("skipped: promtool not found (install Debian's prometheus package)"),
        r => assert_eq!(r, PromtoolCheck::Passed, "{body}"),
    }
}
