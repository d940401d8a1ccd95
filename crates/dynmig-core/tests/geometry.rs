//! Layout enumeration and transition planning, checked against hand-derived tables and a
//! brute-force oracle over every subset of candidate placements.

use dynmig_core::geometry::*;
use proptest::prelude::*;
use std::collections::BTreeSet;
use std::sync::OnceLock;

const SEVEN_SLICE: [&GpuModel; 3] = [&A100_40GB, &A100_80GB, &H100_80GB];

fn at(model: &GpuModel, name: &str, start: u8) -> Placed {
    Placed {
        profile: model.profile(name).unwrap_or_else(|| panic!("{name}")),
        start,
    }
}

fn text(layout: &[Placed]) -> String {
    let mut v: Vec<String> = layout.iter().map(|p| p.to_string()).collect();
    v.sort();
    v.join("+")
}

fn candidates(model: &GpuModel, profiles: &[&'static ProfileSpec]) -> Vec<Placed> {
    let mut v = Vec::new();
    for &p in profiles {
        for &start in p.placement_starts {
            v.push(Placed { profile: p, start });
        }
    }
    v.retain(|c| c.start + c.profile.memory_slices <= model.memory_slices);
    v
}

/// Every valid set of candidate placements, by brute force over all subsets (no shared
/// memory slice is checked first to keep it fast; check_instances decides the rest).
fn brute_valid_sets(model: &GpuModel, cands: &[Placed]) -> Vec<Vec<Placed>> {
    let mut out = Vec::new();
    for bits in 0u32..(1 << cands.len()) {
        let mut mask = 0u16;
        let mut set = Vec::new();
        let mut clash = false;
        for (i, c) in cands.iter().enumerate() {
            if bits & (1 << i) != 0 {
                let m = ((1u16 << c.profile.memory_slices) - 1) << c.start;
                clash |= mask & m != 0;
                mask |= m;
                set.push(*c);
            }
        }
        if !clash && check_instances(model, &set).is_ok() {
            out.push(set);
        }
    }
    out
}

fn brute_maximal(model: &GpuModel, profiles: &[&'static ProfileSpec]) -> BTreeSet<String> {
    let cands = candidates(model, profiles);
    brute_valid_sets(model, &cands)
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

/// NVIDIA's 19 A100 configurations, written out by hand as placements: 7g; 4g or 3g on
/// slices 0-3 with a right half of 3g@4, 2g@4+1g@6 or 1g@4,5,6; and the four fillings of
/// slices 0-3 by 2g and 1g with the same three right halves.
fn nvidia_19(m: &GpuModel) -> BTreeSet<String> {
    // The classic profile with `c` compute slices (for c = 1, the one with 1 memory slice).
    let p = |c: u8, start: u8| Placed {
        profile: m
            .profiles
            .iter()
            .find(|q| q.compute_slices == c && !q.media_extensions && (c != 1 || q.memory_slices == 1))
            .unwrap(),
        start,
    };
    let rights = [vec![p(3, 4)], vec![p(2, 4), p(1, 6)], vec![p(1, 4), p(1, 5), p(1, 6)]];
    let lefts = [
        vec![p(4, 0)],
        vec![p(3, 0)],
        vec![p(2, 0), p(2, 2)],
        vec![p(2, 0), p(1, 2), p(1, 3)],
        vec![p(1, 0), p(1, 1), p(2, 2)],
        vec![p(1, 0), p(1, 1), p(1, 2), p(1, 3)],
    ];
    let mut out = BTreeSet::new();
    out.insert(text(&[p(7, 0)]));
    for l in &lefts {
        for r in &rights {
            out.insert(text(&[l.clone(), r.clone()].concat()));
        }
    }
    out
}

#[test]
fn nineteen_maximal_layouts_and_fourteen_multisets() {
    for m in SEVEN_SLICE {
        let layouts = maximal_layouts(m);
        assert_eq!(layouts.len(), 19, "{}", m.name);
        let got: BTreeSet<String> = layouts.iter().map(|l| text(l)).collect();
        assert_eq!(got.len(), 19, "{}: duplicates", m.name);
        assert_eq!(got, nvidia_19(m), "{}", m.name);
        assert!(
            got.contains(&text(&[at(m, m.profiles[1].name, 0), at(m, m.profiles[2].name, 4)])),
            "4g+3g"
        );
        assert_eq!(distinct_multisets(m).len(), 14, "{}", m.name);
    }
}

#[test]
fn the_fourteen_multisets_in_table_order() {
    let got: Vec<String> = distinct_multisets(&A100_40GB).iter().map(|c| c.to_string()).collect();
    let want = [
        "1x7g.40gb",
        "1x4g.20gb+1x3g.20gb",
        "1x4g.20gb+1x2g.10gb+1x1g.5gb",
        "1x4g.20gb+3x1g.5gb",
        "2x3g.20gb",
        "1x3g.20gb+2x2g.10gb",
        "1x3g.20gb+1x2g.10gb+2x1g.5gb",
        "1x3g.20gb+1x2g.10gb+1x1g.5gb",
        "1x3g.20gb+4x1g.5gb",
        "1x3g.20gb+3x1g.5gb",
        "3x2g.10gb+1x1g.5gb",
        "2x2g.10gb+3x1g.5gb",
        "1x2g.10gb+5x1g.5gb",
        "7x1g.5gb",
    ];
    assert_eq!(got, want);
}

#[test]
fn maximal_layouts_are_valid_and_complete() {
    for m in SEVEN_SLICE {
        for profiles in [classic_profiles(m), m.schedulable_profiles()] {
            let cands = candidates(m, &profiles);
            for layout in maximal_layouts_with(m, &profiles) {
                check_instances(m, &layout).unwrap_or_else(|e| panic!("{}: {e}", text(&layout)));
                for c in &cands {
                    let mut bigger = layout.clone();
                    bigger.push(*c);
                    assert!(check_instances(m, &bigger).is_err(), "{} + {c} is valid", text(&layout));
                }
            }
        }
    }
}

#[test]
fn enumeration_matches_brute_force_with_and_without_double_memory_profile() {
    let m = &A100_80GB;
    let classic = classic_profiles(m);
    let got: BTreeSet<String> = maximal_layouts(m).iter().map(|l| text(l)).collect();
    assert_eq!(got, brute_maximal(m, &classic));

    // With the 1g.20gb double-memory profile (ID 15) there are more maximal layouts, e.g.
    // 4g.40gb@0 + 1g.20gb@4 + 1g.20gb@6 (6 compute slices, no free memory slice).
    let all = m.schedulable_profiles();
    let with_dm = maximal_layouts_with(m, &all);
    let got: BTreeSet<String> = with_dm.iter().map(|l| text(l)).collect();
    assert_eq!(got.len(), with_dm.len(), "duplicates");
    assert_eq!(got, brute_maximal(m, &all));
    assert!(got.contains(&text(&[at(m, "4g.40gb", 0), at(m, "1g.20gb", 4), at(m, "1g.20gb", 6)])));
    // Pinned from the brute-force oracle above (not a number NVIDIA publishes).
    assert_eq!(with_dm.len(), 78);
    assert_eq!(distinct_multisets_with(m, &all).len(), 38);
}

#[test]
fn all_layouts_are_every_placeable_multiset() {
    for m in [&A100_40GB, &H100_80GB] {
        for profiles in [classic_profiles(m), m.schedulable_profiles()] {
            let brute: BTreeSet<ProfileCounts> = brute_valid_sets(m, &candidates(m, &profiles))
                .iter()
                .filter(|s| !s.is_empty())
                .map(|s| ProfileCounts::of(s))
                .collect();
            let got = all_layouts_with(m, &profiles);
            assert_eq!(got.iter().cloned().collect::<BTreeSet<_>>(), brute);
            assert_eq!(got.len(), brute.len(), "duplicates");
            assert_eq!(got, all_layouts_with(m, &profiles), "deterministic");
            assert_eq!(got[0].to_string(), format!("1x{}", m.full_profile().name));
            for c in &got {
                assert!(place(m, c).is_some(), "{c}");
            }
        }
        // Every maximal multiset is among them, plus strictly smaller ones.
        let all = all_layouts(m);
        for c in distinct_multisets(m) {
            assert!(all.contains(&c), "{c}");
        }
        // By hand: 7g (1); 4g + a subset of one right half (7); 2x3g (1); one 3g + the rest of
        // the other half (9); only 2g and 1g with 2*n2 + n1 <= 7, n2 <= 3 (7 + 6 + 4 + 2 = 19).
        assert_eq!(all.len(), 37, "{}", m.name);
    }
}

#[test]
fn hand_checked_transition() {
    // 7x1g.10gb at 0..=6, slices 0 and 1 busy -> 2x1g.10gb+1x2g.20gb+1x3g.40gb.
    // The two busy 1g are the target's two 1g. 3g starts at 0 or 4; 0 is busy -> 3g@4, which
    // needs 1g@4,5,6 gone. 2g starts at 0, 2 or 4: 0 busy, 4 taken -> 2g@2, 1g@2,3 gone.
    // So: destroy the five idle 1g, create 2g@2 and 3g@4: 7 operations (mig-parted: 7+4 = 11).
    let m = &A100_80GB;
    let current: Vec<(Placed, bool)> = (0..7).map(|s| (at(m, "1g.10gb", s), s < 2)).collect();
    let target = ProfileCounts::parse(m, "2x1g.10gb+1x2g.20gb+1x3g.40gb").unwrap();
    let t = plan_transition(m, &current, &target).unwrap();
    assert_eq!(t.destroy, (2..7).map(|s| at(m, "1g.10gb", s)).collect::<Vec<_>>());
    assert_eq!(t.create, vec![at(m, "2g.20gb", 2), at(m, "3g.40gb", 4)]);
    assert_eq!(t.operations(), 7);
    let plain: Vec<Placed> = current.iter().map(|(p, _)| *p).collect();
    assert_eq!(destroy_all_and_recreate(&plain, &target), 11);
}

#[test]
fn keeps_idle_instances_that_fit() {
    // 4g@0 + 3g@4, all idle -> 1x4g+1x2g+1x1g: keep 4g, destroy 3g, create 2g@4 and 1g@6.
    let m = &A100_40GB;
    let current = [(at(m, "4g.20gb", 0), false), (at(m, "3g.20gb", 4), false)];
    let target = ProfileCounts::parse(m, "4g.20gb+2g.10gb+1g.5gb").unwrap();
    let t = plan_transition(m, &current, &target).unwrap();
    assert_eq!(t.destroy, vec![at(m, "3g.20gb", 4)]);
    assert_eq!(t.create, vec![at(m, "2g.10gb", 4), at(m, "1g.5gb", 6)]);
}

#[test]
fn idle_instance_in_the_way_is_destroyed() {
    // Idle 1g@0 is part of the target but blocks the 4g, which can only start at 0:
    // destroy it and recreate a 1g elsewhere (3 operations), rather than fail.
    let m = &A100_40GB;
    let current = [(at(m, "1g.5gb", 0), false)];
    let target = ProfileCounts::parse(m, "4g.20gb+1g.5gb").unwrap();
    let t = plan_transition(m, &current, &target).unwrap();
    assert_eq!(t.destroy, vec![at(m, "1g.5gb", 0)]);
    assert_eq!(t.create.len(), 2);
    assert_eq!(t.create[0], at(m, "4g.20gb", 0));
    assert_eq!(t.create[1].profile.name, "1g.5gb");
}

#[test]
fn least_fragmented_placement_wins() {
    // A lone 1g on an empty GPU goes where a 4g still fits next to it.
    let m = &A100_80GB;
    let t = plan_transition(m, &[], &ProfileCounts::parse(m, "1g.10gb").unwrap()).unwrap();
    assert_eq!(t.create, vec![at(m, "1g.10gb", 6)]);
    let four = ProfileCounts::parse(m, "4g.40gb").unwrap();
    assert!(place_around(m, &t.create, &four).is_some());
}

#[test]
fn identity_is_zero_operations() {
    for m in SEVEN_SLICE {
        for layout in maximal_layouts_with(m, &m.schedulable_profiles()) {
            for busy in [false, true] {
                let current: Vec<_> = layout.iter().map(|p| (*p, busy)).collect();
                let t = plan_transition(m, &current, &ProfileCounts::of(&layout)).unwrap();
                assert!(t.is_empty(), "{}: {t:?}", text(&layout));
                assert_eq!(destroy_all_and_recreate(&layout, &ProfileCounts::of(&layout)), 0);
            }
        }
    }
}

#[test]
fn errors_name_what_is_wrong() {
    let m = &A100_80GB;
    let busy3g = [(at(m, "3g.40gb", 4), true)];
    let err = plan_transition(m, &busy3g, &ProfileCounts::parse(m, "7x1g.10gb").unwrap()).unwrap_err();
    assert!(matches!(err, TransitionError::BusyInstanceNotInTarget { ref instance, .. } if instance == "3g.40gb@4"));
    assert!(err.to_string().contains("3g.40gb@4"), "{err}");

    let busy1g = [(at(m, "1g.10gb", 0), true)];
    let err = plan_transition(m, &busy1g, &ProfileCounts::parse(m, "4g.40gb+1g.10gb").unwrap()).unwrap_err();
    assert!(matches!(err, TransitionError::BusyInstancesBlock { .. }), "{err:?}");
    assert!(
        err.to_string().contains("1g.10gb@0") && err.to_string().contains("4g.40gb"),
        "{err}"
    );

    let mut two_4g = ProfileCounts::empty();
    two_4g.add(m.profile("4g.40gb").unwrap(), 2);
    let err = plan_transition(m, &[], &two_4g).unwrap_err();
    assert!(matches!(err, TransitionError::TargetInvalid(_)), "{err:?}");
    assert!(err.to_string().contains("2x4g.40gb"), "{err}");

    let mut foreign = ProfileCounts::empty();
    foreign.add(A100_40GB.profile("1g.5gb").unwrap(), 1);
    let err = plan_transition(m, &[], &foreign).unwrap_err();
    assert!(err.to_string().contains("1g.5gb"), "{err}");

    let overlapping = [(at(m, "2g.20gb", 0), false), (at(m, "1g.10gb", 1), false)];
    let err = plan_transition(m, &overlapping, &ProfileCounts::empty()).unwrap_err();
    assert!(matches!(err, TransitionError::CurrentInvalid(_)), "{err:?}");
}

/// Every valid placed set of A100-80GB non-+me profiles, for the optimality oracle.
fn all_valid_sets() -> &'static Vec<Vec<Placed>> {
    static SETS: OnceLock<Vec<Vec<Placed>>> = OnceLock::new();
    SETS.get_or_init(|| brute_valid_sets(&A100_80GB, &candidates(&A100_80GB, &A100_80GB.schedulable_profiles())))
}

/// A random valid current state: candidates tried in the order `picks` gives, each added
/// if the set stays valid.
fn current_from(picks: &[usize], busy: &[bool]) -> Vec<(Placed, bool)> {
    let m = &A100_80GB;
    let cands = candidates(m, &m.schedulable_profiles());
    let mut set: Vec<Placed> = Vec::new();
    for &i in picks {
        let mut bigger = set.clone();
        bigger.push(cands[i % cands.len()]);
        if check_instances(m, &bigger).is_ok() {
            set = bigger;
        }
    }
    set.into_iter()
        .zip(busy.iter().copied().chain(std::iter::repeat(false)))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn plans_reach_the_target_with_fewest_operations(
        picks in prop::collection::vec(0usize..64, 0..10),
        busy in prop::collection::vec(any::<bool>(), 7),
        target_pick in 0usize..10_000,
    ) {
        let m = &A100_80GB;
        let current = current_from(&picks, &busy);
        let targets = all_layouts_with(m, &m.schedulable_profiles());
        let target = if target_pick % 20 == 0 { ProfileCounts::empty() } else { targets[target_pick % targets.len()].clone() };
        let busy_set: Vec<Placed> = current.iter().filter(|(_, b)| *b).map(|(p, _)| *p).collect();
        let cur: Vec<Placed> = current.iter().map(|(p, _)| *p).collect();

        // Oracle: the fewest operations over every valid result holding the busy instances.
        let best = all_valid_sets()
            .iter()
            .filter(|r| ProfileCounts::of(r) == target && busy_set.iter().all(|b| r.contains(b)))
            .map(|r| cur.iter().filter(|c| !r.contains(c)).count() + r.iter().filter(|x| !cur.contains(x)).count())
            .min();

        match plan_transition(m, &current, &target) {
            Ok(t) => {
                let mut result: Vec<Placed> = cur.iter().filter(|c| !t.destroy.contains(c)).copied().collect();
                prop_assert_eq!(result.len() + t.destroy.len(), cur.len(), "destroys only current instances");
                result.extend_from_slice(&t.create);
                prop_assert_eq!(ProfileCounts::of(&result), target.clone());
                prop_assert!(check_instances(m, &result).is_ok(), "{:?}", result);
                for b in &busy_set {
                    prop_assert!(!t.destroy.contains(b), "destroys busy {}", b);
                }
                prop_assert_eq!(Some(t.operations()), best, "not the fewest operations");
                prop_assert!(t.operations() <= destroy_all_and_recreate(&cur, &target));
            }
            Err(TransitionError::BusyInstanceNotInTarget { instance, .. }) => {
                prop_assert!(busy_set.iter().any(|b| b.to_string() == instance));
                let busy_counts = ProfileCounts::of(&busy_set);
                prop_assert!(busy_counts.iter().any(|(n, c)| c > target.count(n)));
            }
            Err(TransitionError::BusyInstancesBlock { .. }) => prop_assert_eq!(best, None),
            Err(e) => prop_assert!(false, "unexpected error {}", e),
        }
    }
}
