//! The plugin's own time per `job_submit` call, as slurmctld pays it: every
//! [`WINDOW`] calls one info line in slurmctld's log gives the median, the 99th percentile
//! and the largest of the last window, e.g.
//! `dynmig: job_submit took p50 4 us, p99 19 us, max 130 us over the last 1000 calls`.
//!
//! Slurm's own timing of a submit (`_slurm_rpc_submit_batch_job: ... usec=N`) starts after
//! the job_submit plugins ran, and sdiag gives only means, so this is where the plugin's
//! share of a submit can be read (slurm/bench/load.sh reads it). Recording is a push into a
//! preallocated vector under a mutex; the window is sorted once per [`WINDOW`] calls.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// Calls per summary line.
pub const WINDOW: usize = 1000;

static TIMES_NS: Mutex<Vec<u64>> = Mutex::new(Vec::new());

/// Records one call that took `took`; logs the summary when the window is full.
pub fn record(took: Duration) {
    let full = {
        let mut times = TIMES_NS.lock().unwrap_or_else(PoisonError::into_inner);
        if times.capacity() == 0 {
            times.reserve_exact(WINDOW);
        }
        times.push(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX));
        if times.len() < WINDOW {
            return;
        }
        std::mem::replace(&mut *times, Vec::with_capacity(WINDOW))
    };
    crate::log::info(&summary(full));
}

/// Logs the summary of the calls recorded since the last one, if any (plugin `fini`: a
/// reconfigure that unloads the plugin keeps no partial window).
pub fn flush() {
    let rest = std::mem::take(&mut *TIMES_NS.lock().unwrap_or_else(PoisonError::into_inner));
    if !rest.is_empty() {
        crate::log::info(&summary(rest));
    }
}

/// The summary line of one window of call times (ns).
pub fn summary(mut times_ns: Vec<u64>) -> String {
    times_ns.sort_unstable();
    let n = times_ns.len();
    // Nearest rank.
    let at = |p: usize| times_ns[(p * n).div_ceil(100).clamp(1, n) - 1] / 1000;
    format!(
        "dynmig: job_submit took p50 {} us, p99 {} us, max {} us over the last {n} calls",
        at(50),
        at(99),
        times_ns[n - 1] / 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_gives_nearest_rank_percentiles_in_microseconds() {
        let times: Vec<u64> = (1..=1000).rev().map(|i| i * 1000).collect();
        assert_eq!(
            summary(times),
            "dynmig: job_submit took p50 500 us, p99 990 us, max 1000 us over the last 1000 calls"
        );
        assert_eq!(
            summary(vec![7_999]),
            "dynmig: job_submit took p50 7 us, p99 7 us, max 7 us over the last 1 calls"
        );
    }
}
