//! Generates the SPANK bindings with bindgen from the installed `slurm/spank.h`.
//!
//! dynmig patch (see ../README.md):
//! - no pre-generated bindings: bindgen always runs against the headers of the Slurm the
//!   plugin is built for;
//! - `SLURM_INCLUDE_DIR` never falls back silently: if it is set, `slurm/spank.h` and every
//!   `slurm/*.h` it includes must be in it (else the build fails naming the missing file);
//!   if it is unset, `/usr/include` is used and a `cargo:warning` says so;
//! - `cargo:rerun-if-changed` for every header read (bindgen's `CargoCallbacks`), so an
//!   in-place header upgrade rebuilds the plugin with the new `plugin_version`;
//! - the cfg `spank_prepend_task_argv` only when spank.h declares it (not in 22.05).
use std::env;
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    println!("cargo::rustc-check-cfg=cfg(spank_prepend_task_argv)");
    let include = include_dir();
    let spank_h = require_headers(&include, &["spank.h"]);
    if spank_h.contains("spank_prepend_task_argv") {
        println!("cargo:rustc-cfg=spank_prepend_task_argv");
    }
    let out_path = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let bindings = bindgen::Builder::default()
        .clang_arg(format!("-I{}", include.display()))
        .rust_target("1.72.0".parse().expect("a valid Rust target"))
        .header("wrapper.h")
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        // We define spank_option manually to indicate that string pointers are const
        .blocklist_type("spank_option")
        .generate()
        .unwrap_or_else(|e| panic!("bindgen failed on {}/slurm/spank.h: {e}", include.display()));
    bindings
        .write_to_file(out_path.join("bindings.rs"))
        .expect("Couldn't write bindings!");
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

/// Reads `slurm/<name>` for each name and, recursively, every `slurm/*.h` they include,
/// all from `include`; fails the build naming a missing one. Returns the first header's
/// text.
fn require_headers(include: &Path, names: &[&str]) -> String {
    let mut todo: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let mut seen: Vec<String> = Vec::new();
    let mut first = None;
    while let Some(name) = todo.pop() {
        if seen.contains(&name) {
            continue;
        }
        let path = include.join("slurm").join(&name);
        println!("cargo:rerun-if-changed={}", path.display());
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "cannot read {}: {e}; every Slurm header must be in SLURM_INCLUDE_DIR/slurm \
                 (install libslurm-dev, or point SLURM_INCLUDE_DIR at a complete include directory)",
                path.display()
            )
        });
        for line in text.lines() {
            let l = line.trim_start();
            if let Some(rest) = l.strip_prefix("#include") {
                let rest = rest.trim();
                if let Some(inc) = rest.strip_prefix("<slurm/").and_then(|r| r.split('>').next()) {
                    todo.push(inc.to_string());
                }
            }
        }
        if first.is_none() {
            first = Some(text);
        }
        seen.push(name);
    }
    first.unwrap_or_default()
}
