//! The catalog follows the layout (`kind = "guarded"`, docs/policy.md "Guarded", step 1):
//! after each pass the controller writes the GRES types of the layout the nodes follow to
//! `<state_dir>/catalog.json` ([`dynmig_core::protocol::catalog`]), which job_submit/dynmig
//! reads to size new jobs, and moves the pending jobs it sized to the smallest type of that
//! catalog that holds their estimate (`scontrol update`), as the simulator's engine does
//! (`Sim::set_catalog`).
//!
//! Which pending jobs move: those whose `AdminComment` holds dynmig's
//! [`DecisionRecord`] with a source other than `--mig-profile` (a profile the user named
//! stays), one instance, and whose per-node request is still exactly that one typed GPU (a
//! request a user changed since is theirs). A job that no type of the catalog holds keeps
//! its request. Slurm before 23.02.6 cannot change a submitted job's GPU type (SchedMD bug
//! 17184, [`dynmig_core::modify::update_replaces_gpu_request`]): there no job moves, only
//! new jobs follow the catalog ([`PassSettings::retype`](crate::PassSettings::retype)).

use dynmig_core::geometry::GpuModel;
use dynmig_core::hints::smallest_fitting_where;
use dynmig_core::protocol::catalog::Catalog;
use dynmig_core::protocol::decision::{ChangeCause, DecisionRecord};
use dynmig_core::protocol::event::{Event, EventKind};
use dynmig_core::types::EstimateSource;
use dynmig_host::fs::LineLog;
use dynmig_slurm::{JobInfo, JobState, SlurmApi, SlurmError};
use std::collections::BTreeSet;
use std::path::Path;

/// Most pending jobs moved in one pass: the rest move in the next passes, so that a change
/// of catalog never holds a pass for minutes of `scontrol update`s.
pub const MAX_RETYPED_PER_PASS: usize = 200;

/// One pending job moved to another type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retyped {
    /// The job.
    pub job: u32,
    /// The type it asked for.
    pub from: String,
    /// The type it asks for now.
    pub to: &'static str,
}

/// The catalog of `types` (profile names) on `model`.
pub fn catalog_of(model: &'static GpuModel, types: &BTreeSet<&'static str>) -> Catalog {
    let mut c = Catalog::default();
    let known: BTreeSet<&'static str> = types.iter().filter_map(|t| model.profile(t)).map(|p| p.name).collect();
    if !known.is_empty() {
        c.types.insert(model.name, known);
    }
    c
}

/// Writes `catalog` to `path` (atomically, mode 0644: slurmctld reads it) unless the file
/// already holds it. Returns whether it wrote.
///
/// # Errors
/// The file cannot be written.
pub fn write_catalog(path: &Path, catalog: &Catalog) -> std::io::Result<bool> {
    let text = catalog.encode();
    let now = dynmig_host::fs::read_text_bounded(path, dynmig_core::protocol::catalog::MAX_CATALOG_BYTES)
        .ok()
        .flatten();
    if now.as_deref() == Some(text.as_str()) {
        return Ok(false);
    }
    dynmig_host::fs::write_atomically(path, text.as_bytes(), 0o644)?;
    Ok(true)
}

/// The type job `j` should ask for under `catalog` on `model`, if it should move (module
/// docs), with its decision record.
pub fn retype_target(
    j: &JobInfo,
    model: &'static GpuModel,
    catalog: &Catalog,
) -> Option<(&'static str, DecisionRecord)> {
    if j.state != JobState::Pending {
        return None;
    }
    let record = DecisionRecord::parse(&j.admin_comment).ok()?;
    if record.source == EstimateSource::MigProfileHint || record.count != 1 {
        return None;
    }
    let gpus: Vec<_> = j.tres_per_node.gpus().collect();
    let [g] = gpus.as_slice() else { return None };
    if g.count != 1 || g.gres_type != Some(record.profile.as_str()) {
        return None;
    }
    let now = model.profile(&record.profile)?;
    // The choice job_submit makes for a new job under this catalog.
    let (_, to) = smallest_fitting_where(&[model], record.mem_bytes, |m, p| catalog.allows(m, p.name))?;
    (to.name != now.name).then_some((to.name, record))
}

/// Moves the pending jobs of `jobs` that should follow `catalog` (module docs), at most
/// [`MAX_RETYPED_PER_PASS`], oldest first. A job Slurm refuses to change is logged and left.
///
/// # Errors
/// None: each refusal is logged and the job skipped; what moved is returned.
pub fn follow(
    slurm: &dyn SlurmApi,
    jobs: &[JobInfo],
    model: &'static GpuModel,
    catalog: &Catalog,
    events: &LineLog,
    now: i64,
) -> Vec<Retyped> {
    let mut todo: Vec<(&JobInfo, &'static str, DecisionRecord)> = jobs
        .iter()
        .filter_map(|j| retype_target(j, model, catalog).map(|(to, r)| (j, to, r)))
        .collect();
    todo.sort_by_key(|(j, _, _)| (j.submit_time, j.id));
    let mut out = Vec::new();
    for (j, to, record) in todo.into_iter().take(MAX_RETYPED_PER_PASS) {
        let Some(tres) = j.tres_per_node.retyped(to, 1) else {
            continue;
        };
        if let Err(e) = set_type(slurm, j, &tres, &record, to) {
            log::warn!("job {}: not moved to {to} for the catalog: {e}", j.id);
            continue;
        }
        events.append(
            &Event::at(now as f64, EventKind::JobRetyped, "")
                .job(u64::from(j.id))
                .detail(&format!("job {} {} -> {to} (catalog)", j.id, record.profile))
                .encode(),
        );
        out.push(Retyped {
            job: j.id,
            from: record.profile.clone(),
            to,
        });
    }
    out
}

fn set_type(
    slurm: &dyn SlurmApi,
    j: &JobInfo,
    tres: &str,
    record: &DecisionRecord,
    to: &str,
) -> Result<(), SlurmError> {
    slurm.set_job_tres_per_node(j.id, tres)?;
    slurm.set_job_admin_comment(j.id, &record.changed(to, 1, j.restarts, ChangeCause::Catalog).encode())
}
