//! `dynmig status --json --svg FILE` through the binary, against a fake Slurm of shell
//! scripts printing `squeue --json` and `sinfo --json` (22.05's forms): the JSON reads back
//! as `ClusterStatus` with each node's state, layout per GPU, jobs and plan, and the SVG
//! parses and holds one row per node.

use dynmig_controller::status::{ClusterStatus, NodeState};
use dynmig_core::geometry::{NodeLayout, A100_80GB};
use dynmig_core::protocol::intent::NodeIntent;
use dynmig_core::protocol::layout::PublishedLayout;
use std::path::{Path, PathBuf};
use std::process::Command;

fn fake_command(dir: &Path, name: &str, json: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\ncat <<'EOF'\n{json}\nEOF\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn node_json(name: &str, state: &str, flags: &str, reason: &str, layout: &str, used: &str, cpus: u32) -> String {
    let l = NodeLayout::parse(&A100_80GB, 2, layout).unwrap();
    serde_json::json!({
        "name": name, "state": state, "state_flags": flags.split(',').filter(|f| !f.is_empty()).collect::<Vec<_>>(),
        "reason": reason, "gres": l.gres(), "gres_used": used,
        "extra": PublishedLayout(l).encode(), "slurmd_start_time": 0, "alloc_cpus": cpus,
    })
    .to_string()
}

#[test]
fn status_prints_json_and_draws_one_row_per_node() {
    let d = tempfile::tempdir().unwrap();
    let target = NodeLayout::parse(&A100_80GB, 2, "7x1g.10gb,1x7g.80gb").unwrap();
    let nodes = [
        node_json(
            "n1",
            "mixed",
            "",
            "",
            "1x4g.40gb+1x3g.40gb,1x7g.80gb",
            "gpu:3g.40gb:1(IDX:1)",
            1,
        ),
        node_json(
            "n2",
            "idle",
            "DRAIN",
            &NodeIntent::Repartition(target).encode(),
            "1x7g.80gb,1x7g.80gb",
            "",
            0,
        ),
        node_json("n3", "idle", "DRAIN", "fan replaced", "1x7g.80gb,1x7g.80gb", "", 0),
    ];
    let squeue = fake_command(
        d.path(),
        "squeue",
        r#"{"jobs":[{"job_id":42,"name":"train","user_name":"alice","user_id":1000,"job_state":"RUNNING","nodes":"n1","tres_per_node":"gres:gpu:3g.40gb:1","end_time":2000000000},
                    {"job_id":43,"name":"infer","user_name":"bob","user_id":1001,"job_state":"PENDING","nodes":"","tres_per_node":"gres:gpu:1g.10gb:2"}]}"#,
    );
    let sinfo = fake_command(d.path(), "sinfo", &format!(r#"{{"nodes":[{}]}}"#, nodes.join(",")));
    let config = d.path().join("dynmig.toml");
    std::fs::write(
        &config,
        format!(
            "version = 1\n[paths]\nstate_dir = \"{}\"\nsqueue = \"{}\"\nsinfo = \"{}\"\n[[node_group]]\nname = \"g\"\nnodes = \"n[1-3]\"\ngpu_model = \"A100-80GB\"\ngpus = 2\nbackend = \"simulated\"\n",
            d.path().join("state").display(),
            squeue.display(),
            sinfo.display()
        ),
    )
    .unwrap();
    let svg = d.path().join("status.svg");
    let out = Command::new(env!("CARGO_BIN_EXE_dynmig"))
        .arg("--config")
        .arg(&config)
        .args(["status", "--json", "--svg"])
        .arg(&svg)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let st: ClusterStatus = serde_json::from_slice(&out.stdout).unwrap();
    let states: Vec<NodeState> = st.nodes.iter().map(|n| n.state).collect();
    assert_eq!(
        states,
        [NodeState::Busy, NodeState::Repartitioning, NodeState::DrainedByAdmin]
    );
    let layouts: Vec<&str> = st.nodes[0].gpus.iter().map(|g| g.layout.as_str()).collect();
    assert_eq!(layouts, ["1x4g.40gb+1x3g.40gb", "1x7g.80gb"]);
    assert_eq!(st.nodes[0].jobs[0].id, 42);
    assert_eq!(st.nodes[1].plan.as_ref().unwrap().target, "7x1g.10gb,1x7g.80gb");
    assert_eq!(st.nodes[2].reason, "fan replaced");
    assert_eq!(st.pending["1g.10gb"], 2);

    let text = std::fs::read_to_string(&svg).unwrap();
    if let Some(dir) = std::env::var_os("DYNMIG_PICTURES_OUT") {
        std::fs::write(Path::new(&dir).join("status-cli.svg"), &text).unwrap();
    }
    let doc = roxmltree::Document::parse(&text).unwrap();
    let labels: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(str::trim)
        .collect();
    for n in ["n1", "n2", "n3"] {
        assert_eq!(
            labels.iter().filter(|l| **l == n).count(),
            1,
            "one row for {n}: {labels:?}"
        );
    }
    for l in [
        "busy",
        "repartitioning",
        "drained_by_admin",
        "jobs 42",
        "-> 7x1g.10gb,1x7g.80gb",
    ] {
        assert!(labels.contains(&l), "no {l:?} in {labels:?}");
    }

    // The table: one line per node with its state.
    let out = Command::new(env!("CARGO_BIN_EXE_dynmig"))
        .arg("--config")
        .arg(&config)
        .arg("status")
        .output()
        .unwrap();
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("n1 ") && l.contains("busy") && l.contains("42")),
        "{table}"
    );
}
