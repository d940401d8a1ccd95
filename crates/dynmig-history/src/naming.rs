//! Job names for the Epilog's records.
//!
//! The Epilog records what the node knows about a run (docs/history.md, "What is recorded")
//! and reads nothing from slurmctld: at one read per job, that was about a third of
//! slurmctld's RPCs in a cluster of short GPU jobs (docs/results/queue-2026-11-28.md). The
//! job's name (the key of the history estimate) and dynmig's decision record (`AdminComment`:
//! the estimate and its source) are in no Prolog or Epilog environment variable of any
//! release, so the store adds them:
//!
//! - the own service ([`crate::transport::Server::name_runs`]) asks Slurm for the jobs of
//!   the runs still unnamed, all in one read, every [`NAME_EVERY`]; slurmctld keeps an
//!   ended job `MinJobAge` (300 s by default), and a run whose job it no longer holds after
//!   [`NAME_WINDOW`] stays unnamed: it is listed by `dynmig history show` but is no evidence
//!   for an estimate;
//! - the slurmdbd store takes them from the `sacct` record of the job the record sits on
//!   ([`crate::accounting::records_from_sacct`]).

use std::time::Duration;

/// What Slurm says of one job: its name and dynmig's decision record's estimate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunName {
    /// Slurm job id.
    pub job_id: u64,
    /// The job's uid as Slurm gives it; `None` when Slurm's JSON gives none (then no run is
    /// named from it).
    pub uid: Option<u32>,
    /// The job's name.
    pub name: String,
    /// The estimate of dynmig's decision record, bytes (0 without one).
    pub estimate_bytes: u64,
    /// Its source (`mig-mem`, `model`, `history`, ...; empty without one).
    pub source: String,
}

/// Answers the jobs of the ids asked for that Slurm still holds (one read for all), or says
/// why it could not.
pub type Namer<'a> = &'a (dyn Fn(&[u64]) -> Result<Vec<RunName>, String> + Sync);

/// How often the own service names the runs recorded since: one Slurm read at most this
/// often, whatever the number of jobs.
pub const NAME_EVERY: Duration = Duration::from_secs(30);

/// How long after its end a run is still asked for: twice Slurm's default `MinJobAge`
/// (300 s, slurm.conf(5)), so that a service that was down a few minutes still names what
/// was spooled meanwhile.
pub const NAME_WINDOW: Duration = Duration::from_secs(600);

/// The most jobs asked for in one read.
pub const NAME_BATCH: usize = 1000;
