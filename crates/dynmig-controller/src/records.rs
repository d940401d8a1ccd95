//! Keeps each pending job's decision record (its `AdminComment`, written by job_submit/dynmig
//! at submit) true after its user or an operator changed the job's GPU request.
//!
//! job_submit/dynmig cannot write the record on an update: Slurm refuses an update that sets
//! `AdminComment` from a user who is not an operator (`_update_job` in Slurm's
//! `src/slurmctld/job_mgr.c`). The controller, which runs as root or SlurmUser, reads every
//! pass what each pending job asks for now (`tres_per_node`) and, where the record names
//! another profile or count, writes the record of the new request
//! ([`DecisionRecord::changed`], `by=update`, the old profile in `prev=`). An
//! administrator's own comment (not a record) is never touched; `dynmig oom-restart` writes
//! its own change (`by=oom-restart`) together with the request, so it is already true here.

use dynmig_core::protocol::decision::{ChangeCause, DecisionRecord};
use dynmig_slurm::{JobInfo, JobState, SlurmApi};

/// The pending jobs whose record names another profile or count than their typed GPU
/// request, each with the record of what it asks now.
pub fn stale_records(jobs: &[JobInfo]) -> Vec<(u32, DecisionRecord)> {
    jobs.iter()
        .filter(|j| j.state == JobState::Pending)
        .filter_map(|j| {
            let record = DecisionRecord::parse(&j.admin_comment).ok()?;
            let (profile, count) = j.tres_per_node.typed().find(|(_, n)| *n > 0)?;
            let profile = profile.to_string();
            (profile != record.profile || count != record.count)
                .then(|| (j.id, record.changed(&profile, count, j.restarts, ChangeCause::Update)))
        })
        .collect()
}

/// Writes the records of [`stale_records`]; returns the jobs and comments written. A refused
/// write is logged and tried again next pass; it never fails the pass.
pub fn refresh_records(slurm: &dyn SlurmApi, jobs: &[JobInfo]) -> Vec<(u32, String)> {
    let mut written = Vec::new();
    for (id, record) in stale_records(jobs) {
        match slurm.set_job_admin_comment(id, &record.encode()) {
            Ok(()) => {
                log::info!("job {id}: decision record now {}", record.encode());
                written.push((id, record.encode()));
            }
            Err(e) => log::warn!("job {id}: decision record not updated: {e}"),
        }
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;
    use dynmig_core::types::EstimateSource;
    use dynmig_slurm::fake::{pending_job, FakeSlurm};

    fn job(id: u32, tres: &str, comment: &str) -> JobInfo {
        let mut j = pending_job(id, tres);
        j.admin_comment = comment.into();
        j
    }

    #[test]
    fn an_updated_job_gets_the_record_of_what_it_asks_now_and_nothing_else_is_touched() {
        let r = DecisionRecord::new("2g.20gb", 1, 18 << 30, EstimateSource::MigMemHint).encode();
        let mut running = job(4, "gres:gpu:3g.40gb:1", &r);
        running.state = JobState::Running;
        let jobs = vec![
            job(1, "gres:gpu:3g.40gb:1", &r), // updated by its user
            job(2, "gres:gpu:2g.20gb:1", &r), // unchanged
            job(3, "gres:gpu:3g.40gb:1", "keep-me"),
            running,
        ];
        let slurm = FakeSlurm::new(vec![], jobs.clone());
        assert_eq!(refresh_records(&slurm, &jobs).len(), 1);
        let now = DecisionRecord::parse(&slurm.job(1).unwrap().unwrap().admin_comment).unwrap();
        assert_eq!(now.profile, "3g.40gb");
        let change = now.change.unwrap();
        assert_eq!(
            (change.prev, change.by),
            (vec!["2g.20gb".to_string()], ChangeCause::Update)
        );
        assert_eq!(slurm.job(3).unwrap().unwrap().admin_comment, "keep-me");
        // Written once: the next pass finds it true.
        let jobs = vec![slurm.job(1).unwrap().unwrap()];
        assert!(stale_records(&jobs).is_empty());
    }
}
