//! The history service's Prometheus metrics (`[history] metrics_listen`), updated as records
//! arrive, served by [`dynmig_host::metrics::serve`].
//!
//! What the service knows is what the Epilogs send it, one record per finished run: the
//! submit decision's source, the estimate against the measured peak, whether the run ran out
//! of GPU memory, and whether it was a requeued run (docs/config.md, "Metrics"). Counts start
//! at zero when the service starts; the database keeps the records themselves.

use crate::record::JobRecord;
use dynmig_host::metrics::prometheus_client::metrics::counter::Counter;
use dynmig_host::metrics::prometheus_client::metrics::family::Family;
use dynmig_host::metrics::prometheus_client::metrics::gauge::Gauge;
use dynmig_host::metrics::prometheus_client::metrics::histogram::Histogram;
use dynmig_host::metrics::prometheus_client::registry::Registry;
use std::sync::Arc;

type Labels = Vec<(&'static str, String)>;

/// Buckets of estimate / peak: below 1 the job needed more than estimated; 1.1 to 1.25 is
/// the intended margin; above 2 half the instance idles.
pub const RATIO_BUCKETS: [f64; 11] = [0.5, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0];

fn ratio_histogram() -> Histogram {
    Histogram::new(RATIO_BUCKETS)
}

/// The history service's metrics (module docs).
#[derive(Clone)]
pub struct HistoryMetrics {
    registry: Arc<Registry>,
    records: Family<Labels, Counter>,
    refused: Counter,
    busy: Family<Labels, Counter>,
    oom: Family<Labels, Counter>,
    requeued: Counter,
    ratio: Family<Labels, Histogram, fn() -> Histogram>,
    pending: Gauge,
}

impl std::fmt::Debug for HistoryMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HistoryMetrics")
    }
}

impl Default for HistoryMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl HistoryMetrics {
    /// Every metric registered, at zero.
    pub fn new() -> Self {
        let mut r = Registry::default();
        let m = Self {
            registry: Arc::new(Registry::default()),
            records: Family::default(),
            refused: Counter::default(),
            busy: Family::default(),
            oom: Family::default(),
            requeued: Counter::default(),
            ratio: Family::new_with_constructor(ratio_histogram as fn() -> Histogram),
            pending: Gauge::default(),
        };
        r.register(
            "dynmig_history_records",
            "Job runs recorded, per source of the submit decision (mig-mem, mig-profile, model, history, default, whole-gpu)",
            m.records.clone(),
        );
        r.register(
            "dynmig_history_refused_records",
            "Records refused (bad credential, malformed, out of bounds)",
            m.refused.clone(),
        );
        r.register(
            "dynmig_history_busy_connections",
            "Connections answered 'ERR busy': why=made_room (closed before its line was complete, to make room for a new one: idle or slow clients) or why=full (refused at once: no connection still sending, or its address's share all busy), or why=rate_limited (its address had used its credential checks: no unmunge run)",
            m.busy.clone(),
        );
        r.register(
            "dynmig_history_oom_runs",
            "Runs that ran out of GPU memory, per profile (each is requeued on a larger profile while estimator.max_oom_restarts allows)",
            m.oom.clone(),
        );
        r.register(
            "dynmig_history_requeued_runs",
            "Runs that were not a job's first (Slurm's restart count above 0): out-of-memory restarts and other requeues",
            m.requeued.clone(),
        );
        r.register(
            "dynmig_history_estimate_ratio",
            "Estimator error: the submit-time estimate divided by the measured peak GPU memory, per decision source (runs that did not run out of memory, with both known)",
            m.ratio.clone(),
        );
        r.register(
            "dynmig_history_pending_records",
            "Records stored but not yet in the snapshot job_submit/dynmig reads",
            m.pending.clone(),
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

    /// A new record was stored (duplicates are not counted).
    pub fn stored(&self, r: &JobRecord) {
        let source = if r.source.is_empty() {
            "none".to_string()
        } else {
            r.source.clone()
        };
        self.records.get_or_create(&vec![("source", source.clone())]).inc();
        if r.oom {
            self.oom.get_or_create(&vec![("profile", r.profile.clone())]).inc();
        }
        if r.restart > 0 {
            self.requeued.inc();
        }
        if !r.oom && r.estimate_bytes > 0 && r.peak_bytes > 0 {
            self.ratio
                .get_or_create(&vec![("source", source)])
                .observe(r.estimate_bytes as f64 / r.peak_bytes as f64);
        }
    }

    /// A record was refused.
    pub fn refused(&self) {
        self.refused.inc();
    }

    /// A connection was answered `ERR busy`: closed to make room (`made_room: true`) or
    /// refused at once.
    pub fn busy(&self, made_room: bool) {
        let why = if made_room { "made_room" } else { "full" };
        self.busy.get_or_create(&vec![("why", why.to_string())]).inc();
    }

    /// A line was answered `ERR busy` without a credential check: its address had used its
    /// checks ([`crate::transport::CheckRate`]).
    pub fn rate_limited(&self) {
        self.busy
            .get_or_create(&vec![("why", "rate_limited".to_string())])
            .inc();
    }

    /// Records not yet in the snapshot.
    pub fn set_pending(&self, n: u64) {
        self.pending.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// The metrics as text exposition (what a scrape gets).
    pub fn render(&self) -> String {
        dynmig_host::metrics::render(&self.registry)
    }
}
