//! The typed codecs for everything that crosses a process boundary. Each text below is
//! written and read by one code only, here:
//!
//! | what | between | codec |
//! |---|---|---|
//! | [`intent::NodeIntent`] | controller -> agent, through the node's drain reason | `dynmig/v1 repartition to=<layout>` |
//! | [`layout::PublishedLayout`] | agent -> controller, through the node's `Extra` field | `dynmig/v1 layout=<layout>` |
//! | [`journal::Journal`] | agent -> the agent after a crash | JSON, versioned, typed steps |
//! | [`event::Event`] | every part -> `dynmig status`, the demo report | JSON lines, typed kinds |
//! | [`plan::Plans`] | the controller -> itself after a restart (`controller-plans.json`) | JSON, versioned |
//! | [`catalog::Catalog`] | the controller -> job_submit/dynmig (`catalog.json`) | JSON, versioned |
//! | [`owned::OwnedInstances`] | the agent and `init-node` -> the agent (`owned-instances.json`) | JSON, versioned |
//! | [`history_record::JobRecord`] | the Epilog -> the history server (spool file, munge payload) | JSON, versioned (`"v":1`) |
//! | [`system_comment`] | the Epilog -> the history service, through the job's SystemComment in slurmdbd | `dynmig-history/v1 key=value ... end` |
//! | [`history_snapshot`] | the history service -> job_submit/dynmig (the snapshot file) | TSV, versioned header `# dynmig-history-snapshot/v1` |
//!
//! Every codec is versioned (`dynmig/v1`), so that an administrator's own reason or comment
//! is never taken for ours, and a later dynmig can tell an old record from a new one.

pub mod catalog;
pub mod decision;
pub mod event;
pub mod history_record;
pub mod history_snapshot;
pub mod intent;
pub mod journal;
pub mod layout;
pub mod owned;
pub mod plan;
pub mod system_comment;

use crate::types::Controls;

/// The version tag every dynmig text field starts with.
pub const TAG: &str = "dynmig/v1";

/// Cuts `s` to at most `max` characters, adding `...` when it cut, and makes it one line
/// (newlines and control characters become spaces): for user- or system-provided text put in
/// a message or a Slurm field ([`crate::types::clip`] with [`Controls::Space`]).
pub fn clip(s: &str, max: usize) -> String {
    crate::types::clip(s, max, Controls::Space)
}

#[cfg(test)]
mod tests {
    #[test]
    fn clip_cuts_and_flattens() {
        assert_eq!(super::clip("a\nb", 10), "a b");
        assert_eq!(super::clip(&"x".repeat(10_000), 5), "xxxxx...");
    }
}
