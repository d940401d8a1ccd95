//! dcgm-exporter's HPC job-mapping files, so that the per-instance metrics it exports carry the
//! Slurm job that runs on each MIG instance.
//!
//! dcgm-exporter, started with `--hpc-job-mapping-dir DIR` (or `DCGM_HPC_JOB_MAPPING_DIR`),
//! reads every file of `DIR` named after a GPU, one job id per line, and adds the label
//! `hpc_job` to that GPU's metrics (NVIDIA/dcgm-exporter README, "How to include HPC jobs in
//! metric labels"). Since its pull request #602 (merged 2026) a file may name one MIG
//! instance as `<gpu>.<GPU_I_ID>`, matching the `gpu` and `GPU_I_ID` labels of the
//! instance's metrics; older releases read only whole-GPU names (`<gpu>`), which dynmig
//! writes for a GPU with MIG off.
//!
//! The Prolog writes one file per instance the job holds ([`job_started`]); the Epilog removes
//! the files that name the job ([`job_ended`]). `[paths] dcgm_job_map_dir` turns this on. The
//! directory is the administrator's: dynmig creates it (mode 0755) if missing, writes each file
//! atomically (mode 0644, so that an unprivileged exporter reads it) and, in the Epilog, reads
//! only regular files of at most [`MAX_FILE`] bytes whose names have the shape above.

use dynmig_gpu::WHOLE_GPU;
use std::io;
use std::path::Path;

/// The largest mapping file the Epilog reads, bytes.
pub const MAX_FILE: u64 = 4096;

/// The file name dcgm-exporter matches for instance `gi_id` of GPU `gpu`: `0.3`, or `0` for
/// a whole GPU ([`WHOLE_GPU`]).
pub fn file_name(gpu: u32, gi_id: u32) -> String {
    if gi_id == WHOLE_GPU {
        gpu.to_string()
    } else {
        format!("{gpu}.{gi_id}")
    }
}

/// Whether `name` has the shape dcgm-exporter reads: digits, or digits `.` digits.
pub fn is_mapping_name(name: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match name.split_once('.') {
        None => digits(name),
        Some((g, i)) => digits(g) && digits(i),
    }
}

/// Writes `<dir>/<gpu>.<GPU_I_ID>` holding `job` for every `(gpu, gi_id)` in `held`.
///
/// # Errors
/// The directory cannot be created or a file cannot be written.
pub fn job_started(dir: &Path, job: u32, held: &[(u32, u32)]) -> io::Result<()> {
    if held.is_empty() {
        return Ok(());
    }
    std::fs::create_dir_all(dir)?;
    for &(gpu, gi_id) in held {
        let path = dir.join(file_name(gpu, gi_id));
        dynmig_host::fs::write_atomically(&path, format!("{job}\n").as_bytes(), 0o644)?;
    }
    Ok(())
}

/// Removes the mapping files of `dir` that name `job` and no other job; returns how many.
/// A missing directory is not an error.
///
/// # Errors
/// The directory cannot be listed, or a file of `job` cannot be removed.
pub fn job_ended(dir: &Path, job: u32) -> io::Result<usize> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut removed = 0;
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !is_mapping_name(name) || !entry.file_type()?.is_file() {
            continue;
        }
        let path = entry.path();
        let Ok(Some(text)) = dynmig_host::fs::read_text_bounded(&path, MAX_FILE) else {
            continue;
        };
        let mut jobs = text.lines().map(str::trim).filter(|l| !l.is_empty());
        let ours = jobs.next() == Some(job.to_string().as_str()) && jobs.next().is_none();
        if ours {
            dynmig_host::fs::remove_if_present(&path)?;
            removed += 1;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_dcgm_exporter() {
        assert_eq!(file_name(0, 3), "0.3");
        assert_eq!(file_name(2, WHOLE_GPU), "2");
        for ok in ["0", "12", "0.3", "7.13"] {
            assert!(is_mapping_name(ok), "{ok}");
        }
        for bad in ["", ".", "0.", ".3", "a", "0.3.1", "0.x", "-1", "../0"] {
            assert!(!is_mapping_name(bad), "{bad}");
        }
    }

    #[test]
    fn a_job_writes_one_file_per_instance_and_takes_only_its_own_away() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("map");
        job_started(&dir, 41, &[(0, 1), (1, WHOLE_GPU)]).unwrap();
        job_started(&dir, 42, &[(0, 2)]).unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("0.1")).unwrap(), "41\n");
        assert_eq!(std::fs::read_to_string(dir.join("1")).unwrap(), "41\n");
        assert_eq!(std::fs::read_to_string(dir.join("0.2")).unwrap(), "42\n");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.join("0.1")).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);
        // Another tool's files and a file naming two jobs stay.
        std::fs::write(dir.join("notes"), "41\n").unwrap();
        std::fs::write(dir.join("3"), "41\n43\n").unwrap();
        assert_eq!(job_ended(&dir, 41).unwrap(), 2);
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["0.2", "3", "notes"]);
        assert_eq!(job_ended(&d.path().join("none"), 41).unwrap(), 0);
    }
}
