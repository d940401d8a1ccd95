//! Layouts as text: every layout dynmig accepts can be written and read back, `+me` profiles
//! included, and counts in the text are bounded by the model table, never allocated.

use dynmig_core::geometry::*;
use dynmig_core::migparted::import;
use std::time::{Duration, Instant};

#[test]
fn every_layout_of_every_model_reads_back_as_written_media_extension_profiles_included() {
    for model in MODELS {
        let every_profile: Vec<&'static ProfileSpec> = model.profiles.iter().collect();
        let layouts = all_layouts_with(model, &every_profile);
        assert!(
            layouts.iter().any(|l| l.iter().any(|(name, _)| name.ends_with("+me"))),
            "{}: no +me layout enumerated",
            model.name
        );
        for layout in layouts {
            let text = layout.to_string();
            let back = ProfileCounts::parse(model, &text)
                .unwrap_or_else(|e| panic!("{}: '{text}' does not read back: {e}", model.name));
            assert_eq!(back, layout, "{}: '{text}'", model.name);
        }
        for p in model.profiles {
            let one = ProfileCounts::parse(model, p.name).unwrap();
            assert_eq!(one.count(p.name), 1, "{}: {}", model.name, p.name);
            assert_eq!(ProfileCounts::parse(model, &one.to_string()).unwrap(), one);
        }
    }
}

#[test]
fn a_media_extension_profile_is_one_term_not_a_profile_named_me() {
    let c = ProfileCounts::parse(&A100_80GB, "1x1g.10gb+me+6x1g.10gb").unwrap();
    assert_eq!((c.count("1g.10gb+me"), c.count("1g.10gb")), (1, 6));
    let c = ProfileCounts::parse(&A100_80GB, "6x1g.10gb + 1g.10gb+ME").unwrap();
    assert_eq!((c.count("1g.10gb+me"), c.count("1g.10gb")), (1, 6));
    let e = ProfileCounts::parse(&A100_80GB, "me+1x7g.80gb")
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown MIG profile 'me'"), "{e}");
    let node = NodeLayout::parse(&A100_80GB, 2, "1x1g.10gb+me+6x1g.10gb,1x7g.80gb").unwrap();
    assert_eq!(node.to_string(), "1x1g.10gb+me+6x1g.10gb,1x7g.80gb");
    assert_eq!(NodeLayout::parse(&A100_80GB, 2, &node.to_string()).unwrap(), node);
}

#[test]
fn a_huge_instance_count_in_a_layout_is_an_error_never_an_allocation_or_a_wrap() {
    for text in [
        "4294967295x1g.10gb",
        "4294967295x1g.10gb+1x1g.10gb",
        "1x1g.10gb+4294967295x1g.10gb",
        "18446744073709551616x1g.10gb",
    ] {
        let t0 = Instant::now();
        let e = ProfileCounts::parse(&A100_80GB, text).unwrap_err();
        assert!(
            matches!(
                &e,
                LayoutParseError::TooMany {
                    profile: "1g.10gb",
                    max: 7,
                    ..
                }
            ),
            "{text}: {e}"
        );
        assert!(e.to_string().contains("one A100-80GB holds at most 7"), "{e}");
        let e = NodeLayout::parse(&A100_80GB, 1, text).unwrap_err().to_string();
        assert!(e.contains("at most 7"), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(5), "{text}: {:?}", t0.elapsed());
    }
    let e = ProfileCounts::parse(&A100_80GB, "4x1g.10gb+4x1g.10gb")
        .unwrap_err()
        .to_string();
    assert!(e.contains("8 instances of 1g.10gb"), "{e}");
    let e = ProfileCounts::parse(&A30_24GB, "5x1g.6gb").unwrap_err().to_string();
    assert!(e.contains("one A30-24GB holds at most 4"), "{e}");
}

#[test]
fn placing_counts_above_the_model_table_returns_none_without_building_them() {
    let mut c = ProfileCounts::empty();
    let p = A100_80GB.profile("1g.10gb").unwrap();
    c.add(p, u32::MAX);
    c.add(p, u32::MAX);
    assert_eq!(c.count("1g.10gb"), u32::MAX, "counts saturate");
    assert_eq!(c.total(), u32::MAX);
    let t0 = Instant::now();
    assert!(place(&A100_80GB, &c).is_none());
    assert!(place_around(&A100_80GB, &[], &c).is_none());
    assert!(t0.elapsed() < Duration::from_secs(5));
    // A profile the model lacks is never silently dropped.
    let mut other = ProfileCounts::empty();
    other.add(A30_24GB.profile("1g.6gb").unwrap(), 1);
    assert!(place(&A100_80GB, &other).is_none());
}

#[test]
fn a_node_layout_with_the_wrong_gpu_count_says_both_counts() {
    let e = NodeLayout::parse(&A100_80GB, 2, "1x7g.80gb").unwrap_err();
    assert!(
        matches!(
            e,
            LayoutParseError::GpuCount {
                given: 1,
                expected: 2,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn layout_errors_cut_long_user_text() {
    let long = format!("1x{}", "z".repeat(10_000));
    let e = ProfileCounts::parse(&A100_80GB, &long).unwrap_err().to_string();
    assert!(e.len() < 1000 && e.contains("zzz..."), "{} chars", e.len());
}

const MIG_PARTED: &str =
    "version: v1\nmig-configs:\n  x:\n    - devices: all\n      mig-enabled: true\n      mig-devices:\n";

#[test]
fn a_huge_mig_parted_instance_count_is_an_error_not_an_allocation() {
    for count in ["4294967295", "0x20B210DE", "8"] {
        let text = format!("{MIG_PARTED}        \"1g.10gb\": {count}\n");
        let t0 = Instant::now();
        let e = import(&text, &A100_80GB, 1).unwrap_err().to_string();
        assert!(e.contains("'1g.10gb'") && e.contains("at most 7"), "{count}: {e}");
        assert!(t0.elapsed() < Duration::from_secs(5), "{count}: {:?}", t0.elapsed());
    }
    let ok = format!("{MIG_PARTED}        \"1g.10gb\": 7\n");
    assert!(import(&ok, &A100_80GB, 1).is_ok());
}
