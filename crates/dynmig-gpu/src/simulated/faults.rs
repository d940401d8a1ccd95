//! Fault injection for the simulated backend; [`FaultPlan`] documents the format.

use crate::BackendError;
use serde::{Deserialize, Serialize};

/// The environment variable holding a per-process [`FaultPlan`] in its JSON text form.
pub const FAULTS_ENV: &str = "DYNMIG_SIM_FAULTS";

/// An operation a fault can hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultOp {
    /// [`crate::GpuBackend::create_instance`].
    Create,
    /// [`crate::GpuBackend::destroy_instance`].
    Destroy,
    /// [`crate::GpuBackend::set_mig_mode`].
    SetMigMode,
    /// [`crate::GpuBackend::gpus`] (listing the GPUs and their instances; every read of the
    /// node, including the verify after an apply and the gres.conf writer, goes through it).
    List,
    /// The compute-instance half of [`crate::GpuBackend::create_instance`]: counted with
    /// `create` calls; the call fails with nothing changed, as the NVML backend leaves it when
    /// `nvmlGpuInstanceCreateComputeInstance` fails (it destroys the new GPU instance again).
    CreateCi,
    /// The compute-instance half of [`crate::GpuBackend::destroy_instance`]: counted with
    /// `destroy` calls; the call fails with nothing changed, as with the NVML backend when
    /// `nvmlComputeInstanceDestroy` fails (the GPU instance is destroyed only after its
    /// compute instances).
    DestroyCi,
}

impl FaultOp {
    /// The backend call a fault of this operation counts: `create_ci` counts `create`
    /// calls, `destroy_ci` `destroy` calls, the others themselves.
    pub fn call(self) -> Self {
        match self {
            Self::CreateCi => Self::Create,
            Self::DestroyCi => Self::Destroy,
            other => other,
        }
    }

    /// What the failing sub-call adds to the error text (the NVML backend's wording).
    fn suffix(self) -> &'static str {
        match self {
            Self::CreateCi => ": compute instance",
            Self::DestroyCi => ": CI 0",
            _ => "",
        }
    }
}

/// The error an injected fault returns, named as in the faults file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// [`BackendError::InsufficientResources`].
    InsufficientResources,
    /// [`BackendError::Unknown`].
    Unknown,
    /// [`BackendError::InUse`].
    InUse,
    /// [`BackendError::NoPermission`].
    NoPermission,
    /// [`BackendError::NotSupported`].
    NotSupported,
    /// [`BackendError::InvalidArgument`].
    InvalidArgument,
    /// [`BackendError::NotFound`].
    NotFound,
    /// `NVML_ERROR_TIMEOUT`, which the NVML backend maps to [`BackendError::Unavailable`].
    Timeout,
    /// `NVML_ERROR_GPU_IS_LOST` ([`BackendError::Unavailable`], as the NVML backend says it).
    GpuIsLost,
}

impl Fault {
    /// The error this fault returns for the call described by `call`.
    pub fn to_error(self, call: &str) -> BackendError {
        self.error.to_error(&format!("{call}{}", self.op.suffix()))
    }
}

impl FaultKind {
    /// The error this fault returns for a call described by `call`.
    pub fn to_error(self, call: &str) -> BackendError {
        let what = format!("injected fault on {call}");
        match self {
            Self::InsufficientResources => BackendError::InsufficientResources { what },
            Self::Unknown => BackendError::Unknown,
            Self::InUse => BackendError::InUse { what },
            Self::NoPermission => BackendError::NoPermission,
            Self::NotSupported => BackendError::NotSupported,
            Self::InvalidArgument => BackendError::InvalidArgument { what },
            Self::NotFound => BackendError::NotFound { what },
            Self::Timeout => BackendError::Unavailable {
                what: format!("{what}: NVML_ERROR_TIMEOUT"),
            },
            Self::GpuIsLost => BackendError::Unavailable {
                what: format!(
                    "{what}: NVML_ERROR_GPU_IS_LOST: the GPU fell off the bus; the node needs an administrator"
                ),
            },
        }
    }
}

/// Fail the `after`-th call of `op` from now with `error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    /// The operation.
    pub op: FaultOp,
    /// Which call from now fails: 1 is the next one. Must be at least 1.
    pub after: u32,
    /// The error returned.
    pub error: FaultKind,
}

/// Faults to inject into the simulated backend.
///
/// A fault plan is a list of faults, each "fail the n-th call of this operation from now
/// with this error", plus an optional `crash_after` count. It comes from two places, checked
/// in this order on every call:
/// 1. the environment variable [`FAULTS_ENV`] (`DYNMIG_SIM_FAULTS`), read once when the
///    backend is opened and counted down in that process only;
/// 2. the faults file beside the state file (`<state file>.faults.json`), shared by every
///    process that opens the same state file, counted down and rewritten under the state
///    lock, so a fault fires once in whichever process makes the call.
///
/// Text form (both places), either a list of faults:
/// `[{"op": "create", "after": 2, "error": "insufficient_resources"}]`
/// or an object with a crash count:
/// `{"faults": [...], "crash_after": 3}`.
///
/// `after: 1` fails the next call of `op`. Every call of an operation counts, whatever its
/// arguments and whether it would have succeeded. If two faults of one operation come due on
/// the same call, the first one listed fires and the other fires on the next call.
///
/// Points of the agent's work where a test stops it are not GPU faults: they are the
/// agent's own test hook (`dynmig_node::testpoints`).
///
/// `crash_after: n` simulates an agent killed mid-apply: the n-th mutating call from now
/// (create, destroy or set_mig_mode, counted together) is carried out and saved, then the
/// process exits at once with status 137 (as after SIGKILL) without returning to the caller.
/// In the faults file the count is cleared when it fires, so the restarted agent runs on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultPlan {
    /// Pending faults.
    #[serde(default)]
    pub faults: Vec<Fault>,
    /// Exit with status 137 after the n-th mutating call from now (1 = the next one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crash_after: Option<u32>,
}

impl FaultPlan {
    /// Reads the JSON text form (a list of faults, or `{"faults": [...], "crash_after": n}`);
    /// blank text is an empty plan.
    ///
    /// # Errors
    /// A message naming what is wrong (bad JSON, unknown op or error name, `after: 0`).
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("bad JSON: {e}"))?;
        let plan = if value.is_array() {
            Self {
                faults: serde_json::from_value(value).map_err(|e| e.to_string())?,
                ..Self::default()
            }
        } else {
            serde_json::from_value(value).map_err(|e| e.to_string())?
        };
        if plan.faults.iter().any(|f| f.after == 0) || plan.crash_after == Some(0) {
            return Err("'after' and 'crash_after' count calls from 1 (1 = the next call)".into());
        }
        Ok(plan)
    }

    /// The JSON text form: a plain list when there is no crash count.
    pub fn to_json(&self) -> String {
        let text = if self.crash_after.is_none() {
            serde_json::to_string_pretty(&self.faults)
        } else {
            serde_json::to_string_pretty(self)
        };
        text.expect("fault plans always serialize") + "\n"
    }

    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.faults.is_empty() && self.crash_after.is_none()
    }

    /// Counts one call of `op` (`create`, `destroy`, `set_mig_mode` or `list`; faults of
    /// `create_ci` and `destroy_ci` count the calls of [`FaultOp::call`]); returns the fault
    /// that fires, removing it.
    pub fn on_call(&mut self, op: FaultOp) -> Option<Fault> {
        let mut fired = None;
        for (i, f) in self.faults.iter_mut().enumerate().filter(|(_, f)| f.op.call() == op) {
            f.after -= 1;
            if f.after == 0 {
                if fired.is_none() {
                    fired = Some(i);
                } else {
                    f.after = 1;
                }
            }
        }
        fired.map(|i| self.faults.remove(i))
    }

    /// Counts one mutating call; true if the process must now exit (the count is cleared).
    pub fn on_mutation(&mut self) -> bool {
        match self.crash_after {
            Some(1) => {
                self.crash_after = None;
                true
            }
            Some(n) => {
                self.crash_after = Some(n - 1);
                false
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_and_object_forms_parse_and_round_trip() {
        let list = r#"[{"op": "create", "after": 2, "error": "insufficient_resources"}]"#;
        let p = FaultPlan::parse(list).unwrap();
        assert_eq!(
            p.faults,
            vec![Fault {
                op: FaultOp::Create,
                after: 2,
                error: FaultKind::InsufficientResources
            }]
        );
        assert_eq!(FaultPlan::parse(&p.to_json()).unwrap(), p);
        assert!(p.to_json().trim_start().starts_with('['));
        let obj = r#"{"faults": [], "crash_after": 3}"#;
        let p = FaultPlan::parse(obj).unwrap();
        assert_eq!(p.crash_after, Some(3));
        assert_eq!(FaultPlan::parse(&p.to_json()).unwrap(), p);
    }

    #[test]
    fn bad_plans_are_refused() {
        assert!(FaultPlan::parse(r#"[{"op": "create", "after": 0, "error": "unknown"}]"#).is_err());
        assert!(FaultPlan::parse(r#"[{"op": "explode", "after": 1, "error": "unknown"}]"#).is_err());
        assert!(FaultPlan::parse(r#"{"crash_after": 1, "extra": 2}"#).is_err());
        assert!(FaultPlan::parse("  ").unwrap().is_empty());
    }

    #[test]
    fn faults_fire_once_on_the_nth_call_of_their_op() {
        let mut p = FaultPlan::parse(
            r#"[{"op": "destroy", "after": 2, "error": "unknown"},
                {"op": "destroy", "after": 2, "error": "in_use"},
                {"op": "create", "after": 1, "error": "not_found"}]"#,
        )
        .unwrap();
        let mut kind = |op| p.on_call(op).map(|f| f.error);
        assert_eq!(kind(FaultOp::Destroy), None);
        assert_eq!(kind(FaultOp::Destroy), Some(FaultKind::Unknown));
        assert_eq!(kind(FaultOp::Destroy), Some(FaultKind::InUse));
        assert_eq!(kind(FaultOp::Destroy), None);
        assert_eq!(kind(FaultOp::SetMigMode), None);
        assert_eq!(kind(FaultOp::Create), Some(FaultKind::NotFound));
        assert!(p.is_empty());
    }

    #[test]
    fn compute_instance_faults_count_their_calls_and_say_which_half_failed() {
        let mut p = FaultPlan::parse(
            r#"[{"op": "create_ci", "after": 2, "error": "timeout"},
                {"op": "destroy_ci", "after": 1, "error": "gpu_is_lost"},
                {"op": "list", "after": 1, "error": "unknown"}]"#,
        )
        .unwrap();
        assert_eq!(p.on_call(FaultOp::Create), None);
        let f = p.on_call(FaultOp::Create).expect("the 2nd create fails");
        let e = f.to_error("create 1g.10gb@0 on GPU 0");
        assert_eq!(e.nvml_name(), "UNAVAILABLE");
        assert!(e.to_string().contains("compute instance: NVML_ERROR_TIMEOUT"), "{e}");
        let e = p.on_call(FaultOp::Destroy).unwrap().to_error("destroy GI 1 on GPU 0");
        assert!(e.to_string().contains("CI 0: NVML_ERROR_GPU_IS_LOST"), "{e}");
        assert_eq!(p.on_call(FaultOp::List).map(|f| f.error), Some(FaultKind::Unknown));
        assert!(p.is_empty());
    }

    #[test]
    fn crash_count_fires_on_the_nth_mutation_then_clears() {
        let mut p = FaultPlan {
            crash_after: Some(2),
            ..FaultPlan::default()
        };
        assert!(!p.on_mutation());
        assert!(p.on_mutation());
        assert!(!p.on_mutation());
        assert!(p.is_empty());
    }
}
