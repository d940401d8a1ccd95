//! The part of Slurm's SPANK API that `libspank_dynmig.so` calls, as this executable's
//! exported symbols (build.rs exports `spank_*`), so that the plugin can be loaded with
//! `dlopen` outside slurmd/sbatch. The context is always "allocator" (sbatch); registered
//! options are recorded for the fuzz target to call their callbacks.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::{Mutex, PoisonError};

/// `struct spank_option` of spank.h.
#[repr(C)]
pub struct SpankOptionC {
    name: *const c_char,
    arginfo: *const c_char,
    usage: *const c_char,
    has_arg: c_int,
    val: c_int,
    cb: Option<unsafe extern "C" fn(c_int, *const c_char, c_int) -> c_int>,
}

type Registered = (
    String,
    c_int,
    unsafe extern "C" fn(c_int, *const c_char, c_int) -> c_int,
);

static OPTIONS: Mutex<Vec<Registered>> = Mutex::new(Vec::new());

const S_CTX_ALLOCATOR: c_int = 3;
const ESPANK_SUCCESS: c_int = 0;
const ESPANK_ERROR: c_int = 1;

/// `spank_context()`: sbatch.
#[no_mangle]
pub extern "C" fn spank_context() -> c_int {
    S_CTX_ALLOCATOR
}

/// `spank_option_register()`: records the option.
///
/// # Safety
/// `opt` points to a valid `struct spank_option`.
#[no_mangle]
pub unsafe extern "C" fn spank_option_register(_spank: *mut c_void, opt: *const SpankOptionC) -> c_int {
    let Some(opt) = opt.as_ref() else { return ESPANK_ERROR };
    let (Some(cb), false) = (opt.cb, opt.name.is_null()) else {
        return ESPANK_ERROR;
    };
    let name = CStr::from_ptr(opt.name).to_string_lossy().into_owned();
    OPTIONS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push((name, opt.val, cb));
    ESPANK_SUCCESS
}

/// `spank_option_getopt()`: never used in the allocator context.
#[no_mangle]
pub extern "C" fn spank_option_getopt(_spank: *mut c_void, _opt: *const c_void, _arg: *mut *mut c_char) -> c_int {
    ESPANK_ERROR
}

/// `spank_get_item()` (variadic in C; the stub reads no argument): nothing is available.
#[no_mangle]
pub extern "C" fn spank_get_item(_spank: *mut c_void, _item: c_int) -> c_int {
    ESPANK_ERROR
}

/// `spank_strerror()`.
#[no_mangle]
pub extern "C" fn spank_strerror(_err: c_int) -> *const c_char {
    c"spank stub error".as_ptr()
}

/// The options registered so far.
pub fn registered() -> Vec<Registered> {
    OPTIONS.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

/// Keeps the stubs in the executable (they are only called through the dynamic linker).
pub fn linked() {
    let stubs: [*const c_void; 5] = [
        spank_context as *const c_void,
        spank_option_register as *const c_void,
        spank_option_getopt as *const c_void,
        spank_get_item as *const c_void,
        spank_strerror as *const c_void,
    ];
    std::hint::black_box(stubs);
}
