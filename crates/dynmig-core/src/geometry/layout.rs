//! Layouts: what instances a GPU (or a node's GPUs) holds.
//!
//! Two views of one thing:
//! - [`ProfileCounts`]: the multiset "3x2g.20gb+1x1g.10gb". This is what admins write in
//!   dynmig.toml, what the controller puts in a drain reason and what Slurm sees as GRES.
//! - [`Placed`] instances: a profile at a start memory slice. This is what the hardware (or
//!   the simulated backend) holds. [`super::place`] turns counts into placements.

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
/// Text form: terms `N x profile` (the `Nx` may be left out for 1) joined by `+`; the empty
/// layout is written `empty`. [`fmt::Display`] writes the largest profiles first and always
/// writes the count, so that the text is canonical and can be compared.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProfileCounts {
    counts: BTreeMap<&'static str, u32>,
}

/// A layout string that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutParseError {
    /// A term names a profile the GPU model does not have.
    #[error("unknown MIG profile '{profile}' for {model}; allowed: {allowed}")]
    UnknownProfile {
        /// The name that was given.
        profile: String,
        /// The GPU model.
        model: &'static str,
        /// The model's profile names, comma separated.
        allowed: String,
    },
    /// A term's count is not a positive integer.
    #[error("bad count in '{term}': expected 'N x profile' such as '3x2g.20gb'")]
    BadCount {
        /// The term.
        term: String,
    },
    /// The profiles cannot all fit on one GPU.
    #[error("layout '{layout}' does not fit on one {model}: {why}")]
    DoesNotFit {
        /// The layout as written.
        layout: String,
        /// The GPU model.
        model: &'static str,
        /// Why not.
        why: String,
    },
}

impl ProfileCounts {
    /// The empty layout (MIG on, no instances).
    pub fn empty() -> Self {
        Self::default()
    }

    /// Adds `n` instances of `profile`.
    pub fn add(&mut self, profile: &'static ProfileSpec, n: u32) {
        if n > 0 {
            *self.counts.entry(profile.name).or_insert(0) += n;
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

    /// Total number of instances.
    pub fn total(&self) -> u32 {
        self.counts.values().sum()
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

    /// Reads `3x2g.20gb+1x1g.10gb` (or `2g.20gb+2g.20gb`, or `empty`) for `model`.
    ///
    /// Checks the profile names and that the multiset can be placed on one GPU.
    ///
    /// # Errors
    /// [`LayoutParseError`] naming the bad term and what is allowed.
    pub fn parse(model: &GpuModel, text: &str) -> Result<Self, LayoutParseError> {
        let text = text.trim();
        let mut c = Self::empty();
        if text.eq_ignore_ascii_case("empty") || text.is_empty() {
            return Ok(c);
        }
        for term in text.split('+') {
            let term = term.trim();
            let (n, name) = match term.split_once(['x', 'X', '*']) {
                Some((n, name)) if !n.is_empty() && n.chars().all(|ch| ch.is_ascii_digit()) => {
                    let n: u32 = n
                        .parse()
                        .map_err(|_| LayoutParseError::BadCount { term: term.into() })?;
                    if n == 0 {
                        return Err(LayoutParseError::BadCount { term: term.into() });
                    }
                    (n, name.trim())
                }
                _ => (1, term),
            };
            let profile = model.profile(name).ok_or_else(|| LayoutParseError::UnknownProfile {
                profile: name.to_string(),
                model: model.name,
                allowed: model.profiles.iter().map(|p| p.name).collect::<Vec<_>>().join(", "),
            })?;
            c.add(profile, n);
        }
        if super::place(model, &c).is_none() {
            return Err(LayoutParseError::DoesNotFit {
                layout: text.to_string(),
                model: model.name,
                why: "no placement of these instances on the GPU's memory slices exists".into(),
            });
        }
        Ok(c)
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

impl fmt::Display for ProfileCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.counts.is_empty() {
            return f.write_str("empty");
        }
        // Largest first: sort by the size encoded in the name ("7g.80gb" > "3g.40gb").
        let mut terms: Vec<_> = self.counts.iter().collect();
        terms.sort_by_key(|(name, _)| std::cmp::Reverse(name_size_key(name)));
        let parts: Vec<String> = terms.iter().map(|(name, n)| format!("{n}x{name}")).collect();
        f.write_str(&parts.join("+"))
    }
}

/// Sort key for a profile name `Ng.Mgb[+me]`: (compute, memory, name).
fn name_size_key(name: &str) -> (u32, u32, &str) {
    let g = name.split('g').next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let m = name
        .split('.')
        .nth(1)
        .and_then(|s| s.trim_end_matches("+me").trim_end_matches("gb").parse().ok())
        .unwrap_or(0);
    (g, m, name)
}

/// The layouts of a node's GPUs, GPU 0 first.
///
/// Text form: each GPU's [`ProfileCounts`] joined by `,`, e.g. `3x2g.20gb+1x1g.10gb,1x7g.80gb`.
/// This is the text the controller writes into the drain reason and the agent reads back.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct NodeLayout {
    /// One layout per GPU.
    pub gpus: Vec<ProfileCounts>,
}

impl NodeLayout {
    /// Reads `L0,L1,...` for a node of `gpu_count` GPUs of `model`.
    ///
    /// # Errors
    /// A wrong number of GPU layouts, or any [`LayoutParseError`] of one GPU's layout.
    pub fn parse(model: &GpuModel, gpu_count: usize, text: &str) -> Result<Self, LayoutParseError> {
        let parts: Vec<&str> = text.split(',').collect();
        if parts.len() != gpu_count {
            return Err(LayoutParseError::DoesNotFit {
                layout: text.to_string(),
                model: model.name,
                why: format!("{} GPU layouts given for a node of {gpu_count} GPUs", parts.len()),
            });
        }
        let gpus = parts
            .iter()
            .map(|p| ProfileCounts::parse(model, p))
            .collect::<Result<_, _>>()?;
        Ok(Self { gpus })
    }

    /// Instances of each profile over all GPUs of the node.
    pub fn totals(&self) -> BTreeMap<&'static str, u32> {
        let mut t = BTreeMap::new();
        for g in &self.gpus {
            for (name, n) in g.iter() {
                *t.entry(name).or_insert(0) += n;
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

impl fmt::Display for NodeLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.gpus.iter().map(|g| g.to_string()).collect();
        f.write_str(&parts.join(","))
    }
}
