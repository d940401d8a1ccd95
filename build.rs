//! Records which Slurm release's headers this build saw, for `dynmig --version` (the plugins,
//! which must match slurmctld's release, are built from the same headers by
//! crates/slurm-sys). The dynmig binary itself needs no Slurm headers: without them it
//! reports "no Slurm headers".
use std::path::PathBuf;

fn main() {
    let dir = std::env::var_os("SLURM_INCLUDE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/include"));
    let header = dir.join("slurm/slurm_version.h");
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    println!("cargo:rerun-if-changed={}", header.display());
    let version = std::fs::read_to_string(&header)
        .ok()
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
