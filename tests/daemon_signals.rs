//! Real signals to real daemon processes of the `dynmig` binary, without Slurm (a fake Slurm
//! of shell scripts that print `squeue --json` / `sinfo --json`): SIGHUP with a good config
//! changes what the daemon does, SIGHUP with a broken one keeps the old and logs the message
//! of `dynmig config check`, SIGTERM stops it promptly with exit status 0.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A daemon whose stderr is collected as it comes; stopped by its pid (SIGKILL) if a test
/// fails before it stopped it.
struct Daemon {
    child: Child,
    err: Arc<Mutex<String>>,
}

impl Daemon {
    fn start(config: &Path, args: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_dynmig"))
            .arg("--config")
            .arg(config)
            .args(args)
            .env_remove("RUST_LOG")
            .env_remove("JOURNAL_STREAM")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let err = Arc::new(Mutex::new(String::new()));
        let mut pipe = child.stderr.take().unwrap();
        let sink = Arc::clone(&err);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Self { child, err }
    }

    fn stderr(&self) -> String {
        self.err.lock().unwrap().clone()
    }

    /// Waits (10 s at most) until stderr holds `text` `times` times.
    fn wait_for(&self, text: &str, times: usize) {
        let until = Instant::now() + Duration::from_secs(10);
        while self.stderr().matches(text).count() < times {
            assert!(
                Instant::now() < until,
                "no {text:?} (x{times}) on stderr after 10 s:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn signal(&self, sig: i32) {
        // SAFETY: a plain kill(2) of our own child.
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, sig) }, 0);
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// SIGTERM; the daemon must exit with 0 within `within`.
    fn terminate(mut self, within: Duration) -> String {
        let sent = Instant::now();
        self.signal(libc::SIGTERM);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                // Let the reader thread see the end of the pipe.
                std::thread::sleep(Duration::from_millis(50));
                assert!(status.success(), "{status}: {}", self.stderr());
                return self.stderr();
            }
            assert!(
                sent.elapsed() < within,
                "still running {within:?} after SIGTERM:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            // SAFETY: a plain kill(2) of our own child.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGKILL) };
            let _ = self.child.wait();
        }
    }
}

/// `dynmig config check FILE`'s message for a broken file (without the `dynmig: ` prefix).
fn config_check_message(file: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_dynmig"))
        .args(["config", "check"])
        .arg(file)
        .output()
        .unwrap();
    assert!(!out.status.success(), "config check accepted {}", file.display());
    let err = String::from_utf8(out.stderr).unwrap();
    let msg = err.trim().strip_prefix("dynmig: ").unwrap_or(err.trim()).to_string();
    assert!(msg.contains(&file.display().to_string()), "{msg}");
    msg
}

/// An executable shell script printing `json`.
fn fake_command(dir: &Path, name: &str, json: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\ncat <<'EOF'\n{json}\nEOF\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// A config with a fake Slurm (one idle node n1 with one A100-80GB as one 7g.80gb).
fn controller_config(dir: &Path, level: &str, interval: &str) -> String {
    let squeue = fake_command(dir, "squeue", r#"{"jobs":[]}"#);
    let sinfo = fake_command(
        dir,
        "sinfo",
        r#"{"nodes":[{"name":"n1","state":"idle","state_flags":[],"reason":"","gres":"gpu:7g.80gb:1","gres_used":"","extra":"","slurmd_start_time":0,"alloc_cpus":0}]}"#,
    );
    let scontrol = fake_command(dir, "scontrol", "{}");
    format!(
        "version = 1\n[paths]\nstate_dir = \"{}\"\nsqueue = \"{}\"\nsinfo = \"{}\"\nscontrol = \"{}\"\n[controller]\ninterval = \"{interval}\"\n[policy]\nkind = \"demand\"\n[log]\nlevel = \"{level}\"\n[[node_group]]\nname = \"g\"\nnodes = \"n1\"\ngpu_model = \"A100-80GB\"\ngpus = 1\nbackend = \"simulated\"\n",
        dir.join("state").display(),
        squeue.display(),
        sinfo.display(),
        scontrol.display()
    )
}

#[test]
fn the_controller_reloads_on_sighup_refuses_a_broken_config_and_stops_on_sigterm() {
    let d = tempfile::tempdir().unwrap();
    let config = d.path().join("dynmig.toml");
    // A pass a minute: every pass after the first is one a signal caused.
    std::fs::write(&config, controller_config(d.path(), "info", "60s")).unwrap();
    let mut daemon = Daemon::start(&config, &["controller"]);
    daemon.wait_for("controller started: 1 managed nodes, policy demand, every 60s", 1);
    assert!(!daemon.stderr().contains("pass: pending"), "info level logs no pass");

    // Broken: refused with config check's message, the old config kept.
    let good = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, good.replace("interval = \"60s\"", "interval = \"soon\"")).unwrap();
    let msg = config_check_message(&config);
    daemon.signal(libc::SIGHUP);
    daemon.wait_for("config not reloaded, keeping the one in use", 1);
    let err = daemon.stderr();
    assert!(
        err.contains(&msg),
        "the daemon's log lacks config check's {msg:?}:\n{err}"
    );
    assert!(err.contains("ERROR"), "{err}");
    assert!(!err.contains("config reloaded"), "{err}");
    assert!(daemon.alive(), "{err}");

    // Good: debug level and a new interval, seen in the passes that follow.
    std::fs::write(&config, controller_config(d.path(), "debug", "200ms")).unwrap();
    daemon.signal(libc::SIGHUP);
    daemon.wait_for("config reloaded from", 1);
    daemon.wait_for("controller: 1 managed nodes, policy demand, every 200ms", 1);
    daemon.wait_for("pass: pending", 3);

    // Stop between two passes, promptly, exit status 0.
    std::fs::write(&config, controller_config(d.path(), "debug", "60s")).unwrap();
    daemon.signal(libc::SIGHUP);
    daemon.wait_for("every 60s", 2);
    let err = daemon.terminate(Duration::from_secs(3));
    assert!(err.contains("controller stopped"), "{err}");
}

fn history_config(dir: &Path, listen: u16, quantile: &str) -> String {
    format!(
        "version = 1\n[paths]\nstate_dir = \"{}\"\n[estimator]\nhistory_quantile = {quantile}\n[history]\nlisten = \"127.0.0.1:{listen}\"\n[log]\nlevel = \"info\"\n[[node_group]]\nname = \"g\"\nnodes = \"n1\"\ngpu_model = \"A100-80GB\"\ngpus = 1\nbackend = \"simulated\"\n",
        dir.display()
    )
}

/// The snapshot's `quantile_peak` of alice's `train` (uid 1000), once the file holds it.
fn quantile_peak(snapshot: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(snapshot).ok()?;
    let line = text.lines().find(|l| l.starts_with("1000\t"))?;
    line.split('\t').nth(2)?.parse().ok()
}

fn wait_for_peak(snapshot: &Path, want: u64) {
    let until = Instant::now() + Duration::from_secs(10);
    while quantile_peak(snapshot) != Some(want) {
        assert!(
            Instant::now() < until,
            "snapshot's quantile peak {:?}, not {want}: {:?}",
            quantile_peak(snapshot),
            std::fs::read_to_string(snapshot)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_history_service_takes_new_estimator_settings_on_sighup_and_stops_on_sigterm() {
    let d = tempfile::tempdir().unwrap();
    // Three runs of alice's "train": peaks 1, 2 and 10 GiB.
    let store = dynmig_history::store::Store::open(&d.path().join("history.db")).unwrap();
    for (i, peak) in [1u64, 2, 10].iter().enumerate() {
        store
            .insert(&dynmig_history::JobRecord {
                job_id: i as u64 + 1,
                restart: 0,
                node: "n1".into(),
                uid: 1000,
                user: "alice".into(),
                job_name: "train".into(),
                profile: "7g.80gb".into(),
                estimate_bytes: 8 << 30,
                source: "mig-mem".into(),
                peak_bytes: peak << 30,
                limit_bytes: 80 << 30,
                exit_status: 0,
                oom: false,
                end_time: dynmig_host::clock::now_secs() - 60 + i as i64,
            })
            .unwrap();
    }
    drop(store);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = d.path().join("dynmig.toml");
    let snapshot = d.path().join("history-snapshot.tsv");
    std::fs::write(&config, history_config(d.path(), port, "0.5")).unwrap();
    let mut daemon = Daemon::start(&config, &["history", "serve"]);
    daemon.wait_for("listening on", 1);
    wait_for_peak(&snapshot, 2 << 30);

    std::fs::write(&config, history_config(d.path(), port, "7")).unwrap();
    let msg = config_check_message(&config);
    daemon.signal(libc::SIGHUP);
    daemon.wait_for("config not reloaded, keeping the one in use", 1);
    assert!(daemon.stderr().contains(&msg), "{msg:?} not in\n{}", daemon.stderr());
    assert!(daemon.alive());
    assert_eq!(quantile_peak(&snapshot), Some(2 << 30), "the old settings stay");

    std::fs::write(&config, history_config(d.path(), port, "1.0")).unwrap();
    daemon.signal(libc::SIGHUP);
    daemon.wait_for("config reloaded from", 1);
    wait_for_peak(&snapshot, 10 << 30);

    let err = daemon.terminate(Duration::from_secs(3));
    assert!(err.contains("stopped"), "{err}");
}

#[test]
fn the_agent_stops_on_sigterm_and_removes_its_pid_file() {
    let d = tempfile::tempdir().unwrap();
    let etc = d.path().join("etc");
    std::fs::create_dir_all(&etc).unwrap();
    std::fs::write(etc.join("slurm.conf"), "ClusterName=test\n").unwrap();
    let config = d.path().join("dynmig.toml");
    let text = controller_config(d.path(), "info", "60s").replace(
        "[controller]",
        &format!("slurm_conf_dir = \"{}\"\n[controller]", etc.display()),
    );
    std::fs::write(&config, text).unwrap();
    let parsed = dynmig_core::config::parse_config(&std::fs::read_to_string(&config).unwrap()).unwrap();
    let pid_file = dynmig_node::paths::NodePaths::of(&parsed, "n1").agent_pid();
    let daemon = Daemon::start(&config, &["agent", "--node", "n1"]);
    daemon.wait_for("agent of n1 started", 1);
    let until = Instant::now() + Duration::from_secs(10);
    while !pid_file.exists() {
        assert!(
            Instant::now() < until,
            "no {}:\n{}",
            pid_file.display(),
            daemon.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let err = daemon.terminate(Duration::from_secs(5));
    assert!(err.contains("n1: stopped"), "{err}");
    assert!(!pid_file.exists(), "{} left behind", pid_file.display());
}

#[test]
fn agent_once_refuses_to_run_beside_the_running_agent_of_its_node() {
    // Found by fault injection (tests/cluster/faults.rs): `dynmig agent --once` took no lock,
    // and beside the daemon both applied targets to the same GPUs at once.
    let d = tempfile::tempdir().unwrap();
    let etc = d.path().join("etc");
    std::fs::create_dir_all(&etc).unwrap();
    std::fs::write(etc.join("slurm.conf"), "ClusterName=test\n").unwrap();
    let config = d.path().join("dynmig.toml");
    let text = controller_config(d.path(), "info", "60s").replace(
        "[controller]",
        &format!("slurm_conf_dir = \"{}\"\n[controller]", etc.display()),
    );
    std::fs::write(&config, text).unwrap();
    let parsed = dynmig_core::config::parse_config(&std::fs::read_to_string(&config).unwrap()).unwrap();
    let pid_file = dynmig_node::paths::NodePaths::of(&parsed, "n1").agent_pid();
    let daemon = Daemon::start(&config, &["agent", "--node", "n1"]);
    let until = Instant::now() + Duration::from_secs(10);
    while !pid_file.exists() {
        assert!(
            Instant::now() < until,
            "no {}:\n{}",
            pid_file.display(),
            daemon.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let once = Command::new(env!("CARGO_BIN_EXE_dynmig"))
        .args(["--config", config.to_str().unwrap(), "agent", "--node", "n1", "--once"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&once.stderr);
    assert!(!once.status.success(), "ran beside the daemon: {err}");
    assert!(err.contains("another agent of this node runs"), "{err}");
    daemon.terminate(Duration::from_secs(5));
}
