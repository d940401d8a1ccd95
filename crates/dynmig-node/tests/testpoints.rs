//! The agent's test points in a process of their own: a crash point SIGKILLs the process
//! there, once, from the environment or from the node's shared file.

use dynmig_node::testpoints::{points_path, TestPoints, POINTS_ENV};
use std::process::Command;

/// Not a test by itself: reaches `p1`, writes `after-p1`, reaches `p2`, writes `after-p2`, in
/// the state dir the environment names. Run by the test below.
#[test]
#[ignore = "helper run in a child process"]
fn points_helper() {
    let Ok(dir) = std::env::var("DYNMIG_TEST_POINTS_DIR") else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let mut points = TestPoints::for_node(&dir).unwrap();
    points.reach("p1");
    std::fs::write(dir.join("after-p1"), "").unwrap();
    points.reach("p2");
    std::fs::write(dir.join("after-p2"), "").unwrap();
}

fn helper(dir: &std::path::Path) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "points_helper",
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("DYNMIG_TEST_POINTS_DIR", dir)
    .env_remove(POINTS_ENV);
    cmd
}

#[test]
fn a_crash_point_sigkills_the_process_there_once() {
    use std::os::unix::process::ExitStatusExt;
    let d = tempfile::tempdir().unwrap();
    std::fs::write(points_path(d.path()), r#"{"at": [{"point": "p2", "action": "crash"}]}"#).unwrap();
    let out = helper(d.path()).output().unwrap();
    assert_eq!(out.status.signal(), Some(9), "{out:?}");
    assert!(d.path().join("after-p1").exists() && !d.path().join("after-p2").exists());
    // Fired once: the next run goes through.
    let out = helper(d.path()).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(d.path().join("after-p2").exists());
    // From the environment, in that process only.
    std::fs::remove_file(d.path().join("after-p1")).unwrap();
    let out = helper(d.path())
        .env(POINTS_ENV, r#"{"at": [{"point": "p1", "action": "crash"}]}"#)
        .output()
        .unwrap();
    assert_eq!(out.status.signal(), Some(9), "{out:?}");
    assert!(!d.path().join("after-p1").exists());
}
