//! Unit tests of [`super`].

use super::*;

#[test]
fn lookup_is_case_insensitive_and_knows_aliases() {
    assert_eq!(model_by_name("a100-80gb").unwrap().name, "A100-80GB");
    assert_eq!(model_by_name("NVIDIA A100-SXM4-40GB").unwrap().name, "A100-40GB");
    assert!(model_by_name("V100").is_none());
}

/// The double-memory profile is found by its shape ([`ProfileSpec::is_double_memory`]);
/// on every seven-slice table that shape has NVML's ID, and no other profile has it.
#[test]
fn the_double_memory_profile_has_nvmls_id() {
    for m in MODELS.iter().filter(|m| m.compute_slices == 7) {
        let dm: Vec<_> = m.profiles.iter().filter(|p| p.is_double_memory()).collect();
        assert_eq!(dm.len(), 1, "{}", m.name);
        assert_eq!(dm[0].id, DOUBLE_MEMORY_1G_PROFILE_ID, "{}", m.name);
        assert_eq!(
            m.profiles
                .iter()
                .filter(|p| p.id == DOUBLE_MEMORY_1G_PROFILE_ID)
                .count(),
            1,
            "{}",
            m.name
        );
    }
    assert_eq!(A100_40GB.profile("1g.10gb").unwrap().id, DOUBLE_MEMORY_1G_PROFILE_ID);
}

#[test]
fn smallest_profile_first_and_full_profile() {
    let m = &A100_40GB;
    let names: Vec<_> = m.schedulable_profiles().iter().map(|p| p.name).collect();
    assert_eq!(names, ["1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]);
    assert_eq!(m.full_profile().name, "7g.40gb");
}

/// Every table in [`MODELS`] is self-consistent: slices within [`MAX_SLICES`], a
/// full-GPU profile, unique IDs and names, placements inside the GPU, each profile's
/// `max_instances` placeable together on one GPU (and one more not), memory within the
/// total, profiles largest first, names that say their compute slices, and a source.
#[test]
fn every_table_is_consistent() {
    use crate::geometry::{place, ProfileCounts};
    for m in MODELS {
        let n = m.name;
        assert!(m.profiles.len() <= MAX_PROFILES, "{n}");
        assert!((1..=MAX_SLICES).contains(&m.compute_slices), "{n}");
        assert!((1..=MAX_SLICES).contains(&m.memory_slices), "{n}");
        assert!(!m.source.is_empty() && !m.power.source.is_empty(), "{n}");
        // No PCI ID published: the board must match by name, and the table is unverified.
        assert!(
            !m.pci_device_ids.is_empty() || (!m.verified && !m.aliases.is_empty()),
            "{n}"
        );
        let full = m.full_profile();
        assert_eq!(
            (full.memory_slices, full.compute_slices),
            (m.memory_slices, m.compute_slices),
            "{n}"
        );
        assert!(!full.is_variant() && !full.media_extensions, "{n}");
        let mut ids: Vec<u32> = m.profiles.iter().map(|p| p.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), m.profiles.len(), "{n}: profile IDs repeat");
        let mut names: Vec<String> = m.profiles.iter().map(|p| p.name.to_ascii_lowercase()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), m.profiles.len(), "{n}: profile names repeat");
        for w in m.profiles.windows(2) {
            let key = |p: &ProfileSpec| (p.memory_slices, p.compute_slices);
            assert!(
                key(&w[0]) >= key(&w[1]),
                "{n}: {} listed before {}",
                w[0].name,
                w[1].name
            );
        }
        for p in m.profiles {
            assert!(p.memory_mib > 0 && p.memory_mib <= m.total_memory_mib, "{n} {}", p.name);
            assert!(
                p.compute_slices >= 1 && p.compute_slices <= m.compute_slices,
                "{n} {}",
                p.name
            );
            assert!(
                p.memory_slices >= 1 && p.memory_slices <= m.memory_slices,
                "{n} {}",
                p.name
            );
            assert!(p.max_instances >= 1 && !p.placement_starts.is_empty(), "{n} {}", p.name);
            // Every start leaves the instance inside the GPU.
            for s in p.placement_starts {
                assert!(s + p.memory_slices <= m.memory_slices, "{n} {}@{s}", p.name);
            }
            // The name says the compute slices: "3g.40gb" has 3.
            let g: u8 = p.name.split('g').next().unwrap().parse().unwrap();
            assert_eq!(g, p.compute_slices, "{n} {}", p.name);
            // `max_instances` of the profile fit on one GPU together, one more does not.
            let mut c = ProfileCounts::empty();
            c.add(p, u32::from(p.max_instances));
            assert!(place(m, &c).is_some(), "{n}: {c} does not fit");
            c.add(p, 1);
            assert!(place(m, &c).is_none(), "{n}: {c} fits");
        }
    }
    // No PCI ID or name belongs to two models.
    for (i, a) in MODELS.iter().enumerate() {
        for b in &MODELS[i + 1..] {
            assert!(
                a.pci_device_ids.iter().all(|id| !b.pci_device_ids.contains(id)),
                "{} {}",
                a.name,
                b.name
            );
            assert!(model_by_name(a.name).unwrap().name == a.name);
            assert!(
                a.aliases.iter().all(|x| model_by_name(x).unwrap().name == a.name),
                "{}",
                a.name
            );
        }
    }
}

/// The boards added from NVIDIA's MIG user guide and mig-parted defaults: their slice
/// counts, full profiles, PCI IDs, lookups by NVML name, and that none is marked verified.
#[test]
fn blackwell_tables_added_unverified() {
    for (m, slices, full, pci) in [
        (&B300_269GB, (7, 8), "7g.269gb", Some(0x3182)),
        (&GB200_186GB, (7, 8), "7g.186gb", Some(0x2941)),
        (&RTX_PRO_6000_96GB, (4, 4), "4g.96gb", Some(0x2BB5)),
        (&RTX_PRO_5000_48GB, (2, 2), "2g.48gb", None),
    ] {
        assert!(!m.verified && !m.power.idle_measured && m.fp8, "{}", m.name);
        assert_eq!((m.compute_slices, m.memory_slices), slices, "{}", m.name);
        assert_eq!(m.full_profile().name, full);
        assert!(MODELS.contains(&m));
        if let Some(id) = pci {
            assert_eq!(model_by_pci_id(id).unwrap().name, m.name);
        }
    }
    assert_eq!(
        model_for_device(0xFFFF, "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition")
            .unwrap()
            .name,
        "RTX-PRO-6000-96GB"
    );
    assert_eq!(
        model_for_device(0xFFFF, "NVIDIA RTX PRO 5000 Blackwell").unwrap().name,
        "RTX-PRO-5000-48GB"
    );
    // The RTX PRO 6000's variants: +gfx and -me are not media profiles, +me and +me.all are.
    let v = |name: &str| RTX_PRO_6000_96GB.profile(name).unwrap();
    assert_eq!(v("1g.24gb+gfx").suffix(), "+gfx");
    assert!(v("1g.24gb+gfx").is_variant() && !v("1g.24gb+gfx").media_extensions);
    assert!(v("2g.48gb-me").is_variant() && !v("2g.48gb-me").media_extensions);
    assert!(v("1g.24gb+me.all").media_extensions && v("1g.24gb+me").media_extensions);
    assert!(!v("2g.48gb").is_variant() && v("2g.48gb").suffix().is_empty());
    // Power: the TDPs stated in the doc comments, idle scaled from the A100.
    let tdp: Vec<f64> = [&B300_269GB, &GB200_186GB, &RTX_PRO_6000_96GB, &RTX_PRO_5000_48GB]
        .iter()
        .map(|m| m.power.tdp_w)
        .collect();
    assert_eq!(tdp, [1100.0, 1200.0, 600.0, 300.0]);
    assert_eq!(RTX_PRO_5000_48GB.power.idle_w, A100_IDLE_W * 300.0 / A100_TDP_W);
}

#[test]
fn lookup_by_pci_id_and_nvml_name() {
    assert_eq!(model_by_pci_id(0x20B7).unwrap().name, "A30-24GB");
    assert_eq!(model_by_pci_id(0x2330).unwrap().name, "H100-80GB");
    assert!(model_by_pci_id(0x1DB4).is_none(), "a V100 has no MIG");
    // The PCI ID wins over the name; an unknown ID falls back to the name.
    assert_eq!(model_for_device(0x2335, "NVIDIA H100 NVL").unwrap().name, "H200-141GB");
    assert_eq!(
        model_for_device(0xFFFF, "NVIDIA H100 NVL").unwrap().name,
        "H100-NVL-94GB"
    );
    assert_eq!(
        model_for_device(0xFFFF, "NVIDIA A100-PCIE-40GB").unwrap().name,
        "A100-40GB"
    );
    assert!(model_for_device(0xFFFF, "Tesla T4").is_none());
}

/// The MiB NVML reported on 2026-11-26 (docs/results/hardware-2026-11-26/): the H200's
/// 1g.18gb and 2g/1g.35gb are smaller than the nominal 95% estimate, which therefore
/// does not always err low.
#[test]
fn probed_tables_hold_nvml_sizes() {
    let mib = |m: &GpuModel| -> Vec<(&str, u64)> { m.profiles.iter().map(|p| (p.name, p.memory_mib)).collect() };
    for (m, total, sizes) in [
        (&H100_80GB, 81559, [81152, 40448, 40448, 20096, 20096, 9984, 9984]),
        (&H200_141GB, 143771, [143360, 71424, 71424, 33280, 33280, 16384, 16384]),
    ] {
        assert!(m.verified && m.power.idle_measured, "{}", m.name);
        assert!(m.source.contains(NVML_PROBE_2026_11_26), "{}", m.name);
        assert!(
            m.power.source.contains("docs/results/hardware-2026-11-26/"),
            "{}",
            m.name
        );
        assert_eq!(m.total_memory_mib, total, "{}", m.name);
        let got: Vec<u64> = mib(m).iter().map(|x| x.1).collect();
        assert_eq!(got, sizes, "{}", m.name);
    }
    assert!(H200_141GB.profile("1g.18gb").unwrap().memory_mib < nominal_mib(18));
    assert!(H200_141GB.profile("2g.35gb").unwrap().memory_mib < nominal_mib(35));
    assert_eq!((H100_80GB.power.idle_w, H200_141GB.power.idle_w), (71.5, 80.2));
}

/// FP8 Tensor Cores came with Hopper: every Hopper and Blackwell table runs fp8, no
/// Ampere one does.
#[test]
fn fp8_is_hopper_and_later() {
    let runs: Vec<&str> = MODELS.iter().filter(|m| m.fp8).map(|m| m.name).collect();
    assert_eq!(
        runs,
        [
            "H100-80GB",
            "H100-NVL-94GB",
            "H200-141GB",
            "GH200-96GB",
            "GH200-144GB",
            "B200-180GB",
            "B300-269GB",
            "GB200-186GB",
            "RTX-PRO-6000-96GB",
            "RTX-PRO-5000-48GB"
        ]
    );
    assert!(!A100_40GB.fp8 && !A100_80GB.fp8 && !A30_24GB.fp8);
}

#[test]
fn nominal_sizes_err_low() {
    assert_eq!(nominal_mib(10), 9728);
    assert_eq!(nominal_mib(6), 5824);
    assert!(nominal_mib(141) < 141 * 1024);
    assert_eq!(nominal_mib(141) % 64, 0);
}

#[test]
fn a30_is_a_four_slice_gpu() {
    use crate::geometry::{
        addable_layouts, classic_profiles, distinct_multisets, maximal_layouts, plan_transition, Placed, ProfileCounts,
    };
    let m = &A30_24GB;
    assert_eq!(m.full_profile().name, "4g.24gb");
    let ids: Vec<u32> = classic_profiles(m).iter().map(|p| p.id).collect();
    assert_eq!(ids, [0, 5, 14]);
    // NVIDIA's A30 table: 4g; 2g+2g; 2g+1g+1g (two placements); 4x1g.
    let layouts: Vec<String> = maximal_layouts(m)
        .iter()
        .map(|l| l.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(
        layouts,
        [
            "4g.24gb@0",
            "2g.12gb@0 2g.12gb@2",
            "1g.6gb@0 1g.6gb@1 2g.12gb@2",
            "2g.12gb@0 1g.6gb@2 1g.6gb@3",
            "1g.6gb@0 1g.6gb@1 1g.6gb@2 1g.6gb@3"
        ]
    );
    let multisets: Vec<String> = distinct_multisets(m).iter().map(|c| c.to_string()).collect();
    assert_eq!(multisets, ["1x4g.24gb", "2x2g.12gb", "1x2g.12gb+2x1g.6gb", "4x1g.6gb"]);
    // A 1g at slice 3 leaves room for one 2g at 0 and a 1g at 2, never for a 4g.
    let one = m.profile("1g.6gb").unwrap();
    let around = addable_layouts(m, &[Placed { profile: one, start: 3 }]);
    assert!(around.contains(&ProfileCounts::parse(m, "1x2g.12gb+1x1g.6gb").unwrap()));
    assert!(!around.iter().any(|c| c.count("4g.24gb") > 0));
    // Five 1g do not fit, a 1g cannot start at slice 4, and only one +me instance.
    assert!(ProfileCounts::parse(m, "5x1g.6gb").is_err());
    assert!(ProfileCounts::parse(m, "2x2g.12gb+1x1g.6gb").is_err());
    assert!(ProfileCounts::parse(m, "1x1g.6gb+me+1x2g.12gb+me").is_err());
    // Busy 1g@1 kept: 4x1g -> 2g+2x1g destroys the idle 1g at 2 and 3 (or 0 and ...).
    let cur: Vec<(Placed, bool)> = (0..4).map(|s| (Placed { profile: one, start: s }, s == 1)).collect();
    let t = plan_transition(m, &cur, &ProfileCounts::parse(m, "1x2g.12gb+2x1g.6gb").unwrap()).unwrap();
    assert_eq!(t.operations(), 3);
    assert!(t.create.iter().all(|p| p.profile.name == "2g.12gb" && p.start == 2));
}
