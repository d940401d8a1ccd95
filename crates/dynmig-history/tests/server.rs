//! The history server and the spool flush on loopback, with a fake credential check (no
//! munged needed): `FAKE:<hex>` is root's credential, `USER:<hex>` another uid's, `SLOW:`
//! one that takes 1.5 s to refuse.

mod common;

use dynmig_core::estimate::history::HistorySnapshot;
use dynmig_core::estimate::EstimatorConfig;
use dynmig_history::auth::{AuthError, Sealer, Verifier};
use dynmig_history::store::{Retention, Store};
use dynmig_history::transport::{self, send_line, Server, ServerSettings};
use dynmig_history::{spool, JobRecord};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Fake;

/// Checks of `COUNT:` credentials (only `a_flooding_address_is_rate_limited...` sends them).
static COUNTED_CHECKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    (0..s.len())
        .step_by(2)
        .map(|i| s.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect()
}

impl Sealer for Fake {
    fn seal(&self, payload: &[u8]) -> Result<String, AuthError> {
        Ok(format!("FAKE:{}", hex(payload)))
    }
}

impl Verifier for Fake {
    fn verify(&self, credential: &str) -> Result<Vec<u8>, AuthError> {
        if let Some(h) = credential.strip_prefix("FAKE:") {
            return unhex(h).ok_or_else(|| AuthError::Refused("Invalid credential format".into()));
        }
        if credential.starts_with("USER:") {
            return Err(AuthError::NotRoot(1000));
        }
        if credential.starts_with("COUNT:") {
            COUNTED_CHECKS.fetch_add(1, Ordering::SeqCst);
        }
        if credential.starts_with("SLOW:") {
            std::thread::sleep(Duration::from_millis(1500));
        }
        Err(AuthError::Refused("Invalid credential format".into()))
    }
}

fn record(job: u64) -> JobRecord {
    JobRecord {
        job_id: job,
        restart: 0,
        node: "n1".into(),
        uid: 1000,
        user: "alice".into(),
        job_name: "train".into(),
        profile: "1g.10gb".into(),
        estimate_bytes: 8 << 30,
        source: "mig-mem".into(),
        peak_bytes: job << 30,
        limit_bytes: 10 << 30,
        exit_status: 0,
        oom: false,
        end_time: dynmig_history::now(),
    }
}

fn cred(job: u64) -> String {
    Fake.seal(&record(job).to_wire().unwrap()).unwrap()
}

struct Running {
    addr: SocketAddr,
    server: Arc<Server>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    dir: tempfile::TempDir,
}

impl Running {
    fn start(tune: impl FnOnce(&mut ServerSettings)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut settings = ServerSettings::new(dir.path().join("snap.tsv"), EstimatorConfig::default());
        tune(&mut settings);
        let store = Store::open(&dir.path().join("history.db")).unwrap();
        let server = Arc::new(Server::new(store, Box::new(Fake), settings).unwrap());
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (Arc::clone(&server), Arc::clone(&stop));
        let thread = std::thread::spawn(move || s.serve(&listener, &st).unwrap());
        Self {
            addr,
            server,
            stop,
            thread: Some(thread),
            dir,
        }
    }

    fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }

    fn send(&self, line: &str) -> String {
        send_line(&self.addr.to_string(), line, Instant::now() + Duration::from_secs(5)).unwrap()
    }

    fn snapshot(&self) -> HistorySnapshot {
        HistorySnapshot::parse(&std::fs::read_to_string(self.dir.path().join("snap.tsv")).unwrap()).unwrap()
    }

    fn count(&self) -> u64 {
        Store::open_read_only(&self.dir.path().join("history.db"))
            .unwrap()
            .count()
            .unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn answer_of(stream: &TcpStream) -> String {
    let mut a = String::new();
    BufReader::new(stream).read_line(&mut a).unwrap();
    a.trim().to_string()
}

/// Writes one byte every 200 ms until `stop` is set or the server closes.
fn dribble(addr: SocketAddr, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<TcpStream> {
    let s = TcpStream::connect(addr).unwrap();
    std::thread::spawn(move || {
        let mut w = &s;
        while !stop.load(Ordering::Relaxed) && w.write_all(b"F").is_ok() {
            std::thread::sleep(Duration::from_millis(200));
        }
        s
    })
}

#[test]
fn a_slow_client_does_not_block_a_second_client() {
    let mut r = Running::start(|_| {});
    let done = Arc::new(AtomicBool::new(false));
    let slow = dribble(r.addr, Arc::clone(&done));
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    assert_eq!(r.send(&cred(1)), "OK stored");
    let took = t.elapsed();
    assert!(took < Duration::from_millis(1500), "second client waited {took:?}");
    done.store(true, Ordering::Relaxed);
    slow.join().unwrap();
    r.stop();
    assert_eq!(r.count(), 1);
}

#[test]
fn a_client_that_never_ends_its_line_is_cut_at_the_connection_deadline() {
    let mut r = Running::start(|s| s.limits.deadline = Duration::from_millis(600));
    let stream = TcpStream::connect(r.addr).unwrap();
    let writer = stream.try_clone().unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let d = Arc::clone(&done);
    // Bytes keep coming every 100 ms while the answer is awaited: the deadline is for the
    // whole connection, not for each read.
    let dribbler = std::thread::spawn(move || {
        let mut w = &writer;
        while !d.load(Ordering::Relaxed) && w.write_all(b"F").is_ok() {
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    let t = Instant::now();
    let a = answer_of(&stream);
    let took = t.elapsed();
    done.store(true, Ordering::Relaxed);
    dribbler.join().unwrap();
    assert!(a.starts_with("ERR") && a.contains("deadline"), "{a}");
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_secs(2),
        "{took:?}"
    );
    r.stop();
}

#[test]
fn when_full_a_new_connection_closes_the_oldest_reading_one_of_the_busiest_address() {
    use std::net::Ipv4Addr;
    let other = Ipv4Addr::new(127, 0, 0, 2);
    let mut r = Running::start(|s| {
        s.limits.max_connections = 3;
        s.limits.deadline = Duration::from_secs(5);
    });
    let older = common::connect_from(other, r.addr).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let own = TcpStream::connect(r.addr).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let newer = common::connect_from(other, r.addr).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    // Full: the newcomer takes the place of the oldest connection of 127.0.0.2 (which holds
    // two), not of 127.0.0.1's, although that one is older than the second of 127.0.0.2.
    let t = Instant::now();
    assert_eq!(r.send(&cred(1)), "OK stored");
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    let a = answer_of(&older);
    assert!(a.starts_with("ERR busy: closed to make room"), "{a}");
    assert!(r
        .server
        .metrics()
        .render()
        .contains("\ndynmig_history_busy_connections_total{why=\"made_room\"} 1\n"));
    for silent in [&own, &newer] {
        silent.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let mut b = [0u8; 1];
        let e = std::io::Read::read(&mut &*silent, &mut b).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "closed: {e}");
    }
    r.stop();
    assert_eq!(r.count(), 1);
}

#[test]
fn one_address_holds_at_most_its_share_of_the_connections() {
    use std::net::Ipv4Addr;
    let other = Ipv4Addr::new(127, 0, 0, 2);
    let mut r = Running::start(|s| {
        s.limits.max_connections = 8;
        s.limits.max_per_address = 2;
    });
    // 127.0.0.2 holds two connections, both past their line (checked for 1.5 s each).
    let busy: Vec<TcpStream> = (0..2)
        .map(|_| {
            let c = common::connect_from(other, r.addr).unwrap();
            (&c).write_all(b"SLOW:\n").unwrap();
            c
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    // A third from 127.0.0.2 is refused at once, though five connections are free.
    let third = common::connect_from(other, r.addr).unwrap();
    (&third).write_all(format!("{}\n", cred(9)).as_bytes()).unwrap();
    let a = answer_of(&third);
    assert!(a.starts_with("ERR busy: 2 connections from 127.0.0.2"), "{a}");
    // Another address is served.
    assert_eq!(r.send(&cred(1)), "OK stored");
    for c in &busy {
        assert!(answer_of(c).starts_with("ERR credential refused"));
    }
    // A silent connection of a full address makes room for that address's next one.
    let silent = [
        common::connect_from(other, r.addr).unwrap(),
        common::connect_from(other, r.addr).unwrap(),
    ];
    std::thread::sleep(Duration::from_millis(200));
    let next = common::connect_from(other, r.addr).unwrap();
    (&next).write_all(format!("{}\n", cred(2)).as_bytes()).unwrap();
    assert_eq!(answer_of(&next), "OK stored");
    assert!(answer_of(&silent[0]).starts_with("ERR busy: closed to make room"));
    r.stop();
    assert_eq!(r.count(), 2);
}

#[test]
fn a_flooding_address_is_rate_limited_without_a_check_and_others_are_not() {
    use dynmig_history::transport::CheckRate;
    use std::net::Ipv4Addr;
    let flood = Ipv4Addr::new(127, 0, 0, 3);
    let node = Ipv4Addr::new(127, 0, 0, 4);
    let mut r = Running::start(|s| {
        s.limits.checks = CheckRate {
            per_minute: 60,
            burst: 5,
        };
    });
    let send_from = |from: Ipv4Addr, line: &str| {
        let c = common::connect_from(from, r.addr).unwrap();
        (&c).write_all(format!("{line}\n").as_bytes()).unwrap();
        answer_of(&c)
    };
    let t = Instant::now();
    let answers: Vec<String> = (0..100).map(|_| send_from(flood, "COUNT:00")).collect();
    let took = t.elapsed();
    // The burst is checked (and refused: not a record); the rest are refused unchecked, at
    // once. A token comes back each second, so a slow machine may see one or two more checks.
    let checked = COUNTED_CHECKS.load(Ordering::SeqCst);
    assert!(
        (5..=5 + took.as_secs() + 1).contains(&checked),
        "{checked} checks in {took:?}"
    );
    let limited = answers
        .iter()
        .filter(|a| {
            a.starts_with("ERR busy: more credential checks from 127.0.0.3 than allowed (60 a minute, 5 at once)")
        })
        .count() as u64;
    assert_eq!(limited + checked, 100, "{:?}", &answers[..8]);
    // Another address has its own bucket.
    assert_eq!(send_from(node, &cred(1)), "OK stored");
    // The flooding address gets a check again after a second.
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(send_from(flood, &cred(2)), "OK stored");
    let m = r.server.metrics().render();
    assert!(
        m.contains(&format!(
            "dynmig_history_busy_connections_total{{why=\"rate_limited\"}} {limited}\n"
        )),
        "{m}"
    );
    r.stop();
    assert_eq!(r.count(), 2);
}

#[test]
fn when_every_connection_is_past_its_line_a_new_one_is_refused_at_once() {
    let mut r = Running::start(|s| s.limits.max_connections = 1);
    let slow = TcpStream::connect(r.addr).unwrap();
    (&slow).write_all(b"SLOW:\n").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    let a = r.send(&cred(1));
    assert!(a.starts_with("ERR busy: 1 connections in progress"), "{a}");
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    assert!(answer_of(&slow).starts_with("ERR credential refused"));
    assert!(r
        .server
        .metrics()
        .render()
        .contains("\ndynmig_history_busy_connections_total{why=\"full\"} 1\n"));
    // The slot is free again once the slow credential is answered.
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(r.send(&cred(2)), "OK stored");
    r.stop();
    assert_eq!(r.count(), 1);
}

#[test]
fn the_server_refuses_bad_credentials_and_bad_records() {
    let mut r = Running::start(|_| {});
    let a = r.send("garbage");
    assert!(a.starts_with("ERR credential refused"), "{a}");
    let a = r.send(&format!("USER:{}", hex(&record(1).to_wire().unwrap())));
    assert!(a.starts_with("ERR") && a.contains("not root"), "{a}");
    // Valid credential, but the payload is not a versioned record.
    let a = r.send(&Fake.seal(&serde_json::to_vec(&record(1)).unwrap()).unwrap());
    assert!(a.starts_with("ERR") && a.contains("version"), "{a}");
    let mut v: serde_json::Value = serde_json::from_slice(&record(1).to_wire().unwrap()).unwrap();
    v["extra"] = 1.into();
    let a = r.send(&Fake.seal(&serde_json::to_vec(&v).unwrap()).unwrap());
    assert!(a.starts_with("ERR") && a.contains("extra"), "{a}");
    assert_eq!(r.send(&cred(1)), "OK stored");
    assert_eq!(r.send(&cred(1)), "OK duplicate");
    r.stop();
    assert_eq!(r.count(), 1);
}

#[test]
fn an_overlong_line_is_refused() {
    let mut r = Running::start(|s| s.limits.max_line_bytes = 1000);
    let s = TcpStream::connect(r.addr).unwrap();
    let _ = (&s).write_all(&[b'A'; 5000]);
    let a = answer_of(&s);
    assert!(a.starts_with("ERR line longer than 1000 bytes"), "{a}");
    r.stop();
}

#[test]
fn the_snapshot_waits_for_the_cadence_and_is_written_when_the_server_stops() {
    let mut r = Running::start(|s| {
        s.cadence.interval = Duration::from_secs(3600);
        s.cadence.max_pending = 1000;
    });
    assert_eq!(r.send(&cred(1)), "OK stored");
    assert_eq!(r.send(&cred(2)), "OK stored");
    assert!(r.snapshot().is_empty(), "rebuilt before its time");
    assert_eq!(r.server.pending(), 2);
    r.stop();
    assert_eq!(r.snapshot().lookup(1000, "train").unwrap().samples, 2);
}

#[test]
fn the_snapshot_is_rebuilt_after_max_pending_records() {
    let r = Running::start(|s| {
        s.cadence.interval = Duration::from_secs(3600);
        s.cadence.max_pending = 3;
    });
    r.send(&cred(1));
    r.send(&cred(2));
    assert!(r.snapshot().is_empty());
    r.send(&cred(3));
    assert_eq!(r.snapshot().lookup(1000, "train").unwrap().samples, 3);
    assert_eq!(r.server.pending(), 0);
}

#[test]
fn the_snapshot_is_rebuilt_on_the_next_tick() {
    let r = Running::start(|s| s.cadence.interval = Duration::from_millis(100));
    r.send(&cred(1));
    let t = Instant::now();
    while r.snapshot().is_empty() {
        assert!(t.elapsed() < Duration::from_secs(3), "no rebuild on the tick");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_server_keeps_only_what_the_retention_allows() {
    let mut r = Running::start(|s| {
        s.retention = Retention {
            max_records: 2,
            max_per_user: 2,
            max_age: Duration::from_secs(3600),
        };
        s.cadence.max_pending = 1;
    });
    for job in 1..=3 {
        assert_eq!(r.send(&cred(job)), "OK stored");
    }
    // Too old: stored, then dropped at the rebuild.
    let mut old = record(9);
    old.end_time -= 7200;
    assert_eq!(r.send(&Fake.seal(&old.to_wire().unwrap()).unwrap()), "OK stored");
    r.stop();
    let left: Vec<u64> = Store::open_read_only(&r.dir.path().join("history.db"))
        .unwrap()
        .list(None, None, 10)
        .unwrap()
        .iter()
        .map(|x| x.job_id)
        .collect();
    assert_eq!(left, [2, 3]);
}

#[test]
fn database_and_snapshot_of_a_running_server_are_private() {
    let mut r = Running::start(|s| s.cadence.max_pending = 1);
    r.send(&cred(1));
    r.stop();
    let mode = |p: PathBuf| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(r.dir.path().join("history.db")), 0o600);
    assert_eq!(mode(r.dir.path().join("snap.tsv")), 0o600);
}

fn spool_of(n: u64) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    for job in 1..=n {
        spool::put(d.path(), &record(job)).unwrap();
    }
    d
}

fn spooled(d: &Path) -> usize {
    spool::list(d).len()
}

#[test]
fn flush_delivers_the_spool_and_empties_it() {
    let mut r = Running::start(|_| {});
    let d = spool_of(3);
    let f = transport::flush(
        d.path(),
        &r.addr.to_string(),
        &Fake,
        Instant::now() + Duration::from_secs(10),
    );
    assert_eq!((f.delivered, f.refused, f.pending), (3, 0, 0));
    assert_eq!(spooled(d.path()), 0);
    r.stop();
    assert_eq!(r.count(), 3);
}

#[test]
fn flush_stops_at_its_deadline_and_leaves_the_rest_spooled() {
    // A server that takes connections (the kernel's backlog) and never answers.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap().to_string();
    let d = spool_of(3);
    let t = Instant::now();
    let f = transport::flush(d.path(), &addr, &Fake, Instant::now() + Duration::from_millis(500));
    assert!(t.elapsed() < Duration::from_secs(2), "flush ran {:?}", t.elapsed());
    assert_eq!((f.delivered, f.pending), (0, 3));
    assert_eq!(spooled(d.path()), 3);
    // A deadline already passed tries nothing.
    let f = transport::flush(d.path(), &addr, &Fake, Instant::now());
    assert_eq!((f.delivered, f.pending), (0, 3));
}

#[test]
fn flush_sends_a_record_again_when_the_server_is_busy() {
    let mut r = Running::start(|s| s.limits.max_connections = 1);
    // The only connection is busy for 1.5 s with a credential being checked.
    let slow = TcpStream::connect(r.addr).unwrap();
    (&slow).write_all(b"SLOW:\n").unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let d = spool_of(1);
    let t = Instant::now();
    let f = transport::flush(
        d.path(),
        &r.addr.to_string(),
        &Fake,
        Instant::now() + Duration::from_secs(10),
    );
    assert_eq!((f.delivered, f.refused, f.pending), (1, 0, 0));
    assert!(t.elapsed() >= Duration::from_millis(500), "{:?}", t.elapsed());
    assert_eq!(spooled(d.path()), 0);
    r.stop();
    assert_eq!(r.count(), 1);
}

#[test]
fn flush_keeps_records_the_server_refuses() {
    struct NotRoot;
    impl Sealer for NotRoot {
        fn seal(&self, payload: &[u8]) -> Result<String, AuthError> {
            Ok(format!("USER:{}", hex(payload)))
        }
    }
    let mut r = Running::start(|_| {});
    let d = spool_of(2);
    let f = transport::flush(
        d.path(),
        &r.addr.to_string(),
        &NotRoot,
        Instant::now() + Duration::from_secs(10),
    );
    assert_eq!((f.delivered, f.refused, f.pending), (0, 2, 0));
    assert_eq!(spooled(d.path()), 2);
    r.stop();
}

#[test]
fn metrics_count_records_by_source_oom_runs_requeues_and_the_estimate_ratio() {
    use dynmig_host::metrics::{promtool_check, scrape, serve, PromtoolCheck};
    let mut r = Running::start(|s| s.cadence.max_pending = 100);
    // Estimate 8 GiB: peaks of 4 GiB (ratio 2) and 8 GiB (ratio 1).
    assert_eq!(r.send(&cred(4)), "OK stored");
    assert_eq!(r.send(&cred(8)), "OK stored");
    assert_eq!(r.send(&cred(8)), "OK duplicate");
    let mut oom = record(9);
    oom.oom = true;
    oom.source = "history".into();
    oom.restart = 1;
    assert_eq!(r.send(&Fake.seal(&oom.to_wire().unwrap()).unwrap()), "OK stored");
    assert!(r.send("garbage").starts_with("ERR"));
    let endpoint = serve("127.0.0.1:0".parse().unwrap(), r.server.metrics().registry(), "history").unwrap();
    let (status, body) = scrape(endpoint.local_addr()).unwrap();
    assert_eq!(status, "HTTP/1.1 200 OK");
    for line in [
        "dynmig_history_records_total{source=\"mig-mem\"} 2",
        "dynmig_history_records_total{source=\"history\"} 1",
        "dynmig_history_refused_records_total 1",
        "dynmig_history_oom_runs_total{profile=\"1g.10gb\"} 1",
        "dynmig_history_requeued_runs_total 1",
        "dynmig_history_estimate_ratio_count{source=\"mig-mem\"} 2",
        "dynmig_history_estimate_ratio_sum{source=\"mig-mem\"} 3.0",
        "dynmig_history_estimate_ratio_bucket{le=\"1.0\",source=\"mig-mem\"} 1",
        "dynmig_history_estimate_ratio_bucket{le=\"2.0\",source=\"mig-mem\"} 2",
        "dynmig_history_pending_records 3",
    ] {
        assert!(body.lines().any(|l| l == line), "no line {line:?} in\n{body}");
    }
    // The out-of-memory run has no ratio: its peak is the instance's size, not its need.
    assert!(
        !body.contains("dynmig_history_estimate_ratio_count{source=\"history\"}"),
        "{body}"
    );
    match promtool_check(&body) {
        PromtoolCheck::Absent => eprintln!("skipped promtool: not found (install Debian's prometheus package)"),
        c => assert_eq!(c, PromtoolCheck::Passed, "{body}"),
    }
    r.stop();
    assert!(r
        .server
        .metrics()
        .render()
        .contains("\ndynmig_history_pending_records 0\n"));
}

#[test]
fn flush_stops_at_a_record_still_answered_busy_and_leaves_the_rest_spooled() {
    // One credential check a minute, none banked: the first record takes the only one, the
    // second is answered busy (each retry too), and the flush ends there instead of paying
    // BUSY_PAUSE for every record left.
    let mut r = Running::start(|s| {
        s.limits.checks = transport::CheckRate {
            per_minute: 1,
            burst: 1,
        };
    });
    let d = spool_of(4);
    let t = Instant::now();
    let f = transport::flush(
        d.path(),
        &r.addr.to_string(),
        &Fake,
        Instant::now() + Duration::from_secs(20),
    );
    assert_eq!((f.delivered, f.refused, f.pending), (1, 0, 3));
    let most = transport::BUSY_PAUSE * (transport::BUSY_RETRIES + 2);
    assert!(t.elapsed() < most, "flush ran {:?}", t.elapsed());
    assert_eq!(spooled(d.path()), 3);
    r.stop();
    assert_eq!(r.count(), 1);
}

#[test]
fn concurrent_flushes_of_one_spool_send_each_record_once() {
    struct Counting(std::sync::atomic::AtomicUsize);
    impl Sealer for Counting {
        fn seal(&self, payload: &[u8]) -> Result<String, AuthError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Fake.seal(payload)
        }
    }
    let mut r = Running::start(|_| {});
    let d = spool_of(6);
    let addr = r.addr.to_string();
    let sealer = Counting(std::sync::atomic::AtomicUsize::new(0));
    let flushed: Vec<transport::Flushed> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..3)
            .map(|_| s.spawn(|| transport::flush(d.path(), &addr, &sealer, Instant::now() + Duration::from_secs(10))))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(flushed.iter().map(|f| f.delivered).sum::<usize>(), 6, "{flushed:?}");
    assert_eq!(spooled(d.path()), 0);
    // Each record was sealed and sent once: no flusher sent what another had delivered.
    assert_eq!(sealer.0.load(Ordering::SeqCst), 6);
    r.stop();
    assert_eq!(r.count(), 6);
}

/// The Epilog's records come without a job name (docs/history.md, "Job names"): the server
/// names them with one call of its namer for all of them, only from a job of the same uid,
/// and a run is evidence for an estimate only once named.
#[test]
fn unnamed_runs_are_named_in_one_call_from_jobs_of_their_own_uid() {
    use dynmig_history::naming::RunName;
    let mut r = Running::start(|s| s.cadence.interval = Duration::ZERO);
    for job in [1, 2, 3] {
        let mut rec = record(job);
        (rec.job_name, rec.estimate_bytes, rec.source) = (String::new(), 0, String::new());
        let line = Fake.seal(&rec.to_wire().unwrap()).unwrap();
        assert_eq!(r.send(&line), "OK stored");
    }
    r.server.write_pending().unwrap();
    assert!(r.snapshot().lookup(1000, "").is_none(), "an unnamed run is no evidence");
    let calls = std::sync::Mutex::new(Vec::new());
    let namer = |ids: &[u64]| -> Result<Vec<RunName>, String> {
        calls.lock().unwrap().push(ids.to_vec());
        let named = |job_id, uid, name: &str| RunName {
            job_id,
            uid,
            name: name.into(),
            estimate_bytes: 9 << 30,
            source: "model".into(),
        };
        // Job 2 is another user's now (a forged answer), job 3 Slurm no longer holds.
        Ok(vec![named(1, Some(1000), "train"), named(2, Some(0), "victim")])
    };
    assert_eq!(r.server.name_runs(&namer, dynmig_history::now()).unwrap(), 1);
    let mut asked = calls.lock().unwrap()[0].clone();
    asked.sort_unstable();
    assert_eq!(asked, [1, 2, 3], "one call for every unnamed run");
    r.server.write_pending().unwrap();
    let snap = r.snapshot();
    assert_eq!(snap.lookup(1000, "train").expect("the named run counts").samples, 1);
    r.stop();
    let store = Store::open_read_only(&r.dir.path().join("history.db")).unwrap();
    let all = store.list(None, None, 10).unwrap();
    let names: Vec<(&str, u64, &str)> = all
        .iter()
        .map(|x| (x.job_name.as_str(), x.estimate_bytes, x.source.as_str()))
        .collect();
    assert_eq!(names, [("train", 9 << 30, "model"), ("", 0, ""), ("", 0, "")]);
    // A run that ended before the naming window is not asked for again.
    assert!(store.unnamed(dynmig_history::now() + 3600, 10).unwrap().is_empty());
    let failing =
        |_: &[u64]| -> Result<Vec<RunName>, String> { Err("squeue: Unable to contact slurm controller".into()) };
    let s2 = Server::new(
        Store::open(&r.dir.path().join("history.db")).unwrap(),
        Box::new(Fake),
        ServerSettings::new(r.dir.path().join("snap2.tsv"), EstimatorConfig::default()),
    )
    .unwrap();
    let err = s2.name_runs(&failing, dynmig_history::now()).unwrap_err().to_string();
    assert!(err.contains("Unable to contact"), "{err}");
}
