//! A GPU model built at run time from what NVML reports, and a check of a built-in table
//! against it.
//!
//! `dynmig gpu probe` reads, per GPU, every GPU-instance profile NVML answers
//! (`nvmlDeviceGetGpuInstanceProfileInfo`: ID, name, slice count, instance count, memory) and
//! its possible placements (`nvmlDeviceGetGpuInstancePossiblePlacements_v2`: start and size
//! in memory slices). [`NvmlGeometry`] is that report as plain data, independent of any NVML
//! binding; [`GpuModel::from_nvml`] turns it into a model the geometry code uses like a
//! built-in table, and [`cross_check`] lists where two models differ.
//!
//! Field meanings follow NVML's `nvmlGpuInstanceProfileInfo_t` (`sliceCount`: "GPU Slice
//! count", i.e. compute slices; `instanceCount`; `memorySizeMB`, in MiB) and
//! `nvmlGpuInstancePlacement_t` (`start`: "Index of first occupied memory slice", `size`:
//! "Number of memory slices occupied"): NVML API Reference, "Multi Instance GPU Management"
//! (<https://docs.nvidia.com/deploy/nvml-api/group__nvmlMultiInstanceGPU.html>).

use super::models::{model_for_device, BoardPower, GpuModel, ProfileSpec, MAX_PROFILES, MAX_SLICES, MODELS};
use serde::Deserialize;
use std::sync::{Mutex, OnceLock};

/// One GPU as NVML reports its MIG geometry (the per-GPU part of `dynmig gpu probe`'s JSON;
/// other fields there are ignored).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct NvmlGeometry {
    /// Product name (`nvmlDeviceGetName`), e.g. `"NVIDIA H100 80GB HBM3"`.
    pub name: String,
    /// PCI device ID as NVML's `pciDeviceId` holds it: device in the upper 16 bits, vendor
    /// (`0x10DE`) in the lower ones, e.g. `0x233010DE`; a bare 16-bit device ID (`0x2330`)
    /// is taken as is.
    pub pci_device_id: u32,
    /// Total memory of the whole GPU, MiB.
    pub memory_total_mib: u64,
    /// Every GPU-instance profile NVML answered.
    pub profiles: Vec<NvmlProfile>,
}

/// One GPU-instance profile as NVML reports it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct NvmlProfile {
    /// Profile ID (`nvidia-smi mig -lgip` column `ID`).
    pub id: u32,
    /// Name, e.g. `"MIG 1g.10gb"` (the `MIG ` prefix is optional).
    pub name: String,
    /// Compute slices (`sliceCount`).
    pub slice_count: u32,
    /// Most instances on one GPU (`instanceCount`).
    pub instance_count: u32,
    /// Memory of one instance, MiB (`memorySizeMB`).
    pub memory_mib: u64,
    /// Possible placements, `(start, size)` in memory slices.
    pub placements: Vec<(u32, u32)>,
}

impl NvmlGeometry {
    /// The 16-bit PCI device ID (`0x2330`) of [`NvmlGeometry::pci_device_id`].
    pub fn device_id(&self) -> u16 {
        if self.pci_device_id > 0xFFFF {
            (self.pci_device_id >> 16) as u16
        } else {
            self.pci_device_id as u16
        }
    }
}

/// Models built by [`GpuModel::from_nvml`] so far, so that each distinct board kind is
/// leaked once per process.
fn built() -> &'static Mutex<Vec<&'static GpuModel>> {
    static BUILT: OnceLock<Mutex<Vec<&'static GpuModel>>> = OnceLock::new();
    BUILT.get_or_init(|| Mutex::new(Vec::new()))
}

fn leak_str(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

impl GpuModel {
    /// Builds the model of a GPU from what NVML reports of it.
    ///
    /// - Profiles: one per reported profile, named without the `MIG ` prefix; compute slices
    ///   = `slice_count`; memory slices = the placements' size (which must be the same for
    ///   every placement); starts = the placements' starts; `media_extensions` when the name
    ///   ends in `+me` or `+me.all`. Sorted largest first (memory slices, then compute
    ///   slices, plain before `+me`, then name), the order of the built-in tables.
    /// - The GPU's compute slices are the largest `slice_count`, its memory slices the
    ///   furthest placement end; a full-GPU profile (both at once) must exist.
    /// - Name, aliases, power and FP8 come from `base` when given (the board's built-in
    ///   table, so that configs naming it keep working), else from the built-in table
    ///   matching the PCI ID or name ([`model_for_device`]). A board no table knows takes its
    ///   NVML name (without `"NVIDIA "`) as name and alias, and the power and FP8 of the most
    ///   similar built-in model: the same compute and memory slice counts, then the nearest
    ///   total memory; its `source` says so.
    /// - `verified` is true: the geometry is what the driver says.
    ///
    /// The tables are leaked on purpose (`Box::leak`) so that the model is `&'static` like
    /// the built-in ones: once per distinct board kind per process (a second call with an
    /// equal report returns the model built first), a few kilobytes each.
    ///
    /// # Errors
    /// A message naming the first profile or field NVML reported that cannot make a valid
    /// model: no profiles, more than [`MAX_PROFILES`], a name that is not `Ng.Mgb[suffix]`,
    /// repeated IDs or names, zero slices or instances, no placements, placements of
    /// different sizes, more than [`MAX_SLICES`] slices, more memory than the GPU has, or no
    /// full-GPU profile.
    pub fn from_nvml(report: &NvmlGeometry, base: Option<&'static GpuModel>) -> Result<&'static GpuModel, String> {
        let board = &report.name;
        if report.profiles.is_empty() {
            return Err(format!("NVML reports no MIG profile for {board}"));
        }
        if report.profiles.len() > MAX_PROFILES {
            return Err(format!(
                "NVML reports {} MIG profiles for {board}; dynmig handles at most {MAX_PROFILES}",
                report.profiles.len()
            ));
        }
        struct Row {
            id: u32,
            name: String,
            compute: u8,
            memory: u8,
            mib: u64,
            max: u8,
            starts: Vec<u8>,
            media: bool,
        }
        let mut rows: Vec<Row> = Vec::new();
        for p in &report.profiles {
            let name = p
                .name
                .trim()
                .strip_prefix("MIG ")
                .unwrap_or(p.name.trim())
                .trim()
                .to_string();
            let who = format!("{board} profile {name} (ID {})", p.id);
            let g: Option<u32> = name.split('g').next().and_then(|g| g.parse().ok());
            if g.is_none() || !name.contains("gb") || name.len() > 64 {
                return Err(format!("{who}: the name is not of the form Ng.Mgb"));
            }
            if rows.iter().any(|r| r.id == p.id || r.name == name) {
                return Err(format!("{who}: the ID or name is reported twice"));
            }
            let slices_ok = |n: u32| (1..=u32::from(MAX_SLICES)).contains(&n);
            if !slices_ok(p.slice_count) {
                return Err(format!(
                    "{who}: {} compute slices; allowed 1 to {MAX_SLICES}",
                    p.slice_count
                ));
            }
            if p.instance_count == 0 || p.instance_count > u32::from(MAX_SLICES) {
                return Err(format!(
                    "{who}: at most {} instances; allowed 1 to {MAX_SLICES}",
                    p.instance_count
                ));
            }
            let Some(&(_, size)) = p.placements.first() else {
                return Err(format!("{who}: NVML reports no placement"));
            };
            if let Some((s, z)) = p.placements.iter().find(|(_, z)| *z != size) {
                return Err(format!(
                    "{who}: placements of different sizes ({size} and {z} memory slices at {s})"
                ));
            }
            if !slices_ok(size) {
                return Err(format!(
                    "{who}: placements of {size} memory slices; allowed 1 to {MAX_SLICES}"
                ));
            }
            if let Some((s, _)) = p.placements.iter().find(|(s, z)| s + z > u32::from(MAX_SLICES)) {
                return Err(format!("{who}: a placement at {s} ends past memory slice {MAX_SLICES}"));
            }
            if p.memory_mib == 0 || p.memory_mib > report.memory_total_mib {
                return Err(format!(
                    "{who}: {} MiB per instance; the GPU has {} MiB",
                    p.memory_mib, report.memory_total_mib
                ));
            }
            let mut starts: Vec<u8> = p.placements.iter().map(|(s, _)| *s as u8).collect();
            starts.sort_unstable();
            starts.dedup();
            rows.push(Row {
                id: p.id,
                media: name.ends_with("+me") || name.ends_with("+me.all"),
                name,
                compute: p.slice_count as u8,
                memory: size as u8,
                mib: p.memory_mib,
                max: p.instance_count as u8,
                starts,
            });
        }
        let compute_slices = rows.iter().map(|r| r.compute).max().unwrap_or(0);
        let memory_slices = rows
            .iter()
            .flat_map(|r| r.starts.iter().map(move |s| s + r.memory))
            .max()
            .unwrap_or(0);
        if !rows
            .iter()
            .any(|r| r.compute == compute_slices && r.memory == memory_slices)
        {
            return Err(format!(
                "NVML reports no full-GPU profile for {board} ({compute_slices} compute and {memory_slices} memory slices at once)"
            ));
        }
        rows.sort_by(|a, b| {
            (b.memory, b.compute)
                .cmp(&(a.memory, a.compute))
                .then(a.media.cmp(&b.media))
                .then(a.name.cmp(&b.name))
        });

        let device_id = report.device_id();
        let matching = base.or_else(|| model_for_device(device_id, board));
        let (name, aliases, power, fp8, how): (&'static str, &'static [&'static str], BoardPower, bool, String) =
            match matching {
                Some(m) => (
                    m.name,
                    m.aliases,
                    m.power,
                    m.fp8,
                    format!("name, power and FP8 of the {} table", m.name),
                ),
                None => {
                    let short = board.strip_prefix("NVIDIA ").unwrap_or(board).trim().to_string();
                    let similar = most_similar(compute_slices, memory_slices, report.memory_total_mib);
                    let alias: &'static [&'static str] = Box::leak(vec![leak_str(board.clone())].into_boxed_slice());
                    (
                        leak_str(short),
                        alias,
                        similar.power,
                        similar.fp8,
                        format!(
                            "unknown board: power and FP8 assumed as the most similar table, {}",
                            similar.name
                        ),
                    )
                }
            };
        let source = format!(
            "built at run time from NVML's profile and placement report of {board} (PCI {device_id:#06x}); {how}"
        );

        let mut cache = built().lock().unwrap_or_else(|e| e.into_inner());
        let same = |m: &GpuModel| {
            m.name == name
                && m.compute_slices == compute_slices
                && m.memory_slices == memory_slices
                && m.total_memory_mib == report.memory_total_mib
                && m.pci_device_ids == [device_id]
                && m.profiles.len() == rows.len()
                && m.profiles.iter().zip(&rows).all(|(p, r)| {
                    p.id == r.id
                        && p.name == r.name
                        && p.compute_slices == r.compute
                        && p.memory_slices == r.memory
                        && p.memory_mib == r.mib
                        && p.max_instances == r.max
                        && p.placement_starts == r.starts.as_slice()
                        && p.media_extensions == r.media
                })
        };
        if let Some(m) = cache.iter().find(|m| same(m)) {
            return Ok(m);
        }
        let profiles: Vec<ProfileSpec> = rows
            .into_iter()
            .map(|r| ProfileSpec {
                id: r.id,
                name: leak_str(r.name),
                compute_slices: r.compute,
                memory_slices: r.memory,
                memory_mib: r.mib,
                max_instances: r.max,
                placement_starts: Box::leak(r.starts.into_boxed_slice()),
                media_extensions: r.media,
            })
            .collect();
        let model: &'static GpuModel = Box::leak(Box::new(GpuModel {
            name,
            aliases,
            pci_device_ids: Box::leak(vec![device_id].into_boxed_slice()),
            compute_slices,
            memory_slices,
            total_memory_mib: report.memory_total_mib,
            profiles: Box::leak(profiles.into_boxed_slice()),
            source: leak_str(source),
            verified: true,
            power,
            fp8,
        }));
        cache.push(model);
        Ok(model)
    }
}

/// The built-in model most like a board of these slices and memory: the same compute and
/// memory slice counts if any, then the nearest total memory.
fn most_similar(compute: u8, memory: u8, total_mib: u64) -> &'static GpuModel {
    MODELS
        .iter()
        .copied()
        .min_by_key(|m| {
            (
                (m.compute_slices, m.memory_slices) != (compute, memory),
                m.total_memory_mib.abs_diff(total_mib),
            )
        })
        .expect("MODELS is not empty")
}

/// Where two models' MIG geometry differs, one human-readable line per difference, empty
/// when they agree: the GPU's compute and memory slices and total memory, a profile on one
/// side only, and per profile (matched by name) its ID, compute slices, memory slices,
/// memory MiB, most instances and placement starts. `nvml` is the model built from the
/// driver's report ([`GpuModel::from_nvml`]), `table` the built-in one.
pub fn cross_check(nvml: &GpuModel, table: &GpuModel) -> Vec<String> {
    let mut out = Vec::new();
    let t = table.name;
    if nvml.compute_slices != table.compute_slices {
        out.push(format!(
            "compute slices: NVML {}, table {t} {}",
            nvml.compute_slices, table.compute_slices
        ));
    }
    if nvml.memory_slices != table.memory_slices {
        out.push(format!(
            "memory slices: NVML {}, table {t} {}",
            nvml.memory_slices, table.memory_slices
        ));
    }
    if nvml.total_memory_mib != table.total_memory_mib {
        out.push(format!(
            "total memory: NVML {} MiB, table {t} {} MiB",
            nvml.total_memory_mib, table.total_memory_mib
        ));
    }
    for n in nvml.profiles {
        let Some(p) = table.profile(n.name) else {
            out.push(format!(
                "{} (ID {}): reported by NVML, missing from table {t}",
                n.name, n.id
            ));
            continue;
        };
        let name = n.name;
        if n.id != p.id {
            out.push(format!("{name}: profile ID NVML {}, table {t} {}", n.id, p.id));
        }
        if n.compute_slices != p.compute_slices {
            out.push(format!(
                "{name}: compute slices NVML {}, table {t} {}",
                n.compute_slices, p.compute_slices
            ));
        }
        if n.memory_slices != p.memory_slices {
            out.push(format!(
                "{name}: memory slices NVML {}, table {t} {}",
                n.memory_slices, p.memory_slices
            ));
        }
        if n.memory_mib != p.memory_mib {
            out.push(format!(
                "{name}: memory NVML {} MiB, table {t} {} MiB",
                n.memory_mib, p.memory_mib
            ));
        }
        if n.max_instances != p.max_instances {
            out.push(format!(
                "{name}: at most {} instances per NVML, {} per table {t}",
                n.max_instances, p.max_instances
            ));
        }
        let mut ts = p.placement_starts.to_vec();
        ts.sort_unstable();
        if n.placement_starts != ts.as_slice() {
            out.push(format!(
                "{name}: placement starts NVML {:?}, table {t} {:?}",
                n.placement_starts, ts
            ));
        }
    }
    for p in table.profiles {
        if nvml.profile(p.name).is_none() {
            out.push(format!("{} (ID {}): in table {t}, not reported by NVML", p.name, p.id));
        }
    }
    out
}
