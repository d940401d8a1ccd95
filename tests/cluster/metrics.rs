//! A real Prometheus server scrapes the local cluster's daemons (the controller and the
//! history service on the controller's address, each agent in its node's network namespace,
//! as slurm/local-dynmig.sh configures them) while a job makes a node repartition, and every
//! query of the Grafana dashboard runs against what it scraped.

use crate::harness::*;
use crate::prometheus::Prometheus;
use std::time::Duration;

#[test]
#[ignore = "needs root and Slurm: run slurm/test.sh"]
fn prometheus_scrapes_the_clusters_daemons_through_a_repartition() {
    if !Prometheus::installed() {
        eprintln!("skipped: no prometheus server in PATH (Debian package prometheus)");
        return;
    }
    let c = Cluster::up(true);
    let targets = [
        "10.199.0.1:9811",
        "10.199.0.11:9812",
        "10.199.0.12:9812",
        "10.199.0.1:9813",
    ]
    .map(String::from);
    let p = Prometheus::start(&targets);
    p.wait_for(
        "all four endpoints up",
        "sum(up{job=\"dynmig\"})",
        Duration::from_secs(60),
        |v| v == 4.0,
    );
    // Every GPU starts as one 7g.80gb: the job needs a repartition. It records its GPU memory.
    let dynmig = bin_dir().join("dynmig");
    let id = c.sbatch(&[
        "--gres=gpu:1",
        "--mig-mem=30G",
        &format!("--wrap={} fake-job --mem 20G --seconds 0", dynmig.display()),
    ]);
    assert_eq!(tres(&c.job(id)), "gres:gpu:3g.40gb:1");
    c.wait_for("the job to complete", Duration::from_secs(90), || {
        c.job_state(id) == "COMPLETED"
    });
    let node = field(&c.job(id), "NodeList");
    let at_least_one = |v: f64| v >= 1.0;
    let wait = Duration::from_secs(30);
    p.wait_for(
        "a repartition started",
        "dynmig_controller_repartitions_started_total",
        wait,
        at_least_one,
    );
    p.wait_for(
        "the node's apply finished",
        &format!("dynmig_agent_repartitions_finished_total{{node=\"{node}\"}}"),
        wait,
        at_least_one,
    );
    p.wait_for(
        "an apply duration observed",
        &format!("dynmig_agent_apply_duration_seconds_count{{node=\"{node}\"}}"),
        wait,
        at_least_one,
    );
    p.wait_for(
        "the node's 3g.40gb instances",
        &format!("dynmig_agent_instances{{node=\"{node}\",GPU_I_PROFILE=\"3g.40gb\"}}"),
        wait,
        at_least_one,
    );
    p.wait_for(
        "the controller's view of the node's 3g.40gb",
        &format!("dynmig_controller_instances{{node=\"{node}\",profile=\"3g.40gb\"}}"),
        wait,
        at_least_one,
    );
    p.wait_for(
        "the job's record",
        "sum(dynmig_history_records_total)",
        wait,
        at_least_one,
    );
    p.wait_for(
        "controller passes",
        "dynmig_controller_passes_total{result=\"ok\"}",
        wait,
        at_least_one,
    );
    let checked = p.check_dashboard(&c.root);
    assert!(checked >= 25, "{checked} dashboard queries");
}
