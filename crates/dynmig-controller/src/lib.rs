// One piece: the controller's pass, from Slurm's jobs and nodes to the snapshot, the policy's plan and the drains and reservations (the policy comes from the simulator's one factory); one pass, read in order.
//! dynmig-controller: one per cluster. Each [`pass`] reads jobs and nodes from Slurm (through
//! [`SlurmApi`]), builds the [`ClusterSnapshot`] (each node's real per-GPU layout as its agent
//! published it), asks the policy which nodes should change layout, and drains those nodes
//! with a [`NodeIntent`] as the reason — which is how the target reaches the node's agent,
//! through Slurm itself.
//!
//! The controller keeps no state of its own: what is under way is in Slurm (the intents in
//! the drain reasons, and dynamic nodes deleted for re-registration), and a layout's age is
//! the node's `slurmd_start_time`. A restarted controller picks up where it was.
#![deny(missing_docs)]

pub mod catalog;
pub mod daemon;
mod jobs;
pub mod metrics;
mod plans;
pub mod queue;
pub mod records;
mod snapshot;
pub mod status;
pub mod why;

pub use jobs::{JobFeed, UNLIMITED_TIME_LIMIT_S};
pub use plans::{load_plans, save_plans, LoadedPlans};
pub use snapshot::{build_snapshot, managed_nodes, work_ends, ManagedNode, NodeRole};

use dynmig_core::config::Config;
use dynmig_core::demand::Demand;
use dynmig_core::geometry::NodeLayout;
use dynmig_core::policy::{Policy, Repartition};
use dynmig_core::protocol::decision::DecisionRecord;
use dynmig_core::protocol::event::{Event, EventKind};
use dynmig_core::protocol::intent::NodeIntent;
use dynmig_core::protocol::plan::{reservation_name, Plan, Plans};
use dynmig_core::snapshot::ClusterSnapshot;
use dynmig_core::snapshot::NodeSnapshot;
use dynmig_core::types::DrainMode;
use dynmig_host::fs::LineLog;
use dynmig_slurm::{JobInfo, JobState, MaintReservation, NodeInfo, SlurmApi, SlurmError};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Duration;

/// The configured policy, made by the one factory the simulator uses too
/// ([`dynmig_sim::policies::from_config`]): `mpc` judges the planner's proposals, and
/// `adaptive` and `guarded` search their layouts, with the simulator's engine modelling the
/// managed nodes (the config allows them only when every node group has one GPU model and GPU
/// count) with the controller's interval and drain mode. `learned` loads its model file.
///
/// # Errors
/// The learned policy's model cannot be read or was trained for other GPUs (the message says
/// which file and what it was trained for).
pub fn policy_from_config(config: &Config) -> Result<Box<dyn Policy>, String> {
    policy_for_release(config, true)
}

/// [`policy_from_config`] for a Slurm that can (`retype`, 23.02.6+) or cannot change a
/// submitted job's GPU type: where it cannot, the guarded default never leaves a type a
/// waiting job asks for ([`dynmig_sim::policies::guarded::GuardedSettings::pending_types_fixed`]).
///
/// # Errors
/// As [`policy_from_config`].
pub fn policy_for_release(config: &Config, retype: bool) -> Result<Box<dyn Policy>, String> {
    dynmig_sim::policies::from_config::controller_policy(config, retype).map_err(|e| format!("{e:#}"))
}

/// The outcome of one pass.
#[derive(Debug, Clone, Default)]
pub struct PassReport {
    /// Demand the policy planned against.
    pub demand: Demand,
    /// Nodes drained for repartitioning in this pass (or that would be, in a dry run): idle
    /// nodes the policy chose, busy ones in `drain = "immediate"` mode, and planned nodes whose
    /// reservation started or that became idle (`serves` empty for those).
    pub drained: Vec<Repartition>,
    /// Busy nodes whose repartition was planned for the end of their jobs (a reservation).
    pub planned: Vec<Repartition>,
    /// Planned nodes that got another target.
    pub moved: Vec<Repartition>,
    /// Planned nodes whose plan was cancelled (the policy returned their current layout).
    pub cancelled: Vec<String>,
    /// Plans or reservations repaired because they disagreed with Slurm, with why.
    pub repaired: Vec<(String, String)>,
    /// Nodes whose repartition was dropped because their jobs outlived `drain_timeout`.
    pub timed_out: Vec<String>,
    /// Drain waste now: instances idle on nodes drained for a repartition whose jobs still
    /// run (they take no job until the last one ends), summed over those nodes.
    pub held_idle_instances: u32,
    /// Each managed node whose layout is known (in the snapshot): its instances per profile,
    /// and how many of them are free.
    pub supply: Vec<NodeSupply>,
    /// Managed nodes per role ([`NodeRole::name`]).
    pub roles: BTreeMap<&'static str, u32>,
    /// Pending jobs moved to a type of the policy's catalog ([`catalog`]).
    pub retyped: Vec<catalog::Retyped>,
    /// Jobs that job_submit/dynmig decided (a `DecisionRecord` in their AdminComment), per
    /// (`pending` or `running`, the decision's source such as `mig-mem` or `history`).
    pub decided_jobs: BTreeMap<(&'static str, String), u32>,
    /// What the pass read of the queue ([`queue::QueueCache::refresh`]).
    pub queue: queue::Refresh,
    /// The Slurm `NodeAddr` of each node drained in this pass, and of each node drained for a
    /// repartition and free of jobs (role `applying`), not in a dry run, whose agent
    /// the daemon wakes ([`dynmig_host::wake`]); a node without an address is left out.
    pub wake: Vec<String>,
}

/// A node's MIG instances as the controller saw them in one pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeSupply {
    /// Node name.
    pub node: String,
    /// Instances per profile (every GPU of the node together).
    pub instances: BTreeMap<&'static str, u32>,
    /// Of those, the ones without a job.
    pub free: BTreeMap<&'static str, u32>,
}

/// The queue's jobs that job_submit/dynmig decided, per state and decision source
/// ([`PassReport::decided_jobs`]). Jobs with another AdminComment, and finished jobs, are
/// not counted.
pub fn decided_jobs(jobs: &[JobInfo]) -> BTreeMap<(&'static str, String), u32> {
    let mut out = BTreeMap::new();
    for j in jobs {
        let state = match j.state {
            JobState::Pending => "pending",
            JobState::Running | JobState::Completing => "running",
            _ => continue,
        };
        if let Ok(d) = DecisionRecord::parse(&j.admin_comment) {
            *out.entry((state, d.source.to_string())).or_insert(0) += 1;
        }
    }
    out
}

/// What one pass needs besides Slurm and the policy.
#[derive(Debug, Clone)]
pub struct PassSettings {
    /// A node drained for a repartition whose jobs have not ended within this time is given
    /// back to service with its old layout.
    pub drain_timeout: Duration,
    /// Decide, but change nothing in Slurm (and write no plan).
    pub dry_run: bool,
    /// Now, seconds since the Unix epoch.
    pub now: i64,
    /// How a busy node is taken out of service.
    pub drain: DrainMode,
    /// Length of a maintenance reservation.
    pub reservation_duration: Duration,
    /// The plans file (`<state_dir>/controller-plans.json`). `None`: no plan can be kept, so
    /// busy nodes are drained at once whatever `drain` says.
    pub plans: Option<PathBuf>,
    /// The first pass of a controller process: delete the `dynmig_<node>` reservations of
    /// managed nodes without a plan (left by a controller that stopped between creating a
    /// reservation and recording its plan).
    pub sweep: bool,
    /// Where the catalog is written when the policy has one (`<state_dir>/catalog.json`,
    /// [`catalog`]); removed when it has none. `None`: neither.
    pub catalog: Option<PathBuf>,
    /// Whether pending jobs may be moved to the catalog's types: Slurm 23.02.6 or later
    /// ([`dynmig_core::modify::update_replaces_gpu_request`]; the controller asks
    /// `scontrol --version` at start). `from_config` says false.
    pub retype: bool,
}

impl PassSettings {
    /// Settings from the config at `now`: `[controller]`, plans in `<state_dir>`.
    pub fn from_config(config: &Config, now: i64) -> Self {
        Self {
            drain_timeout: config.controller.drain_timeout,
            dry_run: false,
            now,
            drain: config.controller.drain,
            reservation_duration: config.controller.reservation_duration,
            plans: Some(config.paths.state_dir.join("controller-plans.json")),
            sweep: false,
            catalog: Some(
                config
                    .paths
                    .state_dir
                    .join(dynmig_core::protocol::catalog::CATALOG_FILE),
            ),
            retype: false,
        }
    }
}

/// One controller pass. A policy that follows jobs ([`Policy::observes_jobs`]) is first told
/// what `feed` saw change in the queue since the last pass.
///
/// # Errors
/// Slurm cannot be read, or a drain, resume or reservation change is refused. Plans changed
/// before the error are saved.
pub fn pass(
    slurm: &dyn SlurmApi,
    managed: &[ManagedNode],
    policy: &mut dyn Policy,
    feed: &mut JobFeed,
    events: &LineLog,
    settings: &PassSettings,
) -> Result<PassReport, SlurmError> {
    let refresh = feed.queue.refresh(slurm)?;
    let jobs = feed.queue.jobs();
    let nodes = slurm.nodes()?;
    let now = settings.now;
    if !settings.dry_run {
        for (id, comment) in records::refresh_records(slurm, &jobs) {
            feed.queue.set_admin_comment(id, &comment);
        }
    }
    if policy.observes_jobs() {
        policy.observe(now as f64, &feed.events(&jobs, managed, now));
    }
    let (snapshot, roles) = build_snapshot(&jobs, &nodes, managed, now);
    let mut timed_out = Vec::new();
    for (name, role) in &roles {
        if let NodeRole::Draining { since } = role {
            let waited = now - since;
            if *since > 0 && waited > settings.drain_timeout.as_secs() as i64 {
                if !settings.dry_run {
                    slurm.resume(name)?;
                    events.append(
                        &Event::at(now as f64, EventKind::DrainTimeout, name)
                            .detail(&format!("jobs still ran after {waited} s; repartition dropped"))
                            .encode(),
                    );
                }
                timed_out.push(name.clone());
            }
        }
    }
    // A node whose repartition was just dropped is back in service next pass.
    let mut snapshot = snapshot;
    snapshot.nodes.retain(|n| !timed_out.contains(&n.name));
    let held_idle_instances = snapshot
        .nodes
        .iter()
        .filter(|n| {
            roles
                .iter()
                .any(|(name, r)| name == &n.name && matches!(r, NodeRole::Draining { .. }))
        })
        .map(|n| n.free().values().sum::<u32>())
        .sum();
    let mut role_counts = BTreeMap::new();
    for (_, r) in &roles {
        *role_counts.entry(r.name()).or_insert(0) += 1;
    }
    let mut report = PassReport {
        timed_out,
        held_idle_instances,
        supply: snapshot
            .nodes
            .iter()
            .map(|n| NodeSupply {
                node: n.name.clone(),
                instances: n.layout.totals(),
                free: n.free(),
            })
            .collect(),
        roles: role_counts,
        decided_jobs: decided_jobs(&jobs),
        queue: refresh,
        ..PassReport::default()
    };
    let loaded = settings
        .plans
        .as_ref()
        .map(|path| load_plans(path, managed, events, now, !settings.dry_run));
    let mut plans = loaded.as_ref().map(|l| l.plans.clone()).unwrap_or_default();
    if !settings.dry_run {
        // Nodes drained for a repartition and free of jobs wait for their agents: each pass
        // wakes them again, so that a lost wake-up costs one pass, not the agents' fallback
        // look (dynmig_host::wake::FALLBACK_LOOK). No slurmctld RPC: a TCP connect each.
        for n in &nodes {
            let applying = roles
                .iter()
                .any(|(name, r)| name == &n.name && matches!(r, NodeRole::Applying));
            if applying && !n.address.is_empty() {
                report.wake.push(n.address.clone());
            }
        }
    }
    let mut ctx = Ctx {
        slurm,
        events,
        settings,
        nodes: nodes.iter().map(|n| (n.name.as_str(), n)).collect(),
        roles: roles.iter().map(|(n, r)| (n.as_str(), r)).collect(),
        report: &mut report,
    };
    let result = match &loaded {
        Some(l) => ctx
            .delete_orphans(&l.orphans)
            .and_then(|()| ctx.plan_and_act(&mut snapshot, &mut plans, policy, managed, l.sweep_all)),
        None => ctx.plan_and_act(&mut snapshot, &mut plans, policy, managed, false),
    };
    if let (Some(path), Some(l), false) = (&settings.plans, &loaded, settings.dry_run) {
        if l.plans != plans || l.rewrite {
            save_plans(path, &plans, events, now);
        }
    }
    result?;
    if !settings.dry_run {
        report.retyped = follow_catalog(slurm, &jobs, managed, policy, events, settings);
    }
    Ok(report)
}

/// Publishes the policy's catalog and moves the pending jobs to it ([`catalog`]); removes a
/// catalog left by an earlier policy when this one has none.
fn follow_catalog(
    slurm: &dyn SlurmApi,
    jobs: &[JobInfo],
    managed: &[ManagedNode],
    policy: &dyn Policy,
    events: &LineLog,
    settings: &PassSettings,
) -> Vec<catalog::Retyped> {
    let Some(path) = &settings.catalog else {
        return Vec::new();
    };
    let (Some(types), Some(model)) = (policy.catalog(), managed.first().map(|m| m.model)) else {
        if let Err(e) = dynmig_host::fs::remove_if_present(path) {
            log::warn!("cannot remove the catalog {}: {e}", path.display());
        }
        return Vec::new();
    };
    let c = catalog::catalog_of(model, &types);
    match catalog::write_catalog(path, &c) {
        Ok(true) => log::info!("catalog for new jobs: {}", c.encode()),
        Ok(false) => {}
        Err(e) => log::warn!("cannot write the catalog {}: {e}", path.display()),
    }
    if !settings.retype {
        return Vec::new();
    }
    catalog::follow(slurm, jobs, model, &c, events, settings.now)
}

/// What the steps of a pass share.
struct Ctx<'a> {
    slurm: &'a dyn SlurmApi,
    events: &'a LineLog,
    settings: &'a PassSettings,
    nodes: HashMap<&'a str, &'a NodeInfo>,
    roles: HashMap<&'a str, &'a NodeRole>,
    report: &'a mut PassReport,
}

impl Ctx<'_> {
    fn now(&self) -> i64 {
        self.settings.now
    }

    fn event(&self, kind: EventKind, node: &str, layout: Option<&NodeLayout>, detail: &str) {
        if self.settings.dry_run {
            return;
        }
        let mut e = Event::at(self.now() as f64, kind, node).detail(detail);
        if let Some(l) = layout {
            e = e.layout(l);
        }
        self.events.append(&e.encode());
    }

    fn delete_reservation(&self, name: &str) -> Result<bool, SlurmError> {
        if self.settings.dry_run {
            return Ok(true);
        }
        self.slurm.delete_reservation(name)
    }

    fn repaired(&mut self, node: &str, why: String) {
        self.event(EventKind::PlanRepaired, node, None, &why);
        log::warn!("{node}: {why}");
        self.report.repaired.push((node.to_string(), why));
    }

    /// Whether `node` runs (or is completing) a job.
    fn busy(&self, node: &str) -> bool {
        self.nodes.get(node).is_some_and(|n| n.has_jobs())
    }

    /// Drains `node` for `target` now and logs it.
    fn drain(&mut self, node: &str, target: &NodeLayout, detail: &str) -> Result<(), SlurmError> {
        if !self.settings.dry_run {
            self.slurm.drain(node, &NodeIntent::Repartition(target.clone()))?;
            match self.nodes.get(node).map(|n| n.address.as_str()) {
                Some(a) if !a.is_empty() => self.report.wake.push(a.to_string()),
                _ => {}
            }
        }
        self.event(EventKind::Drain, node, Some(target), detail);
        Ok(())
    }

    fn plan_and_act(
        &mut self,
        snapshot: &mut ClusterSnapshot,
        plans: &mut Plans,
        policy: &mut dyn Policy,
        managed: &[ManagedNode],
        sweep_all: bool,
    ) -> Result<(), SlurmError> {
        if self.settings.sweep || sweep_all {
            self.sweep(managed, plans)?;
        }
        self.check_plans(&mut snapshot.nodes, plans)?;
        let demand = snapshot.demand();
        // The time of day in UTC: time-of-day policies learn their bins on this clock.
        let time_of_day = Duration::from_secs(self.settings.now.rem_euclid(86_400).unsigned_abs());
        let decisions = policy.plan_at(time_of_day, &snapshot.nodes, &demand);
        self.report.demand = demand;
        for r in decisions {
            let Some(snap) = snapshot.nodes.iter().find(|n| n.name == r.node) else {
                continue;
            };
            let current = snap.layout.clone();
            let work_ends_in = snap.work_ends_in;
            self.decide(r, &current, work_ends_in, plans)?;
        }
        Ok(())
    }

    /// Deletes the reservations of plans that were dropped when read.
    fn delete_orphans(&mut self, orphans: &[(String, String)]) -> Result<(), SlurmError> {
        for (node, name) in orphans {
            self.delete_reservation(name)?;
            self.repaired(node, format!("plan dropped: the node is not dynmig's ({name} deleted)"));
        }
        Ok(())
    }

    /// Deletes the reservations of managed nodes that have no plan.
    fn sweep(&mut self, managed: &[ManagedNode], plans: &Plans) -> Result<(), SlurmError> {
        for m in managed {
            if plans.get(&m.name).is_some() {
                continue;
            }
            let name = reservation_name(&m.name);
            if !self.settings.dry_run && self.slurm.delete_reservation(&name)? {
                self.repaired(&m.name, format!("reservation {name} had no plan: deleted"));
            }
        }
        Ok(())
    }

    /// Checks every plan against Slurm: drops those Slurm no longer agrees with (deleting their
    /// reservation), starts those whose time has come or whose node is idle, and marks the
    /// others in the snapshot.
    fn check_plans(&mut self, snaps: &mut [NodeSnapshot], plans: &mut Plans) -> Result<(), SlurmError> {
        for plan in plans.plans.clone() {
            let Some(snap) = snaps.iter_mut().find(|s| s.name == plan.node) else {
                // Not managed any more, or its repartition failed: leave the node alone.
                self.delete_reservation(&plan.reservation)?;
                plans.remove(&plan.node);
                self.repaired(
                    &plan.node,
                    format!(
                        "plan dropped: the node is not dynmig's to change now ({} deleted)",
                        plan.reservation
                    ),
                );
                continue;
            };
            let role = self.roles.get(plan.node.as_str()).copied();
            match role {
                Some(NodeRole::Draining { .. } | NodeRole::Applying | NodeRole::Unregistered) => {
                    // Drained by dynmig already (the controller stopped before it recorded that).
                    self.delete_reservation(&plan.reservation)?;
                    plans.remove(&plan.node);
                    self.repaired(
                        &plan.node,
                        format!(
                            "the node was already drained for its repartition: plan closed, {} deleted",
                            plan.reservation
                        ),
                    );
                    continue;
                }
                Some(NodeRole::InService | NodeRole::LayoutUnknown) => {}
                _ => {
                    self.delete_reservation(&plan.reservation)?;
                    plans.remove(&plan.node);
                    self.repaired(
                        &plan.node,
                        format!(
                            "the node was drained or is down outside dynmig: plan dropped, {} deleted",
                            plan.reservation
                        ),
                    );
                    continue;
                }
            }
            if !self.settings.dry_run && !self.slurm.reservation_exists(&plan.reservation)? {
                plans.remove(&plan.node);
                self.repaired(
                    &plan.node,
                    format!("reservation {} is gone: plan dropped", plan.reservation),
                );
                continue;
            }
            let idle = !self.busy(&plan.node);
            if idle || self.now() >= plan.start {
                let why = if idle {
                    "the node is idle before its reservation".to_string()
                } else {
                    format!("reservation {} started", plan.reservation)
                };
                self.drain(&plan.node, &plan.target, &format!("planned repartition starts: {why}"))?;
                self.delete_reservation(&plan.reservation)?;
                plans.remove(&plan.node);
                snap.unavailable = true;
                snap.repartitioning = true;
                snap.incoming = plan.target.totals();
                snap.schedulable_free.clear();
                self.report.drained.push(Repartition {
                    node: plan.node.clone(),
                    target: plan.target.clone(),
                    serves: Default::default(),
                });
                continue;
            }
            // Jobs that end earlier than planned (cancelled, or finished early) bring the
            // reservation forward.
            let ends = self.now() + i64::try_from(snap.work_ends_in.as_secs()).unwrap_or(i64::MAX / 2);
            let mut plan = plan;
            if ends + EARLIER_BY < plan.start {
                if !self.settings.dry_run {
                    self.slurm.update_reservation_start(&plan.reservation, ends)?;
                }
                plan.start = ends;
                plans.set(plan.clone());
            }
            snap.planned = Some(plan.target.clone());
            snap.repartitioning = true;
            snap.incoming = plan.target.totals();
        }
        Ok(())
    }

    /// Acts on one decision of the policy.
    fn decide(
        &mut self,
        r: Repartition,
        current: &NodeLayout,
        work_ends_in: Duration,
        plans: &mut Plans,
    ) -> Result<(), SlurmError> {
        if let Some(plan) = plans.get(&r.node).cloned() {
            if &r.target == current {
                self.delete_reservation(&plan.reservation)?;
                plans.remove(&r.node);
                self.event(
                    EventKind::PlanCancelled,
                    &r.node,
                    Some(current),
                    &format!("{} deleted", plan.reservation),
                );
                self.report.cancelled.push(r.node);
            } else if r.target != plan.target {
                plans.set(Plan {
                    target: r.target.clone(),
                    ..plan.clone()
                });
                self.event(
                    EventKind::PlanMoved,
                    &r.node,
                    Some(&r.target),
                    &format!("was {}; {} kept", plan.target, plan.reservation),
                );
                self.report.moved.push(r);
            }
            return Ok(());
        }
        if &r.target == current {
            return Ok(());
        }
        let serves: Vec<String> = r.serves.iter().map(|(p, n)| format!("{n}x{p}")).collect();
        let reserve = self.settings.drain == DrainMode::Reservation
            && self.settings.plans.is_some()
            && self.busy(&r.node)
            && work_ends_in > Duration::ZERO;
        if !reserve {
            self.drain(&r.node, &r.target, &format!("serves {}", serves.join("+")))?;
            self.report.drained.push(r);
            return Ok(());
        }
        let start = self.now() + i64::try_from(work_ends_in.as_secs()).unwrap_or(i64::MAX / 2);
        let name = reservation_name(&r.node);
        if !self.settings.dry_run {
            let res = MaintReservation {
                name: name.clone(),
                node: r.node.clone(),
                start,
                duration: self.settings.reservation_duration,
            };
            if let Err(first) = self.slurm.create_reservation(&res) {
                // A reservation of that name without a plan (left by a stopped controller):
                // replace it once.
                if !self.slurm.delete_reservation(&name)? {
                    return Err(first);
                }
                self.repaired(&r.node, format!("reservation {name} had no plan: replaced"));
                self.slurm.create_reservation(&res)?;
            }
        }
        plans.set(Plan {
            node: r.node.clone(),
            target: r.target.clone(),
            start,
            reservation: name.clone(),
            since: self.now(),
        });
        self.event(
            EventKind::Planned,
            &r.node,
            Some(&r.target),
            &format!(
                "reservation {name} starts in {} s, when the running jobs' time limits end; serves {}",
                start - self.now(),
                serves.join("+")
            ),
        );
        self.report.planned.push(r);
        Ok(())
    }
}

/// A reservation is brought forward only when the node's jobs now end at least this much
/// earlier than it starts (seconds): no update for every second.
const EARLIER_BY: i64 = 60;
