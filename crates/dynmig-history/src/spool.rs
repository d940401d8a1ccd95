//! The node's spool of history records not yet delivered: one file per record in its wire
//! form, written with [`dynmig_host::fs::write_atomically`] (mode 0600: records hold user and
//! job names), removed only after the server has answered `OK`.

use crate::record::{JobRecord, MAX_RECORD_BYTES};
use crate::Error;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// Mode of a spool file.
pub const FILE_MODE: u32 = 0o600;
/// Mode of a spool folder that [`put`] creates.
pub const DIR_MODE: u32 = 0o700;

/// Writes `record` into `dir` (created 0700 if missing) as `<job>-<restart>-<node>.json`, mode
/// 0600, and returns its path. A record of the same job, restart and node replaces the
/// earlier one.
///
/// # Errors
/// The record breaks a limit ([`JobRecord::validate`]), or the folder or file cannot be
/// written.
pub fn put(dir: &Path, record: &JobRecord) -> Result<PathBuf, Error> {
    let bytes = record.to_wire()?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
        .map_err(Error::io("create spool folder", dir))?;
    let path = dir.join(record.spool_name());
    dynmig_host::fs::write_atomically(&path, &bytes, FILE_MODE).map_err(Error::io("write spool file", &path))?;
    Ok(path)
}

/// The spooled records, by file name, with their paths. A file that cannot be read (a link,
/// not a regular file, too large, not a record) is skipped with a message on stderr and left
/// for an administrator. A missing folder is an empty spool.
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
        .filter_map(|p| match read(&p) {
            Ok(r) => Some((p, r)),
            Err(why) => {
                eprintln!("dynmig: spool: cannot read {}: {why}; left in place", p.display());
                None
            }
        })
        .collect()
}

fn read(path: &Path) -> Result<JobRecord, String> {
    let bytes = dynmig_host::fs::read_bounded(path, MAX_RECORD_BYTES as u64)
        .map_err(|e| e.to_string())?
        .ok_or("gone")?;
    JobRecord::from_spool(&bytes).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn put_replaces_and_list_skips_junk() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = crate::record::tests::sample();
        put(dir.path(), &r).unwrap();
        r.peak_bytes = 5;
        put(dir.path(), &r).unwrap();
        std::fs::write(dir.path().join("junk.json"), "{").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("link.json")).unwrap();
        let l = list(dir.path());
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].1.peak_bytes, 5);
        assert!(list(&dir.path().join("none")).is_empty());
    }

    #[test]
    fn spool_files_and_a_new_spool_folder_are_private() {
        let dir = tempfile::tempdir().unwrap();
        let spool = dir.path().join("a/spool");
        let p = put(&spool, &crate::record::tests::sample()).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&p), 0o600);
        assert_eq!(mode(&spool), 0o700);
    }

    #[test]
    fn a_record_with_a_bad_node_is_not_spooled() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = crate::record::tests::sample();
        r.node = "../x".into();
        assert!(put(dir.path(), &r).is_err());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
