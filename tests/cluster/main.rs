//! Integration tests on a real local Slurm cluster: Debian's slurmctld and slurmd, started by
//! the tests themselves (slurm/local-dynmig.sh -> slurm/cluster.sh), two dynamic nodes in their
//! own network namespaces with two A100-80GB each (the NVML backend on each node's NVML
//! stand-in; the fault campaign on the simulated backend), job_submit/dynmig and the SPANK
//! plugin loaded, one dynmig agent per node.
//!
//! They need root, Slurm and the built plugins, so they are `#[ignore]`d in a plain
//! `cargo test`; `slurm/test.sh` (the README's test command) runs them with `--include-ignored`
//! on every Slurm release of the matrix: the host's 22.05, then 24.11 and 26.05 through
//! `slurm/releases.sh test SUITE`, which puts wrappers for that release's commands (run in its
//! chroot) first on `PATH` and sets `DYNMIG_SLURM_ROOT` and `DYNMIG_PLUGIN_DIR`.
//! They share the namespaces and so run one at a time (a process-wide lock, and a file lock
//! on /run/dynmig-cluster-tests.lock for other test processes).

mod actions;
mod attacks;
mod faults;
mod harness;
mod load;
mod metrics;
#[path = "../common/prometheus.rs"]
mod prometheus;

use harness::*;
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
#[ignore = "needs root and Slurm: run slurm/test.sh"]
fn hints_become_typed_gres_and_the_decision_is_recorded() {
    let c = Cluster::up(false);
    // Every dynamic (`slurmd -Z`) node registers with exactly the GRES dynmig configured:
    // 26.05 autodetects GPUs for such nodes, and none may be added to (or replace) dynmig's
    // typed MIG instances, on any release (slurm/README.md, "GPU autodetection").
    for node in ["n1", "n2"] {
        let want = std::fs::read_to_string(c.dir.join(format!("nodes/{node}/gres"))).expect("the node's gres");
        let shown = c.ok("scontrol", &["show", "node", node]);
        assert_eq!(canon_gres(&field(&shown, "Gres")), canon_gres(&want), "{shown}");
        // No GPU detection plugin was loaded (gres.conf has no AutoDetect): only then does no
        // Slurm process open NVML on a node whose MIG layout dynmig changes.
        let log = std::fs::read_to_string(c.dir.join(format!("log/slurmd-{node}.log"))).unwrap_or_default();
        for plugin in ["gpu/nvml", "gpu/nvidia", "gpu/rsmi", "gpu/oneapi"] {
            assert!(!log.contains(plugin), "slurmd of {node} loaded {plugin}");
        }
    }
    // The SPANK plugin lists its options, with usage text, in sbatch --help.
    let help = c.ok("sbatch", &["--help"]);
    for opt in ["--mig-mem", "--mig-profile", "--mig-model-params"] {
        assert!(help.contains(opt), "sbatch --help does not list {opt}:\n{help}");
    }
    let id = c.sbatch(&["--hold", "--gres=gpu:1", "--mig-mem=18G", "--wrap=true"]);
    let job = c.job(id);
    assert_eq!(tres(&job), "gres:gpu:2g.20gb:1", "{job}");
    assert!(job.contains("AdminComment=dynmig/v1 profile=2g.20gb"), "{job}");

    let id = c.sbatch(&["--hold", "--gres=gpu:1", "--mig-profile=3g.40gb", "--wrap=true"]);
    assert_eq!(tres(&c.job(id)), "gres:gpu:3g.40gb:1");

    // A whole GPU without a hint gets the full profile; several GPUs get several on one node.
    let id = c.sbatch(&["--hold", "--gres=gpu:1", "--wrap=true"]);
    assert_eq!(tres(&c.job(id)), "gres:gpu:7g.80gb:1");
    let id = c.sbatch(&["--hold", "--gres=gpu:2", "--wrap=true"]);
    assert_eq!(tres(&c.job(id)), "gres:gpu:7g.80gb:2");

    // The model options reach job_submit through SPANK, and `dynmig estimate` with the same
    // options predicts the profile sbatch gives (issue 30).
    for opt in [
        "--mig-optimizer",
        "--mig-attention",
        "--mig-vocab",
        "--mig-kv-heads",
        "--mig-lora-rank",
        "--mig-act-per-sample",
    ] {
        assert!(help.contains(opt), "sbatch --help does not list {opt}:\n{help}");
    }
    let hints = [
        "--mig-model-params=6.7B",
        "--mig-phase=infer",
        "--mig-seq=8192",
        "--mig-kv-heads=8",
        "--mig-vocab=128256",
    ];
    let dynmig = bin_dir().join("dynmig");
    let conf = c.dir.join("dynmig.toml");
    let mut args = vec!["--config", conf.to_str().unwrap(), "estimate", "--json"];
    args.extend(hints);
    let out = c.cmd(dynmig.to_str().unwrap(), &args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let predicted: Value = serde_json::from_slice(&out.stdout).expect("estimate --json");
    let profile = predicted["profile"].as_str().expect("a profile").to_string();
    let mut args = vec!["--hold", "--gres=gpu:1", "--wrap=true"];
    args.extend(hints);
    let id = c.sbatch(&args);
    assert_eq!(tres(&c.job(id)), format!("gres:gpu:{profile}:1"), "{predicted}");
    // And it runs to its end once a node offers that profile: n2 is repartitioned for it as
    // the controller would (the drain with the intent, then the agent's apply), and the job
    // released.
    c.drain_for("n2", &format!("1x{profile},1x{profile}"));
    c.wait_for(&format!("n2 back with 2 x {profile}"), Duration::from_secs(60), || {
        let n = c.node("n2");
        n["gres"].as_str().unwrap_or("").contains(&format!("{profile}:2"))
            && n["reason"].as_str().unwrap_or("").is_empty()
    });
    c.ok("scontrol", &["release", &id.to_string()]);
    c.wait_ends(id, "COMPLETED", Duration::from_secs(60));
    assert!(c.job(id).contains("NodeList=n2"), "{}", c.job(id));
    // A value sbatch cannot use ends the submission with the reason.
    let out = c.cmd(
        "sbatch",
        &[
            "--gres=gpu:1",
            "--mig-model-params=1B",
            "--mig-optimizer=lion",
            "--wrap=true",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "sbatch accepted --mig-optimizer=lion: {err}");
    assert!(
        err.contains("--mig-optimizer=lion: unknown optimizer; allowed: adamw, sgd, adam8bit, none"),
        "{err}"
    );

    // A job without GPUs is left alone.
    let id = c.sbatch(&["--hold", "--wrap=true"]);
    let job = c.job(id);
    assert_eq!(tres(&job), "", "{job}");
    assert!(!job.contains("AdminComment=dynmig"), "{job}");
}

#[test]
#[ignore = "needs root and Slurm: run slurm/test.sh"]
fn users_and_an_operator_submit_update_hold_release_and_cancel_and_the_admin_comment_survives() {
    let c = Cluster::up(false);
    let uid = c.user("dynmig-user");
    let as_ok = |uid: u32, who: &str, args: &[&str]| -> String {
        let out = c.as_user(uid, args[0], &args[1..]);
        assert!(
            out.status.success(),
            "{args:?} as {who}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let user = |args: &[&str]| as_ok(uid, "dynmig-user", args);
    let id: u64 = user(&[
        "sbatch",
        "--parsable",
        "--output=/dev/null",
        "--hold",
        "--time=10",
        "--gres=gpu:1",
        "--mig-mem=18G",
        "--wrap=true",
    ])
    .trim()
    .parse()
    .expect("job id");
    let jid = format!("jobid={id}");
    let job = c.job(id);
    assert!(job.contains(&format!("UserId=dynmig-user({uid})")), "{job}");
    assert_eq!(tres(&job), "gres:gpu:2g.20gb:1", "{job}");
    assert!(job.contains("AdminComment=dynmig/v1 profile=2g.20gb"), "{job}");
    // An admin's comment replaces dynmig's; nothing the user does below may lose it.
    c.ok("scontrol", &["update", &jid, "admincomment=keep-me"]);
    let kept = |what: &str| {
        let job = c.job(id);
        assert!(job.contains("AdminComment=keep-me"), "after {what}: {job}");
        job
    };
    // The user changes the GPU request: accepted (job_modify) where Slurm replaces the
    // request, refused before 23.02.6 (Slurm would merge it into the old one and the job
    // would never start); the comment stays either way.
    let retype = c.updates_replace_gres();
    let out = c.as_user(uid, "scontrol", &["update", &jid, "gres=gpu:3g.40gb:1"]);
    let now = if retype {
        "gres:gpu:3g.40gb:1"
    } else {
        "gres:gpu:2g.20gb:1"
    };
    assert_eq!(out.status.success(), retype, "{}", String::from_utf8_lossy(&out.stderr));
    if !retype {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("not supported"), "{err}");
    }
    let job = kept("the GRES update");
    assert_eq!(tres(&job), now, "{job}");
    // An untyped single GPU cannot be sized without the job's hints: refused, job unchanged.
    let out = c.as_user(uid, "scontrol", &["update", &jid, "gres=gpu:1"]);
    assert!(!out.status.success(), "an untyped single-GPU update was accepted");
    assert_eq!(tres(&kept("a refused update")), now);
    // From 23.02 job_modify hands its reason back (err_msg) and scontrol prints it; 22.05
    // has no err_msg there, so the user sees only Slurm's text for the code.
    let err = String::from_utf8_lossy(&out.stderr);
    if c.slurm_version() >= (23, 2) {
        assert!(err.contains("cannot size an untyped GPU request"), "{err}");
    }
    // The user changes the time limit (of a pending job, within the partition's limit).
    user(&["scontrol", "update", &jid, "timelimit=5"]);
    assert_eq!(field(&kept("the time limit update"), "TimeLimit"), "00:05:00");
    // Release, hold again, release: the job is a user's to hold.
    user(&["scontrol", "release", &id.to_string()]);
    let job = kept("release");
    assert_ne!(field(&job, "Priority"), "0", "{job}");
    user(&["scontrol", "hold", &id.to_string()]);
    let job = kept("hold");
    assert_eq!(field(&job, "Priority"), "0", "{job}");
    user(&["scontrol", "release", &id.to_string()]);
    assert_ne!(field(&kept("the second release"), "Priority"), "0");
    // Another ordinary user may not touch the job: update, hold, release and cancel refused.
    let other = c.user("dynmig-other");
    for args in [
        &["scontrol", "update", &jid, "gres=gpu:2g.20gb:1"][..],
        &["scontrol", "update", &jid, "timelimit=9"],
        &["scontrol", "hold", &id.to_string()],
        &["scontrol", "release", &id.to_string()],
        &["scancel", &id.to_string()],
    ] {
        let out = c.as_user(other, args[0], &args[1..]);
        assert!(!out.status.success(), "another user's {args:?} succeeded");
    }
    let job = kept("another user's attempts");
    assert_eq!(tres(&job), now, "{job}");
    assert_eq!(field(&job, "TimeLimit"), "00:05:00", "{job}");
    assert_ne!(field(&job, "Priority"), "0", "{job}");
    assert_ne!(c.job_state(id), "CANCELLED", "another user cancelled the job");
    // An operator (AdminLevel=Operator in accounting: slurmdbd runs in the local cluster) may:
    // the GPU request and the time limit (raised: only operators may), hold and release,
    // through job_modify like the owner's updates; the admin's comment stays throughout.
    let op = c.user_with_level("dynmig-operator", "Operator");
    let operator = |args: &[&str]| as_ok(op, "dynmig-operator", args);
    let out = c.as_user(op, "scontrol", &["update", &jid, "gres=gpu:2g.20gb:1"]);
    assert_eq!(out.status.success(), retype, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(tres(&kept("the operator's GRES update")), "gres:gpu:2g.20gb:1");
    let out = c.as_user(op, "scontrol", &["update", &jid, "gres=gpu:1"]);
    assert!(
        !out.status.success(),
        "the operator's untyped single-GPU update was accepted"
    );
    assert_eq!(tres(&kept("the operator's refused update")), "gres:gpu:2g.20gb:1");
    operator(&["scontrol", "update", &jid, "timelimit=20"]);
    assert_eq!(
        field(&kept("the operator's time limit update"), "TimeLimit"),
        "00:20:00"
    );
    operator(&["scontrol", "hold", &id.to_string()]);
    assert_eq!(field(&kept("the operator's hold"), "Priority"), "0");
    operator(&["scontrol", "release", &id.to_string()]);
    assert_ne!(field(&kept("the operator's release"), "Priority"), "0");
    // The operator cancels the user's job; the user cancels a job of their own.
    operator(&["scancel", &id.to_string()]);
    c.wait_for("the job to be cancelled", Duration::from_secs(10), || {
        c.job_state(id) == "CANCELLED"
    });
    kept("the operator's cancel");
    let own: u64 = user(&[
        "sbatch",
        "--parsable",
        "--output=/dev/null",
        "--hold",
        "--gres=gpu:1",
        "--wrap=true",
    ])
    .trim()
    .parse()
    .expect("job id");
    user(&["scancel", &own.to_string()]);
    c.wait_for("the user's own job to be cancelled", Duration::from_secs(10), || {
        c.job_state(own) == "CANCELLED"
    });
}

#[test]
#[ignore = "needs root and Slurm: run slurm/test.sh"]
fn a_job_whose_user_changes_its_gpu_request_runs_on_what_it_asks_now_or_the_change_is_refused() {
    // The issue-25 case: submitted with --mig-mem=18G (2g.20gb, on no node yet), changed by
    // its user to 3g.40gb. With the controller on, whatever the job asks must then run.
    let c = Cluster::up(true);
    let uid = c.user("dynmig-user");
    let retype = c.updates_replace_gres();
    let submit = |args: &[&str]| -> u64 {
        let mut a = vec!["sbatch", "--parsable", "--output=/dev/null", "--hold", "--time=5"];
        a.extend_from_slice(args);
        let out = c.as_user(uid, a[0], &a[1..]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().parse().expect("job id")
    };
    let as_user = |args: &[&str]| c.as_user(uid, args[0], &args[1..]);
    // 1. The user's typed update.
    let a = submit(&["--gres=gpu:1", "--mig-mem=18G", "--wrap=true"]);
    assert_eq!(tres(&c.job(a)), "gres:gpu:2g.20gb:1");
    let out = as_user(&["scontrol", "update", &format!("jobid={a}"), "gres=gpu:3g.40gb:1"]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.success(), retype, "{err}");
    let want_a = if retype {
        "gres:gpu:3g.40gb:1"
    } else {
        "gres:gpu:2g.20gb:1"
    };
    assert_eq!(tres(&c.job(a)), want_a);
    if !retype {
        // 22.05's job_modify has no err_msg: Slurm's text for the code, the reason in the log.
        assert!(err.contains("not supported"), "{err}");
        let log = std::fs::read_to_string(c.dir.join("log/slurmctld.log")).unwrap_or_default();
        assert!(
            log.contains(&format!("update of job {a} uid {uid}: rejected: dynmig: Slurm 22.05")),
            "no log line naming job {a}"
        );
    }
    // 2. Root's update of another job, from 1g.10gb to the whole GPU.
    let b = submit(&["--gres=gpu:1", "--mig-mem=5G", "--wrap=true"]);
    assert_eq!(tres(&c.job(b)), "gres:gpu:1g.10gb:1");
    let out = c.cmd("scontrol", &["update", &format!("jobid={b}"), "gres=gpu:7g.80gb:1"]);
    assert_eq!(out.status.success(), retype, "{}", String::from_utf8_lossy(&out.stderr));
    let want_b = if retype {
        "gres:gpu:7g.80gb:1"
    } else {
        "gres:gpu:1g.10gb:1"
    };
    assert_eq!(tres(&c.job(b)), want_b);
    // 3. A time limit update and a hold/release cycle change nothing dynmig looks at.
    assert!(as_user(&["scontrol", "update", &format!("jobid={a}"), "timelimit=4"])
        .status
        .success());
    // Released, both run on what they ask now, with the controller repartitioning for them.
    for id in [a, b] {
        assert!(as_user(&["scontrol", "release", &id.to_string()]).status.success());
    }
    for id in [a, b] {
        c.wait_ends(id, "COMPLETED", Duration::from_secs(150));
    }
    if retype {
        // The controller brought the decision record in step with the update.
        let job = c.job(a);
        assert!(job.contains("AdminComment=dynmig/v1 profile=3g.40gb count=1"), "{job}");
        assert!(job.contains("restarts=0 prev=2g.20gb by=update"), "{job}");
    }
}

#[test]
#[ignore = "needs root and Slurm: run slurm/test.sh"]
fn guarded_catalog_sizes_new_jobs_and_moves_pending_ones() {
    // The guarded default's Slurm side (docs/policy.md, "Guarded", step 1). Its base is the
    // groups' initial layout (a whole 7g.80gb per GPU): the controller writes that catalog,
    // job_submit sizes new jobs to it, and pending jobs it sized before move to it where
    // Slurm can change a submitted job's type (23.02.6+).
    let c = Cluster::up_with(false, &[("DYNMIG_POLICY", "guarded")]);
    let retype = c.updates_replace_gres();
    let catalog = c.dir.join("dynmig/catalog.json");
    assert!(!catalog.exists(), "no controller has run yet");
    // 1. Before any catalog: an 8 GiB job gets the smallest profile that holds it.
    let held = c.sbatch(&["--hold", "--gres=gpu:1", "--mig-mem=8G", "--time=5", "--wrap=true"]);
    assert_eq!(tres(&c.job(held)), "gres:gpu:1g.10gb:1");
    // 2. One controller pass: the catalog of the base, and the held job moved to it.
    let out = c.cmd(
        &bin_dir().join("dynmig").display().to_string(),
        &["controller", "--once"],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&catalog).expect("the controller wrote the catalog");
    assert_eq!(text, r#"{"v":1,"types":{"A100-80GB":["7g.80gb"]}}"#);
    let job = c.job(held);
    if retype {
        assert_eq!(tres(&job), "gres:gpu:7g.80gb:1");
        assert!(job.contains("prev=1g.10gb by=catalog"), "{job}");
    } else {
        // 22.05 would keep the old request beside the new one: the job keeps its type.
        assert_eq!(tres(&job), "gres:gpu:1g.10gb:1");
        let log = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(log.contains("pending ones keep their type"), "{log}");
    }
    // 3. New jobs follow the catalog once job_submit's refresher has read it (every 5 s).
    let mut new = 0;
    c.wait_for(
        "job_submit to size a job to the catalog",
        Duration::from_secs(30),
        || {
            if new != 0 {
                let _ = c.cmd("scancel", &[&new.to_string()]);
            }
            new = c.sbatch(&["--hold", "--gres=gpu:1", "--mig-mem=8G", "--time=5", "--wrap=true"]);
            tres(&c.job(new)) == "gres:gpu:7g.80gb:1"
        },
    );
    // 4. Both run to completion on the whole GPUs the nodes have, with no repartition; the
    // job 22.05 could not move is cancelled (no node has its type).
    assert!(c.cmd("scontrol", &["release", &new.to_string()]).status.success());
    c.wait_ends(new, "COMPLETED", Duration::from_secs(60));
    if retype {
        assert!(c.cmd("scontrol", &["release", &held.to_string()]).status.success());
        c.wait_ends(held, "COMPLETED", Duration::from_secs(60));
    } else {
        assert!(c.cmd("scancel", &[&held.to_string()]).status.success());
        c.wait_ends(held, "CANCELLED", Duration::from_secs(30));
    }
    // 5. Under another kind the catalog goes and every profile is offered again.
    let conf = c.dir.join("dynmig.toml");
    let text = std::fs::read_to_string(&conf)
        .unwrap()
        .replace("kind = \"guarded\"", "kind = \"static\"");
    std::fs::write(&conf, text).unwrap();
    let out = c.cmd(
        &bin_dir().join("dynmig").display().to_string(),
        &["controller", "--once"],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!catalog.exists(), "the static controller removed the catalog");
}

#[test]
#[ignore = "needs root and Slurm: run slurm/test.sh"]
fn doctor_says_whether_the_installed_plugins_are_builds_for_the_running_slurm() {
    let c = Cluster::up(false);
    let dynmig = bin_dir().join("dynmig");
    let conf = c.dir.join("dynmig.toml").display().to_string();
    let out = c.cmd(dynmig.to_str().unwrap(), &["--config", &conf, "doctor"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let running = text
        .lines()
        .find_map(|l| l.strip_prefix("slurmctld: Slurm "))
        .and_then(|v| v.split_whitespace().next())
        .expect("the running version")
        .to_string();
    // The daemons are the release's own (slurm/releases.sh), and both plugins were built
    // with its headers.
    let daemon = String::from_utf8_lossy(&c.cmd("slurmctld", &["-V"]).stdout).into_owned();
    // "slurm 22.05.8" on bookworm, "slurm-wlm 24.11.5" from trixie on.
    assert!(daemon.trim().ends_with(&format!(" {running}")), "{daemon}");
    for what in ["job_submit/dynmig", "spank/dynmig"] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(what) && l.ends_with(&format!("built for Slurm {running}: ok"))),
            "{what}: {text}"
        );
    }
    // A job_submit plugin of the next micro release is refused, naming both versions.
    let plugin = std::fs::canonicalize(c.dir.join("plugins/job_submit_dynmig.so")).unwrap();
    let mut bytes = std::fs::read(&plugin).unwrap();
    let (v, at) = dynmig_slurm::plugin::plugin_version(&bytes).unwrap();
    assert_eq!(v.to_string(), running);
    bytes[at..at + 4].copy_from_slice(&(v.0 + 1).to_le_bytes());
    let tmp = tempfile::tempdir().unwrap();
    let other = tmp.path().join("job_submit_dynmig.so");
    std::fs::write(&other, &bytes).unwrap();
    let out = c.cmd(
        dynmig.to_str().unwrap(),
        &[
            "--config",
            &conf,
            "doctor",
            "--job-submit-plugin",
            other.to_str().unwrap(),
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(!out.status.success(), "{text}");
    let next = dynmig_slurm::plugin::SlurmVersion(v.0 + 1);
    assert!(
        text.contains("MISMATCH") && text.contains(&next.to_string()) && text.contains(&running),
        "{text}"
    );
}

#[test]
#[ignore = "needs root and Slurm: run slurm/test.sh"]
fn without_the_catalog_node_a_job_for_a_type_no_node_has_is_refused() {
    // Why local-dynmig.sh adds the placeholder catalog node on every release: 23.11's "allow
    // jobs that request a newly configured gres type to be queued" does not cover a type
    // that only dynamic nodes bring. A held job is taken, a schedulable one refused.
    let c = Cluster::up_with(false, &[("DYNMIG_NO_CATALOG", "1")]);
    assert!(c.node("catalog").is_null(), "{}", c.node("catalog"));
    let out = c.cmd("sbatch", &["--gres=gpu:3g.40gb:1", "--wrap=true"]);
    assert!(!out.status.success(), "a job for a type no node has was accepted");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Requested node configuration is not available"), "{err}");
    let held = c.sbatch(&["--hold", "--gres=gpu:3g.40gb:1", "--wrap=true"]);
    assert_eq!(c.job_state(held), "PENDING");
    c.ok("scancel", &[&held.to_string()]);
}

#[test]
#[ignore = "needs root and Slurm: run slurm/test.sh"]
fn bad_hints_make_sbatch_fail_with_the_reason() {
    let c = Cluster::up(false);
    for (hint, expect) in [
        ("--mig-mem=18Q", "unit"),
        ("--mig-profile=9g.99gb", "9g.99gb"),
        ("--mig-mem=900G", "largest"),
    ] {
        let out = c.cmd("sbatch", &["--gres=gpu:1", hint, "--wrap=true"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{hint} was accepted");
        assert!(err.contains(expect), "{hint}: stderr does not say '{expect}': {err}");
    }
    // A hint without a GPU request is refused by job_submit/dynmig in slurmctld.
    let out = c.cmd("sbatch", &["--mig-mem=10G", "--wrap=true"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("gpu"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[ignore = "needs root and Slurm: run slurm/test.sh"]
fn a_pending_job_makes_the_controller_repartition_a_node_and_then_runs() {
    let c = Cluster::up(true);
    // Every GPU starts as one 7g.80gb: no node has a 3g.40gb.
    let id = c.sbatch(&["--gres=gpu:1", "--mig-mem=30G", "--wrap=sleep 1"]);
    assert_eq!(tres(&c.job(id)), "gres:gpu:3g.40gb:1");
    c.wait_for("the job to complete", Duration::from_secs(90), || {
        c.job_state(id) == "COMPLETED"
    });
    let node = field(&c.job(id), "NodeList");
    let gres = c.node(&node)["gres"].as_str().unwrap_or("").to_string();
    assert!(gres.contains("3g.40gb"), "{node} has GRES {gres}");
    let events = std::fs::read_to_string(c.dir.join("dynmig/events.jsonl")).unwrap();
    assert!(
        events.contains("\"kind\":\"drain\"") && events.contains("\"kind\":\"applied\""),
        "{events}"
    );
}

#[test]
#[ignore = "needs root and Slurm: run slurm/test.sh"]
fn a_slurmctld_restart_during_a_repartition_loses_no_job() {
    let c = Cluster::up(true);
    // A job for a profile no node has: the controller drains a node and repartitions it.
    let wants = c.sbatch(&["--gres=gpu:1", "--mig-mem=30G", "--wrap=sleep 1"]);
    let events = c.dir.join("dynmig/events.jsonl");
    c.wait_for("the controller to start a repartition", Duration::from_secs(60), || {
        std::fs::read_to_string(&events).is_ok_and(|e| e.contains("\"kind\":\"drain\""))
    });
    // slurmctld restarts while the node is being re-registered. From 23.11 slurmctld kills
    // recovered jobs that require GRES types no node is configured with: the catalog node
    // keeps every type configured, so the job must survive.
    let out = Command::new("bash")
        .arg(c.root.join("slurm/cluster.sh"))
        .arg("restart-ctld")
        .env("DYNMIG_CLUSTER_DIR", &c.dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let job = c.job(wants);
    assert!(
        matches!(field(&job, "JobState").as_str(), "PENDING" | "RUNNING" | "COMPLETED"),
        "the job did not survive the restart: {job}"
    );
    assert_eq!(tres(&job), "gres:gpu:3g.40gb:1", "{job}");
    c.wait_for("the job to complete", Duration::from_secs(90), || {
        c.job_state(wants) == "COMPLETED"
    });
    let node = field(&c.job(wants), "NodeList");
    assert!(
        c.node(&node)["gres"].as_str().unwrap_or("").contains("3g.40gb"),
        "{node}: {}",
        c.node(&node)
    );
}

#[test]
#[ignore = "needs root and Slurm: run slurm/test.sh"]
fn a_node_with_running_jobs_is_never_reconfigured() {
    let c = Cluster::up(false);
    let id = c.sbatch(&["-w", "n1", "--gres=gpu:7g.80gb:1", "--wrap=sleep 300"]);
    c.wait_for("the job to run", Duration::from_secs(30), || {
        c.job_state(id) == "RUNNING"
    });
    let before = c.gpu_layouts("n1");
    // Hand n1 a target as the controller does (the drain, then a wake-up).
    c.drain_for("n1", "2x3g.40gb,2x3g.40gb");
    // Woken, the agent looks at once, then every 2 s while jobs run; give it several looks.
    std::thread::sleep(Duration::from_secs(6));
    assert_eq!(c.gpu_layouts("n1"), before, "instances changed under a running job");
    assert_eq!(c.job_state(id), "RUNNING");
    assert!(c.node("n1")["reason"]
        .as_str()
        .unwrap_or("")
        .starts_with("dynmig/v1 repartition to="));
    // One look of its own (`agent --once` takes the node's instance lock, so the daemon
    // stops for it and starts again: the Epilog below must find it running).
    c.stop_agent("n1");
    let out = c.agent_once("n1");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("WaitingForJobs"),
        "{out:?}"
    );
    c.start_agent("n1");

    // The job ends: the Epilog wakes the agent, which applies the layout at once.
    let t0 = Instant::now();
    c.ok("scancel", &[&id.to_string()]);
    c.wait_for("n1 back with 4x3g.40gb", Duration::from_secs(40), || {
        let n = c.node("n1");
        n["gres"].as_str().unwrap_or("").contains("3g.40gb:4") && n["reason"].as_str().unwrap_or("").is_empty()
    });
    eprintln!("n1 back in service {:.1} s after scancel", t0.elapsed().as_secs_f64());
    let after = c.gpu_layouts("n1");
    assert_eq!(after.len(), 4);
    assert!(after.iter().all(|l| l.contains("Type=3g.40gb")), "{after:?}");
}

#[test]
#[ignore = "needs root and Slurm: run slurm/test.sh"]
fn an_agent_killed_mid_apply_resumes_and_leaves_gpus_gres_conf_and_slurm_consistent() {
    let c = Cluster::up(false);
    // The running agent of n1 dies (SIGKILL, from inside its NVML stand-in) right after its
    // 2nd changing NVML call (the 7g's compute instance and GPU instance destroyed).
    nvml_standin::StandIn::open(&c.dir.join("nvml/n1"))
        .unwrap()
        .crash_after_mutations(2)
        .unwrap();
    c.drain_for("n1", "1x7g.80gb,7x1g.10gb");
    let journal = c.dir.join("dynmig/nodes/n1/agent-journal.json");
    let pid: String = std::fs::read_to_string(c.dir.join("run/agent-n1.pid"))
        .unwrap()
        .trim()
        .to_string();
    c.wait_for("the agent to die mid-apply", Duration::from_secs(20), || {
        !Path::new(&format!("/proc/{pid}")).exists()
    });
    assert!(journal.exists(), "the intent was not journalled before acting");
    let half = c.gpu_layouts("n1");
    assert!(half.len() != 8, "the crash came before the apply finished: {half:?}");

    // A restarted agent finds the journal and finishes the job.
    let out = c.agent_once("n1");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Applied"), "{out:?}");
    assert!(!journal.exists());
    let lines = c.gpu_layouts("n1");
    assert_eq!(
        lines.iter().filter(|l| l.contains("Type=1g.10gb")).count(),
        7,
        "{lines:?}"
    );
    assert_eq!(
        lines.iter().filter(|l| l.contains("Type=7g.80gb")).count(),
        1,
        "{lines:?}"
    );
    let gres_conf = std::fs::read_to_string(c.dir.join("nodes/n1/etc/gres.conf")).unwrap();
    let conf_lines: Vec<&str> = gres_conf.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(
        conf_lines,
        lines.iter().map(String::as_str).collect::<Vec<_>>(),
        "gres.conf differs from the GPUs"
    );
    for l in &conf_lines {
        // `File=` (one file) or `MultipleFiles=` (the NVML backend: /dev/nvidiaN and the
        // instance's capability files).
        let files = l
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix("File=").or_else(|| kv.strip_prefix("MultipleFiles=")))
            .unwrap();
        for file in files.split(',') {
            assert!(Path::new(file).exists(), "{file} missing");
        }
    }
    let n = c.node("n1");
    let gres = n["gres"].as_str().unwrap_or("");
    assert!(
        gres.contains("1g.10gb:7") && gres.contains("7g.80gb:1"),
        "Slurm sees {gres}"
    );
    assert_eq!(n["reason"].as_str().unwrap_or(""), "");
    // And the new layout is usable, each job on an instance of its own profile: GPU 0 holds
    // the 7g and GPU 1 the 1g instances, so Slurm's GRES numbering (by type name) differs from
    // GPU order, and the Prolog must still claim the right instance.
    let small = c.sbatch(&["-w", "n1", "--gres=gpu:1g.10gb:1", "--wrap=sleep 1"]);
    c.wait_for("a 1g.10gb job to complete on n1", Duration::from_secs(30), || {
        c.job_state(small) == "COMPLETED"
    });
    let big = c.sbatch(&["-w", "n1", "--gres=gpu:7g.80gb:1", "--wrap=sleep 1"]);
    c.wait_for("a 7g.80gb job to complete on n1", Duration::from_secs(30), || {
        c.job_state(big) == "COMPLETED"
    });
    let events = std::fs::read_to_string(c.dir.join("dynmig/events.jsonl")).unwrap();
    let started = |id: u64| -> String {
        events
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|e| e["kind"] == "job_start" && e["job"] == id)
            .map(|e| e["detail"].as_str().unwrap_or("").to_string())
            .unwrap_or_default()
    };
    assert!(
        started(small).starts_with("1g.10gb@") && started(small).contains("gpu1"),
        "{}",
        started(small)
    );
    assert!(started(big).starts_with("7g.80gb@0@gpu0"), "{}", started(big));
    c.kill_agent("n1");
}

/// `dynmig history show --json` of the test cluster.
fn history_json(c: &Cluster) -> Vec<Value> {
    let out = c.ok(
        bin_dir().join("dynmig").to_str().unwrap(),
        &["history", "show", "--json", "--limit", "1000"],
    );
    serde_json::from_str(&out).expect("history json")
}

#[test]
#[ignore = "needs root, Slurm and the built plugins (slurm/test.sh)"]
fn a_job_that_runs_out_of_memory_is_requeued_on_the_next_profile_and_completes() {
    let c = Cluster::up(true);
    let dynmig = bin_dir().join("dynmig");
    let err = c.dir.join("oom-job.err");
    let _ = std::fs::remove_file(&err);
    // --mig-mem=9G -> 1g.10gb; the job needs 15G: out of memory, then 2g.20gb.
    let id = c.sbatch(&[
        "--gres=gpu:1",
        "--mig-mem=9G",
        "--open-mode=append",
        &format!("--error={}", err.display()),
        &format!("--wrap={} fake-job --mem 15G --seconds 1", dynmig.display()),
    ]);
    if !c.updates_replace_gres() {
        // Before 23.02.6 Slurm cannot move the job to 2g.20gb (the update would merge): it
        // ends FAILED and its stderr says how to submit it again.
        c.wait_ends(id, "FAILED", Duration::from_secs(120));
        assert_eq!(field(&c.job(id), "Restarts"), "0");
        c.wait_for(
            "the restart helper's line in the job's stderr",
            Duration::from_secs(30),
            || {
                std::fs::read_to_string(&err)
                    .unwrap_or_default()
                    .contains("not requeued")
            },
        );
        let text = std::fs::read_to_string(&err).unwrap_or_default();
        assert!(
            text.contains("cannot move a submitted job to another MIG profile"),
            "{text}"
        );
        assert!(text.contains("submit it again with --gres=gpu:2g.20gb:1"), "{text}");
        return;
    }
    c.wait_ends(id, "COMPLETED", Duration::from_secs(240));
    let job = c.job(id);
    assert_eq!(field(&job, "Restarts"), "1", "{job}");
    assert!(job.contains("gpu:2g.20gb"), "{job}");
    assert!(job.contains("ran out of GPU memory on 1g.10gb"), "{job}");
    // The decision record names the profile the job asks for now and what came before.
    assert!(job.contains("AdminComment=dynmig/v1 profile=2g.20gb count=1"), "{job}");
    assert!(job.contains("restarts=1 prev=1g.10gb by=oom-restart"), "{job}");
    let text = std::fs::read_to_string(&err).unwrap_or_default();
    assert!(text.contains("CUDA out of memory"), "{text}");
    assert!(text.contains("requeued on 2g.20gb (restart 1 of 2)"), "{text}");
    // Both runs are in the history: the first out of memory at the 1g.10gb limit.
    c.wait_for("two history records", Duration::from_secs(30), || {
        history_json(&c).iter().filter(|r| r["job_id"] == id).count() == 2
    });
    let runs: Vec<Value> = history_json(&c).into_iter().filter(|r| r["job_id"] == id).collect();
    assert_eq!(runs[0]["oom"], true);
    assert_eq!(runs[0]["profile"], "1g.10gb");
    assert_eq!(runs[1]["oom"], false);
    assert_eq!(runs[1]["profile"], "2g.20gb");
    assert_eq!(runs[1]["peak_bytes"], 15u64 << 30);
}

#[test]
#[ignore = "needs root, Slurm and the built plugins (slurm/test.sh)"]
fn a_history_record_reaches_sqlite_even_when_the_server_was_down() {
    let c = Cluster::up(false);
    let dynmig = bin_dir().join("dynmig");
    // The server is down: the record waits in the node's spool.
    let pid = std::fs::read_to_string(c.dir.join("run/history.pid")).unwrap();
    assert!(Command::new("kill").arg(pid.trim()).status().unwrap().success());
    let id = c.sbatch(&[
        "-w",
        "n1",
        "--gres=gpu:7g.80gb:1",
        "--job-name=hist",
        &format!("--wrap={} fake-job --mem 5G --seconds 0", dynmig.display()),
    ]);
    c.wait_for("the job to complete", Duration::from_secs(60), || {
        c.job_state(id) == "COMPLETED"
    });
    let spool = c.dir.join("dynmig/spool");
    // Records only: the spool also holds the flushers' lock file (`.flush.lock`).
    let records = || dynmig_history::spool::list(&spool).len();
    c.wait_for("the record in the spool", Duration::from_secs(20), || records() == 1);
    // Server back: a flush delivers it into SQLite, and the snapshot counts it.
    let mut server = Command::new(&dynmig)
        .args([
            "--config",
            c.dir.join("dynmig.toml").to_str().unwrap(),
            "history",
            "serve",
        ])
        .env("SLURM_CONF", &c.slurm_conf)
        .spawn()
        .unwrap();
    std::fs::write(c.dir.join("run/history.pid"), server.id().to_string()).unwrap();
    c.wait_for("the spool to be delivered", Duration::from_secs(20), || {
        let out = c.ok(dynmig.to_str().unwrap(), &["history", "flush", "--node", "n1"]);
        out.contains("pending 0") && records() == 0
    });
    // The Epilog does not know the job's name: the server names the run from Slurm, for
    // every run recorded since, with one read every 30 s (docs/history.md).
    c.wait_for("the run named from Slurm", Duration::from_secs(60), || {
        history_json(&c)
            .iter()
            .any(|r| r["job_id"] == id && r["job_name"] == "hist")
    });
    let runs = history_json(&c);
    let r = runs.iter().find(|r| r["job_id"] == id).expect("the job's record");
    assert_eq!(
        (r["job_name"].as_str(), r["profile"].as_str()),
        (Some("hist"), Some("7g.80gb"))
    );
    assert_eq!(
        (r["peak_bytes"].as_u64(), r["oom"].as_bool()),
        (Some(5 << 30), Some(false))
    );
    assert_eq!(r["uid"], 0);
    let db = c.dir.join("dynmig/history.db");
    let n: i64 = rusqlite::Connection::open(&db)
        .unwrap()
        .query_row("SELECT COUNT(*) FROM jobs WHERE job_id = ?1", [id as i64], |row| {
            row.get(0)
        })
        .unwrap();
    assert_eq!(n, 1);
    // The server rebuilds the snapshot on its cadence (every 10 s at most), not per record.
    let snap_path = c.dir.join("dynmig/history-snapshot.tsv");
    c.wait_for("the history snapshot", Duration::from_secs(30), || {
        std::fs::read_to_string(&snap_path).is_ok_and(|t| t.lines().any(|l| l.ends_with("\thist")))
    });
    let snap = std::fs::read_to_string(&snap_path).unwrap();
    assert!(
        snap.lines().any(|l| l.ends_with("\thist") && l.starts_with("0\t1\t")),
        "{snap}"
    );
    let _ = server.kill();
    let _ = server.wait();
}

/// `sacct --json -j <id>`'s first job.
fn sacct_job(c: &Cluster, id: u64) -> Value {
    let out = c.cmd("sacct", &["--json", "-j", &id.to_string()]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    v["jobs"].get(0).cloned().unwrap_or(Value::Null)
}

#[test]
#[ignore = "needs root, Slurm, slurmdbd and the built plugins (slurm/test.sh)"]
fn with_slurmdbd_the_epilog_writes_the_record_into_accounting_and_the_snapshot_comes_from_sacct() {
    let c = Cluster::up_with(true, &[("DYNMIG_HISTORY_STORE", "slurmdbd")]);
    let dynmig = bin_dir().join("dynmig");
    let snap_path = c.dir.join("dynmig/history-snapshot.tsv");
    let _ = std::fs::remove_file(&snap_path);
    // --mig-mem=9G -> 1g.10gb; the job needs 15G: out of memory, requeued on 2g.20gb. Each
    // run's Epilog writes its record; both must be in accounting.
    let id = c.sbatch(&[
        "--gres=gpu:1",
        "--mig-mem=9G",
        "--job-name=acct-hist",
        &format!("--wrap={} fake-job --mem 15G --seconds 0", dynmig.display()),
    ]);
    let job = c.job(id);
    assert!(job.contains("AdminComment=dynmig/v1 profile=1g.10gb"), "{job}");
    // Before 23.02.6 the job is not requeued on another profile (see the test above): one run.
    let retype = c.updates_replace_gres();
    let runs = if retype { 2 } else { 1 };
    c.wait_ends(
        id,
        if retype { "COMPLETED" } else { "FAILED" },
        Duration::from_secs(240),
    );
    assert_eq!(field(&c.job(id), "Restarts"), (runs - 1).to_string());
    // The Epilogs wrote the records into the job's SystemComment in slurmdbd, and
    // `sacct --duplicates` (every run's row) gives each run's record once.
    let records = || {
        let out = c.ok("sacct", &["--json", "--duplicates", "-j", &id.to_string()]);
        dynmig_history::accounting::records_from_sacct(out.as_bytes()).expect("sacct's JSON")
    };
    c.wait_for(
        "both runs' records in Slurm's accounting",
        Duration::from_secs(60),
        || records().records.len() == runs,
    );
    let read = records();
    assert!(read.skipped.is_empty(), "{:?}", read.skipped);
    let got: Vec<_> = read
        .records
        .iter()
        .map(|r| {
            (
                r.job_id,
                r.restart,
                r.job_name.as_str(),
                r.profile.as_str(),
                r.oom,
                r.uid,
            )
        })
        .collect();
    let mut want = vec![(id, 0, "acct-hist", "1g.10gb", true, 0)];
    if retype {
        want.push((id, 1, "acct-hist", "2g.20gb", false, 0));
        assert_eq!(read.records[1].peak_bytes, 15 << 30);
    }
    assert_eq!(got, want);
    // `dynmig history show` reads the same from sacct.
    let shown: Value = serde_json::from_str(&c.ok(
        dynmig.to_str().unwrap(),
        &["history", "show", "--name", "acct-hist", "--json"],
    ))
    .unwrap();
    let restarts: Vec<&Value> = shown.as_array().unwrap().iter().map(|r| &r["restart"]).collect();
    assert_eq!(restarts.len(), runs, "{shown}");
    // job_submit/dynmig's AdminComment is still a decision record: the Epilog never wrote it.
    let job = sacct_job(&c, id);
    let admin = job["comment"]["administrator"].as_str().unwrap_or("");
    assert!(admin.starts_with("dynmig/v1 "), "{job}");
    // Delivered: nothing stays in the nodes' spools.
    let spool = c.dir.join("dynmig/spool");
    assert_eq!(dynmig_history::spool::list(&spool).len(), 0);
    // dynmig history serve (store = "slurmdbd") rebuilds the snapshot from sacct --json.
    // (Rebuilt every second: wait for one made after both records were in accounting.)
    let entry = || {
        let snap = std::fs::read_to_string(&snap_path).ok()?;
        let parsed = dynmig_core::estimate::history::HistorySnapshot::parse(&snap).ok()?;
        parsed.lookup(0, "acct-hist").map(|e| (e.samples, e.ooms))
    };
    c.wait_for(
        "the snapshot built from sacct with both runs",
        Duration::from_secs(30),
        || entry() == Some((runs as u32, 1)),
    );
}

#[test]
#[ignore = "needs root, Slurm and the built plugins (slurm/test.sh)"]
fn a_record_that_is_not_from_a_node_is_refused() {
    let c = Cluster::up(false);
    let send = |line: &str| -> String {
        let mut s = std::net::TcpStream::connect("10.199.0.1:6830").expect("history server");
        std::io::Write::write_all(&mut s, format!("{line}\n").as_bytes()).unwrap();
        let mut a = String::new();
        std::io::Read::read_to_string(&mut s, &mut a).unwrap();
        a
    };
    c.wait_for("the history server", Duration::from_secs(10), || {
        std::net::TcpStream::connect("10.199.0.1:6830").is_ok()
    });
    let record = r#"{"v":1,"job_id":1,"restart":0,"node":"n1","uid":0,"user":"x","job_name":"forged","profile":"7g.80gb","estimate_bytes":0,"source":"","peak_bytes":1,"limit_bytes":1,"exit_status":0,"oom":false,"end_time":0}"#;
    // Garbage.
    let a = send("MUNGE:not-a-credential:");
    assert!(a.starts_with("ERR credential refused by munge"), "{a}");
    // A valid credential of another munge key (a host outside the cluster).
    let tmp = tempfile::tempdir().unwrap();
    let key = tmp.path().join("key");
    std::fs::write(&key, [7u8; 1024]).unwrap();
    let _ = Command::new("chmod").args(["0400", key.to_str().unwrap()]).status();
    let sock = tmp.path().join("sock");
    let pid_file = tmp.path().join("pid");
    assert!(Command::new("munged")
        .args([
            "--force",
            "--socket",
            sock.to_str().unwrap(),
            "--key-file",
            key.to_str().unwrap()
        ])
        .args([
            "--pid-file",
            pid_file.to_str().unwrap(),
            "--seed-file",
            tmp.path().join("seed").to_str().unwrap()
        ])
        .args(["--log-file", tmp.path().join("log").to_str().unwrap()])
        .status()
        .unwrap()
        .success());
    let encode = |socket: &Path, uid: Option<u32>| -> String {
        let sock = socket.to_str().unwrap();
        let args = ["--socket", sock, "--string", record];
        let out = match uid {
            Some(u) => as_uid(u, "munge", &args).output(),
            None => Command::new("munge").args(args).output(),
        }
        .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let foreign = encode(&sock, None);
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    let _ = Command::new("kill").arg(pid.trim()).status();
    let a = send(&foreign);
    assert!(a.starts_with("ERR credential refused by munge"), "{a}");
    // The cluster's key, but not root (a second munged with the cluster's key, on a socket
    // that uid 65534 may reach; the cluster's own socket directory is root's only).
    let open_dir = tempfile::tempdir().unwrap();
    let _ = Command::new("chmod")
        .args(["0755", open_dir.path().to_str().unwrap()])
        .status();
    let key2 = open_dir.path().join("key");
    std::fs::copy(c.dir.join("munge/munge.key"), &key2).unwrap();
    let _ = Command::new("chmod").args(["0400", key2.to_str().unwrap()]).status();
    let sock2 = open_dir.path().join("sock");
    let pid2 = open_dir.path().join("pid");
    assert!(Command::new("munged")
        .args([
            "--force",
            "--socket",
            sock2.to_str().unwrap(),
            "--key-file",
            key2.to_str().unwrap()
        ])
        .args([
            "--pid-file",
            pid2.to_str().unwrap(),
            "--seed-file",
            open_dir.path().join("seed").to_str().unwrap()
        ])
        .args(["--log-file", open_dir.path().join("log").to_str().unwrap()])
        .status()
        .unwrap()
        .success());
    let not_root = encode(&sock2, Some(65534));
    let _ = Command::new("kill")
        .arg(std::fs::read_to_string(&pid2).unwrap().trim())
        .status();
    let cluster_sock = c.dir.join("munge/munge.socket");
    let a = send(&not_root);
    assert!(a.contains("65534") && a.starts_with("ERR"), "{a}");
    // Root on a node: accepted, once.
    let good = encode(&cluster_sock, None);
    assert_eq!(send(&good).trim(), "OK stored");
    let names: Vec<Value> = history_json(&c).iter().map(|r| r["job_name"].clone()).collect();
    assert_eq!(names, [Value::from("forged")]);
}

#[test]
#[ignore = "needs root and Slurm: run slurm/test.sh"]
fn a_missing_mig_device_fails_the_prolog_so_slurm_drains_the_node_and_requeues_the_job() {
    let c = Cluster::up(false);
    // n1's MIG devices vanish behind Slurm's back (a GPU reset, an admin's nvidia-smi): the
    // capability files of its instances under the stand-in's device root. The agent is
    // stopped first, so that nothing makes instances (and their files) meanwhile.
    c.kill_agent("n1");
    std::thread::sleep(Duration::from_millis(300));
    for e in std::fs::read_dir(c.dir.join("nvml/n1/root/dev/nvidia-caps"))
        .unwrap()
        .flatten()
    {
        std::fs::remove_file(e.path()).unwrap();
    }
    let id = c.sbatch(&["-w", "n1", "--gres=gpu:7g.80gb:1", "--wrap=sleep 1"]);
    c.wait_for("n1 drained by the failed Prolog", Duration::from_secs(40), || {
        let n = c.node("n1");
        has_flag(&n, "DRAIN")
    });
    let reason = c.node("n1")["reason"].as_str().unwrap_or("").to_string();
    assert!(reason.to_lowercase().contains("prolog"), "drain reason: {reason}");
    // The job is not lost: it went back to the queue (once its Epilog has ended).
    c.wait_for("the requeued job to finish completing", Duration::from_secs(30), || {
        c.job_state(id) != "COMPLETING"
    });
    let job = c.job(id);
    let state = field(&job, "JobState");
    assert!(
        matches!(state.as_str(), "PENDING" | "REQUEUED"),
        "job state {state}: {job}"
    );
    assert!(
        job.contains("Restarts=1") || field(&job, "Reason").contains("launch failed"),
        "{job}"
    );
    let events = std::fs::read_to_string(c.dir.join("dynmig/events.jsonl")).unwrap();
    assert!(events.contains("\"kind\":\"prolog_failed\""), "{events}");
}

/// Seconds since midnight of a `YYYY-MM-DDTHH:MM:SS` time as `scontrol show` prints it (both
/// times compared come from the same slurmctld, in the same time zone).
fn time_of_day(t: &str) -> i64 {
    let hms: Vec<i64> = t
        .rsplit('T')
        .next()
        .unwrap_or("")
        .split(':')
        .map(|x| x.parse().unwrap_or(-1))
        .collect();
    assert_eq!(hms.len(), 3, "not a Slurm time: '{t}'");
    hms[0] * 3600 + hms[1] * 60 + hms[2]
}

#[test]
#[ignore = "needs root and Slurm: run slurm/test.sh"]
fn a_busy_node_is_reserved_at_its_jobs_end_keeps_short_jobs_and_then_repartitions() {
    let c = Cluster::up(true);
    // Only n1 may be chosen: an administrator holds n2.
    c.ok(
        "scontrol",
        &["update", "nodename=n2", "state=drain", "reason=test holds n2"],
    );
    // A job runs on n1's GPU 0 until its 2-minute time limit.
    let long_running = c.sbatch(&["-w", "n1", "--gres=gpu:7g.80gb:1", "--time=2", "--wrap=sleep 600"]);
    c.wait_for("the first job to run", Duration::from_secs(30), || {
        c.job_state(long_running) == "RUNNING"
    });
    let ends = field(&c.job(long_running), "EndTime");
    // Demand for a profile no node has: the controller plans n1's repartition. Its time limit
    // (10 min of a 3g.40gb) pays back what the change costs (n1's free GPU idle until the
    // running job's 2-minute limit, docs/policy.md "payback"); a 1-minute job would not.
    let wants = c.sbatch(&["--gres=gpu:3g.40gb:1", "--time=10", "--wrap=sleep 1"]);
    let resv = |c: &Cluster| {
        let out = c.cmd("scontrol", &["show", "ReservationName=dynmig_n1"]);
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    };
    c.wait_for("the reservation dynmig_n1", Duration::from_secs(30), || {
        resv(&c).is_some()
    });
    let r = resv(&c).unwrap();
    assert!(
        r.contains("MAINT") && r.contains("IGNORE_JOBS") && r.contains("Nodes=n1"),
        "{r}"
    );
    assert!(
        (time_of_day(&field(&r, "StartTime")) - time_of_day(&ends)).abs() <= 2,
        "the reservation starts when the running job's time limit ends ({ends}): {r}"
    );
    let n1 = c.node("n1");
    assert!(!has_flag(&n1, "DRAIN"), "n1 was drained: {n1}");
    // A job whose time limit ends after the reservation starts does not start on n1's free
    // GPU; one that ends before it does (backfill), after it in the queue.
    let too_long = c.sbatch(&["-w", "n1", "--gres=gpu:7g.80gb:1", "--time=5", "--wrap=sleep 5"]);
    std::thread::sleep(Duration::from_secs(4));
    let job = c.job(too_long);
    assert_eq!(field(&job, "JobState"), "PENDING", "{job}");
    assert!(job.contains("ReqNodeNotAvail") || job.contains("Reserved"), "{job}");
    let short = c.sbatch(&["-w", "n1", "--gres=gpu:7g.80gb:1", "--time=1", "--wrap=sleep 10"]);
    c.wait_for("the short job to run on n1", Duration::from_secs(30), || {
        matches!(c.job_state(short).as_str(), "RUNNING" | "COMPLETED")
    });
    assert_eq!(c.job_state(too_long), "PENDING");
    let events = std::fs::read_to_string(c.dir.join("dynmig/events.jsonl")).unwrap();
    assert!(events.contains("\"kind\":\"planned\""), "{events}");
    assert!(
        !events.contains("\"kind\":\"drain\""),
        "drained before the jobs ended: {events}"
    );

    // The first job ends before its time limit (cancelled: waiting out the limit took 2-3
    // minutes of every release's suite, slurmctld enforcing limits every 30 s): n1 is free,
    // so it is drained at once instead of at the reservation's start, repartitioned and
    // back, and the reservation is gone.
    c.wait_for("the short job to end", Duration::from_secs(60), || {
        c.job_state(short) == "COMPLETED"
    });
    c.ok("scancel", &[&long_running.to_string()]);
    c.wait_for("n1 back with a 3g.40gb", Duration::from_secs(120), || {
        let n = c.node("n1");
        n["gres"].as_str().unwrap_or("").contains("3g.40gb") && n["reason"].as_str().unwrap_or("").is_empty()
    });
    assert!(resv(&c).is_none(), "the reservation is still there");
    c.wait_for("the 3g.40gb job to complete", Duration::from_secs(60), || {
        c.job_state(wants) == "COMPLETED"
    });
    let events = std::fs::read_to_string(c.dir.join("dynmig/events.jsonl")).unwrap();
    assert!(
        events.contains("\"kind\":\"drain\"") && events.contains("\"kind\":\"applied\""),
        "{events}"
    );
    let _ = c.cmd("scancel", &[&too_long.to_string()]);
}

#[test]
#[ignore = "needs root and Slurm: run slurm/test.sh"]
fn the_learned_controller_serves_the_shipped_model_and_runs_a_job_no_layout_has() {
    // slurm/local-dynmig.sh points [policy] model at models/learned-A100-80GB.safetensors, the
    // model the repository ships for this cluster's GPUs.
    let c = Cluster::up_with(true, &[("DYNMIG_POLICY", "learned")]);
    let conf = std::fs::read_to_string(c.dir.join("dynmig.toml")).unwrap();
    assert!(
        conf.contains("kind = \"learned\"") && conf.contains("models/learned-A100-80GB.safetensors"),
        "{conf}"
    );
    // Every GPU starts as one 7g.80gb: a 3g.40gb job runs only after the model (or its
    // shield, which masks keeping when no node offers a waiting job's profile) changes a node.
    let id = c.sbatch(&["--gres=gpu:1", "--mig-mem=30G", "--time=5", "--wrap=sleep 1"]);
    c.wait_for("the job to complete", Duration::from_secs(120), || {
        c.job_state(id) == "COMPLETED"
    });
    let node = field(&c.job(id), "NodeList");
    let gres = c.node(&node)["gres"].as_str().unwrap_or("").to_string();
    assert!(gres.contains("3g.40gb"), "{node} has GRES {gres}");
    let events = std::fs::read_to_string(c.dir.join("dynmig/events.jsonl")).unwrap();
    assert!(events.contains("\"kind\":\"applied\""), "{events}");
}

#[test]
#[ignore = "needs root and Slurm: run slurm/test.sh"]
fn the_mpc_controller_reads_time_limits_and_deadlines_and_repartitions_for_a_waiting_job() {
    let c = Cluster::up_with(true, &[("DYNMIG_POLICY", "mpc")]);
    // Every GPU starts as one 7g.80gb: no node has a 3g.40gb, so keeping the layouts never
    // runs the job; the lookahead says the change pays and the controller makes it.
    let deadline = dynmig_host::clock::now_secs() + 3 * 3600;
    let id = c.sbatch(&[
        "--gres=gpu:1",
        "--mig-mem=30G",
        "--time=7",
        "--deadline=now+3hours",
        "--wrap=sleep 1",
    ]);
    // The JSON the controller's job feed reads gives the time limit and deadline on this
    // release (plain numbers on 22.05, {"set","infinite","number"} objects later).
    let jobs = dynmig_slurm::json::parse_jobs(&c.ok("squeue", &["--json", "--states=all"])).expect("squeue --json");
    let j = jobs.iter().find(|j| u64::from(j.id) == id).expect("the job is listed");
    assert_eq!(j.time_limit_s, Some(7 * 60));
    assert!(
        (j.deadline - deadline).abs() <= 120,
        "deadline {} not about {deadline} (now+3hours)",
        j.deadline
    );
    c.wait_for("the job to complete", Duration::from_secs(90), || {
        c.job_state(id) == "COMPLETED"
    });
    let node = field(&c.job(id), "NodeList");
    let gres = c.node(&node)["gres"].as_str().unwrap_or("").to_string();
    assert!(gres.contains("3g.40gb"), "{node} has GRES {gres}");
}
