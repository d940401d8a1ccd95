//! The controller's Prometheus metrics (`[controller] metrics_listen`), updated after each
//! pass from its [`PassReport`] and served by [`dynmig_host::metrics::serve`].
//!
//! What the controller knows is what Slurm shows it each pass: pending demand, each node's
//! instances and role, the repartitions it starts, the nodes whose repartition failed (drained
//! with `dynmig/v1 failed:`), drain waste, and the submit decisions of the jobs in the queue.
//! How long an apply took, and energy, are the agents'; estimator error and out-of-memory runs
//! are the history service's (docs/config.md, "Metrics").

use crate::PassReport;
use dynmig_host::metrics::prometheus_client::metrics::counter::Counter;
use dynmig_host::metrics::prometheus_client::metrics::family::Family;
use dynmig_host::metrics::prometheus_client::metrics::gauge::Gauge;
use dynmig_host::metrics::prometheus_client::metrics::histogram::Histogram;
use dynmig_host::metrics::prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

type Labels = Vec<(&'static str, String)>;

/// The controller's metrics (module docs); cheap to update, safe to share with the server
/// thread.
pub struct ControllerMetrics {
    registry: Arc<Registry>,
    pending: Family<Labels, Gauge>,
    instances: Family<Labels, Gauge>,
    free: Family<Labels, Gauge>,
    nodes: Family<Labels, Gauge>,
    started: Counter,
    planned: Counter,
    dropped: Family<Labels, Counter>,
    waste: Gauge,
    waste_seconds: Counter<f64, AtomicU64>,
    decided: Family<Labels, Gauge>,
    passes: Family<Labels, Counter>,
    pass_seconds: Histogram,
    last_pass: Option<Instant>,
}

impl Default for ControllerMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl ControllerMetrics {
    /// Every metric registered, at zero.
    pub fn new() -> Self {
        let mut r = Registry::default();
        let m = Self {
            registry: Arc::new(Registry::default()),
            pending: Family::default(),
            instances: Family::default(),
            free: Family::default(),
            nodes: Family::default(),
            started: Counter::default(),
            planned: Counter::default(),
            dropped: Family::default(),
            waste: Gauge::default(),
            waste_seconds: Counter::default(),
            decided: Family::default(),
            passes: Family::default(),
            pass_seconds: Histogram::new([0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0]),
            last_pass: None,
        };
        r.register(
            "dynmig_controller_pending_instances",
            "MIG instances that pending jobs ask for, per profile (the demand the policy planned against)",
            m.pending.clone(),
        );
        r.register(
            "dynmig_controller_instances",
            "MIG instances per node and profile, as the node's agent published its layout",
            m.instances.clone(),
        );
        r.register(
            "dynmig_controller_free_instances",
            "MIG instances without a job per node and profile",
            m.free.clone(),
        );
        r.register(
            "dynmig_controller_nodes",
            "Managed nodes per role: in_service, draining, applying, failed (a repartition failed), unavailable, unregistered, layout_unknown",
            m.nodes.clone(),
        );
        r.register(
            "dynmig_controller_repartitions_started",
            "Nodes drained for a repartition (the agent then applies the target)",
            m.started.clone(),
        );
        r.register(
            "dynmig_controller_repartitions_planned",
            "Repartitions of busy nodes planned for the end of their jobs (a maintenance reservation)",
            m.planned.clone(),
        );
        r.register(
            "dynmig_controller_repartitions_dropped",
            "Repartitions given up: reason=drain_timeout (jobs outlived drain_timeout) or cancelled (a plan the policy withdrew)",
            m.dropped.clone(),
        );
        r.register(
            "dynmig_controller_drain_waste_instances",
            "Idle instances on nodes drained for a repartition whose jobs still run (they take no job)",
            m.waste.clone(),
        );
        r.register(
            "dynmig_controller_drain_waste_instance_seconds",
            "Idle instances held by draining nodes, integrated over time (instance-seconds)",
            m.waste_seconds.clone(),
        );
        r.register(
            "dynmig_controller_decided_jobs",
            "Jobs in the queue that job_submit/dynmig decided, per state (pending, running) and decision source (mig-mem, mig-profile, model, history, default, whole-gpu)",
            m.decided.clone(),
        );
        r.register(
            "dynmig_controller_passes",
            "Controller passes, per result (ok, error)",
            m.passes.clone(),
        );
        r.register(
            "dynmig_controller_pass_duration_seconds",
            "Time one controller pass took (Slurm reads, policy, changes)",
            m.pass_seconds.clone(),
        );
        Self {
            registry: Arc::new(r),
            ..m
        }
    }

    /// The registry to serve.
    pub fn registry(&self) -> Arc<Registry> {
        Arc::clone(&self.registry)
    }

    /// Records a pass that succeeded with `report` and took `took`.
    pub fn pass_ok(&mut self, report: &PassReport, took: Duration) {
        self.passes.get_or_create(&vec![("result", "ok".into())]).inc();
        self.pass_seconds.observe(took.as_secs_f64());
        let now = Instant::now();
        if let Some(last) = self.last_pass {
            let held = f64::from(self.waste.get().max(0) as u32);
            self.waste_seconds.inc_by(held * now.duration_since(last).as_secs_f64());
        }
        self.last_pass = Some(now);
        self.waste.set(i64::from(report.held_idle_instances));

        self.pending.clear();
        for (p, n) in &report.demand.pending {
            self.pending
                .get_or_create(&vec![("profile", p.clone())])
                .set(i64::from(*n));
        }
        self.instances.clear();
        self.free.clear();
        for s in &report.supply {
            for (p, n) in &s.instances {
                let l = vec![("node", s.node.clone()), ("profile", (*p).to_string())];
                self.instances.get_or_create(&l).set(i64::from(*n));
                self.free
                    .get_or_create(&l)
                    .set(i64::from(s.free.get(p).copied().unwrap_or(0)));
            }
        }
        self.nodes.clear();
        for (role, n) in &report.roles {
            self.nodes
                .get_or_create(&vec![("role", (*role).into())])
                .set(i64::from(*n));
        }
        self.decided.clear();
        for ((state, source), n) in &report.decided_jobs {
            self.decided
                .get_or_create(&vec![("state", (*state).into()), ("source", source.clone())])
                .set(i64::from(*n));
        }
        self.started.inc_by(report.drained.len() as u64);
        self.planned.inc_by(report.planned.len() as u64);
        for (why, n) in [
            ("drain_timeout", report.timed_out.len()),
            ("cancelled", report.cancelled.len()),
        ] {
            if n > 0 {
                self.dropped
                    .get_or_create(&vec![("reason", why.into())])
                    .inc_by(n as u64);
            }
        }
    }

    /// Records a pass that failed (Slurm could not be read, or a change was refused).
    pub fn pass_failed(&mut self, took: Duration) {
        self.passes.get_or_create(&vec![("result", "error".into())]).inc();
        self.pass_seconds.observe(took.as_secs_f64());
    }

    /// The metrics as text exposition (what a scrape gets).
    pub fn render(&self) -> String {
        dynmig_host::metrics::render(&self.registry)
    }
}
