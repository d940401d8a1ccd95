//! [`SlurmApi`] over Slurm's client commands.

use crate::json::{has_list, parse_jobs, parse_nodes};
use crate::listing::{parse_listing, JobKey, LISTING_FORMAT};
use crate::{JobInfo, MaintReservation, NodeInfo, SlurmApi, SlurmError};
use dynmig_core::protocol::intent::NodeIntent;
use dynmig_host::process::{run, Limits, RunError};
use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// The least time the whole queue's read (`squeue --json --states=all`, once per controller
/// pass) is given, whatever [`SlurmCommands::limits`] says. Slurm writes about 8.4 KB of
/// JSON per job: with 9,000 jobs that read took 21-31 s on 26.05 and the default 20 s cut it,
/// so passes failed and were retried without end (docs/results/load-2026-11-26.md). A slow
/// pass still decides; a cut one decides nothing.
pub const QUEUE_READ_TIMEOUT: Duration = Duration::from_secs(120);

/// The most job ids one `squeue --json --jobs=...` read names (a command line of about 6 KB).
pub const JOBS_PER_READ: usize = 500;

/// The program that prints one job's JSON through libslurm where `squeue --json` cannot
/// (22.05; crates/slurm-job-reader), looked for beside the running `dynmig`.
pub const ONE_JOB_READER: &str = "dynmig-slurm-job";

/// The most jobs [`SlurmApi::jobs_by_id`] reads with [`ONE_JOB_READER`] (one process a call
/// and one RPC a job, about 20 ms for the process and well under 1 ms a job); more jobs than
/// this are read as the whole queue's JSON, once. The controller asks for at most
/// `READS_PER_PASS` (400) a pass.
pub const ONE_JOB_READS_MAX: usize = 1000;

/// Exit status of [`ONE_JOB_READER`] when Slurm answered an error (slurmctld down, ...): an
/// error of the read, as `squeue` failing would be. Any other failure (3: built for another
/// release or no libslurm; 2: it does not take these arguments, an older build; a crash)
/// means it is not usable here: remembered, and the caller reads with `squeue` instead.
const READER_SLURM_ERROR: i32 = 1;

/// Paths of the Slurm client commands and the limits every call runs under.
#[derive(Debug, Clone)]
pub struct SlurmCommands {
    /// `squeue`.
    pub squeue: PathBuf,
    /// `sinfo`.
    pub sinfo: PathBuf,
    /// `scontrol`.
    pub scontrol: PathBuf,
    /// Timeout and output cap of each call.
    pub limits: Limits,
    /// Whether nodes come from `scontrol --json show nodes` (23.02+) rather than
    /// `sinfo --json` (22.05); learnt from the first answer, shared by clones.
    nodes_via_scontrol: Arc<OnceLock<bool>>,
    /// Whether `squeue --json` ignores `--jobs` (22.05: its man page; it answers the whole
    /// queue); learnt from the first answer that holds a job not asked for.
    json_ignores_filters: Arc<OnceLock<bool>>,
    /// [`ONE_JOB_READER`], when there is one: `<program> ID` prints `{"jobs":[...]}` as
    /// 22.05's `squeue --json` writes it.
    pub one_job_reader: Option<PathBuf>,
    /// Why [`Self::one_job_reader`] cannot be used here, once it said so.
    reader_not_usable: Arc<OnceLock<String>>,
    /// Whether `squeue --version` says 22.05, asked once.
    commands_2205: Arc<OnceLock<bool>>,
}

impl Default for SlurmCommands {
    /// The commands on `PATH`, 20 s and 256 MiB a call.
    fn default() -> Self {
        Self {
            squeue: "squeue".into(),
            sinfo: "sinfo".into(),
            scontrol: "scontrol".into(),
            limits: Limits::default(),
            nodes_via_scontrol: Arc::default(),
            json_ignores_filters: Arc::default(),
            one_job_reader: None,
            reader_not_usable: Arc::default(),
            commands_2205: Arc::default(),
        }
    }
}

impl SlurmCommands {
    /// The commands `[paths]` of the config names, with the default limits, and
    /// [`ONE_JOB_READER`] when it is beside the running program and that program is `dynmig`
    /// (packaged: both in /usr/bin; built: both in target/release).
    pub fn from_config(config: &dynmig_core::config::Config) -> Self {
        let p = &config.paths;
        let reader = std::env::current_exe().ok().and_then(|exe| {
            (exe.file_name()? == "dynmig")
                .then(|| exe.with_file_name(ONE_JOB_READER))
                .filter(|r| r.is_file())
        });
        Self {
            squeue: p.squeue.clone(),
            sinfo: p.sinfo.clone(),
            scontrol: p.scontrol.clone(),
            one_job_reader: reader,
            ..Self::default()
        }
    }

    /// Whether the Slurm commands are 22.05's (`squeue --version`: `slurm 22.05.8`, Debian's
    /// `slurm-wlm 22.05.8`), asked once with a 5 s limit (squeue retries a missing slurm.conf
    /// for 60 s); unknown is no. The reader is built for 22.05 and used with 22.05 only: a
    /// 22.05 libslurm beside a later slurmctld gets "Incompatible versions" as an unspecified
    /// error (seen when the host's dynmig ran against the trixie chroot's 24.11).
    fn commands_are_2205(&self) -> bool {
        *self.commands_2205.get_or_init(|| {
            let limits = Limits {
                timeout: Duration::from_secs(5),
                max_output: 4096,
            };
            run(self.squeue.as_os_str(), &["--version"], limits)
                .ok()
                .and_then(|out| out.split_whitespace().last().map(|v| v.starts_with("22.05.")))
                .unwrap_or(false)
        })
    }

    /// Jobs' JSON through [`Self::one_job_reader`] (at most [`ONE_JOB_READS_MAX`] ids):
    /// `Ok(None)` when there is none or it is not usable with this Slurm (remembered; the
    /// caller reads with `squeue`), else the jobs slurmctld holds of those asked for.
    fn read_some(&self, ids: &[u32]) -> Result<Option<Vec<JobInfo>>, SlurmError> {
        let Some(reader) = &self.one_job_reader else {
            return Ok(None);
        };
        if self.reader_not_usable.get().is_some() || !self.commands_are_2205() {
            return Ok(None);
        }
        let limits = Limits {
            timeout: self.limits.timeout,
            max_output: 1 << 20,
        };
        let args: Vec<String> = ids.iter().map(u32::to_string).collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        match run(reader.as_os_str(), &args, limits) {
            Ok(text) => {
                let asked: HashSet<u32> = ids.iter().copied().collect();
                Ok(Some(
                    parse_jobs(&text)?
                        .into_iter()
                        .filter(|j| asked.contains(&j.id))
                        .collect(),
                ))
            }
            Err(RunError::Failed { status, stderr, .. }) if status.code() != Some(READER_SLURM_ERROR) => {
                eprintln!(
                    "dynmig: {} is not usable here ({status}: {stderr}); reading jobs with squeue",
                    reader.display()
                );
                let _ = self.reader_not_usable.set(stderr);
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// `squeue --json --local [--states=all] --jobs=<ids>`; `None` when squeue answers
    /// "Invalid job id" (one job asked for, and slurmctld no longer holds it).
    fn squeue_json_of(&self, ids: &[u32], all_states: bool) -> Result<Option<String>, SlurmError> {
        let list = format!(
            "--jobs={}",
            ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
        );
        let mut args = vec!["--json", "--local"];
        if all_states {
            args.push("--states=all");
        }
        args.push(&list);
        match run(self.squeue.as_os_str(), &args, self.queue_limits()) {
            Ok(text) => Ok(Some(text)),
            Err(RunError::Failed { stderr, .. }) if stderr.contains("Invalid job id") => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    fn scontrol(&self, args: &[&str]) -> Result<String, SlurmError> {
        Ok(run(self.scontrol.as_os_str(), args, self.limits)?)
    }

    /// `now+<seconds>` for a start at `start` (seconds since the epoch): relative to
    /// slurmctld's clock, so no time zone is involved.
    fn start_time(start: i64) -> String {
        format!("now+{}", (start - dynmig_host::clock::now_secs()).max(0))
    }

    /// The limits of the whole queue's read: [`Self::limits`] with at least
    /// [`QUEUE_READ_TIMEOUT`].
    pub fn queue_limits(&self) -> Limits {
        Limits {
            timeout: self.limits.timeout.max(QUEUE_READ_TIMEOUT),
            ..self.limits
        }
    }

    fn update_job(&self, job: u32, field: &str, value: &str) -> Result<(), SlurmError> {
        self.scontrol(&["update", &format!("jobid={job}"), &format!("{field}={value}")])
            .map(drop)
    }
}

impl SlurmApi for SlurmCommands {
    fn jobs(&self) -> Result<Vec<JobInfo>, SlurmError> {
        parse_jobs(&run(
            self.squeue.as_os_str(),
            &["--json", "--local", "--states=all"],
            self.queue_limits(),
        )?)
    }

    fn job(&self, id: u32) -> Result<Option<JobInfo>, SlurmError> {
        // 22.05: one job's RPC through libslurm, where the reader is installed and usable.
        if let Some(jobs) = self.read_some(&[id])? {
            return Ok(jobs.into_iter().find(|j| j.id == id));
        }
        // 22.05's squeue ignores filters with --json (its man page); later releases honour
        // them. Either way the job is picked out here.
        let out = run(
            self.squeue.as_os_str(),
            &["--json", "--local", "--states=all", &format!("--jobs={id}")],
            self.limits,
        );
        match out {
            Ok(text) => Ok(parse_jobs(&text)?.into_iter().find(|j| j.id == id)),
            // A job slurmctld no longer holds: squeue fails with "Invalid job id".
            Err(RunError::Failed { stderr, .. }) if stderr.contains("Invalid job id") => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    fn job_listing(&self) -> Result<Option<HashMap<u32, JobKey>>, SlurmError> {
        // Text, to say which jobs changed (crate::listing): only its closed-vocabulary fields
        // are ever used as data (a state or reason, dynmig_controller::queue::in_place).
        let out = run(
            self.squeue.as_os_str(),
            &[
                "--noheader",
                "--local",
                "--states=all",
                &format!("--format={LISTING_FORMAT}"),
            ],
            self.queue_limits(),
        )?;
        let keys = parse_listing(&out);
        if keys.is_empty() && !out.trim().is_empty() {
            // Lines but no job: not the listing asked for (a wrapper or a Slurm that ignores
            // --format). The whole queue's JSON is read instead.
            return Ok(None);
        }
        Ok(Some(keys))
    }

    fn jobs_by_id(&self, ids: &[u32]) -> Result<Vec<JobInfo>, SlurmError> {
        let want: HashSet<u32> = ids.iter().copied().collect();
        if want.is_empty() {
            return Ok(Vec::new());
        }
        if self.json_ignores_filters.get() == Some(&true) {
            // 22.05: the changed jobs through libslurm, one RPC each, else the whole queue.
            if want.len() <= ONE_JOB_READS_MAX {
                let ids: Vec<u32> = want.iter().copied().collect();
                if let Some(found) = self.read_some(&ids)? {
                    return Ok(found);
                }
            }
            return self.jobs();
        }
        let mut found = Vec::with_capacity(want.len());
        for chunk in ids.chunks(JOBS_PER_READ) {
            // squeue's default states (pending, running, suspended, completing): an array's
            // ended tasks stay out of the answer (SlurmApi::jobs_by_id).
            let Some(text) = self.squeue_json_of(chunk, false)? else {
                continue;
            };
            let jobs = parse_jobs(&text)?;
            let asked: HashSet<u32> = chunk.iter().copied().collect();
            if crate::json::holds_jobs_not_asked(&text, &asked) {
                // 22.05: the answer is the whole queue; it holds every job asked for.
                let _ = self.json_ignores_filters.set(true);
                return Ok(jobs);
            }
            found.extend(jobs);
        }
        Ok(found)
    }

    fn jobs_in_any_state(&self, ids: &[u32]) -> Result<Vec<JobInfo>, SlurmError> {
        let want: HashSet<u32> = ids.iter().copied().collect();
        if want.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<u32> = want.iter().copied().collect();
        // 22.05: through libslurm (the reader loads the whole queue once for many ids).
        if ids.len() <= ONE_JOB_READS_MAX {
            if let Some(found) = self.read_some(&ids)? {
                return Ok(found);
            }
        }
        let mut found = Vec::with_capacity(want.len());
        for chunk in ids.chunks(JOBS_PER_READ) {
            // All states: the jobs asked for have ended. An array id asked for answers its
            // tasks too; only the ids asked for are kept.
            let Some(text) = self.squeue_json_of(chunk, true)? else {
                continue;
            };
            found.extend(parse_jobs(&text)?.into_iter().filter(|j| want.contains(&j.id)));
        }
        Ok(found)
    }

    fn nodes(&self) -> Result<Vec<NodeInfo>, SlurmError> {
        // 22.05's `sinfo --json` lists the nodes; from 23.02 it lists partition and state
        // groups ("sinfo") and the nodes come from `scontrol --json show nodes`.
        let from_scontrol = || parse_nodes(&self.scontrol(&["--json", "show", "nodes"])?);
        if self.nodes_via_scontrol.get() == Some(&true) {
            return from_scontrol();
        }
        let out = run(self.sinfo.as_os_str(), &["--json"], self.limits)?;
        match parse_nodes(&out) {
            Ok(nodes) => {
                let _ = self.nodes_via_scontrol.set(false);
                Ok(nodes)
            }
            Err(_) if has_list(&out, "sinfo") => {
                let _ = self.nodes_via_scontrol.set(true);
                from_scontrol()
            }
            Err(e) => Err(e),
        }
    }

    fn node(&self, name: &str) -> Result<Option<NodeInfo>, SlurmError> {
        // 23.02+: `scontrol --json show node NAME` writes the JSON of that node only (it still
        // loads every node and partition: two RPCs, as for the whole list), so a node agent's
        // read does not grow with the cluster. An unknown node is an empty list. 22.05's
        // `sinfo --json` has no such filter: the whole list, picked here.
        if self.nodes_via_scontrol.get() == Some(&true) {
            let out = self.scontrol(&["--json", "show", "node", name])?;
            return Ok(parse_nodes(&out)?.into_iter().find(|n| n.name == name));
        }
        Ok(self.nodes()?.into_iter().find(|n| n.name == name))
    }

    fn drain(&self, node: &str, intent: &NodeIntent) -> Result<(), SlurmError> {
        self.scontrol(&[
            "update",
            &format!("nodename={node}"),
            "state=drain",
            &format!("reason={}", intent.encode()),
        ])
        .map(drop)
    }

    fn resume(&self, node: &str) -> Result<(), SlurmError> {
        self.scontrol(&["update", &format!("nodename={node}"), "state=resume"])
            .map(drop)
    }

    fn delete_node(&self, node: &str) -> Result<(), SlurmError> {
        match self.scontrol(&["delete", &format!("nodename={node}")]) {
            Ok(_) => Ok(()),
            Err(SlurmError::Command(RunError::Failed { stderr, .. }))
                if stderr.contains("Invalid node name") || stderr.contains("not found") =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    fn set_node_extra(&self, node: &str, extra: &str) -> Result<(), SlurmError> {
        self.scontrol(&["update", &format!("nodename={node}"), &format!("extra={extra}")])
            .map(drop)
    }

    fn requeue_hold(&self, job: u32) -> Result<(), SlurmError> {
        self.scontrol(&["requeuehold", &job.to_string()]).map(drop)
    }

    fn release(&self, job: u32) -> Result<(), SlurmError> {
        self.scontrol(&["release", &job.to_string()]).map(drop)
    }

    fn set_job_tres_per_node(&self, job: u32, tres: &str) -> Result<(), SlurmError> {
        self.update_job(job, "TresPerNode", tres)
    }

    fn set_job_comment(&self, job: u32, comment: &str) -> Result<(), SlurmError> {
        self.update_job(job, "Comment", comment)
    }

    fn set_job_admin_comment(&self, job: u32, comment: &str) -> Result<(), SlurmError> {
        self.update_job(job, "AdminComment", comment)
    }

    fn create_reservation(&self, r: &MaintReservation) -> Result<(), SlurmError> {
        self.scontrol(&[
            "create",
            "reservation",
            &format!("ReservationName={}", r.name),
            &format!("Nodes={}", r.node),
            &format!("StartTime={}", Self::start_time(r.start)),
            &format!("Duration={}", r.minutes()),
            "Users=root",
            "Flags=MAINT,IGNORE_JOBS",
        ])
        .map(drop)
    }

    fn update_reservation_start(&self, name: &str, start: i64) -> Result<(), SlurmError> {
        self.scontrol(&[
            "update",
            &format!("ReservationName={name}"),
            &format!("StartTime={}", Self::start_time(start)),
        ])
        .map(drop)
    }

    fn delete_reservation(&self, name: &str) -> Result<bool, SlurmError> {
        match self.scontrol(&["delete", &format!("ReservationName={name}")]) {
            Ok(_) => Ok(true),
            Err(SlurmError::Command(RunError::Failed { stderr, .. })) if reservation_missing(&stderr) => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn reservation_exists(&self, name: &str) -> Result<bool, SlurmError> {
        match run(
            self.scontrol.as_os_str(),
            &["show", &format!("ReservationName={name}")],
            self.limits,
        ) {
            Ok(_) => Ok(true),
            // scontrol prints "Reservation X not found" on stdout and exits 1 (info_res.c,
            // 22.05 to 25.11); a failure to reach slurmctld is printed on stderr.
            Err(RunError::Failed { stderr, .. }) if stderr.is_empty() || reservation_missing(&stderr) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

/// Whether scontrol's error says the reservation does not exist (tried on 22.05.8: `delete`
/// prints `delete_reservation ReservationName=X: Requested reservation is invalid`).
fn reservation_missing(stderr: &str) -> bool {
    stderr.contains("not found") || stderr.contains("Requested reservation is invalid")
}

/// Runs `sbatch --parsable args...` with the limits of `c` and returns the job id (dev tools
/// and tests; production code never submits jobs).
///
/// # Errors
/// sbatch failed, or printed no job id.
pub fn sbatch(program: &OsStr, args: &[String], limits: Limits) -> Result<u32, SlurmError> {
    let mut a = vec!["--parsable".to_string()];
    a.extend_from_slice(args);
    let out = run(program, &a, limits)?;
    out.trim()
        .split(';')
        .next()
        .unwrap_or("")
        .parse()
        .map_err(|_| SlurmError::Json {
            what: "sbatch --parsable",
            why: format!("printed '{}', not a job id", out.trim()),
        })
}

#[cfg(test)]
mod tests;
