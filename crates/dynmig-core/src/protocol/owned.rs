//! The instances dynmig created on a node: the agent's record of what it may destroy.
//!
//! A MIG instance made by someone else (an administrator with `nvidia-smi mig -cgi`, a boot
//! unit with mig-parted, another tool) is never destroyed by dynmig; only instances named
//! here are. Peers learned this the hard way: a reconfiguring tool that destroys whatever it
//! finds takes instances away from whoever made them.
//!
//! JSON, one object, written atomically after every change:
//! `{"v":1,"instances":[{"gpu":0,"uuid":"MIG-...","instance":"3g.40gb@4"}],"pending":[{"gpu":0,"instance":"1g.10gb@0"}]}`.
//! - `instances`: created by dynmig and not destroyed since, named by the MIG device UUID
//!   (unique per creation: GPU-instance ids are reused, UUIDs are not).
//! - `pending`: a create journalled before the call and not yet confirmed. After a crash
//!   between the driver's create and the record's update, the instance found at that place is
//!   dynmig's (write-ahead, as the apply journal does for its steps).
//!
//! Another version, unknown fields or bad JSON are errors ([`OwnedError`]): the agent then
//! refuses to destroy anything rather than guess.

use serde::{Deserialize, Serialize};

/// The format version this code writes and reads.
pub const OWNED_VERSION: u32 = 1;

/// One instance dynmig created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OwnedInstance {
    /// GPU index on the node.
    pub gpu: u32,
    /// The MIG device UUID (`MIG-...`), as the backend reported it after the create.
    pub uuid: String,
    /// Profile and start memory slice, `3g.40gb@4` (for people reading the file and for
    /// error messages).
    pub instance: String,
}

/// A create journalled and not yet confirmed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PendingCreate {
    /// GPU index on the node.
    pub gpu: u32,
    /// Profile and start memory slice, `1g.10gb@0`.
    pub instance: String,
}

/// The record (module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnedInstances {
    /// Instances dynmig created.
    pub instances: Vec<OwnedInstance>,
    /// Creates under way.
    pub pending: Vec<PendingCreate>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    v: u32,
    instances: Vec<OwnedInstance>,
    #[serde(default)]
    pending: Vec<PendingCreate>,
}

/// Why a record could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OwnedError {
    /// Not the JSON this code writes.
    #[error("not a dynmig instance record: {0}")]
    Syntax(String),
    /// Written by another version of dynmig.
    #[error("instance record version {0}; this dynmig reads version {OWNED_VERSION}")]
    Version(u32),
}

impl OwnedInstances {
    /// The JSON text (module docs).
    pub fn encode(&self) -> String {
        serde_json::to_string(&Wire {
            v: OWNED_VERSION,
            instances: self.instances.clone(),
            pending: self.pending.clone(),
        })
        .expect("plain data always serializes")
    }

    /// Reads the JSON text.
    ///
    /// # Errors
    /// [`OwnedError`]: bad JSON, unknown fields, or another version.
    pub fn parse(text: &str) -> Result<Self, OwnedError> {
        let w: Wire = serde_json::from_str(text).map_err(|e| OwnedError::Syntax(e.to_string()))?;
        if w.v != OWNED_VERSION {
            return Err(OwnedError::Version(w.v));
        }
        Ok(Self {
            instances: w.instances,
            pending: w.pending,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_other_versions_and_fields() {
        let r = OwnedInstances {
            instances: vec![OwnedInstance {
                gpu: 1,
                uuid: "MIG-0b5c9a5e-1111-2222-3333-444455556666".into(),
                instance: "3g.40gb@4".into(),
            }],
            pending: vec![PendingCreate {
                gpu: 0,
                instance: "1g.10gb@0".into(),
            }],
        };
        assert_eq!(OwnedInstances::parse(&r.encode()).unwrap(), r);
        assert_eq!(
            OwnedInstances::parse(r#"{"v":2,"instances":[]}"#),
            Err(OwnedError::Version(2))
        );
        assert!(matches!(
            OwnedInstances::parse(r#"{"v":1,"instances":[],"extra":1}"#),
            Err(OwnedError::Syntax(_))
        ));
        assert!(matches!(OwnedInstances::parse("dynmig"), Err(OwnedError::Syntax(_))));
        assert_eq!(
            OwnedInstances::parse(r#"{"v":1,"instances":[]}"#).unwrap(),
            OwnedInstances::default()
        );
    }
}
