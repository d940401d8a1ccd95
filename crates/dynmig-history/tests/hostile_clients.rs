//! Hostile clients against a real history server (issue 14, item 4).
//!
//! The server runs in a child process (this test binary run again with
//! `DYNMIG_HOSTILE_SERVER_DIR` set, see [`child_server`]), so that its memory can be read from
//! `/proc/<pid>/status` apart from the attackers'. While one attack runs, well-behaved
//! clients (the Epilogs of [`NODES`] nodes, each from its own address, one after the other)
//! send a valid record every 20 ms in all, so each node sends less than one a second, as a
//! node does, and the database is read (what `dynmig history show` does) every 200 ms,
//! timing both. The attacks:
//!
//! - **slowloris**: 200 connections from another address, half sending one byte a second,
//!   half nothing, each reopened when the server closes it; and 8 such connections from each
//!   node's own address;
//! - **huge**: 16 clients streaming megabytes without a newline, or a length prefix that claims
//!   gigabytes followed by more megabytes;
//! - **malformed**: garbage, invalid UTF-8, control characters, valid credentials around a
//!   payload that is not a record (wrong JSON types, truncated, unknown version), lines cut
//!   short by a closed connection (4 clients, one line after the other);
//! - **unauthenticated**: well-formed records in a credential of another uid, forged munge
//!   credentials (4 clients, one line after the other);
//! - **many at once**: 1000 connections from another address, opened as fast as possible and
//!   held, each reopened when the server closes it;
//! - **credential flood**: 48 clients from another address sending credential-shaped lines
//!   (each costs the server an `unmunge`) as fast as they are answered;
//! - **credential flood from 8 addresses** (issue 29): 16 such clients from each of 8
//!   addresses ([`FLOOD_HOSTS`]), 128 in all: the per-address connection share and the
//!   per-address check bucket must leave every node's records stored within [`GOOD_BOUND`].
//!
//! The server runs with the default limits ([`ConnectionLimits::default`]: 64 connections, 4
//! per address, 1,200 credential checks a minute per address after a burst of 120; the flood
//! campaign of docs/results/history-flood-2026-11-28.md ran with 60 and 30, then 300 and 60).
//!
//! Properties, for every attack: each of the good client's records is answered `OK stored`
//! within [`GOOD_BOUND`] at the first try (from the attacker's own address: stored within
//! [`GOOD_BOUND`] from the first try, sending again after `ERR busy` as a node does) and a database read takes less than [`GOOD_BOUND`]; no bad record is
//! stored (the database holds exactly the good client's records); the server's peak resident
//! memory stays below [`RSS_BOUND_KIB`]; the server process never exits.
//!
//! `cargo test -p dynmig-history --test hostile_clients` runs each attack for 2 s with a fake
//! credential check (2 ms per credential, about what `unmunge` takes). The figures in
//! docs/results/history-hostile-2026-11-26.md come from the ignored
//! `hostile_client_figures`, which runs each attack for 15 s (longer than the server's 10 s
//! connection deadline) and, with `DYNMIG_TEST_MUNGE_SOCKET` set and run as root, checks
//! credentials with the real `munge`/`unmunge`:
//! `DYNMIG_TEST_MUNGE_SOCKET=/run/munge/munge.socket.2 cargo test --release -p dynmig-history
//! --test hostile_clients -- --ignored --nocapture`.

mod common;

use common::connect_from;
use dynmig_core::estimate::EstimatorConfig;
use dynmig_history::auth::{AuthError, Munge, Sealer, Verifier};
use dynmig_history::store::Store;
use dynmig_history::transport::{ConnectionLimits, Server, ServerSettings};
use dynmig_history::JobRecord;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Longest the good client may wait for the answer to a record, and for a database read,
/// during any attack.
const GOOD_BOUND: Duration = Duration::from_secs(2);
/// Most resident memory the server process may reach (VmHWM, KiB), attacks included.
const RSS_BOUND_KIB: u64 = 64 * 1024;

const CHILD_ENV: &str = "DYNMIG_HOSTILE_SERVER_DIR";
const MUNGE_ENV: &str = "DYNMIG_TEST_MUNGE_SOCKET";
/// The address attackers other than the slowloris connect from (another host, as far as the
/// server can tell).
const OTHER_HOST: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
/// Nodes whose Epilogs send good records, from 127.0.1.1 on.
const NODES: u8 = 64;
/// The addresses of the 8-address credential flood, 127.0.0.10 to 127.0.0.17.
const FLOOD_HOSTS: [Ipv4Addr; 8] = [
    Ipv4Addr::new(127, 0, 0, 10),
    Ipv4Addr::new(127, 0, 0, 11),
    Ipv4Addr::new(127, 0, 0, 12),
    Ipv4Addr::new(127, 0, 0, 13),
    Ipv4Addr::new(127, 0, 0, 14),
    Ipv4Addr::new(127, 0, 0, 15),
    Ipv4Addr::new(127, 0, 0, 16),
    Ipv4Addr::new(127, 0, 0, 17),
];

/// The address of the node that sends good record `job`.
fn node_of(job: u64) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 1, 1 + (job % u64::from(NODES)) as u8)
}

/// Sends `line` from `from` to `to` as `transport::send_line` does (one line, one answer line).
fn send_from(from: Ipv4Addr, to: SocketAddr, line: &str) -> Result<String, String> {
    let s = connect_from(from, to).map_err(|e| format!("cannot connect: {e}"))?;
    s.set_write_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    (&s).write_all(format!("{}\n", line.trim()).as_bytes())
        .map_err(|e| format!("cannot send: {e}"))?;
    let a = answer(&s);
    if a.is_empty() {
        return Err("closed the connection without an answer".into());
    }
    Ok(a)
}
/// Job ids of the attackers' records start here; the good client's stay below.
const BAD_JOBS: u64 = 1 << 40;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| s.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect()
}

/// `FAKE:<hex>` is root's credential, `USER:<hex>` another uid's; checking one takes 2 ms
/// (a local `unmunge` takes 2 to 5 ms).
struct Fake;

impl Sealer for Fake {
    fn seal(&self, payload: &[u8]) -> Result<String, AuthError> {
        Ok(format!("FAKE:{}", hex(payload)))
    }
}

impl Verifier for Fake {
    fn verify(&self, credential: &str) -> Result<Vec<u8>, AuthError> {
        dynmig_history::auth::check_line(credential)?;
        std::thread::sleep(Duration::from_millis(2));
        if let Some(h) = credential.strip_prefix("FAKE:") {
            return unhex(h).ok_or_else(|| AuthError::Refused("Invalid credential format".into()));
        }
        if credential.starts_with("USER:") {
            return Err(AuthError::NotRoot(1000));
        }
        Err(AuthError::Refused("Invalid credential format".into()))
    }
}

fn munge_socket() -> Option<PathBuf> {
    std::env::var_os(MUNGE_ENV).map(PathBuf::from)
}

fn sealer() -> Box<dyn Sealer + Send + Sync> {
    match munge_socket() {
        Some(s) => Box::new(Munge::new(Some(s))),
        None => Box::new(Fake),
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
        peak_bytes: 7 << 30,
        limit_bytes: 10 << 30,
        exit_status: 0,
        oom: false,
        end_time: dynmig_history::now(),
    }
}

/// The server when this binary runs as the child: serves on loopback with the default
/// limits, writes its address into `<dir>/addr`, and stops when its stdin closes.
#[test]
fn child_server() {
    let Some(dir) = std::env::var_os(CHILD_ENV).map(PathBuf::from) else {
        return;
    };
    let settings = ServerSettings::new(dir.join("snap.tsv"), EstimatorConfig::default());
    // The campaign tests the defaults.
    assert_eq!(settings.limits, ConnectionLimits::default());
    let verifier: Box<dyn Verifier> = match munge_socket() {
        Some(s) => Box::new(Munge::new(Some(s))),
        None => Box::new(Fake),
    };
    let server = Server::new(Store::open(&dir.join("history.db")).unwrap(), verifier, settings).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let tmp = dir.join("addr.tmp");
    std::fs::write(&tmp, listener.local_addr().unwrap().to_string()).unwrap();
    std::fs::rename(&tmp, dir.join("addr")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let s = Arc::clone(&stop);
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        s.store(true, Ordering::SeqCst);
    });
    server.serve(&listener, &stop).unwrap();
}

struct ServerProcess {
    child: Child,
    addr: SocketAddr,
    dir: tempfile::TempDir,
}

impl ServerProcess {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_server", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let t = Instant::now();
        let addr = loop {
            if let Ok(a) = std::fs::read_to_string(dir.path().join("addr")) {
                break a.parse().unwrap();
            }
            assert!(t.elapsed() < Duration::from_secs(20), "the server did not start");
            std::thread::sleep(Duration::from_millis(20));
        };
        Self { child, addr, dir }
    }

    fn status(&self, key: &str) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap_or_default();
        s.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn db(&self) -> PathBuf {
        self.dir.path().join("history.db")
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // Its stdin closed, it stops; connections an attack left open may hold it for up to
        // their deadline, which is not what is tested here: killed after 1 s.
        drop(self.child.stdin.take());
        let t = Instant::now();
        while self.alive() && t.elapsed() < Duration::from_secs(1) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the attackers saw.
#[derive(Default)]
struct Tally {
    connections: AtomicU64,
    /// Answered `ERR busy...` (refused at once, or closed to make room).
    busy: AtomicU64,
    /// Of those, refused unchecked: their address had used its credential checks.
    limited: AtomicU64,
    /// Answered another `ERR`.
    refused: AtomicU64,
    /// Closed by the server without an answer, or failed to connect.
    closed: AtomicU64,
    /// Answered `OK`: must stay 0.
    accepted: AtomicU64,
}

impl Tally {
    fn answer(&self, a: &str) {
        if a.starts_with("ERR busy: more credential checks") {
            self.limited.fetch_add(1, Ordering::Relaxed);
        }
        let c = if a.starts_with("ERR busy") {
            &self.busy
        } else if a.starts_with("ERR") {
            &self.refused
        } else if a.starts_with("OK") {
            &self.accepted
        } else {
            &self.closed
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    fn get(&self) -> [u64; 6] {
        [
            &self.connections,
            &self.busy,
            &self.limited,
            &self.refused,
            &self.closed,
            &self.accepted,
        ]
        .map(|c| c.load(Ordering::Relaxed))
    }
}

/// The answer line on `s`, or "" when the server closed without one (waits at most 15 s).
fn answer(s: &TcpStream) -> String {
    let _ = s.set_read_timeout(Some(Duration::from_secs(15)));
    let mut buf = Vec::new();
    let _ = s.take(4096).read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).lines().next().unwrap_or("").to_string()
}

/// Sends `bytes` on a fresh connection from `from`, then reads the answer.
fn one_shot(from: Ipv4Addr, to: SocketAddr, bytes: &[u8], tally: &Tally) {
    tally.connections.fetch_add(1, Ordering::Relaxed);
    let Ok(s) = connect_from(from, to) else {
        tally.closed.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let _ = s.set_write_timeout(Some(Duration::from_secs(15)));
    let _ = (&s).write_all(bytes);
    // Done sending: a line without its newline ends here.
    let _ = s.shutdown(std::net::Shutdown::Write);
    tally.answer(&answer(&s));
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Attack {
    Slowloris,
    SlowlorisSameAddress,
    Huge,
    Malformed,
    Unauthenticated,
    ManyAtOnce,
    CredentialFlood,
    CredentialFlood8Addresses,
}

const ATTACKS: [Attack; 8] = [
    Attack::Slowloris,
    Attack::SlowlorisSameAddress,
    Attack::Huge,
    Attack::Malformed,
    Attack::Unauthenticated,
    Attack::ManyAtOnce,
    Attack::CredentialFlood,
    Attack::CredentialFlood8Addresses,
];

/// Holds `n` connections from `from`, each reopened when the server closes it; when
/// `dribble`, every other one sends one byte a second.
fn hold(from: Ipv4Addr, to: SocketAddr, n: usize, dribble: bool, stop: &AtomicBool, tally: &Tally) {
    let open = || {
        tally.connections.fetch_add(1, Ordering::Relaxed);
        let s = connect_from(from, to).ok()?;
        s.set_nonblocking(true).ok()?;
        Some(s)
    };
    let mut conns: Vec<Option<TcpStream>> = (0..n).map(|_| open()).collect();
    let mut next_byte = Instant::now() + Duration::from_secs(1);
    while !stop.load(Ordering::Relaxed) {
        let byte = dribble && Instant::now() >= next_byte;
        if byte {
            next_byte += Duration::from_secs(1);
        }
        for (i, c) in conns.iter_mut().enumerate() {
            let mut gone = c.is_none();
            if let Some(s) = c {
                let mut buf = [0u8; 512];
                match (&*s).read(&mut buf) {
                    Ok(0) => {
                        tally.closed.fetch_add(1, Ordering::Relaxed);
                        gone = true;
                    }
                    Ok(k) => {
                        tally.answer(&String::from_utf8_lossy(&buf[..k]));
                        gone = true;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(_) => {
                        tally.closed.fetch_add(1, Ordering::Relaxed);
                        gone = true;
                    }
                }
                if !gone && byte && i % 2 == 0 && (&*s).write_all(b"M").is_err() {
                    gone = true;
                }
            }
            if gone {
                *c = open();
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn bad_credentials() -> Vec<Vec<u8>> {
    let fake = |payload: &[u8]| format!("FAKE:{}\n", hex(payload)).into_bytes();
    let mut wrong_types: serde_json::Value = serde_json::from_slice(&record(BAD_JOBS).to_wire().unwrap()).unwrap();
    wrong_types["job_id"] = "seven".into();
    let mut neg: serde_json::Value = serde_json::from_slice(&record(BAD_JOBS + 1).to_wire().unwrap()).unwrap();
    neg["peak_bytes"] = (-1).into();
    let mut v9: serde_json::Value = serde_json::from_slice(&record(BAD_JOBS + 2).to_wire().unwrap()).unwrap();
    v9["v"] = 9.into();
    let mut bad_node = record(BAD_JOBS + 3);
    bad_node.node = "../../etc/passwd".into();
    let wire = record(BAD_JOBS + 4).to_wire().unwrap();
    vec![
        b"garbage\n".to_vec(),
        b"\n".to_vec(),
        b"\xff\xfe\xfd invalid utf-8 \xc3\x28\n".to_vec(),
        b"MUNGE:\x1b[2J\x00:\n".to_vec(),
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        b"MUNGE:AwQFAAB+not-a-credential=:\n".to_vec(),
        fake(b"not json"),
        fake(b"[1,2,3]"),
        fake(b"{\"v\":1"),
        fake(&wire[..wire.len() / 2]),
        fake(&serde_json::to_vec(&wrong_types).unwrap()),
        fake(&serde_json::to_vec(&neg).unwrap()),
        fake(&serde_json::to_vec(&v9).unwrap()),
        fake(&serde_json::to_vec(&bad_node).unwrap()),
        // Cut short: no newline, then the connection's end.
        format!("FAKE:{}", hex(&wire[..wire.len() - 3])).into_bytes(),
        b"FAKE:7b22".to_vec(),
    ]
}

fn forged_credentials() -> Vec<Vec<u8>> {
    let wire = record(BAD_JOBS + 10).to_wire().unwrap();
    vec![
        format!("USER:{}\n", hex(&wire)).into_bytes(),
        format!("MUNGE:{}:\n", hex(&wire)).into_bytes(),
        b"MUNGE:AwQFAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==:\n".to_vec(),
        // Not root's: a record sealed the way a node would, under another name.
        format!("NODE:{}\n", hex(&wire)).into_bytes(),
    ]
}

/// Runs `attack` against `to` until `stop` is set.
fn run_attack(attack: Attack, to: SocketAddr, stop: &AtomicBool, tally: &Tally) {
    let lines = if attack == Attack::Malformed {
        bad_credentials()
    } else {
        forged_credentials()
    };
    let lines = &lines;
    std::thread::scope(|s| match attack {
        Attack::Slowloris => {
            s.spawn(|| hold(OTHER_HOST, to, 200, true, stop, tally));
        }
        Attack::SlowlorisSameAddress => {
            for n in 0..u64::from(NODES) {
                s.spawn(move || hold(node_of(n), to, 8, true, stop, tally));
            }
        }
        Attack::ManyAtOnce => {
            s.spawn(|| hold(OTHER_HOST, to, 1000, false, stop, tally));
        }
        Attack::Huge => {
            for k in 0..16 {
                s.spawn(move || {
                    let mut chunk = vec![b'A'; 1 << 20];
                    if k % 2 == 1 {
                        // A length prefix claiming 4 GiB, then the "payload".
                        chunk[..8].copy_from_slice(&(4u64 << 30).to_be_bytes());
                    }
                    while !stop.load(Ordering::Relaxed) {
                        tally.connections.fetch_add(1, Ordering::Relaxed);
                        let Ok(c) = connect_from(OTHER_HOST, to) else {
                            tally.closed.fetch_add(1, Ordering::Relaxed);
                            continue;
                        };
                        let _ = c.set_write_timeout(Some(Duration::from_secs(15)));
                        // Up to 64 MiB, until the server stops reading.
                        for _ in 0..64 {
                            if (&c).write_all(&chunk).is_err() || stop.load(Ordering::Relaxed) {
                                break;
                            }
                        }
                        tally.answer(&answer(&c));
                    }
                });
            }
        }
        Attack::CredentialFlood => {
            // Three times as many clients as one address may hold connections, each sending
            // forged credentials as fast as it is answered: every one costs an `unmunge`.
            for k in 0..48 {
                s.spawn(move || {
                    let mut i = k;
                    while !stop.load(Ordering::Relaxed) {
                        one_shot(OTHER_HOST, to, &lines[i % lines.len()], tally);
                        i += 1;
                    }
                });
            }
        }
        Attack::CredentialFlood8Addresses => {
            for from in FLOOD_HOSTS {
                for k in 0..16 {
                    s.spawn(move || {
                        let mut i = k;
                        while !stop.load(Ordering::Relaxed) {
                            one_shot(from, to, &lines[i % lines.len()], tally);
                            i += 1;
                        }
                    });
                }
            }
        }
        Attack::Malformed | Attack::Unauthenticated => {
            for k in 0..4 {
                s.spawn(move || {
                    let mut i = k;
                    while !stop.load(Ordering::Relaxed) {
                        one_shot(OTHER_HOST, to, &lines[i % lines.len()], tally);
                        i += 1;
                    }
                });
            }
        }
    });
}

/// What one attack gave.
struct Outcome {
    attack: Attack,
    /// The good client's answer times, sorted.
    records: Vec<Duration>,
    /// Its database reads, sorted.
    reads: Vec<Duration>,
    /// Its records answered `OK stored` (at last).
    ok: usize,
    /// Its tries answered `ERR busy` (each sent again).
    retried: u64,
    /// Its records that were not answered `OK stored`, and failed database reads.
    failures: Vec<String>,
    tally: [u64; 6],
    hwm_kib: u64,
}

fn quantile(v: &[Duration], q: f64) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v[((v.len() - 1) as f64 * q).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

/// Runs `attack` for `length` while the good client sends records numbered from `*next_job`.
fn under_attack(server: &mut ServerProcess, attack: Attack, length: Duration, next_job: &mut u64) -> Outcome {
    let stop = AtomicBool::new(false);
    let tally = Tally::default();
    let records = Mutex::new(Vec::new());
    let reads = Mutex::new(Vec::new());
    let failures = Mutex::new(Vec::new());
    let ok = AtomicU64::new(0);
    let retried = AtomicU64::new(0);
    let sealer = sealer();
    let first = *next_job;
    let sent = AtomicU64::new(0);
    let to = server.addr;
    let db = server.db();
    std::thread::scope(|s| {
        s.spawn(|| run_attack(attack, to, &stop, &tally));
        // Let the attack take hold before measuring.
        std::thread::sleep(Duration::from_millis(300));
        s.spawn(|| {
            let mut next_read = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                let job = first + sent.fetch_add(1, Ordering::Relaxed);
                let seal = || sealer.seal(&record(job).to_wire().unwrap()).unwrap();
                let mut cred = seal();
                let t = Instant::now();
                // As a node does: a record answered `ERR busy` stays spooled and is sent
                // again (here at once, sealed afresh).
                let a = loop {
                    let a = send_from(node_of(job), to, &cred);
                    match a {
                        Ok(a) if a.starts_with("ERR busy") && t.elapsed() < Duration::from_secs(10) => {
                            retried.fetch_add(1, Ordering::Relaxed);
                            cred = seal();
                        }
                        a => break a,
                    }
                };
                let took = t.elapsed();
                records.lock().unwrap().push(took);
                match a {
                    Ok(a) if a == "OK stored" => {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(a) => failures.lock().unwrap().push(format!("job {job}: {a} after {took:?}")),
                    Err(e) => failures.lock().unwrap().push(format!("job {job}: {e} after {took:?}")),
                }
                if Instant::now() >= next_read {
                    next_read += Duration::from_millis(200);
                    let t = Instant::now();
                    let n = Store::open_read_only(&db)
                        .and_then(|st| st.list(Some("alice"), Some("train"), 50))
                        .map(|l| l.len());
                    reads.lock().unwrap().push(t.elapsed());
                    if let Err(e) = n {
                        failures.lock().unwrap().push(format!("database read: {e}"));
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        std::thread::sleep(length);
        stop.store(true, Ordering::Relaxed);
    });
    *next_job = first + sent.load(Ordering::Relaxed);
    let mut records = records.into_inner().unwrap();
    records.sort();
    let mut reads = reads.into_inner().unwrap();
    reads.sort();
    Outcome {
        attack,
        records,
        reads,
        ok: ok.load(Ordering::Relaxed) as usize,
        retried: retried.load(Ordering::Relaxed),
        failures: failures.into_inner().unwrap(),
        tally: tally.get(),
        hwm_kib: server.status("VmHWM:"),
    }
}

fn raise_fd_limit() {
    // SAFETY: plain getrlimit/setrlimit on a local struct.
    unsafe {
        let mut l = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) == 0 && l.rlim_cur < l.rlim_max.min(8192) {
            l.rlim_cur = l.rlim_max.min(8192);
            libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        }
    }
}

/// Runs every attack for `length`, prints the figures and checks the properties.
fn campaign(length: Duration) {
    raise_fd_limit();
    let mut server = ServerProcess::start();
    // The server at rest, after some work.
    let mut next_job = 1;
    let sealer = sealer();
    for _ in 0..20 {
        let cred = sealer.seal(&record(next_job).to_wire().unwrap()).unwrap();
        assert_eq!(send_from(node_of(next_job), server.addr, &cred).unwrap(), "OK stored");
        next_job += 1;
    }
    let rest_kib = server.status("VmRSS:");
    let mut outcomes = Vec::new();
    for attack in ATTACKS {
        let o = under_attack(&mut server, attack, length, &mut next_job);
        assert!(server.alive(), "the server exited during {attack:?}");
        outcomes.push(o);
    }
    let stored = Store::open_read_only(&server.db()).unwrap().count().unwrap();
    let listed = Store::open_read_only(&server.db())
        .unwrap()
        .list(None, None, 1_000_000)
        .unwrap();
    assert!(server.alive());
    drop(server);
    print(&outcomes, rest_kib, length);
    let mut failed = Vec::new();
    for o in &outcomes {
        let [_, _, _, _, _, accepted] = o.tally;
        let max = o.records.last().copied().unwrap_or_default();
        let read_max = o.reads.last().copied().unwrap_or_default();
        // From the attacker's own address a node's connection may be closed to make room
        // before its line arrives (the server cannot tell the two apart); it is sent again,
        // and the bound is on the time until it is stored.
        let may_retry = o.attack == Attack::SlowlorisSameAddress;
        if !o.failures.is_empty()
            || (o.retried > 0 && !may_retry)
            || accepted != 0
            || max > GOOD_BOUND
            || read_max > GOOD_BOUND
            || o.records.len() < 5
            || o.hwm_kib > RSS_BOUND_KIB
        {
            failed.push(format!(
                "{:?}: {} records, {} tries answered ERR busy, max {max:?}, reads max {read_max:?}, attackers' records accepted {accepted}, VmHWM {} KiB, failures {:?}",
                o.attack,
                o.records.len(),
                o.retried,
                o.hwm_kib,
                &o.failures[..o.failures.len().min(5)]
            ));
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
    // Exactly the good client's records, none of the attackers'.
    assert_eq!(stored, next_job - 1);
    assert!(listed.iter().all(|r| r.job_id < BAD_JOBS));
}

fn print(outcomes: &[Outcome], rest_kib: u64, length: Duration) {
    println!(
        "attack length {length:?}; good-client bound {GOOD_BOUND:?}; server VmRSS at rest {} KiB; VmHWM bound {} KiB",
        rest_kib, RSS_BOUND_KIB
    );
    println!(
        "| attack | good records sent | stored | tries answered ERR busy | p50 ms | p99 ms | max ms | db read p50/max ms | attacker connections | ERR busy | of which rate-limited (no check) | other ERR (checked) | closed, no answer | accepted | server VmHWM KiB |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for o in outcomes {
        let [c, busy, limited, refused, closed, accepted] = o.tally;
        println!(
            "| {:?} | {} | {} | {} | {} | {} | {} | {}/{} | {c} | {busy} | {limited} | {refused} | {closed} | {accepted} | {} |",
            o.attack,
            o.records.len(),
            o.ok,
            o.retried,
            ms(quantile(&o.records, 0.5)),
            ms(quantile(&o.records, 0.99)),
            ms(o.records.last().copied().unwrap_or_default()),
            ms(quantile(&o.reads, 0.5)),
            ms(o.reads.last().copied().unwrap_or_default()),
            o.hwm_kib
        );
    }
}

#[test]
fn the_good_client_is_served_within_its_bound_during_every_attack() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    campaign(Duration::from_secs(2));
}

/// The figures of docs/results/history-hostile-2026-11-26.md (see the module's doc).
#[test]
#[ignore = "runs each attack for 15 s; prints the figures"]
fn hostile_client_figures() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    campaign(Duration::from_secs(15));
}
