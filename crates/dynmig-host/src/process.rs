//! External commands with a timeout and a cap on their output.

use std::ffi::OsStr;
use std::fmt;
use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

/// What went wrong running a command.
#[derive(Debug)]
pub enum RunError {
    /// The program could not be started.
    Spawn {
        /// The command line.
        command: String,
        /// Why.
        source: std::io::Error,
    },
    /// It ran longer than allowed and was killed.
    TimedOut {
        /// The command line.
        command: String,
        /// The limit.
        after: Duration,
    },
    /// It printed more than allowed on stdout and was killed.
    TooMuchOutput {
        /// The command line.
        command: String,
        /// The cap, bytes.
        max: usize,
    },
    /// It exited unsuccessfully.
    Failed {
        /// The command line.
        command: String,
        /// Its exit status.
        status: ExitStatus,
        /// Its stderr, trimmed and cut to 500 characters.
        stderr: String,
    },
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Spawn { command, source } => write!(f, "cannot run {command}: {source}"),
            RunError::TimedOut { command, after } => write!(f, "{command} timed out after {after:?}"),
            RunError::TooMuchOutput { command, max } => write!(f, "{command} printed more than {max} bytes"),
            RunError::Failed {
                command,
                status,
                stderr,
            } => write!(f, "{command} failed ({status}): {stderr}"),
        }
    }
}

impl std::error::Error for RunError {}

/// Limits for one command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest the command may run.
    pub timeout: Duration,
    /// Most bytes it may print on stdout (stderr is kept up to 64 KiB, the rest dropped).
    pub max_output: usize,
}

impl Default for Limits {
    /// 20 s and 256 MiB (the `squeue --json` of a large, busy cluster).
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(20),
            max_output: 256 << 20,
        }
    }
}

/// How long [`spawn`] keeps retrying a program the kernel calls busy.
pub const BUSY_RETRY_FOR: Duration = Duration::from_secs(2);

/// Starts `command`, retrying for up to [`BUSY_RETRY_FOR`] while `execve` fails with
/// `ETXTBSY` ("Text file busy").
///
/// Linux refuses to execute a file some process holds open for writing. A file written just
/// before (a test's stand-in script, a helper an upgrade is replacing in place) can be held
/// for a moment by an unrelated child forked by another thread of this process between its
/// fork and its exec (the write descriptor is inherited until `O_CLOEXEC` closes it at exec).
/// The condition clears by itself within milliseconds; any other error is returned at once.
///
/// # Errors
/// The last `std::io::Error` of `Command::spawn`.
pub fn spawn(command: &mut Command) -> std::io::Result<std::process::Child> {
    let until = std::time::Instant::now() + BUSY_RETRY_FOR;
    let mut pause = Duration::from_millis(2);
    loop {
        match command.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && std::time::Instant::now() < until => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            other => return other,
        }
    }
}

/// Runs `program args...` with no stdin, reads its stdout while it runs (a pipe holds far
/// less than `squeue --json` prints) and returns it as text (invalid UTF-8 replaced).
///
/// # Errors
/// [`RunError`]: not started, timed out or over the output cap (then killed), or a non-zero
/// exit.
pub fn run<S: AsRef<OsStr>>(program: &OsStr, args: &[S], limits: Limits) -> Result<String, RunError> {
    let command = describe(program, args);
    let mut child = spawn(
        Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
    .map_err(|source| RunError::Spawn {
        command: command.clone(),
        source,
    })?;
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let max = limits.max_output;
    let out_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let n = (&mut stdout).take(max as u64 + 1).read_to_end(&mut buf);
        // Keep draining (and dropping) the rest, so that the child never blocks on a full pipe.
        let _ = std::io::copy(&mut stdout, &mut std::io::sink());
        n.map(|_| buf)
    });
    let err_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = (&mut stderr).take(64 << 10).read_to_end(&mut buf);
        buf
    });
    let pid = child.id() as libc::pid_t;
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let status = child.wait();
        let _ = tx.send(());
        status
    });
    if rx.recv_timeout(limits.timeout).is_err() {
        // The child is not reaped until `wait` returns, so `pid` still names it.
        // SAFETY: kill has no memory preconditions.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        let _ = waiter.join();
        return Err(RunError::TimedOut {
            command,
            after: limits.timeout,
        });
    }
    let status = waiter.join().expect("waiter").map_err(|source| RunError::Spawn {
        command: command.clone(),
        source,
    })?;
    let out = out_reader.join().expect("reader").unwrap_or_default();
    let err = err_reader.join().unwrap_or_default();
    if out.len() > max {
        return Err(RunError::TooMuchOutput { command, max });
    }
    if !status.success() {
        let stderr: String = String::from_utf8_lossy(&err).trim().chars().take(500).collect();
        return Err(RunError::Failed {
            command,
            status,
            stderr,
        });
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

fn describe<S: AsRef<OsStr>>(program: &OsStr, args: &[S]) -> String {
    let mut s = program.to_string_lossy().into_owned();
    for a in args {
        s.push(' ');
        s.push_str(&a.as_ref().to_string_lossy());
    }
    s.chars().take(300).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str, limits: Limits) -> Result<String, RunError> {
        run(OsStr::new("sh"), &["-c", script], limits)
    }

    #[test]
    fn a_program_held_open_for_writing_is_started_once_the_writer_closes_it() {
        use std::io::Write;
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("busy");
        let mut writer = std::fs::File::create(&p).unwrap();
        writer.write_all(b"#!/bin/sh\necho started\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        // While the writer is open, execve fails with ETXTBSY.
        let refused = Command::new(&p).stdout(Stdio::null()).spawn().unwrap_err();
        assert_eq!(refused.raw_os_error(), Some(libc::ETXTBSY));
        let closer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(writer);
        });
        let out = run(p.as_os_str(), &[] as &[&str], Limits::default()).unwrap();
        closer.join().unwrap();
        assert_eq!(out, "started\n");
    }

    #[test]
    fn large_output_is_read_while_the_command_runs() {
        let out = sh("head -c 1048576 /dev/zero | tr '\\0' x", Limits::default()).unwrap();
        assert_eq!(out.len(), 1 << 20);
    }

    #[test]
    fn a_hung_command_times_out() {
        let l = Limits {
            timeout: Duration::from_millis(300),
            ..Limits::default()
        };
        let t = std::time::Instant::now();
        assert!(matches!(sh("sleep 5", l), Err(RunError::TimedOut { .. })));
        assert!(t.elapsed() < Duration::from_secs(3));
    }

    #[test]
    fn output_over_the_cap_is_refused() {
        let l = Limits {
            max_output: 10,
            ..Limits::default()
        };
        assert!(matches!(
            sh("echo 0123456789abcdef", l),
            Err(RunError::TooMuchOutput { .. })
        ));
    }

    #[test]
    fn failure_carries_stderr() {
        let e = sh("echo bad >&2; exit 3", Limits::default()).unwrap_err().to_string();
        assert!(e.contains("bad") && e.contains("failed"), "{e}");
    }
}
