//! mig-parted import/export against a config in the shape of NVIDIA's default one
//! (tests/fixtures/mig-parted-config.yaml).

use dynmig_core::geometry::{ProfileCounts, A100_40GB, A100_80GB, A30_24GB, H100_80GB};
use dynmig_core::migparted::{export, import, GpuConfig};

const FIXTURE: &str = include_str!("fixtures/mig-parted-config.yaml");

fn on(model: &dynmig_core::geometry::GpuModel, s: &str) -> GpuConfig {
    GpuConfig::Enabled(ProfileCounts::parse(model, s).unwrap())
}

#[test]
fn a100_80gb_node_of_four() {
    let m = &A100_80GB;
    let got = import(FIXTURE, m, 4).unwrap();
    assert!(got.skipped.is_empty(), "{:?}", got.skipped);
    assert_eq!(got.configs["all-disabled"], vec![GpuConfig::Disabled; 4]);
    assert_eq!(
        got.configs["all-enabled"],
        vec![GpuConfig::Enabled(ProfileCounts::empty()); 4]
    );
    assert_eq!(got.configs["all-1g.10gb"], vec![on(m, "7x1g.10gb"); 4]);
    assert_eq!(got.configs["all-3g.40gb"], vec![on(m, "2x3g.40gb"); 4]);
    assert_eq!(
        got.configs["all-balanced"],
        vec![on(m, "1x3g.40gb+1x2g.20gb+2x1g.10gb"); 4]
    );
    let custom = &got.configs["custom-config"];
    assert_eq!(custom[..2], [GpuConfig::Disabled, GpuConfig::Disabled]);
    assert_eq!(custom[2..], [on(m, "7x1g.10gb"), on(m, "7x1g.10gb")]);
}

#[test]
fn each_model_gets_its_own_entry() {
    let without_custom = &FIXTURE[..FIXTURE.find("  custom-config:").unwrap()];
    // On an A100-40GB "1g.10gb" is the double-memory 1g: four fit, the filter picks that entry.
    let got = import(without_custom, &A100_40GB, 2).unwrap();
    assert_eq!(got.configs["all-1g.10gb"], vec![on(&A100_40GB, "4x1g.10gb"); 2]);
    assert_eq!(
        got.configs["all-balanced"][0].to_string(),
        "1x3g.20gb+1x2g.10gb+2x1g.5gb"
    );
    assert_eq!(got.skipped, ["all-2g.20gb", "all-3g.40gb"]);
    // custom-config has no filter: seven double-memory 1g are more than an A100-40GB holds.
    let e = import(FIXTURE, &A100_40GB, 4).unwrap_err().to_string();
    assert!(
        e.contains("custom-config") && e.contains("'1g.10gb': 7 instances; one A100-40GB holds at most 4"),
        "{e}"
    );
    // The A30 has only all-balanced (and the unfiltered configs).
    let got = import(without_custom, &A30_24GB, 2).unwrap();
    assert_eq!(
        got.configs["all-balanced"],
        vec![on(&A30_24GB, "1x2g.12gb+2x1g.6gb"); 2]
    );
    assert_eq!(got.skipped, ["all-1g.10gb", "all-2g.20gb", "all-3g.40gb"]);
    // custom-config has no filter and names 1g.10gb, which the A30 lacks: the error names
    // the config and the profile.
    let e = import(FIXTURE, &A30_24GB, 4).unwrap_err().to_string();
    assert!(
        e.contains("custom-config") && e.contains("no MIG profile '1g.10gb'"),
        "{e}"
    );
}

#[test]
fn a_two_gpu_node_cannot_take_a_config_for_four() {
    let e = import(FIXTURE, &H100_80GB, 2).unwrap_err().to_string();
    assert!(e.contains("custom-config") && e.contains("GPU 2 does not exist"), "{e}");
}

#[test]
fn round_trip_through_export() {
    let m = &H100_80GB;
    let got = import(FIXTURE, m, 4).unwrap();
    let again = import(&export(m, &got.configs), m, 4).unwrap();
    assert_eq!(again.configs, got.configs);
    assert!(again.skipped.is_empty());
}

/// The small boards: the RTX PRO 6000's PCI ID is the filter; the RTX PRO 5000 has no
/// published PCI ID, so its export carries no filter (an empty one would match no GPU) and
/// still reads back; variant profiles (`+gfx`, `+me.all`) keep their names.
#[test]
fn small_boards_round_trip_through_export() {
    use dynmig_core::geometry::{RTX_PRO_5000_48GB, RTX_PRO_6000_96GB};
    use std::collections::BTreeMap;
    for (m, layouts) in [
        (
            &RTX_PRO_6000_96GB,
            ["1x2g.48gb+2x1g.24gb", "2x1g.24gb+gfx+1x1g.24gb+me.all"],
        ),
        (&RTX_PRO_5000_48GB, ["1x2g.48gb", "1x1g.24gb+me+1x1g.24gb"]),
    ] {
        let configs: BTreeMap<String, Vec<GpuConfig>> = layouts
            .iter()
            .enumerate()
            .map(|(i, l)| (format!("c{i}"), vec![on(m, l), GpuConfig::Disabled]))
            .collect();
        let out = export(m, &configs);
        assert_eq!(out.contains("device-filter"), !m.pci_device_ids.is_empty(), "{out}");
        if m.name == "RTX-PRO-6000-96GB" {
            assert!(out.contains("0x2BB510DE"), "{out}");
        }
        let back = import(&out, m, 2).unwrap_or_else(|e| panic!("{}: {e}\n{out}", m.name));
        assert_eq!(back.configs, configs, "{}", m.name);
    }
}
