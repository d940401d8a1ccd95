//! A real Prometheus server (Debian's package `prometheus`) started by a test: it scrapes the
//! targets it is given every second, answers PromQL over its HTTP API, and is stopped by its
//! pid (SIGTERM, then waited for) when dropped. Shared by the test binaries with
//! `#[path = "common/prometheus.rs"] mod prometheus;`.

use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running Prometheus server and its data directory.
pub struct Prometheus {
    child: Child,
    web: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Whether the `prometheus` binary is on PATH (tests skip with a message if not).
    pub fn installed() -> bool {
        Command::new("prometheus").arg("--version").output().is_ok()
    }

    /// Starts a server scraping `targets` (`ip:port`) as job `dynmig`, every second.
    pub fn start(targets: &[String]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let quoted: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
        std::fs::write(
            dir.path().join("prometheus.yml"),
            format!(
                "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: dynmig\n    static_configs:\n      - targets: [{}]\n",
                quoted.join(", ")
            ),
        )
        .unwrap();
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let web: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", dir.path().join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address={web}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Prometheus { child, web, _dir: dir }
    }

    /// An instant query's JSON answer.
    pub fn query(&self, q: &str) -> std::io::Result<serde_json::Value> {
        get_json(self.web, &format!("/api/v1/query?query={}", percent_encode(q)))
    }

    /// The first sample's value of an instant query, as Prometheus writes it ("3", "0.5").
    pub fn value(&self, q: &str) -> Option<String> {
        self.query(q)
            .ok()
            .and_then(|v| v["data"]["result"][0]["value"][1].as_str().map(str::to_string))
    }

    /// Waits until `q`'s first value satisfies `ok`, or panics after `timeout` naming `what`
    /// and the last value.
    pub fn wait_for(&self, what: &str, q: &str, timeout: Duration, ok: impl Fn(f64) -> bool) {
        let until = Instant::now() + timeout;
        loop {
            let v = self.value(q);
            if v.as_deref().and_then(|v| v.parse::<f64>().ok()).is_some_and(&ok) {
                return;
            }
            assert!(Instant::now() < until, "timed out waiting for {what}: {q} = {v:?}");
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Evaluates every query of the Grafana dashboard (docs/grafana/dynmig.json) with the
    /// dashboard's variables filled in, asserting that each succeeds; returns how many ran.
    pub fn check_dashboard(&self, root: &Path) -> usize {
        let dashboard: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(root.join("docs/grafana/dynmig.json")).unwrap()).unwrap();
        let mut checked = 0;
        for p in dashboard["panels"].as_array().unwrap() {
            for t in p["targets"].as_array().into_iter().flatten() {
                let expr = t["expr"]
                    .as_str()
                    .unwrap()
                    .replace("$__rate_interval", "1m")
                    .replace("$node", ".*");
                let v = self.query(&expr).unwrap();
                assert_eq!(v["status"], "success", "{expr}: {v}");
                checked += 1;
            }
        }
        checked
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        // SAFETY: a plain kill(2) of our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

/// `GET path` on `addr` (the query already percent-encoded): the JSON body.
fn get_json(addr: SocketAddr, path: &str) -> std::io::Result<serde_json::Value> {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    serde_json::from_str(body).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{e}: {text}")))
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
