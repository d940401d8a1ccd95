//! User strings echoed in hint messages are cut (review: a 10 kB value was echoed whole).

use dynmig_core::hints::{hints_from_spank_env, parse_hint, shorten, MAX_QUOTED};

#[test]
fn a_bad_hint_message_quotes_at_most_100_chars_of_the_users_string() {
    let huge = format!("18{}", "Q".repeat(10_000));
    for option in [
        "mig-mem",
        "mig-profile",
        "mig-model-params",
        "mig-dtype",
        "mig-phase",
        "mig-batch",
    ] {
        let e = parse_hint(option, &huge).unwrap_err().to_string();
        assert!(!e.contains(&"Q".repeat(MAX_QUOTED + 1)), "{option}: {} bytes", e.len());
        assert!(e.len() < 2 * MAX_QUOTED + 600, "{option}: {} bytes", e.len());
        assert!(e.contains("..."), "{option}: {e}");
    }
    let e = parse_hint(&"mig-x".repeat(1000), "1").unwrap_err().to_string();
    assert!(e.len() < 500, "{} bytes", e.len());
    let entry = format!("_SLURM_SPANK_OPTION_dynmig_mig_mem={huge}");
    let e = hints_from_spank_env(&[&entry]).unwrap_err().to_string();
    assert!(e.len() < 500, "{} bytes", e.len());
}

#[test]
fn shorten_cuts_at_a_character_boundary() {
    assert_eq!(shorten("ééé", 2), "éé...");
    assert_eq!(shorten("", 2), "");
    assert_eq!(shorten("ab", 2), "ab");
}
