// One piece: data: the profile and placement tables of every GPU model, each from NVIDIA's MIG user guide; the tables are read side by side.
//! Per-GPU-model MIG profile and placement tables.
//!
//! Sources:
//! - NVIDIA Multi-Instance GPU User Guide, "Supported MIG Profiles" tables (profile names,
//!   compute slices, memory slices, maximum instance counts) and "A100 MIG placements".
//! - `nvml.h` profile IDs (`nvidia-smi mig -lgip` column `ID`).
//! - NVIDIA Multi-Instance GPU User Guide, "Supported GPUs"
//!   (<https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-gpus.html>: memory
//!   size and most instances of the GB200, B200 and RTX PRO Blackwell boards), and NVIDIA's
//!   MIG manager defaults ([`NVIDIA_MIG_PARTED_DEFAULT_CONFIG`]: PCI device IDs, profile names
//!   and counts of the B300, GB200 and RTX PRO 6000 Blackwell).
//! - At run time, the driver itself: [`GpuModel::from_nvml`] builds a model from NVML's
//!   report, and [`super::cross_check`] lists where a table here differs from it.
//! - Memory sizes in MiB for the A100-40GB are as one driver reports them (mig.md); the
//!   H100-80GB and H200-141GB tables are as NVML reported them ([`NVML_PROBE_2026_11_26`]);
//!   the other models' MiB values are the nominal GB of the profile name scaled the same way
//!   and are marked `verified: false` until a read-only NVML probe confirms them.

/// One GPU-instance profile of one GPU model.
///
/// A profile occupies `compute_slices` of the GPU's compute slices and `memory_slices` of
/// its memory slices ([`GpuModel::compute_slices`], [`GpuModel::memory_slices`]: 7 and 8 on
/// the A100/H100/H200/B200 family, 4 and 4 on the A30 and RTX PRO 6000 Blackwell, 2 and 2 on
/// the RTX PRO 5000 Blackwell). It can start at any memory slice in `placement_starts`; it
/// then covers `[start, start + memory_slices)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProfileSpec {
    /// NVML / nvidia-smi GPU-instance profile ID (`nvidia-smi mig -lgip`).
    pub id: u32,
    /// Profile name as nvidia-smi prints it and as dynmig uses it for the Slurm GRES type,
    /// e.g. `"3g.40gb"`.
    pub name: &'static str,
    /// Compute slices (of the model's [`GpuModel::compute_slices`]).
    pub compute_slices: u8,
    /// Memory slices (of the model's [`GpuModel::memory_slices`]).
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
    /// Compute slices of a whole GPU (7 on the A100/H100/H200/GH200/B200/B300/GB200 family,
    /// 4 on the A30 and RTX PRO 6000 Blackwell, 2 on the RTX PRO 5000 Blackwell); at most
    /// [`MAX_SLICES`].
    pub compute_slices: u8,
    /// Memory slices of a whole GPU (8, 4 and 2 on the same boards); at most [`MAX_SLICES`].
    pub memory_slices: u8,
    /// Total GPU memory in MiB as the whole GPU (MIG off) reports it.
    pub total_memory_mib: u64,
    /// Profiles, largest first.
    pub profiles: &'static [ProfileSpec],
    /// Where the table comes from.
    pub source: &'static str,
    /// False while the table has not been checked against NVML on a real board.
    pub verified: bool,
    /// Board power figures (TDP, idle), for the power model of [`crate::energy`].
    pub power: BoardPower,
    /// Whether the model's Tensor Cores run FP8 (8-bit floating point, E4M3/E5M2), so that
    /// `--mig-dtype=fp8` may be asked for: Hopper (H100, H200, GH200) and Blackwell (B200)
    /// do, Ampere (A100, A30) does not. Sources: "NVIDIA H100 Tensor Core GPU Architecture"
    /// whitepaper (Hopper's fourth-generation Tensor Cores add FP8), "NVIDIA A100 Tensor
    /// Core GPU Architecture" whitepaper (Ampere's Tensor Cores: FP64, TF32, BF16, FP16,
    /// INT8, INT4, no FP8), "NVIDIA Blackwell Architecture Technical Brief" (FP8, FP6, FP4),
    /// and Transformer Engine's "Using FP8 with Transformer Engine"
    /// (<https://docs.nvidia.com/deeplearning/transformer-engine/user-guide/examples/fp8_primer.html>:
    /// "H100 GPU introduced support for a new datatype, FP8").
    pub fp8: bool,
}

/// Board power figures of a GPU model, in watts.
///
/// Measured idle power: the A100's (46 W, an A100-SXM4-40GB with MIG on and nothing
/// running: rakin000/Power-Aware-MIG-Scheduler on GitHub), the H100 80GB's (71.5 W) and the
/// H200 SXM's (80.2 W), both with MIG off and nothing running ([`NVML_PROBE_2026_11_26`]).
/// Every other model's idle power is the A100 measurement scaled by the ratio of board power
/// limits (`46 W x TDP / 400 W`), an assumption marked by `idle_measured: false`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BoardPower {
    /// Board power limit (TDP) of the model's highest-power form factor, W.
    pub tdp_w: f64,
    /// Board power with MIG on and no work, W.
    pub idle_w: f64,
    /// Whether `idle_w` was measured on this model (else scaled from the A100 by TDP).
    pub idle_measured: bool,
    /// Where the numbers come from.
    pub source: &'static str,
}

// The watts are finite constants (never NaN), so equality is an equivalence.
impl Eq for BoardPower {}

/// Where the H100-80GB and H200-141GB tables were checked: `dynmig gpu probe` (read-only
/// NVML queries, MIG off: NVML answers every GPU-instance profile and its placements anyway)
/// on an H100 80GB HBM3 and an H200 SXM, driver 580.159.04, 2026-11-26. The captures are
/// committed under docs/results/hardware-2026-11-26/ and as test fixtures of dynmig-gpu.
pub const NVML_PROBE_2026_11_26: &str =
    "read-only NVML probe, driver 580.159.04, 2026-11-26, docs/results/hardware-2026-11-26/";

/// Idle power of an A100-SXM4-40GB with MIG on and no work, W (measured;
/// rakin000/Power-Aware-MIG-Scheduler).
pub const A100_IDLE_W: f64 = 46.0;
/// A100 SXM4 board power limit, W (NVIDIA A100 Tensor Core GPU datasheet).
pub const A100_TDP_W: f64 = 400.0;

/// The board power of a model with board power limit `tdp_w` whose idle power is not
/// measured: the A100's measured idle scaled by the ratio of limits.
const fn scaled_board(tdp_w: f64, source: &'static str) -> BoardPower {
    BoardPower {
        tdp_w,
        idle_w: A100_IDLE_W * (tdp_w / A100_TDP_W),
        idle_measured: false,
        source,
    }
}

/// Most compute or memory slices a model may have. Geometry keeps a GPU's occupied memory
/// slices in a 16-bit mask (`enumerate.rs`), so 16 is the bound; every table in [`MODELS`] and
/// every model built by [`GpuModel::from_nvml`] is checked against it. The largest MIG GPU
/// NVIDIA lists has 8 memory slices and 7 compute slices (NVIDIA Multi-Instance GPU User
/// Guide, "Supported MIG Profiles").
pub const MAX_SLICES: u8 = 16;

/// Most profiles a model table may have (per-profile counts are kept in a fixed array in
/// `enumerate.rs`). The largest table, the RTX PRO 6000 Blackwell's, has 11.
pub const MAX_PROFILES: usize = 16;

impl ProfileSpec {
    /// The variant suffix of the profile name after its size, e.g. `"+me"` for
    /// `1g.10gb+me`, `"+gfx"` for `1g.24gb+gfx`, `"-me"` for `1g.24gb-me` (no media engine),
    /// `"+me.all"` for `1g.24gb+me.all`; `""` for a plain profile such as `3g.40gb`.
    pub fn suffix(&self) -> &'static str {
        let name = self.name;
        match name.find("gb") {
            Some(i) => &name[i + 2..],
            None => "",
        }
    }

    /// Whether the profile is a variant of a plain profile with the same slices (a name
    /// suffix: `+me`, `+gfx`, `-me`, `+me.all`). Variants are created only when named: the
    /// layout search and "the smallest profile that fits" use the plain profiles.
    pub fn is_variant(&self) -> bool {
        !self.suffix().is_empty()
    }

    /// Whether the profile has one compute slice but more than one memory slice (`1g.20gb`
    /// on an A100-80GB, profile ID [`DOUBLE_MEMORY_1G_PROFILE_ID`] on the seven-slice boards).
    pub fn is_double_memory(&self) -> bool {
        self.compute_slices == 1 && self.memory_slices > 1
    }

    /// Whether the profile is a "classic" one: no media extensions nor another variant
    /// ([`Self::is_variant`]) and not double-memory ([`Self::is_double_memory`]). The layout
    /// search uses these ([`crate::geometry::classic_profiles`]), and they are the profiles
    /// "the smallest profile that fits" may pick ([`crate::hints::auto_selectable`]).
    pub fn is_classic(&self) -> bool {
        !self.media_extensions && !self.is_variant() && !self.is_double_memory()
    }
}

impl GpuModel {
    /// The profile with this name (`"2g.20gb"`), if the model has it. Exact, case-insensitive.
    pub fn profile(&self, name: &str) -> Option<&'static ProfileSpec> {
        self.profiles.iter().find(|p| p.name.eq_ignore_ascii_case(name))
    }

    /// Profiles without media extensions or another variant suffix ([`ProfileSpec::is_variant`]:
    /// `+me`, `+gfx`, `-me`, `+me.all`), sorted by memory then compute, smallest first.
    /// This is the order in which dynmig searches for "the smallest profile that fits".
    pub fn schedulable_profiles(&self) -> Vec<&'static ProfileSpec> {
        let mut v: Vec<_> = self
            .profiles
            .iter()
            .filter(|p| !p.media_extensions && !p.is_variant())
            .collect();
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

/// The profile ID (`nvmlGpuInstanceProfileInfo_t.id`, what the create calls take) of the
/// 1-compute-slice double-memory profile of the seven-slice boards
/// ([`ProfileSpec::is_double_memory`]: `1g.10gb` on an A100-40GB, `1g.20gb` on an A100-80GB
/// or H100, `1g.35gb` on an H200). nvml.h enumerates profile *indices*, and indexes this
/// profile as `NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2` (0x9); the ID is what the driver
/// reports for that index: 15 in NVIDIA's Multi-Instance GPU User Guide ("Supported MIG
/// Profiles", the A100 and H100 tables, as `nvidia-smi mig -lgip` lists them) and in the H100
/// and H200 captures (`crates/nvml-standin/boards/probe-h100-80gb.json`, `probe-h200.json`:
/// index 9, ID 15).
pub const DOUBLE_MEMORY_1G_PROFILE_ID: u32 = 15;

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
                id: DOUBLE_MEMORY_1G_PROFILE_ID,
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

/// NVIDIA A100-SXM4/PCIe 40GB. MiB values as reported by one driver.
pub static A100_40GB: GpuModel = GpuModel {
    name: "A100-40GB",
    aliases: &["A100-SXM4-40GB", "A100-PCIE-40GB", "NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB"],
    pci_device_ids: &[0x20B0, 0x20F1],
    compute_slices: 7,
    memory_slices: 8,
    total_memory_mib: 40960,
    profiles: seven_slice_profiles!("1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb",
        [4864, 9856, 19968, 40192]),
    source: "NVIDIA MIG User Guide, A100 profile and placement tables; MiB from one driver's nvidia-smi mig -lgip",
    verified: true,
    fp8: false,
    power: BoardPower {
        tdp_w: A100_TDP_W,
        idle_w: A100_IDLE_W,
        idle_measured: true,
        source: "TDP: NVIDIA A100 datasheet (SXM4 400 W; PCIe 250-300 W); idle: measured on an A100-SXM4-40GB by rakin000/Power-Aware-MIG-Scheduler",
    },
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
    fp8: false,
    power: BoardPower {
        tdp_w: A100_TDP_W,
        idle_w: A100_IDLE_W,
        idle_measured: false,
        source: "TDP: NVIDIA A100 datasheet (SXM4 400 W; PCIe 250-300 W); idle: measured on an A100-SXM4-40GB by rakin000/Power-Aware-MIG-Scheduler (same board limit, taken as equal)",
    },
};

/// NVIDIA H100 80GB (SXM5 and PCIe).
///
/// Profiles, placements and MiB as NVML reported them on an H100 80GB HBM3 (SXM5, PCI
/// 0x2330, 700 W limit) with MIG off: [`NVML_PROBE_2026_11_26`]. Idle power measured on the
/// same board (MIG off, nothing running): 71.5 W.
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
        [9984, 20096, 40448, 81152]
    ),
    source: "NVIDIA MIG User Guide, H100 profile table; IDs, slices, counts, placements and MiB verified by a read-only NVML probe, driver 580.159.04, 2026-11-26, docs/results/hardware-2026-11-26/ (H100 80GB HBM3, PCI 0x2330; the PCIe board 0x2331 is not probed)",
    verified: true,
    fp8: true,
    power: BoardPower {
        tdp_w: 700.0,
        idle_w: 71.5,
        idle_measured: true,
        source: "TDP: NVIDIA H100 datasheet (SXM5 700 W; PCIe 350 W), and the probed board's power limit (700 W); idle: 71.5 W measured, H100 80GB HBM3 SXM5, MIG off, nothing running, nvidia-smi every 250 ms, 2026-11-26, docs/results/hardware-2026-11-26/",
    },
};

/// Placement starts of the A30's 1-slice profiles (NVIDIA MIG User Guide, A30 placements).
const A30_STARTS_1: &[u8] = &[0, 1, 2, 3];
/// Placement starts of the A30's 2-slice profiles.
const A30_STARTS_2: &[u8] = &[0, 2];

/// NVIDIA A30 24GB: 4 compute slices and 4 memory slices, so its geometry differs from the
/// seven-slice models. Profile IDs, counts and placements from the NVIDIA MIG User
/// Guide, "A30 MIG profiles". MiB are [`nominal_mib`] of the profile name: unverified.
pub static A30_24GB: GpuModel = GpuModel {
    name: "A30-24GB",
    aliases: &["A30", "NVIDIA A30"],
    pci_device_ids: &[0x20B7],
    compute_slices: 4,
    memory_slices: 4,
    total_memory_mib: 24576,
    profiles: &[
        ProfileSpec {
            id: 0,
            name: "4g.24gb",
            compute_slices: 4,
            memory_slices: 4,
            memory_mib: nominal_mib(24),
            max_instances: 1,
            placement_starts: A100_STARTS_0,
            media_extensions: false,
        },
        ProfileSpec {
            id: 5,
            name: "2g.12gb",
            compute_slices: 2,
            memory_slices: 2,
            memory_mib: nominal_mib(12),
            max_instances: 2,
            placement_starts: A30_STARTS_2,
            media_extensions: false,
        },
        ProfileSpec {
            id: 6,
            name: "2g.12gb+me",
            compute_slices: 2,
            memory_slices: 2,
            memory_mib: nominal_mib(12),
            max_instances: 1,
            placement_starts: A30_STARTS_2,
            media_extensions: true,
        },
        ProfileSpec {
            id: 14,
            name: "1g.6gb",
            compute_slices: 1,
            memory_slices: 1,
            memory_mib: nominal_mib(6),
            max_instances: 4,
            placement_starts: A30_STARTS_1,
            media_extensions: false,
        },
        ProfileSpec {
            id: 21,
            name: "1g.6gb+me",
            compute_slices: 1,
            memory_slices: 1,
            memory_mib: nominal_mib(6),
            max_instances: 1,
            placement_starts: A30_STARTS_1,
            media_extensions: true,
        },
    ],
    source: "NVIDIA MIG User Guide, A30 profile and placement tables; MiB nominal (unverified)",
    verified: false,
    fp8: false,
    power: scaled_board(
        165.0,
        "TDP: NVIDIA A30 datasheet (165 W); idle: A100 measurement scaled by TDP",
    ),
};

/// Usable MiB assumed for a profile named `<gb>gb` on a model whose sizes no NVML probe has
/// confirmed yet: 95% of `gb` GiB, rounded down to 64 MiB. The A100-40GB, which was measured,
/// gives 4864 MiB for `1g.5gb` (95% of 5 GiB) and 9856 for `2g.10gb` (96%), the H100 80GB
/// 9984 MiB for `1g.10gb` (97.5%): there it errs low. But the H200 probe
/// ([`NVML_PROBE_2026_11_26`]) gave 16384 MiB for `1g.18gb` (89%) and 33280 for `2g.35gb`
/// (93%): below this estimate, which would have let "the smallest profile that fits" pick a
/// profile too small. The unverified tables built on it (GH200, B200, H100 NVL, A30) may
/// overstate their MiB the same way until probed.
pub const fn nominal_mib(gb: u64) -> u64 {
    gb * 1024 * 95 / 100 / 64 * 64
}

/// NVIDIA H100 NVL 94GB (PCIe, HBM3).
pub static H100_NVL_94GB: GpuModel = GpuModel {
    name: "H100-NVL-94GB",
    aliases: &["H100 NVL", "NVIDIA H100 NVL"],
    pci_device_ids: &[0x2321],
    compute_slices: 7,
    memory_slices: 8,
    total_memory_mib: 96256,
    profiles: seven_slice_profiles!(
        "1g.12gb",
        "1g.12gb+me",
        "1g.24gb",
        "2g.24gb",
        "3g.47gb",
        "4g.47gb",
        "7g.94gb",
        [nominal_mib(12), nominal_mib(24), nominal_mib(47), nominal_mib(94)]
    ),
    source: "NVIDIA MIG User Guide, H100 NVL profile names; placements as H100; MiB nominal (unverified)",
    verified: false,
    fp8: true,
    power: scaled_board(
        400.0,
        "TDP: NVIDIA H100 NVL datasheet (350-400 W); idle: A100 measurement scaled by TDP",
    ),
};

/// NVIDIA H200 141GB (SXM and NVL).
///
/// Profiles, placements and MiB as NVML reported them on an H200 SXM (PCI 0x2335, 700 W
/// limit) with MIG off: [`NVML_PROBE_2026_11_26`]. Idle power measured on the same board (MIG
/// off, nothing running): 80.2 W. The H200 NVL (PCI 0x233B, up to 600 W) shares the table: its
/// profiles are the same per NVIDIA's user guide, but it was not probed; its power limit is
/// lower, so the power model (700 W cap) overstates what a fully loaded NVL can draw.
pub static H200_141GB: GpuModel = GpuModel {
    name: "H200-141GB",
    aliases: &["H200", "NVIDIA H200", "NVIDIA H200 NVL", "H200 NVL"],
    pci_device_ids: &[0x2335, 0x233B],
    compute_slices: 7,
    memory_slices: 8,
    total_memory_mib: 143771,
    profiles: seven_slice_profiles!(
        "1g.18gb",
        "1g.18gb+me",
        "1g.35gb",
        "2g.35gb",
        "3g.71gb",
        "4g.71gb",
        "7g.141gb",
        [16384, 33280, 71424, 143360]
    ),
    source: "NVIDIA MIG User Guide, H200 profile names; IDs, slices, counts, placements and MiB verified by a read-only NVML probe, driver 580.159.04, 2026-11-26, docs/results/hardware-2026-11-26/ (H200 SXM, PCI 0x2335; the NVL board 0x233B is not probed)",
    verified: true,
    fp8: true,
    power: BoardPower {
        tdp_w: 700.0,
        idle_w: 80.2,
        idle_measured: true,
        source: "TDP: the probed H200 SXM's power limit (700 W, its default and maximum; the H200 NVL, PCI 0x233B, is up to 600 W); idle: 80.2 W measured, H200 SXM, MIG off, nothing running, nvidia-smi every 250 ms, 2026-11-26, docs/results/hardware-2026-11-26/",
    },
};

/// NVIDIA GH200 with 96GB HBM3 (Grace Hopper superchip).
pub static GH200_96GB: GpuModel = GpuModel {
    name: "GH200-96GB",
    aliases: &["GH200", "NVIDIA GH200 480GB", "NVIDIA GH200 96GB HBM3"],
    pci_device_ids: &[0x2342],
    compute_slices: 7,
    memory_slices: 8,
    total_memory_mib: 98304,
    profiles: seven_slice_profiles!(
        "1g.12gb",
        "1g.12gb+me",
        "1g.24gb",
        "2g.24gb",
        "3g.48gb",
        "4g.48gb",
        "7g.96gb",
        [nominal_mib(12), nominal_mib(24), nominal_mib(48), nominal_mib(96)]
    ),
    source:
        "NVIDIA MIG User Guide, GH200 96GB profile names; placements as H100; MiB nominal (unverified)",
    verified: false,
    fp8: true,
    power: scaled_board(900.0, "TDP: NVIDIA GH200 product page (module up to 900 W, CPU and memory included); idle: A100 measurement scaled by TDP"),
};

/// NVIDIA GH200 with 144GB HBM3e.
pub static GH200_144GB: GpuModel = GpuModel {
    name: "GH200-144GB",
    aliases: &["NVIDIA GH200 144G HBM3e", "NVIDIA GH200 144GB HBM3e"],
    pci_device_ids: &[0x2348],
    compute_slices: 7,
    memory_slices: 8,
    total_memory_mib: 147456,
    profiles: seven_slice_profiles!(
        "1g.18gb",
        "1g.18gb+me",
        "1g.36gb",
        "2g.36gb",
        "3g.72gb",
        "4g.72gb",
        "7g.144gb",
        [nominal_mib(18), nominal_mib(36), nominal_mib(72), nominal_mib(144)]
    ),
    source:
        "names only, by analogy with GH200 96GB: profile names, IDs, placements and MiB all unverified",
    verified: false,
    fp8: true,
    power: scaled_board(900.0, "TDP: NVIDIA GH200 product page (module up to 900 W, CPU and memory included); idle: A100 measurement scaled by TDP"),
};

/// NVIDIA B200 180GB.
pub static B200_180GB: GpuModel = GpuModel {
    name: "B200-180GB",
    aliases: &["B200", "NVIDIA B200"],
    pci_device_ids: &[0x2901],
    compute_slices: 7,
    memory_slices: 8,
    total_memory_mib: 184320,
    profiles: seven_slice_profiles!(
        "1g.23gb",
        "1g.23gb+me",
        "1g.45gb",
        "2g.45gb",
        "3g.90gb",
        "4g.90gb",
        "7g.180gb",
        [nominal_mib(23), nominal_mib(45), nominal_mib(90), nominal_mib(180)]
    ),
    source: "profile names from the NVIDIA MIG User Guide (names only); IDs and placements assumed as H100: unverified",
    verified: false,
    fp8: true,
    power: scaled_board(
        1000.0,
        "TDP: NVIDIA HGX B200 product page (1000 W per GPU); idle: A100 measurement scaled by TDP",
    ),
};

/// NVIDIA's MIG manager default configuration, whose `device-filter` entries name the PCI
/// device IDs (upper 16 bits; lower 16 bits `10DE`, NVIDIA's vendor ID) and whose
/// `all-<profile>` entries name each board's profiles and per-profile counts:
/// <https://github.com/NVIDIA/mig-parted/blob/main/deployments/systemd/config-default.yaml>
/// (read at commit bd7160f, 2026-08-21).
pub const NVIDIA_MIG_PARTED_DEFAULT_CONFIG: &str =
    "https://github.com/NVIDIA/mig-parted/blob/main/deployments/systemd/config-default.yaml (commit bd7160f)";

/// NVIDIA B300 (Blackwell Ultra, 288 GB HBM3e; 269 GB usable under MIG).
///
/// Profile names and per-profile counts (`1g.34gb` x7, `1g.34gb+me` x1, `1g.67gb` x4,
/// `2g.67gb` x3, `3g.135gb` x2, `4g.135gb` x1, `7g.269gb` x1) and the PCI device ID 0x3182
/// (the "B300" `device-filter`) from [`NVIDIA_MIG_PARTED_DEFAULT_CONFIG`]; the seven compute
/// and eight memory slices from the counts (7 x `1g`, 4 x `1g` double-memory, 2 x `3g` on
/// half the memory each), as on the B200. Profile IDs and placements are not published for
/// the B300: assumed as the H100/H200 ones (the B200 table makes the same assumption).
/// MiB are [`nominal_mib`] of the names: unverified. Board power: not found in an NVIDIA
/// document here; 1100 W per GPU assumed (the HGX B300 figure quoted for the board, 100 W
/// above the HGX B200's 1000 W); idle scaled from the A100 by TDP.
pub static B300_269GB: GpuModel = GpuModel {
    name: "B300-269GB",
    aliases: &["B300", "NVIDIA B300", "NVIDIA B300 SXM6 AC"],
    pci_device_ids: &[0x3182],
    compute_slices: 7,
    memory_slices: 8,
    total_memory_mib: 269 * 1024,
    profiles: seven_slice_profiles!(
        "1g.34gb",
        "1g.34gb+me",
        "1g.67gb",
        "2g.67gb",
        "3g.135gb",
        "4g.135gb",
        "7g.269gb",
        [nominal_mib(34), nominal_mib(67), nominal_mib(135), nominal_mib(269)]
    ),
    source: "profile names, counts and PCI ID 0x3182 from NVIDIA mig-parted config-default.yaml (https://github.com/NVIDIA/mig-parted, commit bd7160f); IDs and placements assumed as H100; MiB nominal: unverified",
    verified: false,
    fp8: true,
    power: scaled_board(
        1100.0,
        "TDP: assumed 1100 W per GPU (HGX B300 figure; no NVIDIA datasheet value found); idle: A100 measurement scaled by TDP",
    ),
};

/// NVIDIA GB200 (the Blackwell GPU of a Grace Blackwell superchip, 186 GB under MIG).
///
/// NVIDIA Multi-Instance GPU User Guide, "Supported GPUs"
/// (<https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-gpus.html>): GB200,
/// 186GB, at most 7 instances. Profile names and counts (`1g.23gb` x7, `1g.23gb+me` x1,
/// `1g.47gb` x4, `2g.47gb` x3, `3g.93gb` x2, `4g.93gb` x1, `7g.186gb` x1) and the PCI device
/// ID 0x2941 ("GB200 HGX" `device-filter`) from [`NVIDIA_MIG_PARTED_DEFAULT_CONFIG`]. Profile
/// IDs and placements assumed as the H100's; MiB [`nominal_mib`]: unverified. Board power:
/// not found per GPU in an NVIDIA document here; 1200 W assumed (the GB200 NVL72 figure
/// quoted per GPU); idle scaled from the A100 by TDP.
pub static GB200_186GB: GpuModel = GpuModel {
    name: "GB200-186GB",
    aliases: &["GB200", "NVIDIA GB200"],
    pci_device_ids: &[0x2941],
    compute_slices: 7,
    memory_slices: 8,
    total_memory_mib: 186 * 1024,
    profiles: seven_slice_profiles!(
        "1g.23gb",
        "1g.23gb+me",
        "1g.47gb",
        "2g.47gb",
        "3g.93gb",
        "4g.93gb",
        "7g.186gb",
        [nominal_mib(23), nominal_mib(47), nominal_mib(93), nominal_mib(186)]
    ),
    source: "NVIDIA MIG User Guide, Supported GPUs (GB200 186GB, 7 instances); profile names, counts and PCI ID 0x2941 from NVIDIA mig-parted config-default.yaml (commit bd7160f); IDs and placements assumed as H100; MiB nominal: unverified",
    verified: false,
    fp8: true,
    power: scaled_board(
        1200.0,
        "TDP: assumed 1200 W per GPU (GB200 NVL72 figure; no NVIDIA datasheet value per GPU found); idle: A100 measurement scaled by TDP",
    ),
};

/// Placement starts of a 4-memory-slice board's 1-slice profiles (the A30's, NVIDIA MIG
/// User Guide, "A30 MIG placements").
const FOUR_STARTS_1: &[u8] = &[0, 1, 2, 3];
/// Placement starts of a 4-memory-slice board's 2-slice profiles.
const FOUR_STARTS_2: &[u8] = &[0, 2];
/// Placement starts of a 2-memory-slice board's 1-slice profiles.
const TWO_STARTS_1: &[u8] = &[0, 1];

/// One plain (no `+me`) profile of a small board, for the tables below.
const fn small(
    id: u32,
    name: &'static str,
    slices: u8,
    memory_mib: u64,
    max_instances: u8,
    starts: &'static [u8],
    media_extensions: bool,
) -> ProfileSpec {
    ProfileSpec {
        id,
        name,
        compute_slices: slices,
        memory_slices: slices,
        memory_mib,
        max_instances,
        placement_starts: starts,
        media_extensions,
    }
}

/// NVIDIA RTX PRO 6000 Blackwell (Server, Workstation and Max-Q Workstation Editions, 96 GB
/// GDDR7): 4 compute slices and 4 memory slices.
///
/// NVIDIA Multi-Instance GPU User Guide, "Supported GPUs"
/// (<https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-gpus.html>): all three
/// editions, GB202, 96GB, at most 4 instances. Profiles and counts from
/// [`NVIDIA_MIG_PARTED_DEFAULT_CONFIG`] ("RTX PRO 6000 Blackwell" entries): `1g.24gb` x4,
/// `1g.24gb+me` x1, `1g.24gb+gfx` x4, `1g.24gb+me.all` x1, `1g.24gb-me` x4, `2g.48gb` x2,
/// `2g.48gb+gfx` x2, `2g.48gb+me.all` x1, `2g.48gb-me` x2, `4g.96gb` x1, `4g.96gb+gfx` x1;
/// PCI device ID 0x2BB5 (its `device-filter`; the Workstation and Max-Q IDs are not
/// published there, so those boards match by name). Placements: as the A30's, the other
/// 4-slice board (1-slice at 0..=3, 2-slice at 0 and 2, full at 0): unverified. Profile IDs
/// are not published: the shapes the A30 has take the A30's IDs (4g 0, 2g 5, 1g 14, 1g+me
/// 21), the others IDs from 100 up that NVML does not use, so that creating one by
/// ID fails loudly instead of creating another profile; use [`GpuModel::from_nvml`] on these
/// boards. MiB [`nominal_mib`]: unverified. Power: 600 W, the Workstation and Server
/// Editions' maximum board power (NVIDIA RTX PRO 6000 Blackwell product pages,
/// <https://www.nvidia.com/en-us/products/workstations/professional-desktop-gpus/rtx-pro-6000/>;
/// the Max-Q edition is 300 W); idle scaled from the A100 by TDP.
pub static RTX_PRO_6000_96GB: GpuModel = GpuModel {
    name: "RTX-PRO-6000-96GB",
    aliases: &[
        "RTX PRO 6000 Blackwell",
        "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
        "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
    ],
    pci_device_ids: &[0x2BB5],
    compute_slices: 4,
    memory_slices: 4,
    total_memory_mib: 96 * 1024,
    profiles: &[
        small(0, "4g.96gb", 4, nominal_mib(96), 1, A100_STARTS_0, false),
        small(100, "4g.96gb+gfx", 4, nominal_mib(96), 1, A100_STARTS_0, false),
        small(5, "2g.48gb", 2, nominal_mib(48), 2, FOUR_STARTS_2, false),
        small(101, "2g.48gb+gfx", 2, nominal_mib(48), 2, FOUR_STARTS_2, false),
        small(102, "2g.48gb-me", 2, nominal_mib(48), 2, FOUR_STARTS_2, false),
        small(106, "2g.48gb+me.all", 2, nominal_mib(48), 1, FOUR_STARTS_2, true),
        small(14, "1g.24gb", 1, nominal_mib(24), 4, FOUR_STARTS_1, false),
        small(103, "1g.24gb+gfx", 1, nominal_mib(24), 4, FOUR_STARTS_1, false),
        small(104, "1g.24gb-me", 1, nominal_mib(24), 4, FOUR_STARTS_1, false),
        small(21, "1g.24gb+me", 1, nominal_mib(24), 1, FOUR_STARTS_1, true),
        small(105, "1g.24gb+me.all", 1, nominal_mib(24), 1, FOUR_STARTS_1, true),
    ],
    source: "NVIDIA MIG User Guide, Supported GPUs (96GB, 4 instances); profiles, counts and PCI ID 0x2BB5 from NVIDIA mig-parted config-default.yaml (commit bd7160f); placements as A30; IDs assumed; MiB nominal: unverified",
    verified: false,
    fp8: true,
    power: scaled_board(
        600.0,
        "TDP: NVIDIA RTX PRO 6000 Blackwell product page (Workstation and Server Editions 600 W; Max-Q 300 W); idle: A100 measurement scaled by TDP",
    ),
};

/// NVIDIA RTX PRO 5000 Blackwell (48 GB GDDR7): 2 compute slices and 2 memory slices.
///
/// NVIDIA Multi-Instance GPU User Guide, "Supported GPUs"
/// (<https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-gpus.html>): RTX PRO
/// 5000 Blackwell, GB202, 48GB, at most 2 instances; "Deployment Considerations": driver
/// R575 (>= 575.57.08). No profile table for it was found (neither in the user guide's
/// "Supported MIG Profiles" as searched nor in NVIDIA's mig-parted defaults), so this table
/// is built from what is published: 2 instances at most means two halves, named after the
/// memory as NVIDIA names them on the RTX PRO 6000 (`1g.24gb` x2, `2g.48gb` x1, one
/// `1g.24gb+me`). Names, IDs (the A30's for the same shapes), placements and MiB are all
/// assumptions: unverified; use [`GpuModel::from_nvml`]. No PCI device ID is published
/// there either: the board matches by name. Power: 300 W (NVIDIA RTX PRO 5000 Blackwell
/// product page, maximum power consumption); idle scaled from the A100 by TDP.
pub static RTX_PRO_5000_48GB: GpuModel = GpuModel {
    name: "RTX-PRO-5000-48GB",
    aliases: &["RTX PRO 5000 Blackwell", "NVIDIA RTX PRO 5000 Blackwell"],
    pci_device_ids: &[],
    compute_slices: 2,
    memory_slices: 2,
    total_memory_mib: 48 * 1024,
    profiles: &[
        small(0, "2g.48gb", 2, nominal_mib(48), 1, A100_STARTS_0, false),
        small(14, "1g.24gb", 1, nominal_mib(24), 2, TWO_STARTS_1, false),
        small(21, "1g.24gb+me", 1, nominal_mib(24), 1, TWO_STARTS_1, true),
    ],
    source: "NVIDIA MIG User Guide, Supported GPUs (48GB, 2 instances); no profile table found: names, IDs, placements and MiB assumed (two halves), unverified",
    verified: false,
    fp8: true,
    power: scaled_board(
        300.0,
        "TDP: NVIDIA RTX PRO 5000 Blackwell product page (300 W); idle: A100 measurement scaled by TDP",
    ),
};

/// Every model dynmig knows.
pub static MODELS: &[&GpuModel] = &[
    &A100_40GB,
    &A100_80GB,
    &H100_80GB,
    &A30_24GB,
    &H100_NVL_94GB,
    &H200_141GB,
    &GH200_96GB,
    &GH200_144GB,
    &B200_180GB,
    &B300_269GB,
    &GB200_186GB,
    &RTX_PRO_6000_96GB,
    &RTX_PRO_5000_48GB,
];

/// Looks a model up by canonical name or alias, case-insensitively.
pub fn model_by_name(name: &str) -> Option<&'static GpuModel> {
    MODELS
        .iter()
        .copied()
        .find(|m| m.name.eq_ignore_ascii_case(name) || m.aliases.iter().any(|a| a.eq_ignore_ascii_case(name)))
}

/// Looks a model up by PCI device ID (the upper 16 bits of NVML's `pciDeviceId`, e.g. `0x20B2`
/// for an A100-SXM4-80GB).
pub fn model_by_pci_id(device_id: u16) -> Option<&'static GpuModel> {
    MODELS.iter().copied().find(|m| m.pci_device_ids.contains(&device_id))
}

/// The model of a GPU as NVML reports it: by PCI device ID first (it tells apart boards that
/// share a marketing name), then by product name (`nvmlDeviceGetName`), then by the name
/// without a leading `"NVIDIA "`.
pub fn model_for_device(pci_device_id: u16, name: &str) -> Option<&'static GpuModel> {
    model_by_pci_id(pci_device_id)
        .or_else(|| model_by_name(name))
        .or_else(|| name.strip_prefix("NVIDIA ").and_then(model_by_name))
}

/// Canonical names of every known model, for error messages.
pub fn model_names() -> Vec<&'static str> {
    MODELS.iter().map(|m| m.name).collect()
}

#[cfg(test)]
mod tests;
