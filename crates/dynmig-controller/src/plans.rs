//! The controller's plans file: read back with a size bound, written atomically.

use crate::snapshot::ManagedNode;
use dynmig_core::protocol::event::{Event, EventKind};
use dynmig_core::protocol::plan::{Plans, MAX_PLANS_BYTES};
use dynmig_host::fs::{read_text_bounded, write_atomically, LineLog};
use std::path::Path;

/// The plans as read, and what reading them found wrong.
#[derive(Debug, Clone, Default)]
pub struct LoadedPlans {
    /// The plans that fit their node.
    pub plans: Plans,
    /// The file could not be read (moved aside to `<path>.bad`): every managed node's
    /// `dynmig_<node>` reservation without a plan must be deleted.
    pub sweep_all: bool,
    /// `(node, reservation)` of plans dropped because their node is no longer managed.
    pub orphans: Vec<(String, String)>,
    /// Plans were dropped while reading: the file must be written again.
    pub rewrite: bool,
}

fn note(events: &LineLog, now: i64, node: &str, why: &str) {
    log::warn!("{node}: {why}");
    events.append(
        &Event::at(now as f64, EventKind::PlanRepaired, node)
            .detail(why)
            .encode(),
    );
}

/// Reads the plans at `path` (a missing file holds none). With `repair`, an unreadable file is
/// moved aside and logged, and a plan whose target no longer fits its node is logged; without
/// (a dry run, `dynmig status`) nothing is changed or logged. A plan for a node that is not
/// managed, or whose target no longer fits its node, is dropped.
pub fn load_plans(path: &Path, managed: &[ManagedNode], events: &LineLog, now: i64, repair: bool) -> LoadedPlans {
    let note = |node: &str, why: &str| {
        if repair {
            note(events, now, node, why);
        }
    };
    let mut out = LoadedPlans::default();
    let text = match read_text_bounded(path, MAX_PLANS_BYTES) {
        Ok(None) => return out,
        Ok(Some(t)) => Ok(t),
        Err(e) => Err(e.to_string()),
    };
    let raw = text.and_then(|t| Plans::parse(&t).map_err(|e| e.to_string()));
    let raw = match raw {
        Ok(r) => r,
        Err(why) => {
            let aside = path.with_extension("json.bad");
            if repair {
                let _ = std::fs::rename(path, &aside);
            }
            note(
                "-",
                &format!(
                    "unreadable plans file {} ({why}): moved to {}; every dynmig reservation without a plan is deleted",
                    path.display(),
                    aside.display()
                ),
            );
            out.sweep_all = true;
            return out;
        }
    };
    for r in raw {
        let Some(m) = managed.iter().find(|m| m.name == r.node) else {
            out.orphans.push((r.node.clone(), r.reservation.clone()));
            out.rewrite = true;
            continue;
        };
        match r.typed(m.model, m.gpus) {
            Ok(p) => out.plans.set(p),
            Err(e) => {
                note(
                    &r.node,
                    &format!("plan target '{}' does not fit the node ({e}): plan dropped", r.target),
                );
                out.rewrite = true;
                out.sweep_all = true;
            }
        }
    }
    out
}

/// Writes the plans to `path` atomically (0640). A failure is logged, not returned: the
/// reservations in Slurm stay, and the next controller start repairs the difference.
pub fn save_plans(path: &Path, plans: &Plans, events: &LineLog, now: i64) {
    if let Err(e) = write_atomically(path, plans.encode().as_bytes(), 0o640) {
        note(events, now, "-", &format!("cannot write {}: {e}", path.display()));
    }
}
