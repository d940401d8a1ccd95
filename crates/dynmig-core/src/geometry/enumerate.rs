//! Enumerating the valid layouts of one GPU.
//!
//! Every function here walks the same search: the candidate placements (a profile at one of
//! its allowed start slices), chosen in a fixed order so that each set of placed instances is
//! visited exactly once, pruned by the placement rules of [`super::check_instances`] (no shared
//! memory slice, at most the GPU's compute slices, at most `max_instances` of a profile, at
//! most one `+me` instance). A GPU has at most [`super::MAX_SLICES`] memory slices (8 on every
//! board NVIDIA lists: 7 compute slices on the A100/H100/H200/B200 family, 4 on the A30 and
//! RTX PRO 6000 Blackwell, 2 on the RTX PRO 5000 Blackwell), so the whole search visits a few
//! hundred sets.
//!
//! The compute slices cap what fits: an A100 has 8 memory slices but 7 compute slices, so
//! `7x1g.5gb` covers memory slices 0..=6 and slice 7 stays empty (a 1-slice profile cannot
//! start at 7), and `3g.20gb@0 + 2g.10gb@4 + 1g.5gb@6` is complete although slice 7 is free.
//!
//! Source of the expected counts: NVIDIA's MIG User Guide lists 19 valid A100 configurations
//! (since driver R510, which added `4g.20gb + 3g.20gb`), built from profiles 0, 5, 9, 14 and 19;
//! they reduce to 14 distinct profile multisets (as [`distinct_multisets`] finds; tested).

use super::layout::{Placed, ProfileCounts};
use super::models::{GpuModel, ProfileSpec, MAX_PROFILES, MAX_SLICES};
use std::collections::BTreeSet;

/// The "classic" profiles of `model` ([`ProfileSpec::is_classic`]): no `+me` profiles nor
/// other variants ([`ProfileSpec::is_variant`]: `+gfx`, `-me`, `+me.all`) and no double-memory
/// 1-compute-slice profile ([`ProfileSpec::is_double_memory`]: `1g.10gb` on an A100-40GB,
/// ID [`super::DOUBLE_MEMORY_1G_PROFILE_ID`]). On the seven-slice models these are the IDs
/// 0, 5, 9, 14 and 19, the profiles NVIDIA's table of 19 A100 configurations uses.
pub fn classic_profiles(model: &GpuModel) -> Vec<&'static ProfileSpec> {
    model.profiles.iter().filter(|p| p.is_classic()).collect()
}

/// Every maximal layout of `model` built from the classic profiles ([`classic_profiles`]).
/// 19 on an A100 or H100. See [`maximal_layouts_with`].
pub fn maximal_layouts(model: &GpuModel) -> Vec<Vec<Placed>> {
    maximal_layouts_with(model, &classic_profiles(model))
}

/// Every valid set of placed instances of `profiles` on an empty GPU of `model` to which no
/// further instance of `profiles` can be added.
///
/// Each set appears once (sets are compared by placement, so `2g@0+1g@2+1g@3` and
/// `1g@0+1g@1+2g@2` are two layouts with one multiset). Instances within a layout are sorted
/// by start slice; layouts are sorted largest multiset first (see [`distinct_multisets_with`]),
/// then by placement.
pub fn maximal_layouts_with(model: &GpuModel, profiles: &[&'static ProfileSpec]) -> Vec<Vec<Placed>> {
    let cands = candidates(model, profiles);
    let mut out = Vec::new();
    visit(model, &cands, &[], &mut |chosen, occ| {
        if !chosen.is_empty() && cands.iter().all(|c| !occ.can_add(c)) {
            let mut layout = chosen.to_vec();
            layout.sort_by_key(|p| (p.start, p.profile.memory_slices, p.profile.name));
            out.push(layout);
        }
    });
    out.sort_by_cached_key(|l| {
        let starts: Vec<_> = l.iter().map(|p| (p.start, p.profile.name)).collect();
        (counts_key(model, &ProfileCounts::of(l)), starts)
    });
    out
}

/// The distinct profile multisets of [`maximal_layouts`]: 14 on an A100 or H100.
pub fn distinct_multisets(model: &GpuModel) -> Vec<ProfileCounts> {
    distinct_multisets_with(model, &classic_profiles(model))
}

/// The distinct profile multisets of [`maximal_layouts_with`], sorted by [`layout_order`].
pub fn distinct_multisets_with(model: &GpuModel, profiles: &[&'static ProfileSpec]) -> Vec<ProfileCounts> {
    let set: BTreeSet<ProfileCounts> = maximal_layouts_with(model, profiles)
        .iter()
        .map(|l| ProfileCounts::of(l))
        .collect();
    sorted(model, set)
}

/// Every non-empty multiset of classic profiles that can be placed on one GPU of `model`,
/// maximal or not (for configs that allow every layout). See [`all_layouts_with`].
pub fn all_layouts(model: &GpuModel) -> Vec<ProfileCounts> {
    all_layouts_with(model, &classic_profiles(model))
}

/// Every non-empty multiset of `profiles` that can be placed on one empty GPU of `model`,
/// sorted by [`layout_order`]. The empty layout is left out: it offers nothing to schedule
/// (add [`ProfileCounts::empty`] where MIG-on-with-no-instances is wanted).
pub fn all_layouts_with(model: &GpuModel, profiles: &[&'static ProfileSpec]) -> Vec<ProfileCounts> {
    addable_with(model, profiles, &[])
}

/// Every non-empty multiset of `model`'s non-`+me` profiles that could be created on a GPU
/// holding `fixed`, without moving or destroying any of `fixed`, sorted by [`layout_order`].
///
/// Answers "what can still be created here without disturbing anything". `fixed` must
/// itself be valid ([`super::check_instances`]).
pub fn addable_layouts(model: &GpuModel, fixed: &[Placed]) -> Vec<ProfileCounts> {
    addable_with(model, &model.schedulable_profiles(), fixed)
}

fn addable_with(model: &GpuModel, profiles: &[&'static ProfileSpec], fixed: &[Placed]) -> Vec<ProfileCounts> {
    let cands = candidates(model, profiles);
    let mut set = BTreeSet::new();
    visit(model, &cands, fixed, &mut |chosen, _| {
        if !chosen.is_empty() {
            set.insert(ProfileCounts::of(chosen));
        }
    });
    sorted(model, set)
}

/// The order dynmig lists layouts in: compare the count of each profile of `model`, largest
/// profile first (the model table's order), more first. `1x7g` comes first, then the `4g`
/// layouts, then the `3g` ones, ..., `7x1g` last: the order of NVIDIA's configuration table.
pub fn layout_order(model: &GpuModel, a: &ProfileCounts, b: &ProfileCounts) -> std::cmp::Ordering {
    counts_key(model, a).cmp(&counts_key(model, b)).then_with(|| a.cmp(b))
}

fn counts_key(model: &GpuModel, c: &ProfileCounts) -> Vec<std::cmp::Reverse<u32>> {
    model
        .profiles
        .iter()
        .map(|p| std::cmp::Reverse(c.count(p.name)))
        .collect()
}

fn sorted(model: &GpuModel, set: BTreeSet<ProfileCounts>) -> Vec<ProfileCounts> {
    let mut v: Vec<_> = set.into_iter().collect();
    v.sort_by(|a, b| layout_order(model, a, b));
    v
}

/// Every placement of `profiles` that lies inside the GPU, in table order then start order.
fn candidates(model: &GpuModel, profiles: &[&'static ProfileSpec]) -> Vec<Placed> {
    profiles
        .iter()
        .flat_map(|&p| {
            p.placement_starts
                .iter()
                .map(move |&start| Placed { profile: p, start })
        })
        .filter(|c| c.start + c.profile.memory_slices <= model.memory_slices)
        .collect()
}

/// What a GPU holds, in the form the search needs: occupied memory slices as a bit mask
/// (bit i = slice i; a `u32`, wide enough for [`MAX_SLICES`] slices and a shift past them),
/// compute slices used, instances per profile (indexed like `model.profiles`), `+me` count.
#[derive(Clone)]
pub(crate) struct Occupancy<'m> {
    model: &'m GpuModel,
    mask: u32,
    compute: u32,
    counts: [u8; MAX_PROFILES],
    media: u8,
}

impl<'m> Occupancy<'m> {
    /// The occupancy of a GPU holding `fixed` (assumed valid).
    pub(crate) fn of(model: &'m GpuModel, fixed: &[Placed]) -> Self {
        assert!(
            model.profiles.len() <= MAX_PROFILES && model.memory_slices <= MAX_SLICES,
            "model table larger than MAX_PROFILES or MAX_SLICES"
        );
        let mut o = Self {
            model,
            mask: 0,
            compute: 0,
            counts: [0; MAX_PROFILES],
            media: 0,
        };
        for p in fixed {
            o.add(p);
        }
        o
    }

    fn index(&self, p: &ProfileSpec) -> usize {
        self.model
            .profiles
            .iter()
            .position(|q| q.name == p.name)
            .expect("instances use the model's own profiles")
    }

    fn bits(p: &Placed) -> u32 {
        ((1u32 << p.profile.memory_slices) - 1) << p.start
    }

    /// Whether `p` can be added without breaking a placement rule.
    pub(crate) fn can_add(&self, p: &Placed) -> bool {
        p.profile.placement_starts.contains(&p.start)
            && p.start + p.profile.memory_slices <= self.model.memory_slices
            && self.mask & Self::bits(p) == 0
            && self.compute + u32::from(p.profile.compute_slices) <= u32::from(self.model.compute_slices)
            && self.counts[self.index(p.profile)] < p.profile.max_instances
            && !(p.profile.media_extensions && self.media > 0)
    }

    /// Adds `p` (which must pass [`Self::can_add`], or be part of a valid fixed set).
    pub(crate) fn add(&mut self, p: &Placed) {
        self.mask |= Self::bits(p);
        self.compute += u32::from(p.profile.compute_slices);
        self.counts[self.index(p.profile)] += 1;
        self.media += u8::from(p.profile.media_extensions);
    }

    /// Removes `p`, added before.
    pub(crate) fn remove(&mut self, p: &Placed) {
        self.mask &= !Self::bits(p);
        self.compute -= u32::from(p.profile.compute_slices);
        self.counts[self.index(p.profile)] -= 1;
        self.media -= u8::from(p.profile.media_extensions);
    }

    /// Memory slices not covered by any instance, as a bit mask (bit i = slice i).
    pub(crate) fn free_mask(&self) -> u32 {
        !self.mask & ((1u32 << self.model.memory_slices) - 1)
    }
}

/// Calls `f` once for every set of `cands` that can be added to `fixed` (the empty set
/// included), with the chosen instances and the occupancy of `fixed` plus them.
fn visit(model: &GpuModel, cands: &[Placed], fixed: &[Placed], f: &mut dyn FnMut(&[Placed], &Occupancy)) {
    fn go(
        cands: &[Placed],
        from: usize,
        occ: &mut Occupancy,
        chosen: &mut Vec<Placed>,
        f: &mut dyn FnMut(&[Placed], &Occupancy),
    ) {
        f(chosen, occ);
        for (i, c) in cands.iter().enumerate().skip(from) {
            if occ.can_add(c) {
                occ.add(c);
                chosen.push(*c);
                go(cands, i + 1, occ, chosen, f);
                chosen.pop();
                occ.remove(c);
            }
        }
    }
    let mut occ = Occupancy::of(model, fixed);
    go(cands, 0, &mut occ, &mut Vec::new(), f);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::{A100_40GB, H100_80GB};

    #[test]
    fn classic_profiles_are_nvidias_ids() {
        for m in [&A100_40GB, &H100_80GB] {
            let ids: Vec<u32> = classic_profiles(m).iter().map(|p| p.id).collect();
            assert_eq!(ids, [0, 5, 9, 14, 19], "{}", m.name);
        }
    }

    #[test]
    fn seven_small_instances_leave_slice_seven_empty() {
        let m = &A100_40GB;
        let all_small: Vec<_> = maximal_layouts(m)
            .into_iter()
            .filter(|l| l.iter().all(|p| p.profile.name == "1g.5gb"))
            .collect();
        assert_eq!(all_small.len(), 1);
        let starts: Vec<u8> = all_small[0].iter().map(|p| p.start).collect();
        assert_eq!(starts, [0, 1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn addable_around_a_full_gpu_is_nothing() {
        let m = &A100_40GB;
        let full = [Placed {
            profile: m.full_profile(),
            start: 0,
        }];
        assert!(addable_layouts(m, &full).is_empty());
        // Around 1g.5gb@6 a 4g.20gb still fits, around 1g.5gb@0 it does not.
        let one = m.profile("1g.5gb").unwrap();
        let four = ProfileCounts::parse(m, "1x4g.20gb").unwrap();
        assert!(addable_layouts(m, &[Placed { profile: one, start: 6 }]).contains(&four));
        assert!(!addable_layouts(m, &[Placed { profile: one, start: 0 }]).contains(&four));
    }
}
