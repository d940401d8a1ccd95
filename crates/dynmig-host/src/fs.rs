//! Files: atomic replacement and bounded reads.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Replaces `path` with `bytes` atomically, the new file having permission bits `mode`
/// (e.g. `0o600` for files that hold user names): writes `.<name>.tmp.<pid>.<n>` in the same
/// folder (created with `O_EXCL | O_NOFOLLOW`, so a planted link is never followed), flushes
/// it to disk, renames it over `path`, then flushes the folder. A reader sees either the old or
/// the new content, never a part; a crash leaves at most a stray temp file.
///
/// # Errors
/// `path` has no file name, or any I/O error of the steps above (the temp file is removed).
pub fn write_atomically(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!(".{}.tmp.{}.{seq}", name.to_string_lossy(), std::process::id()));
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result?;
    // Make the rename itself durable; not every file system lets a folder be synced.
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Reads at most `max` bytes of a regular file, refusing symbolic links (`O_NOFOLLOW`) and
/// anything that is not a regular file (a FIFO or a device would block or never end), opened
/// non-blocking. Returns `Ok(None)` if the file does not exist.
///
/// # Errors
/// The file is a link or not a regular file, is larger than `max` bytes, or cannot be read.
pub fn read_bounded(path: &Path, max: u64) -> io::Result<Option<Vec<u8>>> {
    let f = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let meta = f.metadata()?;
    if !meta.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a regular file", path.display()),
        ));
    }
    if meta.len() > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} is {} bytes, more than the {max} allowed",
                path.display(),
                meta.len()
            ),
        ));
    }
    let mut buf = Vec::with_capacity(meta.len() as usize);
    f.take(max).read_to_end(&mut buf)?;
    Ok(Some(buf))
}

/// [`read_bounded`] as UTF-8 text.
///
/// # Errors
/// As [`read_bounded`], or the bytes are not UTF-8.
pub fn read_text_bounded(path: &Path, max: u64) -> io::Result<Option<String>> {
    match read_bounded(path, max)? {
        None => Ok(None),
        Some(b) => String::from_utf8(b)
            .map(Some)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, format!("{} is not UTF-8", path.display()))),
    }
}

/// Removes `path`; a file that is already gone is fine.
///
/// # Errors
/// Any error but "not found".
pub fn remove_if_present(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// An append-only file of lines (the event log), or nowhere.
///
/// Each line is written with a single `write` on a file opened with `O_APPEND | O_NOFOLLOW`
/// and created `0640`, so that several processes can append to one file without
/// interleaving (a line stays well under `PIPE_BUF`) and a planted link is never followed.
#[derive(Debug, Clone, Default)]
pub struct LineLog {
    path: Option<std::path::PathBuf>,
}

impl LineLog {
    /// Lines go to `path`.
    pub fn to(path: impl Into<std::path::PathBuf>) -> Self {
        Self {
            path: Some(path.into()),
        }
    }

    /// Lines go nowhere.
    pub fn none() -> Self {
        Self::default()
    }

    /// The file, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Appends `line` (which should end in `\n`). Never fails the caller: an error is printed
    /// to stderr.
    pub fn append(&self, line: &str) {
        let Some(path) = &self.path else { return };
        let res = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o640)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(err) = res {
            log::warn!("cannot append to {}: {err}", path.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn atomic_write_sets_the_mode_and_replaces() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        write_atomically(&p, b"one", 0o600).unwrap();
        write_atomically(&p, b"two", 0o600).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 1, "no temp file left");
    }

    #[test]
    fn bounded_read_refuses_links_fifos_and_big_files() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        fs::write(&p, b"hello").unwrap();
        assert_eq!(read_bounded(&p, 5).unwrap().unwrap(), b"hello");
        assert!(read_bounded(&p, 4).is_err(), "over the bound");
        let l = d.path().join("l");
        std::os::unix::fs::symlink(&p, &l).unwrap();
        assert!(read_bounded(&l, 100).is_err(), "a link is refused");
        assert!(
            read_bounded(Path::new("/dev/zero"), 100).is_err(),
            "a device is refused"
        );
        assert!(read_bounded(&d.path().join("none"), 10).unwrap().is_none());
    }
}

#[cfg(test)]
mod line_log_tests {
    use super::*;

    #[test]
    fn lines_append_and_links_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let log = LineLog::to(d.path().join("e.jsonl"));
        log.append("a\n");
        log.append("b\n");
        assert_eq!(fs::read_to_string(d.path().join("e.jsonl")).unwrap(), "a\nb\n");
        let target = d.path().join("victim");
        fs::write(&target, "keep").unwrap();
        std::os::unix::fs::symlink(&target, d.path().join("l")).unwrap();
        LineLog::to(d.path().join("l")).append("x\n");
        assert_eq!(fs::read_to_string(&target).unwrap(), "keep");
    }
}

/// Opens (creating, mode 0600, never through a link) the lock file at `path` and takes an
/// exclusive `flock` on it without waiting: `Ok(Some(file))` holds the lock until the file is
/// closed, `Ok(None)` when another process holds it.
///
/// # Errors
/// The file cannot be opened.
pub fn try_lock_file(path: &Path) -> io::Result<Option<std::fs::File>> {
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    // SAFETY: the descriptor is open for the call; the lock goes with the file's close.
    Ok((unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0).then_some(f))
}
