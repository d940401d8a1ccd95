//! Instance operations between representative layouts: dynmig's per-instance transitions
//! against NVIDIA mig-parted's destroy-all-and-recreate (`dynmig gpu transitions`,
//! docs/reconfigure.md), measured by [`apply_transition`] on a simulated GPU.

use crate::{apply_transition, BackendError, GpuBackend, SimulatedBackend};
use dynmig_core::geometry::{destroy_all_and_recreate, place, GpuModel, NodeLayout, ProfileCounts};
use std::fmt::Write as _;
use std::path::Path;

/// Why [`transitions`] failed.
#[derive(Debug, thiserror::Error)]
pub enum TransitionsError {
    /// A representative layout does not exist on the model (e.g. a 4-slice A30).
    #[error("{model}: layout '{layout}' does not fit: {why}")]
    Layout {
        /// The model.
        model: &'static str,
        /// The layout, in short form (`3x2g+1x1g`).
        layout: String,
        /// Why.
        why: String,
    },
    /// The simulated backend failed.
    #[error("{from} -> {to}: {source}")]
    Backend {
        /// Start layout.
        from: String,
        /// Target layout.
        to: String,
        /// The error.
        #[source]
        source: BackendError,
    },
    /// Applying the transition failed, or left something else than the target.
    #[error("{from} -> {to}: {why}")]
    Apply {
        /// Start layout.
        from: String,
        /// Target layout.
        to: String,
        /// What went wrong.
        why: String,
    },
}

/// One row of [`transitions`]: a start layout (with its busy instances) and a target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransitionRow {
    /// Layout before.
    pub from: String,
    /// Profiles of `from` that run a job (kept by dynmig).
    pub busy: Vec<&'static str>,
    /// Layout after.
    pub to: String,
    /// Instance operations [`apply_transition`] did on the simulated backend.
    pub dynmig_ops: usize,
    /// Operations of mig-parted's destroy-all-and-recreate.
    pub mig_parted_ops: usize,
    /// Whether mig-parted would destroy an instance that runs a job.
    pub mig_parted_kills_job: bool,
}

/// Representative `(from, busy profiles in from, to)` pairs for a seven-slice model, written
/// with the model's profile names by slice counts: `1g`, `1g2` (double memory), `2g`, `3g`,
/// `4g`, `7g`.
const PAIRS: &[(&str, &[&str], &str)] = &[
    ("1x7g", &[], "7x1g"),
    ("7x1g", &[], "1x7g"),
    ("7x1g", &[], "3x2g+1x1g"),
    ("2x3g", &[], "1x4g+1x3g"),
    ("1x4g+1x3g", &[], "1x4g+1x2g+1x1g"),
    ("3x2g+1x1g", &[], "2x2g+3x1g"),
    ("1x3g+1x2g+2x1g", &[], "1x3g+4x1g"),
    ("1x3g+1x2g+2x1g", &["3g"], "1x3g+4x1g"),
    ("1x4g+1x2g+1x1g", &["4g"], "1x4g+3x1g"),
    ("7x1g", &["1g"], "1x3g+4x1g"),
];

/// `"3x2g+1x1g"` in `model`'s profile names (`3x2g.20gb+1x1g.10gb`).
/// (The smallest-memory profile of each compute size: [`GpuModel::schedulable_profiles`] is
/// sorted by memory, so `1g` is `1g.10gb`, not `1g.20gb`.)
fn spell(model: &GpuModel, short: &str) -> Result<ProfileCounts, TransitionsError> {
    let bad = |why: String| TransitionsError::Layout {
        model: model.name,
        layout: short.to_string(),
        why,
    };
    let name = |g: &str| -> Result<&'static str, TransitionsError> {
        let c: u8 = g
            .trim_end_matches('g')
            .parse()
            .map_err(|_| bad(format!("bad term {g}")))?;
        model
            .schedulable_profiles()
            .into_iter()
            .find(|p| p.compute_slices == c)
            .map(|p| p.name)
            .ok_or_else(|| bad(format!("no {g} profile")))
    };
    let mut text = Vec::new();
    for term in short.split('+') {
        let (n, g) = term.split_once('x').ok_or_else(|| bad(format!("bad term {term}")))?;
        text.push(format!("{n}x{}", name(g)?));
    }
    ProfileCounts::parse(model, &text.join("+")).map_err(|e| bad(e.to_string()))
}

/// Applies every pair of [`PAIRS`] on a fresh simulated GPU of `model` in a folder under
/// `work_dir` (removed afterwards): creates `from` at [`place`]'s placements, claims a job on
/// the busy instances, then runs [`apply_transition`] (exactly what the node agent runs) and
/// checks that the busy instances survived; mig-parted's count is
/// [`destroy_all_and_recreate`].
///
/// # Errors
/// [`TransitionsError`]: a pair that does not fit `model`, or a backend or apply failure.
pub fn transitions(model: &'static GpuModel, work_dir: &Path) -> Result<Vec<TransitionRow>, TransitionsError> {
    let dir = work_dir.join(format!("dynmig-transitions-{}", std::process::id()));
    let result = run_pairs(model, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn run_pairs(model: &'static GpuModel, dir: &Path) -> Result<Vec<TransitionRow>, TransitionsError> {
    let mut rows = Vec::new();
    for (n, (from_s, busy_s, to_s)) in PAIRS.iter().enumerate() {
        let from = spell(model, from_s)?;
        let to = spell(model, to_s)?;
        let backend_err = |source| TransitionsError::Backend {
            from: from.to_string(),
            to: to.to_string(),
            source,
        };
        let node = dir.join(format!("pair{n}"));
        let mut b =
            SimulatedBackend::open(&node.join("gpus.json"), &node.join("dev"), model, 1).map_err(backend_err)?;
        let placed = place(model, &from).ok_or_else(|| TransitionsError::Layout {
            model: model.name,
            layout: from_s.to_string(),
            why: "no placement".into(),
        })?;
        let mut busy_left: Vec<u8> = busy_s
            .iter()
            .map(|g| g.trim_end_matches('g').parse().unwrap_or(0))
            .collect();
        for p in &placed {
            let inst = b.create_instance(0, *p).map_err(backend_err)?;
            if let Some(k) = busy_left.iter().position(|&c| c == p.profile.compute_slices) {
                busy_left.remove(k);
                b.claim(0, inst.gi_id, 1000 + n as u32).map_err(backend_err)?;
            }
        }
        let target = NodeLayout { gpus: vec![to.clone()] };
        // This measurement made the instances itself: they are its own to change.
        let mut owned = crate::Ownership::in_memory_owning(&b.gpus().map_err(backend_err)?);
        let ops = apply_transition(&mut b, model, &target, &mut owned).map_err(|e| TransitionsError::Apply {
            from: from.to_string(),
            to: to.to_string(),
            why: e.to_string(),
        })?;
        let after = b.gpu(0).map_err(backend_err)?;
        if after.instances.iter().filter(|i| i.busy).count() != busy_s.len() {
            return Err(TransitionsError::Apply {
                from: from.to_string(),
                to: to.to_string(),
                why: "a busy instance was lost".into(),
            });
        }
        rows.push(TransitionRow {
            from: from.to_string(),
            busy: busy_s.to_vec(),
            to: to.to_string(),
            dynmig_ops: ops,
            mig_parted_ops: destroy_all_and_recreate(&placed, &to),
            mig_parted_kills_job: !busy_s.is_empty() && from != to,
        });
    }
    Ok(rows)
}

/// [`transitions`] as a Markdown table with totals.
///
/// # Errors
/// As [`transitions`].
pub fn transitions_table(model: &'static GpuModel, work_dir: &Path) -> Result<String, TransitionsError> {
    let rows = transitions(model, work_dir)?;
    let mut out = format!(
        "Instance operations (GPU-instance creates + destroys) on one simulated {}\n\n| from | busy | to | dynmig | mig-parted |\n|---|---|---|---|---|\n",
        model.name
    );
    let (mut d, mut m) = (0, 0);
    for r in &rows {
        let busy = if r.busy.is_empty() {
            "-".to_string()
        } else {
            r.busy.join(",")
        };
        let kills = if r.mig_parted_kills_job { " (kills the job)" } else { "" };
        let _ = writeln!(
            out,
            "| {} | {busy} | {} | {} | {}{kills} |",
            r.from, r.to, r.dynmig_ops, r.mig_parted_ops
        );
        d += r.dynmig_ops;
        m += r.mig_parted_ops;
    }
    let _ = writeln!(out, "| **total** | | | **{d}** | **{m}** |");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dynmig_core::geometry::{A100_80GB, A30_24GB, H100_80GB};

    #[test]
    fn dynmig_never_needs_more_operations_than_mig_parted() {
        let dir = tempfile::tempdir().unwrap();
        for m in [&A100_80GB, &H100_80GB] {
            let rows = transitions(m, dir.path()).unwrap();
            assert_eq!(rows.len(), PAIRS.len());
            for r in &rows {
                assert!(r.dynmig_ops <= r.mig_parted_ops, "{r:?}");
            }
            // 1x7g -> 7x1g: both must destroy the 7g and create seven 1g.
            assert_eq!((rows[0].dynmig_ops, rows[0].mig_parted_ops), (8, 8));
            // 3x2g+1x1g -> 2x2g+3x1g: one 2g becomes two 1g (3 operations), not 4 + 5.
            assert_eq!((rows[5].dynmig_ops, rows[5].mig_parted_ops), (3, 9));
        }
        let table = transitions_table(&A100_80GB, dir.path()).unwrap();
        assert!(
            table.contains("| 3x2g.20gb+1x1g.10gb | - | 2x2g.20gb+3x1g.10gb | 3 | 9 |"),
            "{table}"
        );
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "work folder removed");
    }

    #[test]
    fn a_model_without_the_layouts_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let e = transitions(&A30_24GB, dir.path()).unwrap_err();
        assert!(matches!(e, TransitionsError::Layout { model: "A30-24GB", .. }), "{e}");
    }
}
