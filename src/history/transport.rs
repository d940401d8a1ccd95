//! Delivery of history records from the nodes to the controller host over TCP.
//!
//! Protocol, one record per connection: the node sends one munge credential (whose payload is
//! the record's JSON) and a newline; the server answers one line: `OK stored`, `OK duplicate`
//! (already stored: a retried delivery), or `ERR <why>` (refused: bad credential, not root,
//! not a record). The node removes a record from its spool on `OK` only.

use super::store::Store;
use super::{auth, spool, JobRecord};
use anyhow::{anyhow, bail, Context, Result};
use dynmig_core::estimate::EstimatorConfig;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Longest credential line accepted, bytes.
const MAX_LINE: u64 = 64 * 1024;

/// What the server needs.
pub struct Server {
    /// The database.
    pub store: Store,
    /// munged socket to decode with.
    pub socket: Option<PathBuf>,
    /// Snapshot file rewritten after each new record.
    pub snapshot: PathBuf,
    /// Estimator settings for the snapshot.
    pub estimator: EstimatorConfig,
}

impl Server {
    /// Handles one credential line: decode, check, store, refresh the snapshot. Returns the
    /// answer line (without newline).
    pub fn handle_line(&self, line: &str) -> String {
        match self.accept(line) {
            Ok(true) => "OK stored".into(),
            Ok(false) => "OK duplicate".into(),
            Err(e) => format!("ERR {e:#}").replace('\n', " "),
        }
    }

    fn accept(&self, line: &str) -> Result<bool> {
        let payload = auth::decode_from_root(self.socket.as_deref(), line)?;
        let record: JobRecord = serde_json::from_slice(&payload).context("not a dynmig history record")?;
        let new = self.store.insert(&record)?;
        if new {
            self.store.write_snapshot(&self.estimator, &self.snapshot)?;
        }
        Ok(new)
    }

    /// Serves connections on `listener` one at a time, forever (each with a 10 s timeout).
    pub fn serve(&self, listener: TcpListener) -> ! {
        loop {
            match listener.accept() {
                Ok((stream, peer)) => {
                    if let Err(e) = self.serve_one(stream) {
                        eprintln!("dynmig history serve: {peer}: {e:#}");
                    }
                }
                Err(e) => eprintln!("dynmig history serve: accept: {e}"),
            }
        }
    }

    fn serve_one(&self, stream: TcpStream) -> Result<()> {
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut line = String::new();
        BufReader::new((&stream).take_limited()).read_line(&mut line)?;
        let answer = self.handle_line(&line);
        if answer.starts_with("ERR") {
            eprintln!(
                "dynmig history serve: refused a record from {:?}: {answer}",
                stream.peer_addr().ok()
            );
        }
        (&stream).write_all(format!("{answer}\n").as_bytes())?;
        Ok(())
    }
}

trait TakeLimited: std::io::Read + Sized {
    fn take_limited(self) -> std::io::Take<Self> {
        self.take(MAX_LINE)
    }
}
impl<R: std::io::Read> TakeLimited for R {}

/// Sends one credential line to `server` (`host:port`) and returns the answer line.
///
/// # Errors
/// The server cannot be reached or does not answer within 10 s.
pub fn send_line(server: &str, line: &str) -> Result<String> {
    let addr = server
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {server}"))?
        .next()
        .ok_or_else(|| anyhow!("{server} resolves to no address"))?;
    let mut s =
        TcpStream::connect_timeout(&addr, Duration::from_secs(5)).with_context(|| format!("cannot reach {server}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(format!("{}\n", line.trim()).as_bytes())?;
    let mut answer = String::new();
    BufReader::new(s).read_line(&mut answer)?;
    if answer.is_empty() {
        bail!("{server} closed the connection without an answer");
    }
    Ok(answer.trim().to_string())
}

/// What [`flush`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Flushed {
    /// Records the server took (stored or already there).
    pub delivered: usize,
    /// Records the server refused (left in the spool).
    pub refused: usize,
    /// Records not tried because the server could not be reached.
    pub pending: usize,
}

/// Delivers every record of the spool `dir` to `server`, each encoded afresh with munge;
/// stops at the first record the server cannot be reached for.
pub fn flush(dir: &Path, server: &str, socket: Option<&Path>) -> Flushed {
    let mut out = Flushed::default();
    let records = spool::list(dir);
    let total = records.len();
    for (i, (path, record)) in records.into_iter().enumerate() {
        let answer = serde_json::to_vec(&record)
            .map_err(anyhow::Error::from)
            .and_then(|json| auth::encode(socket, &json))
            .and_then(|cred| send_line(server, &cred));
        match answer {
            Ok(a) if a.starts_with("OK") => {
                let _ = std::fs::remove_file(&path);
                out.delivered += 1;
            }
            Ok(a) => {
                eprintln!("dynmig: history server refused {}: {a}", path.display());
                out.refused += 1;
            }
            Err(e) => {
                eprintln!("dynmig: history record {} stays spooled: {e:#}", path.display());
                out.pending = total - i;
                break;
            }
        }
    }
    out
}
