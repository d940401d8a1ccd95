//! The queue's change listing: one short line per job, read every controller pass to learn
//! *which* jobs changed; of *what* they are only closed-vocabulary fields are ever taken (a
//! state or a reason: dynmig_controller::queue::in_place), never the request.
//!
//! `squeue --json` costs about 8.4 KB and 3 ms per job on 26.05 (84 MB and 21-31 s for 9,000
//! jobs, docs/results/load-2026-11-26.md); the same jobs as text are 0.75 MB in 0.19 s. The
//! controller therefore lists the queue as text with only the fields whose change matters to
//! it ([`LISTING_FORMAT`]) and reads the JSON of the jobs whose line changed
//! ([`crate::SlurmApi::jobs_by_id`]). This module only says whether a line changed:
//!
//! - every field but the last comes from a closed vocabulary (a number, Slurm's state and
//!   reason names, a time limit) and is checked against it;
//! - the last field, the per-node TRES request, is the only one a user shapes; it is compared
//!   as opaque bytes and never used as data;
//! - a line that fails a check, or a job id listed twice (a request crafted to look like
//!   another job's line), makes that job [`JobKey::Unreadable`]: its JSON is read every pass.
//!
//! So no text a user wrote is parsed into a value dynmig acts on; what a job is always comes
//! from Slurm's JSON ([`crate::json::parse_jobs`]).

use std::collections::HashMap;

/// The `squeue --format` of the listing (its fields separated by `|`): job id (`%A`, unique
/// per array element), state (`%T`), reason (`%r`), priority (`%Q`, 0 while held), time limit
/// (`%l`) and the per-node TRES request (`%b`, last because a user shapes it).
pub const LISTING_FORMAT: &str = "%A|%T|%r|%Q|%l|%b";

/// What the listing says of one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobKey {
    /// The job's fields as listed; a job whose key differs from the last pass's changed.
    Listed {
        /// `%T`, e.g. `PENDING`.
        state: String,
        /// `%r`, e.g. `Resources`.
        reason: String,
        /// Whether `%Q` is 0 (held). The priority itself changes every scheduling cycle
        /// (age factor) and is no change for dynmig.
        held: bool,
        /// `%Q`, for the order of reads: the highest priority is read first.
        priority: u64,
        /// `%l`, e.g. `1:00:00` or `UNLIMITED`.
        time_limit: String,
        /// `%b`, opaque.
        tres_per_node: String,
    },
    /// The line failed a check or the id was listed twice: read the job every pass.
    Unreadable,
}

impl JobKey {
    /// Whether `self` and `other` say the same: never for an [`JobKey::Unreadable`] key.
    pub fn same(&self, other: &JobKey) -> bool {
        match (self, other) {
            (JobKey::Unreadable, _) | (_, JobKey::Unreadable) => false,
            (
                JobKey::Listed {
                    state,
                    reason,
                    held,
                    time_limit,
                    tres_per_node,
                    ..
                },
                JobKey::Listed {
                    state: s2,
                    reason: r2,
                    held: h2,
                    time_limit: t2,
                    tres_per_node: b2,
                    ..
                },
            ) => state == s2 && reason == r2 && held == h2 && time_limit == t2 && tres_per_node == b2,
        }
    }

    /// `%Q`, 0 for an unreadable key.
    pub fn priority(&self) -> u64 {
        match self {
            JobKey::Listed { priority, .. } => *priority,
            JobKey::Unreadable => 0,
        }
    }

    /// Whether Slurm still holds the job as not ended (not one of [`ENDED_STATES`]); an
    /// unreadable key counts as not ended.
    pub fn active(&self) -> bool {
        match self {
            JobKey::Listed { state, .. } => !is_ended_state(state),
            JobKey::Unreadable => true,
        }
    }

    /// Whether the job is pending (an unreadable line counts as pending).
    pub fn pending(&self) -> bool {
        match self {
            JobKey::Listed { state, .. } => state == "PENDING",
            JobKey::Unreadable => true,
        }
    }
}

/// The job states `%T` prints for a job that has ended (SchedMD's squeue man page, "JOB STATE
/// CODES"): `squeue` leaves them out unless asked with `--states`. Every other state (pending,
/// running, suspended, completing, configuring, requeued, stage-out, ...) is a job still held.
pub const ENDED_STATES: &[&str] = &[
    "BOOT_FAIL",
    "CANCELLED",
    "COMPLETED",
    "DEADLINE",
    "FAILED",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "TIMEOUT",
];

/// Whether `state` (as `%T` prints it) is one of [`ENDED_STATES`].
pub fn is_ended_state(state: &str) -> bool {
    ENDED_STATES.contains(&state)
}

fn word(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The reason's name: `%r` is the name alone (`Resources`), `(null)`, or for
/// `ReqNodeNotAvail` the name and the nodes Slurm holds unavailable
/// (`ReqNodeNotAvail, UnavailableNodes:n[1-2]`: node names, an administrator's). The nodes are
/// checked as a hostlist and dropped (the JSON's `state_reason` is the name alone; which nodes
/// are unavailable is no change of the job). `None`: not a reason.
fn reason_name(s: &str) -> Option<&str> {
    if s == "(null)" || word(s) {
        return Some(s);
    }
    let (name, nodes) = s.split_once(", UnavailableNodes:")?;
    let hostlist = nodes.len() <= 4096
        && nodes
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.,[]".contains(&b));
    (word(name) && hostlist).then_some(name)
}

fn time_limit(s: &str) -> bool {
    matches!(s, "UNLIMITED" | "NOT_SET" | "INVALID")
        || (!s.is_empty() && s.len() <= 16 && s.bytes().all(|b| b.is_ascii_digit() || b == b':' || b == b'-'))
}

/// Parses one listing line, `None` when the job id itself is unreadable (the line is
/// dropped: it names no job).
fn line(l: &str) -> Option<(u32, JobKey)> {
    let mut f = l.splitn(6, '|');
    let id = f.next()?.trim();
    if id.is_empty() || id.len() > 10 || !id.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let id: u32 = id.parse().ok()?;
    let key = (|| {
        let state = f.next()?.trim();
        let reason = f.next()?.trim();
        let priority = f.next()?.trim();
        let limit = f.next()?.trim();
        let tres = f.next()?;
        let reason = reason_name(reason)?;
        if !word(state) || !time_limit(limit) {
            return None;
        }
        let priority: u64 = priority.parse().ok()?;
        Some(JobKey::Listed {
            state: state.to_string(),
            reason: reason.to_string(),
            held: priority == 0,
            priority,
            time_limit: limit.to_string(),
            tres_per_node: tres.to_string(),
        })
    })()
    .unwrap_or(JobKey::Unreadable);
    Some((id, key))
}

/// Parses `squeue --noheader --format=`[`LISTING_FORMAT`] output: each job id once, with its
/// key (module docs for what makes a key [`JobKey::Unreadable`]).
pub fn parse_listing(text: &str) -> HashMap<u32, JobKey> {
    let mut keys: HashMap<u32, JobKey> = HashMap::new();
    for l in text.lines().filter(|l| !l.trim().is_empty()) {
        if let Some((id, key)) = line(l) {
            keys.entry(id).and_modify(|k| *k = JobKey::Unreadable).or_insert(key);
        }
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(state: &str, reason: &str, prio: u64, limit: &str, tres: &str) -> JobKey {
        JobKey::Listed {
            state: state.into(),
            reason: reason.into(),
            held: prio == 0,
            priority: prio,
            time_limit: limit.into(),
            tres_per_node: tres.into(),
        }
    }

    #[test]
    fn each_field_is_read_and_the_request_is_kept_opaque() {
        let keys = parse_listing(
            "101|PENDING|Resources|4294901759|1:00:00|gres:gpu:2g.20gb:1\n\
             102|RUNNING|None|4294901758|UNLIMITED|gres/gpu:1g.10gb=1\n\
             103|PENDING|JobHeldUser|0|10:00|\n",
        );
        assert_eq!(keys.len(), 3);
        assert_eq!(
            keys[&101],
            listed("PENDING", "Resources", 4294901759, "1:00:00", "gres:gpu:2g.20gb:1")
        );
        assert_eq!(
            keys[&102],
            listed("RUNNING", "None", 4294901758, "UNLIMITED", "gres/gpu:1g.10gb=1")
        );
        assert!(matches!(keys[&103], JobKey::Listed { held: true, .. }));
        assert!(keys[&101].pending() && !keys[&102].pending());
    }

    #[test]
    fn req_node_not_avail_with_its_unavailable_nodes_is_its_name_and_other_text_is_unreadable() {
        // 22.05's %r names the unavailable nodes after ReqNodeNotAvail; seen on 416 of 1,004
        // listed jobs in the queue campaign, which made them be read every pass.
        let keys = parse_listing(
            "201|PENDING|ReqNodeNotAvail, UnavailableNodes:catalog|7|1:00|gres:gpu:1\n\
             202|PENDING|ReqNodeNotAvail, UnavailableNodes:n[1-2,7],gpu-a.b|7|1:00|\n\
             203|PENDING|ReqNodeNotAvail, UnavailableNodes:n1 ;rm|7|1:00|\n\
             204|PENDING|Resources, and more|7|1:00|\n",
        );
        assert_eq!(
            keys[&201],
            listed("PENDING", "ReqNodeNotAvail", 7, "1:00", "gres:gpu:1")
        );
        assert!(matches!(&keys[&202], JobKey::Listed { reason, .. } if reason == "ReqNodeNotAvail"));
        assert_eq!(keys[&203], JobKey::Unreadable);
        assert_eq!(keys[&204], JobKey::Unreadable);
    }

    #[test]
    fn a_priority_change_alone_is_no_change_but_a_hold_is() {
        let a = listed("PENDING", "Priority", 100, "1:00:00", "gres:gpu:1g.10gb:1");
        let b = listed("PENDING", "Priority", 250, "1:00:00", "gres:gpu:1g.10gb:1");
        let held = listed("PENDING", "JobHeldUser", 0, "1:00:00", "gres:gpu:1g.10gb:1");
        let updated = listed("PENDING", "Priority", 100, "1:00:00", "gres:gpu:2g.20gb:1");
        assert!(a.same(&b));
        assert!(!a.same(&held));
        assert!(!a.same(&updated), "a GRES update is a change");
        assert!(
            !JobKey::Unreadable.same(&JobKey::Unreadable),
            "an unreadable job is read every pass"
        );
    }

    #[test]
    fn a_request_crafted_to_look_like_another_jobs_line_makes_both_unreadable() {
        // The request is the last field: a '|' or a newline in it cannot move another field,
        // and a forged line for job 7 meets job 7's own line.
        let keys = parse_listing(
            "5|PENDING|Resources|10|1:00:00|gres:gpu:x|y|z\n\
             5|PENDING|Priority|10|1:00:00|gres:gpu:1g.10gb:1\n\
             7|PENDING|Priority|10|1:00:00|gres:gpu:1g.10gb:1\n\
             7|RUNNING|None|10|1:00:00|forged\n",
        );
        assert_eq!(keys[&5], JobKey::Unreadable);
        assert_eq!(keys[&7], JobKey::Unreadable);
    }

    #[test]
    fn fields_outside_their_vocabulary_make_the_job_unreadable_and_bad_ids_are_dropped() {
        let keys = parse_listing(
            "8|PEND ING|Resources|10|1:00:00|x\n\
             9|PENDING|Resources|ten|1:00:00|x\n\
             10|PENDING|Resources|10|soon|x\n\
             11|PENDING\n\
             12_3|PENDING|Resources|10|1:00:00|x\n\
             99999999999|PENDING|Resources|10|1:00:00|x\n\
             |PENDING|Resources|10|1:00:00|x\n",
        );
        for id in [8, 9, 10, 11] {
            assert_eq!(keys[&id], JobKey::Unreadable, "job {id}");
        }
        assert_eq!(keys.len(), 4, "ids that are no job id name no job: {keys:?}");
    }
}
