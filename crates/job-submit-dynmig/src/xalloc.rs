//! Strings shared with Slurm, allocated and freed by Slurm's own allocator.
//!
//! slurmctld frees every `job_desc` string and `*err_msg` with `xfree`, so each string this
//! plugin hands over comes from `slurm_xstrdup`, and each one it replaces goes back through
//! `slurm_xfree`. A Rust- or malloc-allocated string handed over would corrupt slurmctld's
//! heap (xmalloc keeps a 16-byte header before the pointer).

use std::ffi::{c_char, c_void, CStr, CString};

use slurm_sys::{slurm_xfree, slurm_xstrdup};

/// Borrows a C string from Slurm as UTF-8. `None` for NULL or for bytes that are not UTF-8
/// (Slurm's GRES strings and option values are ASCII).
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that outlives `'a`.
pub unsafe fn borrow<'a>(p: *const c_char) -> Option<&'a str> {
    if p.is_null() {
        None
    } else {
        CStr::from_ptr(p).to_str().ok()
    }
}

/// Borrows a C string from Slurm as text, replacing bytes that are not UTF-8 by U+FFFD
/// (then the result is `Cow::Owned`). `None` for NULL.
///
/// # Safety
/// As [`borrow`].
pub unsafe fn borrow_lossy<'a>(p: *const c_char) -> Option<std::borrow::Cow<'a, str>> {
    if p.is_null() {
        None
    } else {
        Some(CStr::from_ptr(p).to_string_lossy())
    }
}

/// A C string with any interior NUL replaced by `?`, so that no message is ever dropped.
pub fn c_string(text: &str) -> CString {
    CString::new(text.replace('\0', "?")).expect("NULs were replaced")
}

/// Copies `text` into a new string owned by Slurm's allocator.
///
/// # Safety
/// Needs Slurm's `slurm_xstrdup` (slurmctld, or libslurm with the `link` feature).
pub unsafe fn xstrdup(text: &str) -> *mut c_char {
    let c = c_string(text);
    slurm_xstrdup(c.as_ptr())
}

/// Frees `*field` with `slurm_xfree` (which also sets it to NULL).
///
/// # Safety
/// `*field` is NULL or was allocated by Slurm's xmalloc.
pub unsafe fn xfree(field: &mut *mut c_char) {
    slurm_xfree(field as *mut *mut c_char as *mut *mut c_void);
}

/// Replaces the Slurm-owned string in `field` by a copy of `text`, freeing the old one.
///
/// # Safety
/// As [`xfree`] and [`xstrdup`].
pub unsafe fn replace(field: &mut *mut c_char, text: &str) {
    xfree(field);
    *field = xstrdup(text);
}

/// Appends `text` to the Slurm-owned string in `field`, after `sep` if it is not empty;
/// sets it to `text` if it is NULL or empty.
///
/// # Safety
/// As [`replace`].
pub unsafe fn append(field: &mut *mut c_char, sep: &str, text: &str) {
    let joined = match borrow(*field) {
        Some(old) if !old.is_empty() => format!("{old}{sep}{text}"),
        _ => text.to_string(),
    };
    replace(field, &joined);
}
