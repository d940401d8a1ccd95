//! The event log: one JSON object per line, appended by the controller, the agents and the
//! hooks; read by `dynmig status` and the demo's report.
//!
//! Lines are written with a single `write` on a file opened with `O_APPEND`, so that several
//! processes can append to one file without interleaving (each line is well under PIPE_BUF).

use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

/// One event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Seconds since the epoch, with fractions.
    pub time: f64,
    /// What happened: `drain`, `apply_start`, `applied`, `repartition_failed`, `job_start`,
    /// `job_end`, `prolog_failed`.
    pub kind: String,
    /// The node concerned.
    pub node: String,
    /// A layout, where the event concerns one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<String>,
    /// A job id, where the event concerns one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<u64>,
    /// Free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl Event {
    /// A new event now.
    pub fn new(kind: &str, node: &str) -> Self {
        let time = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        Self {
            time,
            kind: kind.into(),
            node: node.into(),
            layout: None,
            job: None,
            detail: None,
        }
    }
    /// With a layout.
    pub fn layout(mut self, l: &str) -> Self {
        self.layout = Some(l.into());
        self
    }
    /// With a job id.
    pub fn job(mut self, id: u64) -> Self {
        self.job = Some(id);
        self
    }
    /// With free text.
    pub fn detail(mut self, d: &str) -> Self {
        self.detail = Some(d.into());
        self
    }
}

/// An append-only event file; `None` path logs nothing.
#[derive(Debug, Clone, Default)]
pub struct EventLog {
    path: Option<PathBuf>,
}

impl EventLog {
    /// Events go to `path`.
    pub fn to(path: impl Into<PathBuf>) -> Self {
        Self {
            path: Some(path.into()),
        }
    }

    /// Appends one event. Logging never fails the caller: an error is printed to stderr.
    pub fn log(&self, e: &Event) {
        let Some(path) = &self.path else { return };
        let mut line = serde_json::to_string(e).unwrap_or_default();
        line.push('\n');
        let res = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(err) = res {
            eprintln!("dynmig: cannot append to event log {}: {err}", path.display());
        }
    }

    /// Reads every event of a file; lines that are not events are skipped.
    pub fn read(path: &Path) -> Vec<Event> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let log = EventLog::to(dir.path().join("e.jsonl"));
        log.log(&Event::new("drain", "n1").layout("1x7g.80gb,2x3g.40gb"));
        log.log(&Event::new("job_end", "n2").job(7));
        let ev = EventLog::read(&dir.path().join("e.jsonl"));
        assert_eq!(ev.len(), 2);
        assert_eq!(ev[0].layout.as_deref(), Some("1x7g.80gb,2x3g.40gb"));
        assert_eq!((ev[1].kind.as_str(), ev[1].job), ("job_end", Some(7)));
    }
}
