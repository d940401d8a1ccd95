//! Per-GPU-model MIG profile and placement tables.
//!
//! Sources (see `../shared/notes/mig.md` in the project's shared notes):
//! - NVIDIA Multi-Instance GPU User Guide, "Supported MIG Profiles" tables (profile names,
//!   compute slices, memory slices, maximum instance counts) and "A100 MIG placements".
//! - `nvml.h` profile IDs (`nvidia-smi mig -lgip` column `ID`).
//! - Memory sizes in MiB for the A100-40GB are as one driver reports them (mig.md); the other
//!   models' MiB values are the nominal GB of the profile name scaled the same way and are
//!   marked `verified: false` until a read-only NVML probe confirms them.

/// One GPU-instance profile of one GPU model.
///
/// A profile occupies `compute_slices` of the GPU's 7 compute slices and `memory_slices`
/// of its 8 memory slices. It can start at any memory slice in `placement_starts`; it then
/// covers `[start, start + memory_slices)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProfileSpec {
    /// NVML / nvidia-smi GPU-instance profile ID (`nvidia-smi mig -lgip`).
    pub id: u32,
    /// Profile name as nvidia-smi prints it and as dynmig uses it for the Slurm GRES type,
    /// e.g. `"3g.40gb"`.
    pub name: &'static str,
    /// Compute slices (of 7).
    pub compute_slices: u8,
    /// Memory slices (of 8).
    pub memory_slices: u8,
    /// Usable GPU memory of one instance, in MiB.
    pub memory_mib: u64,
    /// Most instances of this profile on one GPU.
    pub max_instances: u8,
    /// Memory-slice indices where an instance of this profile may start.
    pub placement_starts: &'static [u8],
    /// Whether this profile includes the media extensions (`+me`); at most one per GPU.
    pub media_extensions: bool,
}

/// A GPU model with MIG support and its profile table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuModel {
    /// Canonical name used in dynmig.toml, e.g. `"A100-80GB"`.
    pub name: &'static str,
    /// Other names accepted in config (case-insensitive), e.g. the NVML product name.
    pub aliases: &'static [&'static str],
    /// PCI device IDs (`0x20B2`) of boards of this model, for matching NVML's report.
    pub pci_device_ids: &'static [u16],
    /// Compute slices of a whole GPU (7 on every MIG GPU listed here but A30, which has 4).
    pub compute_slices: u8,
    /// Memory slices of a whole GPU (8; A30 has 4).
    pub memory_slices: u8,
    /// Total GPU memory in MiB as the whole GPU (MIG off) reports it.
    pub total_memory_mib: u64,
    /// Profiles, largest first.
    pub profiles: &'static [ProfileSpec],
    /// Where the table comes from.
    pub source: &'static str,
    /// False while the table has not been checked against NVML on a real board.
    pub verified: bool,
}

impl GpuModel {
    /// The profile with this name (`"2g.20gb"`), if the model has it. Exact, case-insensitive.
    pub fn profile(&self, name: &str) -> Option<&'static ProfileSpec> {
        self.profiles.iter().find(|p| p.name.eq_ignore_ascii_case(name))
    }

    /// Profiles without media extensions, sorted by memory then compute, smallest first.
    /// This is the order in which dynmig searches for "the smallest profile that fits".
    pub fn schedulable_profiles(&self) -> Vec<&'static ProfileSpec> {
        let mut v: Vec<_> = self.profiles.iter().filter(|p| !p.media_extensions).collect();
        v.sort_by_key(|p| (p.memory_mib, p.compute_slices));
        v
    }

    /// The profile that covers the whole GPU (all compute slices), e.g. `7g.80gb`.
    pub fn full_profile(&self) -> &'static ProfileSpec {
        self.profiles
            .iter()
            .find(|p| p.compute_slices == self.compute_slices)
            .expect("every model table has a full-GPU profile")
    }
}

const A100_STARTS_1: &[u8] = &[0, 1, 2, 3, 4, 5, 6];
const A100_STARTS_2: &[u8] = &[0, 2, 4, 6];
const A100_STARTS_2G: &[u8] = &[0, 2, 4];
const A100_STARTS_3G: &[u8] = &[0, 4];
const A100_STARTS_0: &[u8] = &[0];

macro_rules! seven_slice_profiles {
    ($one:expr, $one_me:expr, $one_dm:expr, $two:expr, $three:expr, $four:expr, $seven:expr,
     [$m1:expr, $m2:expr, $m4:expr, $m8:expr]) => {
        &[
            ProfileSpec {
                id: 0,
                name: $seven,
                compute_slices: 7,
                memory_slices: 8,
                memory_mib: $m8,
                max_instances: 1,
                placement_starts: A100_STARTS_0,
                media_extensions: false,
            },
            ProfileSpec {
                id: 5,
                name: $four,
                compute_slices: 4,
                memory_slices: 4,
                memory_mib: $m4,
                max_instances: 1,
                placement_starts: A100_STARTS_0,
                media_extensions: false,
            },
            ProfileSpec {
                id: 9,
                name: $three,
                compute_slices: 3,
                memory_slices: 4,
                memory_mib: $m4,
                max_instances: 2,
                placement_starts: A100_STARTS_3G,
                media_extensions: false,
            },
            ProfileSpec {
                id: 14,
                name: $two,
                compute_slices: 2,
                memory_slices: 2,
                memory_mib: $m2,
                max_instances: 3,
                placement_starts: A100_STARTS_2G,
                media_extensions: false,
            },
            ProfileSpec {
                id: 15,
                name: $one_dm,
                compute_slices: 1,
                memory_slices: 2,
                memory_mib: $m2,
                max_instances: 4,
                placement_starts: A100_STARTS_2,
                media_extensions: false,
            },
            ProfileSpec {
                id: 19,
                name: $one,
                compute_slices: 1,
                memory_slices: 1,
                memory_mib: $m1,
                max_instances: 7,
                placement_starts: A100_STARTS_1,
                media_extensions: false,
            },
            ProfileSpec {
                id: 20,
                name: $one_me,
                compute_slices: 1,
                memory_slices: 1,
                memory_mib: $m1,
                max_instances: 1,
                placement_starts: A100_STARTS_1,
                media_extensions: true,
            },
        ]
    };
}

/// NVIDIA A100-SXM4/PCIe 40GB. MiB values as reported by one driver (notes/mig.md).
pub static A100_40GB: GpuModel = GpuModel {
    name: "A100-40GB",
    aliases: &["A100-SXM4-40GB", "A100-PCIE-40GB", "NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB"],
    pci_device_ids: &[0x20B0, 0x20F1],
    compute_slices: 7,
    memory_slices: 8,
    total_memory_mib: 40960,
    profiles: seven_slice_profiles!("1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb",
        [4864, 9856, 19968, 40192]),
    source: "NVIDIA MIG User Guide, A100 profile and placement tables; MiB from one driver's nvidia-smi mig -lgip (notes/mig.md)",
    verified: true,
};

/// NVIDIA A100-SXM4/PCIe 80GB.
pub static A100_80GB: GpuModel = GpuModel {
    name: "A100-80GB",
    aliases: &[
        "A100-SXM4-80GB",
        "A100-PCIE-80GB",
        "A100 80GB PCIe",
        "NVIDIA A100-SXM4-80GB",
        "NVIDIA A100 80GB PCIe",
    ],
    pci_device_ids: &[0x20B2, 0x20B5],
    compute_slices: 7,
    memory_slices: 8,
    total_memory_mib: 81920,
    profiles: seven_slice_profiles!(
        "1g.10gb",
        "1g.10gb+me",
        "1g.20gb",
        "2g.20gb",
        "3g.40gb",
        "4g.40gb",
        "7g.80gb",
        [9728, 19968, 40192, 80896]
    ),
    source: "NVIDIA MIG User Guide, A100-80GB profile table; MiB nominal (unverified)",
    verified: false,
};

/// NVIDIA H100 80GB (SXM5 and PCIe).
pub static H100_80GB: GpuModel = GpuModel {
    name: "H100-80GB",
    aliases: &[
        "H100-SXM5-80GB",
        "H100-PCIE-80GB",
        "NVIDIA H100 80GB HBM3",
        "NVIDIA H100 PCIe",
    ],
    pci_device_ids: &[0x2330, 0x2331],
    compute_slices: 7,
    memory_slices: 8,
    total_memory_mib: 81559,
    profiles: seven_slice_profiles!(
        "1g.10gb",
        "1g.10gb+me",
        "1g.20gb",
        "2g.20gb",
        "3g.40gb",
        "4g.40gb",
        "7g.80gb",
        [9728, 19968, 40192, 80896]
    ),
    source: "NVIDIA MIG User Guide, H100 profile table (same placements as A100); MiB nominal (unverified)",
    verified: false,
};

/// Every model dynmig knows.
pub static MODELS: &[&GpuModel] = &[&A100_40GB, &A100_80GB, &H100_80GB];

/// Looks a model up by canonical name or alias, case-insensitively.
pub fn model_by_name(name: &str) -> Option<&'static GpuModel> {
    MODELS
        .iter()
        .copied()
        .find(|m| m.name.eq_ignore_ascii_case(name) || m.aliases.iter().any(|a| a.eq_ignore_ascii_case(name)))
}

/// Canonical names of every known model, for error messages.
pub fn model_names() -> Vec<&'static str> {
    MODELS.iter().map(|m| m.name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_is_case_insensitive_and_knows_aliases() {
        assert_eq!(model_by_name("a100-80gb").unwrap().name, "A100-80GB");
        assert_eq!(model_by_name("NVIDIA A100-SXM4-40GB").unwrap().name, "A100-40GB");
        assert!(model_by_name("V100").is_none());
    }

    #[test]
    fn smallest_profile_first_and_full_profile() {
        let m = &A100_40GB;
        let names: Vec<_> = m.schedulable_profiles().iter().map(|p| p.name).collect();
        assert_eq!(names, ["1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]);
        assert_eq!(m.full_profile().name, "7g.40gb");
    }
}
