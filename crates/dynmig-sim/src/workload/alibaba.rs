//! The Alibaba PAI "openb" GPU-cluster trace (cluster-trace-gpu-v2023): its pod records and
//! their CSV parser.
//!
//! Columns: `name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, qos, pod_phase,
//! creation_time, deletion_time, scheduled_time`; times are integer seconds from the trace
//! start; `gpu_milli` is the share of one GPU in thousandths for single-GPU pods
//! (crates/dynmig-sim/data/README.md). Cite: Weng et al., "Beware of Fragmentation: Scheduling
//! GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX ATC 2023.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// One pod of the trace.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct Pod {
    /// Pod name, e.g. `openb-pod-0017`.
    pub name: String,
    /// CPU request in thousandths of a CPU.
    pub cpu_milli: u64,
    /// Memory request in MiB.
    pub memory_mib: u64,
    /// GPUs requested (0 for CPU-only pods).
    pub num_gpu: u32,
    /// Share of one GPU in thousandths (single-GPU pods); 1000 for multi-GPU pods.
    pub gpu_milli: u32,
    /// GPU types the pod may use; empty for any.
    #[serde(default)]
    pub gpu_spec: String,
    /// Kubernetes QoS class (`LS`, `BE`, `Burstable`, ...).
    pub qos: String,
    /// Phase at the end of the trace (`Succeeded`, `Running`, `Pending`, `Failed`).
    pub pod_phase: String,
    /// Creation time, seconds from the trace start.
    pub creation_time: i64,
    /// Deletion time, seconds from the trace start (absent for some pods).
    pub deletion_time: Option<i64>,
    /// Time the pod was scheduled; absent for pods that never ran.
    pub scheduled_time: Option<i64>,
}

impl Pod {
    /// How long the pod ran in the trace, if it ran.
    pub fn duration(&self) -> Option<Duration> {
        let (s, d) = (self.scheduled_time?, self.deletion_time?);
        (d >= s).then(|| Duration::from_secs((d - s) as u64))
    }
}

/// The columns of a v2023 pod list, in the publisher's order.
pub const POD_COLUMNS: [&str; 11] = [
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
];

/// Reads pods from the trace's CSV text: any v2023 pod list (`openb_pod_list_*.csv`; empty
/// `gpu_spec`, `deletion_time` and `scheduled_time` fields are allowed). Columns are matched by
/// name, so their order does not matter and extra columns are ignored.
///
/// # Errors
/// A column of [`POD_COLUMNS`] is missing (the message lists the columns expected and the
/// columns found, e.g. for the node list `openb_node_list_gpu_node.csv`), or a malformed row,
/// with its line number.
pub fn parse_pods(csv_text: &str) -> Result<Vec<Pod>> {
    let text = csv_text.strip_prefix('\u{feff}').unwrap_or(csv_text);
    let mut rdr = csv::ReaderBuilder::new()
        .trim(csv::Trim::Headers)
        .from_reader(text.as_bytes());
    let found: Vec<String> = rdr
        .headers()
        .context("reading the header line")?
        .iter()
        .map(String::from)
        .collect();
    let missing: Vec<&str> = POD_COLUMNS
        .iter()
        .copied()
        .filter(|c| !found.iter().any(|f| f == c))
        .collect();
    if !missing.is_empty() {
        bail!(
            "not an Alibaba v2023 pod list (openb_pod_list_*.csv): missing column(s) {}; expected columns: {}; found columns: {}",
            missing.join(", "),
            POD_COLUMNS.join(","),
            found.join(",")
        );
    }
    let mut pods = Vec::new();
    for (i, row) in rdr.deserialize().enumerate() {
        pods.push(row.with_context(|| format!("trace line {}", i + 2))?);
    }
    Ok(pods)
}

/// The trace shipped with dynmig (crates/dynmig-sim/data/README.md):
/// `openb_pod_list_default.csv`, the default of `dynmig simulate --trace`.
pub const EMBEDDED_TRACE: &str = include_str!("../../data/alibaba-gpu-v2023/openb_pod_list_default.csv");

/// The publisher's re-sampled pod list with more fractional-GPU pods,
/// `openb_pod_list_gpushare40.csv`, shipped beside [`EMBEDDED_TRACE`]
/// (`dynmig simulate --trace gpushare40`).
pub const EMBEDDED_GPUSHARE40: &str = include_str!("../../data/alibaba-gpu-v2023/openb_pod_list_gpushare40.csv");

/// The publisher's pod list with fewer fractional-GPU pods, `openb_pod_list_gpushare20.csv`
/// (validation only: crates/dynmig-sim/data/README.md, "Splits"; `--trace gpushare20`).
pub const EMBEDDED_GPUSHARE20: &str = include_str!("../../data/alibaba-gpu-v2023/openb_pod_list_gpushare20.csv");

/// The publisher's pod list with more fractional-GPU pods, `openb_pod_list_gpushare60.csv`
/// (validation only: crates/dynmig-sim/data/README.md, "Splits"; `--trace gpushare60`).
pub const EMBEDDED_GPUSHARE60: &str = include_str!("../../data/alibaba-gpu-v2023/openb_pod_list_gpushare60.csv");

/// The publisher's pod list with 80% fractional-GPU pods, `openb_pod_list_gpushare80.csv`
/// (test only, held out: crates/dynmig-sim/data/README.md, "Splits"; `--trace gpushare80`).
pub const EMBEDDED_GPUSHARE80: &str = include_str!("../../data/alibaba-gpu-v2023/openb_pod_list_gpushare80.csv");

/// The publisher's pod list with only fractional-GPU pods, `openb_pod_list_gpushare100.csv`
/// (test only, held out: crates/dynmig-sim/data/README.md, "Splits"; `--trace gpushare100`).
pub const EMBEDDED_GPUSHARE100: &str = include_str!("../../data/alibaba-gpu-v2023/openb_pod_list_gpushare100.csv");

/// Which part of the data discipline a trace belongs to (crates/dynmig-sim/data/README.md,
/// "Splits"): policies and the simulator are developed on [`Split::Development`] traces only
/// and judged, never tuned, on [`Split::Validation`] ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// The embedded default pod list and the synthetic generator: what every design choice
    /// was made on.
    Development,
    /// gpushare20, gpushare40 and gpushare60: judged only.
    Validation,
    /// gpushare80 and gpushare100: held out, judged only for a design fixed beforehand, and
    /// said so (first used 2026-11-28 for the guarded default's third build).
    Test,
    /// A pod list given by path: the user's own.
    Other,
}

impl Split {
    /// The split of a trace named as on the command line (`default`, `gpushare40`,
    /// `synthetic`, a path).
    pub fn of(trace: &str) -> Split {
        match trace {
            "default" | "synthetic" => Split::Development,
            "gpushare20" | "gpushare40" | "gpushare60" => Split::Validation,
            "gpushare80" | "gpushare100" => Split::Test,
            _ => Split::Other,
        }
    }

    /// The split in words, for results tables.
    pub fn name(self) -> &'static str {
        match self {
            Split::Development => "development",
            Split::Validation => "validation",
            Split::Test => "test (held out)",
            Split::Other => "user trace",
        }
    }
}

/// The pods of [`EMBEDDED_TRACE`].
///
/// # Errors
/// None in practice: the embedded text is a valid trace (tested).
pub fn embedded_pods() -> Result<Vec<Pod>> {
    parse_pods(EMBEDDED_TRACE).context("parsing the embedded trace")
}

/// Names of the shipped traces that [`pods_of`] takes instead of a path.
pub const SHIPPED_TRACES: [&str; 6] = [
    "default",
    "gpushare20",
    "gpushare40",
    "gpushare60",
    "gpushare80",
    "gpushare100",
];

/// The pods of a trace named on the command line: `default`, `gpushare20`, `gpushare40`,
/// `gpushare60`, `gpushare80` or `gpushare100` (shipped, see
/// [`SHIPPED_TRACES`]), or else a path to a pod-list CSV.
///
/// # Errors
/// The file cannot be read or is not a pod list.
pub fn pods_of(trace: &str) -> Result<Vec<Pod>> {
    match trace {
        "default" => embedded_pods(),
        "gpushare20" => parse_pods(EMBEDDED_GPUSHARE20).context("parsing the embedded gpushare20 trace"),
        "gpushare40" => parse_pods(EMBEDDED_GPUSHARE40).context("parsing the embedded gpushare40 trace"),
        "gpushare60" => parse_pods(EMBEDDED_GPUSHARE60).context("parsing the embedded gpushare60 trace"),
        "gpushare80" => parse_pods(EMBEDDED_GPUSHARE80).context("parsing the embedded gpushare80 trace"),
        "gpushare100" => parse_pods(EMBEDDED_GPUSHARE100).context("parsing the embedded gpushare100 trace"),
        path => read_pods(std::path::Path::new(path)),
    }
}

/// Reads and parses a trace file.
///
/// # Errors
/// The file cannot be read or is not a trace.
pub fn read_pods(path: &std::path::Path) -> Result<Vec<Pod>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading trace {}", path.display()))?;
    parse_pods(&text).with_context(|| format!("parsing trace {}", path.display()))
}

#[cfg(test)]
mod embedded_tests {
    #[test]
    fn the_embedded_trace_is_the_whole_published_file() {
        // 8,152 pods, as the publisher's file holds (crates/dynmig-sim/data/README.md).
        assert_eq!(super::embedded_pods().unwrap().len(), 8152);
        for name in ["gpushare20", "gpushare40", "gpushare60", "gpushare80", "gpushare100"] {
            assert_eq!(super::pods_of(name).unwrap().len(), 8152, "{name}");
        }
    }

    #[test]
    fn every_shipped_trace_but_the_default_is_validation_or_test_only() {
        use super::Split;
        assert_eq!(Split::of("default"), Split::Development);
        assert_eq!(Split::of("synthetic"), Split::Development);
        for name in ["gpushare20", "gpushare40", "gpushare60"] {
            assert_eq!(Split::of(name), Split::Validation, "{name}");
        }
        for name in ["gpushare80", "gpushare100"] {
            assert_eq!(Split::of(name), Split::Test, "{name}");
        }
        assert_eq!(super::SHIPPED_TRACES.len(), 6);
        assert_eq!(Split::of("/tmp/pods.csv"), Split::Other);
    }
}
