//! Unit tests of [`super`].

use super::*;

#[test]
fn shows_totals_compares_per_type_sums_and_nothing_else() {
    let want = BTreeMap::from([("3g.40gb", 2u32), ("1g.10gb", 1)]);
    assert!(shows_totals("gpu:3g.40gb:2(IDX:0,1),gres/gpu:1g.10gb:1", &want));
    assert!(shows_totals("gpu:1g.10gb:1,gpu:3g.40gb:1,gpu:3g.40gb:1,shard:4", &want));
    assert!(shows_totals("gpu:1g.10gb:1,gpu:3g.40gb:2,gpu:7g.80gb:0", &want));
    assert!(!shows_totals("gpu:3g.40gb:2", &want));
    assert!(!shows_totals("gpu:3g.40gb:2,gpu:1g.10gb:1,gpu:7g.80gb:1", &want));
    assert!(!shows_totals("gpu:3g.40gb:3,gpu:1g.10gb:1", &want));
    assert!(shows_totals("(null)", &BTreeMap::<&str, u32>::new()));
    assert!(!shows_totals("", &BTreeMap::from([("1g.10gb", 0u32)])));
    // Sums saturate instead of overflowing.
    let big = format!("gpu:1g.10gb:{m},gpu:1g.10gb:{m}", m = u32::MAX);
    assert_eq!(
        node_gres_totals(&big),
        BTreeMap::from([("1g.10gb".to_string(), u32::MAX)])
    );
    let texts = node_gres_totals("gpu:2g.20gb:1,gpu:2g.20gb:2");
    assert!(shows_totals("gpu:2g.20gb:3", &texts));
}

fn gpu(text: &str) -> GresEntry {
    TresList::parse(text).unwrap().gpu_entries().next().unwrap().clone()
}

#[test]
fn reads_both_prefix_forms_types_and_counts() {
    let g = gpu("gres:gpu:1");
    assert_eq!(
        (g.prefix, g.gres_type.as_deref(), g.count),
        (GresPrefix::Colon, None, 1)
    );
    let g = gpu("gres:gpu:a100:2");
    assert_eq!((g.gres_type.as_deref(), g.count), (Some("a100"), 2));
    let g = gpu("gres/gpu:2");
    assert_eq!((g.prefix, g.count), (GresPrefix::Slash, 2));
    let g = gpu("gres/gpu:1g.10gb:3");
    assert_eq!((g.gres_type.as_deref(), g.count), (Some("1g.10gb"), 3));
    let g = gpu("gres/gpu=4");
    assert_eq!((g.count, g.count_with_equals), (4, true));
    let g = gpu("gres:gpu");
    assert_eq!((g.count, g.count_written), (1, false));
    let g = gpu("gres:gpu:tesla");
    assert_eq!((g.gres_type.as_deref(), g.count), (Some("tesla"), 1));
    let g = gpu("gpu:2");
    assert_eq!((g.prefix, g.count), (GresPrefix::None, 2));
}

#[test]
fn renders_unchanged_entries_as_they_came() {
    for s in [
        "gres:gpu:1,gres:shard:4",
        "gres:gpu:1,gres/foo:2",
        "cpu=2,gres/gpu:1",
        "gres:gpu",
        "gres:mps:100k",
        "gres:shard:00",
    ] {
        assert_eq!(TresList::parse(s).unwrap().render(), s);
    }
}

#[test]
fn set_gpu_keeps_other_entries_and_prefix() {
    let mut t = TresList::parse("gres:gpu:1,gres:shard:4").unwrap();
    assert!(t.set_gpu(Some("2g.20gb"), 1));
    assert_eq!(t.render(), "gres:gpu:2g.20gb:1,gres:shard:4");
    let mut t = TresList::parse("gres/foo:2,gres/gpu").unwrap();
    t.set_gpu(Some("7g.80gb"), 1);
    assert_eq!(t.render(), "gres/foo:2,gres/gpu:7g.80gb:1");
    let mut t = TresList::parse("gres:shard:4").unwrap();
    assert!(!t.set_gpu(Some("x"), 1));
    assert_eq!(t.render(), "gres:shard:4");
}

#[test]
fn remove_gpu_leaves_the_rest() {
    let mut t = TresList::parse("gres/gpu:2,license/foo:1").unwrap();
    assert_eq!(t.remove_gpu().len(), 1);
    assert_eq!(t.render(), "license/foo:1");
    assert_eq!(t.prefix(), None);
    assert_eq!(
        TresList::parse("cpu=2,gres/shard:00").unwrap().prefix(),
        Some(GresPrefix::Slash)
    );
    assert_eq!(TresList::parse("").unwrap().render(), "");
}

#[test]
fn only_c_white_space_is_trimmed_around_entries() {
    // Found by crates/dynmig-fuzz (tres): a no-break space after the name made a
    // non-GPU entry to Slurm, yet it was read as `gres:gpu` and rewritten.
    for s in [
        "gres:gpu\u{a0}",
        "\u{a0}gres:gpu:1",
        "gres/gpu\u{2028}:1",
        "\u{a0}",
        "gres:gpu:1,\u{3000}",
    ] {
        let t = TresList::parse(s).unwrap();
        assert_eq!(t.gpu_entries().count(), usize::from(s.ends_with('\u{3000}')), "{s:?}");
        let mut typed = t.clone();
        typed.set_gpu(Some("2g.20gb"), 1);
        assert!(
            typed.render().contains(s.trim_start_matches("gres:gpu:1,")),
            "{s:?} kept byte for byte"
        );
    }
    let g = gpu(" \tgres:gpu:2\r\n");
    assert_eq!(g.count, 2);
}

#[test]
fn bad_gpu_entries_are_errors_and_other_bad_entries_are_kept() {
    assert!(TresList::parse("gres:gpu:a:b:2").is_err());
    assert!(TresList::parse("gres:gpu=1x").is_err());
    let g = gpu("gres:gpu:1g.10gb");
    assert_eq!((g.gres_type.as_deref(), g.count), (Some("1g.10gb"), 1));
    assert!(TresList::parse("gres:gpu::1").is_err());
    assert_eq!(TresList::parse("gres:foo:a:b:2").unwrap().render(), "gres:foo:a:b:2");
}

#[test]
fn a_job_request_is_read_once_into_typed_entries() {
    let r = GpuRequest::parse("gres:gpu:2g.20gb:2,gres:shard:4");
    assert_eq!(r.as_str(), "gres:gpu:2g.20gb:2,gres:shard:4");
    assert_eq!(r, "gres:gpu:2g.20gb:2,gres:shard:4");
    assert_eq!(r.to_string(), r.as_str());
    assert_eq!(r.error(), None);
    assert_eq!(
        r.gpus().collect::<Vec<_>>(),
        [GpuAsk {
            gres_type: Some("2g.20gb"),
            count: 2
        }]
    );
    // Every GPU entry, count 0 and untyped ones included; typed() keeps the typed ones.
    let r = GpuRequest::from("gres/gpu:0,gres/gpu:a100:1,gres/gpu:3g.40gb=2,gres/gpu");
    assert_eq!(
        r.gpus().map(|g| (g.gres_type, g.count)).collect::<Vec<_>>(),
        [(None, 0), (Some("a100"), 1), (Some("3g.40gb"), 2), (None, 1)]
    );
    assert_eq!(r.typed().collect::<Vec<_>>(), [("a100", 1), ("3g.40gb", 2)]);
    // Counts as Slurm's strtoull reads them, up to u32::MAX.
    let r = GpuRequest::from(format!("gpu:1g.10gb:+{}", u32::MAX));
    assert_eq!(r.typed().collect::<Vec<_>>(), [("1g.10gb", u32::MAX)]);
    // No GPU at all.
    for text in ["", "gres:shard:4", "cpu=2,license/foo:1", "gres:gpu\u{a0}"] {
        let r = GpuRequest::parse(text);
        assert_eq!((r.gpus().count(), r.error()), (0, None), "{text:?}");
        assert_eq!(r.retyped("2g.20gb", 1), None, "{text:?}");
    }
    assert_eq!(GpuRequest::default(), "");
}

#[test]
fn a_job_request_is_rewritten_keeping_its_form() {
    let r = GpuRequest::parse("gres/gpu:1g.10gb:3,gres/shard:4");
    assert_eq!(
        r.retyped("2g.20gb", 3).as_deref(),
        Some("gres/gpu:2g.20gb:3,gres/shard:4")
    );
    // Count-0 entries stay; untyped ones become typed.
    let r = GpuRequest::parse("gres:gpu:0,gres:gpu:2");
    assert_eq!(
        r.retyped("7g.80gb", 2).as_deref(),
        Some("gres:gpu:0,gres:gpu:7g.80gb:2")
    );
    assert_eq!(GpuRequest::parse("gres:gpu:0").retyped("7g.80gb", 1), None);
    // The request itself is unchanged.
    assert_eq!(r, "gres:gpu:0,gres:gpu:2");
}

#[test]
fn an_unreadable_job_request_says_why_and_asks_for_no_gpu() {
    for (text, why) in [
        ("gres:gpu:-1", "cannot be negative; write a whole number, e.g. gpu:1"),
        (
            "gres:gpu=1x",
            "not a whole number; write it in plain digits, e.g. gpu:2",
        ),
        ("gres:gpu:1k", "not a whole number; write it in plain digits"),
        (
            "gres:gpu:a:b:2",
            "too many fields; write NAME[:TYPE][:COUNT], e.g. gpu:2g.20gb:1",
        ),
        (
            "gres:gpu::1",
            "a field is empty (`::`, or a `:` at the end); write NAME[:TYPE][:COUNT]",
        ),
        ("gres:gpu:", "a field is empty"),
        (
            "gres:gpu:4294967296",
            "more than 4294967295, the most GPUs a request may ask for",
        ),
        ("gres:shard:1,gpu:2g.20gb:-3", "cannot be negative"),
    ] {
        let r = GpuRequest::parse(text);
        let e = r.error().unwrap_or_else(|| panic!("{text:?} was read"));
        assert!(e.why.contains(why), "{text:?}: {e}");
        assert!(e.to_string().starts_with("cannot read GPU request '"), "{text:?}: {e}");
        assert_eq!(r.gpus().count(), 0, "{text:?}");
        assert_eq!(r.retyped("2g.20gb", 1), None, "{text:?}");
        assert_eq!(r.as_str(), text, "the text is kept as Slurm gave it");
    }
    // The entry is quoted, cut to a bounded length.
    let long = format!("gres:gpu:{}:x:1", "a".repeat(500));
    let e = GpuRequest::parse(long).error().unwrap().to_string();
    assert!(e.len() < 300, "{e}");
}

mod job_request_props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        /// The typed request says what the TRES list says, and a retyped request reads back
        /// with every GPU entry above 0 asking for the new type, count-0 entries as they were.
        #[test]
        fn the_typed_request_agrees_with_the_list_and_retypes_cleanly(
            entries in proptest::collection::vec(
                "(gres[:/])?gpu(:(1g\\.10gb|2g\\.20gb|a100))?([:=][+ 0]?[0-9]{1,3})?|gres[:/]gpu:-1|gres[:/](shard|mps):[0-9]|cpu=[0-9]|gres:gpu::1",
                0..4,
            ),
            count in 1u32..9,
        ) {
            let text = entries.join(",");
            let r = GpuRequest::parse(text.as_str());
            prop_assert_eq!(r.as_str(), text.as_str());
            match TresList::parse(&text) {
                Ok(list) => {
                    prop_assert_eq!(r.error(), None);
                    let want: Vec<(Option<String>, u64)> =
                        list.gpu_entries().map(|g| (g.gres_type.clone(), g.count)).collect();
                    let got: Vec<(Option<String>, u64)> =
                        r.gpus().map(|g| (g.gres_type.map(str::to_string), u64::from(g.count))).collect();
                    prop_assert_eq!(got, want);
                }
                Err(e) => {
                    prop_assert_eq!(r.error(), Some(&e));
                    prop_assert_eq!(r.gpus().count(), 0);
                }
            }
            let zeros = r.gpus().filter(|g| g.count == 0).count();
            match r.retyped("3g.40gb", count) {
                Some(out) => {
                    let again = GpuRequest::parse(out);
                    prop_assert_eq!(again.error(), None);
                    let want = GpuAsk { gres_type: Some("3g.40gb"), count };
                    prop_assert!(again.gpus().all(|g| g.count == 0 || g == want), "{:?}", again);
                    prop_assert_eq!(again.gpus().filter(|g| g.count == 0).count(), zeros);
                }
                None => prop_assert!(r.gpus().all(|g| g.count == 0)),
            }
        }
    }
}
