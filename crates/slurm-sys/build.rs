//! Generates bindings from `include/slurm_wrapper.h` against the installed Slurm headers.
//!
//! Environment:
//! - `SLURM_INCLUDE_DIR`: the directory holding `slurm/slurm.h` (default `/usr/include`).
//! - `SLURM_LIB_DIR`: where `libslurm.so` is, used only with the `link` feature.
//!
//! Emits the cfgs `slurm_2302_plus` and `slurm_2311_plus` for this crate and
//! `cargo:version_number=0xAABBCC` (read by dependents as `DEP_SLURM_VERSION_NUMBER`).
use std::env;
use std::fs;
use std::path::PathBuf;

fn main() {
    let include = env::var("SLURM_INCLUDE_DIR").unwrap_or_else(|_| "/usr/include".into());
    let include = PathBuf::from(include);
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let wrapper = manifest.join("../../include/slurm_wrapper.h");
    let version_h = include.join("slurm/slurm_version.h");
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    println!("cargo:rerun-if-env-changed=SLURM_LIB_DIR");
    println!("cargo:rerun-if-changed={}", wrapper.display());
    println!("cargo:rerun-if-changed={}", version_h.display());

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
    if version >= 0x17_02_00 {
        println!("cargo:rustc-cfg=slurm_2302_plus");
    }
    if version >= 0x17_0b_00 {
        println!("cargo:rustc-cfg=slurm_2311_plus");
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
        .allowlist_function("slurm_xstrdup|slurm_xfree|slurm_xsize")
        .allowlist_function("slurm_info|slurm_verbose|slurm_debug|slurm_error")
        .allowlist_var("SLURM_VERSION_NUMBER|SLURM_SUCCESS|SLURM_ERROR")
        .allowlist_type("slurm_err_t")
        .constified_enum_module("slurm_err_t")
        .parse_callbacks(Box::new(IntTypes))
        .layout_tests(true)
        .generate()
        .expect("bindgen failed on include/slurm_wrapper.h");
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
