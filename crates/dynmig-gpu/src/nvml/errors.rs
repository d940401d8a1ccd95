//! NVML return codes to [`BackendError`], so that callers decide on one error type whichever
//! backend runs: `NVML_ERROR_IN_USE` -> [`BackendError::InUse`] ("wait"),
//! `..._INSUFFICIENT_RESOURCES` -> [`BackendError::InsufficientResources`] ("the plan does not
//! fit"), `..._NO_PERMISSION` -> [`BackendError::NoPermission`] ("run as root"), and the codes
//! that mean NVML cannot be used at all -> [`BackendError::Unavailable`] with what to do.
//!
//! Codes are the values of `nvmlReturn_t` in `nvml.h` (nvml-wrapper-sys bindings).

use crate::BackendError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper_sys::bindings as sys;

/// The name of an `nvmlReturn_t` code as `nvml.h` spells it (`"NVML_ERROR_IN_USE"`), or
/// `"NVML return code N"` for a code this build does not know.
pub fn return_name(code: u32) -> String {
    let name = match code {
        sys::nvmlReturn_enum_NVML_SUCCESS => "NVML_SUCCESS",
        sys::nvmlReturn_enum_NVML_ERROR_UNINITIALIZED => "NVML_ERROR_UNINITIALIZED",
        sys::nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT => "NVML_ERROR_INVALID_ARGUMENT",
        sys::nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED => "NVML_ERROR_NOT_SUPPORTED",
        sys::nvmlReturn_enum_NVML_ERROR_NO_PERMISSION => "NVML_ERROR_NO_PERMISSION",
        sys::nvmlReturn_enum_NVML_ERROR_NOT_FOUND => "NVML_ERROR_NOT_FOUND",
        sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE => "NVML_ERROR_INSUFFICIENT_SIZE",
        sys::nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED => "NVML_ERROR_DRIVER_NOT_LOADED",
        sys::nvmlReturn_enum_NVML_ERROR_LIBRARY_NOT_FOUND => "NVML_ERROR_LIBRARY_NOT_FOUND",
        sys::nvmlReturn_enum_NVML_ERROR_FUNCTION_NOT_FOUND => "NVML_ERROR_FUNCTION_NOT_FOUND",
        sys::nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST => "NVML_ERROR_GPU_IS_LOST",
        sys::nvmlReturn_enum_NVML_ERROR_TIMEOUT => "NVML_ERROR_TIMEOUT",
        sys::nvmlReturn_enum_NVML_ERROR_IRQ_ISSUE => "NVML_ERROR_IRQ_ISSUE",
        sys::nvmlReturn_enum_NVML_ERROR_OPERATING_SYSTEM => "NVML_ERROR_OPERATING_SYSTEM",
        sys::nvmlReturn_enum_NVML_ERROR_MEMORY => "NVML_ERROR_MEMORY",
        sys::nvmlReturn_enum_NVML_ERROR_NO_DATA => "NVML_ERROR_NO_DATA",
        sys::nvmlReturn_enum_NVML_ERROR_RESET_REQUIRED => "NVML_ERROR_RESET_REQUIRED",
        sys::nvmlReturn_enum_NVML_ERROR_IN_USE => "NVML_ERROR_IN_USE",
        sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES => "NVML_ERROR_INSUFFICIENT_RESOURCES",
        sys::nvmlReturn_enum_NVML_ERROR_LIB_RM_VERSION_MISMATCH => "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
        sys::nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH => "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
        sys::nvmlReturn_enum_NVML_ERROR_UNKNOWN => "NVML_ERROR_UNKNOWN",
        other => return format!("NVML return code {other}"),
    };
    name.to_string()
}

/// The [`BackendError`] for NVML return code `code` of the call described by `call`
/// (e.g. `"GPU 0: create 3g.40gb@4"`), which ends up in the error's text.
pub fn from_return(code: u32, call: &str) -> BackendError {
    let named = || format!("{call}: {}", return_name(code));
    match code {
        sys::nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED => BackendError::NotSupported,
        sys::nvmlReturn_enum_NVML_ERROR_NO_PERMISSION => BackendError::NoPermission,
        sys::nvmlReturn_enum_NVML_ERROR_IN_USE => BackendError::InUse { what: named() },
        sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES => BackendError::InsufficientResources { what: named() },
        sys::nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT => BackendError::InvalidArgument { what: named() },
        sys::nvmlReturn_enum_NVML_ERROR_NOT_FOUND => BackendError::NotFound { what: named() },
        sys::nvmlReturn_enum_NVML_ERROR_UNKNOWN => BackendError::Unknown,
        sys::nvmlReturn_enum_NVML_ERROR_LIBRARY_NOT_FOUND => BackendError::Unavailable {
            what: format!("{}: libnvidia-ml.so not found (install the NVIDIA driver)", named()),
        },
        sys::nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED => BackendError::Unavailable {
            what: format!("{}: the NVIDIA kernel driver is not loaded", named()),
        },
        sys::nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST => BackendError::Unavailable {
            what: format!("{}: the GPU fell off the bus; the node needs an administrator", named()),
        },
        sys::nvmlReturn_enum_NVML_ERROR_TIMEOUT => BackendError::Unavailable {
            what: format!(
                "{}: the driver did not answer in time; dynmig retries at its next pass",
                named()
            ),
        },
        sys::nvmlReturn_enum_NVML_ERROR_RESET_REQUIRED => BackendError::Unavailable {
            what: format!("{}: the GPU needs a reset (dynmig never resets GPUs)", named()),
        },
        _ => BackendError::Unavailable { what: named() },
    }
}

/// The [`BackendError`] for an error of nvml-wrapper's safe API, as [`from_return`] does for
/// the NVML codes; the wrapper's own errors (a symbol missing from an old driver's library, a
/// bad string) become [`BackendError::Unavailable`].
pub fn from_nvml(e: NvmlError, call: &str) -> BackendError {
    match e {
        NvmlError::LibloadingError(err) => BackendError::Unavailable {
            what: format!("{call}: cannot load libnvidia-ml.so ({err}); is the NVIDIA driver installed?"),
        },
        NvmlError::FailedToLoadSymbol(sym) => BackendError::Unavailable {
            what: format!("{call}: this driver's NVML lacks a function dynmig needs ({sym}); update the driver"),
        },
        NvmlError::InsufficientSize(_) => BackendError::Unknown,
        other @ (NvmlError::Utf8Error(_)
        | NvmlError::NulError(_)
        | NvmlError::StringTooLong { .. }
        | NvmlError::IncorrectBits(_)
        | NvmlError::SetReleaseFailed
        | NvmlError::GetPciInfoFailed
        | NvmlError::PciInfoToCFailed) => BackendError::Unavailable {
            what: format!("{call}: {other}"),
        },
        other => from_return(sys::nvmlReturn_t::from(other), call),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_the_errors_callers_decide_on() {
        let c = "GPU 0: create 3g.40gb@4";
        assert!(matches!(
            from_return(sys::nvmlReturn_enum_NVML_ERROR_IN_USE, c),
            BackendError::InUse { what } if what == "GPU 0: create 3g.40gb@4: NVML_ERROR_IN_USE"
        ));
        assert!(matches!(
            from_return(sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES, c),
            BackendError::InsufficientResources { what } if what.ends_with("NVML_ERROR_INSUFFICIENT_RESOURCES")
        ));
        assert!(matches!(
            from_return(sys::nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED, c),
            BackendError::NotSupported
        ));
        assert!(matches!(
            from_return(sys::nvmlReturn_enum_NVML_ERROR_NO_PERMISSION, c),
            BackendError::NoPermission
        ));
        assert!(matches!(
            from_return(sys::nvmlReturn_enum_NVML_ERROR_NOT_FOUND, c),
            BackendError::NotFound { .. }
        ));
        assert!(matches!(
            from_return(sys::nvmlReturn_enum_NVML_ERROR_RESET_REQUIRED, c),
            BackendError::Unavailable { what } if what.contains("never resets")
        ));
        assert!(matches!(from_return(77, c), BackendError::Unavailable { what } if what.contains("code 77")));
        // Found by the NVML stand-in: NVML_ERROR_TIMEOUT was printed as "NVML return code 10".
        assert!(matches!(
            from_return(sys::nvmlReturn_enum_NVML_ERROR_TIMEOUT, c),
            BackendError::Unavailable { what } if what.contains("NVML_ERROR_TIMEOUT")
        ));
    }

    #[test]
    fn wrapper_errors_map_like_their_codes() {
        assert!(matches!(from_nvml(NvmlError::InUse, "x"), BackendError::InUse { .. }));
        assert!(matches!(
            from_nvml(NvmlError::NoPermission, "x"),
            BackendError::NoPermission
        ));
        assert!(matches!(
            from_nvml(NvmlError::DriverNotLoaded, "x"),
            BackendError::Unavailable { what } if what.contains("not loaded")
        ));
        assert!(matches!(
            from_nvml(NvmlError::FailedToLoadSymbol("nvmlFoo".into()), "x"),
            BackendError::Unavailable { what } if what.contains("nvmlFoo")
        ));
        // A code nvml-wrapper does not know (INSUFFICIENT_RESOURCES is one) keeps its meaning.
        assert!(matches!(
            from_nvml(
                NvmlError::UnexpectedVariant(sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES),
                "x"
            ),
            BackendError::InsufficientResources { .. }
        ));
    }
}
