//! The `dynmig-controller` binary, as the systemd unit runs it: against a fake Slurm (scripts
//! that print Slurm's JSON), one pass with `--once`, a refused config, a stop on SIGTERM.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A script `name` in `dir` that prints `json`.
fn fake_command(dir: &Path, name: &str, json: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\ncat <<'EOF'\n{json}\nEOF\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// A config with a fake Slurm: one idle node n1 with one A100-80GB as one 7g.80gb, the
/// demand policy, a pass every `interval`.
fn config(dir: &Path, interval: &str) -> PathBuf {
    let squeue = fake_command(dir, "squeue", r#"{"jobs":[]}"#);
    let sinfo = fake_command(
        dir,
        "sinfo",
        r#"{"nodes":[{"name":"n1","state":"idle","state_flags":[],"reason":"","gres":"gpu:7g.80gb:1","gres_used":"","extra":"","slurmd_start_time":0,"alloc_cpus":0}]}"#,
    );
    let scontrol = fake_command(dir, "scontrol", "{}");
    let text = format!(
        "version = 1\n[paths]\nstate_dir = \"{}\"\nsqueue = \"{}\"\nsinfo = \"{}\"\nscontrol = \"{}\"\n[controller]\ninterval = \"{interval}\"\n[policy]\nkind = \"demand\"\n[[node_group]]\nname = \"g\"\nnodes = \"n1\"\ngpu_model = \"A100-80GB\"\ngpus = 1\nbackend = \"simulated\"\n",
        dir.join("state").display(),
        squeue.display(),
        sinfo.display(),
        scontrol.display()
    );
    let path = dir.join("dynmig.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn controller() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dynmig-controller"));
    c.env_remove("RUST_LOG")
        .env_remove("JOURNAL_STREAM")
        .env_remove("DYNMIG_CONFIG");
    c
}

#[test]
fn one_pass_with_once_then_exit() {
    let d = tempfile::tempdir().unwrap();
    let out = controller()
        .arg("--config")
        .arg(config(d.path(), "60s"))
        .arg("--once")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("controller started: 1 managed nodes, policy demand, every 60s"),
        "{err}"
    );
    assert!(err.contains("pass took"), "{err}");
}

#[test]
fn a_refused_config_ends_it_with_the_key_and_what_is_allowed() {
    let d = tempfile::tempdir().unwrap();
    let path = config(d.path(), "60s");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("kind = \"demand\"", "kind = \"fastest\"")).unwrap();
    let out = controller().arg("--config").arg(&path).arg("--once").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.starts_with("dynmig-controller: "), "{err}");
    assert!(err.contains("kind") && err.contains("demand"), "{err}");
}

#[test]
fn it_runs_passes_until_sigterm() {
    let d = tempfile::tempdir().unwrap();
    let mut child = controller()
        .arg("--config")
        .arg(config(d.path(), "200ms"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        pipe.read_to_string(&mut s).unwrap();
        s
    });
    let start = Instant::now();
    std::thread::sleep(Duration::from_millis(1200));
    assert!(child.try_wait().unwrap().is_none(), "the daemon ended on its own");
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "no stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    let err = reader.join().unwrap();
    assert!(status.success(), "{err}");
    assert!(err.matches("pass took").count() >= 2, "{err}");
    assert!(err.contains("controller stopped"), "{err}");
}
