//! The step times of an apply.

use std::time::Duration;

/// The steps of an apply whose time the agent records, in order ([`StepTimes`]):
/// - `idle_wait`: from the first look that found the node drained for this target (with jobs
///   still on it) until the apply began: the running jobs ending and Slurm noticing (absent
///   when the node was idle at that first look, or the apply resumes a journal);
/// - `instances`: GPU instances deleted and created;
/// - `gres_conf`: gres.conf written;
/// - `slurmd_stop`, `delete`, `slurmd_start`: the re-registration ([`crate::reregister::Reregister`]; the
///   `register:*` points of the module docs), each until its point;
/// - `registration`: from the started slurmd until Slurm shows the node in service with the
///   new GRES (the Wait step);
/// - `publish`: the layout written into the node's `Extra`.
pub const STEP_NAMES: [&str; 8] = [
    "idle_wait",
    "instances",
    "gres_conf",
    "slurmd_stop",
    "delete",
    "slurmd_start",
    "registration",
    "publish",
];

/// How long each step of one apply took (seconds per name of [`STEP_NAMES`], in order; a step
/// not done is absent). The agent logs them, observes them in its metrics and writes them
/// into the `applied` event's detail, where the demo's report reads them back.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepTimes(pub Vec<(&'static str, Duration)>);

impl StepTimes {
    /// Adds `took` to the step `name` (a step may be done twice: a re-registration again).
    pub fn add(&mut self, name: &'static str, took: Duration) {
        match self.0.iter_mut().find(|(n, _)| *n == name) {
            Some((_, d)) => *d += took,
            None => self.0.push((name, took)),
        }
    }

    /// The time of step `name`, if it was done.
    pub fn get(&self, name: &str) -> Option<Duration> {
        self.0.iter().find(|(n, _)| *n == name).map(|(_, d)| *d)
    }

    /// `steps idle_wait=0.052 instances=0.001 ...` (seconds, 3 decimals, in [`STEP_NAMES`]
    /// order).
    pub fn encode(&self) -> String {
        let mut s = String::from("steps");
        for name in STEP_NAMES {
            if let Some(d) = self.get(name) {
                s.push_str(&format!(" {name}={:.3}", d.as_secs_f64()));
            }
        }
        s
    }

    /// The step times in a text that holds [`StepTimes::encode`]'s words (an `applied`
    /// event's detail); unknown names and unreadable numbers are skipped.
    pub fn parse(text: &str) -> Self {
        let mut out = Self::default();
        let Some(at) = text.find("steps ") else {
            return out;
        };
        for word in text[at + "steps ".len()..].split_whitespace() {
            let Some((k, v)) = word.split_once('=') else { break };
            let Some(name) = STEP_NAMES.iter().find(|n| **n == k) else {
                continue;
            };
            if let Ok(secs) = v.trim_end_matches([',', ';']).parse::<f64>() {
                if secs.is_finite() && secs >= 0.0 {
                    out.add(name, Duration::from_secs_f64(secs));
                }
            }
        }
        out
    }
}
