//! What NVML reports about the node's GPUs (`dynmig gpu probe`), and where it differs from
//! dynmig's built-in geometry tables ([`dynmig_core::geometry::MODELS`]).
//!
//! [`crate::NvmlBackend::probe`] reads a [`ProbeReport`] (read-only queries: no MIG mode change, no
//! instance created or destroyed); [`compare`] checks it against the tables. The report is
//! plain serde data, so that a report taken on real hardware can be committed as a test
//! fixture and the tables tested against it without a GPU (see `tests/fixtures/`: captures
//! from an H100 80GB and an H200, docs/results/hardware-2026-11-26.md).

use dynmig_core::geometry::{model_for_device, GpuModel, ProfileSpec};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// Everything the probe read from NVML.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeReport {
    /// `nvmlSystemGetDriverVersion`, if it answered.
    pub driver_version: Option<String>,
    /// `nvmlSystemGetNVMLVersion`, if it answered.
    pub nvml_version: Option<String>,
    /// One entry per GPU, NVML index order.
    pub gpus: Vec<ProbedGpu>,
}

/// One physical GPU as NVML reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbedGpu {
    /// NVML device index.
    pub index: u32,
    /// `nvmlDeviceGetName`, e.g. `"NVIDIA H100 80GB HBM3"`.
    pub name: String,
    /// PCI device ID: the upper 16 bits of `nvmlPciInfo_t.pciDeviceId` (e.g. `0x2330`).
    pub pci_device_id: u16,
    /// Total memory with MIG off or on, MiB (`nvmlDeviceGetMemoryInfo`).
    pub memory_total_mib: Option<u64>,
    /// Current MIG mode (`nvmlDeviceGetMigMode`); `None` if NVML refused (no MIG support).
    pub mig_current: Option<bool>,
    /// Pending MIG mode (applies after a reset on Ampere, a reboot otherwise).
    pub mig_pending: Option<bool>,
    /// The GPU-instance profiles NVML answered for, in profile-index order.
    pub profiles: Vec<ProbedProfile>,
    /// Profile indices NVML refused, with the return code name (e.g. with MIG off, or
    /// profiles the GPU lacks: `NVML_ERROR_NOT_SUPPORTED`, `NVML_ERROR_INVALID_ARGUMENT`).
    pub profile_errors: Vec<(u32, String)>,
    /// The GPU instances that exist now.
    pub instances: Vec<ProbedInstance>,
    /// Errors of other queries, as text (which call, which code).
    pub errors: Vec<String>,
}

/// One GPU-instance profile (`nvidia-smi mig -lgip` row plus `-lgipp` placements).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbedProfile {
    /// NVML profile index (`NVML_GPU_INSTANCE_PROFILE_*`) the query used.
    pub index: u32,
    /// Profile ID (`nvidia-smi` column `ID`).
    pub id: u32,
    /// NVML's name (`"MIG 1g.10gb"`), from the version-2 query; `None` on older drivers.
    pub name: Option<String>,
    /// Compute slices.
    pub slice_count: u32,
    /// Most instances.
    pub instance_count: u32,
    /// Streaming multiprocessors of one instance.
    pub multiprocessor_count: u32,
    /// Memory of one instance, MiB.
    pub memory_mib: u64,
    /// Placements `(start, size)` in memory slices.
    pub placements: Vec<(u32, u32)>,
}

/// One GPU instance that exists.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbedInstance {
    /// GPU-instance id.
    pub gi_id: u32,
    /// Profile ID.
    pub profile_id: u32,
    /// Start memory slice.
    pub start: u32,
    /// Memory slices.
    pub size: u32,
    /// Compute-instance ids inside it.
    pub ci_ids: Vec<u32>,
}

/// What [`compare`] found for one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuComparison {
    /// NVML index.
    pub index: u32,
    /// The built-in model matched by PCI ID or name, if any.
    pub model: Option<&'static GpuModel>,
    /// Whether the profiles could be checked (NVML reported some).
    pub checked: bool,
    /// Each difference, one sentence each; empty when the table matches.
    pub differences: Vec<String>,
}

/// `"MIG 1g.10gb"` -> `"1g.10gb"`.
fn bare_name(n: &str) -> &str {
    n.strip_prefix("MIG ").unwrap_or(n).trim()
}

/// Compares every GPU of `report` with the built-in table of its model.
///
/// A profile is matched by ID; then its name, compute slices, instance count, memory slices
/// (placement size), placement starts and MiB are compared, and the whole GPU's memory.
/// Profiles on one side only are differences too. A GPU for which NVML listed no profiles
/// (MIG unsupported, or a driver that answers only with MIG on) is reported as not checked.
pub fn compare(report: &ProbeReport) -> Vec<GpuComparison> {
    report.gpus.iter().map(compare_gpu).collect()
}

fn compare_gpu(g: &ProbedGpu) -> GpuComparison {
    let mut d = Vec::new();
    let model = model_for_device(g.pci_device_id, &g.name);
    let Some(m) = model else {
        d.push(format!(
            "no built-in table for '{}' (PCI device ID 0x{:04X}); dynmig cannot drive this GPU",
            g.name, g.pci_device_id
        ));
        return GpuComparison {
            index: g.index,
            model,
            checked: false,
            differences: d,
        };
    };
    if !m.pci_device_ids.contains(&g.pci_device_id) {
        d.push(format!(
            "PCI device ID 0x{:04X} is not in the {} table (matched by name); add it",
            g.pci_device_id, m.name
        ));
    }
    if let Some(total) = g.memory_total_mib {
        if total != m.total_memory_mib {
            d.push(format!(
                "total memory: table {} MiB, NVML {total} MiB",
                m.total_memory_mib
            ));
        }
    }
    if g.profiles.is_empty() {
        return GpuComparison {
            index: g.index,
            model,
            checked: false,
            differences: d,
        };
    }
    for p in m.profiles {
        match g.profiles.iter().find(|q| q.id == p.id) {
            None => d.push(format!(
                "{} (ID {}) is in the table but NVML does not report it",
                p.name, p.id
            )),
            Some(q) => compare_profile(p, q, &mut d),
        }
    }
    for q in &g.profiles {
        if m.profiles.iter().all(|p| p.id != q.id) {
            d.push(format!(
                "NVML reports profile ID {} ({}, {} slices, {} MiB) which the table lacks",
                q.id,
                q.name.as_deref().unwrap_or("no name"),
                q.slice_count,
                q.memory_mib
            ));
        }
    }
    GpuComparison {
        index: g.index,
        model,
        checked: true,
        differences: d,
    }
}

fn compare_profile(p: &ProfileSpec, q: &ProbedProfile, d: &mut Vec<String>) {
    let who = format!("{} (ID {})", p.name, p.id);
    if let Some(n) = &q.name {
        if bare_name(n) != p.name {
            d.push(format!("{who}: NVML names it '{}'", bare_name(n)));
        }
    }
    if q.slice_count != u32::from(p.compute_slices) {
        d.push(format!(
            "{who}: compute slices: table {}, NVML {}",
            p.compute_slices, q.slice_count
        ));
    }
    if q.instance_count != u32::from(p.max_instances) {
        d.push(format!(
            "{who}: max instances: table {}, NVML {}",
            p.max_instances, q.instance_count
        ));
    }
    if q.memory_mib != p.memory_mib {
        d.push(format!(
            "{who}: memory: table {} MiB, NVML {} MiB",
            p.memory_mib, q.memory_mib
        ));
    }
    if !q.placements.is_empty() {
        let mut starts: Vec<u32> = q.placements.iter().map(|(s, _)| *s).collect();
        starts.sort_unstable();
        let table: Vec<u32> = p.placement_starts.iter().map(|&s| u32::from(s)).collect();
        if starts != table {
            d.push(format!("{who}: placement starts: table {table:?}, NVML {starts:?}"));
        }
        if let Some((_, size)) = q.placements.iter().find(|(_, s)| *s != u32::from(p.memory_slices)) {
            d.push(format!(
                "{who}: memory slices: table {}, NVML placement size {size}",
                p.memory_slices
            ));
        }
    }
}

/// The probe's text output: per GPU, what NVML reported, then the differences.
pub fn render(report: &ProbeReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "driver {}, NVML {}, {} GPU(s)",
        report.driver_version.as_deref().unwrap_or("?"),
        report.nvml_version.as_deref().unwrap_or("?"),
        report.gpus.len()
    );
    for (g, c) in report.gpus.iter().zip(compare(report)) {
        let mode = |m: Option<bool>| match m {
            Some(true) => "on",
            Some(false) => "off",
            None => "unsupported",
        };
        let _ = writeln!(
            out,
            "\nGPU {}: {} (PCI 0x{:04X}), {} MiB, MIG {} (pending {}), table: {}",
            g.index,
            g.name,
            g.pci_device_id,
            g.memory_total_mib.map_or("?".into(), |m| m.to_string()),
            mode(g.mig_current),
            mode(g.mig_pending),
            c.model.map_or("none", |m| m.name)
        );
        for p in &g.profiles {
            let starts: Vec<String> = p.placements.iter().map(|(s, _)| s.to_string()).collect();
            let size = p.placements.first().map_or(0, |(_, s)| *s);
            let _ = writeln!(
                out,
                "  profile {:>2} {:<14} slices {} max {} SMs {:>3} {:>6} MiB  placements {{{}}}:{size}",
                p.id,
                p.name.as_deref().map_or("?", bare_name),
                p.slice_count,
                p.instance_count,
                p.multiprocessor_count,
                p.memory_mib,
                starts.join(",")
            );
        }
        for (i, e) in &g.profile_errors {
            let _ = writeln!(out, "  profile index {i}: {e}");
        }
        for i in &g.instances {
            let _ = writeln!(
                out,
                "  instance GI {} profile {} at {}:{} CIs {:?}",
                i.gi_id, i.profile_id, i.start, i.size, i.ci_ids
            );
        }
        for e in &g.errors {
            let _ = writeln!(out, "  error: {e}");
        }
        if !c.checked {
            let _ = writeln!(out, "  table not checked: NVML listed no profiles");
        }
        if c.differences.is_empty() && c.checked {
            let _ = writeln!(out, "  matches the built-in table");
        }
        for d in &c.differences {
            let _ = writeln!(out, "  differs: {d}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `dynmig gpu probe --json` on an H100 80GB HBM3 with MIG off, driver 580.159.04,
    /// 2026-11-26 (docs/results/hardware-2026-11-26/h100/probe.json, byte for byte).
    const H100: &str = include_str!("../tests/fixtures/probe-h100-80gb.json");

    fn fixture() -> ProbeReport {
        serde_json::from_str(H100).expect("fixture parses")
    }

    #[test]
    fn h100_capture_matches_the_table() {
        let r = fixture();
        let c = compare(&r);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].model.unwrap().name, "H100-80GB");
        // With MIG off NVML still answers every profile, placements included.
        assert_eq!(r.gpus[0].mig_current, Some(false));
        assert!(c[0].checked);
        assert!(c[0].differences.is_empty(), "{:#?}", c[0].differences);
    }

    #[test]
    fn a_changed_memory_size_is_reported() {
        let mut r = fixture();
        r.gpus[0].memory_total_mib = Some(81920);
        r.gpus[0].profiles.iter_mut().find(|p| p.id == 19).unwrap().memory_mib = 9728;
        let d = &compare(&r)[0].differences;
        assert_eq!(
            d,
            &[
                "total memory: table 81559 MiB, NVML 81920 MiB".to_string(),
                "1g.10gb (ID 19): memory: table 9984 MiB, NVML 9728 MiB".to_string()
            ]
        );
    }

    #[test]
    fn changed_fields_are_reported() {
        let mut r = fixture();
        let g = &mut r.gpus[0];
        g.profiles.retain(|p| p.id != 20); // no 1g.10gb+me
        let three = g.profiles.iter_mut().find(|p| p.id == 9).unwrap();
        three.placements = vec![(0, 4), (2, 4)];
        three.instance_count = 3;
        g.profiles.push(ProbedProfile {
            index: 13,
            id: 32,
            name: Some("MIG 1g.10gb-me".into()),
            slice_count: 1,
            instance_count: 7,
            ..ProbedProfile::default()
        });
        let d = &compare(&r)[0].differences;
        let has = |s: &str| d.iter().any(|x| x.contains(s));
        assert!(
            has("1g.10gb+me (ID 20) is in the table but NVML does not report it"),
            "{d:#?}"
        );
        assert!(
            has("3g.40gb (ID 9): placement starts: table [0, 4], NVML [0, 2]"),
            "{d:#?}"
        );
        assert!(has("3g.40gb (ID 9): max instances: table 2, NVML 3"), "{d:#?}");
        assert!(has("NVML reports profile ID 32 (MIG 1g.10gb-me"), "{d:#?}");
    }

    #[test]
    fn unknown_gpu_and_empty_profile_list() {
        let mut r = fixture();
        r.gpus[0].profiles.clear();
        let c = compare(&r);
        assert!(!c[0].checked);
        assert!(render(&r).contains("table not checked"));
        r.gpus[0].pci_device_id = 0x1EB8;
        r.gpus[0].name = "Tesla T4".into();
        let c = compare(&r);
        assert!(c[0].model.is_none());
        assert!(c[0].differences[0].contains("no built-in table for 'Tesla T4' (PCI device ID 0x1EB8)"));
    }

    #[test]
    fn report_round_trips_through_json_and_renders() {
        let r = fixture();
        let again: ProbeReport = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(again, r);
        let text = render(&r);
        assert!(text.contains("GPU 0: NVIDIA H100 80GB HBM3 (PCI 0x2330)"), "{text}");
        assert!(text.contains("placements {0,4}:4"), "{text}");
        assert!(text.contains("MIG off (pending off), table: H100-80GB"), "{text}");
        assert!(text.contains("profile index 16: NVML_ERROR_NOT_SUPPORTED"), "{text}");
        assert!(text.contains("  matches the built-in table"), "{text}");
        assert!(!text.contains("differs"), "{text}");
    }
}
