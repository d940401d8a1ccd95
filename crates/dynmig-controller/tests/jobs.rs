//! The job events a controller feeds to a policy that looks ahead.

use dynmig_controller::{JobFeed, ManagedNode, UNLIMITED_TIME_LIMIT_S};
use dynmig_core::geometry::{all_layouts, A100_80GB};
use dynmig_core::policy::events::JobEvent;
use dynmig_slurm::fake::{pending_job, running_job};
use dynmig_slurm::{JobInfo, JobState};

fn managed() -> Vec<ManagedNode> {
    vec![ManagedNode {
        name: "n1".into(),
        model: &A100_80GB,
        gpus: 2,
        allowed: all_layouts(&A100_80GB),
    }]
}

fn pending(id: u32, tres: &str, submit: i64, limit: Option<i64>, deadline: i64) -> JobInfo {
    JobInfo {
        submit_time: submit,
        time_limit_s: limit,
        deadline,
        ..pending_job(id, tres)
    }
}

#[test]
fn submissions_starts_requeues_and_ends_are_reported_once_each() {
    let m = managed();
    let mut feed = JobFeed::new();
    let a = pending(1, "gres:gpu:2g.20gb:1", 90, Some(3600), 5000);
    let b = pending(2, "gres/gpu:1g.10gb=2", 80, None, 0);
    let cpu_only = pending(3, "", 70, Some(60), 0);
    let untyped = pending(4, "gres:gpu:1", 60, Some(60), 0);
    let unknown_type = pending(5, "gres:gpu:a100:1", 60, Some(60), 0);
    let first = feed.events(&[a.clone(), b.clone(), cpu_only, untyped, unknown_type], &m, 100);
    assert_eq!(
        first,
        vec![
            JobEvent::Submitted {
                id: 2,
                at_s: 80.0,
                profile: "1g.10gb",
                gpus: 2,
                time_limit_s: UNLIMITED_TIME_LIMIT_S,
                deadline_s: None
            },
            JobEvent::Submitted {
                id: 1,
                at_s: 90.0,
                profile: "2g.20gb",
                gpus: 1,
                time_limit_s: 3600.0,
                deadline_s: Some(5000.0)
            },
        ],
        "oldest first; only MIG profiles of the managed GPUs"
    );
    assert!(
        feed.events(&[a.clone(), b.clone()], &m, 110).is_empty(),
        "nothing changed"
    );
    // Job 1 starts on n1; job 2 leaves the list.
    let mut a_run = running_job(1, "n1", "gres:gpu:2g.20gb:1", 3720);
    a_run.start_time = 120;
    a_run.submit_time = 90;
    let e = feed.events(&[a_run.clone()], &m, 130);
    assert_eq!(
        e,
        vec![
            JobEvent::Ended { id: 2, at_s: 130.0 },
            JobEvent::Started {
                id: 1,
                at_s: 120.0,
                node: "n1".into(),
                slices: 2
            },
        ]
    );
    // Requeued: pending again with one more restart, then it runs and completes.
    let mut again = a_run.clone();
    again.state = JobState::Pending;
    again.nodes = String::new();
    again.restarts = 1;
    again.submit_time = 140;
    let e = feed.events(&[again.clone()], &m, 150);
    assert!(
        matches!(e[..], [JobEvent::Ended { id: 1, .. }, JobEvent::Submitted { id: 1, at_s, .. }] if at_s == 140.0),
        "{e:?}"
    );
    let mut done = again;
    done.state = JobState::Other("COMPLETED".into());
    done.end_time = 400;
    // Cancelled while pending (listed as finished, its end time in the future of this clock):
    // it leaves the queue at most now, once.
    assert_eq!(
        feed.events(&[done.clone()], &m, 150),
        vec![JobEvent::Ended { id: 1, at_s: 150.0 }]
    );
    assert!(feed.events(&[done], &m, 160).is_empty());
}

#[test]
fn a_held_job_is_submitted_to_the_forecast_when_it_is_released() {
    let m = managed();
    let mut feed = JobFeed::new();
    let held = JobInfo {
        reason: "JobHeldUser".into(),
        held: true,
        ..pending(1, "gres:gpu:2g.20gb:1", 90, Some(3600), 0)
    };
    assert!(
        feed.events(std::slice::from_ref(&held), &m, 100).is_empty(),
        "held: no submission"
    );
    let released = JobInfo {
        reason: "None".into(),
        held: false,
        ..held.clone()
    };
    let e = feed.events(std::slice::from_ref(&released), &m, 110);
    assert!(
        matches!(e.as_slice(), [JobEvent::Submitted { id: 1, at_s, .. }] if *at_s == 90.0),
        "{e:?}"
    );
    // Held again while pending: it left the demand, so it ended.
    assert_eq!(
        feed.events(&[held], &m, 120),
        vec![JobEvent::Ended { id: 1, at_s: 120.0 }]
    );
}
