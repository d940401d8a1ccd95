//! Named points of the node agent's work where a test stops it: a kill -9 there, or a pause
//! the test releases. A test hook of the agent, not of the GPU backend: GPU faults live in the
//! backend's driver (the NVML stand-in of crates/nvml-standin, or the simulated backend's
//! fault plan), so the production backend trait carries no test hook.
//!
//! The points, in order: `journal:instances`, `journal:gres_conf`, `journal:register`, then
//! within the re-registration `register:stopped`, `register:deleted`, `register:started`,
//! then `journal:wait`, and `published` (docs of [`crate::agent`]).
//!
//! A plan is JSON, `{"at": [{"point": "journal:register", "action": "crash"}]}`, from two
//! places, checked in this order each time a point is reached:
//! 1. the environment variable [`POINTS_ENV`], read once when the agent starts, counted down
//!    in that process only;
//! 2. the node's shared file ([`points_path`], `<node state dir>/test-points.json`), counted
//!    down and rewritten under a lock, so that each point fires once in whichever process
//!    reaches it first.
//!
//! `crash` sends the process SIGKILL; `pause` writes the point's name into [`pause_path`] and
//! waits until someone removes that file (at most [`MAX_PAUSE`]), then goes on. Without a
//! plan a point costs one `stat` of the shared file.

use dynmig_host::fs::{read_text_bounded, remove_if_present, write_atomically};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The environment variable holding a per-process plan.
pub const POINTS_ENV: &str = "DYNMIG_TEST_POINTS";

/// The longest a pause waits for its pause file to go.
pub const MAX_PAUSE: Duration = Duration::from_secs(300);

/// The largest plan file read, bytes.
const MAX_PLAN: u64 = 64 << 10;

/// What happens at a point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PointAction {
    /// The process sends itself SIGKILL (no destructor, no flush).
    Crash,
    /// The process waits for the test (module docs).
    Pause,
}

/// One point fault: stop at `point` with `action`, once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PointFault {
    /// The point, e.g. `journal:register`.
    pub point: String,
    /// What happens there.
    pub action: PointAction,
}

/// A plan of point faults.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PointPlan {
    /// The faults, each fired once.
    #[serde(default)]
    pub at: Vec<PointFault>,
}

impl PointPlan {
    /// Reads the JSON text; blank text is an empty plan.
    ///
    /// # Errors
    /// Bad JSON, unknown fields or actions, with serde's message.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        serde_json::from_str(text).map_err(|e| format!("bad point plan: {e}"))
    }

    /// The action of the first fault at `point`, removing it.
    pub fn take(&mut self, point: &str) -> Option<PointAction> {
        let i = self.at.iter().position(|p| p.point == point)?;
        Some(self.at.remove(i).action)
    }
}

/// The shared plan file of the node whose state dir is `state_dir`.
pub fn points_path(state_dir: &Path) -> PathBuf {
    state_dir.join("test-points.json")
}

/// The pause file of the node whose state dir is `state_dir`.
pub fn pause_path(state_dir: &Path) -> PathBuf {
    state_dir.join("test-points.paused")
}

/// The points of one agent process.
#[derive(Debug, Default)]
pub struct TestPoints {
    env: PointPlan,
    state_dir: Option<PathBuf>,
}

impl TestPoints {
    /// The points of the agent of the node whose state dir is `state_dir`, with the plan of
    /// [`POINTS_ENV`] if set.
    ///
    /// # Errors
    /// [`POINTS_ENV`] is set but not a plan.
    pub fn for_node(state_dir: &Path) -> Result<Self, String> {
        let env = match std::env::var(POINTS_ENV) {
            Ok(t) => PointPlan::parse(&t).map_err(|e| format!("{POINTS_ENV}: {e}"))?,
            Err(_) => PointPlan::default(),
        };
        Ok(Self {
            env,
            state_dir: Some(state_dir.to_path_buf()),
        })
    }

    /// No points at all (unit tests of the agent).
    pub fn none() -> Self {
        Self::default()
    }

    /// The agent has reached `point`: carries out a fault planned there, if any.
    pub fn reach(&mut self, point: &str) {
        let action = self.env.take(point).or_else(|| self.take_shared(point));
        match action {
            None => {}
            Some(PointAction::Crash) => {
                eprintln!("dynmig test point {point}: crash: SIGKILL");
                // SAFETY: kill on our own pid has no preconditions; SIGKILL does not return.
                unsafe {
                    libc::kill(libc::getpid(), libc::SIGKILL);
                }
            }
            Some(PointAction::Pause) => {
                let Some(dir) = &self.state_dir else { return };
                let pause = pause_path(dir);
                eprintln!("dynmig test point {point}: pause until {} is removed", pause.display());
                if write_atomically(&pause, format!("{point}\n").as_bytes(), 0o644).is_ok() {
                    let until = Instant::now() + MAX_PAUSE;
                    while pause.exists() && Instant::now() < until {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    let _ = remove_if_present(&pause);
                }
            }
        }
    }

    /// Takes the fault at `point` from the shared file, under its lock.
    fn take_shared(&self, point: &str) -> Option<PointAction> {
        let dir = self.state_dir.as_ref()?;
        let path = points_path(dir);
        if !path.exists() {
            return None;
        }
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join("test-points.lock"))
            .ok()?;
        fs4::FileExt::lock(&lock).ok()?;
        let mut plan = PointPlan::parse(&read_text_bounded(&path, MAX_PLAN).ok()??).ok()?;
        let action = plan.take(point)?;
        let text = serde_json::to_string(&plan).expect("plans serialize");
        write_atomically(&path, text.as_bytes(), 0o644).ok()?;
        Some(action)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_parse_fire_once_and_refuse_unknown_actions() {
        let mut p = PointPlan::parse(
            r#"{"at": [{"point": "journal:register", "action": "crash"},
                       {"point": "register:deleted", "action": "pause"}]}"#,
        )
        .unwrap();
        assert_eq!(p.take("journal:wait"), None);
        assert_eq!(p.take("register:deleted"), Some(PointAction::Pause));
        assert_eq!(p.take("register:deleted"), None);
        assert_eq!(p.take("journal:register"), Some(PointAction::Crash));
        assert!(p.at.is_empty());
        assert!(PointPlan::parse(r#"{"at": [{"point": "x", "action": "explode"}]}"#).is_err());
        assert!(PointPlan::parse(r#"{"at": [], "crash_after": 1}"#).is_err());
        assert_eq!(PointPlan::parse(" ").unwrap(), PointPlan::default());
    }

    #[test]
    fn a_pause_in_the_shared_file_waits_for_its_pause_file_and_fires_once() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().to_path_buf();
        std::fs::write(points_path(&dir), r#"{"at": [{"point": "p1", "action": "pause"}]}"#).unwrap();
        let mut points = TestPoints {
            env: PointPlan::default(),
            state_dir: Some(dir.clone()),
        };
        let releaser = {
            let dir = dir.clone();
            std::thread::spawn(move || {
                let pause = pause_path(&dir);
                let until = Instant::now() + Duration::from_secs(30);
                while !pause.exists() {
                    assert!(Instant::now() < until, "no pause file");
                    std::thread::sleep(Duration::from_millis(10));
                }
                assert_eq!(std::fs::read_to_string(&pause).unwrap().trim(), "p1");
                std::fs::remove_file(&pause).unwrap();
            })
        };
        points.reach("p1");
        releaser.join().unwrap();
        let left = PointPlan::parse(&std::fs::read_to_string(points_path(&dir)).unwrap()).unwrap();
        assert!(left.at.is_empty(), "{left:?}");
        // Fired once: reaching it again goes straight on.
        points.reach("p1");
    }
}
