//! Layouts as text: what admins write in dynmig.toml, what the controller writes into a drain
//! reason and what the agent reads back.
//!
//! One GPU ([`ProfileCounts`]): terms `N x profile` joined by `+`, e.g. `3x2g.20gb+1x1g.10gb`.
//! The `Nx` may be left out for 1 (`x`, `X` or `*` separate the count); `empty` (or nothing)
//! is MIG on with no instance. A variant profile keeps its suffix: `+` followed by `me`,
//! `gfx` or `me.all` belongs to the profile before it, so `1x1g.10gb+me+6x1g.10gb` is one
//! `1g.10gb+me` and six `1g.10gb`, and `2x1g.24gb+gfx+1x2g.48gb` two `1g.24gb+gfx` and one
//! `2g.48gb` (no profile is named `me`, `gfx` or `me.all`). [`fmt::Display`] writes every count, largest
//! profiles first, so that the text is canonical and reads back to the same layout.
//!
//! A node ([`NodeLayout`]): each GPU's layout joined by `,`, GPU 0 first.
//!
//! Reading is bounded by the model table, never by a number in the text: a count above what
//! one GPU can hold is refused before anything is built.

use super::enumerate::distinct_multisets;
use super::layout::{NodeLayout, ProfileCounts};
use super::models::GpuModel;
use super::place::place;
use crate::types::cut;
use std::fmt;

/// Longest user text echoed in an error, in characters.
const ECHO_MAX: usize = 100;

/// A layout string that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LayoutParseError {
    /// A term names a profile the GPU model does not have.
    #[error("unknown MIG profile '{profile}' for {model}; allowed: {allowed}")]
    UnknownProfile {
        /// The name that was given (cut to 100 characters).
        profile: String,
        /// The GPU model.
        model: &'static str,
        /// The model's profile names, comma separated.
        allowed: String,
    },
    /// A term is not `N x profile` with N a positive integer.
    #[error("bad term '{term}': write 'N x profile' with N from 1, e.g. {example}")]
    BadTerm {
        /// The term (cut to 100 characters).
        term: String,
        /// Valid layouts of the model, for the message.
        example: String,
    },
    /// More instances of a profile than one GPU of the model can hold.
    #[error("{count} instances of {profile}: one {model} holds at most {max}")]
    TooMany {
        /// The profile.
        profile: &'static str,
        /// The count as written, or the sum of the terms naming the profile (cut to 100
        /// characters).
        count: String,
        /// The profile's most instances on one GPU (the model table's `max_instances`).
        max: u32,
        /// The GPU model.
        model: &'static str,
    },
    /// The profiles cannot all be placed on one GPU together.
    #[error("layout '{layout}' does not fit on one {model}: no placement of these instances on the GPU's memory slices exists; e.g. {example}")]
    DoesNotFit {
        /// The layout as written (cut to 100 characters).
        layout: String,
        /// The GPU model.
        model: &'static str,
        /// Valid layouts of the model, for the message.
        example: String,
    },
    /// A node layout with a layout count other than the node's GPU count.
    #[error(
        "'{layout}' gives {given} GPU layout(s) for a node of {expected} GPU(s); join one layout per GPU with ','"
    )]
    GpuCount {
        /// The node layout as written (cut to 100 characters).
        layout: String,
        /// Layouts given.
        given: usize,
        /// GPUs of the node.
        expected: usize,
    },
}

/// Two layouts valid on `model`, quoted, for messages: the full profile and a mixed one, e.g.
/// `"1x7g.80gb" or "1x4g.40gb+1x3g.40gb"` on an A100-80GB, `"1x4g.24gb" or
/// "1x2g.12gb+2x1g.6gb"` on an A30.
pub fn layout_examples(model: &GpuModel) -> String {
    let full = format!("\"1x{}\"", model.full_profile().name);
    match distinct_multisets(model).into_iter().find(|c| c.iter().count() > 1) {
        Some(mixed) => format!("{full} or \"{mixed}\""),
        None => full,
    }
}

/// Variant suffixes written after a `+` ([`super::ProfileSpec::suffix`]).
const PLUS_SUFFIXES: [&str; 3] = ["me", "gfx", "me.all"];

/// Splits on `+`, keeping a `+me`, `+gfx` or `+me.all` suffix with the term before it.
fn terms(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for t in text.split('+') {
        let suffix = PLUS_SUFFIXES.iter().find(|s| t.trim().eq_ignore_ascii_case(s));
        match (out.last_mut(), suffix) {
            (Some(last), Some(suffix)) if !last.trim().is_empty() => {
                last.push('+');
                last.push_str(suffix);
            }
            (_, _) => out.push(t.to_string()),
        }
    }
    out
}

impl ProfileCounts {
    /// Reads `3x2g.20gb+1x1g.10gb` (or `2g.20gb+2g.20gb`, `1x1g.10gb+me`, or `empty`) for
    /// `model` (module docs give the syntax).
    ///
    /// Checks the profile names, each profile's count against what one GPU holds, and that
    /// the multiset can be placed on one GPU.
    ///
    /// # Errors
    /// [`LayoutParseError`] naming the bad term or count and what is allowed.
    pub fn parse(model: &GpuModel, text: &str) -> Result<Self, LayoutParseError> {
        let text = text.trim();
        let mut c = Self::empty();
        if text.eq_ignore_ascii_case("empty") || text.is_empty() {
            return Ok(c);
        }
        let bad_term = |term: &str| LayoutParseError::BadTerm {
            term: cut(term, ECHO_MAX),
            example: layout_examples(model),
        };
        for term in terms(text) {
            let term = term.trim();
            // A bare profile name first: `1g.24gb+gfx` holds an `x` that is no count separator.
            let (n_text, name) = match term.split_once(['x', 'X', '*']) {
                _ if model.profile(term).is_some() => (None, term),
                Some((n, name)) if !n.trim().is_empty() && n.trim().bytes().all(|b| b.is_ascii_digit()) => {
                    (Some(n.trim()), name.trim())
                }
                Some((n, _)) if n.trim().bytes().any(|b| b.is_ascii_digit()) => return Err(bad_term(term)),
                _ => (None, term),
            };
            if name.is_empty() {
                return Err(bad_term(term));
            }
            let profile = model.profile(name).ok_or_else(|| LayoutParseError::UnknownProfile {
                profile: cut(name, ECHO_MAX),
                model: model.name,
                allowed: model.profiles.iter().map(|p| p.name).collect::<Vec<_>>().join(", "),
            })?;
            let max = u32::from(profile.max_instances);
            let too_many = |count: String| LayoutParseError::TooMany {
                profile: profile.name,
                count,
                max,
                model: model.name,
            };
            // Digits only: a number that does not fit in u32 is above every maximum.
            let n: u32 = match n_text {
                None => 1,
                Some(d) => match d.parse::<u32>() {
                    Ok(0) => return Err(bad_term(term)),
                    Ok(n) if n <= max => n,
                    _ => return Err(too_many(cut(d, ECHO_MAX))),
                },
            };
            let sum = c.count(profile.name) + n;
            if sum > max {
                return Err(too_many(sum.to_string()));
            }
            c.add(profile, n);
        }
        if place(model, &c).is_none() {
            return Err(LayoutParseError::DoesNotFit {
                layout: cut(text, ECHO_MAX),
                model: model.name,
                example: layout_examples(model),
            });
        }
        Ok(c)
    }
}

impl fmt::Display for ProfileCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("empty");
        }
        // Largest first: sort by the size encoded in the name ("7g.80gb" > "3g.40gb").
        let mut terms: Vec<_> = self.iter().collect();
        terms.sort_by_key(|(name, _)| std::cmp::Reverse(name_size_key(name)));
        let parts: Vec<String> = terms.iter().map(|(name, n)| format!("{n}x{name}")).collect();
        f.write_str(&parts.join("+"))
    }
}

/// Sort key for a profile name `Ng.Mgb[suffix]` (suffix `+me`, `+gfx`, `-me`, `+me.all`):
/// (compute, memory, name).
fn name_size_key(name: &str) -> (u32, u32, &str) {
    let leading = |s: &str| -> u32 {
        let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        s[..end].parse().unwrap_or(0)
    };
    let g = leading(name);
    let m = name.split_once('.').map_or(0, |(_, rest)| leading(rest));
    (g, m, name)
}

impl NodeLayout {
    /// Reads `L0,L1,...` for a node of `gpu_count` GPUs of `model` (each `L` as
    /// [`ProfileCounts::parse`] reads it).
    ///
    /// # Errors
    /// [`LayoutParseError::GpuCount`] for a wrong number of GPU layouts, or the first GPU
    /// layout's [`LayoutParseError`].
    pub fn parse(model: &GpuModel, gpu_count: usize, text: &str) -> Result<Self, LayoutParseError> {
        let given = text.split(',').count();
        if given != gpu_count {
            return Err(LayoutParseError::GpuCount {
                layout: cut(text, ECHO_MAX),
                given,
                expected: gpu_count,
            });
        }
        let gpus = text
            .split(',')
            .map(|p| ProfileCounts::parse(model, p))
            .collect::<Result<_, _>>()?;
        Ok(Self { gpus })
    }
}

impl fmt::Display for NodeLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.gpus.iter().map(|g| g.to_string()).collect();
        f.write_str(&parts.join(","))
    }
}
