//! Re-registering a node with Slurm under a new layout.

use crate::pidfile;
use anyhow::{bail, Context, Result};
use dynmig_core::gres::{node_gres_totals, shows_totals};
use dynmig_slurm::SlurmApi;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How a node re-registers a new layout with Slurm. One interface, so that newer Slurm
/// mechanisms can replace the dynamic-node sequence.
pub trait Reregister {
    /// Makes Slurm see `node` with `gres` (e.g. `gpu:3g.40gb:2`). Must be idempotent.
    /// `checkpoint` is called with the name of each point passed (`register:stopped`,
    /// `register:deleted`, `register:started` for [`DynamicNode`]): the agent hands it to
    /// [`crate::testpoints::TestPoints::reach`], a test hook.
    ///
    /// # Errors
    /// Any step failed.
    fn reregister(&self, slurm: &dyn SlurmApi, node: &str, gres: &str, checkpoint: &mut dyn FnMut(&str)) -> Result<()>;

    /// Whether the node's Slurm daemon runs now, where this re-registration can tell
    /// (`None`: it cannot). The agent re-registers again when the daemon it started is gone
    /// before the node is back (killed during its registration).
    fn daemon_running(&self) -> Option<bool> {
        None
    }
}

/// Re-registration of a dynamic node (Slurm 22.05 to 26.05: a `slurmd -Z` registration under
/// a name slurmctld knows keeps the old GRES, so the node must be deleted first; SchedMD's
/// dynamic nodes documentation): stop slurmd, `scontrol delete nodename=X`, start
/// `slurmd -Z --conf "... Gres=..."`.
#[derive(Debug, Clone)]
pub struct DynamicNode {
    /// The slurmd binary.
    pub slurmd: PathBuf,
    /// Arguments before `-Z`, e.g. `["-f", "/etc/slurm/slurm.conf"]`.
    pub extra_args: Vec<String>,
    /// slurmd's pid file (`SlurmdPidFile`); only a process named `slurmd` in it is stopped.
    pub pid_file: PathBuf,
    /// Node attributes other than GRES for `--conf`, e.g. `CPUs=2 RealMemory=1000`.
    pub node_conf: String,
    /// Longest wait for slurmd to stop, and for `slurmd -Z` to daemonise.
    pub timeout: Duration,
}

impl Reregister for DynamicNode {
    /// A live (not zombie) process named `slurmd` in the pid file; `None` (cannot tell)
    /// without a pid file, so that a node whose slurmd keeps it elsewhere is never registered
    /// again for it.
    fn daemon_running(&self) -> Option<bool> {
        if !self.pid_file.exists() {
            return None;
        }
        let running = pidfile::live_foreign(&self.pid_file, "slurmd").is_some_and(|pid| !pidfile::is_zombie(pid));
        Some(running)
    }

    /// As the trait says, and never leaves slurmd stopped: when Slurm already shows the node
    /// with `gres` (slurmd died after it registered), only slurmd is started again (a
    /// registration under a known name keeps the GRES, which are right); when the delete is
    /// refused (a job was given the node meanwhile), slurmd is started again before the
    /// error is returned. Both found by tests/cluster/faults.rs (slurmd SIGKILLed during
    /// the re-registration): the node stayed down with its slurmd gone.
    fn reregister(&self, slurm: &dyn SlurmApi, node: &str, gres: &str, checkpoint: &mut dyn FnMut(&str)) -> Result<()> {
        // Slurm is asked only when slurmd is gone (a call less in the usual case).
        let registered = || {
            slurm
                .node(node)
                .ok()
                .flatten()
                .is_some_and(|n| shows_totals(&n.gres, &node_gres_totals(gres)))
        };
        if self.daemon_running() == Some(false) && registered() {
            return self.start(node, gres, checkpoint);
        }
        pidfile::stop_foreign(&self.pid_file, "slurmd", self.timeout);
        checkpoint("register:stopped");
        if let Err(e) = slurm.delete_node(node) {
            let _ = self.start(node, gres, &mut |_| {});
            return Err(e).context("scontrol delete nodename (slurmd started again)");
        }
        checkpoint("register:deleted");
        self.start(node, gres, checkpoint)
    }
}

impl DynamicNode {
    /// Starts `slurmd -Z` with `gres` and waits until it has daemonised.
    fn start(&self, node: &str, gres: &str, checkpoint: &mut dyn FnMut(&str)) -> Result<()> {
        let conf = format!("{} Gres={}", self.node_conf, gres).trim().to_string();
        let mut child = dynmig_host::process::spawn(
            Command::new(&self.slurmd)
                .args(&self.extra_args)
                .args(["-Z", "-N", node, "--conf", &conf])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        )
        .with_context(|| format!("cannot start {}", self.slurmd.display()))?;
        // slurmd forks its daemon and exits; wait for that exit, at most `timeout`.
        let until = Instant::now() + self.timeout;
        let status = loop {
            if let Some(s) = child.try_wait()? {
                break s;
            }
            if Instant::now() > until {
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "{} -Z -N {node} did not daemonise within {:?}",
                    self.slurmd.display(),
                    self.timeout
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        if !status.success() {
            bail!(
                "{} {} -Z -N {node} --conf '{conf}' exited with {status}",
                self.slurmd.display(),
                self.extra_args.join(" ")
            );
        }
        // The daemon writes its pid file once its plugins are loaded, before it registers
        // (slurmd.c: create_pidfile comes before the registration); until then nothing tells
        // whether it still runs. Started means the pid file names a live slurmd, so that the
        // Wait step can tell a daemon killed during its registration from one that is still
        // starting. Found by tests/cluster/faults.rs on 26.05: a slurmd killed in that window
        // was taken for a running one.
        while !matches!(self.daemon_running(), Some(true)) {
            if Instant::now() > until {
                bail!(
                    "{} -Z -N {node} daemonised but no live slurmd wrote {} within {:?} (see slurmd's log)",
                    self.slurmd.display(),
                    self.pid_file.display(),
                    self.timeout
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        checkpoint("register:started");
        Ok(())
    }
}

/// `SlurmdPidFile` from a slurm.conf text (`%n` = the node name), or Slurm's default
/// `/run/slurmd.pid`.
pub fn slurmd_pid_file(slurm_conf: &str, node: &str) -> PathBuf {
    slurm_conf
        .lines()
        .find_map(|l| {
            let l = l.split('#').next().unwrap_or("").trim();
            let (k, v) = l.split_once('=')?;
            k.trim()
                .eq_ignore_ascii_case("SlurmdPidFile")
                .then(|| PathBuf::from(v.trim().replace("%n", node)))
        })
        .unwrap_or_else(|| PathBuf::from("/run/slurmd.pid"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use dynmig_slurm::fake::{idle_node, FakeSlurm};

    /// A fake `slurmd`: a script that starts a daemon named `slurmd` (a copy of sleep) and
    /// writes its pid where `DynamicNode` looks, and logs its arguments.
    fn fake_slurmd(dir: &std::path::Path) -> DynamicNode {
        let daemon = dir.join("daemon");
        std::fs::create_dir_all(&daemon).unwrap();
        std::fs::copy("/bin/sleep", daemon.join("slurmd")).unwrap();
        let script = dir.join("slurmd");
        let pid_file = dir.join("slurmd.pid");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\necho \"$@\" >>{log}\n{d}/slurmd 60 </dev/null >/dev/null 2>&1 &\necho $! >{pid}\n",
                log = dir.join("calls").display(),
                d = daemon.display(),
                pid = pid_file.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        DynamicNode {
            slurmd: script,
            extra_args: vec![],
            pid_file,
            node_conf: "CPUs=2".into(),
            timeout: Duration::from_secs(5),
        }
    }

    fn stop(d: &DynamicNode) {
        pidfile::stop_foreign(&d.pid_file, "slurmd", Duration::from_secs(5));
    }

    #[test]
    fn a_registered_node_whose_slurmd_died_gets_only_its_slurmd_back() {
        let dir = tempfile::tempdir().unwrap();
        let d = fake_slurmd(dir.path());
        assert_eq!(d.daemon_running(), None, "no pid file: cannot tell");
        std::fs::write(&d.pid_file, "999999999\n").unwrap();
        assert_eq!(d.daemon_running(), Some(false));
        let slurm = FakeSlurm::new(vec![idle_node("n1", "gpu:3g.40gb:2(S:0)")], vec![]);
        d.reregister(&slurm, "n1", "gpu:3g.40gb:2", &mut |_| {}).unwrap();
        assert_eq!(d.daemon_running(), Some(true));
        let calls = slurm.state.lock().unwrap().calls.clone();
        assert!(calls.iter().all(|c| !c.starts_with("delete")), "{calls:?}");
        stop(&d);
    }

    #[test]
    fn a_refused_delete_starts_slurmd_again_before_failing() {
        let dir = tempfile::tempdir().unwrap();
        let d = fake_slurmd(dir.path());
        let mut busy = idle_node("n1", "gpu:7g.80gb:2");
        busy.alloc_cpus = 1;
        let slurm = FakeSlurm::new(vec![busy], vec![]);
        d.start("n1", "gpu:7g.80gb:2", &mut |_| {}).unwrap();
        let e = d.reregister(&slurm, "n1", "gpu:3g.40gb:2", &mut |_| {}).unwrap_err();
        assert!(format!("{e:#}").contains("slurmd started again"), "{e:#}");
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while d.daemon_running() != Some(true) {
            assert!(std::time::Instant::now() < until, "slurmd left stopped");
            std::thread::sleep(Duration::from_millis(20));
        }
        stop(&d);
    }

    #[test]
    fn pid_file_from_slurm_conf() {
        let conf = "# x\nSlurmdPidFile=/run/slurmd-%n.pid # comment\n";
        assert_eq!(slurmd_pid_file(conf, "n1"), PathBuf::from("/run/slurmd-n1.pid"));
        assert_eq!(slurmd_pid_file("", "n1"), PathBuf::from("/run/slurmd.pid"));
    }
}
