//! The Prolog, the Epilog and the out-of-memory restart against the simulated backend and the
//! fake Slurm.

use dynmig_core::config::{parse_config, Config};
use dynmig_node::hooks::{epilog, prolog, EndedJob, HookEnv};
use dynmig_node::oom::{restart, RestartRequest};
use dynmig_node::paths::NodePaths;
use dynmig_slurm::fake::{pending_job, FakeSlurm};
use dynmig_slurm::{JobState, SlurmApi};
use std::path::Path;
use std::time::Duration;

fn config(dir: &Path) -> Config {
    parse_config(&config_text(dir)).unwrap()
}

/// `config`'s text with every GPU's layout at install time `layout`.
fn toml_with_layout(dir: &Path, layout: &str) -> String {
    config_text(dir).replace(
        "initial_layout = \"1x7g.80gb\"",
        &format!("initial_layout = \"{layout}\""),
    )
}

fn config_text(dir: &Path) -> String {
    let text = dynmig_core::config::EXAMPLE_TOML.replace(
        "state_dir = \"/var/lib/dynmig\"",
        &format!("state_dir = \"{}\"", dir.join("state").display()),
    );
    let text = text.replace(
        "# gres_conf = \"/etc/slurm/gres.conf\"",
        &format!("gres_conf = \"{}\"", dir.join("gres-{node}.conf").display()),
    );
    assert!(text.contains("initial_layout = \"1x7g.80gb\""));
    text
}

fn env(job: u32, gpus: &[usize]) -> HookEnv {
    HookEnv {
        node: "n1".into(),
        job,
        uid: None,
        gpus: gpus.to_vec(),
    }
}

#[test]
fn the_prolog_claims_the_jobs_instance_and_a_missing_device_fails_it() {
    let d = tempfile::tempdir().unwrap();
    let c = config(d.path());
    dynmig_node::setup::init_node(&c, "n1").unwrap();
    prolog(&c, &env(7, &[0])).unwrap();
    let b = dynmig_node::hooks::node_backend(&c, "n1").unwrap();
    assert!(
        b.gpus().unwrap().iter().any(|g| g.instances.iter().any(|i| i.busy)),
        "claimed"
    );
    // A missing device file: the Prolog fails, so Slurm drains the node and requeues the job.
    let text = std::fs::read_to_string(NodePaths::of(&c, "n1").gres_conf).unwrap();
    let files = dynmig_gpu::gres_conf::line_files(&text).unwrap();
    std::fs::remove_file(&files[1][0]).unwrap();
    let e = prolog(&c, &env(8, &[1])).unwrap_err().to_string();
    assert!(e.contains("does not exist"), "{e}");
}

/// The Epilog's environment for a job of ours (`SLURM_JOB_UID` and `_GID` our own ids) that
/// ended with `exit` (`SLURM_JOB_EXIT_CODE2`) and wrote its stderr to `std_err`.
fn ended(exit: i32, std_err: &str) -> anyhow::Result<EndedJob> {
    // SAFETY: getuid/getgid have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let vars = std::collections::HashMap::from([
        ("SLURM_JOB_UID", uid.to_string()),
        ("SLURM_JOB_GID", gid.to_string()),
        ("SLURM_JOB_USER", "alice".to_string()),
        ("SLURM_JOB_EXIT_CODE2", format!("{exit}:0")),
        ("SLURM_JOB_RESTART_COUNT", "1".to_string()),
        ("SLURM_JOB_STDERR", std_err.to_string()),
        ("SLURM_JOB_WORK_DIR", "/".to_string()),
    ]);
    EndedJob::read(|k| vars.get(k).cloned())
}

/// The profile of the instance job `job`'s Prolog claimed on node n1.
fn claimed_profile(c: &Config) -> String {
    let b = dynmig_node::hooks::node_backend(c, "n1").unwrap();
    let gpus = b.gpus().unwrap();
    let i = gpus
        .iter()
        .flat_map(|g| &g.instances)
        .find(|i| i.busy)
        .expect("a claimed instance");
    i.placed.profile.name.to_string()
}

#[test]
fn the_epilog_records_the_run_from_its_environment_and_releases_the_instance() {
    let d = tempfile::tempdir().unwrap();
    let c = config(d.path());
    dynmig_node::setup::init_node(&c, "n1").unwrap();
    prolog(&c, &env(7, &[0])).unwrap();
    let profile = claimed_profile(&c);
    epilog(&c, &env(7, &[]), ended(0, ""), Path::new("/bin/false")).unwrap();
    let b = dynmig_node::hooks::node_backend(&c, "n1").unwrap();
    assert!(
        b.gpus().unwrap().iter().all(|g| g.instances.iter().all(|i| !i.busy)),
        "released"
    );
    let spooled = dynmig_history::spool::list(&NodePaths::of(&c, "n1").history_spool);
    assert_eq!(spooled.len(), 1);
    let r = &spooled[0].1;
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    assert_eq!(
        (
            r.job_id,
            r.restart,
            r.uid,
            r.user.as_str(),
            r.profile.as_str(),
            r.exit_status
        ),
        (7, 1, uid, "alice", profile.as_str(), 0)
    );
    // The name and dynmig's estimate are not in the Epilog's environment: the history store
    // adds them from Slurm (docs/history.md, "Job names").
    assert_eq!((r.job_name.as_str(), r.estimate_bytes, r.source.as_str()), ("", 0, ""));
    assert!(!r.oom, "exit 0 is never out of memory");
}

/// A job without a GPU (no `SLURM_JOB_GPUS`, no instance claimed by the Prolog) is recorded
/// nowhere.
#[test]
fn the_epilog_of_a_job_without_a_gpu_records_nothing() {
    let d = tempfile::tempdir().unwrap();
    let c = config(d.path());
    dynmig_node::setup::init_node(&c, "n1").unwrap();
    epilog(&c, &env(5, &[]), ended(0, ""), Path::new("/bin/false")).unwrap();
    assert!(dynmig_history::spool::list(&NodePaths::of(&c, "n1").history_spool).is_empty());
}

/// An Epilog environment without the job's uid or gid: the instance is released, no record
/// is written (a missing id is never taken for root).
#[test]
fn without_the_jobs_uid_the_epilog_releases_the_instance_and_records_nothing() {
    let d = tempfile::tempdir().unwrap();
    let c = config(d.path());
    dynmig_node::setup::init_node(&c, "n1").unwrap();
    prolog(&c, &env(8, &[0])).unwrap();
    let e = EndedJob::read(|k| (k == "SLURM_JOB_GID").then(|| "1000".to_string())).unwrap_err();
    assert!(e.to_string().contains("SLURM_JOB_UID is not set"), "{e}");
    epilog(&c, &env(8, &[]), Err(e), Path::new("/bin/false")).unwrap();
    let b = dynmig_node::hooks::node_backend(&c, "n1").unwrap();
    assert!(b.gpus().unwrap().iter().all(|g| g.instances.iter().all(|i| !i.busy)));
    assert!(dynmig_history::spool::list(&NodePaths::of(&c, "n1").history_spool).is_empty());
}

#[test]
fn the_epilog_environment_is_read_strictly() {
    let read = |pairs: &[(&str, &str)]| {
        let m: std::collections::HashMap<String, String> =
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        EndedJob::read(|k| m.get(k).cloned())
    };
    let base = [("SLURM_JOB_UID", "1000"), ("SLURM_JOB_GID", "100")];
    let j = read(&base).unwrap();
    assert_eq!((j.uid, j.gid, j.exit_status, j.restarts), (1000, 100, 0, 0));
    let killed = read(&[base[0], base[1], ("SLURM_JOB_EXIT_CODE2", "0:9")]).unwrap();
    assert_eq!(killed.exit_status, 137, "killed by signal 9");
    let failed = read(&[base[0], base[1], ("SLURM_JOB_EXIT_CODE2", "3:0")]).unwrap();
    assert_eq!(failed.exit_status, 3);
    for bad in [
        ("SLURM_JOB_EXIT_CODE2", "3"),
        ("SLURM_JOB_RESTART_COUNT", "-1"),
        ("SLURM_JOB_UID", "root"),
    ] {
        let mut v = base.to_vec();
        v.retain(|(k, _)| *k != bad.0);
        v.push(bad);
        let e = read(&v).unwrap_err().to_string();
        assert!(e.contains(bad.0), "{bad:?}: {e}");
    }
}

#[test]
fn an_out_of_memory_job_is_restarted_even_when_its_record_cannot_be_spooled() {
    let d = tempfile::tempdir().unwrap();
    // Every GPU as 7 x 1g.10gb: the job's instance has a larger profile to move to.
    let c = parse_config(&toml_with_layout(d.path(), "7x1g.10gb")).unwrap();
    dynmig_node::setup::init_node(&c, "n1").unwrap();
    prolog(&c, &env(7, &[0])).unwrap();
    assert_eq!(claimed_profile(&c), "1g.10gb");
    // The spool cannot be written: a file stands where its folder would be.
    let spool = NodePaths::of(&c, "n1").history_spool;
    std::fs::create_dir_all(spool.parent().unwrap()).unwrap();
    std::fs::write(&spool, "").unwrap();
    // A failed job whose stderr ends with the CUDA message, readable by its user (us).
    let err = d.path().join("job.err");
    std::fs::write(&err, "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n").unwrap();
    // The restart helper stands in as a script that records its arguments.
    let marker = d.path().join("restart-args");
    let helper = d.path().join("helper.sh");
    std::fs::write(
        &helper,
        format!("#!/bin/sh\necho \"$@\" > {}.tmp && mv {0}.tmp {0}\n", marker.display()),
    )
    .unwrap();
    std::fs::set_permissions(&helper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    epilog(&c, &env(7, &[0]), ended(1, &err.display().to_string()), &helper).unwrap();
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while !marker.exists() && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    let args = std::fs::read_to_string(&marker).expect("the restart helper was started");
    assert!(args.starts_with("oom-restart --node n1 --job 7"), "{args}");
    assert!(args.contains("--to 2g.20gb"), "{args}");
}

#[test]
fn a_job_not_requeued_is_told_in_its_stderr_and_its_finished_record_is_left_alone() {
    let d = tempfile::tempdir().unwrap();
    let err = d.path().join("job.err");
    std::fs::write(&err, "CUDA out of memory\n").unwrap();
    let mut job = pending_job(9, "gres:gpu:7g.80gb:1");
    job.state = JobState::Other("FAILED".into());
    // SAFETY: getuid/getgid have no preconditions.
    (job.uid, job.gid) = unsafe { (Some(libc::getuid()), Some(libc::getgid())) };
    job.std_err = err.display().to_string();
    let slurm = FakeSlurm::new(vec![], vec![job]);
    let req = RestartRequest {
        job: 9,
        to: None,
        message: "dynmig: job 9 ran out of GPU memory on 7g.80gb, the largest profile; not requeued".into(),
        requeue_for: Duration::from_secs(1),
    };
    restart(&slurm, &req, "n1").unwrap();
    assert!(std::fs::read_to_string(&err).unwrap().ends_with("not requeued\n"));
    // No `scontrol update` of the finished job: Slurm refuses it ("Job has already finished").
    assert_eq!(slurm.calls(), Vec::<String>::new());
}

#[test]
fn the_oom_restart_requeues_on_the_next_profile_keeping_count_and_form() {
    let slurm = FakeSlurm::new(vec![], vec![pending_job(9, "gres/gpu:1g.10gb:2")]);
    let req = RestartRequest {
        job: 9,
        to: Some("2g.20gb".into()),
        message: "dynmig: job 9 ran out of GPU memory".into(),
        requeue_for: Duration::from_secs(1),
    };
    restart(&slurm, &req, "n1").unwrap();
    let j = slurm.job(9).unwrap().unwrap();
    assert_eq!(j.tres_per_node, "gres/gpu:2g.20gb:2");
    assert_eq!(j.restarts, 1);
    let calls = slurm.calls();
    assert!(
        calls[0].starts_with("requeuehold 9") && calls.last().unwrap().starts_with("release 9"),
        "{calls:?}"
    );
}

#[test]
fn prolog_and_epilog_keep_dcgm_exporters_job_mapping_per_instance() {
    let d = tempfile::tempdir().unwrap();
    let map = d.path().join("dcgm-{node}");
    let mut c = config(d.path());
    c.paths.dcgm_job_map_dir = Some(map.clone());
    dynmig_node::setup::init_node(&c, "n1").unwrap();
    prolog(&c, &env(7, &[1])).unwrap();
    let dir = d.path().join("dcgm-n1");
    let b = dynmig_node::hooks::node_backend(&c, "n1").unwrap();
    let gpu1 = b.gpu(1).unwrap();
    let inst = gpu1.instances.iter().find(|i| i.busy).expect("the job's instance");
    let file = dir.join(format!("1.{}", inst.gi_id));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "7\n");
    epilog(&c, &env(7, &[]), ended(0, ""), Path::new("/bin/false")).unwrap();
    assert!(!file.exists(), "the Epilog took the job's mapping away");
}

#[test]
fn on_nvml_the_prolog_finds_the_jobs_instance_and_a_missing_device_fails_it() {
    let d = tempfile::tempdir().unwrap();
    let nvml = d.path().join("nvml");
    let mut spec = nvml_standin::NodeSpec::new("A100-80GB", 2);
    spec.mig_enabled = true;
    spec.device_root = Some(nvml.join("n1/root"));
    nvml_standin::StandIn::install(&nvml.join("n1"), &spec).unwrap();
    let text = dynmig_core::config::EXAMPLE_TOML
        .replace(
            "state_dir = \"/var/lib/dynmig\"",
            &format!("state_dir = \"{}\"", d.path().join("state").display()),
        )
        .replace(
            "# gres_conf = \"/etc/slurm/gres.conf\"",
            &format!("gres_conf = \"{}\"", d.path().join("gres-{node}.conf").display()),
        )
        .replace(
            "backend = \"simulated\"",
            &format!(
                "backend = \"nvml\"\nnvml_library = \"{0}/{{node}}/libnvidia-ml.so.1\"\nnvml_device_root = \"{0}/{{node}}/root\"",
                nvml.display()
            ),
        );
    let c = parse_config(&text).unwrap();
    dynmig_node::setup::init_node(&c, "n1").unwrap();
    let text = std::fs::read_to_string(NodePaths::of(&c, "n1").gres_conf).unwrap();
    assert!(text.contains("MultipleFiles="), "{text}");
    prolog(&c, &env(7, &[0])).unwrap();
    let events = std::fs::read_to_string(d.path().join("state/events.jsonl")).unwrap();
    assert!(
        events.contains("\"job_start\"") && events.contains("7g.80gb@0@gpu0"),
        "{events}"
    );
    // The GPU instance's capability file vanishes: the Prolog fails, Slurm drains the node.
    let files = dynmig_gpu::gres_conf::line_files(&text).unwrap();
    std::fs::remove_file(&files[1][1]).unwrap();
    let e = prolog(&c, &env(8, &[1])).unwrap_err().to_string();
    assert!(e.contains("does not exist"), "{e}");
    epilog(&c, &env(7, &[]), ended(0, ""), Path::new("/bin/false")).unwrap();
}
