// One piece: both ends of one TCP protocol (client delivery and server), whose framing, limits and rate checks must match; split, the pair would drift.
//! Delivery of history records from the nodes to the controller host over TCP.
//!
//! Protocol, one record per connection: the node sends one credential line (a munge
//! credential whose payload is the record's wire form, [`JobRecord::to_wire`]) and a newline;
//! the server answers one line: `OK stored`, `OK duplicate` (already stored: a retried
//! delivery), or `ERR <why>` (refused: bad credential, not root, not a record, too long, too
//! slow, server busy). The node removes a record from its spool on `OK` only.
//!
//! The server serves each connection on its own thread, at most
//! [`ConnectionLimits::max_connections`] at once and [`ConnectionLimits::max_per_address`]
//! from one address, each with a deadline for the whole connection and a cap on the line's
//! length. A new connection that finds no room takes the place of one still sending its line
//! (no whole line read or waiting in its socket), which is answered `ERR busy` and closed:
//! when its address holds its share, that address's own oldest; when all are taken, the
//! oldest of the address that holds the most. A node sends its line as soon as it is
//! connected, so idle or dribbling connections (slowloris), however many, are the ones
//! closed, and clients from other addresses are never closed for them. Only when no
//! connection is still sending (all being checked and stored) does a new one get `ERR busy`
//! at once; the per-address share keeps a host that floods the server with credentials to
//! check from taking every connection. The snapshot is rebuilt on a [`SnapshotCadence`], not
//! after every record, and the [`Retention`] is applied at each rebuild.
//!
//! Every credential check (an `unmunge` run as the server's user) takes a token from its
//! address's bucket ([`CheckRate`]: refilled at `per_minute`, holding at most `burst`); a line
//! that finds the bucket empty is answered `ERR busy: ... credential checks ...` at once and
//! costs no `unmunge`. "Address" here, for the share and the bucket alike, is the IPv4
//! address, or the /64 prefix of an IPv6 one (a host usually holds a whole /64), see
//! [`address_key`].

use crate::auth::{Sealer, Verifier};
use crate::metrics::HistoryMetrics;
use crate::record::{cut, JobRecord};
use crate::store::{Retention, Store};
use crate::HistoryStore;
use crate::{now, spool, Error};
use dynmig_core::estimate::EstimatorConfig;
use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Shutdown, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Longest credential line accepted, bytes: the largest record
/// ([`crate::record::MAX_RECORD_BYTES`]) in base64 plus munge's header.
pub const MAX_LINE_BYTES: usize = 96 * 1024;

/// Connections the kernel keeps waiting for [`Server::serve`] to accept (the `listen(2)`
/// backlog; Linux caps it at `net.core.somaxconn`, 4096 by default). Rust's default, 128,
/// overflows under a burst of connections: the kernel then drops new ones, and a node's
/// connection waits for its SYN to be sent again, 1 s later and then 3 s later.
pub const LISTEN_BACKLOG: i32 = 1024;

/// Bounds on the connections the server serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections served at once; one more takes the place of one still sending its line
    /// (see the module's doc), or gets `ERR busy` when none is. At least 1.
    pub max_connections: usize,
    /// Connections one address may hold at once; one more closes the oldest of them still
    /// sending its line, or gets `ERR busy` when none is. So that one host flooding the
    /// server with lines (each costs an `unmunge`) leaves room for the others. At least 1.
    pub max_per_address: usize,
    /// Longest a client may take to send its whole line, from its connection's acceptance.
    pub deadline: Duration,
    /// Longest line, bytes (one line per connection, so also the cap per connection).
    pub max_line_bytes: usize,
    /// Credential checks one address may have per minute.
    pub checks: CheckRate,
}

impl Default for ConnectionLimits {
    /// 64 connections, 4 per address, 10 s, [`MAX_LINE_BYTES`], [`CheckRate::default`].
    fn default() -> Self {
        Self {
            max_connections: 64,
            max_per_address: 4,
            deadline: Duration::from_secs(10),
            max_line_bytes: MAX_LINE_BYTES,
            checks: CheckRate::default(),
        }
    }
}

/// A token bucket of credential checks per address ([`address_key`]): each check takes a
/// token; the bucket refills at `per_minute` tokens a minute and holds at most `burst`. A node
/// needs one check per finished job (and one per spooled record after an outage), so the
/// default lets a node deliver 120 records at once and 20 a second after that, while a host
/// that floods the server costs it at most that many `unmunge` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckRate {
    /// Tokens added per minute. At least 1.
    pub per_minute: u32,
    /// Most tokens the bucket holds (checks allowed at once after a quiet spell). At least 1.
    pub burst: u32,
}

impl Default for CheckRate {
    /// 1,200 a minute, a burst of 120: `[history] checks_per_minute` and `check_burst` when
    /// the config leaves them out (docs/history.md says why).
    fn default() -> Self {
        Self {
            per_minute: 1200,
            burst: 120,
        }
    }
}

/// What the per-address share and the check bucket are keyed by: an IPv4 address itself (an
/// IPv4-mapped IPv6 address as its IPv4 address), an IPv6 address's /64 prefix.
///
/// ```
/// use dynmig_history::transport::address_key;
/// let a: std::net::IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
/// let b: std::net::IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
/// assert_eq!(address_key(a), address_key(b));
/// let v4: std::net::IpAddr = "10.0.0.7".parse().unwrap();
/// assert_eq!(address_key(v4), v4);
/// ```
pub fn address_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(std::net::Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
        },
    }
}

/// The check buckets of the addresses seen lately.
#[derive(Default)]
struct Buckets {
    /// Tokens left and when they were counted; a full bucket is as good as none, so full ones
    /// are dropped when the map grows ([`Buckets::PRUNE_AT`]).
    map: HashMap<IpAddr, (f64, Instant)>,
}

impl Buckets {
    /// Size past which full buckets are dropped.
    const PRUNE_AT: usize = 4096;

    /// Takes a token from `key`'s bucket; false when it is empty.
    fn take(&mut self, key: IpAddr, rate: CheckRate, now: Instant) -> bool {
        let burst = f64::from(rate.burst.max(1));
        let per_sec = f64::from(rate.per_minute.max(1)) / 60.0;
        let level = |(tokens, at): (f64, Instant)| {
            (tokens + now.saturating_duration_since(at).as_secs_f64() * per_sec).min(burst)
        };
        if self.map.len() >= Self::PRUNE_AT && !self.map.contains_key(&key) {
            self.map.retain(|_, b| level(*b) < burst);
        }
        let b = self.map.entry(key).or_insert((burst, now));
        let tokens = level(*b);
        if tokens < 1.0 {
            *b = (tokens, now);
            return false;
        }
        *b = (tokens - 1.0, now);
        true
    }
}

/// When the snapshot is rebuilt: while new records are pending, once `interval` has passed
/// since the last rebuild (checked every second at most), or at once when `max_pending`
/// records are pending; and before [`Server::serve`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotCadence {
    /// Least time between two rebuilds (unless `max_pending` is reached).
    pub interval: Duration,
    /// New records that force a rebuild at once. At least 1.
    pub max_pending: u64,
}

impl Default for SnapshotCadence {
    /// 10 s or 1000 records.
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(10),
            max_pending: 1000,
        }
    }
}

/// The server's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerSettings {
    /// The snapshot file job_submit/dynmig reads.
    pub snapshot_path: PathBuf,
    /// A group that may read the snapshot (mode 0640 instead of 0600): `SlurmUser`'s group
    /// when the server runs as root and slurmctld does not.
    pub snapshot_group: Option<u32>,
    /// Estimator settings for the snapshot.
    pub estimator: EstimatorConfig,
    /// How much history is kept.
    pub retention: Retention,
    /// When the snapshot is rebuilt.
    pub cadence: SnapshotCadence,
    /// Bounds on connections.
    pub limits: ConnectionLimits,
}

impl ServerSettings {
    /// Settings with the defaults of [`Retention`], [`SnapshotCadence`] and
    /// [`ConnectionLimits`], and no reader group.
    pub fn new(snapshot_path: PathBuf, estimator: EstimatorConfig) -> Self {
        Self {
            snapshot_path,
            snapshot_group: None,
            estimator,
            retention: Retention::default(),
            cadence: SnapshotCadence::default(),
            limits: ConnectionLimits::default(),
        }
    }
}

struct Inner {
    store: Store,
    pending: u64,
    last_rebuild: Instant,
    /// The estimator settings in use (a reload changes them).
    estimator: EstimatorConfig,
}

/// The history server: checks, stores, and summarises records.
pub struct Server {
    inner: Mutex<Inner>,
    metrics: HistoryMetrics,
    verifier: Box<dyn Verifier>,
    settings: ServerSettings,
    conns: Mutex<Conns>,
    buckets: Mutex<Buckets>,
}

/// The connections in progress.
#[derive(Default)]
struct Conns {
    next_id: u64,
    open: Vec<Conn>,
    /// For [`line_waiting`].
    peek: Vec<u8>,
}

struct Conn {
    id: u64,
    peer: IpAddr,
    since: Instant,
    /// Its thread has not read a whole line yet: it may be closed to make room.
    reading: bool,
    /// The same socket, to look at what waits in it and to close its reading side.
    stream: TcpStream,
}

impl Conns {
    /// Registers a connection from `peer` if there is room, or makes room by closing a
    /// connection still sending its line (no whole line read or waiting in the socket): when
    /// `peer` holds `per_address` connections, its own oldest; when all `max` are taken, the
    /// oldest of the address that holds the most. `Err`: no room, the `ERR busy` answer.
    fn admit(&mut self, peer: IpAddr, stream: &TcpStream, max: usize, per_address: usize) -> Result<u64, String> {
        let stream = stream.try_clone().map_err(|e| format!("ERR busy: {e}; retry later"))?;
        let own = self.open.iter().filter(|c| c.peer == peer).count();
        let (candidates, refusal) = if own >= per_address {
            (
                Some(peer),
                format!("ERR busy: {own} connections from {peer} in progress; retry later"),
            )
        } else if self.open.len() >= max {
            (None, format!("ERR busy: {max} connections in progress; retry later"))
        } else {
            (None, String::new())
        };
        if !refusal.is_empty() {
            let open = &self.open;
            let mut order: Vec<(usize, std::cmp::Reverse<Instant>, usize)> = open
                .iter()
                .enumerate()
                .filter(|(_, c)| c.reading && candidates.is_none_or(|p| c.peer == p))
                .map(|(i, c)| {
                    let held = open.iter().filter(|o| o.peer == c.peer).count();
                    (held, std::cmp::Reverse(c.since), i)
                })
                .collect();
            order.sort_unstable_by(|a, b| b.cmp(a));
            let peek = &mut self.peek;
            let victim = order
                .into_iter()
                .map(|(_, _, i)| i)
                .find(|&i| !line_waiting(&open[i].stream, peek))
                .ok_or(refusal)?;
            let c = self.open.swap_remove(victim);
            // Its thread's read returns at once; it finds itself gone and answers `ERR busy`.
            let _ = c.stream.shutdown(Shutdown::Read);
        }
        let id = self.next_id;
        self.next_id += 1;
        self.open.push(Conn {
            id,
            peer,
            since: Instant::now(),
            reading: true,
            stream,
        });
        Ok(id)
    }

    /// Marks `id` as past its line; false if it was closed to make room.
    fn done_reading(&mut self, id: u64) -> bool {
        self.open
            .iter_mut()
            .find(|c| c.id == id)
            .map(|c| c.reading = false)
            .is_some()
    }

    fn remove(&mut self, id: u64) {
        self.open.retain(|c| c.id != id);
    }
}

impl Server {
    /// A server on `store` that checks credentials with `verifier`; applies the retention and
    /// writes the snapshot once at start.
    ///
    /// # Errors
    /// The database or the snapshot cannot be written.
    pub fn new(store: Store, verifier: Box<dyn Verifier>, settings: ServerSettings) -> Result<Self, Error> {
        let server = Self {
            metrics: HistoryMetrics::new(),
            inner: Mutex::new(Inner {
                store,
                pending: 0,
                last_rebuild: Instant::now(),
                estimator: settings.estimator,
            }),
            verifier,
            settings,
            conns: Mutex::new(Conns::default()),
            buckets: Mutex::new(Buckets::default()),
        };
        server.rebuild(&mut server.lock())?;
        Ok(server)
    }

    /// Names the runs recorded without a job name that ended within
    /// [`crate::naming::NAME_WINDOW`] of `now`, with one call of `namer` for at most
    /// [`crate::naming::NAME_BATCH`] jobs; returns how many runs were named. A run is named
    /// only from a job of its own uid. The database is not locked while `namer` runs.
    ///
    /// # Errors
    /// The database cannot be read or written; `namer`'s error (the runs stay unnamed and
    /// are asked for again next time).
    pub fn name_runs(&self, namer: crate::naming::Namer<'_>, now: i64) -> Result<usize, Error> {
        let since = now - crate::naming::NAME_WINDOW.as_secs() as i64;
        let unnamed = self.lock().store.unnamed(since, crate::naming::NAME_BATCH)?;
        if unnamed.is_empty() {
            return Ok(0);
        }
        let unnamed: std::collections::HashSet<(u64, u32)> = unnamed.into_iter().collect();
        let ids: Vec<u64> = unnamed
            .iter()
            .map(|(j, _)| *j)
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let names: Vec<_> = namer(&ids)
            .map_err(Error::Naming)?
            .into_iter()
            .filter(|n| n.uid.is_some_and(|uid| unnamed.contains(&(n.job_id, uid))))
            .collect();
        let mut inner = self.lock();
        let (named, refused) = inner.store.name_runs(&names)?;
        for job in refused {
            log::warn!("job {job}: not named: its name or estimate source is over the record's bounds");
        }
        if named > 0 {
            inner.pending += named as u64;
            self.metrics.set_pending(inner.pending);
        }
        Ok(named)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves the SQLite connection usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn rebuild(&self, inner: &mut Inner) -> Result<usize, Error> {
        inner.last_rebuild = Instant::now();
        inner.store.prune(&self.settings.retention, now())?;
        let n = inner.store.write_snapshot(
            &inner.estimator,
            &self.settings.snapshot_path,
            self.settings.snapshot_group,
        )?;
        inner.pending = 0;
        self.metrics.set_pending(0);
        Ok(n)
    }

    /// The server's metrics.
    pub fn metrics(&self) -> &HistoryMetrics {
        &self.metrics
    }

    /// The settings it started with ([`Server::estimator`] has the estimator's in use).
    pub fn settings(&self) -> &ServerSettings {
        &self.settings
    }

    /// The estimator settings in use.
    pub fn estimator(&self) -> EstimatorConfig {
        self.lock().estimator
    }

    /// Uses `estimator` from now on (a config reload) and rewrites the snapshot with it.
    ///
    /// # Errors
    /// The database or the snapshot cannot be written (the new settings stay in use).
    pub fn set_estimator(&self, estimator: EstimatorConfig) -> Result<(), Error> {
        let mut inner = self.lock();
        inner.estimator = estimator;
        self.rebuild(&mut inner).map(drop)
    }

    /// New records not yet in the snapshot.
    pub fn pending(&self) -> u64 {
        self.lock().pending
    }

    /// Handles one credential line (without its newline): check, decode, store. Returns the
    /// answer line (without newline).
    pub fn handle_line(&self, line: &str) -> String {
        match self.accept(line) {
            Ok(true) => "OK stored".into(),
            Ok(false) => "OK duplicate".into(),
            Err(e) => {
                self.metrics.refused();
                format!("ERR {e}").replace(['\n', '\r'], " ")
            }
        }
    }

    fn accept(&self, line: &str) -> Result<bool, Error> {
        let payload = self.verifier.verify(line.trim())?;
        let record = JobRecord::from_wire(&payload)?;
        let mut inner = self.lock();
        let new = inner.store.insert(&record)?;
        if new {
            self.metrics.stored(&record);
            inner.pending += 1;
            self.metrics.set_pending(inner.pending);
            if inner.pending >= self.settings.cadence.max_pending.max(1) {
                if let Err(e) = self.rebuild(&mut inner) {
                    // The record is stored; the next tick tries the snapshot again.
                    log::error!("snapshot: {e}");
                }
            }
        }
        Ok(new)
    }

    /// Rebuilds the snapshot if records are pending and the cadence's interval has passed;
    /// returns whether it did.
    ///
    /// # Errors
    /// The database or the snapshot cannot be written (the records stay pending).
    pub fn tick(&self) -> Result<bool, Error> {
        let mut inner = self.lock();
        if inner.pending == 0 || inner.last_rebuild.elapsed() < self.settings.cadence.interval {
            return Ok(false);
        }
        self.rebuild(&mut inner).map(|_| true)
    }

    /// Rebuilds the snapshot if records are pending; returns whether it did.
    ///
    /// # Errors
    /// As [`Server::tick`].
    pub fn write_pending(&self) -> Result<bool, Error> {
        let mut inner = self.lock();
        if inner.pending == 0 {
            return Ok(false);
        }
        self.rebuild(&mut inner).map(|_| true)
    }

    /// Serves connections on `listener` (its backlog raised to [`LISTEN_BACKLOG`]) until
    /// `stop` is set (checked every 20 ms), then waits
    /// for the connections in progress (each ends within its deadline) and writes a pending
    /// snapshot.
    ///
    /// # Errors
    /// The listener cannot be made non-blocking, or the last snapshot cannot be written.
    pub fn serve(&self, listener: &TcpListener, stop: &AtomicBool) -> Result<(), Error> {
        let addr = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
        listener.set_nonblocking(true).map_err(|source| Error::Listen {
            addr: addr.clone(),
            source,
        })?;
        // SAFETY: listen(2) on the listener's own socket, already listening: only its backlog
        // changes.
        if unsafe { libc::listen(listener.as_raw_fd(), LISTEN_BACKLOG) } != 0 {
            log::warn!("cannot set the backlog of {addr}: {}", io::Error::last_os_error());
        }
        let max = self.settings.limits.max_connections.max(1);
        let per_address = self.settings.limits.max_per_address.max(1);
        std::thread::scope(|s| {
            s.spawn(|| {
                let step = self
                    .settings
                    .cadence
                    .interval
                    .clamp(Duration::from_millis(10), Duration::from_secs(1));
                let mut next = Instant::now() + step;
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(20));
                    if Instant::now() >= next {
                        next = Instant::now() + step;
                        if let Err(e) = self.tick() {
                            log::error!("snapshot: {e}");
                        }
                    }
                }
            });
            while !stop.load(Ordering::Relaxed) {
                let (stream, peer) = match listener.accept() {
                    Ok(c) => c,
                    Err(e) => {
                        if e.kind() != io::ErrorKind::WouldBlock {
                            log::warn!("accept: {e}");
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        wait_readable(listener, Duration::from_millis(20));
                        continue;
                    }
                };
                let admitted = self
                    .lock_conns()
                    .admit(address_key(peer.ip()), &stream, max, per_address);
                let id = match admitted {
                    Ok(id) => id,
                    Err(answer) => {
                        self.metrics.busy(false);
                        refuse_busy(stream, &answer);
                        continue;
                    }
                };
                let spawned = std::thread::Builder::new()
                    .name("history-conn".into())
                    .spawn_scoped(s, move || {
                        if let Err(e) = self.serve_connection(&stream, id, address_key(peer.ip())) {
                            log::warn!("{peer}: {e}");
                        }
                        self.lock_conns().remove(id);
                    });
                if let Err(e) = spawned {
                    log::error!("cannot start a thread for {peer}: {e}");
                    self.lock_conns().remove(id);
                }
            }
        });
        self.write_pending().map(|_| ())
    }

    fn lock_conns(&self) -> MutexGuard<'_, Conns> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes a credential check from `key`'s bucket; false when it is empty.
    fn take_check(&self, key: IpAddr) -> bool {
        let mut b = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        b.take(key, self.settings.limits.checks, Instant::now())
    }

    fn serve_connection(&self, stream: &TcpStream, id: u64, key: IpAddr) -> io::Result<()> {
        stream.set_nonblocking(false)?;
        let limits = &self.settings.limits;
        let line = read_line(stream, Instant::now() + limits.deadline, limits.max_line_bytes);
        let answer = if !self.lock_conns().done_reading(id) {
            self.metrics.busy(true);
            format!(
                "ERR busy: closed to make room ({} connections in progress); retry later",
                limits.max_connections.max(1)
            )
        } else {
            match line {
                Ok(_) if !self.take_check(key) => {
                    self.metrics.rate_limited();
                    let c = limits.checks;
                    format!(
                        "ERR busy: more credential checks from {key} than allowed ({} a minute, {} at once); retry later",
                        c.per_minute.max(1),
                        c.burst.max(1)
                    )
                }
                Ok(line) => self.handle_line(&line),
                Err(why) => format!("ERR {why}"),
            }
        };
        if answer.starts_with("ERR busy") {
            log::debug!("{:?}: {answer}", stream.peer_addr().ok());
        } else if answer.starts_with("ERR") {
            log::warn!("refused a record from {:?}: {}", stream.peer_addr().ok(), cut(&answer));
        }
        stream.set_write_timeout(Some(Duration::from_secs(2)))?;
        let mut w = stream;
        w.write_all(format!("{answer}\n").as_bytes())
    }
}

/// Whether a newline waits in `stream`'s receive buffer, unread (looked at without reading
/// it or waiting; `buf` is reused): a client that sent its whole line at once, before its
/// thread could read it, is not one to close.
fn line_waiting(stream: &TcpStream, buf: &mut Vec<u8>) -> bool {
    buf.resize(MAX_LINE_BYTES + 1, 0);
    // SAFETY: recv(2) into `buf`, valid for its length, on the stream's own socket; MSG_PEEK
    // leaves the bytes for its thread, MSG_DONTWAIT never blocks.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    usize::try_from(n).is_ok_and(|n| buf[..n].contains(&b'\n'))
}

/// Waits until `listener` has a connection to accept, at most `timeout`.
fn wait_readable(listener: &TcpListener, timeout: Duration) {
    let mut fds = libc::pollfd {
        fd: listener.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: one pollfd, valid for the call; the listener outlives it.
    unsafe { libc::poll(&mut fds, 1, ms) };
}

fn refuse_busy(stream: TcpStream, answer: &str) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_write_timeout(Some(Duration::from_millis(200)));
    let mut w = &stream;
    let _ = w.write_all(format!("{answer}\n").as_bytes());
}

/// Reads one line (up to `\n`, or to the end of the stream) before `deadline`, at most `max`
/// bytes. The error is the text of an `ERR` answer.
fn read_line(stream: &TcpStream, deadline: Instant, max: usize) -> Result<String, String> {
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut r = stream;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err("no complete line before the connection's deadline".into());
        }
        stream.set_read_timeout(Some(left)).map_err(|e| e.to_string())?;
        match r.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                if let Some(i) = buf.iter().position(|&b| b == b'\n') {
                    buf.truncate(i);
                    break;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(e) => return Err(e.to_string()),
        }
        if buf.len() > max {
            return Err(format!("line longer than {max} bytes"));
        }
    }
    if buf.len() > max {
        return Err(format!("line longer than {max} bytes"));
    }
    String::from_utf8(buf)
        .map(|s| s.trim_end_matches('\r').to_string())
        .map_err(|_| "the line is not UTF-8; expected a munge credential".into())
}

/// Sends one credential line to `server` (`host:port`) and returns the answer line; gives up
/// at `deadline` (connecting takes at most 5 s, the answer at most 10 s, both less when the
/// deadline is nearer). Resolving the name is not bounded by the deadline.
///
/// # Errors
/// [`Error::Send`]: the name does not resolve, the server cannot be reached, or it does not
/// answer in time.
pub fn send_line(server: &str, line: &str, deadline: Instant) -> Result<String, Error> {
    let fail = |why: String| Error::Send {
        server: cut(server),
        why,
    };
    let left = || {
        let d = deadline.saturating_duration_since(Instant::now());
        if d.is_zero() {
            Err(fail("deadline passed".into()))
        } else {
            Ok(d)
        }
    };
    let addr = server
        .to_socket_addrs()
        .map_err(|e| fail(format!("cannot resolve: {e} (expected host:port)")))?
        .next()
        .ok_or_else(|| fail("resolves to no address".into()))?;
    let s = TcpStream::connect_timeout(&addr, left()?.min(Duration::from_secs(5)))
        .map_err(|e| fail(format!("cannot connect: {e}")))?;
    s.set_write_timeout(Some(left()?.min(Duration::from_secs(10))))
        .map_err(|e| fail(e.to_string()))?;
    (&s).write_all(format!("{}\n", line.trim()).as_bytes())
        .map_err(|e| fail(format!("cannot send: {e}")))?;
    s.set_read_timeout(Some(left()?.min(Duration::from_secs(10))))
        .map_err(|e| fail(e.to_string()))?;
    let mut answer = String::new();
    BufReader::new((&s).take(4096))
        .read_line(&mut answer)
        .map_err(|e| fail(format!("no answer: {e}")))?;
    if answer.is_empty() {
        return Err(fail("closed the connection without an answer".into()));
    }
    Ok(answer.trim().to_string())
}

/// Times [`flush`] sends a record again, each after [`BUSY_PAUSE`], when the server answers
/// `ERR busy` (all its connections taken, or this one closed to make room for another: both
/// pass within a second unless the server is under attack).
pub const BUSY_RETRIES: u32 = 3;

/// Pause before sending a record again after `ERR busy`.
pub const BUSY_PAUSE: Duration = Duration::from_millis(500);

/// What [`flush`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Flushed {
    /// Records the server took (stored or already there), removed from the spool.
    pub delivered: usize,
    /// Records the server refused (left in the spool).
    pub refused: usize,
    /// Records not tried: the server could not be reached, no credential could be made, or
    /// the deadline passed (left in the spool).
    pub pending: usize,
}

/// The lock file in a spool folder that one flusher at a time holds (see [`flush`]).
pub const FLUSH_LOCK: &str = ".flush.lock";

/// Delivers the records of the spool `dir` to `server` (`host:port`), each sealed afresh by
/// `sealer` (so that a retry is never a replayed credential), until `deadline`.
///
/// One flusher at a time works on a spool: concurrent Epilogs of a node would otherwise send
/// the same records twice, each send a credential check the server counts against the node's
/// address (`[history] checks_per_minute`). A flusher waits for the lock (`FLUSH_LOCK` in
/// `dir`) until `deadline`, and lists the spool once more after its first round, so that a
/// record spooled while it worked is not left behind by the flusher that waited.
///
/// A record answered `ERR busy` is sent again up to [`BUSY_RETRIES`] times; a record still
/// answered busy, or one that cannot be delivered for want of a server or a credential,
/// ends the flush and leaves the rest spooled (the server has no room now: sending the next
/// record would only be refused too, each refusal costing the caller [`BUSY_PAUSE`]s).
pub fn flush(dir: &Path, server: &str, sealer: &dyn Sealer, deadline: Instant) -> Flushed {
    let Some(_lock) = lock_spool(dir, deadline) else {
        let pending = spool::list(dir).len();
        if pending > 0 {
            eprintln!("dynmig: history flush: another flush holds the spool; {pending} records stay spooled");
        }
        return Flushed {
            pending,
            ..Flushed::default()
        };
    };
    let mut out = Flushed::default();
    let mut seen = std::collections::HashSet::new();
    for round in 0..2 {
        // The second round sends only what was spooled while the first one ran.
        let records: Vec<_> = spool::list(dir)
            .into_iter()
            .filter(|(p, _)| seen.insert(p.clone()))
            .collect();
        let total = records.len();
        let mut stopped = false;
        for (i, (path, record)) in records.into_iter().enumerate() {
            if Instant::now() >= deadline {
                eprintln!(
                    "dynmig: history flush: deadline passed; {} records stay spooled",
                    total - i
                );
                out.pending = total - i;
                stopped = true;
                break;
            }
            let wire = match record.to_wire() {
                Ok(w) => w,
                Err(e) => {
                    eprintln!("dynmig: history record {} cannot be sent: {e}", path.display());
                    out.refused += usize::from(round == 0);
                    continue;
                }
            };
            let mut busy = 0;
            let answer = loop {
                let a = sealer
                    .seal(&wire)
                    .map_err(Error::from)
                    .and_then(|cred| send_line(server, &cred, deadline));
                match a {
                    Ok(a)
                        if a.starts_with("ERR busy")
                            && busy < BUSY_RETRIES
                            && Instant::now() + BUSY_PAUSE < deadline =>
                    {
                        busy += 1;
                        std::thread::sleep(BUSY_PAUSE);
                    }
                    a => break a,
                }
            };
            match answer {
                Ok(a) if a.starts_with("OK") => {
                    if let Err(e) = dynmig_host::fs::remove_if_present(&path) {
                        eprintln!("dynmig: delivered {} but cannot remove it: {e}", path.display());
                    }
                    out.delivered += 1;
                }
                Ok(a) if a.starts_with("ERR busy") => {
                    eprintln!(
                        "dynmig: history server busy ({}); {} records stay spooled",
                        cut(&a),
                        total - i
                    );
                    out.pending = total - i;
                    stopped = true;
                    break;
                }
                Ok(a) => {
                    eprintln!("dynmig: history server refused {}: {}", path.display(), cut(&a));
                    out.refused += usize::from(round == 0);
                }
                Err(e) => {
                    eprintln!("dynmig: history record {} stays spooled: {e}", path.display());
                    out.pending = total - i;
                    stopped = true;
                    break;
                }
            }
        }
        if stopped || total == 0 {
            break;
        }
    }
    out
}

/// The spool's flush lock, waited for until `deadline`; `None` when another flusher still
/// holds it then, or the lock file cannot be opened (no spool folder: nothing to flush).
fn lock_spool(dir: &Path, deadline: Instant) -> Option<std::fs::File> {
    loop {
        if let Some(f) = dynmig_host::fs::try_lock_file(&dir.join(FLUSH_LOCK)).ok()? {
            return Some(f);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
