//! A model built at run time from NVML's report: the H100 probe capture (read-only NVML,
//! driver 580.159.04, 2026-11-26; copied from dynmig-gpu's fixtures) builds a model equal to
//! the `H100_80GB` table, whose layouts enumerate the same; an altered capture gives the
//! expected mismatch lines; reports that cannot make a model are refused with the reason.

use dynmig_core::geometry::*;

/// The first GPU of the H100 capture, as the probe wrote it (extra fields ignored).
fn h100_report() -> NvmlGeometry {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/probe-h100-80gb.json"
    ))
    .expect("the H100 probe fixture");
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    serde_json::from_value(json["gpus"][0].clone()).unwrap()
}

fn strings<T: ToString>(v: &[T]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

fn joined(layouts: Vec<Vec<Placed>>) -> Vec<String> {
    layouts.iter().map(|l| strings(l).join(" ")).collect()
}

fn layouts(m: &GpuModel) -> Vec<String> {
    joined(maximal_layouts_with(m, &m.schedulable_profiles()))
}

#[test]
fn the_h100_capture_builds_the_h100_table() {
    let r = h100_report();
    assert_eq!(
        (r.name.as_str(), r.device_id(), r.profiles.len()),
        ("NVIDIA H100 80GB HBM3", 0x2330, 7)
    );
    let m = GpuModel::from_nvml(&r, None).unwrap();
    assert_eq!(cross_check(m, &H100_80GB), Vec::<String>::new());
    // Matched by PCI ID: the table's name, aliases, power and FP8.
    assert_eq!(m.name, "H100-80GB");
    assert_eq!((m.aliases, m.power, m.fp8), (H100_80GB.aliases, H100_80GB.power, true));
    assert!(
        m.verified && m.source.contains("NVML") && m.source.contains("0x2330"),
        "{}",
        m.source
    );
    assert_eq!((m.compute_slices, m.memory_slices, m.total_memory_mib), (7, 8, 81559));
    // Same profiles in the same order (largest first), so every enumeration is the same.
    let names = |m: &GpuModel| m.profiles.iter().map(|p| p.name).collect::<Vec<_>>();
    assert_eq!(names(m), names(&H100_80GB));
    assert_eq!(m.profiles, H100_80GB.profiles);
    assert_eq!(layouts(m), layouts(&H100_80GB));
    assert_eq!(maximal_layouts(m).len(), 19, "NVIDIA's 19 H100 configurations");
    assert_eq!(joined(maximal_layouts(m)), joined(maximal_layouts(&H100_80GB)));
    assert_eq!(
        strings(&distinct_multisets(m)),
        strings(&distinct_multisets(&H100_80GB))
    );
    assert_eq!(strings(&all_layouts(m)), strings(&all_layouts(&H100_80GB)));
    assert_eq!(m.full_profile().name, "7g.80gb");
    // Text and transitions work on it like on the table.
    let c = ProfileCounts::parse(m, "1x1g.10gb+me+2x1g.10gb+1x4g.40gb").unwrap();
    assert_eq!(place(m, &c).map(|p| p.len()), Some(4));
    let t = plan_transition(m, &[], &ProfileCounts::parse(m, "1g.10gb").unwrap()).unwrap();
    assert_eq!(strings(&t.create), ["1g.10gb@6"]);
}

#[test]
fn one_model_per_board_kind_per_process() {
    let r = h100_report();
    let a = GpuModel::from_nvml(&r, None).unwrap();
    let b = GpuModel::from_nvml(&r, Some(&H100_80GB)).unwrap();
    assert!(std::ptr::eq(a, b), "an equal report returns the model built first");
    let mut other = r.clone();
    other.profiles.retain(|p| !p.name.contains("+me"));
    let c = GpuModel::from_nvml(&other, None).unwrap();
    assert!(!std::ptr::eq(a, c));
    assert!(std::ptr::eq(c, GpuModel::from_nvml(&other, None).unwrap()));
}

#[test]
fn an_altered_capture_gives_one_line_per_mismatch() {
    let mut r = h100_report();
    let find = |r: &mut NvmlGeometry, name: &str| -> usize { r.profiles.iter().position(|p| p.name == name).unwrap() };
    let i = find(&mut r, "MIG 1g.10gb");
    r.profiles[i].memory_mib = 9728;
    let i = find(&mut r, "MIG 3g.40gb");
    r.profiles[i].instance_count = 1;
    r.profiles[i].placements = vec![(4, 4)];
    let i = find(&mut r, "MIG 2g.20gb");
    r.profiles[i].id = 13;
    r.profiles.retain(|p| p.name != "MIG 1g.20gb");
    r.profiles.push(NvmlProfile {
        id: 30,
        name: "MIG 1g.10gb+gfx".into(),
        slice_count: 1,
        instance_count: 7,
        memory_mib: 9984,
        placements: (0..7).map(|s| (s, 1)).collect(),
    });
    let m = GpuModel::from_nvml(&r, None).unwrap();
    assert_eq!(
        cross_check(m, &H100_80GB),
        [
            "3g.40gb: at most 1 instances per NVML, 2 per table H100-80GB",
            "3g.40gb: placement starts NVML [4], table H100-80GB [0, 4]",
            "2g.20gb: profile ID NVML 13, table H100-80GB 14",
            "1g.10gb: memory NVML 9728 MiB, table H100-80GB 9984 MiB",
            "1g.10gb+gfx (ID 30): reported by NVML, missing from table H100-80GB",
            "1g.20gb (ID 15): in table H100-80GB, not reported by NVML",
        ]
    );
    // Slices: an A100-40GB table against the H100 capture differs in MiB and total memory only.
    let h = GpuModel::from_nvml(&h100_report(), None).unwrap();
    let lines = cross_check(h, &A100_40GB);
    assert!(
        lines.contains(&"total memory: NVML 81559 MiB, table A100-40GB 40960 MiB".to_string()),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with("1g.10gb: memory NVML 9984 MiB")),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("missing from table A100-40GB")),
        "{lines:?}"
    );
    // And the other way round against a 4-slice table: the GPU's slices differ.
    let lines = cross_check(h, &RTX_PRO_6000_96GB);
    assert!(
        lines.contains(&"compute slices: NVML 7, table RTX-PRO-6000-96GB 4".to_string()),
        "{lines:?}"
    );
    assert!(
        lines.contains(&"memory slices: NVML 8, table RTX-PRO-6000-96GB 4".to_string()),
        "{lines:?}"
    );
    assert!(cross_check(&RTX_PRO_6000_96GB, &RTX_PRO_6000_96GB).is_empty());
}

#[test]
fn an_unknown_board_takes_its_nvml_name_and_the_most_similar_power() {
    // A 4-slice board no table knows, reported like the RTX PRO 6000 would be.
    let p = |id, name: &str, slices: u32, count, mib, starts: &[u32]| NvmlProfile {
        id,
        name: format!("MIG {name}"),
        slice_count: slices,
        instance_count: count,
        memory_mib: mib,
        placements: starts.iter().map(|&s| (s, slices)).collect(),
    };
    let r = NvmlGeometry {
        name: "NVIDIA Future Board".into(),
        pci_device_id: 0xFFFE_10DE,
        memory_total_mib: 97_000,
        profiles: vec![
            p(14, "1g.23gb", 1, 4, 23_000, &[0, 1, 2, 3]),
            p(5, "2g.47gb", 2, 2, 47_000, &[0, 2]),
            p(0, "4g.95gb", 4, 1, 95_000, &[0]),
        ],
    };
    let m = GpuModel::from_nvml(&r, None).unwrap();
    assert_eq!((m.name, m.aliases), ("Future Board", &["NVIDIA Future Board"][..]));
    assert_eq!(m.pci_device_ids, [0xFFFE]);
    assert_eq!((m.compute_slices, m.memory_slices), (4, 4));
    // Same slices, nearest memory: the RTX PRO 6000 (98304 MiB), not the A30 (24576).
    assert_eq!(m.power, RTX_PRO_6000_96GB.power);
    assert!(
        m.source.contains("most similar table, RTX-PRO-6000-96GB"),
        "{}",
        m.source
    );
    let names: Vec<&str> = m.profiles.iter().map(|p| p.name).collect();
    assert_eq!(names, ["4g.95gb", "2g.47gb", "1g.23gb"], "largest first");
    assert_eq!(
        strings(&distinct_multisets(m)),
        ["1x4g.95gb", "2x2g.47gb", "1x2g.47gb+2x1g.23gb", "4x1g.23gb"]
    );
}

#[test]
fn a_report_that_cannot_make_a_model_is_refused_with_the_reason() {
    let base = h100_report();
    let refused = |f: &dyn Fn(&mut NvmlGeometry), want: &str| {
        let mut r = base.clone();
        f(&mut r);
        let e = GpuModel::from_nvml(&r, None).unwrap_err();
        assert!(e.contains(want), "{e}");
    };
    refused(&|r| r.profiles.clear(), "no MIG profile for NVIDIA H100 80GB HBM3");
    refused(
        &|r| r.profiles[0].placements.clear(),
        "1g.10gb (ID 19): NVML reports no placement",
    );
    refused(
        &|r| r.profiles[1].placements[1].1 = 3,
        "placements of different sizes (2 and 3 memory slices at 2)",
    );
    refused(
        &|r| r.profiles[0].memory_mib = 90_000,
        "90000 MiB per instance; the GPU has 81559 MiB",
    );
    refused(&|r| r.profiles[0].slice_count = 0, "0 compute slices; allowed 1 to 16");
    refused(&|r| r.profiles[0].placements[0] = (16, 1), "ends past memory slice 16");
    refused(&|r| r.profiles[0].name = "MIG big".into(), "not of the form Ng.Mgb");
    refused(&|r| r.profiles[1].id = 19, "reported twice");
    refused(&|r| r.profiles.retain(|p| p.slice_count != 7), "no full-GPU profile");
    refused(
        &|r| {
            let extra = r.profiles[0].clone();
            for i in 0..10 {
                let mut p = extra.clone();
                p.id = 100 + i;
                p.name = format!("MIG 1g.10gb+x{i}");
                r.profiles.push(p);
            }
        },
        "17 MIG profiles",
    );
}
