//! Reading and changing Slurm state from a separate process, through Slurm's own commands.
//!
//! `squeue --json` and `sinfo --json` are the stable way for a process outside slurmctld to
//! read jobs and nodes (notes/slurm.md; OpenAPI v0.0.38 data on 22.05, newer versions add
//! fields and wrap some numbers in `{"set":..,"number":..}` objects, which [`num`] accepts).
//! Changes go through `scontrol`. Every command has a timeout so that a hung slurmctld cannot
//! hang the controller or the agent.

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Paths of the Slurm client commands.
#[derive(Debug, Clone)]
pub struct SlurmCommands {
    /// `squeue`.
    pub squeue: PathBuf,
    /// `sinfo`.
    pub sinfo: PathBuf,
    /// `scontrol`.
    pub scontrol: PathBuf,
    /// `sbatch`.
    pub sbatch: PathBuf,
    /// Longest a command may run.
    pub timeout: Duration,
}

impl Default for SlurmCommands {
    fn default() -> Self {
        Self {
            squeue: "squeue".into(),
            sinfo: "sinfo".into(),
            scontrol: "scontrol".into(),
            sbatch: "sbatch".into(),
            timeout: Duration::from_secs(20),
        }
    }
}

/// One job as `squeue --json` reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobInfo {
    /// Job id.
    pub id: u64,
    /// Job name.
    pub name: String,
    /// Base state: `PENDING`, `RUNNING`, `COMPLETED`, `FAILED`, ...
    pub state: String,
    /// Why a pending job waits (`Resources`, `Priority`, ...).
    pub reason: String,
    /// GPU request per node as Slurm holds it, e.g. `gres:gpu:2g.20gb:1`.
    pub tres_per_node: String,
    /// Allocated nodes (hostlist), empty while pending.
    pub nodes: String,
    /// Times in seconds since the epoch; 0 when not set.
    pub submit_time: i64,
    /// Start time (expected start for pending jobs), seconds since the epoch.
    pub start_time: i64,
    /// End time (time limit end for running jobs), seconds since the epoch.
    pub end_time: i64,
    /// The admin comment, where job_submit/dynmig records its decision.
    pub admin_comment: String,
    /// Exit code of the batch script, when finished.
    pub exit_code: i64,
}

/// One node as `sinfo --json` reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeInfo {
    /// Node name.
    pub name: String,
    /// Base state, lower case: `idle`, `mixed`, `allocated`, `down`, ...
    pub state: String,
    /// State flags, upper case: `DRAIN`, `COMPLETING`, `DYNAMIC`, ...
    pub flags: Vec<String>,
    /// The drain/down reason.
    pub reason: String,
    /// Configured GRES, e.g. `gpu:3g.40gb:2(S:0),gpu:1g.10gb:1`.
    pub gres: String,
    /// GRES in use, e.g. `gpu:3g.40gb:1(IDX:0),gpu:1g.10gb:0(IDX:N/A)`.
    pub gres_used: String,
    /// When slurmd last started (seconds since the epoch): for a dynamic node, when its
    /// current layout was registered.
    pub slurmd_start_time: i64,
    /// CPUs allocated to jobs.
    pub alloc_cpus: i64,
    /// When the reason was set (seconds since the epoch; 0 if unknown).
    pub reason_changed_at: i64,
}

impl NodeInfo {
    /// Whether the node is drained or draining.
    pub fn is_drain(&self) -> bool {
        self.flags.iter().any(|f| f == "DRAIN")
    }

    /// Whether jobs run (or are completing) on the node.
    pub fn has_jobs(&self) -> bool {
        matches!(self.state.as_str(), "allocated" | "mixed" | "completing")
            || self.flags.iter().any(|f| f == "COMPLETING")
            || self.alloc_cpus > 0
    }
}

/// A number in Slurm's JSON: a plain number, or `{"set": true, "number": n}` (v0.0.39+).
pub fn num(v: &Value) -> i64 {
    match v {
        Value::Number(n) => n.as_i64().unwrap_or(0),
        Value::Object(o) => {
            if o.get("set").and_then(Value::as_bool) == Some(false) {
                0
            } else {
                o.get("number").map(num).unwrap_or(0)
            }
        }
        _ => 0,
    }
}

fn text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(","),
        _ => String::new(),
    }
}

/// Reads the job list of `squeue --json` output.
///
/// # Errors
/// Output that is not JSON or has no `jobs` array.
pub fn parse_jobs(json: &str) -> Result<Vec<JobInfo>> {
    let v: Value = serde_json::from_str(json).context("squeue --json output is not JSON")?;
    let jobs = v
        .get("jobs")
        .and_then(Value::as_array)
        .ok_or_else(|| anyhow!("squeue --json output has no 'jobs'"))?;
    Ok(jobs
        .iter()
        .map(|j| {
            // 23.02+: job_state is a list of strings; 22.05: a string.
            let state = match j.get("job_state") {
                Some(Value::Array(a)) => a.first().and_then(Value::as_str).unwrap_or("").to_string(),
                other => text(other),
            };
            let exit_code = match j.get("exit_code") {
                Some(Value::Object(o)) if o.contains_key("return_code") => num(&o["return_code"]),
                Some(v) => num(v),
                None => 0,
            };
            JobInfo {
                id: num(j.get("job_id").unwrap_or(&Value::Null)) as u64,
                name: text(j.get("name")),
                state,
                reason: text(j.get("state_reason")),
                tres_per_node: text(j.get("tres_per_node")),
                nodes: text(j.get("nodes")),
                submit_time: num(j.get("submit_time").unwrap_or(&Value::Null)),
                start_time: num(j.get("start_time").unwrap_or(&Value::Null)),
                end_time: num(j.get("end_time").unwrap_or(&Value::Null)),
                admin_comment: text(j.get("admin_comment")),
                exit_code,
            }
        })
        .collect())
}

/// Reads the node list of `sinfo --json` (or `scontrol show node --json`) output.
///
/// # Errors
/// Output that is not JSON or has no `nodes` array.
pub fn parse_nodes(json: &str) -> Result<Vec<NodeInfo>> {
    let v: Value = serde_json::from_str(json).context("sinfo --json output is not JSON")?;
    let nodes = v
        .get("nodes")
        .and_then(Value::as_array)
        .ok_or_else(|| anyhow!("sinfo --json output has no 'nodes'"))?;
    Ok(nodes
        .iter()
        .map(|n| {
            // 22.05: "state": "idle", "state_flags": ["DRAIN"]; 23.02+: "state": ["IDLE","DRAIN"].
            let (state, mut flags) = match n.get("state") {
                Some(Value::Array(a)) => {
                    let all: Vec<String> = a.iter().filter_map(Value::as_str).map(str::to_uppercase).collect();
                    (
                        all.first().cloned().unwrap_or_default().to_lowercase(),
                        all.into_iter().skip(1).collect(),
                    )
                }
                other => (text(other).to_lowercase(), Vec::new()),
            };
            if let Some(Value::Array(a)) = n.get("state_flags") {
                flags.extend(a.iter().filter_map(Value::as_str).map(str::to_uppercase));
            }
            NodeInfo {
                name: text(n.get("name")),
                state,
                flags,
                reason: text(n.get("reason")),
                gres: text(n.get("gres")),
                gres_used: text(n.get("gres_used")),
                slurmd_start_time: num(n.get("slurmd_start_time").unwrap_or(&Value::Null)),
                alloc_cpus: num(n.get("alloc_cpus").unwrap_or(&Value::Null)),
                reason_changed_at: num(n.get("reason_changed_at").unwrap_or(&Value::Null)),
            }
        })
        .collect())
}

/// Reads a node's GRES string (`gpu:3g.40gb:2(S:0),gpu:1g.10gb:1`) into
/// `(type, count)` pairs; entries of other GRES and untyped GPUs are left out.
pub fn parse_node_gres(gres: &str) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    // Split on commas that are not inside parentheses ("(S:0-1)" has none, "(IDX:0,2)" has).
    let mut depth = 0;
    let mut start = 0;
    let bytes: Vec<char> = gres.chars().collect();
    let mut parts = Vec::new();
    for (i, c) in bytes.iter().enumerate() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(bytes[start..i].iter().collect::<String>());
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(bytes[start..].iter().collect::<String>());
    for part in parts {
        let part = part.split('(').next().unwrap_or("").trim();
        let part = part
            .strip_prefix("gres/")
            .or_else(|| part.strip_prefix("gres:"))
            .unwrap_or(part);
        let fields: Vec<&str> = part.split(':').collect();
        if fields.len() == 3 && fields[0] == "gpu" {
            if let Ok(n) = fields[2].parse() {
                out.push((fields[1].to_string(), n));
            }
        }
    }
    out
}

impl SlurmCommands {
    fn run(&self, program: &PathBuf, args: &[&str]) -> Result<String> {
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot run {}", program.display()))?;
        let pid = child.id();
        // The output is read while the command runs (squeue --json of a busy cluster is far
        // larger than a pipe's buffer), on a thread, so that a hung command can be killed.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        let out = match rx.recv_timeout(self.timeout) {
            Ok(out) => out?,
            Err(_) => {
                let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
                bail!(
                    "{} {} timed out after {:?}",
                    program.display(),
                    args.join(" "),
                    self.timeout
                );
            }
        };
        if !out.status.success() {
            bail!(
                "{} {} failed ({}): {}",
                program.display(),
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Every job slurmctld still holds (pending, running and recently finished).
    pub fn jobs(&self) -> Result<Vec<JobInfo>> {
        parse_jobs(&self.run(&self.squeue, &["--json", "--states=all"])?)
    }

    /// Every node.
    pub fn nodes(&self) -> Result<Vec<NodeInfo>> {
        parse_nodes(&self.run(&self.sinfo, &["--json"])?)
    }

    /// One node, or `None` if Slurm does not know it (a dynamic node between delete and
    /// re-registration). Reads `sinfo --json` (22.05's scontrol has no `--json`) and picks
    /// the node out.
    pub fn node(&self, name: &str) -> Result<Option<NodeInfo>> {
        Ok(self.nodes()?.into_iter().find(|n| n.name == name))
    }

    /// Drains `node` with `reason` (running jobs go on; no new job starts there).
    pub fn drain(&self, node: &str, reason: &str) -> Result<()> {
        self.run(
            &self.scontrol,
            &[
                "update",
                &format!("nodename={node}"),
                "state=drain",
                &format!("reason={reason}"),
            ],
        )
        .map(drop)
    }

    /// Returns a drained node to service.
    pub fn resume(&self, node: &str) -> Result<()> {
        self.run(&self.scontrol, &["update", &format!("nodename={node}"), "state=resume"])
            .map(drop)
    }

    /// Deletes a dynamic node (refused by slurmctld while jobs run there). A node that is
    /// already gone counts as deleted, so that the step can be repeated.
    pub fn delete_node(&self, node: &str) -> Result<()> {
        match self.run(&self.scontrol, &["delete", &format!("nodename={node}")]) {
            Ok(_) => Ok(()),
            Err(e) if e.to_string().contains("Invalid node name") || e.to_string().contains("not found") => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Runs `sbatch --parsable args...` and returns the job id.
    pub fn sbatch(&self, args: &[&str]) -> Result<u64> {
        let mut a = vec!["--parsable"];
        a.extend_from_slice(args);
        let out = self.run(&self.sbatch, &a)?;
        out.trim()
            .split(';')
            .next()
            .unwrap_or("")
            .parse()
            .with_context(|| format!("sbatch printed '{}'", out.trim()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_gres_strings() {
        assert_eq!(
            parse_node_gres("gpu:3g.40gb:2(S:0),gpu:1g.10gb:1"),
            vec![("3g.40gb".to_string(), 2), ("1g.10gb".to_string(), 1)]
        );
        assert_eq!(
            parse_node_gres("gpu:7g.80gb:1(IDX:0,1),gres/gpu:2g.20gb:3"),
            vec![("7g.80gb".into(), 1), ("2g.20gb".into(), 3)]
        );
        assert!(parse_node_gres("(null)").is_empty());
    }

    #[test]
    fn numbers_old_and_new_forms() {
        assert_eq!(num(&serde_json::json!(5)), 5);
        assert_eq!(
            num(&serde_json::json!({"set": true, "infinite": false, "number": 7})),
            7
        );
        assert_eq!(num(&serde_json::json!({"set": false, "number": 7})), 0);
    }

    #[test]
    fn nodes_2205_and_2302_state_forms() {
        let old = r#"{"nodes":[{"name":"n1","state":"idle","state_flags":["DRAIN"],"reason":"dynmig: repartition to 1x7g.80gb","gres":"gpu:7g.80gb:1","gres_used":"","slurmd_start_time":10,"alloc_cpus":0}]}"#;
        let n = &parse_nodes(old).unwrap()[0];
        assert_eq!((n.state.as_str(), n.is_drain(), n.has_jobs()), ("idle", true, false));
        let new = r#"{"nodes":[{"name":"n1","state":["MIXED","DRAIN"],"reason":"x","gres":"","alloc_cpus":2}]}"#;
        let n = &parse_nodes(new).unwrap()[0];
        assert_eq!((n.state.as_str(), n.is_drain(), n.has_jobs()), ("mixed", true, true));
    }
}

#[cfg(test)]
mod run_tests {
    use super::*;

    #[test]
    fn large_output_is_read_while_the_command_runs() {
        // 1 MiB on stdout: more than a pipe holds, so a reader that waits first would hang.
        let c = SlurmCommands {
            squeue: "sh".into(),
            timeout: Duration::from_secs(10),
            ..SlurmCommands::default()
        };
        let out = c
            .run(&c.squeue, &["-c", "head -c 1048576 /dev/zero | tr '\\\\0' x"])
            .unwrap();
        assert_eq!(out.len(), 1 << 20);
    }

    #[test]
    fn a_hung_command_times_out() {
        let c = SlurmCommands {
            squeue: "sleep".into(),
            timeout: Duration::from_millis(300),
            ..SlurmCommands::default()
        };
        let err = c.run(&c.squeue, &["5"]).unwrap_err().to_string();
        assert!(err.contains("timed out"), "{err}");
    }
}
