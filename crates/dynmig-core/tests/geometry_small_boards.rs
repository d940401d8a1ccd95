//! The geometry on boards with fewer slices than the seven-slice family: the 4-slice RTX PRO
//! 6000 Blackwell (and the A30, the same shape) and the 2-slice RTX PRO 5000 Blackwell.
//! Layout enumeration is checked against hand-written lists and a brute-force oracle over
//! every subset of candidate placements; placement, text, transitions and the checks that
//! refuse overlaps and counts run on both boards.

use dynmig_core::geometry::*;
use std::collections::BTreeSet;

const FOUR: &GpuModel = &RTX_PRO_6000_96GB;
const TWO: &GpuModel = &RTX_PRO_5000_48GB;

fn at(model: &GpuModel, name: &str, start: u8) -> Placed {
    Placed {
        profile: model.profile(name).unwrap_or_else(|| panic!("{name}")),
        start,
    }
}

fn text(layout: &[Placed]) -> String {
    let mut v: Vec<String> = layout.iter().map(|p| p.to_string()).collect();
    v.sort();
    v.join(" ")
}

fn counts(model: &GpuModel, s: &str) -> ProfileCounts {
    ProfileCounts::parse(model, s).unwrap_or_else(|e| panic!("{s}: {e}"))
}

/// Every set of candidate placements of `profiles` that [`check_instances`] accepts, by brute
/// force over all subsets (the oracle shares no code with the search in `enumerate.rs`).
fn brute_valid(model: &GpuModel, profiles: &[&'static ProfileSpec]) -> (Vec<Placed>, Vec<Vec<Placed>>) {
    let mut cands = Vec::new();
    for &p in profiles {
        for &start in p.placement_starts {
            cands.push(Placed { profile: p, start });
        }
    }
    assert!(cands.len() <= 20, "{}: {} candidates", model.name, cands.len());
    let mut out = Vec::new();
    for bits in 0u32..(1 << cands.len()) {
        let set: Vec<Placed> = (0..cands.len())
            .filter(|i| bits & (1 << i) != 0)
            .map(|i| cands[i])
            .collect();
        if check_instances(model, &set).is_ok() {
            out.push(set);
        }
    }
    (cands, out)
}

fn brute_maximal(model: &GpuModel, profiles: &[&'static ProfileSpec]) -> BTreeSet<String> {
    let (cands, valid) = brute_valid(model, profiles);
    valid
        .into_iter()
        .filter(|set| {
            !set.is_empty()
                && cands.iter().all(|c| {
                    let mut bigger = set.clone();
                    bigger.push(*c);
                    set.contains(c) || check_instances(model, &bigger).is_err()
                })
        })
        .map(|s| text(&s))
        .collect()
}

fn brute_multisets(model: &GpuModel, profiles: &[&'static ProfileSpec]) -> BTreeSet<ProfileCounts> {
    let (_, valid) = brute_valid(model, profiles);
    valid
        .iter()
        .filter(|s| !s.is_empty())
        .map(|s| ProfileCounts::of(s))
        .collect()
}

#[test]
fn slice_counts_come_from_the_table() {
    assert_eq!((FOUR.compute_slices, FOUR.memory_slices), (4, 4));
    assert_eq!((TWO.compute_slices, TWO.memory_slices), (2, 2));
    let ids = |m: &GpuModel| classic_profiles(m).iter().map(|p| p.name).collect::<Vec<_>>();
    // Variants (+gfx, -me, +me.all) and +me are never part of the layout search.
    assert_eq!(ids(FOUR), ["4g.96gb", "2g.48gb", "1g.24gb"]);
    assert_eq!(ids(TWO), ["2g.48gb", "1g.24gb"]);
    let sched: Vec<&str> = FOUR.schedulable_profiles().iter().map(|p| p.name).collect();
    assert_eq!(sched, ["1g.24gb", "2g.48gb", "4g.96gb"]);
}

#[test]
fn four_slice_maximal_layouts_are_the_five_hand_derived_ones() {
    // 4g; 2g+2g; 1g+1g next to a 2g (two placements); 4x1g. Nothing else. Written as
    // (compute slices, start) pairs, so that one list serves both 4-slice boards.
    let hand: [&[(u8, u8)]; 5] = [
        &[(4, 0)],
        &[(2, 0), (2, 2)],
        &[(1, 0), (1, 1), (2, 2)],
        &[(2, 0), (1, 2), (1, 3)],
        &[(1, 0), (1, 1), (1, 2), (1, 3)],
    ];
    for m in [FOUR, &A30_24GB] {
        let classic = classic_profiles(m);
        let of = |c: u8| *classic.iter().find(|p| p.compute_slices == c).unwrap();
        let want: BTreeSet<String> = hand
            .iter()
            .map(|l| {
                text(
                    &l.iter()
                        .map(|&(c, start)| Placed { profile: of(c), start })
                        .collect::<Vec<_>>(),
                )
            })
            .collect();
        let got: BTreeSet<String> = maximal_layouts(m).iter().map(|l| text(l)).collect();
        assert_eq!(got, want, "{}", m.name);
        assert_eq!(got, brute_maximal(m, &classic), "{}", m.name);
    }
    let multisets: Vec<String> = distinct_multisets(FOUR).iter().map(|c| c.to_string()).collect();
    assert_eq!(
        multisets,
        ["1x4g.96gb", "2x2g.48gb", "1x2g.48gb+2x1g.24gb", "4x1g.24gb"]
    );
}

#[test]
fn two_slice_maximal_layouts_are_the_whole_gpu_or_two_halves() {
    let got: Vec<String> = maximal_layouts(TWO).iter().map(|l| text(l)).collect();
    assert_eq!(got, ["2g.48gb@0", "1g.24gb@0 1g.24gb@1"]);
    assert_eq!(
        got.iter().cloned().collect::<BTreeSet<_>>(),
        brute_maximal(TWO, &classic_profiles(TWO))
    );
    let all: Vec<String> = all_layouts(TWO).iter().map(|c| c.to_string()).collect();
    assert_eq!(all, ["1x2g.48gb", "2x1g.24gb", "1x1g.24gb"]);
    // With every profile, +me included: one +me at most, next to a plain 1g or alone.
    let every: Vec<&'static ProfileSpec> = TWO.profiles.iter().collect();
    let all: Vec<String> = all_layouts_with(TWO, &every).iter().map(|c| c.to_string()).collect();
    assert_eq!(
        all,
        [
            "1x2g.48gb",
            "2x1g.24gb",
            "1x1g.24gb+me+1x1g.24gb",
            "1x1g.24gb",
            "1x1g.24gb+me"
        ]
    );
}

#[test]
fn all_layouts_are_every_placeable_multiset_nothing_more() {
    for m in [FOUR, TWO, &A30_24GB] {
        let classic = classic_profiles(m);
        let got: BTreeSet<ProfileCounts> = all_layouts(m).into_iter().collect();
        assert_eq!(got, brute_multisets(m, &classic), "{}", m.name);
        for c in &got {
            assert!(place(m, c).is_some(), "{}: {c}", m.name);
        }
    }
    // The 4-slice board: 4g, 2x2g, 2g, 2g+2x1g, 2g+1g, 4x1g, 3x1g, 2x1g, 1g.
    let all: Vec<String> = all_layouts(FOUR).iter().map(|c| c.to_string()).collect();
    assert_eq!(
        all,
        [
            "1x4g.96gb",
            "2x2g.48gb",
            "1x2g.48gb+2x1g.24gb",
            "1x2g.48gb+1x1g.24gb",
            "1x2g.48gb",
            "4x1g.24gb",
            "3x1g.24gb",
            "2x1g.24gb",
            "1x1g.24gb"
        ]
    );
    // With the +gfx variants too (16 candidates): the search and the oracle still agree.
    let gfx: Vec<&'static ProfileSpec> = ["2g.48gb", "2g.48gb+gfx", "1g.24gb", "1g.24gb+gfx", "1g.24gb+me"]
        .iter()
        .map(|n| FOUR.profile(n).unwrap())
        .collect();
    let got: BTreeSet<ProfileCounts> = all_layouts_with(FOUR, &gfx).into_iter().collect();
    assert_eq!(got, brute_multisets(FOUR, &gfx));
    assert!(got.contains(&counts(FOUR, "2x1g.24gb+gfx+1x2g.48gb")));
}

#[test]
fn placement_on_small_boards() {
    let p = place(FOUR, &counts(FOUR, "1x2g.48gb+2x1g.24gb")).unwrap();
    assert_eq!(text(&p), "1g.24gb@2 1g.24gb@3 2g.48gb@0");
    check_instances(FOUR, &p).unwrap();
    let mut five = ProfileCounts::empty();
    five.add(FOUR.profile("1g.24gb").unwrap(), 5);
    assert!(place(FOUR, &five).is_none());
    let mut three_2g = ProfileCounts::empty();
    three_2g.add(FOUR.profile("2g.48gb").unwrap(), 3);
    assert!(place(FOUR, &three_2g).is_none());
    // A 1g at slice 1 leaves room for a 2g at 2 and a 1g at 0, never for a 4g.
    let fixed = [at(FOUR, "1g.24gb", 1)];
    let new = place_around(FOUR, &fixed, &counts(FOUR, "1x2g.48gb+1x1g.24gb")).unwrap();
    assert_eq!(text(&new), "1g.24gb@0 2g.48gb@2");
    assert!(place_around(FOUR, &fixed, &counts(FOUR, "1x4g.96gb")).is_none());
    assert!(addable_layouts(FOUR, &fixed).iter().all(|c| c.count("4g.96gb") == 0));
    // Two slices: a 1g at 1 leaves one 1g; a 2g leaves nothing.
    let one = [at(TWO, "1g.24gb", 1)];
    let left: Vec<String> = addable_layouts(TWO, &one).iter().map(|c| c.to_string()).collect();
    assert_eq!(left, ["1x1g.24gb"]);
    assert!(addable_layouts(TWO, &[at(TWO, "2g.48gb", 0)]).is_empty());
    let mut three = ProfileCounts::empty();
    three.add(TWO.profile("1g.24gb").unwrap(), 3);
    assert!(place(TWO, &three).is_none());
}

#[test]
fn layouts_read_and_write_on_small_boards() {
    for (m, s) in [
        (FOUR, "1x2g.48gb+2x1g.24gb"),
        (FOUR, "2x1g.24gb+gfx+1x2g.48gb"),
        (FOUR, "1x1g.24gb+me.all+3x1g.24gb-me"),
        (FOUR, "1x4g.96gb+gfx"),
        (TWO, "2x1g.24gb"),
        (TWO, "1x1g.24gb+me+1x1g.24gb"),
        (TWO, "2g.48gb"),
    ] {
        let c = counts(m, s);
        assert_eq!(counts(m, &c.to_string()), c, "{}: {s} -> {c}", m.name);
    }
    let c = counts(FOUR, "1g.24gb+gfx + 1g.24gb+GFX + 2g.48gb");
    assert_eq!((c.count("1g.24gb+gfx"), c.count("2g.48gb")), (2, 1));
    assert_eq!(c.to_string(), "1x2g.48gb+2x1g.24gb+gfx");
    let node = NodeLayout::parse(TWO, 2, "2x1g.24gb,1x2g.48gb").unwrap();
    assert_eq!(node.gres(), "gpu:1g.24gb:2,gpu:2g.48gb:1");

    // Counts above the table, placements that do not fit, profiles of another board.
    let e = ProfileCounts::parse(FOUR, "3x2g.48gb").unwrap_err();
    assert!(matches!(e, LayoutParseError::TooMany { max: 2, .. }), "{e:?}");
    let e = ProfileCounts::parse(FOUR, "2x2g.48gb+1x1g.24gb").unwrap_err();
    assert!(matches!(e, LayoutParseError::DoesNotFit { .. }), "{e:?}");
    assert!(e.to_string().contains("\"1x4g.96gb\""), "{e}");
    let e = ProfileCounts::parse(TWO, "1x2g.48gb+1x1g.24gb").unwrap_err();
    assert!(matches!(e, LayoutParseError::DoesNotFit { .. }), "{e:?}");
    let e = ProfileCounts::parse(TWO, "1x4g.96gb").unwrap_err();
    assert!(matches!(e, LayoutParseError::UnknownProfile { .. }), "{e:?}");
    assert!(e.to_string().contains("2g.48gb, 1g.24gb, 1g.24gb+me"), "{e}");
    let e = ProfileCounts::parse(TWO, "3x1g.24gb").unwrap_err();
    assert!(matches!(e, LayoutParseError::TooMany { max: 2, .. }), "{e:?}");
    // "gfx" alone is no profile, and a suffix needs a profile before it.
    assert!(ProfileCounts::parse(FOUR, "gfx+1x2g.48gb").is_err());
    // Error examples: the full profile, and a mixed layout where the board has one.
    assert_eq!(layout_examples(FOUR), "\"1x4g.96gb\" or \"1x2g.48gb+2x1g.24gb\"");
    assert_eq!(layout_examples(TWO), "\"1x2g.48gb\"");
}

#[test]
fn checks_refuse_overlaps_bad_starts_and_counts() {
    let overlap = [at(FOUR, "2g.48gb", 0), at(FOUR, "1g.24gb", 1)];
    assert!(matches!(
        check_instances(FOUR, &overlap),
        Err(LayoutError::Overlap { .. })
    ));
    let bad = [at(FOUR, "2g.48gb", 1)];
    let e = check_instances(FOUR, &bad).unwrap_err();
    assert!(
        matches!(e, LayoutError::BadPlacement { ref allowed, .. } if allowed == &[0, 2]),
        "{e:?}"
    );
    let bad = [Placed {
        profile: TWO.profile("1g.24gb").unwrap(),
        start: 2,
    }];
    assert!(matches!(
        check_instances(TWO, &bad),
        Err(LayoutError::BadPlacement { .. })
    ));
    // One media instance per GPU, whatever its suffix.
    let two_media = [at(FOUR, "1g.24gb+me", 0), at(FOUR, "1g.24gb+me.all", 1)];
    let e = check_instances(FOUR, &two_media).unwrap_err();
    assert!(
        matches!(
            e,
            LayoutError::TooMany {
                profile: "+me",
                count: 2,
                max: 1
            }
        ),
        "{e:?}"
    );
    // Four no-media 1g fill the board; the same instance twice (a wrong backend report)
    // overlaps itself.
    let four_no_me: Vec<Placed> = (0..4).map(|s| at(FOUR, "1g.24gb-me", s)).collect();
    check_instances(FOUR, &four_no_me).unwrap();
    let twice = [at(TWO, "2g.48gb", 0), at(TWO, "2g.48gb", 0)];
    assert!(matches!(check_instances(TWO, &twice), Err(LayoutError::Overlap { .. })));
    let fine = [at(TWO, "1g.24gb", 0), at(TWO, "1g.24gb", 1)];
    check_instances(TWO, &fine).unwrap();
}

#[test]
fn transitions_on_small_boards() {
    // 4x1g, the one at 0 busy -> 1x2g+2x1g: keep 1g@0 (busy) and 1g@1, destroy 1g@2 and 1g@3,
    // create 2g@2: 3 operations (mig-parted: 4 + 3 = 7).
    let current: Vec<(Placed, bool)> = (0..4).map(|s| (at(FOUR, "1g.24gb", s), s == 0)).collect();
    let target = counts(FOUR, "1x2g.48gb+2x1g.24gb");
    let t = plan_transition(FOUR, &current, &target).unwrap();
    assert_eq!(text(&t.destroy), "1g.24gb@2 1g.24gb@3");
    assert_eq!(text(&t.create), "2g.48gb@2");
    assert_eq!(t.operations(), 3);
    let plain: Vec<Placed> = current.iter().map(|(p, _)| *p).collect();
    assert_eq!(destroy_all_and_recreate(&plain, &target), 7);

    // A lone 1g goes where the 2g still fits next to it.
    let t = plan_transition(FOUR, &[], &counts(FOUR, "1x1g.24gb")).unwrap();
    assert_eq!(text(&t.create), "1g.24gb@0");
    assert!(place_around(FOUR, &t.create, &counts(FOUR, "1x2g.48gb+1x1g.24gb")).is_some());

    // Two slices: two idle halves -> the whole GPU; a busy half blocks it.
    let halves = [(at(TWO, "1g.24gb", 0), false), (at(TWO, "1g.24gb", 1), false)];
    let t = plan_transition(TWO, &halves, &counts(TWO, "1x2g.48gb")).unwrap();
    assert_eq!((t.destroy.len(), text(&t.create).as_str()), (2, "2g.48gb@0"));
    let busy = [(at(TWO, "1g.24gb", 0), false), (at(TWO, "1g.24gb", 1), true)];
    let e = plan_transition(TWO, &busy, &counts(TWO, "1x2g.48gb")).unwrap_err();
    assert!(
        matches!(e, TransitionError::BusyInstanceNotInTarget { ref instance, .. } if instance == "1g.24gb@1"),
        "{e:?}"
    );
    // Identity: nothing to do.
    let t = plan_transition(TWO, &busy, &counts(TWO, "2x1g.24gb")).unwrap();
    assert!(t.is_empty());
    // An invalid current state (overlap) is named.
    let over = [(at(FOUR, "2g.48gb", 0), false), (at(FOUR, "1g.24gb", 1), false)];
    let e = plan_transition(FOUR, &over, &ProfileCounts::empty()).unwrap_err();
    assert!(
        matches!(e, TransitionError::CurrentInvalid(LayoutError::Overlap { .. })),
        "{e:?}"
    );
}
