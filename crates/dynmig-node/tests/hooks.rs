//! The Prolog, the Epilog and the out-of-memory restart against the simulated backend and the
//! fake Slurm.

use dynmig_core::config::{parse_config, Config};
use dynmig_core::protocol::decision::DecisionRecord;
use dynmig_core::types::EstimateSource;
use dynmig_node::hooks::{epilog, prolog, HookEnv};
use dynmig_node::oom::{restart, RestartRequest};
use dynmig_node::paths::NodePaths;
use dynmig_slurm::fake::{pending_job, FakeSlurm};
use dynmig_slurm::{JobState, SlurmApi};
use std::path::Path;
use std::time::Duration;

fn config(dir: &Path) -> Config {
    let text = dynmig_core::config::EXAMPLE_TOML.replace(
        "state_dir = \"/var/lib/dynmig\"",
        &format!("state_dir = \"{}\"", dir.join("state").display()),
    );
    let text = text.replace(
        "# gres_conf = \"/etc/slurm/gres.conf\"",
        &format!("gres_conf = \"{}\"", dir.join("gres-{node}.conf").display()),
    );
    parse_config(&text).unwrap()
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

#[test]
fn the_epilog_records_the_run_from_slurms_json_and_releases_the_instance() {
    let d = tempfile::tempdir().unwrap();
    let c = config(d.path());
    dynmig_node::setup::init_node(&c, "n1").unwrap();
    prolog(&c, &env(7, &[0])).unwrap();
    let mut job = pending_job(7, "gres:gpu:7g.80gb:1");
    job.state = JobState::Other("COMPLETED".into());
    job.name = "my job ExitCode=97:0".into();
    job.admin_comment = DecisionRecord::new("7g.80gb", 1, 30 << 30, EstimateSource::MigMemHint).encode();
    let slurm = FakeSlurm::new(vec![], vec![job]);
    epilog(&c, &env(7, &[]), &slurm, Path::new("/bin/false")).unwrap();
    let b = dynmig_node::hooks::node_backend(&c, "n1").unwrap();
    assert!(
        b.gpus().unwrap().iter().all(|g| g.instances.iter().all(|i| !i.busy)),
        "released"
    );
    let spooled = dynmig_history::spool::list(&NodePaths::of(&c, "n1").history_spool);
    assert_eq!(spooled.len(), 1);
    let r = &spooled[0].1;
    assert_eq!(
        (r.job_name.as_str(), r.uid, r.estimate_bytes),
        ("my job ExitCode=97:0", 1000, 30 << 30)
    );
    assert!(!r.oom, "exit 0 is never out of memory");
}

/// A job without a GPU (no `SLURM_JOB_GPUS`, no instance claimed by the Prolog) costs
/// slurmctld nothing at its end: the Epilog reads no job and records nothing.
#[test]
fn the_epilog_of_a_job_without_a_gpu_reads_nothing_from_slurm() {
    let d = tempfile::tempdir().unwrap();
    let c = config(d.path());
    dynmig_node::setup::init_node(&c, "n1").unwrap();
    let mut job = pending_job(5, "");
    job.state = JobState::Other("COMPLETED".into());
    let slurm = FakeSlurm::new(vec![], vec![job]);
    epilog(&c, &env(5, &[]), &slurm, Path::new("/bin/false")).unwrap();
    assert_eq!(slurm.state.lock().unwrap().jobs_read, 0, "no job read");
    assert!(dynmig_history::spool::list(&NodePaths::of(&c, "n1").history_spool).is_empty());
    // The same job with a GPU is read (and recorded only if it is a MIG job).
    epilog(&c, &env(5, &[0]), &slurm, Path::new("/bin/false")).unwrap();
    assert_eq!(slurm.state.lock().unwrap().jobs_read, 1);
}

/// slurmctld restarting when the job ends (the fault tests' burst on 24.11 lost a record so):
/// the Epilog asks again until Slurm answers, and the run is recorded.
#[test]
fn the_epilog_waits_for_a_restarting_slurmctld_and_records_the_run() {
    let d = tempfile::tempdir().unwrap();
    let c = config(d.path());
    dynmig_node::setup::init_node(&c, "n1").unwrap();
    prolog(&c, &env(8, &[0])).unwrap();
    let mut job = pending_job(8, "gres:gpu:7g.80gb:1");
    job.state = JobState::Other("COMPLETED".into());
    let slurm = std::sync::Arc::new(FakeSlurm::new(vec![], vec![job]));
    slurm.state.lock().unwrap().fail = Some("Unable to contact slurm controller".into());
    let back = {
        let slurm = slurm.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(2500));
            slurm.state.lock().unwrap().fail = None;
        })
    };
    let t = std::time::Instant::now();
    epilog(&c, &env(8, &[]), &slurm, Path::new("/bin/false")).unwrap();
    back.join().unwrap();
    assert!(t.elapsed() >= Duration::from_millis(2500), "{:?}", t.elapsed());
    let spooled = dynmig_history::spool::list(&NodePaths::of(&c, "n1").history_spool);
    assert_eq!(spooled.iter().map(|(_, r)| r.job_id).collect::<Vec<_>>(), vec![8]);
}

#[test]
fn an_out_of_memory_job_is_restarted_even_when_its_record_cannot_be_spooled() {
    let d = tempfile::tempdir().unwrap();
    let c = config(d.path());
    dynmig_node::setup::init_node(&c, "n1").unwrap();
    // The spool cannot be written: a file stands where its folder would be.
    let spool = NodePaths::of(&c, "n1").history_spool;
    std::fs::create_dir_all(spool.parent().unwrap()).unwrap();
    std::fs::write(&spool, "").unwrap();
    // A failed job whose stderr ends with the CUDA message, readable by its user (us).
    let err = d.path().join("job.err");
    std::fs::write(&err, "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n").unwrap();
    let mut job = pending_job(7, "gres:gpu:1g.10gb:1");
    job.state = JobState::Other("FAILED".into());
    job.exit_status = 1;
    // SAFETY: getuid/getgid have no preconditions.
    (job.uid, job.gid) = unsafe { (Some(libc::getuid()), Some(libc::getgid())) };
    job.std_err = err.display().to_string();
    let slurm = FakeSlurm::new(vec![], vec![job]);
    // The restart helper stands in as a script that records its arguments.
    let marker = d.path().join("restart-args");
    let helper = d.path().join("helper.sh");
    std::fs::write(
        &helper,
        format!("#!/bin/sh\necho \"$@\" > {}.tmp && mv {0}.tmp {0}\n", marker.display()),
    )
    .unwrap();
    std::fs::set_permissions(&helper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    // slurmd gives the Epilog the job's GPU indices (no Prolog ran here).
    epilog(&c, &env(7, &[0]), &slurm, &helper).unwrap();
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
    let slurm = FakeSlurm::new(vec![], vec![]);
    epilog(&c, &env(7, &[]), &slurm, Path::new("/bin/false")).unwrap();
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
    let slurm = FakeSlurm::new(vec![], vec![]);
    epilog(&c, &env(7, &[]), &slurm, Path::new("/bin/false")).unwrap();
}
