//! The history source: a high quantile of the peaks of a user's past jobs of the same name,
//! times a margin. Pure logic: the quantile, the per-(user, job name) summary and the compact
//! snapshot text that the controller host writes and job_submit/dynmig reads
//! (docs/history.md).
//!
//! A job that ran out of memory counts with the memory of the instance it had (its true need
//! is at least that), so one out-of-memory run moves the next estimate past that instance.
//!
//! The snapshot's text is the versioned codec [`crate::protocol::history_snapshot`]
//! (`# dynmig-history-snapshot/v1`, then one tab-separated line per user and job name).

use crate::protocol::history_snapshot;
use std::collections::HashMap;

/// Largest snapshot file, bytes (4 MiB): the history service never writes a larger one
/// (it leaves out the entries that do not fit, each user's least recent first, see
/// `dynmig_history::snapshot`), and job_submit/dynmig, inside slurmctld, reads no more. A
/// line is about 80 bytes plus the job name, so this holds some 40,000 entries of 20-byte
/// names.
pub const MAX_SNAPSHOT_BYTES: u64 = 4 << 20;

pub use crate::protocol::history_snapshot::{HistoryEntry, LINE_OVERHEAD_BYTES, SNAPSHOT_HEADER};

/// One past job, as the summary needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PastJob {
    /// The user's numeric id.
    pub uid: u32,
    /// The job name.
    pub job_name: String,
    /// Peak GPU memory, bytes (for an out-of-memory run: the instance's memory).
    pub peak_bytes: u64,
    /// Whether it ran out of memory.
    pub oom: bool,
}

/// The nearest-rank quantile `q` (0 < q <= 1) of `values`: the smallest value such that at
/// least `q` of the values are at most it. `None` for no values.
///
/// ```
/// use dynmig_core::estimate::history::quantile;
/// assert_eq!(quantile(&[5, 1, 3, 2, 4], 0.5), Some(3));
/// assert_eq!(quantile(&[5, 1, 3, 2, 4], 0.95), Some(5));
/// assert_eq!(quantile(&[], 0.95), None);
/// ```
pub fn quantile(values: &[u64], q: f64) -> Option<u64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_unstable();
    let rank = (q.clamp(0.0, 1.0) * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}

/// The history estimate of an entry: `ceil(quantile_peak x margin)`, or `None` with fewer
/// than `min_samples` jobs.
pub fn history_estimate(entry: &HistoryEntry, margin: f64, min_samples: u32) -> Option<u64> {
    (entry.samples >= min_samples.max(1)).then(|| (entry.quantile_peak_bytes as f64 * margin).ceil() as u64)
}

/// Per (uid, job name) summaries: what job_submit/dynmig looks up at submit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistorySnapshot {
    entries: HashMap<(u32, String), HistoryEntry>,
}

impl HistorySnapshot {
    /// Summarises past jobs: per (uid, job name), the `q` quantile of the last `window` peaks
    /// (in the order given, oldest first), their maximum and the out-of-memory count.
    pub fn from_jobs<'a>(jobs: impl IntoIterator<Item = &'a PastJob>, q: f64, window: usize) -> Self {
        let mut peaks: HashMap<(u32, String), (Vec<u64>, u32)> = HashMap::new();
        for j in jobs {
            let e = peaks.entry((j.uid, j.job_name.clone())).or_default();
            e.0.push(j.peak_bytes);
            e.1 += u32::from(j.oom);
        }
        let entries = peaks
            .into_iter()
            .map(|(k, (mut v, ooms))| {
                if v.len() > window.max(1) {
                    v.drain(..v.len() - window.max(1));
                }
                let entry = HistoryEntry {
                    samples: v.len() as u32,
                    quantile_peak_bytes: quantile(&v, q).unwrap_or(0),
                    max_peak_bytes: v.iter().copied().max().unwrap_or(0),
                    ooms,
                };
                (k, entry)
            })
            .collect();
        Self { entries }
    }

    /// The entry of `uid`'s jobs named `job_name`.
    pub fn lookup(&self, uid: u32, job_name: &str) -> Option<&HistoryEntry> {
        self.entries.get(&(uid, job_name.to_string()))
    }

    /// Number of (uid, job name) entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there is no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The snapshot text, sorted by uid then name ([`history_snapshot::encode`]).
    pub fn render(&self) -> String {
        history_snapshot::encode(self.entries.iter().map(|((uid, name), e)| (*uid, name.as_str(), e)))
    }

    /// Reads the snapshot text, versioned or not ([`history_snapshot::decode`]).
    ///
    /// # Errors
    /// The 1-based line number and what is wrong with it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut entries = HashMap::new();
        history_snapshot::decode(text, |l| {
            entries.insert((l.uid, l.job_name.to_string()), l.entry);
        })
        .map_err(|e| e.to_string())?;
        Ok(Self { entries })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(uid: u32, name: &str, peak: u64, oom: bool) -> PastJob {
        PastJob {
            uid,
            job_name: name.into(),
            peak_bytes: peak,
            oom,
        }
    }

    #[test]
    fn quantile_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(quantile(&v, 0.95), Some(95));
        assert_eq!(quantile(&v, 1.0), Some(100));
        assert_eq!(quantile(&v, 0.0), Some(1));
        assert_eq!(quantile(&[7], 0.5), Some(7));
    }

    #[test]
    fn snapshot_round_trip_and_window() {
        let jobs = vec![
            job(1000, "train", 100, false),
            job(1000, "train", 300, false),
            job(1000, "train", 200, true),
            job(1001, "train", 50, false),
            job(1000, "we\tird", 9, false),
        ];
        let s = HistorySnapshot::from_jobs(&jobs, 0.95, 2);
        let e = s.lookup(1000, "train").unwrap();
        assert_eq!(
            (e.samples, e.quantile_peak_bytes, e.max_peak_bytes, e.ooms),
            (2, 300, 300, 1)
        );
        assert_eq!(s.lookup(1001, "train").unwrap().max_peak_bytes, 50);
        assert!(s.lookup(1002, "train").is_none());
        let back = HistorySnapshot::parse(&s.render()).unwrap();
        assert_eq!(back.lookup(1000, "train"), s.lookup(1000, "train"));
        assert_eq!(back.lookup(1000, "we ird").unwrap().samples, 1);
        assert!(HistorySnapshot::parse("1\t2\n").unwrap_err().starts_with("line 1"));
    }

    #[test]
    fn estimate_needs_min_samples_and_applies_margin() {
        let e = HistoryEntry {
            samples: 2,
            quantile_peak_bytes: 1000,
            max_peak_bytes: 1000,
            ooms: 0,
        };
        assert_eq!(history_estimate(&e, 1.1, 3), None);
        assert_eq!(history_estimate(&e, 1.1, 2), Some(1100));
    }
}
