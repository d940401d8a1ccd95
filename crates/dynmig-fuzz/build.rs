//! Exports the stub SPANK API (src/spank_stubs.rs) from every executable of this crate, so
//! that `libspank_dynmig.so` loaded with `dlopen` binds to it, and sets `slurm_2302_plus`
//! (job_modify takes `char **err_msg`) from the Slurm release slurm-sys found, and links
//! libslurm into this crate's executables.
fn main() {
    for sym in [
        "spank_context",
        "spank_option_register",
        "spank_option_getopt",
        "spank_get_item",
        "spank_strerror",
    ] {
        println!("cargo:rustc-link-arg=-Wl,--export-dynamic-symbol={sym}");
    }
    // libslurm for this crate's own executables only (see Cargo.toml); SLURM_LIB_DIR as
    // slurm-sys reads it.
    println!("cargo:rerun-if-env-changed=SLURM_LIB_DIR");
    if let Some(dir) = std::env::var_os("SLURM_LIB_DIR").filter(|d| !d.is_empty()) {
        println!(
            "cargo:rustc-link-search=native={}",
            std::path::Path::new(&dir).display()
        );
    }
    println!("cargo:rustc-link-lib=dylib=slurm");
    println!("cargo::rustc-check-cfg=cfg(slurm_2302_plus)");
    let text = std::env::var("DEP_SLURM_VERSION_NUMBER").expect("slurm-sys sets version_number");
    let version = u32::from_str_radix(text.trim_start_matches("0x"), 16).expect("hex version");
    if version >= 0x17_02_00 {
        println!("cargo:rustc-cfg=slurm_2302_plus");
    }
}
