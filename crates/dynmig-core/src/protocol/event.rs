//! Events: one JSON object per line in `<state_dir>/events.jsonl`, appended by the controller,
//! the agents and the hooks, read by `dynmig status` and the demo's report.

use serde::{Deserialize, Serialize};

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A node got its initial layout (`dynmig init-node`).
    Init,
    /// The controller drained a node to repartition it.
    Drain,
    /// A drained node's jobs outlived `drain_timeout`; the repartition was dropped.
    DrainTimeout,
    /// The controller planned a busy node's repartition for when its jobs must end (a
    /// maintenance reservation); the node keeps taking jobs that end before then.
    Planned,
    /// A planned repartition got another target (same reservation).
    PlanMoved,
    /// A planned repartition was cancelled (its reservation deleted).
    PlanCancelled,
    /// A plan and Slurm disagreed (a reservation without a plan, a plan without its
    /// reservation, a planned node drained by an administrator): repaired to a safe state.
    PlanRepaired,
    /// The agent began an apply.
    ApplyStart,
    /// The agent applied a layout and the node is back.
    Applied,
    /// An apply failed; the node stays drained with the reason.
    RepartitionFailed,
    /// The agent refused to act (e.g. a journal while the node is not drained by dynmig).
    AgentRefused,
    /// The slurmd an agent started died without being stopped, and the agent started it
    /// again (`Agent::keep_slurmd` in dynmig-node).
    SlurmdRestarted,
    /// A job's Prolog claimed its instances.
    JobStart,
    /// A job's Epilog ran.
    JobEnd,
    /// A job's Prolog failed (a missing device).
    PrologFailed,
    /// A job that ran out of GPU memory was requeued on a larger profile (or told why not).
    OomRestart,
    /// The controller moved a pending job to another GRES type of the catalog (the guarded
    /// default's layout changed); the node field is empty.
    JobRetyped,
}

/// One event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Seconds since the Unix epoch, with fractions.
    pub time: f64,
    /// What happened.
    pub kind: EventKind,
    /// The node concerned (`-` for none).
    pub node: String,
    /// A layout, where the event concerns one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<String>,
    /// A job id, where the event concerns one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<u64>,
    /// Free text, one line, at most 500 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl Event {
    /// A new event at `time` (seconds since the epoch).
    pub fn at(time: f64, kind: EventKind, node: &str) -> Self {
        Self {
            time,
            kind,
            node: super::clip(node, 100),
            layout: None,
            job: None,
            detail: None,
        }
    }
    /// With a layout.
    pub fn layout(mut self, l: impl ToString) -> Self {
        self.layout = Some(l.to_string());
        self
    }
    /// With a job id.
    pub fn job(mut self, id: u64) -> Self {
        self.job = Some(id);
        self
    }
    /// With free text (made one line, cut to 500 characters).
    pub fn detail(mut self, d: &str) -> Self {
        self.detail = Some(super::clip(d, 500));
        self
    }

    /// The event as one JSON line (with its `\n`).
    pub fn encode(&self) -> String {
        let mut s = serde_json::to_string(self).expect("an event always serialises");
        s.push('\n');
        s
    }

    /// Reads every event of a JSON-lines text; lines that are not events (torn, or of another
    /// version) are skipped.
    pub fn parse_lines(text: &str) -> Vec<Event> {
        text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_and_bad_lines_are_skipped() {
        let a = Event::at(1.5, EventKind::Drain, "n1")
            .layout("1x7g.80gb")
            .detail("serves 1x7g.80gb");
        let b = Event::at(2.0, EventKind::JobEnd, "n2").job(7);
        let text = format!("{}{}{{\"kind\":\"nope\"}}\nnot json\n", a.encode(), b.encode());
        assert_eq!(Event::parse_lines(&text), vec![a, b]);
        assert!(Event::at(0.0, EventKind::Init, "n")
            .encode()
            .contains("\"kind\":\"init\""));
    }
}
