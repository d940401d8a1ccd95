//! Unit tests of [`super`].

use super::*;
use dynmig_core::estimate::history::HistorySnapshot;
use dynmig_core::estimate::EstimatorConfig;

pub(crate) fn rec(job: u64, peak: u64, oom: bool) -> JobRecord {
    JobRecord {
        job_id: job,
        restart: 0,
        node: "n1".into(),
        uid: 1000,
        user: "alice".into(),
        job_name: "ft".into(),
        profile: "1g.10gb".into(),
        estimate_bytes: 0,
        source: "default".into(),
        peak_bytes: peak,
        limit_bytes: 100,
        exit_status: if oom { 97 } else { 0 },
        oom,
        end_time: 1_000_000,
    }
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn insert_dedup_list_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(&dir.path().join("h.db")).unwrap();
    assert!(s.insert(&rec(1, 40, false)).unwrap());
    assert!(!s.insert(&rec(1, 40, false)).unwrap());
    assert!(s.insert(&rec(2, 60, false)).unwrap());
    assert!(s.insert(&rec(3, 10, true)).unwrap());
    let all = s.list(None, None, 10).unwrap();
    assert_eq!(all.iter().map(|r| r.job_id).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(s.list(Some("1000"), Some("ft"), 1).unwrap()[0].job_id, 3);
    assert!(s.list(Some("bob"), None, 10).unwrap().is_empty());
    assert_eq!(s.list(None, None, usize::MAX).unwrap().len(), 3);
    let cfg = EstimatorConfig::default();
    let snap = s.snapshot(&cfg).unwrap();
    let e = snap.lookup(1000, "ft").unwrap();
    // The out-of-memory run counts with its instance's memory (100).
    assert_eq!((e.samples, e.max_peak_bytes, e.ooms), (3, 100, 1));
    let path = dir.path().join("snap.tsv");
    assert_eq!(s.write_snapshot(&cfg, &path, None).unwrap(), 1);
    let back = HistorySnapshot::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(back.lookup(1000, "ft"), Some(e));
}

#[test]
fn database_and_snapshot_are_created_private() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state/history.db");
    let s = Store::open(&db).unwrap();
    s.insert(&rec(1, 1, false)).unwrap();
    assert_eq!(mode(&db), 0o600);
    let snap = dir.path().join("snap.tsv");
    s.write_snapshot(&EstimatorConfig::default(), &snap, None).unwrap();
    assert_eq!(mode(&snap), 0o600);
    // The process's own group: allowed without privileges.
    let gid = unsafe { libc::getegid() };
    s.write_snapshot(&EstimatorConfig::default(), &snap, Some(gid)).unwrap();
    assert_eq!(mode(&snap), 0o640);
}

#[test]
fn an_existing_world_readable_database_is_made_private() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("history.db");
    drop(Store::open(&db).unwrap());
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    drop(Store::open(&db).unwrap());
    assert_eq!(mode(&db), 0o600);
}

#[test]
fn a_link_in_place_of_the_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("victim");
    std::fs::write(&target, b"keep").unwrap();
    let db = dir.path().join("history.db");
    std::os::unix::fs::symlink(&target, &db).unwrap();
    assert!(Store::open(&db).is_err());
    assert_eq!(std::fs::read(&target).unwrap(), b"keep");
}

#[test]
fn retention_keeps_the_newest_records_and_drops_old_ones() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(&dir.path().join("h.db")).unwrap();
    let day = 24 * 3600;
    let now = 1_000 * day;
    for job in 1..=10u64 {
        let mut r = rec(job, job, false);
        r.end_time = now - if job == 3 { 400 * day } else { day };
        s.insert(&r).unwrap();
    }
    let keep = Retention {
        max_records: 5,
        max_per_user: 100,
        max_age: Duration::from_secs(365 * day as u64),
    };
    // Job 3 is too old; of the rest, jobs 6 to 10 are the 5 newest.
    assert_eq!(s.prune(&keep, now).unwrap(), 5);
    let left: Vec<u64> = s.list(None, None, 100).unwrap().iter().map(|r| r.job_id).collect();
    assert_eq!(left, [6, 7, 8, 9, 10]);
    assert_eq!(s.prune(&keep, now).unwrap(), 0, "nothing more to prune");
    assert_eq!(s.count().unwrap(), 5);
}

#[test]
fn water_filling_takes_from_the_largest_first_and_exactly_the_excess() {
    assert_eq!(water_fill(&[10, 3, 1], 0), []);
    // 10 -> 6: only the largest loses.
    assert_eq!(water_fill(&[10, 3, 1], 4), [(0, 6)]);
    // Both above 3 cut to 3, then one keeps one more: 9 + 5 + 1 = 15, keep 8 of them.
    let cut = water_fill(&[9, 5, 1], 7);
    let kept: u64 = [9u64, 5, 1]
        .iter()
        .enumerate()
        .map(|(i, &c)| cut.iter().find(|x| x.0 == i).map_or(c, |x| x.1))
        .sum();
    assert_eq!(kept, 8, "{cut:?}");
    assert!(cut.iter().all(|&(i, k)| i < 2 && (3..=4).contains(&k)), "{cut:?}");
    assert_eq!(water_fill(&[4, 4], 8), [(0, 0), (1, 0)]);
}

#[test]
fn a_users_flood_evicts_only_that_users_oldest_records() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(&dir.path().join("h.db")).unwrap();
    // Bob's 50 records first (the oldest), then Mallory's flood of 10,000 (one transaction:
    // a commit per record takes a disk flush each).
    s.conn.execute_batch("BEGIN").unwrap();
    for job in 1..=50u64 {
        s.insert(&JobRecord {
            uid: 1001,
            user: "bob".into(),
            ..rec(job, job, false)
        })
        .unwrap();
    }
    for job in 100_000..110_000u64 {
        s.insert(&JobRecord {
            uid: 666,
            user: "mallory".into(),
            ..rec(job, 1, false)
        })
        .unwrap();
    }
    s.conn.execute_batch("COMMIT").unwrap();
    let keep = Retention {
        max_records: 1000,
        max_per_user: 5000,
        max_age: Duration::from_secs(365 * 24 * 3600),
    };
    assert_eq!(s.prune(&keep, 1_000_000).unwrap(), 9050);
    assert_eq!(s.count().unwrap(), 1000);
    let bob: Vec<u64> = s
        .list(Some("bob"), None, 1000)
        .unwrap()
        .iter()
        .map(|r| r.job_id)
        .collect();
    assert_eq!(bob, (1..=50).collect::<Vec<_>>(), "every one of Bob's records stays");
    let mallory = s.list(Some("mallory"), None, 10_000).unwrap();
    assert_eq!(mallory.len(), 950);
    assert_eq!(mallory[0].job_id, 110_000 - 950, "Mallory keeps her newest");
    // Per user: Mallory alone above 5000 goes down to it even with room in all.
    let roomy = Retention {
        max_records: 1_000_000,
        max_per_user: 100,
        ..keep
    };
    assert_eq!(s.prune(&roomy, 1_000_000).unwrap(), 850);
    assert_eq!(s.list(Some("bob"), None, 1000).unwrap().len(), 50);
    assert_eq!(s.list(Some("mallory"), None, 10_000).unwrap()[0].job_id, 110_000 - 100);
}

#[test]
fn show_of_a_missing_database_says_so_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("none.db");
    assert!(matches!(Store::open_read_only(&db), Err(Error::NoDatabase { .. })));
    assert!(!db.exists());
}
