//! Prometheus metrics over HTTP for the daemons (controller, node agent, history service).
//!
//! Each daemon keeps its metrics in a [`prometheus_client`] [`Registry`] (re-exported here so
//! that every crate uses the same version) and updates them from its own loop; [`serve`]
//! answers `GET /metrics` with the registry in text exposition on a thread of its own, so a
//! scrape never waits for the daemon's loop and the loop never waits for a scrape. A client
//! that accepts `application/openmetrics-text` (Prometheus does) gets OpenMetrics 1.0 text as
//! `prometheus_client` writes it; any other (curl, `promtool check metrics`, older scrapers)
//! gets the classic Prometheus text format 0.0.4 ([`to_prometheus_text`]).
//!
//! The responder is small on purpose: a thread per connection, at most [`MAX_CONNECTIONS`]
//! at once and [`MAX_PER_PEER`] from one address (beyond either, a connection is answered
//! `503` at once and closed), so a slow or silent client holds one slot and never delays
//! another's scrape. Each connection has a deadline for reading the request head and one for
//! writing the answer ([`MAX_REQUEST_TIME`] each; every read and write waits at most what is
//! left of it), a request head of at most [`MAX_REQUEST_BYTES`] (parsed by `httparse`,
//! hyper's parser) and no request body. A well-kept server crate such as tiny_http reads
//! header lines without a length bound, which a daemon running as root should not offer to
//! the network.
//!
//! The endpoint has no authentication: the config binds it to loopback when
//! `metrics_listen` gives a port alone, and a site that scrapes it from elsewhere writes the
//! address out and firewalls the port (docs/config.md, "Metrics").

pub use prometheus_client;
use prometheus_client::registry::Registry;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The largest request head (request line and headers) read, bytes; a larger one is answered
/// `431`.
pub const MAX_REQUEST_BYTES: usize = 8 << 10;

/// The longest a client may take to send its request head, and the longest the answer may
/// take to write.
pub const MAX_REQUEST_TIME: Duration = Duration::from_secs(2);

/// The most connections served at once; more are answered `503` and closed.
pub const MAX_CONNECTIONS: usize = 16;

/// The most connections served at once from one IP address; more are answered `503` and
/// closed, so that one client cannot take every slot.
pub const MAX_PER_PEER: usize = 4;

/// The content type of OpenMetrics text (what `prometheus_client`'s text encoder writes).
pub const OPENMETRICS_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The content type of the classic Prometheus text format.
pub const PROMETHEUS_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A running metrics endpoint; dropping it stops the thread (within about 100 ms).
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// The address it listens on (the port the system chose when the config said `:0`).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The registry as text exposition (ends with `# EOF`).
pub fn render(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail; an encoder error would be a bug in a metric.
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, registry) {
        log::error!("encoding metrics: {e}");
    }
    out
}

/// OpenMetrics text as the classic Prometheus text format 0.0.4: a counter's `# HELP` and
/// `# TYPE` name its `_total` sample (OpenMetrics names the family without it), and the
/// `# UNIT` and `# EOF` lines, which that format does not have, are left out.
pub fn to_prometheus_text(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len() + 16 * counters.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "].into_iter().find_map(|p| {
            let rest = line.strip_prefix(p)?;
            let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
            counters.contains(name).then(|| format!("{p}{name}_total {tail}"))
        });
        match meta {
            Some(m) => out.push_str(m.trim_end()),
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// Binds `addr` and serves `registry` at `GET /metrics`: a thread named `metrics-<daemon>`
/// accepts, and each connection is answered on a thread of its own (module docs).
///
/// # Errors
/// The address cannot be bound (in use, not an address of this host, a privileged port),
/// or the thread cannot be started; the message names the address.
pub fn serve(addr: SocketAddr, registry: Arc<Registry>, daemon: &str) -> io::Result<MetricsServer> {
    let listener = TcpListener::bind(addr)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {addr} for metrics: {e}")))?;
    listener.set_nonblocking(true)?;
    let local = listener.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let slots = Arc::new(Slots::default());
    let name = format!("metrics-{daemon}");
    let thread = std::thread::Builder::new().name(name.clone()).spawn(move || {
        while !flag.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((stream, peer)) => {
                    let Some(slot) = Slots::take(&slots, peer.ip()) else {
                        log::debug!("metrics: {peer}: busy, answered 503");
                        refuse_busy(&stream);
                        continue;
                    };
                    let registry = Arc::clone(&registry);
                    let spawned = std::thread::Builder::new().name(name.clone()).spawn(move || {
                        let _slot = slot;
                        if let Err(e) = answer(&stream, &registry) {
                            log::debug!("metrics: {peer}: {e}");
                        }
                    });
                    if let Err(e) = spawned {
                        log::warn!("metrics: cannot start a thread for {peer}: {e}");
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => {
                    log::warn!("metrics: accept: {e}");
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
    })?;
    log::info!("metrics: serving http://{local}/metrics");
    Ok(MetricsServer {
        addr: local,
        stop,
        thread: Some(thread),
    })
}

/// The connections being served: in all and per client address.
#[derive(Debug, Default)]
struct Slots {
    inner: std::sync::Mutex<SlotCounts>,
}

#[derive(Debug, Default)]
struct SlotCounts {
    total: usize,
    per_peer: std::collections::HashMap<IpAddr, usize>,
}

/// One connection's place in [`Slots`], given back when dropped.
#[derive(Debug)]
struct Slot {
    slots: Arc<Slots>,
    peer: IpAddr,
}

impl Slots {
    fn counts(&self) -> std::sync::MutexGuard<'_, SlotCounts> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A slot for a connection from `peer`, unless [`MAX_CONNECTIONS`] or [`MAX_PER_PEER`]
    /// are reached.
    fn take(slots: &Arc<Slots>, peer: IpAddr) -> Option<Slot> {
        let mut c = slots.counts();
        let mine = c.per_peer.get(&peer).copied().unwrap_or(0);
        if c.total >= MAX_CONNECTIONS || mine >= MAX_PER_PEER {
            return None;
        }
        c.total += 1;
        c.per_peer.insert(peer, mine + 1);
        Some(Slot {
            slots: Arc::clone(slots),
            peer,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut c = self.slots.counts();
        c.total = c.total.saturating_sub(1);
        if let Some(n) = c.per_peer.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                c.per_peer.remove(&self.peer);
            }
        }
    }
}

/// A `503` to a connection over the limits, without waiting: one non-blocking write of a
/// short answer (dropped if the socket cannot take it at once), then the connection closes.
fn refuse_busy(stream: &TcpStream) {
    const BODY: &str = "too many scrapes at once\n";
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n{BODY}",
        BODY.len()
    );
    let _ = stream.set_nonblocking(true);
    let mut w = stream;
    let _ = w.write(answer.as_bytes());
}

/// Reads one request head and writes the answer; the connection is then closed.
fn answer(stream: &TcpStream, registry: &Registry) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    let (status, body, content_type) = match read_head(stream) {
        Ok(head) => respond(&head, registry),
        Err(HeadError::TooLarge) => (
            "431 Request Header Fields Too Large",
            format!("request head over {MAX_REQUEST_BYTES} bytes\n"),
            "text/plain",
        ),
        Err(HeadError::Io(e)) => return Err(e),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let deadline = Instant::now() + MAX_REQUEST_TIME;
    write_by(stream, head.as_bytes(), deadline)?;
    write_by(stream, body.as_bytes(), deadline)
}

/// What is left until `deadline`, or a `TimedOut` error naming `what` when nothing is.
fn left(deadline: Instant, what: &str) -> io::Result<Duration> {
    let now = Instant::now();
    if now >= deadline {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("{what} not done in time"),
        ));
    }
    Ok(deadline - now)
}

/// Writes all of `bytes` before `deadline`: each write waits at most what is left.
fn write_by(stream: &TcpStream, mut bytes: &[u8], deadline: Instant) -> io::Result<()> {
    let mut w = stream;
    while !bytes.is_empty() {
        stream.set_write_timeout(Some(left(deadline, "answer")?))?;
        match w.write(bytes) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "client stopped reading")),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    w.flush()
}

enum HeadError {
    TooLarge,
    Io(io::Error),
}

/// Reads until the blank line that ends the head, at most [`MAX_REQUEST_BYTES`], within
/// [`MAX_REQUEST_TIME`]: each read waits at most what is left of it.
fn read_head(stream: &TcpStream) -> Result<Vec<u8>, HeadError> {
    let deadline = Instant::now() + MAX_REQUEST_TIME;
    let mut buf = vec![0u8; MAX_REQUEST_BYTES];
    let mut len = 0;
    let mut r = stream;
    loop {
        if buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
            buf.truncate(len);
            return Ok(buf);
        }
        if len == buf.len() {
            return Err(HeadError::TooLarge);
        }
        let wait = left(deadline, "request head").map_err(HeadError::Io)?;
        stream.set_read_timeout(Some(wait)).map_err(HeadError::Io)?;
        match r.read(&mut buf[len..]) {
            Ok(0) => {
                return Err(HeadError::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed before the request head ended",
                )))
            }
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(HeadError::Io(e)),
        }
    }
}

/// Status, body and content type for a request head.
fn respond(head: &[u8], registry: &Registry) -> (&'static str, String, &'static str) {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return ("400 Bad Request", "not an HTTP/1 request\n".into(), "text/plain"),
    }
    let has_body = req.headers.iter().any(|h| {
        (h.name.eq_ignore_ascii_case("content-length") && h.value != b"0")
            || h.name.eq_ignore_ascii_case("transfer-encoding")
    });
    if has_body {
        return (
            "413 Content Too Large",
            "no request body is read\n".into(),
            "text/plain",
        );
    }
    let path = req.path.unwrap_or("");
    let path = path.split('?').next().unwrap_or("");
    let openmetrics = req.headers.iter().any(|h| {
        h.name.eq_ignore_ascii_case("accept")
            && std::str::from_utf8(h.value).is_ok_and(|v| v.contains("application/openmetrics-text"))
    });
    match (req.method, path) {
        (Some("GET"), "/metrics") if openmetrics => ("200 OK", render(registry), OPENMETRICS_TYPE),
        (Some("GET"), "/metrics") => ("200 OK", to_prometheus_text(&render(registry)), PROMETHEUS_TYPE),
        (Some("GET"), "/") => ("200 OK", "dynmig metrics: /metrics\n".into(), "text/plain"),
        (Some("GET"), _) => ("404 Not Found", "only /metrics is served\n".into(), "text/plain"),
        _ => ("405 Method Not Allowed", "only GET is served\n".into(), "text/plain"),
    }
}

/// `GET /metrics` from `addr` with a 5 s timeout, as `curl` asks (the Prometheus text
/// format): the status line and the body.
///
/// # Errors
/// The connection fails or the answer is not HTTP.
pub fn scrape(addr: SocketAddr) -> io::Result<(String, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes())?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no end of the HTTP head"))?;
    let status = head.lines().next().unwrap_or("").to_string();
    Ok((status, body.to_string()))
}

/// What `promtool check metrics` said of a scrape ([`promtool_check`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromtoolCheck {
    /// No `promtool` in `PATH` (Debian package `prometheus`); nothing was checked.
    Absent,
    /// It found no problem.
    Passed,
    /// Its complaints, or why it could not run.
    Failed(String),
}

/// Runs `promtool check metrics` (Prometheus' own linter) on `text`, a scrape in the
/// Prometheus text format; for the daemons' tests.
pub fn promtool_check(text: &str) -> PromtoolCheck {
    use std::process::{Command, Stdio};
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return PromtoolCheck::Absent,
        Err(e) => return PromtoolCheck::Failed(format!("cannot run promtool: {e}")),
    };
    if let Some(mut stdin) = child.stdin.take() {
        if let Err(e) = stdin.write_all(text.as_bytes()) {
            return PromtoolCheck::Failed(format!("writing to promtool: {e}"));
        }
    }
    match child.wait_with_output() {
        Ok(o) if o.status.success() => PromtoolCheck::Passed,
        Ok(o) => PromtoolCheck::Failed(format!(
            "promtool check metrics: {}: {}{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )),
        Err(e) => PromtoolCheck::Failed(format!("waiting for promtool: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;

    fn server() -> (MetricsServer, Counter) {
        let mut r = Registry::default();
        let c = Counter::<u64>::default();
        r.register("dynmig_test_things", "Things counted by the test", c.clone());
        let s = serve("127.0.0.1:0".parse().unwrap(), Arc::new(r), "test").unwrap();
        (s, c)
    }

    fn raw(addr: SocketAddr, req: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = s.write_all(req);
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    #[test]
    fn a_scrape_sees_the_current_values() {
        let (s, c) = server();
        c.inc_by(3);
        let (status, body) = scrape(s.local_addr()).unwrap();
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(body.contains("# TYPE dynmig_test_things_total counter"), "{body}");
        assert!(body.contains("\ndynmig_test_things_total 3\n"), "{body}");
        assert!(!body.contains("# EOF"), "{body}");
        c.inc();
        assert!(scrape(s.local_addr()).unwrap().1.contains("dynmig_test_things_total 4"));
    }

    #[test]
    fn promtool_tells_a_bad_scrape_from_a_good_one() {
        let (s, c) = server();
        c.inc();
        let good = scrape(s.local_addr()).unwrap().1;
        match promtool_check(&good) {
            PromtoolCheck::Absent => eprintln!("skipped: promtool not found (Debian package prometheus)"),
            r => {
                assert_eq!(r, PromtoolCheck::Passed, "{good}");
                // OpenMetrics' counter naming is what promtool 2.42 refuses; the check sees it.
                let om = render(&s_registry(&c));
                assert!(matches!(promtool_check(&om), PromtoolCheck::Failed(_)), "{om}");
            }
        }
    }

    fn s_registry(c: &Counter) -> Registry {
        let mut r = Registry::default();
        r.register("dynmig_test_things", "Things counted by the test", c.clone());
        r
    }

    #[test]
    fn prometheus_asks_for_openmetrics_and_gets_it() {
        let (s, c) = server();
        c.inc();
        let out = raw(
            s.local_addr(),
            b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text;version=1.0.0,text/plain;q=0.5\r\n\r\n",
        );
        assert!(out.contains(OPENMETRICS_TYPE), "{out}");
        assert!(out.contains("# TYPE dynmig_test_things counter\n"), "{out}");
        assert!(out.ends_with("# EOF\n"), "{out}");
    }

    #[test]
    fn openmetrics_counters_become_prometheus_counters() {
        let om = "# HELP a_total_x A.\n# TYPE a_total_x counter\na_total_x_total 1\n# HELP g G.\n# TYPE g gauge\n# UNIT g seconds\ng 2\n# EOF\n";
        assert_eq!(
            to_prometheus_text(om),
            "# HELP a_total_x_total A.\n# TYPE a_total_x_total counter\na_total_x_total 1\n# HELP g G.\n# TYPE g gauge\ng 2\n"
        );
    }

    #[test]
    fn other_paths_methods_bodies_and_huge_heads_are_refused() {
        let (s, _) = server();
        let a = s.local_addr();
        assert!(raw(a, b"GET /x HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        assert!(raw(a, b"POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
        assert!(raw(a, b"GET /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello").starts_with("HTTP/1.1 413"));
        assert!(raw(a, b"hello\r\n\r\n").starts_with("HTTP/1.1 400"));
        let mut huge = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
        huge.extend(std::iter::repeat_n(b'a', MAX_REQUEST_BYTES));
        assert!(raw(a, &huge).starts_with("HTTP/1.1 431"));
        // Still serving.
        assert!(scrape(a).unwrap().0.ends_with("200 OK"));
    }

    #[test]
    fn a_silent_client_is_dropped_and_does_not_stop_the_next_scrape_for_long() {
        let (s, _) = server();
        let a = s.local_addr();
        let mut silent = TcpStream::connect(a).unwrap();
        silent.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let t = Instant::now();
        // Closed without an answer after the request deadline.
        let mut out = Vec::new();
        let _ = silent.read_to_end(&mut out);
        assert!(out.is_empty());
        assert!(
            t.elapsed() < MAX_REQUEST_TIME + Duration::from_secs(2),
            "{:?}",
            t.elapsed()
        );
        assert!(scrape(a).unwrap().0.ends_with("200 OK"));
    }

    #[test]
    fn a_stalled_client_does_not_delay_another_scrape() {
        let (s, c) = server();
        c.inc();
        let a = s.local_addr();
        // One client sends half a request head and stalls; another never writes at all.
        let mut stalled = TcpStream::connect(a).unwrap();
        stalled.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n").unwrap();
        let _silent = TcpStream::connect(a).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        // Two scrapes at once, both answered while the stalled ones still hold their slots.
        let t = Instant::now();
        let scrapes: Vec<_> = (0..2).map(|_| std::thread::spawn(move || scrape(a).unwrap())).collect();
        for h in scrapes {
            let (status, body) = h.join().unwrap();
            assert_eq!(status, "HTTP/1.1 200 OK");
            assert!(body.contains("dynmig_test_things_total 1"), "{body}");
        }
        assert!(
            t.elapsed() < MAX_REQUEST_TIME / 2,
            "the scrapes waited for the stalled clients: {:?}",
            t.elapsed()
        );
        // The stalled client is dropped at its deadline, without an answer.
        stalled.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut out = Vec::new();
        let _ = stalled.read_to_end(&mut out);
        assert!(out.is_empty(), "{}", String::from_utf8_lossy(&out));
    }

    #[test]
    fn one_address_gets_at_most_its_share_of_connections_and_the_rest_a_503() {
        let (s, _) = server();
        let a = s.local_addr();
        let held: Vec<TcpStream> = (0..MAX_PER_PEER).map(|_| TcpStream::connect(a).unwrap()).collect();
        // Once the server has accepted the silent four (a busy machine may take a moment),
        // a fifth is refused at once rather than served or kept waiting.
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            let t = Instant::now();
            let out = raw(a, b"GET /metrics HTTP/1.1\r\n\r\n");
            if out.starts_with("HTTP/1.1 503") {
                assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
                break;
            }
            assert!(out.starts_with("HTTP/1.1 200"), "{out}");
            assert!(Instant::now() < until, "never refused: {out}");
            std::thread::sleep(Duration::from_millis(20));
        }
        // Their slots come back when they close.
        drop(held);
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            match scrape(a) {
                Ok((status, _)) if status.ends_with("200 OK") => break,
                r if Instant::now() > until => panic!("no slot came back: {r:?}"),
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    #[test]
    fn an_address_in_use_is_a_clear_error() {
        let (s, _) = server();
        let e = serve(s.local_addr(), Arc::new(Registry::default()), "test").unwrap_err();
        assert!(
            e.to_string()
                .contains(&format!("cannot listen on {} for metrics", s.local_addr())),
            "{e}"
        );
    }
}
