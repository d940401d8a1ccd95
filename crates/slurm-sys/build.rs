//! Generates bindings from this crate's `wrapper.h` against the installed Slurm headers.
//! Reads no file outside this crate's folder except the Slurm headers.
//!
//! Environment:
//! - `SLURM_INCLUDE_DIR`: the directory holding `slurm/slurm.h`. When set, every Slurm
//!   header used (`slurm.h`, `slurm_errno.h`, `slurm_version.h` and each `slurm/*.h` they
//!   include) must be in it, else the build fails naming the missing file; it never falls
//!   back to `/usr/include`. When unset, `/usr/include` is used and a `cargo:warning` says so.
//! - `SLURM_LIB_DIR`: where `libslurm.so` is, used only with the `link` feature.
//!
//! Every header read is a `cargo:rerun-if-changed` (bindgen's `CargoCallbacks` adds the
//! ones clang opens), so an in-place header upgrade rebuilds with the new version.
//!
//! Emits the cfgs `slurm_2302_plus`, `slurm_2311_plus` and `slurm_2605_plus` for this crate and
//! `cargo:version_number=0xAABBCC` (read by dependents as `DEP_SLURM_VERSION_NUMBER`).
use std::env;
use std::fs;
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    println!("cargo:rerun-if-env-changed=SLURM_LIB_DIR");
    let include = include_dir();
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let wrapper = manifest.join("wrapper.h");
    println!("cargo:rerun-if-changed={}", wrapper.display());
    require_headers(&include, &["slurm.h", "slurm_errno.h", "slurm_version.h"]);
    let version_h = include.join("slurm/slurm_version.h");

    let text = fs::read_to_string(&version_h).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}; install libslurm-dev or set SLURM_INCLUDE_DIR",
            version_h.display()
        )
    });
    let version = parse_version(&text).expect("no SLURM_VERSION_NUMBER in slurm_version.h");
    println!("cargo:version_number={version:#x}");
    println!("cargo::rustc-check-cfg=cfg(slurm_2302_plus)");
    println!("cargo::rustc-check-cfg=cfg(slurm_2311_plus)");
    println!("cargo::rustc-check-cfg=cfg(slurm_2605_plus)");
    if version >= 0x17_02_00 {
        println!("cargo:rustc-cfg=slurm_2302_plus");
    }
    if version >= 0x17_0b_00 {
        println!("cargo:rustc-cfg=slurm_2311_plus");
    }
    if version >= 0x1a_05_00 {
        println!("cargo:rustc-cfg=slurm_2605_plus");
    }

    if env::var_os("CARGO_FEATURE_LINK").is_some() {
        if let Ok(dir) = env::var("SLURM_LIB_DIR") {
            println!("cargo:rustc-link-search=native={dir}");
        }
        println!("cargo:rustc-link-lib=dylib=slurm");
    }

    let bindings = bindgen::Builder::default()
        .header(wrapper.to_string_lossy())
        .clang_arg(format!("-I{}", include.display()))
        .allowlist_type("job_desc_msg_t")
        // One job's record (crates/slurm-job-reader, 22.05's one-job read).
        .allowlist_type("job_info_msg_t")
        .allowlist_var("SHOW_ALL|SHOW_DETAIL|SHOW_LOCAL|NO_VAL|INFINITE")
        .allowlist_function("slurm_xstrdup|slurm_xfree|slurm_xsize")
        .allowlist_function("slurm_info|slurm_verbose|slurm_debug|slurm_error")
        .allowlist_var("SLURM_VERSION_NUMBER|SLURM_SUCCESS|SLURM_ERROR")
        .allowlist_type("slurm_err_t")
        .constified_enum_module("slurm_err_t")
        .parse_callbacks(Box::new(IntTypes))
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .layout_tests(true)
        .generate()
        .unwrap_or_else(|e| {
            panic!(
                "bindgen failed on {} with {}: {e}",
                wrapper.display(),
                include.display()
            )
        });
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("bindings.rs");
    bindings.write_to_file(out).expect("cannot write bindings.rs");
}

/// Gives the C types to integer macros: `int` for return codes, `uint32_t` for versions.
#[derive(Debug)]
struct IntTypes;

impl bindgen::callbacks::ParseCallbacks for IntTypes {
    fn int_macro(&self, name: &str, _value: i64) -> Option<bindgen::callbacks::IntKind> {
        match name {
            "SLURM_SUCCESS" | "SLURM_ERROR" => Some(bindgen::callbacks::IntKind::Int),
            "SLURM_VERSION_NUMBER" => Some(bindgen::callbacks::IntKind::U32),
            _ => None,
        }
    }
}

/// Reads `#define SLURM_VERSION_NUMBER 0x160508`.
fn parse_version(text: &str) -> Option<u32> {
    text.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        if words.next()? != "#define" || words.next()? != "SLURM_VERSION_NUMBER" {
            return None;
        }
        let value = words.next()?;
        u32::from_str_radix(value.trim_start_matches("0x"), 16).ok()
    })
}

/// `SLURM_INCLUDE_DIR`, or `/usr/include` with a warning.
fn include_dir() -> PathBuf {
    match env::var_os("SLURM_INCLUDE_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => {
            println!("cargo:warning=SLURM_INCLUDE_DIR is not set: using the Slurm headers in /usr/include");
            PathBuf::from("/usr/include")
        }
    }
}

/// Checks that `slurm/<name>` for each name and, recursively, every `slurm/*.h` they
/// include are in `include`; fails the build naming a missing one.
fn require_headers(include: &Path, names: &[&str]) {
    let mut todo: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let mut seen: Vec<String> = Vec::new();
    while let Some(name) = todo.pop() {
        if seen.contains(&name) {
            continue;
        }
        let path = include.join("slurm").join(&name);
        println!("cargo:rerun-if-changed={}", path.display());
        let text = fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "cannot read {}: {e}; every Slurm header must be in SLURM_INCLUDE_DIR/slurm \
                 (install libslurm-dev, or point SLURM_INCLUDE_DIR at a complete include directory)",
                path.display()
            )
        });
        for line in text.lines() {
            if let Some(rest) = line.trim_start().strip_prefix("#include") {
                if let Some(inc) = rest.trim().strip_prefix("<slurm/").and_then(|r| r.split('>').next()) {
                    todo.push(inc.to_string());
                }
            }
        }
        seen.push(name);
    }
}
