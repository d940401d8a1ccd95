//! The Alibaba PAI "openb" GPU-cluster trace (cluster-trace-gpu-v2023): its pod records and
//! their CSV parser.
//!
//! Columns: `name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, qos, pod_phase,
//! creation_time, deletion_time, scheduled_time`; times are integer seconds from the trace
//! start; `gpu_milli` is the share of one GPU in thousandths for single-GPU pods
//! (crates/dynmig-sim/data/README.md). Cite: Weng et al., "Beware of Fragmentation: Scheduling
//! GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX ATC 2023.

use anyhow::{Context, Result};
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

/// Reads pods from the trace's CSV text.
///
/// # Errors
/// A malformed row, with its line number.
pub fn parse_pods(csv_text: &str) -> Result<Vec<Pod>> {
    let mut rdr = csv::Reader::from_reader(csv_text.as_bytes());
    let mut pods = Vec::new();
    for (i, row) in rdr.deserialize().enumerate() {
        pods.push(row.with_context(|| format!("trace line {}", i + 2))?);
    }
    Ok(pods)
}

/// Reads the trace file at `path`.
///
/// # Errors
/// The file cannot be read (the message names it) or a row is malformed.
/// The trace shipped with dynmig (crates/dynmig-sim/data/README.md): the default of
/// `dynmig simulate --trace`.
pub const EMBEDDED_TRACE: &str = include_str!("../../data/alibaba-gpu-v2023/openb_pod_list_default.csv");

/// The pods of [`EMBEDDED_TRACE`].
///
/// # Errors
/// None in practice: the embedded text is a valid trace (tested).
pub fn embedded_pods() -> Result<Vec<Pod>> {
    parse_pods(EMBEDDED_TRACE).context("parsing the embedded trace")
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
    }
}
