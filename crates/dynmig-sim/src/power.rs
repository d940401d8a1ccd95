//! GPU power: the core's model ([`dynmig_core::energy::PowerModel`]), re-exported so that the
//! simulator, the simulated GPU backend and the reports use one model. Idle power plus a
//! concave busy power per instance in its compute slices, capped at the board's TDP; fitted
//! to the A100 measurements of rakin000/Power-Aware-MIG-Scheduler, TDPs from NVIDIA's
//! datasheets. Derivation in docs/model.md ("Power").

pub use dynmig_core::energy::{FitError, PowerModel, A100_BURN_W};
pub use dynmig_core::geometry::{A100_IDLE_W, A100_TDP_W};

/// H100 SXM5 TDP, W (NVIDIA H100 datasheet).
pub const H100_TDP_W: f64 = 700.0;
