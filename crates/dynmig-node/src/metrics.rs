//! The node agent's Prometheus metrics (`[agent] metrics_listen`), every one labelled with
//! the node, served by [`dynmig_host::metrics::serve`].
//!
//! What the agent knows: the repartitions it applies (started, finished, failed, and how long
//! a finished one took from its first instance operation until Slurm showed the node back
//! with the new GRES), its GPUs' instances, their power, and the energy its ledger charges to
//! the jobs on them (docs/config.md, "Metrics"). A job's total is taken by its Epilog, which
//! exits at once: the agent exposes the running jobs' energy so far and the node's total.
//!
//! Per-job series (`dynmig_agent_job_energy_joules{job="<id>"}`) are off unless
//! `[agent] metrics_per_job = true` ([`AgentMetrics::set_per_job`]): the endpoint has no
//! authentication, and which jobs run on a node and what they use is what Slurm's
//! `PrivateData=jobs` hides from other users. The family stays registered; while off it has
//! no series, and a scrape shows it as when no job runs (not at all). The node's total,
//! `dynmig_agent_energy_charged_joules`, is served either way.

use dynmig_gpu::energy::NodeSample;
use dynmig_host::metrics::prometheus_client::metrics::counter::Counter;
use dynmig_host::metrics::prometheus_client::metrics::family::Family;
use dynmig_host::metrics::prometheus_client::metrics::gauge::Gauge;
use dynmig_host::metrics::prometheus_client::metrics::histogram::Histogram;
use dynmig_host::metrics::prometheus_client::registry::Registry;
use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

type Labels = Vec<(&'static str, String)>;

/// The buckets of the apply duration, seconds: an instance change takes seconds on real
/// GPUs; a re-registration with a slurmd restart tens of seconds.
pub const APPLY_BUCKETS: [f64; 10] = [1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0];

/// The buckets of one step of an apply, seconds ([`crate::agent::steps::StepTimes`]): most steps
/// take milliseconds; the registration about a second; waiting for jobs up to their limits.
pub const STEP_BUCKETS: [f64; 12] = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 60.0, 600.0];

fn step_histogram() -> Histogram {
    Histogram::new(STEP_BUCKETS)
}

/// The agent's metrics (module docs).
#[derive(Clone)]
pub struct AgentMetrics {
    registry: Arc<Registry>,
    started: Counter,
    finished: Counter,
    failed: Counter,
    apply_seconds: Histogram,
    step_seconds: Family<Labels, Histogram, fn() -> Histogram>,
    instances: Family<Labels, Gauge>,
    instance_info: Family<Labels, Gauge>,
    watts: Family<Labels, Gauge<f64, AtomicU64>>,
    job_joules: Family<Labels, Gauge<f64, AtomicU64>>,
    joules: Counter<f64, AtomicU64>,
    per_job: bool,
}

impl std::fmt::Debug for AgentMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AgentMetrics")
    }
}

impl AgentMetrics {
    /// Every metric of the agent of `node`, at zero, without per-job series.
    pub fn new(node: &str) -> Self {
        let mut r = Registry::with_labels([("node".into(), node.to_string().into())].into_iter());
        let m = Self {
            registry: Arc::new(Registry::default()),
            started: Counter::default(),
            finished: Counter::default(),
            failed: Counter::default(),
            apply_seconds: Histogram::new(APPLY_BUCKETS),
            step_seconds: Family::new_with_constructor(step_histogram),
            instances: Family::default(),
            instance_info: Family::default(),
            watts: Family::default(),
            job_joules: Family::default(),
            joules: Counter::default(),
            per_job: false,
        };
        r.register(
            "dynmig_agent_repartitions_started",
            "Applies of a new layout the agent began",
            m.started.clone(),
        );
        r.register(
            "dynmig_agent_repartitions_finished",
            "Applies that ended with the node back in service with the new layout",
            m.finished.clone(),
        );
        r.register(
            "dynmig_agent_repartitions_failed",
            "Applies that failed (the node stays drained with dynmig/v1 failed: <why>)",
            m.failed.clone(),
        );
        r.register(
            "dynmig_agent_apply_duration_seconds",
            "Time a finished apply took: instance changes, gres.conf, re-registration, until Slurm shows the node with the new GRES",
            m.apply_seconds.clone(),
        );
        r.register(
            "dynmig_agent_apply_step_seconds",
            "Time of each step of a finished apply (step: idle_wait, instances, gres_conf, slurmd_stop, delete, slurmd_start, registration, publish)",
            m.step_seconds.clone(),
        );
        r.register(
            "dynmig_agent_instances",
            "MIG instances on the node's GPUs per profile (label GPU_I_PROFILE, as dcgm-exporter names it), as the GPU backend reports them",
            m.instances.clone(),
        );
        r.register(
            "dynmig_mig_instance_info",
            "One series per MIG instance, value 1, labelled as dcgm-exporter labels its per-instance metrics (gpu, GPU_I_ID, GPU_I_PROFILE, UUID) plus its start memory slice, so that dcgm-exporter's metrics can be joined on (gpu, GPU_I_ID)",
            m.instance_info.clone(),
        );
        r.register(
            "dynmig_agent_gpu_power_watts",
            "Power of each GPU at the last sample (NVML; the simulated backend's model)",
            m.watts.clone(),
        );
        r.register(
            "dynmig_agent_job_energy_joules",
            "Energy charged so far to each job running on the node (per-instance attribution of GPU power, docs: dynmig_gpu::energy)",
            m.job_joules.clone(),
        );
        r.register(
            "dynmig_agent_energy_charged_joules",
            "Energy charged to jobs on this node since the agent started",
            m.joules.clone(),
        );
        Self {
            registry: Arc::new(r),
            ..m
        }
    }

    /// Turns the per-job series on or off (`[agent] metrics_per_job`); off, the next
    /// [`Self::sampled`] drops the series already there.
    pub fn set_per_job(&mut self, on: bool) {
        self.per_job = on;
    }

    /// Whether the per-job series are on.
    pub fn per_job(&self) -> bool {
        self.per_job
    }

    /// The registry to serve.
    pub fn registry(&self) -> Arc<Registry> {
        Arc::clone(&self.registry)
    }

    /// An apply began.
    pub fn apply_started(&self) {
        self.started.inc();
    }

    /// An apply finished after `took`.
    pub fn apply_finished(&self, took: Duration) {
        self.finished.inc();
        self.apply_seconds.observe(took.as_secs_f64());
    }

    /// The step times of a finished apply.
    pub fn steps(&self, times: &crate::agent::steps::StepTimes) {
        for (step, took) in &times.0 {
            self.step_seconds
                .get_or_create(&vec![("step", (*step).to_string())])
                .observe(took.as_secs_f64());
        }
    }

    /// An apply failed.
    pub fn apply_failed(&self) {
        self.failed.inc();
    }

    /// One power sample: the GPUs' instances and power, the joules it charged, and, with
    /// [`Self::set_per_job`] on, the ledger's running jobs (`jobs`: job id to joules so far).
    pub fn sampled(&self, s: &NodeSample, jobs: &BTreeMap<u32, f64>) {
        let mut per_profile: BTreeMap<&str, i64> = BTreeMap::new();
        for g in &s.gpus {
            for i in &g.instances {
                *per_profile.entry(i.placed.profile.name).or_insert(0) += 1;
            }
        }
        self.instances.clear();
        for (p, n) in per_profile {
            self.instances
                .get_or_create(&vec![("GPU_I_PROFILE", p.to_string())])
                .set(n);
        }
        self.instance_info.clear();
        for g in &s.gpus {
            for i in &g.instances {
                let labels = vec![
                    ("gpu", g.index.to_string()),
                    ("GPU_I_ID", i.gi_id.to_string()),
                    ("GPU_I_PROFILE", i.placed.profile.name.to_string()),
                    ("UUID", i.uuid.clone()),
                    ("start", i.placed.start.to_string()),
                ];
                self.instance_info.get_or_create(&labels).set(1);
            }
        }
        self.watts.clear();
        for (gpu, w) in &s.watts {
            self.watts.get_or_create(&vec![("gpu", gpu.to_string())]).set(*w);
        }
        self.joules.inc_by(s.charged.values().sum());
        self.job_joules.clear();
        if !self.per_job {
            return;
        }
        for (job, j) in jobs {
            self.job_joules.get_or_create(&vec![("job", job.to_string())]).set(*j);
        }
    }

    /// The metrics as text exposition (what a scrape gets).
    pub fn render(&self) -> String {
        dynmig_host::metrics::render(&self.registry)
    }
}
