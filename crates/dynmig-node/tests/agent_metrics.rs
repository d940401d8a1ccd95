//! The agent's metrics: an apply that finishes and one that fails, the GPUs' instances and
//! the energy charged to a job, scraped over loopback and checked with `promtool check
//! metrics` where promtool is installed.

use dynmig_gpu::energy::{sample_node, Ledger};
use dynmig_host::metrics::{promtool_check, scrape, serve, PromtoolCheck};
use dynmig_node::agent::Step;
use dynmig_slurm::fake::FakeSlurm;
use std::sync::Arc;
use std::time::Duration;

mod common;
use common::{agent, drained_node, layout};

#[test]
fn a_scrape_shows_applies_instances_power_and_job_energy() {
    let d = tempfile::tempdir().unwrap();
    let slurm = Arc::new(FakeSlurm::new(vec![drained_node("7x1g.10gb,1x7g.80gb")], vec![]));
    let mut a = agent(d.path(), &slurm, false);
    assert_eq!(a.step().unwrap(), Step::Applied(layout("7x1g.10gb,1x7g.80gb")));
    // Job 42 on GPU 1's 7g.80gb instance; two samples charge it.
    let state = a.settings.paths.state_dir.clone();
    let gpu1 = a.backend.gpus().unwrap()[1].clone();
    Ledger::in_dir(&state)
        .job_started(42, &[(1, gpu1.instances[0].gi_id)])
        .unwrap();
    let first = sample_node(a.backend.as_ref(), &state, 10.0).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let second = sample_node(a.backend.as_ref(), &state, 10.0).unwrap();
    assert!(first.charged.is_empty() && second.charged[&42] > 0.0, "{second:?}");
    let jobs = Ledger::in_dir(&state).jobs().unwrap();
    // Off by default ([agent] metrics_per_job): no job id leaves the node.
    assert!(!a.metrics.per_job());
    a.metrics.sampled(&second, &jobs);
    let off = a.metrics.render();
    assert!(!off.contains("job=\"42\""), "{off}");
    assert!(!off.contains("dynmig_agent_job_energy_joules"), "{off}");
    assert!(
        off.contains("dynmig_agent_energy_charged_joules_total{node=\"n1\"}"),
        "{off}"
    );
    a.metrics.set_per_job(true);
    a.metrics.sampled(&second, &jobs);

    let server = serve("127.0.0.1:0".parse().unwrap(), a.metrics.registry(), "agent").unwrap();
    let (status, body) = scrape(server.local_addr()).unwrap();
    assert_eq!(status, "HTTP/1.1 200 OK");
    for line in [
        "dynmig_agent_repartitions_started_total{node=\"n1\"} 1",
        "dynmig_agent_repartitions_finished_total{node=\"n1\"} 1",
        "dynmig_agent_repartitions_failed_total{node=\"n1\"} 0",
        "dynmig_agent_apply_duration_seconds_count{node=\"n1\"} 1",
        "dynmig_agent_instances{node=\"n1\",GPU_I_PROFILE=\"1g.10gb\"} 7",
        "dynmig_agent_instances{node=\"n1\",GPU_I_PROFILE=\"7g.80gb\"} 1",
    ] {
        assert!(body.lines().any(|l| l == line), "no line {line:?} in\n{body}");
    }
    // One info series per instance, labelled as dcgm-exporter labels its own.
    let info: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("dynmig_mig_instance_info{"))
        .collect();
    assert_eq!(info.len(), 8, "{body}");
    for gpu in &second.gpus {
        for i in &gpu.instances {
            let want = format!(
                "dynmig_mig_instance_info{{node=\"n1\",gpu=\"{}\",GPU_I_ID=\"{}\",GPU_I_PROFILE=\"{}\",UUID=\"{}\",start=\"{}\"}} 1",
                gpu.index, i.gi_id, i.placed.profile.name, i.uuid, i.placed.start
            );
            assert!(info.contains(&want.as_str()), "no {want} in\n{body}");
        }
    }
    let value = |prefix: &str| -> f64 {
        body.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no {prefix} in\n{body}"))
            .trim()
            .parse()
            .unwrap()
    };
    let job = value("dynmig_agent_job_energy_joules{node=\"n1\",job=\"42\"}");
    assert!((job - jobs[&42]).abs() < 1e-9 && job > 0.0, "{job}");
    assert!(value("dynmig_agent_energy_charged_joules_total{node=\"n1\"}") > 0.0);
    assert!(value("dynmig_agent_gpu_power_watts{node=\"n1\",gpu=\"1\"}") > 0.0);
    // The job ends: its series goes with it.
    Ledger::in_dir(&state).finish_job(42).unwrap();
    a.metrics.sampled(&second, &Ledger::in_dir(&state).jobs().unwrap());
    let body = scrape(server.local_addr()).unwrap().1;
    assert!(!body.contains("job=\"42\""), "{body}");
    match promtool_check(&body) {
        PromtoolCheck::Absent => eprintln!("skipped promtool: not found (install Debian's prometheus package)"),
        r => assert_eq!(r, PromtoolCheck::Passed, "{body}"),
    }
}

#[test]
fn a_failed_apply_is_counted_as_started_and_failed_not_finished() {
    let d = tempfile::tempdir().unwrap();
    let slurm = Arc::new(FakeSlurm::new(vec![drained_node("7x1g.10gb,1x7g.80gb")], vec![]));
    let mut a = agent(d.path(), &slurm, true);
    assert!(matches!(a.step().unwrap(), Step::Failed(_)));
    let body = a.metrics.render();
    for line in [
        "dynmig_agent_repartitions_started_total{node=\"n1\"} 1",
        "dynmig_agent_repartitions_finished_total{node=\"n1\"} 0",
        "dynmig_agent_repartitions_failed_total{node=\"n1\"} 1",
        "dynmig_agent_apply_duration_seconds_count{node=\"n1\"} 0",
    ] {
        assert!(body.lines().any(|l| l == line), "no line {line:?} in\n{body}");
    }
}
