//! `/proc/driver/nvidia-caps/mig-minors`: the device minors of the MIG capability files.
//!
//! The driver lists one capability per line, `<path> <minor>`:
//!
//! ```text
//! config 1
//! monitor 2
//! gpu0/gi1/access 21
//! gpu0/gi1/ci0/access 22
//! ```
//!
//! `gpu<N>` is the GPU's device minor (`/dev/nvidia<N>`), `gi<G>` the GPU-instance id and
//! `ci<C>` the compute-instance id. A process may use a MIG instance when it can open
//! `/dev/nvidia-caps/nvidia-cap<minor>` of both the GI and the CI access files (NVIDIA MIG
//! User Guide, "Device Nodes and Capabilities"), so a job's gres.conf line names
//! `/dev/nvidia<N>`, then those two files, in that order, as Slurm's NVML autodetection does.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where the driver lists the MIG capability minors.
pub const MIG_MINORS: &str = "/proc/driver/nvidia-caps/mig-minors";
/// Where the capability device files are (`nvidia-cap<minor>`).
pub const CAPS_DIR: &str = "/dev/nvidia-caps";

/// The parsed file: (GPU minor, GI id, CI id or `None` for the GI itself) -> cap minor.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MigMinors {
    access: BTreeMap<(u32, u32, Option<u32>), u32>,
}

impl MigMinors {
    /// Reads the driver's text. Lines that are not `gpuN/giG[/ciC]/access MINOR` (`config`,
    /// `monitor`, blank lines) are skipped.
    ///
    /// # Errors
    /// A `gpu...` line whose numbers cannot be read, with the line number and text.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut access = BTreeMap::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if !line.starts_with("gpu") {
                continue;
            }
            let bad = || {
                format!(
                    "mig-minors line {}: '{line}': expected 'gpuN/giG[/ciC]/access MINOR'",
                    n + 1
                )
            };
            let (path, minor) = line.split_once(char::is_whitespace).ok_or_else(bad)?;
            let minor: u32 = minor.trim().parse().map_err(|_| bad())?;
            let parts: Vec<&str> = path.split('/').collect();
            let num = |s: &str, prefix: &str| s.strip_prefix(prefix).and_then(|v| v.parse::<u32>().ok());
            let key = match parts.as_slice() {
                [g, gi, "access"] => (num(g, "gpu"), num(gi, "gi"), Some(None)),
                [g, gi, ci, "access"] => (num(g, "gpu"), num(gi, "gi"), num(ci, "ci").map(Some)),
                _ => return Err(bad()),
            };
            match key {
                (Some(g), Some(gi), Some(ci)) => {
                    access.insert((g, gi, ci), minor);
                }
                _ => return Err(bad()),
            }
        }
        Ok(Self { access })
    }

    /// Reads and parses `path` (normally [`MIG_MINORS`]).
    ///
    /// # Errors
    /// The file cannot be read, or [`Self::parse`] fails.
    pub fn read(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Self::parse(&text)
    }

    /// The minor of GPU instance `gi` on the GPU with device minor `gpu`.
    pub fn gi(&self, gpu: u32, gi: u32) -> Option<u32> {
        self.access.get(&(gpu, gi, None)).copied()
    }

    /// The minor of compute instance `ci` of GPU instance `gi`.
    pub fn ci(&self, gpu: u32, gi: u32, ci: u32) -> Option<u32> {
        self.access.get(&(gpu, gi, Some(ci))).copied()
    }

    /// The device files a job needs for compute instance `ci` of GPU instance `gi` on the GPU
    /// with device minor `gpu`: `<dev_dir>/nvidia<gpu>` (`/dev/nvidia<gpu>` on a node), then the GI and CI capability files under
    /// `caps_dir`. Capability files the table lacks are left out (then only `/dev/nvidia<gpu>`
    /// remains, which gres.conf writes as `File=`).
    pub fn device_files(&self, dev_dir: &Path, caps_dir: &Path, gpu: u32, gi: u32, ci: Option<u32>) -> Vec<PathBuf> {
        let mut files = vec![dev_dir.join(format!("nvidia{gpu}"))];
        let cap = |m: u32| caps_dir.join(format!("nvidia-cap{m}"));
        if let Some(m) = self.gi(gpu, gi) {
            files.push(cap(m));
            if let Some(m) = ci.and_then(|c| self.ci(gpu, gi, c)) {
                files.push(cap(m));
            }
        }
        files
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mig-minors excerpt in the driver's format: the first entries of each kind.
    const FIXTURE: &str = "config 1\nmonitor 2\ngpu0/gi0/access 3\ngpu0/gi0/ci0/access 4\ngpu0/gi1/access 12\n\
gpu0/gi1/ci0/access 13\ngpu0/gi1/ci1/access 14\ngpu1/gi2/access 156\ngpu1/gi2/ci0/access 157\n";

    #[test]
    fn parses_gi_and_ci_minors() {
        let m = MigMinors::parse(FIXTURE).unwrap();
        assert_eq!(m.gi(0, 1), Some(12));
        assert_eq!(m.ci(0, 1, 1), Some(14));
        assert_eq!(m.gi(1, 2), Some(156));
        assert_eq!(m.ci(1, 2, 0), Some(157));
        assert_eq!(m.gi(2, 0), None);
        let files = m.device_files(Path::new("/dev"), Path::new(CAPS_DIR), 1, 2, Some(0));
        let files: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
        assert_eq!(
            files,
            [
                "/dev/nvidia1",
                "/dev/nvidia-caps/nvidia-cap156",
                "/dev/nvidia-caps/nvidia-cap157"
            ]
        );
        assert_eq!(
            m.device_files(Path::new("/dev"), Path::new(CAPS_DIR), 3, 1, Some(0))
                .len(),
            1
        );
    }

    #[test]
    fn bad_lines_are_named() {
        let e = MigMinors::parse("config 1\ngpu0/gi1/access x\n").unwrap_err();
        assert!(e.contains("line 2") && e.contains("gpu0/gi1/access x"), "{e}");
        assert!(MigMinors::parse("gpu0/gX/access 3").is_err());
        assert!(MigMinors::parse("gpu0/gi1/ci0/foo 3").is_err());
    }
}
