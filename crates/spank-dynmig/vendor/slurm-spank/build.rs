use std::env;
use std::path::PathBuf;

fn main() {
    let out_path = PathBuf::from(env::var("OUT_DIR").unwrap());
    if env::var("DOCS_RS").is_ok() || env::var("SKIP_SLURM_BINDINGS").is_ok() {
        // Use pre-generated bindings when building the documentation
        let source_bindings =
            PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo manifest dir is empty"))
                .join("build/bindings.rs");
        let dest_bindings = out_path.join("bindings.rs");

        std::fs::copy(source_bindings, dest_bindings)
            .expect("Failed to copy pre-generated bindings");
        return;
    }

    // dynmig patch: spank_prepend_task_argv is not in Slurm 22.05's spank.h.
    println!("cargo::rustc-check-cfg=cfg(spank_prepend_task_argv)");
    let include = env::var("SLURM_INCLUDE_DIR").unwrap_or_else(|_| "/usr/include".into());
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    let spank_h =
        std::fs::read_to_string(PathBuf::from(&include).join("slurm/spank.h")).unwrap_or_default();
    if spank_h.contains("spank_prepend_task_argv") {
        println!("cargo:rustc-cfg=spank_prepend_task_argv");
    }

    let bindings = bindgen::Builder::default()
        .clang_arg(format!("-I{include}"))
        .rust_target("1.72.0".parse().unwrap())
        .header("wrapper.h")
        // We define spank_option manually to indicate that string pointers are const
        .blocklist_type("spank_option")
        .generate()
        .expect("Unable to generate bindings");

    bindings
        .write_to_file(out_path.join("bindings.rs"))
        .expect("Couldn't write bindings!");
}
