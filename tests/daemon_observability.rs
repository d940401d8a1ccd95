//! The daemons' metrics endpoint and logging through the `dynmig` binary, without Slurm:
//! `dynmig history serve` with `[history] metrics_listen` answers a scrape over loopback, and
//! logs at the config's `[log] level` unless `RUST_LOG` says otherwise; a bad address fails
//! with the key named.

#[path = "common/prometheus.rs"]
mod prometheus;

use prometheus::Prometheus;
use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A port free now (bound, then released).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn config(dir: &Path, level: &str, metrics: &str) -> std::path::PathBuf {
    let text = format!(
        "version = 1\n[paths]\nstate_dir = \"{}\"\n[history]\nlisten = \"127.0.0.1:{}\"\nmetrics_listen = \"{metrics}\"\n[log]\nlevel = \"{level}\"\n[[node_group]]\nname = \"g\"\nnodes = \"n1\"\ngpu_model = \"A100-80GB\"\ngpus = 1\nbackend = \"simulated\"\n",
        dir.display(),
        free_port()
    );
    let p = dir.join(format!("dynmig-{level}.toml"));
    std::fs::write(&p, text).unwrap();
    p
}

fn start(config: &Path, rust_log: Option<&str>) -> Child {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dynmig"));
    c.args(["--config", config.to_str().unwrap(), "history", "serve"])
        .env_remove("RUST_LOG")
        .env_remove("JOURNAL_STREAM")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(l) = rust_log {
        c.env("RUST_LOG", l);
    }
    c.spawn().unwrap()
}

/// Scrapes until the endpoint answers (10 s at most).
fn scrape_when_up(addr: SocketAddr) -> String {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        match dynmig_host::metrics::scrape(addr) {
            Ok((status, body)) => {
                assert_eq!(status, "HTTP/1.1 200 OK");
                return body;
            }
            Err(e) if Instant::now() > until => panic!("no metrics at {addr}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Stops the daemon by its pid with SIGTERM (it writes its snapshot and exits) and returns
/// its stderr.
fn stop(mut child: Child) -> String {
    // SAFETY: a plain kill(2) of our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(status.success(), "{status}: {err}");
    err
}

#[test]
fn history_serve_answers_a_scrape_and_logs_at_the_configured_level() {
    let d = tempfile::tempdir().unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let child = start(&config(d.path(), "info", &addr.to_string()), None);
    let body = scrape_when_up(addr);
    let err = stop(child);
    for line in [
        "# TYPE dynmig_history_requeued_runs_total counter",
        "dynmig_history_refused_records_total 0",
        "dynmig_history_pending_records 0",
    ] {
        assert!(body.lines().any(|l| l == line), "no line {line:?} in\n{body}");
    }
    assert!(
        err.contains("INFO") && err.contains("listening on 127.0.0.1:") && err.contains("serving http://"),
        "{err}"
    );
    if let dynmig_host::metrics::PromtoolCheck::Failed(why) = dynmig_host::metrics::promtool_check(&body) {
        panic!("{why}\n{body}");
    }

    // [log] level = "warn": the start is not logged; RUST_LOG=info wins over it.
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let quiet = config(d.path(), "warn", &addr.to_string());
    let child = start(&quiet, None);
    scrape_when_up(addr);
    let err = stop(child);
    assert!(!err.contains("listening on"), "{err}");
    let child = start(&quiet, Some("info"));
    scrape_when_up(addr);
    assert!(stop(child).contains("listening on"));
}

#[test]
fn a_metrics_address_in_use_fails_the_daemon_with_the_key_named() {
    let d = tempfile::tempdir().unwrap();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_dynmig"))
        .args([
            "--config",
            config(d.path(), "info", &addr.to_string()).to_str().unwrap(),
            "history",
            "serve",
        ])
        .env_remove("JOURNAL_STREAM")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("[history] metrics_listen") && err.contains(&format!("cannot listen on {addr} for metrics")),
        "{err}"
    );
}

#[test]
fn config_check_names_a_bad_metrics_address() {
    let d = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_dynmig"))
        .args([
            "config",
            "check",
            config(d.path(), "info", "ctl1:9750").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("history.metrics_listen") && err.contains("'ctl1' is not an IP address"),
        "{err}"
    );
}

/// Every metric family the three daemons serve, each labelled one given a value, as a scrape
/// in the Prometheus text format names them (`dynmig_x_total` for counters), with its type.
fn served() -> std::collections::BTreeMap<String, String> {
    use dynmig_core::geometry::{NodeLayout, A100_80GB};
    // Controller: a report with every labelled family set.
    let mut c = dynmig_controller::metrics::ControllerMetrics::new();
    let mut report = dynmig_controller::PassReport::default();
    report.demand.add_pending("1g.10gb", 1);
    report.supply.push(dynmig_controller::NodeSupply {
        node: "n1".into(),
        instances: [("1g.10gb", 7)].into_iter().collect(),
        free: [("1g.10gb", 7)].into_iter().collect(),
    });
    report.roles.insert("in_service", 1);
    report.decided_jobs.insert(("pending", "mig-mem".into()), 1);
    report.timed_out.push("n2".into());
    c.pass_ok(&report, Duration::from_millis(1));
    // Agent: a simulated GPU with instances, its power, a running job.
    let d = tempfile::tempdir().unwrap();
    let mut backend = dynmig_gpu::open_backend(
        dynmig_core::config::Backend::Simulated,
        &dynmig_gpu::BackendSettings {
            model: &A100_80GB,
            gpus: 1,
            allow_mig_mode_change: false,
            sim_state_file: d.path().join("sim.json"),
            sim_device_dir: d.path().join("dev"),
            nvml: Default::default(),
        },
    )
    .unwrap();
    let layout = NodeLayout::parse(&A100_80GB, 1, "7x1g.10gb").unwrap();
    let mut owned = dynmig_gpu::Ownership::in_memory_owning(&backend.gpus().unwrap());
    dynmig_gpu::apply_transition(backend.as_mut(), &A100_80GB, &layout, &mut owned).unwrap();
    let sample = dynmig_gpu::energy::sample_node(backend.as_ref(), d.path(), 10.0).unwrap();
    let mut agent = dynmig_node::metrics::AgentMetrics::new("n1");
    // The per-job family is served only with [agent] metrics_per_job = true.
    agent.set_per_job(true);
    agent.sampled(&sample, &[(7, 1.0)].into_iter().collect());
    agent.steps(&dynmig_node::agent::StepTimes(vec![(
        "instances",
        Duration::from_millis(5),
    )]));
    // History: an out-of-memory run and one with a ratio.
    let h = dynmig_history::metrics::HistoryMetrics::new();
    let mut r = dynmig_history::JobRecord {
        job_id: 1,
        restart: 0,
        node: "n1".into(),
        uid: 1000,
        user: "alice".into(),
        job_name: "train".into(),
        profile: "1g.10gb".into(),
        estimate_bytes: 8 << 30,
        source: "mig-mem".into(),
        peak_bytes: 7 << 30,
        limit_bytes: 10 << 30,
        exit_status: 0,
        oom: false,
        end_time: 0,
    };
    h.stored(&r);
    r.oom = true;
    h.stored(&r);
    h.busy(true);
    [c.render(), agent.render(), h.render()]
        .iter()
        .flat_map(|t| {
            dynmig_host::metrics::to_prometheus_text(t)
                .lines()
                .filter_map(|l| l.strip_prefix("# TYPE "))
                .map(|l| {
                    let (n, t) = l.split_once(' ').unwrap();
                    (n.to_string(), t.to_string())
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The `dynmig_controller_`, `dynmig_agent_`, `dynmig_history_` and `dynmig_mig_` names in `text`.
fn names_in(text: &str) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("dynmig_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let name = &tail[..end];
        if ["dynmig_controller_", "dynmig_agent_", "dynmig_history_", "dynmig_mig_"]
            .iter()
            .any(|p| name.starts_with(p))
        {
            out.insert(name.to_string());
        }
        rest = &tail[end..];
    }
    out
}

#[test]
fn the_docs_list_exactly_the_served_metrics_and_the_dashboard_uses_only_those() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let served = served();
    assert_eq!(served.len(), 29, "{served:?}");
    let docs = std::fs::read_to_string(root.join("docs/config.md")).unwrap();
    for (name, kind) in &served {
        assert!(
            docs.contains(&format!("| `{name}` | {kind} |")),
            "{name} ({kind}) is served but not in the tables of docs/config.md"
        );
    }
    // A histogram's series are its name with _bucket, _sum and _count.
    let family = |n: &str| -> Option<String> {
        if served.contains_key(n) {
            return Some(n.to_string());
        }
        ["_bucket", "_sum", "_count"].iter().find_map(|s| {
            let b = n.strip_suffix(s)?;
            (served.get(b).map(String::as_str) == Some("histogram")).then(|| b.to_string())
        })
    };
    for n in names_in(&docs) {
        assert!(family(&n).is_some(), "docs/config.md names {n}, which no daemon serves");
    }
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("docs/grafana/dynmig.json")).unwrap()).unwrap();
    let mut exprs = String::new();
    for p in dashboard["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().into_iter().flatten() {
            exprs += t["expr"].as_str().unwrap();
            exprs.push('\n');
        }
    }
    let used: std::collections::BTreeSet<String> = names_in(&exprs).iter().filter_map(|n| family(n)).collect();
    for n in names_in(&exprs) {
        assert!(
            family(&n).is_some(),
            "the dashboard queries {n}, which no daemon serves"
        );
    }
    // Every family is on the dashboard.
    for n in served.keys() {
        assert!(used.contains(n), "{n} is not on the dashboard");
    }
}

/// A real Prometheus server (Debian's package) scrapes the three daemons' endpoints over
/// loopback, and evaluates every query of the Grafana dashboard without an error.
#[test]
fn a_real_prometheus_scrapes_every_daemon_and_runs_every_dashboard_query() {
    if !Prometheus::installed() {
        eprintln!("skipped: no prometheus server in PATH (Debian package prometheus)");
        return;
    }
    // The three registries, as in `served`, each on its own endpoint.
    let mut c = dynmig_controller::metrics::ControllerMetrics::new();
    let mut report = dynmig_controller::PassReport::default();
    report.demand.add_pending("1g.10gb", 3);
    c.pass_ok(&report, Duration::from_millis(1));
    let agent = dynmig_node::metrics::AgentMetrics::new("n1");
    agent.apply_started();
    agent.apply_finished(Duration::from_secs(4));
    let history = dynmig_history::metrics::HistoryMetrics::new();
    let local = "127.0.0.1:0".parse().unwrap();
    let endpoints = [
        dynmig_host::metrics::serve(local, c.registry(), "controller").unwrap(),
        dynmig_host::metrics::serve(local, agent.registry(), "agent").unwrap(),
        dynmig_host::metrics::serve(local, history.registry(), "history").unwrap(),
    ];
    let targets: Vec<String> = endpoints.iter().map(|e| e.local_addr().to_string()).collect();
    let prometheus = Prometheus::start(&targets);
    // All three targets up, within 60 s.
    prometheus.wait_for(
        "the three endpoints scraped",
        "sum(up{job=\"dynmig\"})",
        Duration::from_secs(60),
        |v| v == 3.0,
    );
    let v = prometheus
        .query("dynmig_controller_pending_instances{profile=\"1g.10gb\"}")
        .unwrap();
    assert_eq!(v["data"]["result"][0]["value"][1], "3", "{v}");
    let v = prometheus
        .query("dynmig_agent_apply_duration_seconds_sum{node=\"n1\"}")
        .unwrap();
    assert_eq!(v["data"]["result"][0]["value"][1], "4", "{v}");
    let checked = prometheus.check_dashboard(Path::new(env!("CARGO_MANIFEST_DIR")));
    assert!(checked >= 25, "{checked}");
}

/// Set inside the private mount namespace of [`a_daemon_under_systemd_logs_to_the_journal`].
const IN_JOURNAL_NS: &str = "DYNMIG_TEST_IN_JOURNAL_NS";
const JOURNAL_PASSED: &str = "journal check passed";

/// Under systemd (stderr connected to the journal, `JOURNAL_STREAM` naming it) a daemon logs
/// to journald, with its identifier and the level as priority, and nothing to stderr. The
/// journal socket is a datagram socket this test binds at /run/systemd/journal/socket in a
/// private mount namespace (a tmpfs on /run), so the host's /run is untouched; it needs root
/// and `unshare`, and is skipped with the reason printed otherwise.
#[test]
fn a_daemon_under_systemd_logs_to_the_journal() {
    if std::env::var_os(IN_JOURNAL_NS).is_some() {
        journal_check_in_namespace();
        println!("{JOURNAL_PASSED}");
        return;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root for a private mount namespace");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = match Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(
            "mount -t tmpfs tmpfs /run || exit 77; mkdir -p /run/systemd/journal; \
             exec \"$0\" --exact a_daemon_under_systemd_logs_to_the_journal --nocapture --test-threads=1",
        )
        .arg(&exe)
        .env(IN_JOURNAL_NS, "1")
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            eprintln!("skipped: cannot run unshare: {e}");
            return;
        }
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.code() == Some(77) || text.contains("unshare failed") || text.contains("unshare: ") {
        eprintln!("skipped: no private mount namespace here: {text}");
        return;
    }
    assert!(
        out.status.success() && text.contains(JOURNAL_PASSED),
        "{}\n{text}",
        out.status
    );
}

/// The body of [`a_daemon_under_systemd_logs_to_the_journal`], inside the namespace.
fn journal_check_in_namespace() {
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::net::UnixDatagram;
    let journal = UnixDatagram::bind("/run/systemd/journal/socket").unwrap();
    journal.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let d = tempfile::tempdir().unwrap();
    let run = |metrics: &str| -> (Vec<String>, String, std::process::ExitStatus) {
        let err_path = d.path().join("stderr");
        let err = std::fs::File::create(&err_path).unwrap();
        let meta = err.metadata().unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_dynmig"))
            .args([
                "--config",
                config(d.path(), "info", metrics).to_str().unwrap(),
                "history",
                "serve",
            ])
            .env("JOURNAL_STREAM", format!("{}:{}", meta.dev(), meta.ino()))
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .unwrap();
        let mut entries = Vec::new();
        let mut buf = vec![0u8; 64 << 10];
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            let Ok(n) = journal.recv(&mut buf) else { break };
            let e = String::from_utf8_lossy(&buf[..n]).to_string();
            let done = e.contains("listening on") || e.contains("PRIORITY=3");
            entries.push(e);
            if done {
                break;
            }
        }
        // SAFETY: a plain kill(2) of our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let status = child.wait().unwrap();
        (entries, std::fs::read_to_string(&err_path).unwrap(), status)
    };
    let addr = format!("127.0.0.1:{}", free_port());
    let (entries, stderr, status) = run(&addr);
    assert!(status.success(), "{status}: {stderr}");
    let start = entries
        .iter()
        .find(|e| e.contains("listening on 127.0.0.1:"))
        .unwrap_or_else(|| panic!("no journal entry for the start: {entries:?}"));
    assert!(
        // info is the journal's notice (5): systemd-journal-logger's mapping.
        start.contains("PRIORITY=5\n") && start.contains("SYSLOG_IDENTIFIER=dynmig-history\n"),
        "{start}"
    );
    assert!(!stderr.contains("listening on"), "logged to stderr too: {stderr}");
    // A fatal error is one entry at priority err, not a line on stderr as well.
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let (entries, stderr, status) = run(&taken.local_addr().unwrap().to_string());
    assert!(!status.success());
    let fatal = entries
        .iter()
        .find(|e| e.contains("PRIORITY=3\n"))
        .unwrap_or_else(|| panic!("no error entry: {entries:?}"));
    assert!(fatal.contains("metrics_listen"), "{fatal}");
    assert!(stderr.is_empty(), "{stderr}");
}
