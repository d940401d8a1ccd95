//! The built-in tables against NVML as it answered on real boards: `dynmig gpu probe --json`
//! captured on an H100 80GB HBM3 (PCI 0x2330) and an H200 SXM (PCI 0x2335), both with MIG
//! off, driver 580.159.04, 2026-11-26. The fixtures are byte-for-byte copies of
//! docs/results/hardware-2026-11-26/{h100,h200}/probe.json (docs/results/hardware-2026-11-26.md).

use dynmig_gpu::probe::{compare, render, ProbeReport};

const H100: &str = include_str!("fixtures/probe-h100-80gb.json");
const H200: &str = include_str!("fixtures/probe-h200.json");

fn report(json: &str) -> ProbeReport {
    serde_json::from_str(json).expect("capture parses")
}

/// One capture: a single GPU with MIG off, the expected table, and no difference.
fn matches(json: &str, name: &str, pci: u16, model: &str) {
    let r = report(json);
    assert_eq!(r.driver_version.as_deref(), Some("580.159.04"));
    assert_eq!(r.gpus.len(), 1);
    let g = &r.gpus[0];
    assert_eq!((g.name.as_str(), g.pci_device_id), (name, pci));
    assert_eq!((g.mig_current, g.mig_pending), (Some(false), Some(false)));
    // With MIG off, NVML answers all seven GPU-instance profiles with their placements.
    assert_eq!(g.profiles.len(), 7, "{name}");
    assert!(g.profiles.iter().all(|p| !p.placements.is_empty()), "{name}");
    assert!(g.instances.is_empty() && g.errors.is_empty(), "{name}");
    let c = compare(&r);
    assert_eq!(c[0].model.map(|m| m.name), Some(model));
    assert!(c[0].checked, "{name}");
    assert!(c[0].differences.is_empty(), "{name}: {:#?}", c[0].differences);
    assert!(render(&r).contains("  matches the built-in table"), "{}", render(&r));
}

#[test]
fn h100_80gb_capture_matches_its_table() {
    matches(H100, "NVIDIA H100 80GB HBM3", 0x2330, "H100-80GB");
}

#[test]
fn h200_capture_matches_its_table() {
    matches(H200, "NVIDIA H200", 0x2335, "H200-141GB");
}

/// The H200's smaller profiles hold less than the nominal estimate the table used before the
/// probe (95% of the name's GiB): 1g.18gb 16384 MiB, not 17472; 2g.35gb 33280, not 34048.
#[test]
fn h200_small_profiles_are_below_the_nominal_estimate() {
    let r = report(H200);
    let mib = |id: u32| r.gpus[0].profiles.iter().find(|p| p.id == id).unwrap().memory_mib;
    assert_eq!((mib(19), mib(20), mib(14), mib(15)), (16384, 16384, 33280, 33280));
    assert!(mib(19) < dynmig_core::geometry::nominal_mib(18));
    assert!(mib(14) < dynmig_core::geometry::nominal_mib(35));
}
