//! The snapshot file job_submit/dynmig re-reads inside slurmctld, built ([`build`]) and
//! written ([`write`]) the same way from either store, and its bound:
//! [`MAX_SNAPSHOT_BYTES`] (4 MiB), shared with the reader.
//!
//! When the entries (one per user and job name) do not all fit, [`bound`] keeps them fairly
//! across users: every user's most recent job name first, then every user's second most
//! recent, and so on, users by their latest record, until the next line would pass the
//! bound. A user who runs jobs under thousands of names so loses their own least recent
//! names, never another user's only one.

use crate::Error;
pub use dynmig_core::estimate::history::MAX_SNAPSHOT_BYTES;
use dynmig_core::estimate::history::{HistorySnapshot, PastJob, LINE_OVERHEAD_BYTES, SNAPSHOT_HEADER};
use dynmig_core::estimate::EstimatorConfig;
use std::collections::{HashMap, HashSet};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// The snapshot of `jobs` (oldest first, as [`crate::HistoryStore::past_jobs`] gives them)
/// under the estimator settings: the `history_quantile` of each (user, job name)'s last
/// `history_window` runs, within [`MAX_SNAPSHOT_BYTES`] of text ([`bound`]; a warning says
/// how many entries were left out). Both stores' snapshots are built here.
pub fn build(jobs: Vec<PastJob>, cfg: &EstimatorConfig) -> HistorySnapshot {
    let (jobs, dropped) = bound(jobs, MAX_SNAPSHOT_BYTES);
    if dropped > 0 {
        log::warn!("snapshot: {dropped} (user, job name) entries left out to stay within {MAX_SNAPSHOT_BYTES} bytes");
    }
    HistorySnapshot::from_jobs(&jobs, cfg.history_quantile, cfg.history_window as usize)
}

/// Writes `snap`'s text ([`HistorySnapshot::render`], versioned) to `path` atomically (a
/// reader never sees half a file), mode 0600, creating its folder; with `reader_group`, the
/// file gets that group and mode 0640 (so that slurmctld, running as `SlurmUser`, can read a
/// snapshot written by root).
///
/// # Errors
/// [`Error::Io`] naming the folder or file that could not be created, written, given its
/// group or its mode.
pub fn write(snap: &HistorySnapshot, path: &Path, reader_group: Option<u32>) -> Result<(), Error> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(Error::io("create folder", dir))?;
    }
    dynmig_host::fs::write_atomically(path, snap.render().as_bytes(), 0o600)
        .map_err(Error::io("write snapshot", path))?;
    if let Some(gid) = reader_group {
        // The file is ours and private until here: give it to the group, then open it.
        std::os::unix::fs::lchown(path, None, Some(gid)).map_err(Error::io("set the group of", path))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o640))
            .map_err(Error::io("set the mode of", path))?;
    }
    Ok(())
}

/// The jobs of `jobs` (oldest first) whose (uid, job name) entry fits in a snapshot of at most
/// `max_bytes` (module docs), in the same order, and how many entries were left out. Each
/// entry is counted at [`LINE_OVERHEAD_BYTES`] plus its name's bytes, an upper bound of its
/// line, so the rendered snapshot is never longer than `max_bytes`.
pub fn bound(jobs: Vec<PastJob>, max_bytes: u64) -> (Vec<PastJob>, usize) {
    // The position of each entry's latest job.
    let mut last: HashMap<(u32, &str), usize> = HashMap::new();
    for (i, j) in jobs.iter().enumerate() {
        last.insert((j.uid, j.job_name.as_str()), i);
    }
    let total: u64 =
        SNAPSHOT_HEADER.len() as u64 + last.keys().map(|k| LINE_OVERHEAD_BYTES + k.1.len() as u64).sum::<u64>();
    if total <= max_bytes {
        return (jobs, 0);
    }
    // Each user's entries, most recent first; users by their most recent entry.
    let mut per_user: HashMap<u32, Vec<(usize, &str)>> = HashMap::new();
    for (&(uid, name), &at) in &last {
        per_user.entry(uid).or_default().push((at, name));
    }
    let mut users: Vec<Vec<(usize, &str)>> = per_user.into_values().collect();
    for u in &mut users {
        u.sort_unstable_by(|a, b| b.cmp(a));
    }
    users.sort_unstable_by(|a, b| b[0].cmp(&a[0]));
    let mut used = SNAPSHOT_HEADER.len() as u64;
    let mut keep: HashSet<(u32, String)> = HashSet::new();
    let rounds = users.iter().map(Vec::len).max().unwrap_or(0);
    'fill: for round in 0..rounds {
        for u in &users {
            let Some(&(at, name)) = u.get(round) else { continue };
            let cost = LINE_OVERHEAD_BYTES + name.len() as u64;
            if used + cost > max_bytes {
                break 'fill;
            }
            used += cost;
            keep.insert((jobs[at].uid, name.to_string()));
        }
    }
    let dropped = last.len() - keep.len();
    drop(last);
    let kept = jobs
        .into_iter()
        .filter(|j| keep.contains(&(j.uid, j.job_name.clone())))
        .collect();
    (kept, dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(uid: u32, name: &str) -> PastJob {
        PastJob {
            uid,
            job_name: name.into(),
            peak_bytes: u64::MAX,
            oom: true,
        }
    }

    #[test]
    fn everything_fits_nothing_is_dropped() {
        let jobs = vec![job(1, "a"), job(2, "b"), job(1, "a")];
        assert_eq!(bound(jobs.clone(), MAX_SNAPSHOT_BYTES), (jobs, 0));
    }

    #[test]
    fn a_user_with_thousands_of_names_loses_their_own_oldest_names_only() {
        // Bob and Carol ran one job each long ago; Mallory then ran 100,000 jobs of distinct
        // 200-byte names, the worst case of every number at its longest.
        let mut jobs = vec![job(1001, "bob-train"), job(1002, "carol-eval")];
        for i in 0..100_000u32 {
            jobs.push(job(666, &format!("{i:0>200}")));
        }
        let max = 1 << 20;
        let (kept, dropped) = bound(jobs, max);
        let snap = HistorySnapshot::from_jobs(&kept, 0.95, 20);
        let text = snap.render();
        assert!(text.len() as u64 <= max, "{} bytes", text.len());
        assert!(
            text.len() as u64 > max * 3 / 4,
            "the bound is used: {} bytes",
            text.len()
        );
        assert!(snap.lookup(1001, "bob-train").is_some());
        assert!(snap.lookup(1002, "carol-eval").is_some());
        assert_eq!(dropped, 100_002 - snap.len());
        // Mallory's newest names are the ones kept.
        assert!(snap.lookup(666, &format!("{:0>200}", 99_999)).is_some());
        assert!(snap.lookup(666, &format!("{:0>200}", 0)).is_none());
    }

    #[test]
    fn the_default_bound_holds_the_worst_case() {
        let jobs: Vec<PastJob> = (0..2_000u32).map(|i| job(i, &"x".repeat(4096))).collect();
        let (kept, dropped) = bound(jobs, MAX_SNAPSHOT_BYTES);
        let text = HistorySnapshot::from_jobs(&kept, 0.95, 20).render();
        assert!(text.len() as u64 <= MAX_SNAPSHOT_BYTES);
        assert!(dropped > 0 && !kept.is_empty());
    }
}
