//! Pid files that root acts on, checked before any signal (a stale pid file must never make
//! root signal an unrelated process, and `-1` must never mean "every process").
//!
//! dynmig's own pid files hold `<pid> <start time>` (the start time in clock ticks since boot,
//! field 22 of `/proc/<pid>/stat`); a pid is trusted only while a process of the expected name
//! with that start time holds it. Pid files written by others (slurmd's) hold a pid only; the
//! process's name must match.

use std::path::Path;
use std::time::{Duration, Instant};

/// The name (`comm`, at most 15 bytes) and start time of process `pid`, from
/// `/proc/<pid>/stat`; `None` if there is no such process.
pub fn process_identity(pid: i32) -> Option<(String, u64)> {
    if pid <= 0 {
        return None;
    }
    let stat = dynmig_host::fs::read_text_bounded(Path::new(&format!("/proc/{pid}/stat")), 4096)
        .ok()
        .flatten()
        .or_else(|| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())?;
    // comm may hold spaces and parentheses: it runs from the first '(' to the last ')'.
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?.to_string();
    // Fields after comm: state is field 3, starttime is field 22.
    let start: u64 = stat.get(close + 2..)?.split_whitespace().nth(19)?.parse().ok()?;
    Some((comm, start))
}

/// Whether process `pid` has exited and waits for its parent to reap it (state `Z`): it holds
/// no socket and no file any more.
pub fn is_zombie(pid: i32) -> bool {
    pid > 0
        && std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|st| {
            st.rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with('Z'))
        })
}

/// Writes this process's pid file (`<pid> <start time>`, mode 0644).
///
/// # Errors
/// The file cannot be written, or this process's identity cannot be read.
pub fn write_own(path: &Path) -> std::io::Result<()> {
    let pid = std::process::id() as i32;
    let (_, start) = process_identity(pid)
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "cannot read /proc/self/stat"))?;
    dynmig_host::fs::write_atomically(path, format!("{pid} {start}\n").as_bytes(), 0o644)
}

/// The pid in one of dynmig's pid files, if a process named `comm` with the recorded start
/// time still holds it.
pub fn live_own(path: &Path, comm: &str) -> Option<i32> {
    let text = dynmig_host::fs::read_text_bounded(path, 64).ok().flatten()?;
    let mut f = text.split_whitespace();
    let pid: i32 = f.next()?.parse().ok().filter(|p| *p > 1)?;
    let start: u64 = f.next()?.parse().ok()?;
    let (c, s) = process_identity(pid)?;
    (c == comm && s == start).then_some(pid)
}

/// The pid in a pid file written by another program (just a pid), if a process named `comm`
/// holds it.
pub fn live_foreign(path: &Path, comm: &str) -> Option<i32> {
    let text = dynmig_host::fs::read_text_bounded(path, 64).ok().flatten()?;
    let pid: i32 = text.trim().parse().ok().filter(|p| *p > 1)?;
    let (c, _) = process_identity(pid)?;
    (c == comm).then_some(pid)
}

/// Sends `signal` to `pid`.
pub fn signal(pid: i32, signal: i32) -> bool {
    // SAFETY: kill has no memory preconditions; pid > 1 was checked by the callers' lookups.
    pid > 1 && unsafe { libc::kill(pid, signal) } == 0
}

/// Stops the process named `comm` in the foreign pid file `path`: SIGTERM, then SIGKILL after
/// `wait`. Returns whether a process was stopped. A process that has exited counts as stopped
/// even before its parent reaps it: a daemonised slurmd's parent is PID 1, which in a
/// container may reap it seconds later (the demo of 2026-11-27: 1.2-2.0 s per
/// re-registration spent waiting for the zombie).
pub fn stop_foreign(path: &Path, comm: &str, wait: Duration) -> bool {
    let Some(pid) = live_foreign(path, comm) else {
        return false;
    };
    let (_, start) = process_identity(pid).unwrap_or_default();
    let same = || process_identity(pid).is_some_and(|(c, s)| c == comm && s == start) && !is_zombie(pid);
    signal(pid, libc::SIGTERM);
    let until = Instant::now() + wait;
    while same() {
        if Instant::now() > until {
            signal(pid, libc::SIGKILL);
            std::thread::sleep(Duration::from_millis(200));
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stale_or_negative_pid_file_names_no_process() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("agent.pid");
        // An unrelated live process (this test) recorded with a wrong start time.
        std::fs::write(&p, format!("{} 1\n", std::process::id())).unwrap();
        assert_eq!(live_own(&p, "whatever"), None);
        for bad in ["-1 5", "0 5", "1 5", "abc", ""] {
            std::fs::write(&p, bad).unwrap();
            assert_eq!(live_own(&p, "x"), None, "{bad}");
            assert_eq!(live_foreign(&p, "x"), None, "{bad}");
        }
    }

    #[test]
    fn our_own_pid_file_names_us_and_a_sleep_is_not_slurmd() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("me.pid");
        write_own(&p).unwrap();
        let (comm, _) = process_identity(std::process::id() as i32).unwrap();
        assert_eq!(live_own(&p, &comm), Some(std::process::id() as i32));
        let mut sleep = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        std::fs::write(d.path().join("slurmd.pid"), sleep.id().to_string()).unwrap();
        assert!(!stop_foreign(
            &d.path().join("slurmd.pid"),
            "slurmd",
            Duration::from_secs(1)
        ));
        assert!(
            sleep.try_wait().unwrap().is_none(),
            "the unrelated sleep was left alone"
        );
        assert!(stop_foreign(
            &d.path().join("slurmd.pid"),
            "sleep",
            Duration::from_secs(5)
        ));
        let _ = sleep.wait();
    }

    #[test]
    fn a_stopped_process_its_parent_has_not_reaped_yet_counts_as_stopped() {
        let d = tempfile::tempdir().unwrap();
        let daemon = d.path().join("slurmd");
        std::fs::copy("/bin/sleep", &daemon).unwrap();
        // Our child: it stays a zombie after SIGTERM until we wait for it.
        let mut child = std::process::Command::new(&daemon).arg("30").spawn().unwrap();
        let pid_file = d.path().join("slurmd.pid");
        std::fs::write(&pid_file, child.id().to_string()).unwrap();
        assert!(!is_zombie(child.id() as i32));
        let t = Instant::now();
        assert!(stop_foreign(&pid_file, "slurmd", Duration::from_secs(5)));
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "waited {:?} for a zombie",
            t.elapsed()
        );
        assert!(is_zombie(child.id() as i32), "not reaped yet");
        let _ = child.wait();
        assert!(!is_zombie(child.id() as i32));
    }
}
