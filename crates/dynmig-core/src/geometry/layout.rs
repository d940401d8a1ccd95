//! Layouts: what instances a GPU (or a node's GPUs) holds.
//!
//! Two views of one thing:
//! - [`ProfileCounts`]: the multiset "3x2g.20gb+1x1g.10gb". This is what admins write in
//!   dynmig.toml, what the controller puts in a drain reason and what Slurm sees as GRES.
//! - [`Placed`] instances: a profile at a start memory slice. This is what the hardware (or
//!   the simulated backend) holds. [`super::place()`] turns counts into placements.
//!
//! The text form (reading and writing layouts) lives in `text.rs`, above the placement search
//! that reading needs.

use super::models::{GpuModel, ProfileSpec};
use std::collections::BTreeMap;
use std::fmt;

/// One GPU instance at a placement: `profile` covers memory slices
/// `[start, start + profile.memory_slices)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Placed {
    /// The instance's profile.
    pub profile: &'static ProfileSpec,
    /// First memory slice.
    pub start: u8,
}

impl Placed {
    /// Memory slices covered, as a half-open range.
    pub fn slices(&self) -> std::ops::Range<u8> {
        self.start..self.start + self.profile.memory_slices
    }

    /// Whether two instances share a memory slice.
    pub fn overlaps(&self, other: &Placed) -> bool {
        self.start < other.start + other.profile.memory_slices && other.start < self.start + self.profile.memory_slices
    }
}

impl fmt::Display for Placed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.profile.name, self.start)
    }
}

/// A multiset of profiles on one GPU, e.g. `3x2g.20gb+1x1g.10gb`.
///
/// Text form ([`ProfileCounts::parse`], [`fmt::Display`]): terms `N x profile` (the `Nx` may
/// be left out for 1) joined by `+`; a `+me` profile is written with its suffix
/// (`1x1g.10gb+me+6x1g.10gb`); the empty layout is written `empty`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProfileCounts {
    counts: BTreeMap<&'static str, u32>,
}

impl ProfileCounts {
    /// The empty layout (MIG on, no instances).
    pub fn empty() -> Self {
        Self::default()
    }

    /// Adds `n` instances of `profile` (the count saturates at `u32::MAX`; such a layout
    /// never fits, see [`super::place()`]).
    pub fn add(&mut self, profile: &'static ProfileSpec, n: u32) {
        if n > 0 {
            let c = self.counts.entry(profile.name).or_insert(0);
            *c = c.saturating_add(n);
        }
    }

    /// How many instances of the profile named `name`.
    pub fn count(&self, name: &str) -> u32 {
        self.counts.get(name).copied().unwrap_or(0)
    }

    /// `(profile name, count)` pairs, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u32)> + '_ {
        self.counts.iter().map(|(k, v)| (*k, *v))
    }

    /// Total number of instances (saturating at `u32::MAX`).
    pub fn total(&self) -> u32 {
        self.counts.values().fold(0u32, |a, &n| a.saturating_add(n))
    }

    /// Whether there are no instances.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// Counts of a set of placed instances.
    pub fn of(instances: &[Placed]) -> Self {
        let mut c = Self::empty();
        for p in instances {
            c.add(p.profile, 1);
        }
        c
    }

    /// The profiles with their specs for `model`, largest first (memory, then compute).
    pub fn specs(&self, model: &GpuModel) -> Vec<(&'static ProfileSpec, u32)> {
        let mut v: Vec<_> = self
            .counts
            .iter()
            .filter_map(|(name, n)| model.profile(name).map(|p| (p, *n)))
            .collect();
        v.sort_by_key(|(p, _)| std::cmp::Reverse((p.memory_slices, p.compute_slices, p.name)));
        v
    }
}

/// The layouts of a node's GPUs, GPU 0 first.
///
/// Text form ([`NodeLayout::parse`], [`fmt::Display`]): each GPU's [`ProfileCounts`] joined by
/// `,`, e.g. `3x2g.20gb+1x1g.10gb,1x7g.80gb`. This is the text the controller writes into the
/// drain reason and the agent reads back.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct NodeLayout {
    /// One layout per GPU.
    pub gpus: Vec<ProfileCounts>,
}

impl NodeLayout {
    /// Instances of each profile over all GPUs of the node.
    pub fn totals(&self) -> BTreeMap<&'static str, u32> {
        let mut t = BTreeMap::new();
        for g in &self.gpus {
            for (name, n) in g.iter() {
                let c = t.entry(name).or_insert(0u32);
                *c = c.saturating_add(n);
            }
        }
        t
    }

    /// The Slurm GRES string for this layout, in profile-name order, e.g.
    /// `gpu:1g.10gb:1,gpu:3g.40gb:2` (profile names are the GRES types; no instance gives `""`).
    pub fn gres(&self) -> String {
        self.totals()
            .iter()
            .map(|(name, n)| format!("gpu:{name}:{n}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}
