//! An in-memory Slurm for tests (feature `fake`): jobs and nodes as plain data, every change
//! applied the way slurmctld applies it, every call recorded. Production code never uses it.

use crate::{JobInfo, JobState, MaintReservation, NodeInfo, NodeState, SlurmApi, SlurmError};
use dynmig_core::geometry::NodeLayout;
use dynmig_core::protocol::intent::NodeIntent;
use dynmig_core::protocol::layout::PublishedLayout;
use std::sync::Mutex;

/// The fake's state.
#[derive(Debug, Default, Clone)]
pub struct FakeState {
    /// Jobs.
    pub jobs: Vec<JobInfo>,
    /// Nodes.
    pub nodes: Vec<NodeInfo>,
    /// Every changing call, in order, e.g. `drain n1 dynmig/v1 repartition to=...`.
    pub calls: Vec<String>,
    /// When set, every call fails with this message.
    pub fail: Option<String>,
    /// The clock for `reason_changed_at`, seconds since the epoch.
    pub now: i64,
    /// Reservations, as created (the fake schedules no jobs, so they only are recorded).
    pub reservations: Vec<MaintReservation>,
    /// How many job records the reads handed out in all (`jobs`, `job`, `jobs_by_id`): what
    /// `squeue --json` would have had to write.
    pub jobs_read: u64,
    /// How many change listings were read.
    pub listings: u64,
    /// How many times `jobs_by_id` was called with ids (each a `squeue --json --jobs=...`).
    pub by_id_reads: u64,
    /// How many times `jobs_in_any_state` was called with ids (each one read).
    pub any_state_reads: u64,
    /// When set, the fake has no change listing (`job_listing` is `None`), as a Slurm access
    /// without one.
    pub no_listing: bool,
    /// When set, `jobs_by_id` answers every job, as 22.05's `squeue --json` (which ignores
    /// `--jobs`).
    pub whole_queue_reads: bool,
    /// How many times the nodes were read (`nodes`, and `node` through it): slurmctld RPCs a
    /// real Slurm would have served.
    pub node_reads: u64,
}

/// An in-memory Slurm.
#[derive(Debug, Default)]
pub struct FakeSlurm {
    /// The state; tests read and change it directly.
    pub state: Mutex<FakeState>,
}

/// A node with no job, the given GRES and no reason.
pub fn idle_node(name: &str, gres: &str) -> NodeInfo {
    NodeInfo {
        name: name.into(),
        state: NodeState::Idle,
        flags: vec!["DYNAMIC".into()],
        reason: String::new(),
        gres: gres.into(),
        gres_used: String::new(),
        extra: String::new(),
        slurmd_start_time: 0,
        alloc_cpus: 0,
        reason_changed_at: 0,
        address: String::new(),
    }
}

/// An idle node as its agent leaves it: the GRES of `layout` and the layout published in its
/// Extra field ([`PublishedLayout`]).
pub fn published_node(name: &str, layout: &NodeLayout) -> NodeInfo {
    let mut n = idle_node(name, &layout.gres());
    n.extra = PublishedLayout(layout.clone()).encode();
    n
}

/// A pending job asking `tres_per_node`.
pub fn pending_job(id: u32, tres_per_node: &str) -> JobInfo {
    JobInfo {
        id,
        name: format!("job{id}"),
        user: "alice".into(),
        uid: Some(1000),
        gid: Some(1000),
        cwd: "/tmp".into(),
        state: JobState::Pending,
        reason: "Resources".into(),
        tres_per_node: tres_per_node.into(),
        nodes: String::new(),
        submit_time: 0,
        start_time: 0,
        end_time: 0,
        time_limit_s: None,
        deadline: 0,
        admin_comment: String::new(),
        exit_status: 0,
        restarts: 0,
        std_err: String::new(),
        std_out: String::new(),
        held: false,
        eligible_time: 0,
        tres_req: String::new(),
        reason_detail: String::new(),
    }
}

/// A job running on `nodes` (a hostlist) whose time limit ends at `end_time`.
pub fn running_job(id: u32, nodes: &str, tres_per_node: &str, end_time: i64) -> JobInfo {
    JobInfo {
        state: JobState::Running,
        reason: "None".into(),
        nodes: nodes.into(),
        end_time,
        ..pending_job(id, tres_per_node)
    }
}

impl FakeSlurm {
    /// A fake holding these nodes and jobs.
    pub fn new(nodes: Vec<NodeInfo>, jobs: Vec<JobInfo>) -> Self {
        Self {
            state: Mutex::new(FakeState {
                jobs,
                nodes,
                ..FakeState::default()
            }),
        }
    }

    /// The recorded changing calls.
    pub fn calls(&self) -> Vec<String> {
        self.lock().calls.clone()
    }

    /// Runs `f` on node `name` (panics if there is none: a test bug).
    pub fn with_node<T>(&self, name: &str, f: impl FnOnce(&mut NodeInfo) -> T) -> T {
        let mut s = self.lock();
        let n = s.nodes.iter_mut().find(|n| n.name == name).expect("no such fake node");
        f(n)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn change(&self, call: String, f: impl FnOnce(&mut FakeState) -> Result<(), SlurmError>) -> Result<(), SlurmError> {
        let mut s = self.lock();
        if let Some(why) = &s.fail {
            return Err(SlurmError::Refused(why.clone()));
        }
        s.calls.push(call);
        f(&mut s)
    }

    fn node_mut<'a>(s: &'a mut FakeState, name: &str) -> Result<&'a mut NodeInfo, SlurmError> {
        s.nodes
            .iter_mut()
            .find(|n| n.name == name)
            .ok_or_else(|| SlurmError::Refused(format!("Invalid node name specified: {name}")))
    }

    fn job_mut(s: &mut FakeState, id: u32) -> Result<&mut JobInfo, SlurmError> {
        s.jobs
            .iter_mut()
            .find(|j| j.id == id)
            .ok_or_else(|| SlurmError::Refused(format!("Invalid job id specified: {id}")))
    }
}

/// The change-listing key of a fake job: what `squeue --format=`[`crate::listing::LISTING_FORMAT`]
/// would print of it (priority 0 when held, 1 otherwise).
pub fn listing_key(j: &JobInfo) -> crate::listing::JobKey {
    crate::listing::JobKey::Listed {
        state: j.state.to_string(),
        reason: if j.reason.is_empty() {
            "None".into()
        } else {
            j.reason.clone()
        },
        held: j.held,
        priority: u64::from(!j.held),
        time_limit: j.time_limit_s.map_or("UNLIMITED".into(), |s| format!("{}:00", s / 60)),
        tres_per_node: j.tres_per_node.to_string(),
    }
}

impl SlurmApi for FakeSlurm {
    fn jobs(&self) -> Result<Vec<JobInfo>, SlurmError> {
        let mut s = self.lock();
        match &s.fail {
            Some(why) => Err(SlurmError::Refused(why.clone())),
            None => {
                s.jobs_read += s.jobs.len() as u64;
                Ok(s.jobs.clone())
            }
        }
    }

    fn job_listing(&self) -> Result<Option<std::collections::HashMap<u32, crate::listing::JobKey>>, SlurmError> {
        let mut s = self.lock();
        if let Some(why) = &s.fail {
            return Err(SlurmError::Refused(why.clone()));
        }
        if s.no_listing {
            return Ok(None);
        }
        s.listings += 1;
        Ok(Some(s.jobs.iter().map(|j| (j.id, listing_key(j))).collect()))
    }

    fn job(&self, id: u32) -> Result<Option<JobInfo>, SlurmError> {
        // One job's read, as `squeue --json --jobs=ID` from 23.02 (and 22.05's reader).
        let mut s = self.lock();
        if let Some(why) = &s.fail {
            return Err(SlurmError::Refused(why.clone()));
        }
        let found = s.jobs.iter().find(|j| j.id == id).cloned();
        s.jobs_read += u64::from(found.is_some());
        Ok(found)
    }

    fn jobs_by_id(&self, ids: &[u32]) -> Result<Vec<JobInfo>, SlurmError> {
        let mut s = self.lock();
        if let Some(why) = &s.fail {
            return Err(SlurmError::Refused(why.clone()));
        }
        let want: std::collections::HashSet<u32> = ids.iter().copied().collect();
        let whole = s.whole_queue_reads && !ids.is_empty();
        if !ids.is_empty() {
            s.by_id_reads += 1;
        }
        let found: Vec<JobInfo> = s
            .jobs
            .iter()
            .filter(|j| {
                whole
                    || (want.contains(&j.id)
                        && matches!(j.state, JobState::Pending | JobState::Running | JobState::Completing))
            })
            .cloned()
            .collect();
        s.jobs_read += found.len() as u64;
        Ok(found)
    }

    fn jobs_in_any_state(&self, ids: &[u32]) -> Result<Vec<JobInfo>, SlurmError> {
        let mut s = self.lock();
        if let Some(why) = &s.fail {
            return Err(SlurmError::Refused(why.clone()));
        }
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        s.any_state_reads += 1;
        let want: std::collections::HashSet<u32> = ids.iter().copied().collect();
        let found: Vec<JobInfo> = s.jobs.iter().filter(|j| want.contains(&j.id)).cloned().collect();
        s.jobs_read += found.len() as u64;
        Ok(found)
    }

    fn nodes(&self) -> Result<Vec<NodeInfo>, SlurmError> {
        let mut s = self.lock();
        s.node_reads += 1;
        match &s.fail {
            Some(why) => Err(SlurmError::Refused(why.clone())),
            None => Ok(s.nodes.clone()),
        }
    }

    fn drain(&self, node: &str, intent: &NodeIntent) -> Result<(), SlurmError> {
        self.change(format!("drain {node} {}", intent.encode()), |s| {
            let now = s.now;
            let n = Self::node_mut(s, node)?;
            if !n.flags.iter().any(|f| f == "DRAIN") {
                n.flags.push("DRAIN".into());
            }
            n.reason = intent.encode();
            n.reason_changed_at = now;
            Ok(())
        })
    }

    fn resume(&self, node: &str) -> Result<(), SlurmError> {
        self.change(format!("resume {node}"), |s| {
            let n = Self::node_mut(s, node)?;
            n.flags.retain(|f| f != "DRAIN");
            n.reason.clear();
            Ok(())
        })
    }

    fn delete_node(&self, node: &str) -> Result<(), SlurmError> {
        self.change(format!("delete {node}"), |s| {
            if let Some(n) = s.nodes.iter().find(|n| n.name == node) {
                if n.has_jobs() {
                    return Err(SlurmError::Refused(format!("node {node} has jobs")));
                }
            }
            s.nodes.retain(|n| n.name != node);
            Ok(())
        })
    }

    fn set_node_extra(&self, node: &str, extra: &str) -> Result<(), SlurmError> {
        self.change(format!("extra {node} {extra}"), |s| {
            Self::node_mut(s, node)?.extra = extra.into();
            Ok(())
        })
    }

    fn requeue_hold(&self, job: u32) -> Result<(), SlurmError> {
        self.change(format!("requeuehold {job}"), |s| {
            let j = Self::job_mut(s, job)?;
            j.state = JobState::Pending;
            j.restarts += 1;
            j.reason = "JobHeldUser".into();
            j.held = true;
            Ok(())
        })
    }

    fn release(&self, job: u32) -> Result<(), SlurmError> {
        self.change(format!("release {job}"), |s| {
            let j = Self::job_mut(s, job)?;
            j.reason = "None".into();
            j.held = false;
            Ok(())
        })
    }

    fn set_job_tres_per_node(&self, job: u32, tres: &str) -> Result<(), SlurmError> {
        self.change(format!("tres {job} {tres}"), |s| {
            Self::job_mut(s, job)?.tres_per_node = tres.into();
            Ok(())
        })
    }

    fn set_job_comment(&self, job: u32, comment: &str) -> Result<(), SlurmError> {
        // The comment is not kept on JobInfo; the recorded call is what tests look at.
        self.change(format!("comment {job} {comment}"), |s| Self::job_mut(s, job).map(drop))
    }

    fn set_job_admin_comment(&self, job: u32, comment: &str) -> Result<(), SlurmError> {
        self.change(format!("admincomment {job} {comment}"), |s| {
            Self::job_mut(s, job).map(|j| j.admin_comment = comment.to_string())
        })
    }

    fn create_reservation(&self, r: &MaintReservation) -> Result<(), SlurmError> {
        self.change(
            format!(
                "reserve {} {} start={} minutes={}",
                r.name,
                r.node,
                r.start,
                r.minutes()
            ),
            |s| {
                if s.reservations.iter().any(|x| x.name == r.name) {
                    return Err(SlurmError::Refused(format!("Duplicate reservation name {}", r.name)));
                }
                Self::node_mut(s, &r.node)?;
                s.reservations.push(r.clone());
                Ok(())
            },
        )
    }

    fn update_reservation_start(&self, name: &str, start: i64) -> Result<(), SlurmError> {
        self.change(format!("reserve-update {name} start={start}"), |s| {
            let r = s
                .reservations
                .iter_mut()
                .find(|r| r.name == name)
                .ok_or_else(|| SlurmError::Refused(format!("Reservation {name} not found")))?;
            r.start = start;
            Ok(())
        })
    }

    fn delete_reservation(&self, name: &str) -> Result<bool, SlurmError> {
        let mut existed = false;
        self.change(format!("unreserve {name}"), |s| {
            let before = s.reservations.len();
            s.reservations.retain(|r| r.name != name);
            existed = s.reservations.len() < before;
            Ok(())
        })?;
        Ok(existed)
    }

    fn reservation_exists(&self, name: &str) -> Result<bool, SlurmError> {
        let s = self.lock();
        match &s.fail {
            Some(why) => Err(SlurmError::Refused(why.clone())),
            None => Ok(s.reservations.iter().any(|r| r.name == name)),
        }
    }
}

/// A fake shared between several holders (an agent and a test's re-registration stand-in).
impl SlurmApi for std::sync::Arc<FakeSlurm> {
    fn jobs(&self) -> Result<Vec<JobInfo>, SlurmError> {
        self.as_ref().jobs()
    }
    fn job_listing(&self) -> Result<Option<std::collections::HashMap<u32, crate::listing::JobKey>>, SlurmError> {
        self.as_ref().job_listing()
    }
    fn jobs_by_id(&self, ids: &[u32]) -> Result<Vec<JobInfo>, SlurmError> {
        self.as_ref().jobs_by_id(ids)
    }
    fn job(&self, id: u32) -> Result<Option<JobInfo>, SlurmError> {
        self.as_ref().job(id)
    }
    fn jobs_in_any_state(&self, ids: &[u32]) -> Result<Vec<JobInfo>, SlurmError> {
        self.as_ref().jobs_in_any_state(ids)
    }
    fn nodes(&self) -> Result<Vec<NodeInfo>, SlurmError> {
        self.as_ref().nodes()
    }
    fn drain(&self, node: &str, intent: &NodeIntent) -> Result<(), SlurmError> {
        self.as_ref().drain(node, intent)
    }
    fn resume(&self, node: &str) -> Result<(), SlurmError> {
        self.as_ref().resume(node)
    }
    fn delete_node(&self, node: &str) -> Result<(), SlurmError> {
        self.as_ref().delete_node(node)
    }
    fn set_node_extra(&self, node: &str, extra: &str) -> Result<(), SlurmError> {
        self.as_ref().set_node_extra(node, extra)
    }
    fn requeue_hold(&self, job: u32) -> Result<(), SlurmError> {
        self.as_ref().requeue_hold(job)
    }
    fn release(&self, job: u32) -> Result<(), SlurmError> {
        self.as_ref().release(job)
    }
    fn set_job_tres_per_node(&self, job: u32, tres: &str) -> Result<(), SlurmError> {
        self.as_ref().set_job_tres_per_node(job, tres)
    }
    fn set_job_comment(&self, job: u32, comment: &str) -> Result<(), SlurmError> {
        self.as_ref().set_job_comment(job, comment)
    }
    fn set_job_admin_comment(&self, job: u32, comment: &str) -> Result<(), SlurmError> {
        self.as_ref().set_job_admin_comment(job, comment)
    }
    fn create_reservation(&self, r: &MaintReservation) -> Result<(), SlurmError> {
        self.as_ref().create_reservation(r)
    }
    fn update_reservation_start(&self, name: &str, start: i64) -> Result<(), SlurmError> {
        self.as_ref().update_reservation_start(name, start)
    }
    fn delete_reservation(&self, name: &str) -> Result<bool, SlurmError> {
        self.as_ref().delete_reservation(name)
    }
    fn reservation_exists(&self, name: &str) -> Result<bool, SlurmError> {
        self.as_ref().reservation_exists(name)
    }
}
