//! The daemons' metrics endpoint and logging through the `dynmig` binary, without Slurm:
//! `dynmig history serve` with `[history] metrics_listen` answers a scrape over loopback, and
//! logs at the config's `[log] level` unless `RUST_LOG` says otherwise; a bad address fails
//! with the key named.

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
