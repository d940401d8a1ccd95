//! Unit tests of [`super`].

use super::*;

fn rec() -> JobRecord {
    JobRecord {
        job_id: 42,
        restart: 1,
        node: "gpu1".into(),
        uid: 1000,
        user: "alice".into(),
        job_name: "train \"x\", y=1 %z é".into(),
        profile: "2g.20gb".into(),
        estimate_bytes: 18 << 30,
        source: "mig-mem".into(),
        peak_bytes: 17 << 30,
        limit_bytes: 20 << 30,
        exit_status: -1,
        oom: true,
        end_time: 1_700_000_000,
    }
}

fn sacct_json(jobs: &[serde_json::Value]) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "meta": {"plugin": {"type": "openapi/dbv0.0.38"}},
        "errors": [],
        "jobs": jobs,
    }))
    .unwrap()
}

#[test]
fn a_record_the_epilog_wrote_without_a_name_gets_the_jobs_name_and_decision() {
    let mut r = rec();
    (r.job_name, r.estimate_bytes, r.source) = (String::new(), 0, String::new());
    let c = encode_comment(&r).unwrap();
    let decision = dynmig_core::protocol::decision::DecisionRecord::new(
        "2g.20gb",
        1,
        15 << 30,
        dynmig_core::types::EstimateSource::MigMemHint,
    )
    .encode();
    let json = sacct_json(&[
        serde_json::json!({"job_id": 42, "name": "train", "user": "alice",
            "comment": {"administrator": decision, "job": null, "system": c}}),
        // Without dynmig's decision record (an administrator's own AdminComment): the name only.
        serde_json::json!({"job_id": 43, "name": "eval", "user": "alice",
            "comment": {"administrator": "moved by hand", "system": c.replace("job_id=42", "job_id=43")}}),
    ]);
    let got = records_from_sacct(&json).unwrap();
    let named: Vec<(u64, &str, u64, &str)> = got
        .records
        .iter()
        .map(|x| (x.job_id, x.job_name.as_str(), x.estimate_bytes, x.source.as_str()))
        .collect();
    assert_eq!(
        named,
        [(42, "train", 15 << 30, "mig-mem"), (43, "eval", 0, "")],
        "{:?}",
        got.skipped
    );
}

#[test]
fn sacct_json_gives_the_system_comments_records_and_only_those() {
    let r = rec();
    let c = encode_comment(&r).unwrap();
    let mut forged = r.clone();
    forged.job_id = 7;
    forged.peak_bytes = 1;
    let json = sacct_json(&[
        serde_json::json!({"job_id": 42, "name": r.job_name, "user": "alice", "state": {"current": "COMPLETED"},
            "comment": {"administrator": "dynmig/v1 profile=2g.20gb", "job": null, "system": c}}),
        // A user's own Comment is never read, even when it looks like a record.
        serde_json::json!({"job_id": 7, "name": r.job_name, "user": "alice",
            "comment": {"job": encode_comment(&forged).unwrap(), "system": null}}),
        // A record copied onto another job, or naming another user: skipped.
        serde_json::json!({"job_id": 8, "name": r.job_name, "user": "alice", "comment": {"system": c}}),
        serde_json::json!({"job_id": 42, "name": r.job_name, "user": "mallory", "comment": {"system": c}}),
        serde_json::json!({"job_id": 9, "name": "x", "user": "bob", "comment": {"system": "dynmig-history/v1 job_id=9 end"}}),
        serde_json::json!({"job_id": 10, "name": "x", "user": "bob"}),
    ]);
    let got = records_from_sacct(&json).unwrap();
    assert_eq!(got.records, vec![r.clone()]);
    assert_eq!(got.skipped.len(), 3, "{:?}", got.skipped);
    assert!(
        got.skipped[0].starts_with("job 8: its record's job id '42'"),
        "{:?}",
        got.skipped
    );
    assert!(got.skipped[1].contains("user 'alice'"), "{:?}", got.skipped);
    let snap = snapshot(&got.records, &EstimatorConfig::default());
    let e = snap.lookup(1000, &r.job_name).expect("the job's entry");
    assert_eq!((e.samples, e.ooms, e.max_peak_bytes), (1, 1, 20 << 30));
}

#[test]
fn hostile_or_truncated_sacct_output_is_an_error_not_a_record() {
    let json = sacct_json(&[serde_json::json!({"job_id": 42, "name": "a", "user": "b"})]);
    for n in [0, 1, json.len() / 2, json.len() - 1] {
        let e = records_from_sacct(&json[..n]).unwrap_err().to_string();
        assert!(e.contains("not what sacct prints"), "{e}");
    }
    for bad in [
        &br#"{"jobs": [{"job_id": "42"}]}"#[..],
        br#"{"jobs": [{"job_id": -1}]}"#,
        br#"{"jobs": {"job_id": 1}}"#,
        br#"{"jobs": [{"job_id": 1, "comment": {"system": 5}}]}"#,
        br#"[]"#,
        b"\xff\xfe",
    ] {
        assert!(records_from_sacct(bad).is_err(), "{}", String::from_utf8_lossy(bad));
    }
    assert!(records_from_sacct(br#"{"jobs": []}"#).unwrap().records.is_empty());
}

#[test]
fn a_sacctmgr_that_never_finds_the_job_fails_within_the_budget_with_its_answer() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("sacctmgr");
    std::fs::write(&fake, "#!/bin/sh\necho \" Nothing modified\"\n").unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let t = Instant::now();
    let e = write_record(&fake, Path::new("/nonexistent/sacct"), &rec(), Duration::from_secs(1))
        .unwrap_err()
        .to_string();
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(e.contains("job 42") && e.contains("Nothing modified"), "{e}");
    let log = dir.path().join("args");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > {}\necho ' Modified jobs...'\n",
            log.display()
        ),
    )
    .unwrap();
    write_record(&fake, Path::new("/nonexistent/sacct"), &rec(), Duration::from_secs(5)).unwrap();
    let args = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = args.lines().collect();
    assert_eq!(&lines[..6], &["-i", "modify", "job", "where", "jobid=42", "set"]);
    let comment = lines[6].strip_prefix("SystemComment=").unwrap();
    assert_eq!(decode_comment(comment).unwrap(), Some(rec()));
}

#[test]
fn the_same_runs_record_on_two_rows_of_a_requeued_job_counts_once() {
    let r0 = JobRecord { restart: 0, ..rec() };
    let r1 = rec();
    let both = merge_comment(Some(&encode_comment(&r0).unwrap()), &r1).unwrap();
    let json = sacct_json(&[
        serde_json::json!({"job_id": 42, "user": "alice", "comment": {"system": both}}),
        serde_json::json!({"job_id": 42, "user": "alice", "comment": {"system": both}}),
    ]);
    let got = records_from_sacct(&json).unwrap();
    assert_eq!(got.records, vec![r0, r1]);
    assert!(got.skipped.is_empty(), "{:?}", got.skipped);
}

#[test]
fn flushing_the_spool_writes_the_epilogs_record_first_and_retries_older_ones() {
    let dir = tempfile::tempdir().unwrap();
    let spool = dir.path().join("spool");
    let older = JobRecord { job_id: 7, ..rec() };
    crate::spool::put(&spool, &older).unwrap();
    let own = crate::spool::put(&spool, &rec()).unwrap();
    // slurmdbd has job 42 but not job 7 (purged): 42 is written, 7 stays spooled.
    let log = dir.path().join("log");
    let fake = dir.path().join("sacctmgr");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\necho \"$5\" >> {}\ncase \"$5\" in jobid=42) echo ' Modified jobs...';; *) echo ' Nothing modified';; esac\n",
            log.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let t = Instant::now();
    let f = flush_spool(
        &fake,
        Path::new("/nonexistent/sacct"),
        &spool,
        Some(&own),
        Duration::from_secs(10),
    );
    assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
    assert_eq!((f.delivered, f.refused, f.pending), (1, 0, 1));
    let tried: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(tried[0], "jobid=42", "{tried:?}");
    assert!(tried[1..].iter().all(|t| t == "jobid=7"), "{tried:?}");
    let left: Vec<u64> = crate::spool::list(&spool).iter().map(|(_, r)| r.job_id).collect();
    assert_eq!(left, vec![7]);
}

/// A fake sacct that logs its time arguments, one line per run, and prints `out.json`.
fn fake_sacct(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let fake = dir.join("sacct");
    let log = dir.join("log");
    let out = dir.join("out.json");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\necho \"$4 $5\" >> {}\ncat {}\n",
            log.display(),
            out.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    (fake, log, out)
}

fn job_json(r: &JobRecord) -> serde_json::Value {
    serde_json::json!({"job_id": r.job_id, "user": r.user, "comment": {"system": encode_comment(r).unwrap()}})
}

fn log_lines(log: &Path) -> Vec<String> {
    let l = std::fs::read_to_string(log).unwrap_or_default();
    std::fs::write(log, "").unwrap();
    l.lines().map(str::to_string).collect()
}

#[test]
fn sacct_is_read_in_slices_first_then_only_since_the_last_read() {
    let dir = tempfile::tempdir().unwrap();
    let (fake, log, out) = fake_sacct(dir.path());
    let day = 86_400;
    let now = 1_000_000_000;
    let a = JobRecord {
        job_id: 42,
        restart: 0,
        end_time: now - 100,
        ..rec()
    };
    let old = JobRecord {
        job_id: 43,
        end_time: now - 4 * day,
        ..rec()
    };
    std::fs::write(&out, sacct_json(&[job_json(&a), job_json(&old)])).unwrap();
    let mut held = Incremental::new(
        &fake,
        Duration::from_secs(3 * day as u64),
        crate::store::Retention::default(),
    );
    // The first read: the 3-day window in 1-day slices, newest first; a record older than
    // the window is not held.
    let r = held.refresh(now);
    assert_eq!((r.reads, r.full, r.records, r.dropped), (3, true, 1, 1), "{r:?}");
    assert!(r.failed.is_empty(), "{r:?}");
    assert_eq!(
        log_lines(&log),
        [
            "--starttime=now-86400 --endtime=now",
            "--starttime=now-172800 --endtime=now-86400",
            "--starttime=now-259200 --endtime=now-172800"
        ]
    );
    // A minute later: one read of the last minute and the overlap; job 42 seen again counts
    // once, job 44 is added.
    let b = JobRecord {
        job_id: 44,
        end_time: now + 30,
        ..rec()
    };
    std::fs::write(&out, sacct_json(&[job_json(&a), job_json(&b)])).unwrap();
    let r = held.refresh(now + 60);
    assert_eq!((r.reads, r.full, r.records), (1, false, 2), "{r:?}");
    assert_eq!(log_lines(&log), ["--starttime=now-360 --endtime=now"]);
    // sacct fails (here: prints what is not its JSON): what is held stays, updating goes on.
    std::fs::write(&out, "not json").unwrap();
    let r = held.refresh(now + 120);
    assert_eq!((r.reads, r.records, r.failed.len()), (1, 2, 1), "{r:?}");
    assert!(r.failed[0].contains("not what sacct prints"), "{r:?}");
    assert_eq!(log_lines(&log), ["--starttime=now-360 --endtime=now"]);
    let mut ids: Vec<u64> = held.records().map(|r| r.job_id).collect();
    ids.sort_unstable();
    assert_eq!(ids, [42, 44]);
    // A day after the first read: the whole window again.
    std::fs::write(&out, sacct_json(&[job_json(&b)])).unwrap();
    let r = held.refresh(now + day);
    assert_eq!((r.reads, r.full, r.records), (3, true, 2), "{r:?}");
    // Three days on (a whole read again, two days after the last), job 42 has left the
    // window.
    let r = held.refresh(now + 3 * day);
    assert_eq!((r.full, r.records, r.dropped), (true, 1, 1), "{r:?}");
}

#[test]
fn what_the_incremental_reader_holds_is_bounded_per_user_first() {
    let dir = tempfile::tempdir().unwrap();
    let (fake, _log, out) = fake_sacct(dir.path());
    let now = 1_000_000_000;
    let mut jobs = Vec::new();
    for j in 0..5u64 {
        jobs.push(job_json(&JobRecord {
            job_id: 100 + j,
            uid: 1001,
            user: "bob".into(),
            end_time: now - 1000 + j as i64,
            ..rec()
        }));
    }
    for j in 0..50u64 {
        jobs.push(job_json(&JobRecord {
            job_id: 1000 + j,
            uid: 666,
            user: "mallory".into(),
            end_time: now - 500 + j as i64,
            ..rec()
        }));
    }
    std::fs::write(&out, sacct_json(&jobs)).unwrap();
    let keep = crate::store::Retention {
        max_records: 20,
        max_per_user: 30,
        max_age: Duration::from_secs(365 * 86_400),
    };
    let mut held = Incremental::new(&fake, Duration::from_secs(86_400), keep);
    let r = held.refresh(now);
    assert_eq!((r.records, r.dropped), (20, 35), "{r:?}");
    let bob = held.records().filter(|r| r.uid == 1001).count();
    assert_eq!(bob, 5, "Bob keeps every record");
    let oldest_mallory = held.records().filter(|r| r.uid == 666).map(|r| r.job_id).min();
    assert_eq!(oldest_mallory, Some(1035), "Mallory keeps her newest 15");
}

#[test]
fn show_reads_sacct_and_filters_by_user_and_name_newest_last() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = rec();
    a.restart = 0;
    a.end_time = 10;
    let b = JobRecord { end_time: 20, ..rec() };
    let other = JobRecord {
        job_id: 43,
        job_name: "other".into(),
        end_time: 30,
        ..rec()
    };
    let both = merge_comment(Some(&encode_comment(&a).unwrap()), &b).unwrap();
    let json = sacct_json(&[
        serde_json::json!({"job_id": 42, "user": "alice", "comment": {"system": both}}),
        serde_json::json!({"job_id": 43, "user": "alice", "comment": {"system": encode_comment(&other).unwrap()}}),
    ]);
    std::fs::write(dir.path().join("out.json"), json).unwrap();
    let fake = dir.path().join("sacct");
    std::fs::write(
        &fake,
        format!("#!/bin/sh\ncat {}\n", dir.path().join("out.json").display()),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let w = Duration::from_secs(86400);
    let table = show(&fake, w, Some("alice"), Some(&a.job_name), 10, false).unwrap();
    assert_eq!(table.lines().count(), 3, "{table}");
    assert!(!table.contains("other"), "{table}");
    let v: serde_json::Value = serde_json::from_str(&show(&fake, w, Some("1000"), None, 2, true).unwrap()).unwrap();
    let ends: Vec<i64> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["end_time"].as_i64().unwrap())
        .collect();
    assert_eq!(ends, vec![20, 30]);
    assert!(show(&fake, w, Some("bob"), None, 10, true).unwrap().trim() == "[]");
}
