//! The simulated GPU backend against real files in a temp dir: placement rules, busy
//! instances, fault injection, crash simulation, shared state, device files, gres.conf.

use dynmig_core::geometry::{place, GpuModel, NodeLayout, Placed, ProfileCounts, A100_40GB, A100_80GB, A30_24GB};
use dynmig_gpu::gres_conf::{self, GresEntry};
use dynmig_gpu::{
    BackendError, Fault, FaultKind, FaultOp, FaultPlan, GpuBackend, InstanceState, SimulatedBackend, FAULTS_ENV,
};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Creates `profile`@`start` (a profile name of the backend's model) on `gpu`.
fn make(b: &mut SimulatedBackend, gpu: u32, profile: &str, start: u8) -> Result<InstanceState, BackendError> {
    let profile = b.model().profile(profile).expect("a profile of the model");
    b.create_instance(gpu, Placed { profile, start })
}

struct Node {
    dir: tempfile::TempDir,
}

impl Node {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }
    fn state(&self) -> PathBuf {
        self.dir.path().join("sim.json")
    }
    fn devices(&self) -> PathBuf {
        self.dir.path().join("dev")
    }
    fn open(&self, model: &'static GpuModel, gpus: u32) -> SimulatedBackend {
        SimulatedBackend::open(&self.state(), &self.devices(), model, gpus).unwrap()
    }
}

/// Every profile multiset of `model` (no `+me`) that `place` can put on one GPU and to which
/// no further profile can be added.
fn maximal_layouts(model: &GpuModel) -> Vec<ProfileCounts> {
    let profiles = model.schedulable_profiles();
    let mut all = Vec::new();
    let mut counts = vec![0u32; profiles.len()];
    loop {
        let mut c = ProfileCounts::empty();
        for (p, n) in profiles.iter().zip(&counts) {
            c.add(p, *n);
        }
        if !c.is_empty() && place(model, &c).is_some() {
            all.push(c);
        }
        // Next counts vector, each digit in 0..=max_instances.
        let mut i = 0;
        while i < profiles.len() && counts[i] == u32::from(profiles[i].max_instances) {
            counts[i] = 0;
            i += 1;
        }
        if i == profiles.len() {
            break;
        }
        counts[i] += 1;
    }
    all.retain(|c| {
        profiles.iter().all(|p| {
            let mut more = c.clone();
            more.add(p, 1);
            place(model, &more).is_none()
        })
    });
    all
}

#[test]
fn every_maximal_a100_80gb_layout_round_trips() {
    let model = &A100_80GB;
    let layouts = maximal_layouts(model);
    let texts: Vec<String> = layouts.iter().map(|l| l.to_string()).collect();
    for known in [
        "1x7g.80gb",
        "1x4g.40gb+1x3g.40gb",
        "2x3g.40gb",
        "3x2g.20gb+1x1g.10gb",
        "7x1g.10gb",
        "4x1g.20gb",
    ] {
        assert!(texts.iter().any(|t| t == known), "{known} missing from {texts:?}");
    }
    // 28 counted independently by brute force over all placements (12 of them without
    // 1g.20gb, the same 12 found over the classic profiles 7g/4g/3g/2g/1g alone).
    assert_eq!(layouts.len(), 28, "{texts:?}");

    let node = Node::new();
    let mut b = node.open(model, 1);
    for layout in &layouts {
        let placed = place(model, layout).unwrap();
        let mut made = Vec::new();
        for p in &placed {
            let inst = b.create_instance(0, *p).unwrap();
            assert_eq!(inst.placed, *p);
            assert!(inst.uuid.starts_with("MIG-") && inst.uuid.len() == 40, "{}", inst.uuid);
            assert!(!inst.busy);
            assert!(inst.device_files[0].exists());
            made.push(inst);
        }
        let gpu = b.gpu(0).unwrap();
        assert_eq!(gpu.layout(), *layout);
        let mut ids: Vec<u32> = gpu.instances.iter().map(|i| i.gi_id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), placed.len(), "GI ids are unique");
        // The layout is full: every further instance is refused as the hardware refuses it.
        for p in model.profiles {
            for &start in p.placement_starts {
                let err = b.create_instance(0, Placed { profile: p, start }).unwrap_err();
                assert!(
                    matches!(err, BackendError::InsufficientResources { .. }),
                    "{p:?}@{start} on {layout}: {err}"
                );
            }
        }
        for inst in &made {
            b.destroy_instance(0, inst.gi_id).unwrap();
            assert!(!inst.device_files[0].exists());
        }
        assert!(b.gpu(0).unwrap().instances.is_empty(), "{layout} left instances");
    }
}

#[test]
fn overlaps_and_bad_arguments_are_refused_and_change_nothing() {
    let node = Node::new();
    let mut b = node.open(&A100_80GB, 2);
    make(&mut b, 0, "3g.40gb", 0).unwrap();
    let before = b.gpus().unwrap();
    let err = |r: Result<_, BackendError>| r.map(|_: InstanceState| ()).unwrap_err();
    assert!(matches!(
        err(make(&mut b, 0, "2g.20gb", 2)),
        BackendError::InsufficientResources { .. }
    ));
    assert!(matches!(
        err(make(&mut b, 0, "4g.40gb", 0)),
        BackendError::InsufficientResources { .. }
    ));
    assert!(matches!(
        err(make(&mut b, 0, "3g.40gb", 0)),
        BackendError::InsufficientResources { .. }
    ));
    assert!(matches!(
        err(make(&mut b, 0, "3g.40gb", 2)),
        BackendError::InvalidArgument { .. }
    ));
    assert!(matches!(
        err(make(&mut b, 0, "1g.10gb", 7)),
        BackendError::InvalidArgument { .. }
    ));
    // A profile of another model's table is refused, naming what is allowed.
    let foreign = Placed {
        profile: A30_24GB.profile("2g.12gb").unwrap(),
        start: 0,
    };
    match err(b.create_instance(0, foreign)) {
        BackendError::InvalidArgument { what } => {
            assert!(
                what.contains("not a MIG profile of A100-80GB; allowed: 7g.80gb"),
                "{what}"
            )
        }
        other => panic!("{other}"),
    }
    assert!(matches!(
        err(make(&mut b, 2, "1g.10gb", 0)),
        BackendError::InvalidArgument { .. }
    ));
    assert_eq!(b.gpus().unwrap(), before);
    // A second 3g fits at slice 4; then the 8th memory slice is left and nothing fits there.
    make(&mut b, 0, "3g.40gb", 4).unwrap();
    assert!(matches!(
        err(make(&mut b, 0, "1g.10gb", 6)),
        BackendError::InsufficientResources { .. }
    ));
    // At most one +me instance per GPU.
    make(&mut b, 1, "1g.10gb+me", 0).unwrap();
    assert!(matches!(
        err(make(&mut b, 1, "1g.10gb+me", 1)),
        BackendError::InsufficientResources { .. }
    ));
}

#[test]
fn mig_mode_changes_need_an_empty_gpu() {
    let node = Node::new();
    let mut b = node.open(&A100_40GB, 1);
    let inst = make(&mut b, 0, "7g.40gb", 0).unwrap();
    assert!(matches!(b.set_mig_mode(0, false), Err(BackendError::InUse { .. })));
    b.set_mig_mode(0, true).unwrap(); // already on: nothing to do
    b.destroy_instance(0, inst.gi_id).unwrap();
    b.set_mig_mode(0, false).unwrap();
    let gpu = b.gpu(0).unwrap();
    assert!(!gpu.mig_enabled);
    assert!(matches!(make(&mut b, 0, "1g.5gb", 0), Err(BackendError::NotSupported)));
    assert!(matches!(b.destroy_instance(0, 1), Err(BackendError::NotSupported)));
    b.set_mig_mode(0, true).unwrap();
    assert!(b.gpu(0).unwrap().mig_enabled);
    assert!(matches!(b.destroy_instance(0, 1), Err(BackendError::NotFound { .. })));
}

#[test]
fn busy_instances_cannot_be_destroyed() {
    let node = Node::new();
    let mut b = node.open(&A100_80GB, 2);
    let a = make(&mut b, 1, "2g.20gb", 0).unwrap();
    let c = make(&mut b, 1, "2g.20gb", 2).unwrap();
    // The prolog finds the instance from the device file Slurm gave the job.
    let (gpu, found) = b.find_instance(&c.device_files).unwrap().unwrap();
    assert_eq!((gpu, found.gi_id), (1, c.gi_id));
    assert!(b.find_instance(&[node.devices().join("gpu0/gi9")]).unwrap().is_none());
    b.claim(gpu, found.gi_id, 4242).unwrap();
    b.claim(gpu, found.gi_id, 4242).unwrap();
    assert_eq!(b.jobs_on(1, c.gi_id).unwrap(), vec![4242]);
    assert!(b.gpu(1).unwrap().instance(c.gi_id).unwrap().busy);
    assert!(!b.gpu(1).unwrap().instance(a.gi_id).unwrap().busy);
    match b.destroy_instance(1, c.gi_id) {
        Err(BackendError::InUse { what }) => assert!(what.contains("4242"), "{what}"),
        other => panic!("{other:?}"),
    }
    assert!(c.device_files[0].exists(), "a refused destroy keeps the device file");
    // Idle slices of the same GPU can still change.
    b.destroy_instance(1, a.gi_id).unwrap();
    // The epilog releases by job id.
    b.release_job(4242).unwrap();
    assert!(b.jobs_on(1, c.gi_id).unwrap().is_empty());
    b.destroy_instance(1, c.gi_id).unwrap();
    assert!(matches!(b.claim(1, c.gi_id, 1), Err(BackendError::NotFound { .. })));
}

#[test]
fn faults_fire_once_across_processes_sharing_the_file() {
    let node = Node::new();
    let mut a = node.open(&A100_80GB, 1);
    let mut b = node.open(&A100_80GB, 1);
    std::fs::write(
        a.faults_path(),
        r#"[{"op": "create", "after": 2, "error": "insufficient_resources"},
                                       {"op": "destroy", "after": 1, "error": "unknown"}]"#,
    )
    .unwrap();
    let first = make(&mut a, 0, "1g.10gb", 0).unwrap();
    // The second create call, made through another handle, hits the fault.
    assert!(
        matches!(make(&mut b, 0, "1g.10gb", 1), Err(BackendError::InsufficientResources { what }) if what.contains("injected"))
    );
    assert_eq!(a.gpu(0).unwrap().instances.len(), 1, "a failed call changes nothing");
    make(&mut b, 0, "1g.10gb", 1).unwrap();
    assert!(matches!(a.destroy_instance(0, first.gi_id), Err(BackendError::Unknown)));
    a.destroy_instance(0, first.gi_id).unwrap();
    let left = FaultPlan::parse(&std::fs::read_to_string(a.faults_path()).unwrap()).unwrap();
    assert!(left.is_empty(), "{left:?}");
    // The API writes the same file.
    a.set_faults(&FaultPlan {
        faults: vec![Fault {
            op: FaultOp::SetMigMode,
            after: 1,
            error: FaultKind::NoPermission,
        }],
        ..FaultPlan::default()
    })
    .unwrap();
    assert!(matches!(b.set_mig_mode(0, true), Err(BackendError::NoPermission)));
    b.set_mig_mode(0, true).unwrap();
    // A broken faults file is reported, not ignored.
    std::fs::write(a.faults_path(), "[{\"op\": \"create\"}]").unwrap();
    assert!(matches!(a.gpus(), Err(BackendError::InvalidArgument { what }) if what.contains("faults file")));
}

#[test]
fn state_survives_reopen_and_ids_are_reused() {
    let node = Node::new();
    let before = {
        let mut b = node.open(&A100_80GB, 2);
        make(&mut b, 0, "3g.40gb", 4).unwrap();
        let x = make(&mut b, 0, "2g.20gb", 0).unwrap();
        make(&mut b, 1, "7g.80gb", 0).unwrap();
        b.claim(1, 1, 7).unwrap();
        b.destroy_instance(0, x.gi_id).unwrap();
        b.gpus().unwrap()
    };
    let mut b = node.open(&A100_80GB, 2);
    assert_eq!(b.gpus().unwrap(), before);
    assert!(b.gpu(1).unwrap().instances[0].busy);
    let again = SimulatedBackend::open_existing(&node.state(), &node.devices()).unwrap();
    assert_eq!(again.gpus().unwrap(), before);
    assert_eq!(again.model().name, "A100-80GB");
    // GI ids are small and reused; UUIDs are not.
    let y = make(&mut b, 0, "1g.10gb", 0).unwrap();
    assert_eq!(y.gi_id, 2);
    let uuids: Vec<String> = b
        .gpus()
        .unwrap()
        .iter()
        .flat_map(|g| g.instances.iter().map(|i| i.uuid.clone()))
        .collect();
    assert_eq!(uuids.len(), 3);
    assert!(uuids.iter().all(|u| uuids.iter().filter(|v| *v == u).count() == 1));
    // Another model or GPU count on the same file is refused.
    let wrong = SimulatedBackend::open(&node.state(), &node.devices(), &A100_40GB, 2);
    assert!(matches!(wrong, Err(BackendError::InvalidArgument { .. })));
    let wrong = SimulatedBackend::open(&node.state(), &node.devices(), &A100_80GB, 3);
    assert!(matches!(wrong, Err(BackendError::InvalidArgument { .. })));
    let missing = SimulatedBackend::open_existing(&node.dir.path().join("none.json"), &node.devices());
    assert!(matches!(missing, Err(BackendError::NotFound { .. })));
}

#[test]
fn device_files_appear_and_vanish() {
    let node = Node::new();
    let mut b = node.open(&A100_80GB, 2);
    let dev = node.devices();
    assert!(dev.join("nvidia0").exists() && dev.join("nvidia1").exists());
    assert!(!dev.join("nvidia2").exists());
    let i = make(&mut b, 1, "4g.40gb", 0).unwrap();
    assert_eq!(i.device_files, vec![dev.join(format!("gpu1/gi{}", i.gi_id))]);
    assert!(i.device_files[0].exists());
    // As root the fake devices are character devices (1, 3), so that slurmd hands jobs their
    // GPU indices; as a normal user they are plain files.
    {
        use std::os::unix::fs::FileTypeExt;
        let ft = std::fs::metadata(&i.device_files[0]).unwrap().file_type();
        if unsafe { libc::geteuid() } == 0 {
            assert!(ft.is_char_device(), "root gets a character device");
        } else {
            assert!(ft.is_file());
        }
    }
    // Opening reconciles the files with the state: lost files come back, stray ones go.
    std::fs::remove_file(&i.device_files[0]).unwrap();
    std::fs::write(dev.join("gpu0/gi5"), "").unwrap();
    drop(node.open(&A100_80GB, 2));
    assert!(i.device_files[0].exists());
    assert!(!dev.join("gpu0/gi5").exists());
    b.destroy_instance(1, i.gi_id).unwrap();
    assert!(!i.device_files[0].exists());
    assert!(dev.join("nvidia1").exists(), "the whole-GPU file stays");
}

#[test]
fn concurrent_handles_lose_no_update() {
    let node = Node::new();
    node.open(&A100_80GB, 4);
    std::thread::scope(|s| {
        for gpu in 0..4u32 {
            let node = &node;
            s.spawn(move || {
                let mut b = node.open(&A100_80GB, 4);
                for start in 0..7u8 {
                    make(&mut b, gpu, "1g.10gb", start).unwrap();
                }
            });
        }
    });
    let gpus = node.open(&A100_80GB, 4).gpus().unwrap();
    for g in &gpus {
        assert_eq!(g.layout().to_string(), "7x1g.10gb", "GPU {}", g.index);
    }
}

#[test]
fn gres_conf_for_a_known_layout() {
    let node = Node::new();
    let mut b = node.open(&A100_80GB, 3);
    // GPU 0: 3x2g.20gb+1x1g.10gb, created out of order; GPU 1: 4g+3g; GPU 2: MIG off.
    make(&mut b, 0, "1g.10gb", 6).unwrap();
    make(&mut b, 0, "2g.20gb", 2).unwrap();
    make(&mut b, 0, "2g.20gb", 0).unwrap();
    make(&mut b, 0, "2g.20gb", 4).unwrap();
    make(&mut b, 1, "3g.40gb", 4).unwrap();
    make(&mut b, 1, "4g.40gb", 0).unwrap();
    b.set_mig_mode(2, false).unwrap();
    let gpus = b.gpus().unwrap();
    let entries = gres_conf::node_entries(&gpus, |g| b.gpu_device_file(g));
    let text = gres_conf::render(&entries);
    let d = node.devices();
    let d = d.display();
    let expected = format!(
        // Slurm's GRES index order: type name, then GPU, then start slice.
        "# generated by dynmig; do not edit\n\
         Name=gpu Type=1g.10gb File={d}/gpu0/gi1\n\
         Name=gpu Type=2g.20gb File={d}/gpu0/gi3\n\
         Name=gpu Type=2g.20gb File={d}/gpu0/gi2\n\
         Name=gpu Type=2g.20gb File={d}/gpu0/gi4\n\
         Name=gpu Type=3g.40gb File={d}/gpu1/gi1\n\
         Name=gpu Type=4g.40gb File={d}/gpu1/gi2\n\
         Name=gpu Type=7g.80gb File={d}/nvidia2\n"
    );
    assert_eq!(text, expected);
    // Order of the input does not matter.
    let mut reversed = entries.clone();
    reversed.reverse();
    assert_eq!(gres_conf::render(&reversed), expected);
    // The Gres= string agrees with the core's NodeLayout.
    let layout = NodeLayout::parse(&A100_80GB, 3, "3x2g.20gb+1x1g.10gb,1x4g.40gb+1x3g.40gb,1x7g.80gb").unwrap();
    assert_eq!(gres_conf::node_gres_string(&entries), layout.gres());
    assert_eq!(
        gres_conf::node_gres_string(&entries),
        "gpu:1g.10gb:1,gpu:2g.20gb:3,gpu:3g.40gb:1,gpu:4g.40gb:1,gpu:7g.80gb:1"
    );
    // Written atomically from the backend: the whole text, mode 0644, no temp file left.
    let path = node.dir.path().join("etc/gres.conf");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, "old\n").unwrap();
    let gres = gres_conf::write_for(&b, &path).unwrap();
    assert_eq!(gres, layout.gres());
    assert_eq!(std::fs::read_to_string(&path).unwrap(), expected);
    assert_eq!(std::fs::read_dir(path.parent().unwrap()).unwrap().count(), 1);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o644);
    // Parsed back: line i names the files of the i-th entry in Slurm's order.
    let mut sorted = entries.clone();
    sorted.sort_by_key(gres_conf::slurm_order);
    let files: Vec<Vec<PathBuf>> = sorted.iter().map(|e| e.files.clone()).collect();
    assert_eq!(gres_conf::line_files(&text).unwrap(), files);
    for (i, f) in files.iter().enumerate() {
        let (gpu, inst) = b.find_instance(f).unwrap().expect("every line names an instance");
        assert_eq!((gpu, inst.placed), (sorted[i].gpu, sorted[i].placed), "line {i}");
    }
    let empty: Vec<GresEntry> = Vec::new();
    assert_eq!(gres_conf::render(&empty), "# generated by dynmig; do not edit\n");
}

/// Runs this test binary again as a child process that calls [`crash_helper`] with `env`;
/// returns its exit status and what it printed (for failure messages).
fn run_crash_helper(node: &Node, env: &[(&str, &str)]) -> (std::process::ExitStatus, String) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "crash_helper",
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("DYNMIG_TEST_CRASH_STATE", node.state())
    .env("DYNMIG_TEST_CRASH_DEVICES", node.devices())
    .env_remove(FAULTS_ENV);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status, text)
}

/// Not a test by itself: creates 1g instances at slices 0, 1, 2 on the node named by the
/// environment. Run by `crash_after_*` in a child process.
#[test]
#[ignore = "helper run in a child process by the crash_after tests"]
fn crash_helper() {
    let Ok(state) = std::env::var("DYNMIG_TEST_CRASH_STATE") else {
        return;
    };
    let devices = std::env::var("DYNMIG_TEST_CRASH_DEVICES").unwrap();
    let mut b = SimulatedBackend::open(Path::new(&state), Path::new(&devices), &A100_80GB, 1).unwrap();
    for start in 0..3 {
        make(&mut b, 0, "1g.10gb", start).unwrap();
    }
}

#[cfg(unix)]
#[test]
fn crash_after_from_the_environment_kills_the_process_after_saving() {
    let node = Node::new();
    node.open(&A100_80GB, 1);
    let (status, out) = run_crash_helper(&node, &[(FAULTS_ENV, r#"{"crash_after": 2}"#)]);
    assert_eq!(status.code(), Some(137), "{status:?}: {out}");
    assert!(out.contains("crash_after reached after create 1g.10gb@1"), "{out}");
    let gpu = node.open(&A100_80GB, 1).gpu(0).unwrap();
    assert_eq!(
        gpu.layout().to_string(),
        "2x1g.10gb",
        "the second create was saved before the exit"
    );
    // Without the fault the child runs on (and fails on slice 0, which is taken).
    let (status, out) = run_crash_helper(&node, &[]);
    assert_eq!(status.code(), Some(101), "{out}");
    assert!(out.contains("InsufficientResources"), "{out}");
}

#[cfg(unix)]
#[test]
fn crash_after_from_the_faults_file_fires_once() {
    let node = Node::new();
    let mut b = node.open(&A100_80GB, 1);
    b.set_faults(&FaultPlan {
        crash_after: Some(1),
        ..FaultPlan::default()
    })
    .unwrap();
    let (status, out) = run_crash_helper(&node, &[]);
    assert_eq!(status.code(), Some(137), "{out}");
    assert_eq!(b.gpu(0).unwrap().instances.len(), 1);
    let left = FaultPlan::parse(&std::fs::read_to_string(b.faults_path()).unwrap()).unwrap();
    assert!(left.is_empty(), "{left:?}");
    // The "restarted agent" starts over on an empty GPU: no second crash.
    b.destroy_instance(0, 1).unwrap();
    let (status, out) = run_crash_helper(&node, &[]);
    assert!(status.success(), "{out}");
    assert_eq!(b.gpu(0).unwrap().layout().to_string(), "3x1g.10gb");
}

#[test]
fn a_list_fault_fails_one_read_of_the_gpus() {
    let node = Node::new();
    let b = node.open(&A100_80GB, 1);
    b.set_faults(&FaultPlan::parse(r#"[{"op": "list", "after": 2, "error": "timeout"}]"#).unwrap())
        .unwrap();
    assert!(b.gpus().is_ok());
    let e = b.gpus().unwrap_err();
    assert!(e.to_string().contains("NVML_ERROR_TIMEOUT"), "{e}");
    assert!(b.gpus().is_ok());
}
