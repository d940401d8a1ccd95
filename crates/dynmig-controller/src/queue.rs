//! The queue as the controller knows it between passes: each pass reads the change listing
//! ([`dynmig_slurm::listing`], a short text line per job) and the JSON of only the jobs whose
//! line changed, so a pass does not grow with the queue's JSON.
//!
//! At most [`QueueCache::reads_per_pass`] jobs are read per pass, running and finishing jobs
//! first (they say which instances are busy and which jobs ended), then pending jobs by
//! Slurm's priority, highest first, as Slurm's own backfill looks at the top of the queue
//! only (`bf_max_job_test`, SchedMD's slurm.conf man page). A job left for a later pass keeps
//! what was read of it before; one never read yet is not in the queue this pass (no demand,
//! no event). A controller that starts with 50,000 queued jobs thus learns the top of the
//! queue first and the rest over the next passes.
//!
//! Where the Slurm access has no listing ([`dynmig_slurm::SlurmApi::job_listing`] is `None`)
//! every pass reads the whole queue, as before.

use dynmig_slurm::listing::JobKey;
use dynmig_slurm::{JobInfo, SlurmApi, SlurmError};
use std::cmp::Reverse;
use std::collections::HashMap;

/// The default of [`QueueCache::reads_per_pass`]: at about 3 ms a job (26.05's `squeue
/// --json`, docs/results/load-2026-11-26.md) 400 jobs are about 1.2 s of a pass.
pub const READS_PER_PASS: usize = 400;

/// What one [`QueueCache::refresh`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Refresh {
    /// Jobs in the listing (or read, without one).
    pub listed: usize,
    /// Jobs whose JSON was read.
    pub read: usize,
    /// Known jobs brought up to date from the listing alone ([`in_place`]).
    pub updated: usize,
    /// Changed jobs left for a later pass (over [`QueueCache::reads_per_pass`]).
    pub deferred: usize,
    /// Whether the whole queue was read (no listing).
    pub whole: bool,
}

/// The queue between passes (module docs).
#[derive(Debug)]
pub struct QueueCache {
    jobs: HashMap<u32, (JobKey, JobInfo)>,
    /// Jobs asked for and not answered (ended, or gone, between the listing and the read),
    /// with the line they had then: not asked again until their line changes.
    unanswered: HashMap<u32, JobKey>,
    /// The most jobs whose JSON one pass reads (at least 1).
    pub reads_per_pass: usize,
}

impl Default for QueueCache {
    fn default() -> Self {
        Self::new(READS_PER_PASS)
    }
}

impl QueueCache {
    /// An empty cache reading at most `reads_per_pass` jobs a pass (at least 1).
    pub fn new(reads_per_pass: usize) -> Self {
        Self {
            jobs: HashMap::new(),
            unanswered: HashMap::new(),
            reads_per_pass: reads_per_pass.max(1),
        }
    }

    /// Brings the cache up to date with Slurm (module docs).
    ///
    /// # Errors
    /// Slurm cannot be read; the cache is then as it was.
    pub fn refresh(&mut self, slurm: &dyn SlurmApi) -> Result<Refresh, SlurmError> {
        let Some(keys) = slurm.job_listing()? else {
            let jobs = slurm.jobs()?;
            let n = jobs.len();
            self.jobs = jobs.into_iter().map(|j| (j.id, (JobKey::Unreadable, j))).collect();
            return Ok(Refresh {
                listed: n,
                read: n,
                updated: 0,
                deferred: 0,
                whole: true,
            });
        };
        // A known job whose state or reason alone moved the way a scheduling cycle moves them
        // is brought up to date from its listed (closed-vocabulary) fields, without a read.
        let mut updated = 0;
        for (id, k) in &keys {
            if let Some((old, job)) = self.jobs.get_mut(id) {
                if !old.same(k) && in_place(old, k, job) {
                    *old = k.clone();
                    updated += 1;
                }
            }
        }
        // A job first listed already ended is never read: nothing of it is planned for, and
        // Slurm's JSON read leaves ended jobs out (SlurmApi::jobs_by_id).
        let mut changed: Vec<(u32, &JobKey)> = keys
            .iter()
            .filter(|(id, k)| match self.jobs.get(id) {
                Some((old, _)) => !old.same(k),
                None => k.active() && self.unanswered.get(id).is_none_or(|u| !u.same(k)),
            })
            .map(|(id, k)| (*id, k))
            .collect();
        changed.sort_by_key(|(id, k)| (k.pending(), Reverse(k.priority()), *id));
        let take = changed.len().min(self.reads_per_pass);
        let ids: Vec<u32> = changed[..take].iter().map(|(id, _)| *id).collect();
        let read = if ids.is_empty() {
            Vec::new()
        } else {
            slurm.jobs_by_id(&ids)?
        };
        self.jobs.retain(|id, _| keys.contains_key(id));
        for id in &ids {
            // Asked for and not answered: gone between the listing and the read.
            self.jobs.remove(id);
        }
        // A Slurm that can only answer the whole queue (22.05) answers more than was asked:
        // every listed job in the answer is kept.
        let n_read = read.len();
        let mut got = std::collections::HashSet::with_capacity(n_read);
        for j in read {
            if let Some(k) = keys.get(&j.id) {
                got.insert(j.id);
                self.jobs.insert(j.id, (k.clone(), j));
            }
        }
        let asked: std::collections::HashSet<u32> = ids.iter().copied().collect();
        self.unanswered.retain(|id, _| keys.contains_key(id));
        for id in asked.iter().filter(|id| !got.contains(id)) {
            if let Some(k) = keys.get(id) {
                self.unanswered.insert(*id, k.clone());
            }
        }
        let deferred = changed
            .iter()
            .filter(|(id, _)| !got.contains(id) && !asked.contains(id))
            .count();
        Ok(Refresh {
            listed: keys.len(),
            read: n_read,
            updated,
            deferred,
            whole: false,
        })
    }

    /// The jobs known now, by id.
    pub fn jobs(&self) -> Vec<JobInfo> {
        let mut jobs: Vec<JobInfo> = self.jobs.values().map(|(_, j)| j.clone()).collect();
        jobs.sort_by_key(|j| j.id);
        jobs
    }

    /// Records that dynmig itself set job `id`'s `AdminComment` (not in the listing, so no
    /// pass would read it again).
    pub fn set_admin_comment(&mut self, id: u32, comment: &str) {
        if let Some((_, j)) = self.jobs.get_mut(&id) {
            j.admin_comment = comment.to_string();
        }
    }
}

/// Whether a known job whose key went from `old` to `new` is brought up to date in place
/// (and then is): the same request, time limit and hold, and either a pending job whose reason
/// changed (Slurm's scheduler moves pending jobs between `Priority`, `Resources` and the like
/// every cycle), a running job that is completing or ended (its JSON would add its exit
/// code; `end_time` stays the expected end, which the pass reads as "ended by now"), or a
/// pending job that ended without starting (cancelled). Each of
/// these fields passed the listing's closed-vocabulary check; the user-shaped request is never
/// taken from the listing. Anything else (a start: its nodes; a requeue; a new request or
/// limit) is read as JSON.
fn in_place(old: &JobKey, new: &JobKey, job: &mut JobInfo) -> bool {
    let (
        JobKey::Listed {
            state: s0,
            held: h0,
            time_limit: t0,
            tres_per_node: b0,
            ..
        },
        JobKey::Listed {
            state: s1,
            reason: r1,
            held: h1,
            time_limit: t1,
            tres_per_node: b1,
            ..
        },
    ) = (old, new)
    else {
        return false;
    };
    if h0 != h1 || t0 != t1 || b0 != b1 {
        return false;
    }
    let pending_reason = s0 == "PENDING" && s1 == "PENDING";
    let ending = matches!(s0.as_str(), "RUNNING" | "COMPLETING") && !matches!(s1.as_str(), "PENDING" | "RUNNING");
    // Cancelled, or failed to start: it leaves the demand; an ended job is not read again.
    let ended_pending = s0 == "PENDING" && dynmig_slurm::listing::is_ended_state(s1);
    if !(pending_reason || ending || ended_pending) {
        return false;
    }
    job.state = dynmig_slurm::JobState::from_slurm(s1);
    job.reason = r1.clone();
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use dynmig_slurm::fake::{pending_job, running_job, FakeSlurm};

    fn fake(pending: u32) -> FakeSlurm {
        let mut jobs: Vec<JobInfo> = (1..=pending).map(|id| pending_job(id, "gres:gpu:1g.10gb:1")).collect();
        jobs.push(running_job(100_000, "n1", "gres:gpu:7g.80gb:1", 0));
        FakeSlurm::new(vec![], jobs)
    }

    #[test]
    fn a_pass_with_nothing_changed_reads_no_job_and_a_change_reads_that_job_only() {
        let slurm = fake(1000);
        let mut q = QueueCache::new(5000);
        let first = q.refresh(&slurm).unwrap();
        assert_eq!((first.listed, first.read, first.deferred), (1001, 1001, 0));
        assert_eq!(q.jobs().len(), 1001);
        let again = q.refresh(&slurm).unwrap();
        assert!(!again.whole);
        assert_eq!((again.read, again.deferred), (0, 0), "nothing changed, nothing read");
        slurm.state.lock().unwrap().jobs[7].tres_per_node = "gres:gpu:2g.20gb:1".into();
        slurm.state.lock().unwrap().jobs[9].held = true;
        let after = q.refresh(&slurm).unwrap();
        assert_eq!(after.read, 2, "the updated and the held job");
        let jobs = q.jobs();
        assert_eq!(jobs[7].tres_per_node, "gres:gpu:2g.20gb:1");
        assert!(jobs[9].held);
        assert_eq!(slurm.state.lock().unwrap().jobs_read, 1003);
    }

    #[test]
    fn a_reason_change_and_a_job_end_are_taken_from_the_listing_and_a_start_is_read() {
        use dynmig_slurm::JobState;
        let slurm = fake(3);
        let mut q = QueueCache::new(5000);
        q.refresh(&slurm).unwrap();
        {
            let mut s = slurm.state.lock().unwrap();
            s.jobs[0].reason = "Priority".into(); // pending, its reason moved
            s.jobs[1].state = JobState::Running; // started: where it runs is in its JSON
            s.jobs[1].nodes = "n2".into();
            s.jobs[3].state = JobState::Other("COMPLETED".into()); // the running job ended
            s.jobs[3].exit_status = 1;
        }
        let r = q.refresh(&slurm).unwrap();
        assert_eq!((r.read, r.updated), (1, 2), "{r:?}");
        let jobs = q.jobs();
        assert_eq!(jobs[0].reason, "Priority");
        assert_eq!(
            (jobs[1].state.clone(), jobs[1].nodes.as_str()),
            (JobState::Running, "n2")
        );
        assert_eq!(jobs[3].state, JobState::Other("COMPLETED".into()));
        assert_eq!(
            jobs[3].exit_status, 0,
            "not read: what the listing does not say stays as it was"
        );
        // Nothing changed since: nothing read or updated.
        let again = q.refresh(&slurm).unwrap();
        assert_eq!((again.read, again.updated), (0, 0));
    }

    #[test]
    fn an_ended_job_is_never_read_and_a_cancelled_pending_job_is_taken_from_the_listing() {
        use dynmig_slurm::JobState;
        let slurm = fake(2);
        {
            let mut s = slurm.state.lock().unwrap();
            let mut done = pending_job(50, "gres:gpu:1g.10gb:1");
            done.state = JobState::Other("COMPLETED".into()); // ended before the first pass
            s.jobs.push(done);
        }
        let mut q = QueueCache::default();
        let first = q.refresh(&slurm).unwrap();
        assert_eq!((first.listed, first.read), (4, 3), "{first:?}");
        assert!(
            q.jobs().iter().all(|j| j.id != 50),
            "an ended job first listed is not read"
        );
        slurm.state.lock().unwrap().jobs[0].state = JobState::Other("CANCELLED".into());
        let r = q.refresh(&slurm).unwrap();
        assert_eq!((r.read, r.updated), (0, 1), "{r:?}");
        assert_eq!(q.jobs()[0].state, JobState::Other("CANCELLED".into()));
        let again = q.refresh(&slurm).unwrap();
        assert_eq!((again.read, again.updated), (0, 0));
        assert_eq!(slurm.state.lock().unwrap().jobs_read, 3);
    }

    #[test]
    fn a_job_asked_for_and_not_answered_is_asked_again_only_when_its_line_changes() {
        use dynmig_slurm::JobState;
        let slurm = fake(1);
        let mut q = QueueCache::default();
        q.refresh(&slurm).unwrap();
        // Listed as running (its line changed), answered by no read: SUSPENDED is in no
        // closed list here, and the fake answers pending, running and completing jobs only.
        slurm.state.lock().unwrap().jobs[0].state = JobState::Other("SUSPENDED".into());
        let asks = || slurm.state.lock().unwrap().by_id_reads;
        let before = asks();
        let r = q.refresh(&slurm).unwrap();
        assert_eq!((r.read, asks()), (0, before + 1));
        for _ in 0..3 {
            q.refresh(&slurm).unwrap();
        }
        assert_eq!(asks(), before + 1, "not asked again while its line stays");
        // Its line changes (resumed): read again.
        slurm.state.lock().unwrap().jobs[0].state = JobState::Running;
        let r = q.refresh(&slurm).unwrap();
        assert_eq!((r.read, asks()), (1, before + 2), "{r:?}");
    }

    #[test]
    fn reads_over_the_budget_wait_for_later_passes_running_jobs_first() {
        let slurm = fake(250);
        let mut q = QueueCache::new(100);
        let first = q.refresh(&slurm).unwrap();
        assert_eq!((first.read, first.deferred), (100, 151));
        assert!(
            q.jobs().iter().any(|j| j.id == 100_000),
            "the running job is read first"
        );
        let second = q.refresh(&slurm).unwrap();
        assert_eq!((second.read, second.deferred), (100, 51));
        let third = q.refresh(&slurm).unwrap();
        assert_eq!((third.read, third.deferred), (51, 0));
        assert_eq!(q.jobs().len(), 251);
    }

    #[test]
    fn a_job_that_left_the_queue_leaves_the_cache_and_a_write_of_ours_is_kept() {
        let slurm = fake(3);
        let mut q = QueueCache::default();
        q.refresh(&slurm).unwrap();
        slurm.state.lock().unwrap().jobs.retain(|j| j.id != 2);
        q.set_admin_comment(3, "dynmig/v1 x");
        q.refresh(&slurm).unwrap();
        let ids: Vec<u32> = q.jobs().iter().map(|j| j.id).collect();
        assert_eq!(ids, vec![1, 3, 100_000]);
        assert_eq!(q.jobs()[1].admin_comment, "dynmig/v1 x");
    }

    #[test]
    fn a_slurm_that_answers_the_whole_queue_is_read_once_not_pass_after_pass() {
        let slurm = fake(250);
        slurm.state.lock().unwrap().whole_queue_reads = true;
        let mut q = QueueCache::new(100);
        let first = q.refresh(&slurm).unwrap();
        assert_eq!((first.read, first.deferred), (251, 0), "22.05 answers all: all is kept");
        assert_eq!(q.refresh(&slurm).unwrap().read, 0);
    }

    #[test]
    fn without_a_listing_the_whole_queue_is_read_each_time() {
        let slurm = fake(10);
        slurm.state.lock().unwrap().no_listing = true;
        let mut q = QueueCache::default();
        for _ in 0..2 {
            let r = q.refresh(&slurm).unwrap();
            assert!(r.whole);
            assert_eq!(r.read, 11);
        }
        assert_eq!(slurm.state.lock().unwrap().jobs_read, 22);
    }
}
