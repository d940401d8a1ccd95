//! The instance changes that move one GPU from its current instances to a target layout.
//!
//! dynmig changes only what differs (where NVIDIA mig-parted destroys every instance of the
//! GPU and creates the new set): busy instances stay where they are, idle instances that fit
//! the target are kept, and the new instances get explicit placements, so the node agent
//! never has to try creation orders until one works.

use super::enumerate::{maximal_layouts_with, Occupancy};
use super::layout::{Placed, ProfileCounts};
use super::models::GpuModel;
use super::place::{check_instances, place, place_around, LayoutError};

/// Instance changes on one GPU: destroy `destroy` first, then create `create` at the given
/// placements.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Transition {
    /// Instances to destroy (all idle), sorted by start slice.
    pub destroy: Vec<Placed>,
    /// Instances to create, sorted by start slice.
    pub create: Vec<Placed>,
}

impl Transition {
    /// Number of GPU-instance operations: one per destroy and one per create.
    pub fn operations(&self) -> usize {
        self.destroy.len() + self.create.len()
    }

    /// Whether nothing needs to change.
    pub fn is_empty(&self) -> bool {
        self.operations() == 0
    }
}

/// Why no transition to the target exists.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    /// A busy instance is not part of the target, and busy instances are never destroyed.
    #[error("busy instance {instance} is not part of the target layout {target}; it cannot be destroyed while it runs a job")]
    BusyInstanceNotInTarget {
        /// The busy instance, e.g. `3g.40gb@4`.
        instance: String,
        /// The target layout.
        target: String,
    },
    /// Every busy instance is part of the target, but where they sit leaves no placement for
    /// the rest of the target.
    #[error("busy instances block the target: {why}")]
    BusyInstancesBlock {
        /// Which instances and what they block.
        why: String,
    },
    /// The target cannot exist on this GPU model at all.
    #[error("target layout is not valid: {0}")]
    TargetInvalid(String),
    /// The current instances break a placement rule (a wrong report from the GPU backend).
    #[error("current instances are not a valid GPU state: {0}")]
    CurrentInvalid(#[from] LayoutError),
}

/// Plans the fewest destroys and creates that turn `current` (each instance with whether it
/// is busy) into exactly the multiset `target` on one GPU of `model`.
///
/// - Busy instances are kept where they are; each must be part of `target`.
/// - As many idle instances as possible are kept (fewest destroyed first): the number of
///   operations is `idle - kept + target.total() - busy - kept`, so keeping more is never worse.
/// - New instances get placements around the kept ones.
/// - Among plans with equal operation counts the one leaving the free memory slices least
///   fragmented wins. The measure, "reachable complete layouts": how many of the GPU's
///   maximal layouts of non-`+me` profiles ([`super::maximal_layouts_with`] with
///   [`GpuModel::schedulable_profiles`]) contain every instance of the result, i.e. can
///   still be reached later by only creating instances; higher is better. Ties go to fewer
///   runs of contiguous free memory slices, then to the first plan found (kept sets and
///   starts in ascending order), so the result is deterministic. For example, a lone `1g`
///   goes to slice 6 (reachable: `4g@0` + `2g@4`, `3g@0` + `2g@4`, ...), not slice 0 or 4.
///
/// # Errors
/// [`TransitionError::TargetInvalid`] if `target` names a profile `model` lacks or cannot be
/// placed; [`TransitionError::CurrentInvalid`] if `current` breaks a placement rule;
/// [`TransitionError::BusyInstanceNotInTarget`] naming the first busy instance (by start
/// slice) the target has no room for; [`TransitionError::BusyInstancesBlock`] if the busy
/// instances leave no placement for the rest of the target.
pub fn plan_transition(
    model: &GpuModel,
    current: &[(Placed, bool)],
    target: &ProfileCounts,
) -> Result<Transition, TransitionError> {
    for (name, _) in target.iter() {
        if model.profile(name).is_none() {
            return Err(TransitionError::TargetInvalid(format!(
                "{model} has no MIG profile {name}",
                model = model.name
            )));
        }
    }
    if place(model, target).is_none() {
        return Err(TransitionError::TargetInvalid(format!(
            "{target} does not fit on one {model}",
            model = model.name
        )));
    }
    let instances: Vec<Placed> = current.iter().map(|(p, _)| *p).collect();
    check_instances(model, &instances)?;

    let mut sorted: Vec<(Placed, bool)> = current.to_vec();
    sorted.sort_by_key(|(p, _)| (p.start, p.profile.name));
    let busy: Vec<Placed> = sorted.iter().filter(|(_, b)| *b).map(|(p, _)| *p).collect();
    let idle: Vec<Placed> = sorted.iter().filter(|(_, b)| !*b).map(|(p, _)| *p).collect();

    let mut busy_counts = ProfileCounts::empty();
    for p in &busy {
        busy_counts.add(p.profile, 1);
        if busy_counts.count(p.profile.name) > target.count(p.profile.name) {
            return Err(TransitionError::BusyInstanceNotInTarget {
                instance: p.to_string(),
                target: target.to_string(),
            });
        }
    }

    let complete = maximal_layouts_with(model, &model.schedulable_profiles());
    // Keep as many idle instances as possible: try kept sets from largest to smallest.
    for keep in (0..=idle.len()).rev() {
        let mut best: Option<(Score, Transition)> = None;
        for mask in 0u32..(1 << idle.len()) {
            if mask.count_ones() as usize != keep {
                continue;
            }
            let kept: Vec<Placed> = (0..idle.len())
                .filter(|i| mask & (1 << i) != 0)
                .map(|i| idle[i])
                .collect();
            let mut fixed = busy.clone();
            fixed.extend_from_slice(&kept);
            let Some(rest) = remainder(model, target, &fixed) else {
                continue;
            };
            if place_around(model, &fixed, &rest).is_none() {
                continue;
            }
            for new in all_placements_around(model, &fixed, &rest) {
                let mut result = fixed.clone();
                result.extend_from_slice(&new);
                let score = score(model, &complete, &result);
                if !matches!(&best, Some((s, _)) if *s <= score) {
                    let mut destroy: Vec<Placed> = (0..idle.len())
                        .filter(|i| mask & (1 << i) == 0)
                        .map(|i| idle[i])
                        .collect();
                    destroy.sort_by_key(|p| p.start);
                    let mut create = new;
                    create.sort_by_key(|p| p.start);
                    best = Some((score, Transition { destroy, create }));
                }
            }
        }
        if let Some((_, t)) = best {
            return Ok(t);
        }
    }

    let rest = remainder(model, target, &busy).expect("busy instances were checked against the target");
    let names: Vec<String> = busy.iter().map(|p| p.to_string()).collect();
    Err(TransitionError::BusyInstancesBlock {
        why: format!(
            "busy instance(s) {} leave no placement on {} for the rest of {target} ({rest})",
            names.join(", "),
            model.name
        ),
    })
}

/// Operations NVIDIA mig-parted spends on the same change: it first asserts the GPU's profile
/// counts and does nothing if they already match; otherwise it destroys every instance and
/// creates the whole target (`cmd/nvidia-mig-parted/apply/apply.go`, `AssertMigConfig` then
/// `ApplyMigConfig`). For comparison with [`Transition::operations`].
pub fn destroy_all_and_recreate(current: &[Placed], target: &ProfileCounts) -> usize {
    if ProfileCounts::of(current) == *target {
        0
    } else {
        current.len() + target.total() as usize
    }
}

/// `target` minus the profiles of `fixed`, or `None` if `fixed` has an instance too many.
fn remainder(model: &GpuModel, target: &ProfileCounts, fixed: &[Placed]) -> Option<ProfileCounts> {
    let have = ProfileCounts::of(fixed);
    if have.iter().any(|(name, h)| h > target.count(name)) {
        return None;
    }
    let mut rest = ProfileCounts::empty();
    for (p, n) in target.specs(model) {
        rest.add(p, n - have.count(p.name));
    }
    Some(rest)
}

/// Fragmentation of a result, lower is better: (reachable complete layouts, negated; runs of
/// free memory slices).
type Score = (std::cmp::Reverse<usize>, u32);

fn score(model: &GpuModel, complete: &[Vec<Placed>], result: &[Placed]) -> Score {
    let reachable = complete
        .iter()
        .filter(|layout| result.iter().all(|p| layout.contains(p)))
        .count();
    let free = Occupancy::of(model, result).free_mask();
    // A run starts at each free slice whose lower neighbour is not free.
    let runs = (free & !(free << 1)).count_ones();
    (std::cmp::Reverse(reachable), runs)
}

/// Every way to place `rest` around `fixed` (no two orderings of equal profiles repeated).
fn all_placements_around(model: &GpuModel, fixed: &[Placed], rest: &ProfileCounts) -> Vec<Vec<Placed>> {
    let mut todo = Vec::new();
    for (p, n) in rest.specs(model) {
        todo.extend((0..n).map(|_| p));
    }
    let mut out = Vec::new();
    let mut occ = Occupancy::of(model, fixed);
    let mut chosen = Vec::new();
    go(&todo, &mut occ, &mut chosen, &mut out);
    return out;

    fn go(
        todo: &[&'static super::ProfileSpec],
        occ: &mut Occupancy,
        chosen: &mut Vec<Placed>,
        out: &mut Vec<Vec<Placed>>,
    ) {
        let Some((first, rest)) = todo.split_first() else {
            out.push(chosen.clone());
            return;
        };
        // Equal profiles are placed in ascending start order.
        let min = chosen
            .last()
            .filter(|last| last.profile.name == first.name)
            .map_or(0, |last| last.start + 1);
        for &start in first.placement_starts.iter().filter(|&&s| s >= min) {
            let cand = Placed { profile: first, start };
            if occ.can_add(&cand) {
                occ.add(&cand);
                chosen.push(cand);
                go(rest, occ, chosen, out);
                chosen.pop();
                occ.remove(&cand);
            }
        }
    }
}
