//! Re-registering a node with Slurm under a new layout.

use crate::pidfile;
use anyhow::{bail, Context, Result};
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
    /// [`dynmig_gpu::GpuBackend::checkpoint`], a test hook only the simulated backend acts on.
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
    /// A live (not zombie) process named `slurmd` in the pid file.
    fn daemon_running(&self) -> Option<bool> {
        let running = pidfile::live_foreign(&self.pid_file, "slurmd").is_some_and(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|st| {
                st.rsplit(')')
                    .next()
                    .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
            })
        });
        Some(running)
    }

    fn reregister(&self, slurm: &dyn SlurmApi, node: &str, gres: &str, checkpoint: &mut dyn FnMut(&str)) -> Result<()> {
        pidfile::stop_foreign(&self.pid_file, "slurmd", self.timeout);
        checkpoint("register:stopped");
        slurm.delete_node(node).context("scontrol delete nodename")?;
        checkpoint("register:deleted");
        let conf = format!("{} Gres={}", self.node_conf, gres).trim().to_string();
        let mut child = Command::new(&self.slurmd)
            .args(&self.extra_args)
            .args(["-Z", "-N", node, "--conf", &conf])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
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

    #[test]
    fn pid_file_from_slurm_conf() {
        let conf = "# x\nSlurmdPidFile=/run/slurmd-%n.pid # comment\n";
        assert_eq!(slurmd_pid_file(conf, "n1"), PathBuf::from("/run/slurmd-n1.pid"));
        assert_eq!(slurmd_pid_file("", "n1"), PathBuf::from("/run/slurmd.pid"));
    }
}
