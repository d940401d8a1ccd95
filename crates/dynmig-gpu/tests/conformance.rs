//! One conformance suite for every GPU backend: what the node agent relies on.
//!
//! - The read-only part runs against the simulated backend and, where NVML loads (a machine
//!   with an NVIDIA driver), against NVML; without NVML it says why it skipped.
//! - The mutating part runs against the simulated backend always, and against NVML only with
//!   `DYNMIG_NVML_ALLOW_CHANGES=1` on a machine whose GPUs may be changed: it then creates and
//!   destroys instances on the first GPU that has MIG on and no busy instance, and puts its
//!   layout back.
//! - [`apply_transition`]: busy instances kept, a GPU that fails halfway rolled back (with
//!   injected faults), MIG turned on only where allowed.
//! - What the Prolog and Epilog use: find by device files, claim, release.

use dynmig_core::geometry::{
    check_instances, GpuModel, NodeLayout, Placed, ProfileCounts, A100_40GB, A100_80GB, A30_24GB,
};
use dynmig_gpu::{
    apply_transition, open_backend, ApplyError, Backend, BackendError, BackendSettings, Fault, FaultKind, FaultOp,
    FaultPlan, GpuBackend, NvmlBackend, SimulatedBackend, WHOLE_GPU,
};
use std::collections::BTreeSet;
use std::path::PathBuf;

/// Environment variable that lets the mutating suite run on real GPUs.
const ALLOW_CHANGES: &str = "DYNMIG_NVML_ALLOW_CHANGES";

// ---------------------------------------------------------------------------------------
// The suite

/// What every backend must answer, without changing anything.
fn read_only_suite(b: &dyn GpuBackend) {
    let gpus = b.gpus().expect("gpus()");
    assert!(!gpus.is_empty(), "a node has at least one GPU");
    let mut files_seen = BTreeSet::new();
    for (i, g) in gpus.iter().enumerate() {
        assert_eq!(g.index as usize, i, "GPUs come in index order");
        assert_eq!(b.gpu(g.index).expect("gpu(i)"), *g, "gpu(i) agrees with gpus()");
        if !g.mig_enabled {
            assert!(g.instances.is_empty(), "GPU {i}: MIG off but instances listed");
        }
        let placed = g.placed();
        check_instances(g.model, &placed).unwrap_or_else(|e| panic!("GPU {i}: invalid instances: {e}"));
        assert!(
            placed.windows(2).all(|w| w[0].start < w[1].start),
            "GPU {i}: instances not sorted by start slice"
        );
        for inst in &g.instances {
            assert!(
                !inst.device_files.is_empty(),
                "GPU {i} GI {}: no device files",
                inst.gi_id
            );
            assert!(
                files_seen.insert(inst.device_files.clone()),
                "GPU {i} GI {}: device files {:?} not unique",
                inst.gi_id,
                inst.device_files
            );
        }
        if let Some(w) = b.power_watts(g.index).expect("power_watts") {
            assert!(w > 0.0 && w < 2000.0, "GPU {i}: {w} W");
        }
    }
    let n = gpus.len() as u32;
    assert!(
        matches!(b.gpu(n), Err(BackendError::InvalidArgument { .. })),
        "gpu({n}) must be refused"
    );
    assert!(matches!(b.power_watts(n), Err(BackendError::InvalidArgument { .. })));
}

/// Instance changes on GPU `gpu` (MIG on, nothing busy); leaves the GPU's layout as found.
fn mutating_suite(b: &mut dyn GpuBackend, gpu: u32) {
    let before = b.gpu(gpu).unwrap();
    let model: &GpuModel = before.model;
    assert!(before.mig_enabled && before.instances.iter().all(|i| !i.busy));
    let original = before.layout();
    let full = model.full_profile();
    let one = model
        .schedulable_profiles()
        .into_iter()
        .find(|p| p.compute_slices == 1 && p.memory_slices == 1)
        .unwrap();

    // To the empty layout and back up, by plan_transition, verifying every step.
    for target in [
        ProfileCounts::empty(),
        ProfileCounts::parse(model, &format!("1x{}", full.name)).unwrap(),
        ProfileCounts::parse(model, &format!("2x{}", one.name)).unwrap(),
        original.clone(),
    ] {
        move_to(b, gpu, &target);
    }

    // Refusals on an empty GPU: bad start, unknown profile, overlap, unknown id.
    move_to(b, gpu, &ProfileCounts::empty());
    let bad_start = (0..model.memory_slices)
        .find(|s| !full.placement_starts.contains(s))
        .unwrap();
    assert!(matches!(
        b.create_instance(gpu, at(full, bad_start)),
        Err(BackendError::InvalidArgument { .. })
    ));
    // A profile of another model (a different table) is refused, not re-parsed by name.
    let foreign = other_model(model).full_profile();
    assert!(matches!(
        b.create_instance(gpu, at(foreign, 0)),
        Err(BackendError::InvalidArgument { .. })
    ));
    let first = b.create_instance(gpu, at(full, 0)).unwrap();
    assert_eq!(first.placed.profile.name, full.name);
    assert!(b.gpu(gpu).unwrap().instance(first.gi_id).is_some());
    assert!(matches!(
        b.create_instance(gpu, at(one, 0)),
        Err(BackendError::InsufficientResources { .. })
    ));
    assert!(matches!(
        b.destroy_instance(gpu, first.gi_id + 100),
        Err(BackendError::NotFound { .. })
    ));
    assert!(
        matches!(b.set_mig_mode(gpu, true), Ok(())),
        "setting the mode a GPU has is a no-op"
    );
    b.destroy_instance(gpu, first.gi_id).unwrap();
    assert!(b.gpu(gpu).unwrap().instances.is_empty());

    move_to(b, gpu, &original);
    assert_eq!(b.gpu(gpu).unwrap().layout(), original, "layout put back");
}

fn at(profile: &'static dynmig_core::geometry::ProfileSpec, start: u8) -> Placed {
    Placed { profile, start }
}

/// A model whose profile table differs from `m`'s (no shared full profile).
fn other_model(m: &GpuModel) -> &'static GpuModel {
    if m.name == A30_24GB.name {
        &A100_40GB
    } else {
        &A30_24GB
    }
}

/// Moves GPU `gpu` to `target` with [`apply_transition`], the other GPUs staying as they are.
fn move_to(b: &mut dyn GpuBackend, gpu: u32, target: &ProfileCounts) {
    let gpus = b.gpus().unwrap();
    let model = gpus[0].model;
    let mut layout = NodeLayout {
        gpus: gpus.iter().map(|g| g.layout()).collect(),
    };
    layout.gpus[gpu as usize] = target.clone();
    apply_owning(b, model, &layout).unwrap();
    assert_eq!(b.gpu(gpu).unwrap().layout(), *target);
    for g in b.gpu(gpu).unwrap().instances {
        assert!(
            g.placed.profile.placement_starts.contains(&g.placed.start),
            "created where allowed"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Simulated backend

fn sim(dir: &tempfile::TempDir, model: &'static GpuModel, gpus: u32) -> SimulatedBackend {
    SimulatedBackend::open(&dir.path().join("gpus.json"), &dir.path().join("dev"), model, gpus).unwrap()
}

#[test]
fn simulated_backend_conforms() {
    for (model, layout) in [
        (&A100_80GB, "1x3g.40gb+1x2g.20gb+2x1g.10gb"),
        (&A30_24GB, "1x2g.12gb+2x1g.6gb"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut b = sim(&dir, model, 2);
        read_only_suite(&b);
        move_to(&mut b, 1, &ProfileCounts::parse(model, layout).unwrap());
        read_only_suite(&b);
        mutating_suite(&mut b, 0);
        mutating_suite(&mut b, 1);
        read_only_suite(&b);
    }
}

#[test]
fn simulated_busy_instances_refuse_destroy_and_draw_power() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = sim(&dir, &A100_80GB, 1);
    let idle = b.power_watts(0).unwrap().unwrap();
    let three = A100_80GB.profile("3g.40gb").unwrap();
    let inst = b.create_instance(0, at(three, 4)).unwrap();
    b.claim(0, inst.gi_id, 42).unwrap();
    assert!(matches!(
        b.destroy_instance(0, inst.gi_id),
        Err(BackendError::InUse { .. })
    ));
    let busy = b.power_watts(0).unwrap().unwrap();
    // The core's power law, fitted to the A100 measurements (46 W idle, 170 W with a busy
    // 3g): the fit gives 46 + about 123 W.
    assert_eq!(idle, 46.0);
    assert!((busy - 170.0).abs() < 3.0, "{busy}");
    read_only_suite(&b);
}

// ---------------------------------------------------------------------------------------
// NVML

#[test]
fn nvml_backend_conforms_where_nvml_loads() {
    let mut b = match NvmlBackend::open(false) {
        Ok(b) => b,
        Err(e) => {
            assert!(
                matches!(e, BackendError::Unavailable { .. }),
                "without NVML the error must say it is unavailable, not {e:?}"
            );
            eprintln!("skipping the NVML conformance suite: {e}");
            return;
        }
    };
    read_only_suite(&b);
    let report = b.probe().expect("probe");
    assert_eq!(report.gpus.len(), b.gpus().unwrap().len());
    if std::env::var(ALLOW_CHANGES).as_deref() != Ok("1") {
        eprintln!("NVML: read-only part only; set {ALLOW_CHANGES}=1 on a machine whose GPUs may be changed");
        return;
    }
    let gpus = b.gpus().unwrap();
    let Some(g) = gpus
        .iter()
        .find(|g| g.mig_enabled && g.instances.iter().all(|i| !i.busy))
    else {
        eprintln!("NVML: no GPU with MIG on and nothing running: mutating part skipped");
        return;
    };
    mutating_suite(&mut b, g.index);
}

#[test]
fn nvml_refuses_mode_changes_the_config_does_not_allow() {
    // Config side: the key exists, defaults to false, and reaches the node group.
    let text = dynmig_core::config::EXAMPLE_TOML
        .replace("allow_mig_mode_change = false", "allow_mig_mode_change = true")
        .replace("backend = \"simulated\"", "backend = \"nvml\"");
    let c = dynmig_core::config::parse_config(&text).unwrap();
    assert!(c.node_groups[0].allow_mig_mode_change);
    assert!(
        !dynmig_core::config::parse_config(dynmig_core::config::EXAMPLE_TOML)
            .unwrap()
            .node_groups[0]
            .allow_mig_mode_change
    );
    let bad = dynmig_core::config::EXAMPLE_TOML.replace("allow_mig_mode_change = false", "allow_mig_mode_change = 1");
    assert!(dynmig_core::config::parse_config(&bad)
        .unwrap_err()
        .to_string()
        .contains("allow_mig_mode_change"));
    // Backend side, where NVML loads: a GPU whose mode differs is refused with NotAllowed.
    if let Ok(mut b) = NvmlBackend::open(false) {
        for g in b.gpus().unwrap() {
            let r = b.set_mig_mode(g.index, !g.mig_enabled);
            assert!(matches!(r, Err(BackendError::NotAllowed { .. })), "{r:?}");
        }
    }
}

// ---------------------------------------------------------------------------------------
// apply_transition

fn faults(creates: &[u32]) -> FaultPlan {
    FaultPlan {
        faults: creates
            .iter()
            .map(|&after| Fault {
                op: FaultOp::Create,
                after,
                error: FaultKind::Unknown,
            })
            .collect(),
        ..FaultPlan::default()
    }
}

fn target(text: &str) -> NodeLayout {
    NodeLayout::parse(&A100_80GB, 1, text).unwrap()
}

#[test]
fn apply_transition_keeps_a_busy_instance_and_changes_only_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = sim(&dir, &A100_80GB, 1);
    apply_owning(&mut b, &A100_80GB, &target("1x4g.40gb+1x2g.20gb+1x1g.10gb")).unwrap();
    let four = b
        .gpu(0)
        .unwrap()
        .instances
        .into_iter()
        .find(|i| i.placed.profile.name == "4g.40gb")
        .unwrap();
    b.claim(0, four.gi_id, 7).unwrap();
    let ops = apply_owning(&mut b, &A100_80GB, &target("1x4g.40gb+3x1g.10gb")).unwrap();
    assert_eq!(ops, 3, "destroy the 2g, create two 1g");
    let after = b.gpu(0).unwrap();
    let kept = after.instance(four.gi_id).expect("the busy 4g is still there");
    assert!(kept.busy && kept.uuid == four.uuid && kept.placed == four.placed);
    // A target without the busy instance is refused before anything changes.
    let e = apply_owning(&mut b, &A100_80GB, &target("1x7g.80gb")).unwrap_err();
    assert!(matches!(e, ApplyError::Plan { gpu: 0, .. }), "{e}");
    assert!(e.to_string().contains("busy instance 4g.40gb@0"), "{e}");
    assert_eq!(b.gpu(0).unwrap(), after, "nothing changed");
    // Already there: no operation.
    assert_eq!(
        apply_owning(&mut b, &A100_80GB, &target("1x4g.40gb+3x1g.10gb")).unwrap(),
        0
    );
}

#[test]
fn apply_transition_rolls_back_a_gpu_that_failed_halfway() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = sim(&dir, &A100_80GB, 1);
    apply_owning(&mut b, &A100_80GB, &target("1x7g.80gb")).unwrap();
    // 7g -> 2x3g: destroy 7g, create 3g@0, create 3g@4 (fails).
    b.set_faults(&faults(&[2])).unwrap();
    let e = apply_owning(&mut b, &A100_80GB, &target("2x3g.40gb")).unwrap_err();
    assert!(
        matches!(
            e,
            ApplyError::RolledBack {
                gpu: 0,
                undo_ops: 2,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        e.to_string()
            .starts_with("GPU 0 rolled back to 1x7g.80gb (2 operations) after: GPU 0: create 3g.40gb@4"),
        "{e}"
    );
    assert_eq!(b.gpu(0).unwrap().layout().to_string(), "1x7g.80gb");
}

#[test]
fn a_failure_on_a_later_gpu_puts_the_gpus_done_before_back_too() {
    // Found on the local cluster (tests/cluster/faults.rs): GPU 0 was changed, reading GPU 1
    // failed, and GPU 0 kept a layout that neither gres.conf nor Slurm described.
    let dir = tempfile::tempdir().unwrap();
    let mut b = sim(&dir, &A100_80GB, 2);
    let two = |t: &str| NodeLayout::parse(&A100_80GB, 2, t).unwrap();
    apply_owning(&mut b, &A100_80GB, &two("1x7g.80gb,1x7g.80gb")).unwrap();
    // GPU 0: destroy 7g, create 3g@0 and 3g@4; GPU 1: destroy 7g, create 1g (fails).
    b.set_faults(&faults(&[4])).unwrap();
    let e = apply_owning(&mut b, &A100_80GB, &two("2x3g.40gb,7x1g.10gb"))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("GPU 0 rolled back to 1x7g.80gb (3 operations) after: GPU 1 rolled back to 1x7g.80gb"),
        "{e}"
    );
    for g in 0..2 {
        assert_eq!(b.gpu(g).unwrap().layout().to_string(), "1x7g.80gb", "GPU {g}");
    }
    // A failed read of GPU 1 before any change there: GPU 0 is put back all the same.
    // (The 5th list: apply_owning reads the GPUs once before apply_transition does.)
    b.set_faults(&FaultPlan::parse(r#"[{"op": "list", "after": 5, "error": "unknown"}]"#).unwrap())
        .unwrap();
    let e = apply_owning(&mut b, &A100_80GB, &two("2x3g.40gb,7x1g.10gb"))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("GPU 0 rolled back to 1x7g.80gb"), "{e}");
    assert!(e.contains("GPU 1: cannot read it"), "{e}");
    for g in 0..2 {
        assert_eq!(b.gpu(g).unwrap().layout().to_string(), "1x7g.80gb", "GPU {g}");
    }
}

#[test]
fn apply_transition_says_what_a_gpu_holds_when_rollback_fails_too() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = sim(&dir, &A100_80GB, 1);
    apply_owning(&mut b, &A100_80GB, &target("1x7g.80gb")).unwrap();
    // The forward create of 3g@4 fails, then the rollback's create of 7g@0 fails too.
    b.set_faults(&faults(&[2, 3])).unwrap();
    let e = apply_owning(&mut b, &A100_80GB, &target("2x3g.40gb"))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("GPU 0 left as no instances: rollback to 1x7g.80gb failed"),
        "{e}"
    );
    assert!(b.gpu(0).unwrap().instances.is_empty());
    // A failure before anything changed needs no rollback.
    let dir = tempfile::tempdir().unwrap();
    let mut b = sim(&dir, &A100_80GB, 1);
    b.set_faults(&faults(&[1])).unwrap();
    let e = apply_owning(&mut b, &A100_80GB, &target("1x7g.80gb")).unwrap_err();
    assert!(matches!(e, ApplyError::Operation { op: "create", .. }), "{e:?}");
    assert!(e.to_string().starts_with("GPU 0: create 7g.80gb@0"), "{e}");
}

#[test]
fn mig_is_turned_on_only_where_mode_changes_are_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = sim(&dir, &A100_80GB, 1);
    b.set_mig_mode(0, false).unwrap();
    let mut strict = sim(&dir, &A100_80GB, 1).allow_mig_mode_change(false);
    let e = apply_owning(&mut strict, &A100_80GB, &target("1x7g.80gb")).unwrap_err();
    assert!(matches!(e, ApplyError::MigOff { gpu: 0 }), "{e:?}");
    assert!(e.to_string().contains("allow_mig_mode_change"), "{e}");
    assert!(matches!(
        strict.set_mig_mode(0, true),
        Err(BackendError::NotAllowed { .. })
    ));
    assert!(!b.gpu(0).unwrap().mig_enabled, "nothing changed");
    assert_eq!(
        apply_owning(&mut b, &A100_80GB, &target("1x7g.80gb")).unwrap(),
        2,
        "MIG on + create"
    );
    assert!(b.gpu(0).unwrap().mig_enabled);
}

#[test]
fn a_target_for_another_node_shape_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = sim(&dir, &A100_80GB, 2);
    let e = apply_owning(&mut b, &A100_80GB, &target("1x7g.80gb")).unwrap_err();
    assert!(matches!(e, ApplyError::Target { .. }), "{e:?}");
    assert!(e.to_string().contains("1 GPU layouts, the node 2 GPUs"), "{e}");
}

// ---------------------------------------------------------------------------------------
// Prolog / Epilog support

#[test]
fn find_by_device_files_then_claim_and_release() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = sim(&dir, &A100_80GB, 2);
    apply_owning(
        &mut b,
        &A100_80GB,
        &NodeLayout::parse(&A100_80GB, 2, "2x3g.40gb,1x7g.80gb").unwrap(),
    )
    .unwrap();
    let g0 = b.gpu(0).unwrap();
    let second = &g0.instances[1];
    let (gpu, found) = b
        .find_instance(&second.device_files)
        .unwrap()
        .expect("found by its files");
    assert_eq!((gpu, found.gi_id), (0, second.gi_id));
    assert!(b.find_instance(&[dir.path().join("nope")]).unwrap().is_none());
    assert!(b.find_instance(&[]).unwrap().is_none());
    b.claim(0, second.gi_id, 11).unwrap();
    b.claim(0, second.gi_id, 11).unwrap();
    assert_eq!(b.jobs_on(0, second.gi_id).unwrap(), vec![11], "claiming twice is once");
    assert!(b.find_instance(&second.device_files).unwrap().unwrap().1.busy);
    assert!(matches!(b.claim(0, 99, 11), Err(BackendError::NotFound { .. })));
    assert!(matches!(
        b.claim(5, second.gi_id, 11),
        Err(BackendError::InvalidArgument { .. })
    ));
    b.release_job(11).unwrap();
    b.release_job(11).unwrap();
    assert!(!b.gpu(0).unwrap().instance(second.gi_id).unwrap().busy);
}

#[test]
fn a_whole_gpu_with_mig_off_is_found_claimed_and_kept_from_mode_changes() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = sim(&dir, &A100_80GB, 2);
    b.set_mig_mode(1, false).unwrap();
    let file = b.gpu_device_file(1);
    let (gpu, whole) = b
        .find_instance(std::slice::from_ref(&file))
        .unwrap()
        .expect("the whole GPU");
    assert_eq!((gpu, whole.gi_id, whole.placed.profile.name), (1, WHOLE_GPU, "7g.80gb"));
    assert!(!whole.busy);
    assert!(
        matches!(b.claim(0, WHOLE_GPU, 3), Err(BackendError::NotFound { .. })),
        "GPU 0 has MIG on"
    );
    b.claim(1, WHOLE_GPU, 3).unwrap();
    assert!(b.find_instance(&[file]).unwrap().unwrap().1.busy);
    assert!(matches!(b.set_mig_mode(1, true), Err(BackendError::InUse { .. })));
    assert!(
        b.power_watts(1).unwrap().unwrap() > 200.0,
        "a busy whole GPU draws power"
    );
    b.release_job(3).unwrap();
    b.set_mig_mode(1, true).unwrap();
}

#[test]
fn open_backend_builds_the_simulated_kind_from_explicit_settings() {
    let dir = tempfile::tempdir().unwrap();
    let settings = BackendSettings {
        model: &A100_80GB,
        gpus: 2,
        allow_mig_mode_change: false,
        sim_state_file: dir.path().join("sim.json"),
        sim_device_dir: dir.path().join("dev"),
        nvml: Default::default(),
    };
    let mut b = open_backend(Backend::Simulated, &settings).unwrap();
    assert_eq!(b.gpus().unwrap().len(), 2);
    assert!(!b.allows_mig_mode_change());
    assert!(matches!(b.set_mig_mode(0, false), Err(BackendError::NotAllowed { .. })));
    let e = open_backend(Backend::Simulated, &BackendSettings { gpus: 3, ..settings }).unwrap_err();
    assert!(e.to_string().contains("holds 2 GPUs of A100-80GB, not 3"), "{e}");
    match open_backend(
        Backend::Nvml,
        &BackendSettings {
            model: &A100_80GB,
            gpus: 1,
            allow_mig_mode_change: false,
            sim_state_file: PathBuf::new(),
            sim_device_dir: PathBuf::new(),
            nvml: Default::default(),
        },
    ) {
        Err(BackendError::Unavailable { what }) => eprintln!("NVML not here, as expected on this machine: {what}"),
        Err(e) => eprintln!("NVML loaded but refused: {e}"),
        Ok(_) => eprintln!("NVML opened"),
    }
}

/// [`apply_transition`] on a backend whose instances the test made itself: they are all
/// dynmig's (the ownership guard has tests of its own).
fn apply_owning(b: &mut dyn GpuBackend, model: &'static GpuModel, target: &NodeLayout) -> Result<usize, ApplyError> {
    let mut owned = dynmig_gpu::Ownership::in_memory_owning(&b.gpus().unwrap());
    apply_transition(b, model, target, &mut owned)
}

#[test]
fn an_instance_dynmig_did_not_create_is_never_destroyed() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("owned-instances.json");
    let mut b = sim(&dir, &A100_80GB, 1);
    let mut owned = dynmig_gpu::Ownership::load(&record).unwrap();
    apply_transition(&mut b, &A100_80GB, &target("1x4g.40gb+1x3g.40gb"), &mut owned).unwrap();
    assert_eq!(owned.record().instances.len(), 2, "{:?}", owned.record());
    assert!(owned.record().pending.is_empty());
    // Someone else takes the 3g away and makes a 1g there (nvidia-smi, another tool).
    let three = b
        .gpu(0)
        .unwrap()
        .instances
        .into_iter()
        .find(|i| i.placed.start == 4)
        .unwrap();
    b.destroy_instance(0, three.gi_id).unwrap();
    let theirs = b
        .create_instance(0, at(A100_80GB.profile("1g.10gb").unwrap(), 4))
        .unwrap();
    // A target that needs their 1g gone is refused, naming it, and nothing changes.
    let before = b.gpu(0).unwrap();
    let mut owned = dynmig_gpu::Ownership::load(&record).unwrap();
    let e = apply_transition(&mut b, &A100_80GB, &target("1x7g.80gb"), &mut owned).unwrap_err();
    assert!(matches!(e, ApplyError::Foreign { gpu: 0, .. }), "{e}");
    assert!(e.to_string().contains(&format!("1g.10gb@4 ({})", theirs.uuid)), "{e}");
    assert_eq!(b.gpu(0).unwrap(), before);
    // The record forgot the 3g someone else destroyed.
    assert_eq!(owned.record().instances.len(), 1, "{:?}", owned.record());
    // A target that keeps it changes only dynmig's own instances.
    apply_transition(&mut b, &A100_80GB, &target("2x2g.20gb+1x1g.10gb"), &mut owned).unwrap();
    let after = b.gpu(0).unwrap();
    assert!(
        after.instances.iter().any(|i| i.uuid == theirs.uuid),
        "their 1g is still there"
    );
    assert_eq!(after.layout().to_string(), "2x2g.20gb+1x1g.10gb");
    // The record on disk says the same as in memory.
    assert_eq!(dynmig_gpu::Ownership::load(&record).unwrap().record(), owned.record());
}

#[test]
fn a_create_journalled_before_a_crash_is_dynmigs_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("owned-instances.json");
    let mut b = sim(&dir, &A100_80GB, 1);
    let mut owned = dynmig_gpu::Ownership::load(&record).unwrap();
    apply_transition(&mut b, &A100_80GB, &target("1x7g.80gb"), &mut owned).unwrap();
    let seven = b.gpu(0).unwrap().instances[0].clone();
    b.destroy_instance(0, seven.gi_id).unwrap();
    owned.destroyed(0, &seven).unwrap();
    // The agent wrote the create down, made it, and died before confirming it.
    let p = at(A100_80GB.profile("3g.40gb").unwrap(), 4);
    owned.creating(0, p).unwrap();
    let made = b.create_instance(0, p).unwrap();
    drop(owned);
    let mut owned = dynmig_gpu::Ownership::load(&record).unwrap();
    assert!(owned.owns(0, &made), "a pending create names its place");
    apply_transition(&mut b, &A100_80GB, &target("1x7g.80gb"), &mut owned).unwrap();
    assert_eq!(b.gpu(0).unwrap().layout().to_string(), "1x7g.80gb");
    assert!(owned.record().pending.is_empty());
}

// ---------------------------------------------------------------------------------------
// The NVML backend on the NVML stand-in (crates/nvml-standin): the same suites, everywhere

/// A node of `gpus` GPUs of `board` on its own copy of the stand-in (its own library file,
/// so its own NVML session in this process), MIG on or off, the driver's files under the
/// temporary folder.
struct StandInNode {
    _dir: tempfile::TempDir,
    standin: nvml_standin::StandIn,
    access: dynmig_core::config::NvmlAccess,
}

/// A stand-in fault: the `after`-th call of `function` fails with `error` (nvml.h's name less
/// `NVML_ERROR_`), after sleeping `hang_ms` if given.
fn fault(function: &str, after: u32, error: Option<&str>, hang_ms: Option<u64>) -> nvml_standin::Fault {
    nvml_standin::Fault {
        function: function.into(),
        after,
        error: error.map(str::to_string),
        hang_ms,
    }
}

impl StandInNode {
    fn new(board: &str, gpus: u32, mig: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let mut spec = nvml_standin::NodeSpec::new(board, gpus);
        spec.mig_enabled = mig;
        spec.device_root = Some(root.clone());
        let standin = nvml_standin::StandIn::install(&dir.path().join("lib"), &spec)
            .unwrap_or_else(|e| panic!("{e}: {}", nvml_standin::BUILD_HINT));
        let access = dynmig_core::config::NvmlAccess {
            library: Some(standin.library_path()),
            device_root: root,
            timeout: std::time::Duration::from_secs(20),
        };
        Self {
            _dir: dir,
            standin,
            access,
        }
    }

    fn open(&self, model: &'static GpuModel) -> NvmlBackend {
        NvmlBackend::open_expecting(&self.access, model, false).unwrap()
    }
}

#[test]
fn nvml_backend_conforms_on_the_standin_for_every_kind_of_board() {
    use dynmig_core::geometry::{H100_80GB, H200_141GB, RTX_PRO_5000_48GB, RTX_PRO_6000_96GB};
    // Captured boards (geometry as a real driver reported it), table boards, and boards of
    // 4 and 2 slices.
    for (board, model, layout) in [
        ("capture:h100-80gb", &H100_80GB, "1x3g.40gb+1x2g.20gb+2x1g.10gb"),
        ("capture:h200", &H200_141GB, "1x4g.71gb+1x3g.71gb"),
        ("A100-80GB", &A100_80GB, "1x3g.40gb+1x2g.20gb+2x1g.10gb"),
        ("A30-24GB", &A30_24GB, "1x2g.12gb+2x1g.6gb"),
        ("RTX-PRO-6000-96GB", &RTX_PRO_6000_96GB, "1x2g.48gb+2x1g.24gb"),
        ("RTX-PRO-5000-48GB", &RTX_PRO_5000_48GB, "2x1g.24gb"),
    ] {
        let node = StandInNode::new(board, 2, true);
        let mut b = node.open(model);
        read_only_suite(&b);
        move_to(&mut b, 1, &ProfileCounts::parse(model, layout).unwrap());
        read_only_suite(&b);
        mutating_suite(&mut b, 0);
        mutating_suite(&mut b, 1);
        read_only_suite(&b);
        // What NVML reports is the geometry the backend works with.
        let g = b.gpu(0).unwrap();
        assert_eq!(g.model.name, model.name, "{board}");
        assert!(
            dynmig_core::geometry::cross_check(g.model, model).is_empty() || !model.verified,
            "{board}"
        );
    }
}

#[test]
fn on_nvml_an_instance_with_a_process_is_busy_and_kept() {
    let node = StandInNode::new("A100-80GB", 1, true);
    let mut b = node.open(&A100_80GB);
    apply_owning(&mut b, &A100_80GB, &target("1x4g.40gb+1x2g.20gb+1x1g.10gb")).unwrap();
    let four = b
        .gpu(0)
        .unwrap()
        .instances
        .into_iter()
        .find(|i| i.placed.profile.name == "4g.40gb")
        .unwrap();
    // A job's process runs on the 4g (this test process stands in for it).
    node.standin.attach_process(&four.uuid, std::process::id()).unwrap();
    assert!(b.gpu(0).unwrap().instance(four.gi_id).unwrap().busy);
    assert!(matches!(
        b.destroy_instance(0, four.gi_id),
        Err(BackendError::InUse { .. })
    ));
    let ops = apply_owning(&mut b, &A100_80GB, &target("1x4g.40gb+3x1g.10gb")).unwrap();
    assert_eq!(ops, 3, "destroy the 2g, create two 1g");
    let e = apply_owning(&mut b, &A100_80GB, &target("1x7g.80gb")).unwrap_err();
    assert!(e.to_string().contains("busy instance 4g.40gb@0"), "{e}");
    node.standin.detach_process(std::process::id()).unwrap();
    apply_owning(&mut b, &A100_80GB, &target("1x7g.80gb")).unwrap();
}

#[test]
fn on_nvml_a_gpu_that_failed_halfway_is_rolled_back() {
    let node = StandInNode::new("A100-80GB", 1, true);
    let mut b = node.open(&A100_80GB);
    apply_owning(&mut b, &A100_80GB, &target("1x7g.80gb")).unwrap();
    // 7g -> 2x3g: destroy 7g, create 3g@0 (GI + CI), create 3g@4: its GPU instance fails.
    node.standin
        .set_faults(vec![fault(
            "nvmlDeviceCreateGpuInstanceWithPlacement",
            2,
            Some("INSUFFICIENT_RESOURCES"),
            None,
        )])
        .unwrap();
    let e = apply_owning(&mut b, &A100_80GB, &target("2x3g.40gb")).unwrap_err();
    assert!(matches!(e, ApplyError::RolledBack { gpu: 0, .. }), "{e}");
    assert!(e.to_string().contains("NVML_ERROR_INSUFFICIENT_RESOURCES"), "{e}");
    assert_eq!(b.gpu(0).unwrap().layout().to_string(), "1x7g.80gb");
}

// The peers' bugs (docs/gpus.md, "The NVML backend"), each against the stand-in.

#[test]
fn the_uuid_handed_to_a_job_is_the_mig_devices_not_the_parent_gpus() {
    let node = StandInNode::new("capture:h100-80gb", 1, true);
    let mut b = node.open(&dynmig_core::geometry::H100_80GB);
    let one = dynmig_core::geometry::H100_80GB.profile("1g.10gb").unwrap();
    let made = b.create_instance(0, at(one, 3)).unwrap();
    let st = node.standin.read().unwrap();
    let gpu_uuid = &st.gpus[0].uuid;
    assert!(made.uuid.starts_with("MIG-"), "{}", made.uuid);
    assert_ne!(&made.uuid, gpu_uuid, "not the parent's UUID");
    let ci_uuid = &st.gpus[0].gi(made.gi_id).unwrap().compute_instances[0].uuid;
    assert_eq!(&made.uuid, ci_uuid, "the MIG device's own UUID");
}

#[test]
fn nvml_is_initialised_once_per_process_however_often_the_backend_is_opened() {
    let node = StandInNode::new("A100-80GB", 2, true);
    for _ in 0..3 {
        let b = node.open(&A100_80GB);
        b.gpus().unwrap();
    }
    assert_eq!(node.standin.init_count(std::process::id()).unwrap(), 1);
}

#[test]
fn an_nvml_call_that_hangs_is_cut_at_the_deadline_and_no_further_call_is_made() {
    // A deadline that opening the backend meets on a loaded machine (0.3 s did not, in a CI
    // run beside a build), and a hang well past it.
    let mut node = StandInNode::new("A100-80GB", 1, true);
    node.access.timeout = std::time::Duration::from_millis(1500);
    let b = node.open(&A100_80GB);
    node.standin
        .set_faults(vec![fault("nvmlDeviceGetMigMode", 1, None, Some(15_000))])
        .unwrap();
    let t = std::time::Instant::now();
    let e = b.gpus().unwrap_err();
    assert!(
        t.elapsed() < std::time::Duration::from_millis(7000),
        "{:?}",
        t.elapsed()
    );
    assert!(e.to_string().contains("NVML_ERROR_TIMEOUT"), "{e}");
    let calls = node.standin.call_count("nvmlDeviceGetCount_v2").unwrap();
    let e = b.gpus().unwrap_err();
    assert!(e.to_string().contains("not tried"), "{e}");
    assert_eq!(
        node.standin.call_count("nvmlDeviceGetCount_v2").unwrap(),
        calls,
        "no NVML call made"
    );
}

#[test]
fn a_gpu_instance_whose_compute_instance_failed_is_destroyed() {
    let node = StandInNode::new("A100-80GB", 1, true);
    let mut b = node.open(&A100_80GB);
    node.standin
        .set_faults(vec![fault(
            "nvmlGpuInstanceCreateComputeInstance",
            1,
            Some("INSUFFICIENT_RESOURCES"),
            None,
        )])
        .unwrap();
    let three = A100_80GB.profile("3g.40gb").unwrap();
    let e = b.create_instance(0, at(three, 4)).unwrap_err();
    assert!(e.to_string().contains("compute instance"), "{e}");
    assert!(
        node.standin.read().unwrap().gpus[0].gpu_instances.is_empty(),
        "no GPU instance left"
    );
    assert!(b.gpu(0).unwrap().instances.is_empty());
}

#[test]
fn on_nvml_an_instance_another_process_made_is_never_destroyed() {
    let node = StandInNode::new("A100-80GB", 1, true);
    let record = node._dir.path().join("owned-instances.json");
    let mut b = node.open(&A100_80GB);
    let mut owned = dynmig_gpu::Ownership::load(&record).unwrap();
    apply_transition(&mut b, &A100_80GB, &target("1x4g.40gb"), &mut owned).unwrap();
    // An administrator makes a 3g at slice 4 (another process: a second backend here).
    let mut admin = node.open(&A100_80GB);
    let theirs = admin
        .create_instance(0, at(A100_80GB.profile("3g.40gb").unwrap(), 4))
        .unwrap();
    let e = apply_transition(&mut b, &A100_80GB, &target("1x7g.80gb"), &mut owned).unwrap_err();
    assert!(matches!(e, ApplyError::Foreign { .. }), "{e}");
    assert!(b.gpu(0).unwrap().instance(theirs.gi_id).is_some());
    // Around it, dynmig changes its own.
    apply_transition(&mut b, &A100_80GB, &target("2x2g.20gb+1x3g.40gb"), &mut owned).unwrap();
    let after = b.gpu(0).unwrap();
    assert!(after.instances.iter().any(|i| i.uuid == theirs.uuid));
    assert_eq!(after.layout().to_string(), "1x3g.40gb+2x2g.20gb");
}

#[test]
fn on_nvml_an_instance_of_dynmigs_left_without_compute_instance_is_made_again() {
    // An agent killed between destroying a compute instance and its GPU instance leaves a GPU
    // instance with no MIG device: no job can use it, and it has no UUID to be known by.
    let node = StandInNode::new("A100-80GB", 1, true);
    let record = node._dir.path().join("owned-instances.json");
    let mut b = node.open(&A100_80GB);
    let mut owned = dynmig_gpu::Ownership::load(&record).unwrap();
    apply_transition(&mut b, &A100_80GB, &target("2x3g.40gb"), &mut owned).unwrap();
    node.standin
        .update(|s| s.gpus[0].gpu_instances[0].compute_instances.clear())
        .unwrap();
    let broken = b.gpu(0).unwrap();
    assert!(broken.instances.iter().any(|i| i.uuid.is_empty()));
    let mut owned = dynmig_gpu::Ownership::load(&record).unwrap();
    let ops = apply_transition(&mut b, &A100_80GB, &target("2x3g.40gb"), &mut owned).unwrap();
    assert_eq!(ops, 2, "the broken 3g destroyed and made again");
    let now = b.gpu(0).unwrap();
    assert_eq!(now.layout().to_string(), "2x3g.40gb");
    assert!(now.instances.iter().all(|i| i.uuid.starts_with("MIG-")), "{now:?}");
    assert_eq!(owned.record().instances.len(), 2);
}

#[test]
fn on_nvml_a_create_cut_before_its_compute_instance_is_dynmigs_and_made_again() {
    // The agent wrote the create down, the driver made the GPU instance, and the agent was
    // killed before the compute instance (found by the fault campaign on the NVML stand-in).
    let node = StandInNode::new("A100-80GB", 1, true);
    let record = node._dir.path().join("owned-instances.json");
    let mut b = node.open(&A100_80GB);
    let mut owned = dynmig_gpu::Ownership::load(&record).unwrap();
    let p = at(A100_80GB.profile("4g.40gb").unwrap(), 0);
    owned.creating(0, p).unwrap();
    b.create_instance(0, p).unwrap();
    node.standin
        .update(|s| s.gpus[0].gpu_instances[0].compute_instances.clear())
        .unwrap();
    drop(owned);
    let mut owned = dynmig_gpu::Ownership::load(&record).unwrap();
    apply_transition(&mut b, &A100_80GB, &target("2x3g.40gb"), &mut owned).unwrap();
    let now = b.gpu(0).unwrap();
    assert_eq!(now.layout().to_string(), "2x3g.40gb");
    assert!(now.instances.iter().all(|i| i.uuid.starts_with("MIG-")));
    assert!(owned.record().pending.is_empty());
    assert!(
        owned.record().instances.iter().all(|o| !o.uuid.is_empty()),
        "{:?}",
        owned.record()
    );
}

#[test]
fn the_geometry_nvml_reports_is_the_one_used_where_it_differs_from_the_table() {
    // A driver that reports 1g.10gb with less memory than dynmig's table says (as a newer
    // driver could): the backend reads the board's geometry from NVML once, logs the
    // difference, and works with what NVML says.
    let node = StandInNode::new("A100-80GB", 1, true);
    node.standin
        .update(|s| {
            for p in s.gpus[0]
                .board
                .profiles
                .iter_mut()
                .filter(|p| p.name.ends_with("1g.10gb"))
            {
                p.memory_mib = 9000;
            }
        })
        .unwrap();
    let mut b = node.open(&A100_80GB);
    let g = b.gpu(0).unwrap();
    assert_eq!(g.model.name, "A100-80GB", "the config's model name still matches");
    assert_eq!(
        g.model.profile("1g.10gb").unwrap().memory_mib,
        9000,
        "NVML's memory, not the table's"
    );
    let diff = dynmig_core::geometry::cross_check(g.model, &A100_80GB);
    assert!(diff.iter().any(|l| l.contains("1g.10gb")), "{diff:?}");
    // Creating by the table's profile works: the backend takes NVML's profile of that name.
    let made = b
        .create_instance(0, at(A100_80GB.profile("1g.10gb").unwrap(), 2))
        .unwrap();
    assert_eq!(made.placed.profile.memory_mib, 9000);
    b.destroy_instance(0, made.gi_id).unwrap();
    // And a whole apply, planned on the table, reaches its layout on the NVML geometry.
    apply_owning(&mut b, &A100_80GB, &target("1x4g.40gb+3x1g.10gb")).unwrap();
    assert_eq!(b.gpu(0).unwrap().layout().to_string(), "1x4g.40gb+3x1g.10gb");
}

#[test]
fn on_nvml_a_destroy_that_fails_after_the_compute_instance_went_leaves_a_usable_instance_of_dynmigs() {
    let node = StandInNode::new("A100-80GB", 1, true);
    let record = node._dir.path().join("owned-instances.json");
    let mut b = node.open(&A100_80GB);
    let mut owned = dynmig_gpu::Ownership::load(&record).unwrap();
    apply_transition(&mut b, &A100_80GB, &target("1x7g.80gb"), &mut owned).unwrap();
    let before = b.gpu(0).unwrap().instances[0].clone();
    node.standin
        .set_faults(vec![fault("nvmlGpuInstanceDestroy", 1, Some("IN_USE"), None)])
        .unwrap();
    let e = apply_transition(&mut b, &A100_80GB, &target("2x3g.40gb"), &mut owned).unwrap_err();
    assert!(e.to_string().contains("NVML_ERROR_IN_USE"), "{e}");
    let after = b.gpu(0).unwrap().instances[0].clone();
    assert_eq!(after.placed, before.placed, "the 7g is still there");
    assert!(
        after.uuid.starts_with("MIG-") && after.uuid != before.uuid,
        "with its compute instance made again"
    );
    assert!(owned.owns(0, &after), "and still dynmig's");
    apply_transition(&mut b, &A100_80GB, &target("2x3g.40gb"), &mut owned).unwrap();
    assert_eq!(b.gpu(0).unwrap().layout().to_string(), "2x3g.40gb");
}
