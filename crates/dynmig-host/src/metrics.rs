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
//! The responder is small on purpose: one connection at a time, each with read and write
//! timeouts and a deadline for the whole request ([`MAX_REQUEST_TIME`]), a request head of
//! at most [`MAX_REQUEST_BYTES`] (parsed by `httparse`, hyper's parser) and no request body.
//! A well-kept server crate such as tiny_http reads header lines without a length bound,
//! which a daemon running as root should not offer to the network.

pub use prometheus_client;
use prometheus_client::registry::Registry;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The largest request head (request line and headers) read, bytes; a larger one is answered
/// `431`.
pub const MAX_REQUEST_BYTES: usize = 8 << 10;

/// The longest a client may take to send its request head, and the read and write timeout of
/// each socket operation.
pub const MAX_REQUEST_TIME: Duration = Duration::from_secs(2);

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

/// Binds `addr` and serves `registry` at `GET /metrics` on a new thread named
/// `metrics-<daemon>`.
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
    let thread = std::thread::Builder::new()
        .name(format!("metrics-{daemon}"))
        .spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, peer)) => {
                        if let Err(e) = answer(&stream, &registry) {
                            log::debug!("metrics: {peer}: {e}");
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(50));
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

/// Reads one request head and writes the answer; the connection is then closed.
fn answer(stream: &TcpStream, registry: &Registry) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(MAX_REQUEST_TIME))?;
    stream.set_write_timeout(Some(MAX_REQUEST_TIME))?;
    let (status, body, content_type) = match read_head(stream) {
        Ok(head) => respond(&head, registry),
        Err(HeadError::TooLarge) => (
            "431 Request Header Fields Too Large",
            format!("request head over {MAX_REQUEST_BYTES} bytes\n"),
            "text/plain",
        ),
        Err(HeadError::Io(e)) => return Err(e),
    };
    let mut w = stream;
    w.write_all(
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )?;
    w.write_all(body.as_bytes())?;
    w.flush()
}

enum HeadError {
    TooLarge,
    Io(io::Error),
}

/// Reads until the blank line that ends the head, at most [`MAX_REQUEST_BYTES`], within
/// [`MAX_REQUEST_TIME`].
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
        if Instant::now() > deadline {
            return Err(HeadError::Io(io::Error::new(
                io::ErrorKind::TimedOut,
                "request head not complete in time",
            )));
        }
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
