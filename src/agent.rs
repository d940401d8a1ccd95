//! The node agent: applies the layout the controller chose for this node, between allocations.
//!
//! The controller hands the target over through Slurm itself: it drains the node with the
//! reason `dynmig: repartition to <layout>` ([`REASON_PREFIX`]). The agent reads its own node
//! from Slurm; when the node is drained by dynmig and no job runs on it any more (the last
//! job's Epilog wakes the agent at once, see [`crate::hooks`]), it
//!
//! 1. journals the intent (`agent-journal.json` in its state dir) before acting,
//! 2. changes the GPU instances through the [`GpuBackend`] (only the instances that must
//!    change: [`plan_transition`]) and verifies the result,
//! 3. rewrites the node's gres.conf,
//! 4. re-registers the node with its new GRES ([`Reregister`]; on Slurm 22.05 a dynamic node:
//!    stop slurmd, `scontrol delete nodename=X`, start `slurmd -Z` again),
//! 5. waits until Slurm shows the node idle with the new GRES, and clears the journal.
//!
//! Every step is idempotent: after a crash, the agent finds the journal at start and runs the
//! steps again for the journalled target (a done step then changes nothing).
//! A failed step leaves the node drained with the reason `dynmig: repartition failed: ...`,
//! which the controller leaves alone for an administrator.

use crate::backend::{BackendError, GpuBackend};
use crate::events::{Event, EventLog};
use crate::gres_conf;
use crate::slurm::SlurmCommands;
use anyhow::{anyhow, bail, Context, Result};
use dynmig_core::geometry::{plan_transition, GpuModel, NodeLayout, ProfileCounts};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The drain reason prefix by which the controller hands a target layout to the agent.
pub const REASON_PREFIX: &str = "dynmig: repartition to ";
/// The drain reason prefix of a failed repartition (left for an administrator).
pub const FAILED_PREFIX: &str = "dynmig: repartition failed: ";

/// Everything the agent of one node needs to know.
#[derive(Debug, Clone)]
pub struct AgentSettings {
    /// Slurm node name.
    pub node: String,
    /// GPU model of the node's GPUs.
    pub model: &'static GpuModel,
    /// Number of GPUs.
    pub gpus: usize,
    /// The node's gres.conf (rewritten atomically).
    pub gres_conf: PathBuf,
    /// Agent state: journal and pid file.
    pub state_dir: PathBuf,
    /// How often the agent looks at its node when no Epilog woke it.
    pub poll: Duration,
    /// Longest wait for the node to come back after re-registration.
    pub register_timeout: Duration,
}

impl AgentSettings {
    /// The journal file.
    pub fn journal_path(&self) -> PathBuf {
        self.state_dir.join("agent-journal.json")
    }
    /// The pid file the Epilog signals.
    pub fn pid_path(&self) -> PathBuf {
        self.state_dir.join("agent.pid")
    }
}

/// How a node re-registers a new layout with Slurm. One interface, so that newer Slurm
/// mechanisms can replace the 22.05 dynamic-node dance.
pub trait Reregister {
    /// Makes Slurm see `node` with `gres` (e.g. `gpu:3g.40gb:2`). Must be idempotent.
    fn reregister(&self, slurm: &SlurmCommands, node: &str, gres: &str) -> Result<()>;
}

/// Re-registration of a dynamic node (Slurm 22.05+, notes/slurm.md "Changing a node's MIG
/// layout"): stop slurmd, `scontrol delete nodename=X`, start `slurmd -Z --conf "... Gres=..."`.
#[derive(Debug, Clone)]
pub struct DynamicNode {
    /// The slurmd binary.
    pub slurmd: PathBuf,
    /// Arguments before `-Z`, e.g. `["-f", "/etc/slurm/slurm.conf"]`.
    pub extra_args: Vec<String>,
    /// slurmd's pid file (SlurmdPidFile).
    pub pid_file: PathBuf,
    /// Node attributes other than GRES for `--conf`, e.g. `CPUs=2 RealMemory=1000`.
    pub node_conf: String,
}

impl Reregister for DynamicNode {
    fn reregister(&self, slurm: &SlurmCommands, node: &str, gres: &str) -> Result<()> {
        stop_pid_file(&self.pid_file, Duration::from_secs(20))?;
        slurm.delete_node(node).context("scontrol delete nodename")?;
        let conf = format!("{} Gres={}", self.node_conf, gres).trim().to_string();
        let status = Command::new(&self.slurmd)
            .args(&self.extra_args)
            .args(["-Z", "-N", node, "--conf", &conf])
            .status()
            .with_context(|| format!("cannot start {}", self.slurmd.display()))?;
        if !status.success() {
            bail!(
                "{} {} -Z -N {node} --conf '{conf}' exited with {status}",
                self.slurmd.display(),
                self.extra_args.join(" ")
            );
        }
        Ok(())
    }
}

/// Stops the process in `pid_file` (SIGTERM, then waits), if it runs.
fn stop_pid_file(pid_file: &Path, wait: Duration) -> Result<()> {
    let Ok(text) = std::fs::read_to_string(pid_file) else {
        return Ok(());
    };
    let Ok(pid) = text.trim().parse::<i32>() else {
        return Ok(());
    };
    if !Path::new(&format!("/proc/{pid}")).exists() {
        return Ok(());
    }
    let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).status();
    let until = Instant::now() + wait;
    while Path::new(&format!("/proc/{pid}")).exists() {
        if Instant::now() > until {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
            std::thread::sleep(Duration::from_millis(200));
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// The agent's record of an apply under way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Journal {
    /// The target layout, in [`NodeLayout`] text form.
    pub target: String,
    /// The last step begun: `instances`, `gres`, `register`, `wait`.
    pub step: String,
    /// When the apply began (seconds since the epoch).
    pub started: u64,
}

impl Journal {
    fn load(path: &Path) -> Result<Option<Self>> {
        match std::fs::read_to_string(path) {
            Ok(t) => Ok(Some(
                serde_json::from_str(&t).with_context(|| format!("bad journal {}", path.display()))?,
            )),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
    fn save(&self, path: &Path) -> Result<()> {
        gres_conf::write_atomically(path, &serde_json::to_string(self)?)?;
        Ok(())
    }
}

/// What one look at the node did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing for the agent to do.
    Nothing,
    /// The node is drained by dynmig, but jobs still run there.
    WaitingForJobs,
    /// The target layout was applied and the node is back in service.
    Applied(String),
    /// Applying failed; the node stays drained with the reason.
    Failed(String),
}

/// The node agent of one node.
pub struct Agent<'a> {
    /// Settings.
    pub settings: AgentSettings,
    /// The GPU backend.
    pub backend: Box<dyn GpuBackend + 'a>,
    /// Slurm commands.
    pub slurm: SlurmCommands,
    /// How the node re-registers.
    pub reregister: Box<dyn Reregister + 'a>,
    /// Where events go.
    pub events: EventLog,
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Agent<'_> {
    /// Looks at the node once and acts: resumes a journalled apply, or starts one when the
    /// node is drained by dynmig and idle.
    ///
    /// # Errors
    /// Slurm or the journal cannot be read. Failures of the apply itself are reported as
    /// [`Step::Failed`] after the node is marked.
    pub fn step(&mut self) -> Result<Step> {
        let journal_path = self.settings.journal_path();
        let target_text = if let Some(j) = Journal::load(&journal_path)? {
            j.target
        } else {
            let Some(node) = self.slurm.node(&self.settings.node)? else {
                return Ok(Step::Nothing);
            };
            let Some(target) = node.reason.strip_prefix(REASON_PREFIX) else {
                return Ok(Step::Nothing);
            };
            if !node.is_drain() {
                return Ok(Step::Nothing);
            }
            if node.has_jobs() {
                return Ok(Step::WaitingForJobs);
            }
            target.trim().to_string()
        };
        match self.apply(&target_text) {
            Ok(()) => Ok(Step::Applied(target_text)),
            Err(e) => {
                let why = format!("{e:#}");
                let reason = format!("{FAILED_PREFIX}{}", why.replace(['\n', '"'], " "));
                // Leave the node drained and say why; the journal goes so that we do not retry
                // in a loop: an administrator decides (scontrol update state=resume).
                let _ = self
                    .slurm
                    .drain(&self.settings.node, &reason.chars().take(200).collect::<String>());
                let _ = std::fs::remove_file(&journal_path);
                self.events
                    .log(&Event::new("repartition_failed", &self.settings.node).detail(&why));
                Ok(Step::Failed(why))
            }
        }
    }

    /// Applies `target_text` (the journalled or drain-reason target), every step idempotent.
    ///
    /// # Errors
    /// A bad target, a backend refusal, a busy instance in the way, or Slurm not taking the
    /// node back in time.
    pub fn apply(&mut self, target_text: &str) -> Result<()> {
        let s = self.settings.clone();
        let target = NodeLayout::parse(s.model, s.gpus, target_text).map_err(|e| anyhow!("bad target: {e}"))?;
        let started = Instant::now();
        let mut journal = Journal {
            target: target.to_string(),
            step: "instances".into(),
            started: now_secs(),
        };
        journal.save(&s.journal_path())?;
        self.events
            .log(&Event::new("apply_start", &s.node).layout(&target.to_string()));

        let ops = self.apply_instances(&target)?;

        journal.step = "gres".into();
        journal.save(&s.journal_path())?;
        let gpus = self.backend.gpus()?;
        let entries = gres_conf::node_entries(&gpus, |g| self.backend.gpu_device_file(g));
        gres_conf::write_atomically(&s.gres_conf, &gres_conf::render(&entries))?;
        let gres = gres_conf::node_gres_string(&entries);

        journal.step = "register".into();
        journal.save(&s.journal_path())?;
        let registered = self.slurm.node(&s.node)?;
        let already = registered
            .as_ref()
            .is_some_and(|n| !n.is_drain() && same_gres(&crate::slurm::parse_node_gres(&n.gres), &target));
        if !already {
            self.reregister.reregister(&self.slurm, &s.node, &gres)?;
        }

        journal.step = "wait".into();
        journal.save(&s.journal_path())?;
        let until = Instant::now() + s.register_timeout;
        loop {
            if let Some(n) = self.slurm.node(&s.node)? {
                let up = !n.is_drain() && !matches!(n.state.as_str(), "down" | "unknown" | "future" | "inval");
                if up && same_gres(&crate::slurm::parse_node_gres(&n.gres), &target) {
                    break;
                }
            }
            if Instant::now() > until {
                bail!(
                    "node {} did not come back with GRES {gres} within {:?}",
                    s.node,
                    s.register_timeout
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        std::fs::remove_file(s.journal_path()).ok();
        self.events.log(
            &Event::new("applied", &s.node)
                .layout(&target.to_string())
                .detail(&format!(
                    "{ops} instance operations, {:.2} s",
                    started.elapsed().as_secs_f64()
                )),
        );
        Ok(())
    }

    /// Changes the instances of every GPU to the target, changing only what must change, and
    /// checks the result. Returns the number of instance operations done.
    fn apply_instances(&mut self, target: &NodeLayout) -> Result<usize> {
        let mut ops = 0;
        for (index, want) in target.gpus.iter().enumerate() {
            let index = index as u32;
            let gpu = self.backend.gpu(index)?;
            if !gpu.mig_enabled {
                self.backend
                    .set_mig_mode(index, true)
                    .map_err(|e| anyhow!("GPU {index}: enabling MIG: {e}"))?;
                ops += 1;
            }
            let original = gpu.layout();
            let mut done = 0;
            if let Err(e) = self.change_gpu(&gpu, want, &mut done) {
                if done == 0 {
                    return Err(e);
                }
                // Halfway: put the GPU back as it was, or say exactly what it holds now.
                return Err(match self.backend.gpu(index) {
                    Ok(now) => {
                        let mut undo = 0;
                        match self.change_gpu(&now, &original, &mut undo) {
                            Ok(()) => anyhow!("GPU {index} rolled back to {original} ({undo} operations) after: {e:#}"),
                            Err(r) => {
                                let left = self
                                    .backend
                                    .gpu(index)
                                    .map_or_else(|x| format!("unknown ({x})"), |g| describe(&g));
                                anyhow!(
                                    "GPU {index} left as {left}: rollback to {original} failed ({r:#}) after: {e:#}"
                                )
                            }
                        }
                    }
                    Err(r) => anyhow!("GPU {index} in unknown state (cannot read it: {r}) after: {e:#}"),
                });
            }
            ops += done;
        }
        Ok(ops)
    }

    /// Moves GPU `gpu` (as read just before) to `want` with [`plan_transition`] and verifies
    /// the result; `done` counts the operations that succeeded, also on failure.
    fn change_gpu(&mut self, gpu: &crate::backend::GpuState, want: &ProfileCounts, done: &mut usize) -> Result<()> {
        let index = gpu.index;
        let current: Vec<_> = gpu.instances.iter().map(|i| (i.placed, i.busy)).collect();
        let plan = plan_transition(self.settings.model, &current, want)
            .map_err(|e| anyhow!("GPU {index}: cannot reach {want}: {e}"))?;
        for d in &plan.destroy {
            let inst = gpu
                .instances
                .iter()
                .find(|i| i.placed == *d)
                .ok_or_else(|| anyhow!("GPU {index}: planned destroy of {d} which does not exist"))?;
            self.backend
                .destroy_instance(index, inst.gi_id)
                .map_err(|e| op_error(index, "destroy", &d.to_string(), e))?;
            *done += 1;
        }
        for c in &plan.create {
            self.backend
                .create_instance(index, c.profile.name, c.start)
                .map_err(|e| op_error(index, "create", &c.to_string(), e))?;
            *done += 1;
        }
        let now = ProfileCounts::of(&self.backend.gpu(index)?.placed());
        if &now != want {
            bail!("GPU {index}: after apply the layout is {now}, not {want}");
        }
        Ok(())
    }
}

/// A GPU's instances for a drain reason: `3g.40gb@0(busy) 1g.10gb@4`, or `MIG off`.
fn describe(g: &crate::backend::GpuState) -> String {
    if !g.mig_enabled {
        return "MIG off".into();
    }
    if g.instances.is_empty() {
        return "no instances".into();
    }
    let v: Vec<String> = g
        .instances
        .iter()
        .map(|i| format!("{}{}", i.placed, if i.busy { "(busy)" } else { "" }))
        .collect();
    v.join(" ")
}

fn op_error(gpu: u32, op: &str, what: &str, e: BackendError) -> anyhow::Error {
    anyhow!("GPU {gpu}: {op} {what}: {e}")
}

/// Whether a node's GRES `(type, count)` list holds exactly the target's instances.
pub fn same_gres(gres: &[(String, u32)], target: &NodeLayout) -> bool {
    let mut have: std::collections::BTreeMap<&str, u32> = std::collections::BTreeMap::new();
    for (t, n) in gres {
        *have.entry(t.as_str()).or_insert(0) += n;
    }
    have.retain(|_, n| *n > 0);
    let want = target.totals();
    have.len() == want.len() && want.iter().all(|(t, n)| have.get(t) == Some(n))
}

/// Runs the agent until killed: looks at the node every `poll`, and at once when woken by
/// SIGUSR1 (the Epilog sends it when the last job on a draining node ends).
pub fn run_forever(agent: &mut Agent<'_>) -> Result<()> {
    let woken = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGUSR1, woken.clone())?;
    std::fs::create_dir_all(&agent.settings.state_dir)?;
    std::fs::write(agent.settings.pid_path(), std::process::id().to_string())?;
    loop {
        let mut step = agent.step();
        // After a wake-up the last job may still be completing: look again quickly for a while.
        let fast_until = Instant::now() + Duration::from_secs(15);
        while matches!(step, Ok(Step::WaitingForJobs))
            && Instant::now() < fast_until
            && woken.load(std::sync::atomic::Ordering::SeqCst)
        {
            std::thread::sleep(Duration::from_millis(50));
            step = agent.step();
        }
        woken.store(false, std::sync::atomic::Ordering::SeqCst);
        // Energy per job: charge this poll's power to the jobs on each GPU (crate::power).
        let max_dt = 2.0 * agent.settings.poll.as_secs_f64() + 1.0;
        if let Err(e) = crate::power::sample_node(agent.backend.as_ref(), &agent.settings.state_dir, max_dt) {
            eprintln!("dynmig agent {}: power sample: {e}", agent.settings.node);
        }
        match step {
            Ok(Step::Applied(t)) => eprintln!("dynmig agent {}: applied {t}", agent.settings.node),
            Ok(Step::Failed(why)) => eprintln!("dynmig agent {}: repartition failed: {why}", agent.settings.node),
            Ok(_) => {}
            Err(e) => eprintln!("dynmig agent {}: {e:#}", agent.settings.node),
        }
        let until = Instant::now() + agent.settings.poll;
        while Instant::now() < until && !woken.load(std::sync::atomic::Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
