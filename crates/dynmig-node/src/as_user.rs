//! Reading and appending to a file a job's user chose (its stderr), with that user's rights,
//! never root's.
//!
//! A forked child drops to the user (`setgroups(0)`, `setgid`, `setuid`), opens the path with
//! `O_NOFOLLOW | O_NONBLOCK`, refuses anything but a regular file (a FIFO would block, a
//! device like `/dev/zero` never ends), reads at most `max` bytes from the end (or appends one
//! line), and hands the bytes back through a pipe. The parent waits at most `timeout`, then
//! kills it. Root thus never opens a user-chosen path, and a hostile path costs at most the
//! timeout.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// Whose rights to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserIds {
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
}

enum Op<'a> {
    ReadTail(usize),
    Append(&'a [u8]),
}

/// The last `max` bytes of the regular file `path`, read as `who`.
///
/// # Errors
/// The path has a NUL, the child cannot be started or become `who`, the path is a link or not
/// a regular file or cannot be opened by `who`, or `timeout` passed.
pub fn read_tail(who: UserIds, path: &Path, max: usize, timeout: Duration) -> io::Result<Vec<u8>> {
    run_as(who, path, Op::ReadTail(max), timeout)
}

/// Appends `text` to the existing regular file `path`, as `who` (never creates it).
///
/// # Errors
/// As [`read_tail`].
pub fn append(who: UserIds, path: &Path, text: &str, timeout: Duration) -> io::Result<()> {
    run_as(who, path, Op::Append(text.as_bytes()), timeout).map(drop)
}

fn run_as(who: UserIds, path: &Path, op: Op<'_>, timeout: Duration) -> io::Result<Vec<u8>> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))?;
    // Everything the child needs is allocated before fork: the child only makes system calls.
    let max = match op {
        Op::ReadTail(m) => m,
        Op::Append(_) => 0,
    };
    let mut buf = vec![0u8; max];
    let mut fds = [0i32; 2];
    // SAFETY: fds is a valid 2-int array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let (rd, wr) = (fds[0], fds[1]);
    // SAFETY: the child below calls only async-signal-safe functions and then _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        let e = io::Error::last_os_error();
        unsafe {
            libc::close(rd);
            libc::close(wr);
        }
        return Err(e);
    }
    if pid == 0 {
        // Child.
        unsafe {
            libc::close(rd);
            let code = child(who, &c_path, &op, &mut buf, wr);
            libc::_exit(code);
        }
    }
    unsafe { libc::close(wr) };
    let result = collect(rd, pid, max, timeout);
    unsafe { libc::close(rd) };
    result
}

/// The child's work; returns its exit code (0 ok, 2 not a regular file, 3 cannot drop rights,
/// 4 open failed, 5 I/O failed).
unsafe fn child(who: UserIds, path: &CString, op: &Op<'_>, buf: &mut [u8], out: i32) -> i32 {
    if libc::setgroups(0, std::ptr::null()) != 0 && libc::geteuid() == 0 {
        return 3;
    }
    if libc::setgid(who.gid) != 0 || libc::setuid(who.uid) != 0 || libc::getuid() != who.uid {
        return 3;
    }
    let flags = libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
    let fd = match op {
        Op::ReadTail(_) => libc::open(path.as_ptr(), libc::O_RDONLY | flags),
        Op::Append(_) => libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_APPEND | flags),
    };
    if fd < 0 {
        return 4;
    }
    let mut st: libc::stat = std::mem::zeroed();
    if libc::fstat(fd, &mut st) != 0 || (st.st_mode & libc::S_IFMT) != libc::S_IFREG {
        return 2;
    }
    match op {
        Op::ReadTail(max) => {
            let start = (st.st_size as i64 - *max as i64).max(0);
            let mut got = 0usize;
            while got < *max {
                let n = libc::pread(fd, buf[got..].as_mut_ptr().cast(), *max - got, start + got as i64);
                if n < 0 {
                    return 5;
                }
                if n == 0 {
                    break;
                }
                got += n as usize;
            }
            let mut sent = 0usize;
            while sent < got {
                let n = libc::write(out, buf[sent..got].as_ptr().cast(), got - sent);
                if n <= 0 {
                    return 5;
                }
                sent += n as usize;
            }
            0
        }
        Op::Append(text) => {
            let n = libc::write(fd, text.as_ptr().cast(), text.len());
            if n < 0 || n as usize != text.len() {
                5
            } else {
                0
            }
        }
    }
}

fn collect(rd: i32, pid: libc::pid_t, max: usize, timeout: Duration) -> io::Result<Vec<u8>> {
    let deadline = Instant::now() + timeout;
    let mut out = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(kill_and_reap(pid, io::Error::new(io::ErrorKind::TimedOut, "timed out")));
        }
        let mut p = libc::pollfd {
            fd: rd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = left.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: p is a valid pollfd.
        let r = unsafe { libc::poll(&mut p, 1, ms.max(1)) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(kill_and_reap(pid, e));
        }
        if r == 0 {
            continue;
        }
        // SAFETY: chunk is a valid buffer of its length.
        let n = unsafe { libc::read(rd, chunk.as_mut_ptr().cast(), chunk.len()) };
        if n < 0 {
            return Err(kill_and_reap(pid, io::Error::last_os_error()));
        }
        if n == 0 {
            break;
        }
        out.extend_from_slice(&chunk[..n as usize]);
        if out.len() > max {
            return Err(kill_and_reap(
                pid,
                io::Error::new(io::ErrorKind::InvalidData, "child wrote too much"),
            ));
        }
    }
    let mut status = 0;
    // SAFETY: pid is our child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    match libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)) {
        Some(0) => Ok(out),
        Some(2) => Err(io::Error::new(io::ErrorKind::InvalidInput, "not a regular file")),
        Some(3) => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "cannot take the job user's ids",
        )),
        Some(4) => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "cannot open it as the job's user (missing, a link, or not theirs)",
        )),
        _ => Err(io::Error::other("reading it as the job's user failed")),
    }
}

fn kill_and_reap(pid: libc::pid_t, e: io::Error) -> io::Error {
    let mut status = 0;
    // SAFETY: pid is our child, not yet reaped.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        libc::waitpid(pid, &mut status, 0);
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> UserIds {
        // SAFETY: getuid/getgid have no preconditions.
        unsafe {
            UserIds {
                uid: libc::getuid(),
                gid: libc::getgid(),
            }
        }
    }

    #[test]
    fn the_tail_of_a_big_file_is_read_up_to_the_cap() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("err");
        std::fs::write(&p, format!("{}CUDA out of memory\n", "x".repeat(100_000))).unwrap();
        let t = read_tail(me(), &p, 64, Duration::from_secs(5)).unwrap();
        assert_eq!(t.len(), 64);
        assert!(String::from_utf8_lossy(&t).ends_with("CUDA out of memory\n"));
    }

    #[test]
    fn a_stderr_of_dev_zero_a_fifo_or_a_link_is_refused_quickly() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        let c = CString::new(fifo.as_os_str().as_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let target = d.path().join("t");
        std::fs::write(&target, "secret").unwrap();
        let link = d.path().join("l");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let t = Instant::now();
        for p in [Path::new("/dev/zero"), fifo.as_path(), link.as_path()] {
            assert!(
                read_tail(me(), p, 8192, Duration::from_secs(5)).is_err(),
                "{}",
                p.display()
            );
            assert!(
                append(me(), p, "x\n", Duration::from_secs(5)).is_err(),
                "{}",
                p.display()
            );
        }
        assert!(t.elapsed() < Duration::from_secs(3));
        assert_eq!(
            std::fs::read_to_string(&target).unwrap(),
            "secret",
            "nothing appended through the link"
        );
    }

    #[test]
    fn append_adds_a_line_and_never_creates_a_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("err");
        std::fs::write(&p, "a\n").unwrap();
        append(me(), &p, "b\n", Duration::from_secs(5)).unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "a\nb\n");
        assert!(append(me(), &d.path().join("none"), "b\n", Duration::from_secs(5)).is_err());
        assert!(!d.path().join("none").exists());
    }

    #[test]
    fn another_users_file_is_not_readable_through_root() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root to switch users");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("root-only");
        std::fs::write(&p, "secret").unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        let nobody = UserIds { uid: 65534, gid: 65534 };
        assert!(read_tail(nobody, &p, 100, Duration::from_secs(5)).is_err());
    }
}
