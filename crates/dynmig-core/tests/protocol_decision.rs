//! The decision record codec (`protocol::decision`): exact round trips and strict parsing.

use dynmig_core::protocol::decision::{source_from_str, DecisionError, DecisionRecord, VERSION};
use dynmig_core::submit::Decision;
use dynmig_core::types::EstimateSource;
use proptest::prelude::*;

const ALL_SOURCES: [EstimateSource; 6] = [
    EstimateSource::MigMemHint,
    EstimateSource::MigProfileHint,
    EstimateSource::Default,
    EstimateSource::WholeGpu,
    EstimateSource::Model,
    EstimateSource::History,
];

#[test]
fn a_record_is_encoded_in_the_documented_form() {
    let r = DecisionRecord::new("2g.20gb", 1, 19_327_352_832, EstimateSource::MigMemHint);
    assert_eq!(r.version, VERSION);
    assert_eq!(
        r.encode(),
        "dynmig/v1 profile=2g.20gb count=1 mem=19327352832 source=mig-mem"
    );
    assert_eq!(r.to_string(), r.encode());
}

#[test]
fn memory_is_kept_to_the_byte_not_rounded_to_tenths_of_gib() {
    // 13.2 GiB plus 1 byte: the old AdminComment said "13.2GiB" and lost the rest.
    let bytes = 14_173_392_077u64;
    let r = DecisionRecord::new("2g.20gb", 1, bytes, EstimateSource::History);
    assert_eq!(DecisionRecord::parse(&r.encode()).unwrap().mem_bytes, bytes);
}

#[test]
fn a_submit_decision_becomes_a_record_with_the_same_values() {
    let d = Decision {
        profile: "3g.40gb",
        count: 2,
        memory_bytes: 30 << 30,
        source: EstimateSource::Model,
    };
    let r = DecisionRecord::from_decision(&d);
    assert_eq!(
        (r.profile.as_str(), r.count, r.mem_bytes, r.source),
        ("3g.40gb", 2, 30 << 30, EstimateSource::Model)
    );
}

#[test]
fn every_estimate_source_is_read_back_from_its_name() {
    for s in ALL_SOURCES {
        assert_eq!(source_from_str(&s.to_string()), Some(s), "{s}");
    }
    assert_eq!(source_from_str("Mig-Mem"), None);
}

#[test]
fn an_admins_own_comment_is_not_a_record() {
    let e = DecisionRecord::parse("reserved for the ML group").unwrap_err();
    assert!(matches!(e, DecisionError::NotARecord { .. }), "{e:?}");
    assert!(e.to_string().contains("expected 'dynmig/v1"), "{e}");
}

#[test]
fn the_old_dynmig_colon_format_is_refused_not_half_read() {
    let e = DecisionRecord::parse("dynmig: profile=2g.20gb count=1 mem=18.0GiB source=mig-mem").unwrap_err();
    assert!(matches!(e, DecisionError::NotARecord { .. }), "{e:?}");
}

#[test]
fn trailing_or_leading_text_is_refused() {
    let good = "dynmig/v1 profile=2g.20gb count=1 mem=19327352832 source=mig-mem";
    assert!(DecisionRecord::parse(good).is_ok());
    for bad in [
        format!("{good} ExitCode=97:0"),
        format!("{good}; site note"),
        format!("{good} "),
        format!("{good}\n"),
        format!(" {good}"),
        format!("note; {good}"),
    ] {
        assert!(DecisionRecord::parse(&bad).is_err(), "accepted {bad:?}");
    }
}

#[test]
fn fields_out_of_order_repeated_or_missing_are_refused() {
    for bad in [
        "dynmig/v1 count=1 profile=2g.20gb mem=1 source=mig-mem",
        "dynmig/v1 profile=2g.20gb profile=2g.20gb count=1 mem=1 source=mig-mem",
        "dynmig/v1 profile=2g.20gb count=1 mem=1",
        "dynmig/v1 profile=2g.20gb  count=1 mem=1 source=mig-mem",
        "dynmig/v1",
        "dynmig/v1 profile=2g.20gb count=1 mem=1 source=mig-mem extra=1",
    ] {
        let e = DecisionRecord::parse(bad).unwrap_err();
        assert!(matches!(e, DecisionError::Malformed { .. }), "{bad}: {e:?}");
    }
}

#[test]
fn another_version_is_refused_with_the_supported_one_named() {
    let e = DecisionRecord::parse("dynmig/v2 profile=2g.20gb count=1 mem=1 source=mig-mem").unwrap_err();
    assert!(matches!(e, DecisionError::UnsupportedVersion { .. }), "{e:?}");
    assert!(e.to_string().contains("reads version 1"), "{e}");
    assert!(DecisionRecord::parse("dynmig/v01 profile=a count=1 mem=1 source=model").is_err());
}

#[test]
fn bad_values_are_refused_with_what_is_allowed() {
    let cases = [
        ("profile=2g;20gb", "profile"),
        ("profile=/etc/x", "profile"),
        ("profile=", "profile"),
        ("count=0", "count"),
        ("count=+1", "count"),
        ("count=01", "count"),
        ("count=4294967296", "count"),
        ("mem=18.0GiB", "mem"),
        ("mem=-1", "mem"),
        ("mem=18446744073709551616", "mem"),
        ("source=guess", "source"),
    ];
    for (field, key) in cases {
        let mut parts = ["profile=2g.20gb", "count=1", "mem=1", "source=mig-mem"];
        let k = field.split('=').next().unwrap();
        let i = parts.iter().position(|p| p.starts_with(&format!("{k}="))).unwrap();
        parts[i] = field;
        let text = format!("dynmig/v1 {}", parts.join(" "));
        match DecisionRecord::parse(&text) {
            Err(DecisionError::BadValue { key: got, .. }) => assert_eq!(got, key, "{text}"),
            other => panic!("{text}: expected a bad {key}, got {other:?}"),
        }
    }
    let e = DecisionRecord::parse("dynmig/v1 profile=a count=1 mem=1 source=guess").unwrap_err();
    assert!(e.to_string().contains("allowed: mig-mem, mig-profile"), "{e}");
}

#[test]
fn a_huge_text_is_refused_and_quoted_cut() {
    let text = format!("dynmig/v1 profile={} count=1 mem=1 source=model", "a".repeat(10_000));
    let e = DecisionRecord::parse(&text).unwrap_err().to_string();
    assert!(e.len() < 400, "{} bytes", e.len());
    let e = DecisionRecord::parse(&"x".repeat(10_000)).unwrap_err().to_string();
    assert!(e.len() < 300 && e.contains("..."), "{e}");
}

fn source() -> impl Strategy<Value = EstimateSource> {
    prop::sample::select(ALL_SOURCES.to_vec())
}

proptest! {
    #[test]
    fn encode_then_parse_gives_the_same_record(
        profile in "[A-Za-z0-9.+_-]{1,32}",
        count in 1u32..,
        mem in any::<u64>(),
        source in source(),
    ) {
        let r = DecisionRecord::new(profile, count, mem, source);
        let text = r.encode();
        prop_assert_eq!(DecisionRecord::parse(&text), Ok(r));
    }

    #[test]
    fn any_text_that_parses_encodes_back_to_itself(text in "dynmig/v1 profile=[a-z0-9.]{0,8} count=[0-9+]{0,4} mem=[0-9]{0,5} source=[a-z-]{0,12}( x)?") {
        if let Ok(r) = DecisionRecord::parse(&text) {
            prop_assert_eq!(r.encode(), text);
        }
    }

    #[test]
    fn parse_never_panics_on_any_text(text in "\\PC{0,300}") {
        let _ = DecisionRecord::parse(&text);
    }
}
