//! What users do to their jobs on a real cluster (issue 25, item 1): every request form and
//! everyday action either runs to COMPLETED or is refused with a message, on the release
//! that runs (22.05, 24.11, 26.05: slurm/releases.sh). Each job is checked with the
//! harness's invariant ([`Cluster::wait_ends`]): a job still pending after its bound fails
//! the test with its Reason.

use crate::harness::*;
use std::os::unix::fs::PermissionsExt;
use std::process::Output;
use std::time::Duration;

/// How long a job may take to end here: a repartition takes a few seconds, a requeued batch
/// job waits out Slurm's requeue delay (its begin time is set about 120 s ahead).
const BOUND: Duration = Duration::from_secs(200);

/// One line of the per-release table in the closing figures: `user action | what | outcome`.
fn report(what: &str, outcome: &str) {
    eprintln!("user action | {what} | {}", outcome.trim().replace('\n', " / "));
}

/// What a command said, for [`report`]: `ran` or `refused: <its message>`.
fn said(out: &Output) -> String {
    if out.status.success() {
        "accepted".into()
    } else {
        format!("refused: {}", text(out))
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
#[ignore = "needs root and Slurm: run slurm/test.sh"]
fn every_request_form_and_everyday_action_of_a_user_ends_as_it_should() {
    let c = Cluster::up(true);
    let uid = c.user("dynmig-user");
    let retype = c.updates_replace_gres();
    let user = |args: &[&str]| c.as_user(uid, args[0], &args[1..]);
    let submit = |args: &[&str]| -> u64 {
        let mut a = vec!["sbatch", "--parsable", "--output=/dev/null", "--time=5"];
        a.extend_from_slice(args);
        let out = user(&a);
        assert!(out.status.success(), "sbatch {args:?}: {}", text(&out));
        // An array job prints `id`, a heterogeneous one `id` too (its leader).
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .split(';')
            .next()
            .unwrap()
            .parse()
            .expect("job id")
    };
    let update_ok = |id: u64, what: &str, expect: bool| {
        let out = user(&["scontrol", "update", &format!("jobid={id}"), what]);
        assert_eq!(
            out.status.success(),
            expect,
            "update {what} of job {id}: {}",
            text(&out)
        );
        report(&format!("scontrol update {what}"), &said(&out));
        out
    };
    let mut expect: Vec<(u64, &str, &str)> = Vec::new();

    // The request forms, each sized by its --mig-mem hint.
    for (what, form) in [
        ("--gres", "--gres=gpu:1"),
        ("--gpus", "--gpus=1"),
        ("--gpus-per-node", "--gpus-per-node=1"),
        ("--gpus-per-task", "--gpus-per-task=1"),
    ] {
        let id = submit(&["-n1", form, "--mig-mem=5G", "--wrap=true"]);
        expect.push((id, what, "COMPLETED"));
    }
    // `--tres-per-task` (sbatch has it from 23.02): the same field as --gpus-per-task.
    if c.slurm_version() >= (23, 2) {
        let id = submit(&["-n1", "--tres-per-task=gres/gpu:1", "--mig-mem=5G", "--wrap=true"]);
        expect.push((id, "--tres-per-task", "COMPLETED"));
    } else {
        report("--tres-per-task", "not an sbatch option of this release");
    }
    // A job array of three tasks (checked below, task by task).
    let array = submit(&["--array=0-2", "--gres=gpu:1", "--mig-mem=5G", "--wrap=true"]);
    // A heterogeneous job with its GPU in the first component runs; one with the GPU in a
    // later component is refused at submit, with what to do (dynmig_core::submit::
    // check_het_component: Slurm would place the component without GPU on the only node
    // holding the profile and the job would wait for good).
    let script = |name: &str, body: &str| {
        let p = std::path::PathBuf::from(format!("/tmp/dynmig-{name}-{}.sh", std::process::id()));
        std::fs::write(&p, format!("#!/bin/sh\n{body}true\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    };
    let gpu_first = script(
        "het-first",
        "#SBATCH -n1 --gres=gpu:1 --mig-mem=5G\n#SBATCH hetjob\n#SBATCH -n1\n",
    );
    let het = submit(&[gpu_first.to_str().unwrap()]);
    expect.push((het, "heterogeneous job, GPU first", "COMPLETED"));
    let gpu_later = script(
        "het-later",
        "#SBATCH -n1\n#SBATCH hetjob\n#SBATCH -n1 --gres=gpu:1 --mig-mem=5G\n",
    );
    let out = user(&["sbatch", "--output=/dev/null", "--time=5", gpu_later.to_str().unwrap()]);
    assert!(!out.status.success(), "a GPU in a later component was accepted");
    report("heterogeneous job, GPU in a later component", &said(&out));
    assert!(
        text(&out).contains("ask for GPUs in the first component"),
        "{}",
        text(&out)
    );
    // First these end (each phase's jobs wait for a few instances of one node: fewer at once).
    for (id, what, state) in expect.drain(..) {
        eprintln!("waiting for {what} (job {id}) to end {state}");
        c.wait_ends(id, state, BOUND);
        report(what, &format!("job {id} ended {state}"));
    }
    c.wait_for("the array's tasks to end", BOUND, || {
        let out = c.cmd("squeue", &["-h", "-j", &array.to_string()]);
        String::from_utf8_lossy(&out.stdout).trim().is_empty()
    });
    // Held, its time limit changed, released.
    let held = submit(&["--hold", "--gres=gpu:1", "--mig-mem=5G", "--wrap=true"]);
    update_ok(held, "timelimit=3", true);
    assert_eq!(field(&c.job(held), "TimeLimit"), "00:03:00");
    // `dynmig why` tells the job's user why it waits; another user is refused.
    let dynmig = bin_dir().join("dynmig").display().to_string();
    let conf = c.dir.join("dynmig.toml").display().to_string();
    let out = user(&[&dynmig, "--config", &conf, "why", &held.to_string()]);
    assert!(out.status.success(), "dynmig why as the job's user: {}", text(&out));
    assert!(text(&out).contains("held"), "{}", text(&out));
    report(
        "dynmig why, held job, its user",
        text(&out).lines().last().unwrap_or(""),
    );
    let other = c.user("dynmig-other");
    let out = c.as_user(other, &dynmig, &["--config", &conf, "why", &held.to_string()]);
    assert!(!out.status.success(), "another user's dynmig why: {}", text(&out));
    assert!(text(&out).contains("only its user and root"), "{}", text(&out));
    report("dynmig why, another user's job", &said(&out));
    assert!(user(&["scontrol", "release", &held.to_string()]).status.success());
    expect.push((held, "hold, time limit, release", "COMPLETED"));
    // GRES updates of held jobs: an untyped single GPU is refused on every release (the
    // update cannot see the job's hints); a count change and a move to whole GPUs are
    // refused before 23.02.6 (Slurm would keep the old request beside the new one) and run
    // after.
    let upd = submit(&["--hold", "--gres=gpu:1", "--mig-mem=5G", "--wrap=true"]);
    let out = update_ok(upd, "gres=gpu:1", false);
    if c.slurm_version() >= (23, 2) {
        assert!(
            text(&out).contains("cannot size an untyped GPU request"),
            "{}",
            text(&out)
        );
    }
    update_ok(upd, "gres=gpu:1g.10gb:2", retype);
    let want = if retype {
        "gres:gpu:1g.10gb:2"
    } else {
        "gres:gpu:1g.10gb:1"
    };
    assert_eq!(tres(&c.job(upd)), want);
    assert!(user(&["scontrol", "release", &upd.to_string()]).status.success());
    expect.push((upd, "GRES updates", "COMPLETED"));
    let multi = submit(&["--hold", "--gres=gpu:1", "--mig-mem=5G", "--wrap=true"]);
    update_ok(multi, "gres=gpu:2", retype);
    let want = if retype {
        "gres:gpu:7g.80gb:2"
    } else {
        "gres:gpu:1g.10gb:1"
    };
    assert_eq!(tres(&c.job(multi)), want);
    assert!(user(&["scontrol", "release", &multi.to_string()]).status.success());
    expect.push((multi, "multi-GPU update", "COMPLETED"));
    // Cancelled while pending: CANCELLED, nothing else.
    let cancelled = submit(&["--hold", "--gres=gpu:1", "--mig-mem=5G", "--wrap=true"]);
    assert!(user(&["scancel", &cancelled.to_string()]).status.success());
    expect.push((cancelled, "scancel", "CANCELLED"));
    // Interactive: srun and salloc wait for their allocation and run.
    for (what, args) in [
        ("srun", &["srun", "-t", "2", "--gres=gpu:1", "--mig-mem=5G", "true"][..]),
        (
            "salloc",
            &["salloc", "-t", "2", "--gres=gpu:1", "--mig-mem=5G", "srun", "true"][..],
        ),
    ] {
        let mut a = vec!["timeout", "150"];
        a.extend_from_slice(args);
        let out = user(&a);
        assert!(out.status.success(), "{what}: {}", text(&out));
        report(what, "ran, exit 0");
    }

    for (id, what, state) in &expect {
        eprintln!("waiting for {what} (job {id}) to end {state}");
        c.wait_ends(*id, state, BOUND);
        report(what, &format!("job {id} ended {state}"));
    }
    // Requeued while it runs: it runs again and completes.
    let requeued = submit(&["--gres=gpu:1", "--mig-mem=5G", "--wrap=sleep 10"]);
    c.wait_for("the job to run before its requeue", BOUND, || {
        c.job_state(requeued) == "RUNNING"
    });
    assert!(user(&["scontrol", "requeue", &requeued.to_string()]).status.success());
    c.wait_ends(requeued, "COMPLETED", BOUND);
    report("requeue", &format!("job {requeued} ended COMPLETED"));

    // The array (ended in the first phase): every task COMPLETED.
    let shown = c.ok("scontrol", &["show", "job", &array.to_string()]);
    assert_eq!(shown.matches("JobState=COMPLETED").count(), 3, "{shown}");
    report("job array of 3", "3 tasks ended COMPLETED");
    for p in [gpu_first, gpu_later] {
        let _ = std::fs::remove_file(p);
    }
}
