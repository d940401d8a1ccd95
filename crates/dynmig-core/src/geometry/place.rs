//! Checking a set of placed instances, and finding placements for a multiset of profiles.

use super::layout::{Placed, ProfileCounts};
use super::models::GpuModel;

/// Why a set of placed instances is not a valid GPU state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// A profile starts at a memory slice it may not start at.
    #[error("{instance} starts at a memory slice this profile cannot use (allowed starts: {allowed:?})")]
    BadPlacement {
        /// The instance.
        instance: String,
        /// Allowed starts.
        allowed: Vec<u8>,
    },
    /// Two instances share a memory slice.
    #[error("{a} and {b} overlap")]
    Overlap {
        /// First instance.
        a: String,
        /// Second instance.
        b: String,
    },
    /// More compute slices than the GPU has.
    #[error("instances use {used} compute slices; the GPU has {available}")]
    ComputeOverCapacity {
        /// Slices used.
        used: u32,
        /// Slices the GPU has.
        available: u8,
    },
    /// Too many instances of one profile, or more than one `+me` instance.
    #[error("{count} instances of {profile}; at most {max} allowed")]
    TooMany {
        /// Profile name.
        profile: &'static str,
        /// How many there are.
        count: u32,
        /// How many are allowed.
        max: u32,
    },
}

/// Checks that `instances` can exist together on one GPU of `model`.
///
/// # Errors
/// The first rule broken, as a [`LayoutError`].
pub fn check_instances(model: &GpuModel, instances: &[Placed]) -> Result<(), LayoutError> {
    let mut compute = 0u32;
    let mut media = 0u32;
    for (i, a) in instances.iter().enumerate() {
        if !a.profile.placement_starts.contains(&a.start) || a.start + a.profile.memory_slices > model.memory_slices {
            return Err(LayoutError::BadPlacement {
                instance: a.to_string(),
                allowed: a.profile.placement_starts.to_vec(),
            });
        }
        for b in &instances[i + 1..] {
            if a.overlaps(b) {
                return Err(LayoutError::Overlap {
                    a: a.to_string(),
                    b: b.to_string(),
                });
            }
        }
        compute += u32::from(a.profile.compute_slices);
        media += u32::from(a.profile.media_extensions);
    }
    if compute > u32::from(model.compute_slices) {
        return Err(LayoutError::ComputeOverCapacity {
            used: compute,
            available: model.compute_slices,
        });
    }
    if media > 1 {
        return Err(LayoutError::TooMany {
            profile: "+me",
            count: media,
            max: 1,
        });
    }
    for (name, n) in ProfileCounts::of(instances).iter() {
        let p = model.profile(name).expect("instances use the model's own profiles");
        if n > u32::from(p.max_instances) {
            return Err(LayoutError::TooMany {
                profile: p.name,
                count: n,
                max: p.max_instances.into(),
            });
        }
    }
    Ok(())
}

/// Finds placements for `counts` on an empty GPU of `model`, or `None` if it cannot fit.
///
/// Places the largest profiles first at their lowest free allowed start and backtracks;
/// the search space is tiny (at most one instance per memory slice, at most
/// [`super::MAX_SLICES`] starts each).
pub fn place(model: &GpuModel, counts: &ProfileCounts) -> Option<Vec<Placed>> {
    place_around(model, &[], counts)
}

/// Finds placements for `counts` on a GPU of `model` that already holds `fixed` (which stay
/// where they are), or `None`. Returns only the new instances.
///
/// A count above the profile's `max_instances`, or a profile `model` does not have, gives
/// `None` before anything is allocated: the work is bounded by the model table, never by the
/// counts asked for.
pub fn place_around(model: &GpuModel, fixed: &[Placed], counts: &ProfileCounts) -> Option<Vec<Placed>> {
    let specs = counts.specs(model);
    let known: usize = specs.len();
    if known != counts.iter().count() || specs.iter().any(|(p, n)| *n > u32::from(p.max_instances)) {
        return None;
    }
    let mut todo = Vec::new();
    for (p, n) in specs {
        for _ in 0..n {
            todo.push(p);
        }
    }
    let mut placed = fixed.to_vec();
    if backtrack(model, &todo, &mut placed) {
        Some(placed.split_off(fixed.len()))
    } else {
        None
    }
}

fn backtrack(model: &GpuModel, todo: &[&'static super::ProfileSpec], placed: &mut Vec<Placed>) -> bool {
    let Some((first, rest)) = todo.split_first() else {
        return check_instances(model, placed).is_ok();
    };
    for &start in first.placement_starts {
        let cand = Placed { profile: first, start };
        if cand.start + first.memory_slices > model.memory_slices || placed.iter().any(|p| p.overlaps(&cand)) {
            continue;
        }
        placed.push(cand);
        if backtrack(model, rest, placed) {
            return true;
        }
        placed.pop();
    }
    false
}
