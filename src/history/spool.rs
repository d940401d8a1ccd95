//! The node's spool of history records not yet delivered: one JSON file per record, written
//! atomically (temporary file + rename), removed only after the server has answered.

use super::JobRecord;
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// Writes `record` into `dir` (created if missing) and returns its path. A record of the same
/// job, restart and node replaces the earlier one.
///
/// # Errors
/// The directory or file cannot be written.
pub fn put(dir: &Path, record: &JobRecord) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create spool {}", dir.display()))?;
    let path = dir.join(record.spool_name());
    let tmp = dir.join(format!(".{}.tmp", record.spool_name()));
    std::fs::write(&tmp, serde_json::to_vec(record)?).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}

/// The spooled records, oldest file name first, with their paths. Unreadable files are
/// skipped with a message on stderr (they stay for an administrator).
pub fn list(dir: &Path) -> Vec<(PathBuf, JobRecord)> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .filter_map(|p| {
            let r = std::fs::read(&p)
                .ok()
                .and_then(|b| serde_json::from_slice::<JobRecord>(&b).ok());
            if r.is_none() {
                eprintln!("dynmig: spool: cannot read {}; left in place", p.display());
            }
            r.map(|r| (p, r))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_and_list() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = JobRecord {
            job_id: 7,
            restart: 0,
            node: "n1".into(),
            uid: 1000,
            user: "u".into(),
            job_name: "j".into(),
            profile: "1g.10gb".into(),
            estimate_bytes: 1,
            source: "mig-mem".into(),
            peak_bytes: 2,
            limit_bytes: 3,
            exit_status: 0,
            oom: false,
            end_time: 1,
        };
        put(dir.path(), &r).unwrap();
        r.peak_bytes = 5;
        put(dir.path(), &r).unwrap();
        std::fs::write(dir.path().join("junk.json"), "{").unwrap();
        let l = list(dir.path());
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].1.peak_bytes, 5);
    }
}
