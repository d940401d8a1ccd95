//! Boards: what NVML reports about one GPU model, from a committed NVML capture or from
//! dynmig-core's geometry tables.
//!
//! # Profile indices of table boards
//!
//! NVML names GPU-instance profiles by an index (`NVML_GPU_INSTANCE_PROFILE_*` in nvml.h) and
//! an ID. dynmig's tables hold the ID but not the index, so the index is derived from the
//! profile's shape, as the H100 capture (`boards/probe-h100-80gb.json`, which lists both for
//! every profile) shows it:
//!
//! - the name's suffix first (nvml.h's later profile kinds, as NVIDIA names them in the MIG
//!   User Guide): `+me.all` -> `1_SLICE_ALL_ME` (15) / `2_SLICE_ALL_ME` (16); `-me` ->
//!   `1_SLICE_NO_ME` (13) / `2_SLICE_NO_ME` (14); `+gfx` -> `1_SLICE_GFX` (10) /
//!   `2_SLICE_GFX` (11) / `4_SLICE_GFX` (12);
//! - with media extensions (`+me`): 1 compute slice -> `1_SLICE_REV1` (7), 2 -> `2_SLICE_REV1` (8);
//! - 1 compute slice over more than 1 memory slice (`1g.20gb`, doubled memory) ->
//!   `1_SLICE_REV2` (9);
//! - otherwise by compute slices: 1 -> `1_SLICE` (0), 2 -> 1, 3 -> 2, 4 -> 3, 7 -> 4,
//!   8 -> `8_SLICE` (5), 6 -> `6_SLICE` (6).
//!
//! A table profile of any other shape has no index and is left out (it cannot be asked
//! about through NVML's by-index calls). Two table profiles mapping to one index: the first
//! (the table's order) wins. Nothing assumes 7 compute or 8 memory slices: the board's
//! slices are the model's `compute_slices` / `memory_slices`.

use dynmig_core::energy::PowerModel;
use dynmig_core::geometry::{model_by_name, model_for_device, GpuModel, ProfileSpec};
use nvml_wrapper_sys::bindings as sys;
use serde::{Deserialize, Serialize};

/// One GPU-instance profile as NVML reports it (`nvmlGpuInstanceProfileInfo_v2_t` and
/// `nvmlDeviceGetGpuInstancePossiblePlacements_v2`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoardProfile {
    /// NVML profile index (`NVML_GPU_INSTANCE_PROFILE_*`).
    pub index: u32,
    /// Profile ID (what create calls take).
    pub id: u32,
    /// NVML's name, e.g. `"MIG 1g.10gb"`.
    pub name: String,
    /// Compute slices (`sliceCount`).
    pub slice_count: u32,
    /// Memory slices one instance covers (the placements' `size`).
    pub memory_slices: u32,
    /// Most instances of the profile on the GPU (`instanceCount`).
    pub instance_count: u32,
    /// Streaming multiprocessors (`multiprocessorCount`).
    pub multiprocessor_count: u32,
    /// Memory in MiB (`memorySizeMB`).
    pub memory_mib: u64,
    /// Possible placements `(start, size)` in memory slices.
    pub placements: Vec<(u32, u32)>,
    /// Whether the profile has the media extensions (`+me`): at most one such GI per GPU.
    pub media_extensions: bool,
}

/// A GPU model as the stand-in reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Board {
    /// `nvmlDeviceGetName`, e.g. `"NVIDIA H100 80GB HBM3"`.
    pub name: String,
    /// dynmig's model name, for the power model; `None` if dynmig has no table for it.
    pub dynmig_model: Option<String>,
    /// PCI device ID (the upper 16 bits of `pciDeviceId`).
    pub pci_device_id: u16,
    /// Total memory of the whole GPU, MiB.
    pub total_memory_mib: u64,
    /// Compute slices of the whole GPU (0 for a board without MIG).
    pub compute_slices: u32,
    /// Memory slices of the whole GPU.
    pub memory_slices: u32,
    /// GPU-instance profiles, by index order; empty for a board without MIG.
    pub profiles: Vec<BoardProfile>,
    /// Where the figures come from.
    pub source: String,
}

impl Board {
    /// The profile with ID `id`.
    pub fn profile_by_id(&self, id: u32) -> Option<&BoardProfile> {
        self.profiles.iter().find(|p| p.id == id)
    }

    /// The profile with NVML index `index`.
    pub fn profile_by_index(&self, index: u32) -> Option<&BoardProfile> {
        self.profiles.iter().find(|p| p.index == index)
    }

    /// Whether the board supports MIG at all.
    pub fn has_mig(&self) -> bool {
        !self.profiles.is_empty()
    }

    /// Board power in W with busy instances of the given compute slices:
    /// [`PowerModel::for_model`] of the dynmig model, `None` without one.
    pub fn power_w(&self, busy_compute_slices: &[u8]) -> Option<f64> {
        let model = model_by_name(self.dynmig_model.as_deref()?)?;
        Some(PowerModel::for_model(model).board_w(busy_compute_slices))
    }
}

const H100_CAPTURE: &str = include_str!("../boards/probe-h100-80gb.json");
const H200_CAPTURE: &str = include_str!("../boards/probe-h200.json");

/// The capture names `capture:<name>` accepts.
pub const CAPTURES: &[&str] = &["h100-80gb", "h200"];

#[derive(Deserialize)]
struct Capture {
    driver_version: Option<String>,
    gpus: Vec<CapturedGpu>,
}

#[derive(Deserialize)]
struct CapturedGpu {
    name: String,
    pci_device_id: u16,
    memory_total_mib: u64,
    profiles: Vec<CapturedProfile>,
}

#[derive(Deserialize)]
struct CapturedProfile {
    index: u32,
    id: u32,
    name: String,
    slice_count: u32,
    instance_count: u32,
    multiprocessor_count: u32,
    memory_mib: u64,
    placements: Vec<(u32, u32)>,
}

/// The NVML profile index of a table profile (the rule in the module docs), `None` for a
/// shape NVML has no index for.
pub fn profile_index(p: &ProfileSpec) -> Option<u32> {
    let by_slices = |one: u32, two: u32, four: Option<u32>| match p.compute_slices {
        1 => Some(one),
        2 => Some(two),
        4 => four,
        _ => None,
    };
    if p.name.ends_with("+me.all") {
        return by_slices(
            sys::NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME,
            sys::NVML_GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME,
            None,
        );
    }
    if p.name.ends_with("-me") {
        return by_slices(
            sys::NVML_GPU_INSTANCE_PROFILE_1_SLICE_NO_ME,
            sys::NVML_GPU_INSTANCE_PROFILE_2_SLICE_NO_ME,
            None,
        );
    }
    if p.name.ends_with("+gfx") {
        return by_slices(
            sys::NVML_GPU_INSTANCE_PROFILE_1_SLICE_GFX,
            sys::NVML_GPU_INSTANCE_PROFILE_2_SLICE_GFX,
            Some(sys::NVML_GPU_INSTANCE_PROFILE_4_SLICE_GFX),
        );
    }
    if p.media_extensions {
        return match p.compute_slices {
            1 => Some(sys::NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1),
            2 => Some(sys::NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1),
            _ => None,
        };
    }
    if p.compute_slices == 1 && p.memory_slices > 1 {
        return Some(sys::NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2);
    }
    match p.compute_slices {
        1 => Some(sys::NVML_GPU_INSTANCE_PROFILE_1_SLICE),
        2 => Some(sys::NVML_GPU_INSTANCE_PROFILE_2_SLICE),
        3 => Some(sys::NVML_GPU_INSTANCE_PROFILE_3_SLICE),
        4 => Some(sys::NVML_GPU_INSTANCE_PROFILE_4_SLICE),
        6 => Some(sys::NVML_GPU_INSTANCE_PROFILE_6_SLICE),
        7 => Some(sys::NVML_GPU_INSTANCE_PROFILE_7_SLICE),
        8 => Some(sys::NVML_GPU_INSTANCE_PROFILE_8_SLICE),
        _ => None,
    }
}

/// The board of a dynmig table model. Multiprocessors are not in the tables: 16 per compute
/// slice is assumed (the H100's 1g; the capture boards carry the real counts).
pub fn from_model(m: &GpuModel) -> Board {
    let mut profiles: Vec<BoardProfile> = Vec::new();
    for p in m.profiles {
        let Some(index) = profile_index(p) else { continue };
        if profiles.iter().any(|q| q.index == index) {
            continue;
        }
        profiles.push(BoardProfile {
            index,
            id: p.id,
            name: format!("MIG {}", p.name),
            slice_count: u32::from(p.compute_slices),
            memory_slices: u32::from(p.memory_slices),
            instance_count: u32::from(p.max_instances),
            multiprocessor_count: 16 * u32::from(p.compute_slices),
            memory_mib: p.memory_mib,
            placements: p
                .placement_starts
                .iter()
                .map(|&s| (u32::from(s), u32::from(p.memory_slices)))
                .collect(),
            media_extensions: p.media_extensions,
        });
    }
    profiles.sort_by_key(|p| p.index);
    Board {
        name: format!("NVIDIA {}", m.aliases.first().copied().unwrap_or(m.name)),
        dynmig_model: Some(m.name.to_string()),
        pci_device_id: m.pci_device_ids.first().copied().unwrap_or(0),
        total_memory_mib: m.total_memory_mib,
        compute_slices: u32::from(m.compute_slices),
        memory_slices: u32::from(m.memory_slices),
        profiles,
        source: format!("dynmig-core geometry table {}: {}", m.name, m.source),
    }
}

fn from_capture(text: &str, what: &str) -> Result<Board, String> {
    let c: Capture = serde_json::from_str(text).map_err(|e| format!("{what}: {e}"))?;
    let g = c.gpus.into_iter().next().ok_or_else(|| format!("{what}: no GPU"))?;
    let profiles: Vec<BoardProfile> = g
        .profiles
        .into_iter()
        .map(|p| BoardProfile {
            memory_slices: p.placements.first().map(|x| x.1).unwrap_or(0),
            media_extensions: p.index == sys::NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1
                || p.index == sys::NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1,
            index: p.index,
            id: p.id,
            name: p.name,
            slice_count: p.slice_count,
            instance_count: p.instance_count,
            multiprocessor_count: p.multiprocessor_count,
            memory_mib: p.memory_mib,
            placements: p.placements,
        })
        .collect();
    let compute_slices = profiles.iter().map(|p| p.slice_count).max().unwrap_or(0);
    let memory_slices = profiles
        .iter()
        .flat_map(|p| p.placements.iter().map(|(s, n)| s + n))
        .max()
        .unwrap_or(0);
    Ok(Board {
        dynmig_model: model_for_device(g.pci_device_id, &g.name).map(|m| m.name.to_string()),
        name: g.name,
        pci_device_id: g.pci_device_id,
        total_memory_mib: g.memory_total_mib,
        compute_slices,
        memory_slices,
        profiles,
        source: format!(
            "{what}: read-only NVML probe, driver {}, 2026-11-26",
            c.driver_version.unwrap_or_default()
        ),
    })
}

/// The board named `name`: `capture:h100-80gb`, `capture:h200`, or a dynmig model name or
/// alias (`A100-80GB`).
///
/// # Errors
/// An unknown name, with the names known.
pub fn board(name: &str) -> Result<Board, String> {
    match name.strip_prefix("capture:") {
        Some("h100-80gb") => from_capture(H100_CAPTURE, "boards/probe-h100-80gb.json"),
        Some("h200") => from_capture(H200_CAPTURE, "boards/probe-h200.json"),
        Some(other) => Err(format!("no capture '{other}' (known: {CAPTURES:?})")),
        None => model_by_name(name).map(from_model).ok_or_else(|| {
            format!(
                "no board '{name}': use capture:{{{}}} or a dynmig model ({})",
                CAPTURES.join(","),
                dynmig_core::geometry::model_names().join(", ")
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The index rule gives the H100 capture's index for every H100 table profile.
    #[test]
    fn index_rule_matches_the_h100_capture() {
        let cap = board("capture:h100-80gb").unwrap();
        let table = board("H100-80GB").unwrap();
        for p in &table.profiles {
            let c = cap.profile_by_id(p.id).unwrap();
            assert_eq!(
                (c.index, c.slice_count, c.memory_slices),
                (p.index, p.slice_count, p.memory_slices)
            );
            assert_eq!(c.placements, p.placements, "{}", p.name);
            assert_eq!(c.instance_count, p.instance_count, "{}", p.name);
        }
        assert_eq!(cap.profiles.len(), table.profiles.len());
        assert_eq!((cap.compute_slices, cap.memory_slices), (7, 8));
    }

    #[test]
    fn suffixes_pick_the_later_profile_kinds() {
        let spec = |name: &'static str, c: u8, me: bool| ProfileSpec {
            id: 1,
            name,
            compute_slices: c,
            memory_slices: c,
            memory_mib: 1,
            max_instances: 1,
            placement_starts: &[0],
            media_extensions: me,
        };
        let idx = |n, c, me| profile_index(&spec(n, c, me));
        assert_eq!(idx("1g.24gb", 1, false), Some(0));
        assert_eq!(idx("1g.24gb+me", 1, true), Some(7));
        assert_eq!(idx("2g.12gb+me", 2, true), Some(8));
        assert_eq!(idx("1g.24gb+gfx", 1, false), Some(10));
        assert_eq!(idx("4g.96gb+gfx", 4, false), Some(12));
        assert_eq!(idx("2g.48gb-me", 2, false), Some(14));
        assert_eq!(idx("1g.24gb+me.all", 1, true), Some(15));
        assert_eq!(idx("2g.48gb+me.all", 2, true), Some(16));
        assert_eq!(idx("5g.1gb", 5, false), None);
    }

    #[test]
    fn every_model_has_a_board() {
        for m in dynmig_core::geometry::MODELS {
            let b = board(m.name).unwrap();
            assert_eq!(b.compute_slices, u32::from(m.compute_slices));
            assert!(
                b.profiles.iter().any(|p| p.slice_count == b.compute_slices),
                "{}",
                m.name
            );
        }
        assert!(board("V100").is_err() && board("capture:x").is_err());
    }
}
