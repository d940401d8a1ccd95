//! The controller's planned repartitions: nodes that keep running jobs until a maintenance
//! reservation starts, and then change to a target layout.
//!
//! JSON, one object, in `<state_dir>/controller-plans.json` (written atomically by the
//! controller, read back with a size bound):
//! `{"v":1,"plans":[{"node":"n1","target":"7x1g.10gb,1x7g.80gb","start":1700000600,"reservation":"dynmig_n1","since":1700000000}]}`.
//!
//! Another version, unknown fields or malformed JSON are errors ([`PlansError`]); a plan whose
//! target no longer fits its node is reported by [`Plans::parse`] per plan, so that the
//! controller can repair it (delete its reservation) instead of guessing.

use crate::geometry::{GpuModel, LayoutParseError, NodeLayout};
use serde::{Deserialize, Serialize};

/// The plans format version this code writes and reads.
pub const PLANS_VERSION: u32 = 1;

/// Largest plans file read, in bytes (about 2,000 plans of 500 bytes).
pub const MAX_PLANS_BYTES: u64 = 1 << 20;

/// Prefix of the maintenance reservations dynmig creates: `dynmig_<node>`.
pub const RESERVATION_PREFIX: &str = "dynmig_";

/// The reservation name dynmig uses for `node`.
pub fn reservation_name(node: &str) -> String {
    format!("{RESERVATION_PREFIX}{node}")
}

/// One planned repartition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Slurm node name.
    pub node: String,
    /// The layout the node changes to.
    pub target: NodeLayout,
    /// When the reservation starts (the latest end of the node's running jobs when planned),
    /// seconds since the epoch.
    pub start: i64,
    /// The maintenance reservation that keeps later jobs off the node.
    pub reservation: String,
    /// When the plan was made, seconds since the epoch.
    pub since: i64,
}

/// One plan as written: the target is text until the node's model is known.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPlan {
    /// Slurm node name.
    pub node: String,
    /// The target layout's text.
    pub target: String,
    /// Reservation start, seconds since the epoch.
    pub start: i64,
    /// Reservation name.
    pub reservation: String,
    /// When planned, seconds since the epoch.
    pub since: i64,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    v: u32,
    plans: Vec<RawPlan>,
}

/// A plans file that cannot be read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlansError {
    /// Not JSON of the plans file's shape.
    #[error("not a dynmig plans file: {0}")]
    Malformed(String),
    /// Written by another format version.
    #[error("plans file version {found}, this controller reads version {PLANS_VERSION}")]
    Version {
        /// The version found.
        found: u32,
    },
}

/// Every planned repartition, by node name (at most one per node).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plans {
    /// The plans, sorted by node name.
    pub plans: Vec<Plan>,
}

impl Plan {
    /// The plan as written.
    pub fn raw(&self) -> RawPlan {
        RawPlan {
            node: self.node.clone(),
            target: self.target.to_string(),
            start: self.start,
            reservation: self.reservation.clone(),
            since: self.since,
        }
    }
}

impl RawPlan {
    /// The plan, its target checked against a node of `gpus` GPUs of `model`.
    ///
    /// # Errors
    /// The target does not fit the node.
    pub fn typed(&self, model: &GpuModel, gpus: usize) -> Result<Plan, LayoutParseError> {
        Ok(Plan {
            node: self.node.clone(),
            target: NodeLayout::parse(model, gpus, &self.target)?,
            start: self.start,
            reservation: self.reservation.clone(),
            since: self.since,
        })
    }
}

impl Plans {
    /// The plans file's JSON text.
    pub fn encode(&self) -> String {
        let mut plans: Vec<RawPlan> = self.plans.iter().map(Plan::raw).collect();
        plans.sort_by(|a, b| a.node.cmp(&b.node));
        serde_json::to_string(&Wire {
            v: PLANS_VERSION,
            plans,
        })
        .expect("plans always serialise")
    }

    /// Reads a plans file into raw plans (targets not yet checked: see [`RawPlan::typed`]).
    ///
    /// # Errors
    /// [`PlansError`].
    pub fn parse(text: &str) -> Result<Vec<RawPlan>, PlansError> {
        let w: Wire =
            serde_json::from_str(text).map_err(|e| PlansError::Malformed(super::clip(&e.to_string(), 200)))?;
        if w.v != PLANS_VERSION {
            return Err(PlansError::Version { found: w.v });
        }
        Ok(w.plans)
    }

    /// The plan for `node`, if any.
    pub fn get(&self, node: &str) -> Option<&Plan> {
        self.plans.iter().find(|p| p.node == node)
    }

    /// Adds or replaces the plan of `plan.node`.
    pub fn set(&mut self, plan: Plan) {
        self.remove(&plan.node);
        self.plans.push(plan);
        self.plans.sort_by(|a, b| a.node.cmp(&b.node));
    }

    /// Removes the plan of `node`; returns it.
    pub fn remove(&mut self, node: &str) -> Option<Plan> {
        let i = self.plans.iter().position(|p| p.node == node)?;
        Some(self.plans.remove(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::A100_80GB;

    fn plan(node: &str) -> Plan {
        Plan {
            node: node.into(),
            target: NodeLayout::parse(&A100_80GB, 2, "7x1g.10gb,1x7g.80gb").unwrap(),
            start: 1_700_000_600,
            reservation: reservation_name(node),
            since: 1_700_000_000,
        }
    }

    #[test]
    fn plans_round_trip_sorted_by_node() {
        let mut p = Plans::default();
        p.set(plan("n2"));
        p.set(plan("n1"));
        let text = p.encode();
        assert!(text.starts_with(r#"{"v":1,"plans":[{"node":"n1","#), "{text}");
        let back: Vec<Plan> = Plans::parse(&text)
            .unwrap()
            .iter()
            .map(|r| r.typed(&A100_80GB, 2).unwrap())
            .collect();
        assert_eq!(back, p.plans);
        assert_eq!(p.remove("n1").unwrap().reservation, "dynmig_n1");
        assert!(p.get("n1").is_none() && p.get("n2").is_some());
    }

    #[test]
    fn a_corrupt_or_foreign_plans_file_is_an_error() {
        assert!(matches!(Plans::parse("{"), Err(PlansError::Malformed(_))));
        assert!(matches!(
            Plans::parse(r#"{"v":2,"plans":[]}"#),
            Err(PlansError::Version { found: 2 })
        ));
        assert!(Plans::parse(r#"{"v":1,"plans":[],"x":1}"#).is_err());
        let raw = Plans::parse(
            r#"{"v":1,"plans":[{"node":"n1","target":"1x7g.80gb","start":1,"reservation":"dynmig_n1","since":0}]}"#,
        )
        .unwrap();
        assert!(raw[0].typed(&A100_80GB, 2).is_err(), "one GPU short");
    }
}
