//! Records which Slurm release's headers this build saw, for `dynmig --version` (the plugins,
//! which must match slurmctld's release, are built from the same headers by
//! crates/slurm-sys). The dynmig binary itself needs no Slurm headers: without them it
//! reports "no Slurm headers".
//!
//! `SLURM_INCLUDE_DIR`, when set, must hold `slurm/slurm_version.h` (else the build fails
//! naming it; it never falls back to /usr/include). Unset, /usr/include is looked at and a
//! `cargo:warning` says so when the header is found there.
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    let explicit = std::env::var_os("SLURM_INCLUDE_DIR").filter(|d| !d.is_empty());
    let dir = explicit
        .clone()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/include"));
    let header = dir.join("slurm/slurm_version.h");
    println!("cargo:rerun-if-changed={}", header.display());
    // Also the header's folder: a header installed after a build (libslurm-dev) keeps the
    // package's old mtime, which Cargo would take for unchanged; the folder dpkg creates has
    // the time of the install. While the folder is missing, Cargo runs this script each time.
    println!("cargo:rerun-if-changed={}", dir.join("slurm").display());
    let text = match std::fs::read_to_string(&header) {
        Ok(t) => {
            if explicit.is_none() {
                println!("cargo:warning=SLURM_INCLUDE_DIR is not set: the Slurm version shown by --version comes from /usr/include");
            }
            Some(t)
        }
        Err(e) if explicit.is_some() => panic!(
            "cannot read {}: {e}; SLURM_INCLUDE_DIR is set, so slurm/slurm_version.h must be in it",
            header.display()
        ),
        Err(_) => None,
    };
    let version = text
        .and_then(|t| {
            t.lines().find_map(|l| {
                let hex = l
                    .trim()
                    .strip_prefix("#define SLURM_VERSION_NUMBER")?
                    .trim()
                    .strip_prefix("0x")?;
                let n = u32::from_str_radix(hex, 16).ok()?;
                Some(format!("{}.{:02}.{}", n >> 16, (n >> 8) & 0xff, n & 0xff))
            })
        })
        .unwrap_or_else(|| "no Slurm headers".to_string());
    println!("cargo:rustc-env=DYNMIG_SLURM_HEADERS={version}");
}
