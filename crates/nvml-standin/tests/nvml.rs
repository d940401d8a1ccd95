//! The stand-in loaded as a library by nvml-wrapper, as dynmig's NVML backend loads the real
//! one: what it reports, the placement rules and return codes, shared state, faults.

mod common;

use common::*;
use dynmig_core::geometry::{model_by_name, MODELS};
use nvml_standin::{Fault, NodeSpec, StandIn};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper_sys::bindings as sys;
use std::time::{Duration, Instant};

#[derive(serde::Deserialize)]
struct Capture {
    gpus: Vec<CapGpu>,
}
#[derive(serde::Deserialize)]
struct CapGpu {
    name: String,
    pci_device_id: u16,
    memory_total_mib: u64,
    profiles: Vec<CapProfile>,
}
#[derive(serde::Deserialize)]
struct CapProfile {
    index: u32,
    id: u32,
    name: String,
    slice_count: u32,
    instance_count: u32,
    multiprocessor_count: u32,
    memory_mib: u64,
    placements: Vec<(u32, u32)>,
}

fn capture(file: &str) -> CapGpu {
    let text = std::fs::read_to_string(format!("{}/boards/{file}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    serde_json::from_str::<Capture>(&text).unwrap().gpus.remove(0)
}

#[test]
fn capture_boards_report_what_nvml_reported() {
    for (board, file) in [
        ("capture:h100-80gb", "probe-h100-80gb.json"),
        ("capture:h200", "probe-h200.json"),
    ] {
        let cap = capture(file);
        let dir = tempfile::tempdir().unwrap();
        let node = install(dir.path(), &NodeSpec::new(board, 2));
        let nvml = load(&node);
        assert_eq!(nvml.device_count().unwrap(), 2);
        assert_eq!(nvml.sys_driver_version().unwrap(), "580.159.04");
        assert_eq!(nvml.sys_nvml_version().unwrap(), "13.580.159.04");
        let mut uuids = Vec::new();
        for i in 0..2 {
            let d = nvml.device_by_index(i).unwrap();
            assert_eq!(d.name().unwrap(), cap.name);
            let pci = d.pci_info().unwrap();
            assert_eq!(pci.pci_device_id, (u32::from(cap.pci_device_id) << 16) | 0x10DE);
            assert!(pci.bus_id.starts_with("00000000:"), "{}", pci.bus_id);
            assert_eq!(d.memory_info().unwrap().total, cap.memory_total_mib * 1024 * 1024);
            assert_eq!(d.minor_number().unwrap(), i);
            let m = d.mig_mode().unwrap();
            assert_eq!((m.current, m.pending), (0, 0));
            let uuid = d.uuid().unwrap();
            assert!(uuid.starts_with("GPU-") && uuid.len() == 40, "{uuid}");
            uuids.push(uuid);
            assert!(d.running_compute_processes().unwrap().is_empty());
            // Every profile index as the capture has it, with MIG off, as the driver answers.
            let h = dev(&nvml, i);
            for index in 0..sys::NVML_GPU_INSTANCE_PROFILE_COUNT {
                let got = profile_info(&nvml, h, index);
                match cap.profiles.iter().find(|p| p.index == index) {
                    None => assert_eq!(got.err(), Some(NOT_SUPPORTED), "{board} index {index}"),
                    Some(p) => {
                        let g = got.unwrap();
                        assert_eq!(
                            (
                                g.id,
                                g.sliceCount,
                                g.instanceCount,
                                g.multiprocessorCount,
                                g.memorySizeMB
                            ),
                            (
                                p.id,
                                p.slice_count,
                                p.instance_count,
                                p.multiprocessor_count,
                                p.memory_mib
                            ),
                            "{board} index {index}"
                        );
                        assert_eq!(c_str(&g.name), p.name);
                        assert_eq!(placements(&nvml, h, p.id).unwrap(), p.placements, "{board} {}", p.name);
                    }
                }
            }
            assert_eq!(profile_info(&nvml, h, 17).err(), Some(INVALID));
        }
        assert_ne!(uuids[0], uuids[1]);
        // The same UUID names the same GPU.
        let by_uuid = nvml.device_by_uuid(uuids[1].as_str()).unwrap();
        assert_eq!(unsafe { by_uuid.handle() }, dev(&nvml, 1));
        assert!(matches!(nvml.device_by_uuid("GPU-nope"), Err(NvmlError::NotFound)));
        assert!(matches!(nvml.device_by_index(2), Err(NvmlError::InvalidArg)));
        // Power: a capture board has dynmig's model, so idle power in mW.
        let idle = model_by_name(if board.contains("h100") {
            "H100-80GB"
        } else {
            "H200-141GB"
        })
        .unwrap()
        .power
        .idle_w;
        let mw = nvml.device_by_index(0).unwrap().power_usage().unwrap();
        assert_eq!(mw, (idle * 1000.0).round() as u32);
    }
}

#[test]
fn table_boards_report_their_table() {
    for model in MODELS {
        let dir = tempfile::tempdir().unwrap();
        let node = install(dir.path(), &NodeSpec::new(model.name, 1));
        let nvml = load(&node);
        let d = nvml.device_by_index(0).unwrap();
        let pci = d.pci_info().unwrap();
        // A table without a known PCI ID reports device ID 0 (found by name instead).
        let want_id = model.pci_device_ids.first().copied().unwrap_or(0);
        assert_eq!(pci.pci_device_id >> 16, u32::from(want_id), "{}", model.name);
        assert_eq!(d.memory_info().unwrap().total, model.total_memory_mib * 1024 * 1024);
        // dynmig finds the model the same way its backend does.
        let found = dynmig_core::geometry::model_for_device((pci.pci_device_id >> 16) as u16, &d.name().unwrap());
        assert_eq!(found.map(|m| m.name), Some(model.name), "{}", model.name);
        let h = dev(&nvml, 0);
        let infos: Vec<_> = (0..17).filter_map(|i| profile_info(&nvml, h, i).ok()).collect();
        for p in model.profiles {
            let g = infos
                .iter()
                .find(|g| g.id == p.id)
                .unwrap_or_else(|| panic!("{} {}", model.name, p.name));
            assert_eq!(c_str(&g.name), format!("MIG {}", p.name));
            assert_eq!(g.sliceCount, u32::from(p.compute_slices));
            assert_eq!(g.instanceCount, u32::from(p.max_instances));
            assert_eq!(g.memorySizeMB, p.memory_mib);
            let want: Vec<(u32, u32)> = p
                .placement_starts
                .iter()
                .map(|&s| (u32::from(s), u32::from(p.memory_slices)))
                .collect();
            assert_eq!(placements(&nvml, h, p.id).unwrap(), want, "{} {}", model.name, p.name);
        }
        assert_eq!(infos.len(), model.profiles.len(), "{}", model.name);
    }
}

#[test]
fn a100_80gb_table_board_basics() {
    let dir = tempfile::tempdir().unwrap();
    let node = install(dir.path(), &mig_on("A100-80GB", 1));
    let nvml = load(&node);
    let d = nvml.device_by_index(0).unwrap();
    assert_eq!(d.name().unwrap(), "NVIDIA A100-SXM4-80GB");
    assert_eq!(d.pci_info().unwrap().pci_device_id, 0x20B2_10DE);
    assert_eq!(d.memory_info().unwrap().total, 81920 * 1024 * 1024);
    assert_eq!(d.mig_device_count().unwrap(), 7);
    assert!(d.uuid().unwrap().starts_with("GPU-"));
}

/// The placement rules and refusals on an H100 capture board.
#[test]
fn create_list_destroy_and_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let node = install(dir.path(), &NodeSpec::new("capture:h100-80gb", 1));
    let nvml = load(&node);
    let h = dev(&nvml, 0);
    // MIG off: the MIG calls are not supported.
    assert_eq!(create_gi(&nvml, h, 9, 0, 4).err(), Some(NOT_SUPPORTED));
    assert_eq!(gpu_instances(&nvml, h, 9).err(), Some(NOT_SUPPORTED));
    let d = nvml.device_by_index(0).unwrap();
    assert_eq!(d.mig_device_count().unwrap(), 0);
    assert_eq!(d.set_mig_mode(true).unwrap(), SUCCESS);
    assert_eq!(d.mig_mode().unwrap().current, 1);

    // 3g.40gb (ID 9) at 0 and a CI over it.
    let (gi, ci) = create_full(&nvml, h, 9, 0);
    let info = gi_info(&nvml, gi).unwrap();
    assert_eq!(
        (info.id, info.profileId, info.placement.start, info.placement.size),
        (1, 9, 0, 4)
    );
    assert_eq!(info.device, h);
    assert_eq!(gpu_instances(&nvml, h, 9).unwrap(), vec![gi]);
    assert_eq!(gpu_instances(&nvml, h, 19).unwrap(), vec![]);
    // Overlap, bad placement, wrong size, unknown profile.
    assert_eq!(create_gi(&nvml, h, 5, 0, 4).err(), Some(INSUFFICIENT_RESOURCES));
    assert_eq!(create_gi(&nvml, h, 19, 2, 1).err(), Some(INSUFFICIENT_RESOURCES));
    assert_eq!(create_gi(&nvml, h, 9, 2, 4).err(), Some(INVALID));
    assert_eq!(create_gi(&nvml, h, 9, 4, 2).err(), Some(INVALID));
    assert_eq!(create_gi(&nvml, h, 99, 0, 1).err(), Some(INVALID));
    assert_eq!(create_gi(&nvml, h, 19, 7, 1).err(), Some(INVALID));
    // Remaining capacity: 1g.10gb (ID 19) fits at 4, 5, 6: three.
    let mut n = 0;
    assert_eq!(
        unsafe { f!(nvml, nvmlDeviceGetGpuInstanceRemainingCapacity)(h, 19, &mut n) },
        SUCCESS
    );
    assert_eq!(n, 3);
    // One +me per GPU (ID 20 = 1g.10gb+me).
    let me = create_gi(&nvml, h, 20, 4, 1).unwrap();
    assert_eq!(create_gi(&nvml, h, 20, 5, 1).err(), Some(INSUFFICIENT_RESOURCES));
    assert_eq!(destroy_gi(&nvml, me), SUCCESS);
    // The destroyed GI's handle no longer names anything.
    assert_eq!(gi_info(&nvml, me).err(), Some(INVALID));
    assert_eq!(destroy_gi(&nvml, me), INVALID);
    // Compute slices: 3g + 4g would need the same memory; 3g@0 + 3g@4 = 6 slices, then no 1g.
    let (gi2, ci2) = create_full(&nvml, h, 9, 4);
    assert_eq!(gi_info(&nvml, gi2).unwrap().id, 2);
    assert_eq!(
        create_gi(&nvml, h, 9, 0, 4).err(),
        Some(INSUFFICIENT_RESOURCES),
        "instance count 2"
    );
    // A CI that does not fit in its GI.
    assert_eq!(
        create_ci(&nvml, gi2, ci_profile(&nvml, gi2, 1)).err(),
        Some(INSUFFICIENT_RESOURCES)
    );

    // Destroy a GI that has a CI: IN_USE. A CI with a process: IN_USE.
    assert_eq!(destroy_gi(&nvml, gi), IN_USE);
    let migs = mig_devices(&nvml, 0);
    assert_eq!(
        migs.iter().map(|m| (m.0, m.1)).collect::<Vec<_>>(),
        vec![(1, 0), (2, 0)]
    );
    let me_pid = std::process::id();
    node.attach_process(&migs[0].2, me_pid).unwrap();
    assert_eq!(destroy_ci(&nvml, ci), IN_USE);
    let procs = d.running_compute_processes().unwrap();
    assert_eq!(procs.len(), 1);
    assert_eq!(
        (procs[0].pid, procs[0].gpu_instance_id, procs[0].compute_instance_id),
        (me_pid, Some(1), Some(0))
    );
    // MIG mode with instances: IN_USE.
    assert!(matches!(d.set_mig_mode(false), Err(NvmlError::InUse)));
    assert!(node.detach_process(me_pid).unwrap());
    assert_eq!(destroy_ci(&nvml, ci), SUCCESS);
    assert_eq!(destroy_ci(&nvml, ci), INVALID);
    assert_eq!(destroy_gi(&nvml, gi), SUCCESS);
    assert_eq!(destroy_ci(&nvml, ci2), SUCCESS);
    assert_eq!(destroy_gi(&nvml, gi2), SUCCESS);
    assert!(node.read().unwrap().gpus[0].gpu_instances.is_empty());
    // The lowest free id again.
    let (gi3, _) = create_full(&nvml, h, 0, 0);
    assert_eq!(gi_info(&nvml, gi3).unwrap().id, 1);
    assert_eq!(create_gi(&nvml, h, 19, 0, 1).err(), Some(INSUFFICIENT_RESOURCES));
}

#[test]
fn too_many_of_a_profile_and_the_count_query() {
    let dir = tempfile::tempdir().unwrap();
    let node = install(dir.path(), &mig_on("capture:h100-80gb", 1));
    let nvml = load(&node);
    let h = dev(&nvml, 0);
    for s in 0..7 {
        create_full(&nvml, h, 19, s);
    }
    assert_eq!(create_gi(&nvml, h, 19, 6, 1).err(), Some(INSUFFICIENT_RESOURCES));
    let mut n = 0;
    assert_eq!(
        unsafe { f!(nvml, nvmlDeviceGetGpuInstanceRemainingCapacity)(h, 19, &mut n) },
        SUCCESS
    );
    assert_eq!(n, 0);
    assert_eq!(mig_devices(&nvml, 0).len(), 7);
    // Processes: count query with *count = 0 answers INSUFFICIENT_SIZE and the count.
    let migs = mig_devices(&nvml, 0);
    node.attach_process(&migs[2].2, std::process::id()).unwrap();
    node.attach_process(&migs[5].2, std::process::id()).unwrap();
    let mut count = 0;
    let c = unsafe { f!(nvml, nvmlDeviceGetComputeRunningProcesses_v3)(h, &mut count, std::ptr::null_mut()) };
    assert_eq!((c, count), (INSUFFICIENT_SIZE, 2));
    let d = nvml.device_by_index(0).unwrap();
    let gis: Vec<_> = d
        .running_compute_processes()
        .unwrap()
        .iter()
        .map(|p| p.gpu_instance_id.unwrap())
        .collect();
    assert_eq!(gis, vec![migs[2].0, migs[5].0]);
    // Power rises with busy instances.
    assert!(d.power_usage().unwrap() > 71_500);
    // Memory used is the processes'.
    assert_eq!(d.memory_info().unwrap().used, 2 * 1024 * 1024 * 1024);
}

#[test]
fn compute_instance_info_names_the_parent_and_mig_uuids_differ() {
    let dir = tempfile::tempdir().unwrap();
    let node = install(dir.path(), &mig_on("capture:h100-80gb", 2));
    let nvml = load(&node);
    let h = dev(&nvml, 1);
    let (gi, ci) = create_full(&nvml, h, 14, 2);
    let info = ci_info(&nvml, ci).unwrap();
    assert_eq!(info.device, h, "the parent GPU's handle, as the driver fills it");
    assert_eq!(info.gpuInstance, gi);
    assert_eq!((info.id, info.placement.start, info.placement.size), (0, 0, 2));
    let parent = nvml.device_by_index(1).unwrap();
    let parent_uuid = parent.uuid().unwrap();
    let mig = parent.mig_device_by_index(0).unwrap();
    let mig_uuid = mig.uuid().unwrap();
    assert!(mig_uuid.starts_with("MIG-") && mig_uuid.len() == 40, "{mig_uuid}");
    assert_ne!(
        mig_uuid.trim_start_matches("MIG-"),
        parent_uuid.trim_start_matches("GPU-")
    );
    assert!(mig.mig_is_mig_device_handle().unwrap());
    assert!(!parent.mig_is_mig_device_handle().unwrap());
    assert_eq!(unsafe { mig.mig_parent_device().unwrap().handle() }, h);
    assert_eq!(mig.name().unwrap(), "NVIDIA H100 80GB HBM3 MIG 2g.20gb");
    assert_eq!(mig.memory_info().unwrap().total, 20096 * 1024 * 1024);
    assert!(matches!(parent.mig_device_by_index(1), Err(NvmlError::NotFound)));
    assert!(matches!(parent.mig_device_by_index(7), Err(NvmlError::InvalidArg)));
    // The GPU has no GI/CI id; the MIG device does.
    let mut id = 0;
    assert_eq!(
        unsafe { f!(nvml, nvmlDeviceGetGpuInstanceId)(h, &mut id) },
        NOT_SUPPORTED
    );
    // By UUID.
    let again = nvml.device_by_uuid(mig_uuid.as_str()).unwrap();
    assert_eq!(again.uuid().unwrap(), mig_uuid);
    // A new CI gets a new UUID, never the old one.
    assert_eq!(destroy_ci(&nvml, ci), SUCCESS);
    create_ci(&nvml, gi, ci_profile(&nvml, gi, 2)).unwrap();
    let uuid2 = parent.mig_device_by_index(0).unwrap().uuid().unwrap();
    assert_ne!(uuid2, mig_uuid);
    assert!(matches!(
        nvml.device_by_uuid(mig_uuid.as_str()),
        Err(NvmlError::NotFound)
    ));
}

#[test]
fn dead_processes_vanish() {
    let dir = tempfile::tempdir().unwrap();
    let node = install(dir.path(), &mig_on("capture:h200", 1));
    let nvml = load(&node);
    let h = dev(&nvml, 0);
    create_full(&nvml, h, 0, 0);
    let uuid = mig_devices(&nvml, 0)[0].2.clone();
    let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
    node.attach_process(&uuid, child.id()).unwrap();
    let d = nvml.device_by_index(0).unwrap();
    assert_eq!(d.running_compute_processes().unwrap().len(), 1);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(d.running_compute_processes().unwrap().is_empty());
    assert!(node.read().unwrap().gpus[0].processes.is_empty());
}

#[test]
fn a_fault_fires_once_on_the_nth_call() {
    let dir = tempfile::tempdir().unwrap();
    let node = install(dir.path(), &mig_on("capture:h100-80gb", 1));
    let nvml = load(&node);
    let h = dev(&nvml, 0);
    node.set_faults(vec![Fault {
        function: "nvmlGpuInstanceCreateComputeInstance".into(),
        after: 2,
        error: Some("INSUFFICIENT_RESOURCES".into()),
        hang_ms: None,
    }])
    .unwrap();
    let gis: Vec<_> = (0..3).map(|s| create_gi(&nvml, h, 14, s * 2, 2).unwrap()).collect();
    let p = ci_profile(&nvml, gis[0], 2);
    assert!(create_ci(&nvml, gis[0], p).is_ok());
    assert_eq!(create_ci(&nvml, gis[1], p).err(), Some(INSUFFICIENT_RESOURCES));
    assert!(create_ci(&nvml, gis[1], p).is_ok());
    assert!(create_ci(&nvml, gis[2], p).is_ok());
    assert!(node.read().unwrap().faults.is_empty());
    assert_eq!(node.call_count("nvmlGpuInstanceCreateComputeInstance").unwrap(), 4);
    assert!(node
        .set_faults(vec![Fault {
            function: "x".into(),
            after: 1,
            error: Some("NOPE".into()),
            hang_ms: None
        }])
        .is_err());
}

#[test]
fn a_hang_delays_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let node = install(dir.path(), &NodeSpec::new("capture:h100-80gb", 1));
    let nvml = load(&node);
    node.set_faults(vec![
        Fault {
            function: "nvmlDeviceGetMigMode".into(),
            after: 1,
            error: None,
            hang_ms: Some(400),
        },
        Fault {
            function: "nvmlDeviceGetPowerUsage".into(),
            after: 1,
            error: Some("TIMEOUT".into()),
            hang_ms: Some(200),
        },
    ])
    .unwrap();
    let d = nvml.device_by_index(0).unwrap();
    let t = Instant::now();
    assert_eq!(d.mig_mode().unwrap().current, 0);
    assert!(t.elapsed() >= Duration::from_millis(400));
    let t = Instant::now();
    assert!(matches!(d.power_usage(), Err(NvmlError::Timeout)));
    assert!(t.elapsed() >= Duration::from_millis(200));
    let t = Instant::now();
    d.mig_mode().unwrap();
    d.power_usage().unwrap();
    assert!(t.elapsed() < Duration::from_millis(200));
}

#[test]
fn init_is_counted_per_process_and_needs_the_state() {
    let dir = tempfile::tempdir().unwrap();
    let node = install(dir.path(), &NodeSpec::new("capture:h100-80gb", 1));
    assert_eq!(node.init_count(std::process::id()).unwrap(), 0);
    {
        let _a = load(&node);
        assert_eq!(node.init_count(std::process::id()).unwrap(), 1);
        let _b = load(&node);
        assert_eq!(node.init_count(std::process::id()).unwrap(), 2);
    }
    // No state file: the driver is not loaded.
    std::fs::remove_file(dir.path().join("standin.json")).unwrap();
    let path = node.library_path();
    let r = nvml_wrapper::Nvml::builder().lib_path(path.as_os_str()).init();
    assert!(matches!(r, Err(NvmlError::DriverNotLoaded)), "{r:?}");
    assert!(StandIn::open(dir.path()).is_err());
}

#[test]
fn a_lost_gpu_fails_every_call() {
    let dir = tempfile::tempdir().unwrap();
    let node = install(dir.path(), &mig_on("A100-40GB", 2));
    let nvml = load(&node);
    let d1 = nvml.device_by_index(1).unwrap();
    node.set_lost(1, true).unwrap();
    assert!(matches!(d1.name(), Err(NvmlError::GpuLost)));
    assert!(matches!(d1.mig_mode(), Err(NvmlError::GpuLost)));
    assert!(matches!(nvml.device_by_index(1), Err(NvmlError::GpuLost)));
    assert!(nvml.device_by_index(0).unwrap().name().is_ok());
    assert_eq!(nvml.device_count().unwrap(), 2);
}

/// A board without MIG (its profiles cleared in the state): MIG calls are not supported.
#[test]
fn a_board_without_mig() {
    let dir = tempfile::tempdir().unwrap();
    let node = install(dir.path(), &NodeSpec::new("A100-80GB", 1));
    node.update(|s| s.gpus[0].board.profiles.clear()).unwrap();
    let nvml = load(&node);
    let d = nvml.device_by_index(0).unwrap();
    assert!(matches!(d.mig_mode(), Err(NvmlError::NotSupported)));
    assert!(matches!(d.set_mig_mode(true), Err(NvmlError::NotSupported)));
    assert_eq!(d.mig_device_count().unwrap(), 0);
    let h = dev(&nvml, 0);
    assert_eq!(profile_info(&nvml, h, 0).err(), Some(NOT_SUPPORTED));
    assert_eq!(placements(&nvml, h, 19).err(), Some(NOT_SUPPORTED));
    assert_eq!(create_gi(&nvml, h, 19, 0, 1).err(), Some(NOT_SUPPORTED));
    assert!(d.name().is_ok() && d.power_usage().is_ok());
}

#[test]
fn mode_change_pending_until_reset() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = NodeSpec::new("A100-80GB", 1);
    spec.mode_change_needs_reset = true;
    let node = install(dir.path(), &spec);
    let nvml = load(&node);
    let d = nvml.device_by_index(0).unwrap();
    assert_eq!(d.set_mig_mode(true).unwrap(), RESET_REQUIRED);
    let m = d.mig_mode().unwrap();
    assert_eq!((m.current, m.pending), (0, 1));
    assert_eq!(create_gi(&nvml, dev(&nvml, 0), 19, 0, 1).err(), Some(NOT_SUPPORTED));
    node.reset_gpu(0).unwrap();
    let m = d.mig_mode().unwrap();
    assert_eq!((m.current, m.pending), (1, 1));
}

#[test]
fn mutating_calls_need_root_when_the_spec_says() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = mig_on("A100-80GB", 1);
    spec.require_root = true;
    let node = install(dir.path(), &spec);
    let nvml = load(&node);
    let r = create_gi(&nvml, dev(&nvml, 0), 19, 0, 1);
    if unsafe { libc::geteuid() } != 0 {
        assert_eq!(r.err(), Some(sys::nvmlReturn_enum_NVML_ERROR_NO_PERMISSION));
        return;
    }
    assert!(r.is_ok());
    // As root: a child that drops to nobody is refused (the folder opened up for it).
    use std::os::unix::fs::PermissionsExt;
    for (p, mode) in [("", 0o777), ("standin.json", 0o666), ("standin.lock", 0o666)] {
        std::fs::set_permissions(dir.path().join(p), std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let status = run_child_with(dir.path(), &[("NVML_STANDIN_TEST_CHILD_NOBODY", "1")]);
    assert!(status.success(), "{status:?}");
    assert_eq!(node.read().unwrap().gpus[0].gpu_instances.len(), 1);
}

/// Every symbol FUNCTIONS.md lists is exported by the built library.
#[test]
fn functions_md_symbols_are_exported() {
    let md = std::fs::read_to_string(format!("{}/FUNCTIONS.md", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let mut names: Vec<String> = Vec::new();
    for line in md.lines().filter(|l| l.starts_with("| `nvml")) {
        let first = line.split('|').nth(1).unwrap();
        names.extend(first.split('`').filter(|w| w.starts_with("nvml")).map(String::from));
        assert!(line.trim_end().ends_with("| yes |"), "{line}");
    }
    assert_eq!(names.len(), 47, "{names:?}");
    assert!(
        names.iter().all(|n| nvml_standin::ffi::EXPORTED.contains(&n.as_str())),
        "{names:?}"
    );
    let lib = nvml_standin::built_cdylib().expect(nvml_standin::BUILD_HINT);
    let path = std::ffi::CString::new(lib.to_str().unwrap()).unwrap();
    unsafe {
        let h = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        assert!(!h.is_null());
        for n in nvml_standin::ffi::EXPORTED {
            let c = std::ffi::CString::new(*n).unwrap();
            assert!(!libc::dlsym(h, c.as_ptr()).is_null(), "{n} not exported");
        }
        libc::dlclose(h);
    }
}

/// Every table board, whatever its slices: the smallest profile fills its placements, then
/// neither another of it nor the full profile fits; alone, the full profile does.
#[test]
fn every_table_board_fills_and_refuses() {
    for m in MODELS {
        let dir = tempfile::tempdir().unwrap();
        let node = install(dir.path(), &mig_on(m.name, 1));
        let nvml = load(&node);
        let h = dev(&nvml, 0);
        let d = nvml.device_by_index(0).unwrap();
        assert_eq!(d.mig_device_count().unwrap(), u32::from(m.compute_slices), "{}", m.name);
        let small = m.schedulable_profiles()[0];
        let mut made = Vec::new();
        for &s in small.placement_starts.iter().take(usize::from(small.max_instances)) {
            made.push(create_full(&nvml, h, small.id, u32::from(s)));
        }
        assert_eq!(mig_devices(&nvml, 0).len(), made.len(), "{}", m.name);
        let first = u32::from(small.placement_starts[0]);
        let size = u32::from(small.memory_slices);
        assert_eq!(
            create_gi(&nvml, h, small.id, first, size).err(),
            Some(INSUFFICIENT_RESOURCES),
            "{}",
            m.name
        );
        let full = m.full_profile();
        let fsize = u32::from(full.memory_slices);
        assert_eq!(
            create_gi(&nvml, h, full.id, 0, fsize).err(),
            Some(INSUFFICIENT_RESOURCES),
            "{}",
            m.name
        );
        for (gi, ci) in made {
            assert_eq!(destroy_ci(&nvml, ci), SUCCESS);
            assert_eq!(destroy_gi(&nvml, gi), SUCCESS);
        }
        create_full(&nvml, h, full.id, 0);
        assert_eq!(mig_devices(&nvml, 0).len(), 1, "{}", m.name);
    }
}

/// A30 (4 compute, 4 memory slices): nothing assumes 7 or 8.
#[test]
fn a_four_slice_board() {
    let four: Vec<_> = MODELS.iter().filter(|m| m.compute_slices == 4).collect();
    assert!(!four.is_empty(), "a 4-slice table exists (A30)");
    for m in four {
        let dir = tempfile::tempdir().unwrap();
        let node = install(dir.path(), &mig_on(m.name, 1));
        let nvml = load(&node);
        let h = dev(&nvml, 0);
        let d = nvml.device_by_index(0).unwrap();
        assert_eq!(d.mig_device_count().unwrap(), 4);
        let one = m
            .profiles
            .iter()
            .find(|p| p.compute_slices == 1 && !p.media_extensions)
            .unwrap();
        for s in one.placement_starts {
            create_full(&nvml, h, one.id, u32::from(*s));
        }
        assert_eq!(mig_devices(&nvml, 0).len(), one.placement_starts.len());
        assert_eq!(create_gi(&nvml, h, one.id, 0, 1).err(), Some(INSUFFICIENT_RESOURCES));
        let full = m.full_profile();
        assert_eq!(
            placements(&nvml, h, full.id).unwrap(),
            vec![(0, u32::from(m.memory_slices))],
            "{}",
            m.name
        );
        assert!(matches!(d.mig_device_by_index(4), Err(NvmlError::InvalidArg)));
    }
}

#[test]
fn device_files_under_device_root() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let mut spec = mig_on("capture:h100-80gb", 2);
    spec.device_root = Some(root.clone());
    let node = install(&dir.path().join("lib"), &spec);
    let nvml = load(&node);
    assert!(root.join("dev/nvidia0").exists() && root.join("dev/nvidia1").exists());
    let mm = std::fs::read_to_string(root.join("proc/driver/nvidia-caps/mig-minors")).unwrap();
    assert!(mm.starts_with("config 1\nmonitor 2\n"));
    create_full(&nvml, dev(&nvml, 1), 14, 0);
    // gpu1/gi1/access and gpu1/gi1/ci0/access.
    let line = |p: &str| -> u32 {
        mm.lines()
            .find_map(|l| l.strip_prefix(p).map(|m| m.trim().parse().unwrap()))
            .unwrap()
    };
    let gi_minor = line("gpu1/gi1/access ");
    let ci_minor = line("gpu1/gi1/ci0/access ");
    assert!(root.join(format!("dev/nvidia-caps/nvidia-cap{gi_minor}")).exists());
    assert!(root.join(format!("dev/nvidia-caps/nvidia-cap{ci_minor}")).exists());
}

#[test]
fn two_library_copies_in_one_process_are_two_nodes() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let na = install(a.path(), &mig_on("capture:h100-80gb", 1));
    let nb = install(b.path(), &mig_on("A100-40GB", 3));
    let (va, vb) = (load(&na), load(&nb));
    assert_eq!(va.device_count().unwrap(), 1);
    assert_eq!(vb.device_count().unwrap(), 3);
    create_full(&va, dev(&va, 0), 0, 0);
    assert_eq!(na.read().unwrap().gpus[0].gpu_instances.len(), 1);
    assert!(nb.read().unwrap().gpus.iter().all(|g| g.gpu_instances.is_empty()));
}

/// The child half of the two-process tests: runs only when the parent sets the variable.
#[test]
fn child_process_entry() {
    let Ok(dir) = std::env::var("NVML_STANDIN_TEST_CHILD_DIR") else {
        return;
    };
    let node = StandIn::open(std::path::Path::new(&dir)).unwrap();
    if std::env::var_os("NVML_STANDIN_TEST_CHILD_NOBODY").is_some() {
        // Drop root (the parent checked it is root), then a mutating call is refused and
        // a read still works.
        unsafe {
            assert_eq!(libc::setgid(65534), 0);
            assert_eq!(libc::setuid(65534), 0);
        }
        let nvml = load(&node);
        assert_eq!(
            create_gi(&nvml, dev(&nvml, 0), 19, 0, 1).err(),
            Some(sys::nvmlReturn_enum_NVML_ERROR_NO_PERMISSION)
        );
        assert!(nvml.device_by_index(0).unwrap().mig_mode().is_ok());
        return;
    }
    let nvml = load(&node);
    create_full(&nvml, dev(&nvml, 0), 9, 4);
}

fn run_child(dir: &std::path::Path) -> std::process::ExitStatus {
    run_child_with(dir, &[])
}

fn run_child_with(dir: &std::path::Path, env: &[(&str, &str)]) -> std::process::ExitStatus {
    std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_process_entry", "--nocapture", "--test-threads=1"])
        .env("NVML_STANDIN_TEST_CHILD_DIR", dir)
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
}

#[test]
fn state_is_shared_between_processes() {
    let dir = tempfile::tempdir().unwrap();
    let node = install(dir.path(), &mig_on("capture:h100-80gb", 1));
    let nvml = load(&node);
    assert!(mig_devices(&nvml, 0).is_empty());
    let status = run_child(dir.path());
    assert!(status.success());
    let migs = mig_devices(&nvml, 0);
    assert_eq!(migs.len(), 1);
    assert_eq!(migs[0].0, 1);
    let gi = gpu_instances(&nvml, dev(&nvml, 0), 9).unwrap();
    assert_eq!(gi_info(&nvml, gi[0]).unwrap().placement.start, 4);
    // The child initialised NVML once; this process once.
    let s = node.read().unwrap();
    assert_eq!(s.inits.len(), 2);
    assert!(s.inits.values().all(|&n| n == 1));
}

#[test]
fn crash_after_mutations_kills_after_saving() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let node = install(dir.path(), &mig_on("capture:h100-80gb", 1));
    // The child's GI create is its first mutation: saved, then SIGKILL before the CI.
    node.crash_after_mutations(1).unwrap();
    let status = run_child(dir.path());
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    let s = node.read().unwrap();
    assert_eq!(s.crash_after_mutations, None);
    assert_eq!(s.gpus[0].gpu_instances.len(), 1);
    assert!(s.gpus[0].gpu_instances[0].compute_instances.is_empty());
}

#[test]
fn error_strings_and_uninitialised_use() {
    let dir = tempfile::tempdir().unwrap();
    let node = install(dir.path(), &NodeSpec::new("capture:h100-80gb", 1));
    let nvml = load(&node);
    let s = unsafe { std::ffi::CStr::from_ptr(f!(nvml, nvmlErrorString)(IN_USE)) };
    assert_eq!(s.to_str().unwrap(), "In use by another client");
    let _ = NOT_FOUND;
    // Null pointers are refused, never dereferenced.
    let c = unsafe { f!(nvml, nvmlDeviceGetCount_v2)(std::ptr::null_mut()) };
    assert_eq!(c, INVALID);
    let c = unsafe { f!(nvml, nvmlDeviceGetName)(dev(&nvml, 0), std::ptr::null_mut(), 96) };
    assert_eq!(c, INVALID);
    let mut small = [0 as std::os::raw::c_char; 4];
    let c = unsafe { f!(nvml, nvmlDeviceGetName)(dev(&nvml, 0), small.as_mut_ptr(), 4) };
    assert_eq!(c, INSUFFICIENT_SIZE);
    // A made-up handle is an invalid argument.
    let c = unsafe { f!(nvml, nvmlDeviceGetName)(0x1234 as sys::nvmlDevice_t, small.as_mut_ptr(), 4) };
    assert_eq!(c, INVALID);
    // After the last shutdown the library answers UNINITIALIZED.
    let shutdown = *f!(nvml, nvmlShutdown);
    let count = *f!(nvml, nvmlDeviceGetCount_v2);
    let init = *f!(nvml, nvmlInit_v2);
    unsafe {
        assert_eq!(shutdown(), SUCCESS);
        let mut n = 0;
        assert_eq!(count(&mut n), sys::nvmlReturn_enum_NVML_ERROR_UNINITIALIZED);
        assert_eq!(init(), SUCCESS);
    }
    let _ = DRIVER_NOT_LOADED;
    let _ = GPU_IS_LOST;
}
