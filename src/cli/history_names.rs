//! The own history service's namer: the names and dynmig's estimates of the jobs whose runs
//! the Epilogs recorded, read from Slurm in one call (dynmig_history::naming).

use dynmig_core::protocol::decision::DecisionRecord;
use dynmig_history::naming::RunName;
use dynmig_slurm::{JobInfo, SlurmApi};

/// What `slurm` says of the jobs `ids` it still holds, in any state, with one read
/// ([`SlurmApi::jobs_in_any_state`]). Ids beyond `u32` (none in Slurm) are not asked.
///
/// # Errors
/// The read failed (its message).
pub fn run_names(slurm: &dyn SlurmApi, ids: &[u64]) -> Result<Vec<RunName>, String> {
    let ids: Vec<u32> = ids.iter().filter_map(|&i| u32::try_from(i).ok()).collect();
    let jobs = slurm.jobs_in_any_state(&ids).map_err(|e| e.to_string())?;
    Ok(jobs.iter().map(run_name).collect())
}

/// One job's name and the estimate of its decision record (none: 0 and an empty source).
pub fn run_name(job: &JobInfo) -> RunName {
    let decision = DecisionRecord::parse(&job.admin_comment).ok();
    RunName {
        job_id: job.id.into(),
        uid: job.uid,
        name: job.name.clone(),
        estimate_bytes: decision.as_ref().map_or(0, |d| d.mem_bytes),
        source: decision.map_or(String::new(), |d| d.source.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dynmig_core::types::EstimateSource;
    use dynmig_slurm::fake::{pending_job, FakeSlurm};
    use dynmig_slurm::JobState;

    #[test]
    fn ended_jobs_are_named_in_one_read_with_their_decisions_estimate() {
        let mut a = pending_job(7, "gres:gpu:2g.20gb:1");
        a.state = JobState::Other("COMPLETED".into());
        a.name = "train".into();
        a.admin_comment = DecisionRecord::new("2g.20gb", 1, 15 << 30, EstimateSource::MigMemHint).encode();
        let mut b = pending_job(8, "gres:gpu:1g.10gb:1");
        b.state = JobState::Other("FAILED".into());
        b.name = "other".into();
        b.admin_comment = "an administrator's own note".into();
        let slurm = FakeSlurm::new(vec![], vec![a, b, pending_job(9, "")]);
        let mut names = run_names(&slurm, &[7, 8, 10]).unwrap();
        names.sort_by_key(|n| n.job_id);
        assert_eq!(names.len(), 2, "{names:?}");
        assert_eq!(
            (
                names[0].name.as_str(),
                names[0].estimate_bytes,
                names[0].source.as_str(),
                names[0].uid
            ),
            ("train", 15 << 30, "mig-mem", Some(1000))
        );
        assert_eq!(
            (
                names[1].name.as_str(),
                names[1].estimate_bytes,
                names[1].source.as_str()
            ),
            ("other", 0, "")
        );
        assert_eq!(slurm.state.lock().unwrap().any_state_reads, 1, "one read for all");
    }
}
