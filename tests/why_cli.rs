//! `dynmig why JOBID` through the binary, against a fake Slurm of shell scripts printing
//! `squeue --json` and `sinfo --json` (22.05's forms): the planned repartition of a waiting
//! job, a held job in JSON, and another user's job refused.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fake_command(dir: &Path, name: &str, json: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\ncat <<'EOF'\n{json}\nEOF\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// A cluster of one idle A100 node n1 (1x7g.80gb per GPU) and three pending jobs: 43 waits
/// for a 2g.20gb instance, 42 is held, 44 belongs to uid 4000000.
fn setup(dir: &Path) -> PathBuf {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let layout =
        dynmig_core::geometry::NodeLayout::parse(&dynmig_core::geometry::A100_80GB, 2, "1x7g.80gb,1x7g.80gb").unwrap();
    let node = serde_json::json!({
        "name": "n1", "state": "idle", "state_flags": [], "reason": "", "gres": layout.gres(),
        "gres_used": "", "extra": dynmig_core::protocol::layout::PublishedLayout(layout).encode(),
        "slurmd_start_time": 0, "alloc_cpus": 0,
    });
    let me = unsafe { libc::getuid() };
    let squeue = fake_command(
        dir,
        "squeue",
        &format!(
            r#"{{"jobs":[
  {{"job_id":43,"name":"train","user_name":"alice","user_id":{me},"job_state":"PENDING","state_reason":"ReqNodeNotAvail",
    "state_description":"ReqNodeNotAvail, UnavailableNodes:catalog","priority":4294901000,"eligible_time":1,
    "tres_per_node":"gres:gpu:2g.20gb:1","tres_req_str":"cpu=1,mem=1G,node=1,billing=1,gres/gpu=1,gres/gpu:2g.20gb=1",
    "admin_comment":"dynmig/v1 profile=2g.20gb count=1 mem=19327352832 source=mig-mem"}},
  {{"job_id":42,"name":"later","user_name":"alice","user_id":{me},"job_state":"PENDING","state_reason":"JobHeldUser",
    "priority":0,"tres_per_node":"gres:gpu:1g.10gb:1"}},
  {{"job_id":44,"name":"theirs","user_name":"bob","user_id":4000000,"job_state":"PENDING","state_reason":"Resources",
    "tres_per_node":"gres:gpu:1g.10gb:1"}}]}}"#
        ),
    );
    let sinfo = fake_command(dir, "sinfo", &format!(r#"{{"nodes":[{node}]}}"#));
    let config = dir.join("dynmig.toml");
    std::fs::write(
        &config,
        format!(
            "version = 1\n[paths]\nstate_dir = \"{}\"\nsqueue = \"{}\"\nsinfo = \"{}\"\n[policy]\nkind = \"demand\"\n[[node_group]]\nname = \"g\"\nnodes = \"n1\"\ngpu_model = \"A100-80GB\"\ngpus = 2\nbackend = \"simulated\"\n",
            dir.join("state").display(),
            squeue.display(),
            sinfo.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();
    config
}

fn why(config: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dynmig"))
        .arg("--config")
        .arg(config)
        .arg("why")
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn why_names_the_node_planned_for_a_waiting_job_and_the_hold_of_a_held_one() {
    let d = tempfile::tempdir().unwrap();
    let config = setup(d.path());
    let out = why(&config, &["43"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("job 43 (train) of alice: PENDING, Slurm's reason: ReqNodeNotAvail (ReqNodeNotAvail, UnavailableNodes:catalog)"),
        "{text}"
    );
    assert!(
        text.contains("profile: 2g.20gb x1, chosen by dynmig at submission from your --mig-mem hint"),
        "{text}"
    );
    assert!(
        text.contains("the controller's next pass takes n1 to be repartitioned to") && text.contains("2g.20gb"),
        "{text}"
    );

    let out = why(&config, &["42", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: dynmig_controller::why::WhyReport = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        matches!(&r.outcome, dynmig_controller::why::Outcome::Blocked { class, .. } if class == "held"),
        "{r:?}"
    );
}

#[test]
fn why_refuses_another_users_job() {
    let d = tempfile::tempdir().unwrap();
    let config = setup(d.path());
    // The caller is the real uid: as root, ask as nobody (65534), who owns no job.
    let out = if unsafe { libc::getuid() } == 0 {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_dynmig"))
            .arg("--config")
            .arg(&config)
            .args(["why", "44"])
            .output()
            .unwrap()
    } else {
        why(&config, &["44"])
    };
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("job 44 belongs to uid 4000000; only its user and root may ask why it waits"),
        "{err}"
    );
}
