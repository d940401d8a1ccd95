//! The agent's journal: what an apply under way is doing, written before each step so that a
//! restarted agent can finish it (every step is idempotent).
//!
//! JSON, one object: `{"v":1,"target":"2x3g.40gb,1x7g.80gb","step":"instances","started":1700000000}`.
//! Unknown fields, another version, an unknown step or a target that does not fit the node are
//! errors ([`JournalError`]): the agent then drains the node with the reason instead of acting
//! on a guess.

use crate::geometry::{GpuModel, NodeLayout};
use serde::{Deserialize, Serialize};

/// The journal format version this code writes and reads.
pub const JOURNAL_VERSION: u32 = 1;

/// The steps of an apply, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JournalStep {
    /// Changing the GPU instances.
    Instances,
    /// Writing gres.conf.
    GresConf,
    /// Re-registering the node with Slurm.
    Register,
    /// Waiting for Slurm to show the node with its new GRES.
    Wait,
}

/// An apply under way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Journal {
    /// The layout being applied.
    pub target: NodeLayout,
    /// The step begun last.
    pub step: JournalStep,
    /// When the apply began, seconds since the Unix epoch.
    pub started: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    v: u32,
    target: String,
    step: JournalStep,
    started: u64,
}

/// A journal that cannot be read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JournalError {
    /// Not JSON of the journal's shape.
    #[error("not a dynmig journal: {0}")]
    Malformed(String),
    /// Written by another format version.
    #[error("journal version {found}, this agent reads version {JOURNAL_VERSION}")]
    Version {
        /// The version found.
        found: u32,
    },
    /// The target does not fit the node (the config changed since it was written?).
    #[error("journal target '{target}' does not fit this node: {why}")]
    Target {
        /// The target text.
        target: String,
        /// Why.
        why: String,
    },
}

impl Journal {
    /// The journal's JSON text.
    pub fn encode(&self) -> String {
        serde_json::to_string(&Wire {
            v: JOURNAL_VERSION,
            target: self.target.to_string(),
            step: self.step,
            started: self.started,
        })
        .expect("a journal always serialises")
    }

    /// Reads a journal for a node of `gpus` GPUs of `model`.
    ///
    /// # Errors
    /// [`JournalError`].
    pub fn parse(text: &str, model: &GpuModel, gpus: usize) -> Result<Self, JournalError> {
        let w: Wire =
            serde_json::from_str(text).map_err(|e| JournalError::Malformed(super::clip(&e.to_string(), 200)))?;
        if w.v != JOURNAL_VERSION {
            return Err(JournalError::Version { found: w.v });
        }
        let target = NodeLayout::parse(model, gpus, &w.target).map_err(|e| JournalError::Target {
            target: super::clip(&w.target, 100),
            why: e.to_string(),
        })?;
        Ok(Self {
            target,
            step: w.step,
            started: w.started,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::A100_80GB;

    #[test]
    fn journal_round_trips_every_step() {
        for step in [
            JournalStep::Instances,
            JournalStep::GresConf,
            JournalStep::Register,
            JournalStep::Wait,
        ] {
            let j = Journal {
                target: NodeLayout::parse(&A100_80GB, 2, "7x1g.10gb,empty").unwrap(),
                step,
                started: 1_700_000_000,
            };
            assert_eq!(Journal::parse(&j.encode(), &A100_80GB, 2).unwrap(), j);
        }
    }

    #[test]
    fn a_corrupt_or_foreign_journal_is_an_error() {
        assert!(matches!(
            Journal::parse("{", &A100_80GB, 2),
            Err(JournalError::Malformed(_))
        ));
        assert!(matches!(
            Journal::parse(
                r#"{"v":2,"target":"empty,empty","step":"wait","started":1}"#,
                &A100_80GB,
                2
            ),
            Err(JournalError::Version { found: 2 })
        ));
        assert!(matches!(
            Journal::parse(
                r#"{"v":1,"target":"empty,empty","step":"dance","started":1}"#,
                &A100_80GB,
                2
            ),
            Err(JournalError::Malformed(_))
        ));
        assert!(matches!(
            Journal::parse(r#"{"v":1,"target":"empty","step":"wait","started":1}"#, &A100_80GB, 2),
            Err(JournalError::Target { .. })
        ));
        assert!(Journal::parse(
            r#"{"v":1,"target":"empty,empty","step":"wait","started":1,"x":0}"#,
            &A100_80GB,
            2
        )
        .is_err());
    }
}
