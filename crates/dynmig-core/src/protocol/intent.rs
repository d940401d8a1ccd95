//! The node intent: what the controller asks of a node's agent, carried in the node's drain
//! reason (the one Slurm field that both can read and that survives until the agent acts).
//!
//! Forms:
//! - `dynmig/v1 repartition to=<layout>`: drain this node and apply `<layout>` (one
//!   [`NodeLayout`] per node: GPUs separated by `,`, e.g. `3x2g.20gb+1x1g.10gb,1x7g.80gb`);
//! - `dynmig/v1 failed: <why>`: a repartition failed; the node waits for an administrator.
//!
//! Any other reason (an administrator's own, even one that starts with `dynmig`) is not ours:
//! [`NodeIntent::parse`] returns `Ok(None)`, and neither the controller nor the agent touches
//! the node.

use super::{clip, TAG};
use crate::geometry::{GpuModel, LayoutParseError, NodeLayout};
use std::fmt;

/// Longest `why` of a failed intent, in characters (Slurm shows the reason in `sinfo -R`).
pub const MAX_WHY: usize = 200;

/// What dynmig wants of a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeIntent {
    /// Drain and apply this layout once the node is free of jobs.
    Repartition(NodeLayout),
    /// A repartition failed; left for an administrator (`scontrol update state=resume`).
    Failed(String),
}

/// A reason that claims to be ours (`dynmig/v1 ...`) but cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IntentError {
    /// Neither `repartition to=` nor `failed:` after the tag.
    #[error("'{0}': a dynmig/v1 reason must be 'repartition to=<layout>' or 'failed: <why>'")]
    UnknownForm(String),
    /// The layout does not fit the node.
    #[error("bad target layout: {0}")]
    Layout(#[from] LayoutParseError),
}

impl NodeIntent {
    /// The drain reason for this intent. A failure's `why` is made one line and cut to
    /// [`MAX_WHY`] characters.
    pub fn encode(&self) -> String {
        match self {
            NodeIntent::Repartition(l) => format!("{TAG} repartition to={l}"),
            NodeIntent::Failed(why) => format!("{TAG} failed: {}", clip(why, MAX_WHY).replace('"', "'")),
        }
    }

    /// Reads a node's drain reason. `Ok(None)`: not ours. The layout is checked against the
    /// node's GPU model and count.
    ///
    /// # Errors
    /// [`IntentError`]: tagged as ours but not a form this version writes, or a layout that
    /// does not fit the node.
    pub fn parse(reason: &str, model: &GpuModel, gpus: usize) -> Result<Option<Self>, IntentError> {
        let Some(rest) = reason.strip_prefix(TAG).and_then(|r| r.strip_prefix(' ')) else {
            return Ok(None);
        };
        if let Some(layout) = rest.strip_prefix("repartition to=") {
            return Ok(Some(NodeIntent::Repartition(NodeLayout::parse(
                model,
                gpus,
                layout.trim(),
            )?)));
        }
        if let Some(why) = rest.strip_prefix("failed:") {
            return Ok(Some(NodeIntent::Failed(why.trim().to_string())));
        }
        Err(IntentError::UnknownForm(clip(reason, 100)))
    }

    /// Whether a reason is tagged as ours (well formed or not): the controller leaves such a
    /// node to the agent or to an administrator; an untagged reason is an administrator's.
    pub fn is_tagged(reason: &str) -> bool {
        reason.starts_with(TAG)
    }
}

impl fmt::Display for NodeIntent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.encode())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::A100_80GB;

    #[test]
    fn repartition_round_trips() {
        let l = NodeLayout::parse(&A100_80GB, 2, "2x3g.40gb,1x7g.80gb").unwrap();
        let i = NodeIntent::Repartition(l);
        assert_eq!(i.encode(), "dynmig/v1 repartition to=2x3g.40gb,1x7g.80gb");
        assert_eq!(NodeIntent::parse(&i.encode(), &A100_80GB, 2).unwrap(), Some(i));
    }

    #[test]
    fn failure_round_trips_as_one_clipped_line() {
        let i = NodeIntent::Failed(format!("GPU 0: \"x\"\n{}", "y".repeat(500)));
        let text = i.encode();
        assert!(!text.contains('\n') && !text.contains('"'));
        assert!(text.chars().count() < 230);
        let back = NodeIntent::parse(&text, &A100_80GB, 2).unwrap().unwrap();
        assert!(matches!(back, NodeIntent::Failed(w) if w.starts_with("GPU 0: 'x'")));
    }

    #[test]
    fn an_admins_reason_is_never_taken_for_ours() {
        for r in [
            "bad fan",
            "dynmig: repartition to 1x7g.80gb,1x7g.80gb",
            "dynmig/v10 repartition to=1x7g.80gb,1x7g.80gb",
            "dynmig/v1repartition to=1x7g.80gb,1x7g.80gb",
            "",
        ] {
            assert_eq!(NodeIntent::parse(r, &A100_80GB, 2).unwrap(), None, "{r}");
        }
    }

    #[test]
    fn a_malformed_tagged_reason_is_an_error_not_a_guess() {
        assert!(NodeIntent::parse("dynmig/v1 shrink", &A100_80GB, 2).is_err());
        assert!(NodeIntent::parse("dynmig/v1 repartition to=9x7g.80gb", &A100_80GB, 2).is_err());
        assert!(
            NodeIntent::parse("dynmig/v1 repartition to=1x7g.80gb", &A100_80GB, 2).is_err(),
            "one GPU short"
        );
        assert!(NodeIntent::is_tagged("dynmig/v1 shrink"));
    }
}
