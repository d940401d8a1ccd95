//! dynmig-train: training of the learned policies (docs/learned.md), apart from their
//! runtime (crate dynmig-learn) so that the controller does not link candle. The learned
//! policy is trained in the simulator's engine by REINFORCE over a candle copy of the
//! runtime's network ([`net`], [`mod@train`]), and saved in the runtime's model file, which
//! [`dynmig_learn::Model::load`] reads; the residual on the guarded default is trained in
//! [`residual`]. The engine runs a model through
//! [`dynmig_sim::policies::learned_model`], as the controller does.
#![deny(missing_docs)]

pub mod net;
pub mod residual;
pub mod train;

pub use dynmig_learn::Model;
pub use train::{train, TrainArgs};
