//! Micro check, without criterion: time of one snapshot rebuild (prune + snapshot + write) at
//! the default retention bound. `cargo bench -p dynmig-history` (ROWS=n to change the size).

use dynmig_core::estimate::EstimatorConfig;
use dynmig_history::store::{Retention, Store};
use dynmig_history::{HistoryStore, JobRecord};
use std::time::Instant;

fn main() {
    let rows: u64 = std::env::var("ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(&dir.path().join("h.db")).expect("open");
    let now = dynmig_history::now();
    let t = Instant::now();
    store.insert(&record(0, now)).expect("insert");
    let filled = fill(&store, rows, now);
    eprintln!("filled {filled} rows in {:?}", t.elapsed());
    let cfg = EstimatorConfig::default();
    let snap = dir.path().join("snap.tsv");
    for _ in 0..3 {
        let t = Instant::now();
        store.prune(&Retention::default(), now).expect("prune");
        let n = store.write_snapshot(&cfg, &snap, None).expect("snapshot");
        println!("rebuild at {rows} rows: {:?} ({n} entries)", t.elapsed());
    }
}

fn record(job: u64, now: i64) -> JobRecord {
    JobRecord {
        job_id: job,
        restart: 0,
        node: format!("n{}", job % 64),
        uid: 1000 + (job % 300) as u32,
        user: format!("u{}", job % 300),
        job_name: format!("job-{}", job % 2000),
        profile: "1g.10gb".into(),
        estimate_bytes: 8 << 30,
        source: "history".into(),
        peak_bytes: (job % 10) << 30,
        limit_bytes: 10 << 30,
        exit_status: 0,
        oom: job % 50 == 7,
        end_time: now,
    }
}

fn fill(store: &Store, rows: u64, now: i64) -> u64 {
    // One transaction through a second connection: committing each insert would take minutes.
    let mut conn = rusqlite::Connection::open(store.path()).expect("open");
    let tx = conn.transaction().expect("transaction");
    {
        let mut stmt = tx
            .prepare(
                "INSERT INTO jobs (job_id, restart, node, uid, user, job_name, profile, estimate_bytes, source,
                 peak_bytes, limit_bytes, exit_status, oom, end_time) VALUES (?1, 0, ?2, ?3, ?4, ?5, '1g.10gb',
                 0, 'history', ?6, 10737418240, 0, ?7, ?8)",
            )
            .expect("prepare");
        for job in 1..rows {
            let r = record(job, now);
            stmt.execute(rusqlite::params![
                job as i64,
                r.node,
                r.uid,
                r.user,
                r.job_name,
                r.peak_bytes as i64,
                r.oom,
                now
            ])
            .expect("insert");
        }
    }
    tx.commit().expect("commit");
    store.count().expect("count")
}
