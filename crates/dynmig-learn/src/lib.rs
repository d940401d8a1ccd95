//! dynmig-learn: the learned repartitioning policy's runtime (docs/learned.md), what the
//! controller and the simulator serve, in plain Rust (no tensor library). The model chooses,
//! per node that may change, keep or one of a small catalogue of layouts ([`catalogue`]) from
//! an observation of shares of the cluster ([`features`]), so one model serves any cluster
//! size; a [`shield`] masks the actions that would leave waiting jobs no node; the network
//! and its file are in [`net`]; the policy behind the one `Policy` trait in [`policy`].
//! Training (candle, in the simulator) is crate dynmig-train, which writes the file this
//! crate reads.
#![deny(missing_docs)]

pub mod catalogue;
pub mod features;
pub mod net;
pub mod policy;
pub mod shield;

pub use net::Model;
pub use policy::LearnedPolicy;
