//! Per-job energy: the power of a GPU attributed to the Slurm jobs on its MIG instances, and
//! the node's ledger of it.
//!
//! NVML measures power per physical GPU only (IBM Research, "Characterizing GPU energy use
//! with MIG", arXiv 2501.17752), so a job's share on a shared GPU must be modelled.
//! dynmig's attribution, per sample of `P` watts held for `dt` seconds on one GPU
//! ([`attribute`]):
//!
//! 1. **Idle part**: `min(P, idle)` where `idle` is the idle power of the core's power model
//!    ([`PowerModel::idle_w`], from [`dynmig_core::geometry::GpuModel::power`]), split
//!    evenly over the GPU's instances: each instance is charged `idle / n * dt`, whether it
//!    runs a job or not (it holds its slices either way). The shares of instances without a
//!    job are charged to nobody.
//! 2. **Active part**: `P - idle` (if positive) split over the instances that run a job, in
//!    proportion to their compute slices.
//!
//! A GPU with MIG off counts as one instance with all compute slices ([`WHOLE_GPU`]). The
//! agent samples every poll ([`sample_node`]); the Prolog records which instances a job got
//! ([`Ledger::job_started`]) and the Epilog takes the job's total ([`Ledger::finish_job`]).
//! The ledger is `energy.json` in the node's state dir, mode 0600, changed under an
//! exclusive `flock` on `energy.json.lock` (also 0600).

use crate::{BackendError, GpuBackend, GpuState, WHOLE_GPU};
use dynmig_core::energy::PowerModel;
use dynmig_core::geometry::GpuModel;
use dynmig_host::fs::{read_text_bounded, write_atomically};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The largest ledger file read, bytes.
const MAX_LEDGER_BYTES: u64 = 16 << 20;

/// One instance of a GPU at a sample: its compute slices and the job on it, if any.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InstanceLoad {
    /// Compute slices of the instance.
    pub compute_slices: u8,
    /// The Slurm job running on it.
    pub job: Option<u32>,
}

/// The joules of one sample (`watts` for `dt_s` seconds on a GPU of `model` holding
/// `instances`) charged to each job, by the rule of the module documentation. Jobs on
/// several instances get the sum. The result adds up to at most `watts * dt_s`.
pub fn attribute(model: &GpuModel, watts: f64, dt_s: f64, instances: &[InstanceLoad]) -> BTreeMap<u32, f64> {
    let mut out = BTreeMap::new();
    if instances.is_empty() || watts <= 0.0 || dt_s <= 0.0 {
        return out;
    }
    let idle = watts.min(PowerModel::for_model(model).idle_w);
    let active = watts - idle;
    let idle_share = idle / instances.len() as f64 * dt_s;
    let busy_slices: f64 = instances
        .iter()
        .filter(|i| i.job.is_some())
        .map(|i| f64::from(i.compute_slices))
        .sum();
    for i in instances {
        if let Some(job) = i.job {
            let act = if busy_slices > 0.0 {
                active * f64::from(i.compute_slices) / busy_slices * dt_s
            } else {
                0.0
            };
            *out.entry(job).or_insert(0.0) += idle_share + act;
        }
    }
    out
}

/// A job's record in the ledger.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobEnergy {
    /// `(gpu, gi_id)` of each instance the job got ([`WHOLE_GPU`] for a GPU with MIG off).
    pub instances: Vec<(u32, u32)>,
    /// Energy charged so far, joules.
    pub joules: f64,
}

/// The per-node energy ledger file: which job holds which instance, and its joules so far.
#[derive(Debug, Clone)]
pub struct Ledger {
    path: PathBuf,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct LedgerState {
    jobs: BTreeMap<u32, JobEnergy>,
    /// When the agent last sampled, seconds since the epoch, per GPU.
    last_sample: BTreeMap<u32, f64>,
}

impl Ledger {
    /// The ledger of a node whose state dir is `state_dir` (`<state_dir>/energy.json`).
    pub fn in_dir(state_dir: &Path) -> Self {
        Self {
            path: state_dir.join("energy.json"),
        }
    }

    /// The ledger file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` on the ledger under an exclusive lock and saves it (mode 0600).
    ///
    /// A ledger that cannot be parsed is an error naming the file: its joules are not
    /// silently dropped; an administrator removes it to start over.
    fn transact<T>(&self, f: impl FnOnce(&mut LedgerState) -> T) -> Result<T, BackendError> {
        if let Some(dir) = self.path.parent() {
            fs::create_dir_all(dir).map_err(|e| BackendError::io("create", dir, e))?;
        }
        let lock_path = self.path.with_extension("json.lock");
        let lock = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&lock_path)
            .map_err(|e| BackendError::io("open", &lock_path, e))?;
        fs4::FileExt::lock(&lock).map_err(|e| BackendError::io("lock", &lock_path, e))?;
        let mut st: LedgerState = match read_text_bounded(&self.path, MAX_LEDGER_BYTES) {
            Ok(Some(t)) => serde_json::from_str(&t).map_err(|e| {
                BackendError::io(
                    "parse the energy ledger (remove it to start over)",
                    &self.path,
                    io::Error::new(io::ErrorKind::InvalidData, e),
                )
            })?,
            Ok(None) => LedgerState::default(),
            Err(e) => return Err(BackendError::io("read", &self.path, e)),
        };
        let out = f(&mut st);
        let text = serde_json::to_string(&st)
            .map_err(|e| BackendError::io("encode", &self.path, io::Error::new(io::ErrorKind::InvalidData, e)))?;
        write_atomically(&self.path, text.as_bytes(), 0o600).map_err(|e| BackendError::io("write", &self.path, e))?;
        Ok(out)
    }

    /// Records that `job` got `instances` (`(gpu, gi_id)`); the prolog's call.
    ///
    /// # Errors
    /// The ledger cannot be written.
    pub fn job_started(&self, job: u32, instances: &[(u32, u32)]) -> Result<(), BackendError> {
        self.transact(|st| {
            let e = st.jobs.entry(job).or_default();
            for i in instances {
                if !e.instances.contains(i) {
                    e.instances.push(*i);
                }
            }
        })
    }

    /// Removes `job` and returns its account (the instances its Prolog claimed and its
    /// joules), `None` if it was never recorded; the epilog's call.
    ///
    /// # Errors
    /// The ledger cannot be written.
    pub fn finish_job(&self, job: u32) -> Result<Option<JobEnergy>, BackendError> {
        self.transact(|st| st.jobs.remove(&job))
    }

    /// Joules charged to `job` so far.
    ///
    /// # Errors
    /// The ledger cannot be read.
    pub fn joules(&self, job: u32) -> Result<Option<f64>, BackendError> {
        self.transact(|st| st.jobs.get(&job).map(|e| e.joules))
    }

    /// Every job in the ledger (started on this node, not yet finished) with its joules so
    /// far.
    ///
    /// # Errors
    /// The ledger cannot be read.
    pub fn jobs(&self) -> Result<BTreeMap<u32, f64>, BackendError> {
        self.transact(|st| st.jobs.iter().map(|(j, e)| (*j, e.joules)).collect())
    }

    /// Charges one sample of `gpu` at time `now_s` (seconds since the epoch): the power is
    /// taken as held since the GPU's previous sample (at most `max_dt_s` back, so that a
    /// stopped agent does not charge the whole gap); the first sample only sets the clock.
    /// Returns the joules charged per job.
    ///
    /// # Errors
    /// The ledger cannot be written.
    pub fn sample(
        &self,
        gpu: &GpuState,
        watts: f64,
        now_s: f64,
        max_dt_s: f64,
    ) -> Result<BTreeMap<u32, f64>, BackendError> {
        self.transact(|st| {
            let last = st.last_sample.insert(gpu.index, now_s);
            let Some(last) = last else {
                return BTreeMap::new();
            };
            let dt = (now_s - last).clamp(0.0, max_dt_s);
            let owner = |gi: u32| {
                st.jobs
                    .iter()
                    .find(|(_, e)| e.instances.contains(&(gpu.index, gi)))
                    .map(|(j, _)| *j)
            };
            let loads: Vec<InstanceLoad> = if gpu.mig_enabled {
                gpu.instances
                    .iter()
                    .map(|i| InstanceLoad {
                        compute_slices: i.placed.profile.compute_slices,
                        job: owner(i.gi_id),
                    })
                    .collect()
            } else {
                vec![InstanceLoad {
                    compute_slices: gpu.model.compute_slices,
                    job: owner(WHOLE_GPU),
                }]
            };
            let charged = attribute(gpu.model, watts, dt, &loads);
            for (job, j) in &charged {
                if let Some(e) = st.jobs.get_mut(job) {
                    e.joules += j;
                }
            }
            charged
        })
    }
}

/// What one [`sample_node`] measured and charged.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeSample {
    /// The GPUs as the backend reported them.
    pub gpus: Vec<GpuState>,
    /// Power per GPU index, watts, for the GPUs whose backend tells it.
    pub watts: BTreeMap<u32, f64>,
    /// Joules charged to each job by this sample.
    pub charged: BTreeMap<u32, f64>,
}

/// Samples every GPU of `backend` once and charges the ledger in `state_dir`; the agent's
/// call each poll. GPUs whose backend cannot tell the power are skipped.
///
/// # Errors
/// The GPUs or their power cannot be read, or the ledger cannot be written.
pub fn sample_node(backend: &dyn GpuBackend, state_dir: &Path, max_dt_s: f64) -> Result<NodeSample, BackendError> {
    let ledger = Ledger::in_dir(state_dir);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let mut out = NodeSample {
        gpus: backend.gpus()?,
        ..NodeSample::default()
    };
    for g in &out.gpus {
        if let Some(w) = backend.power_watts(g.index)? {
            out.watts.insert(g.index, w);
            for (job, j) in ledger.sample(g, w, now, max_dt_s)? {
                *out.charged.entry(job).or_insert(0.0) += j;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dynmig_core::geometry::A100_40GB;

    #[test]
    fn attribution_splits_idle_evenly_and_the_rest_by_slices() {
        let m = &A100_40GB;
        let loads = [
            InstanceLoad {
                compute_slices: 3,
                job: Some(1),
            },
            InstanceLoad {
                compute_slices: 1,
                job: Some(2),
            },
            InstanceLoad {
                compute_slices: 3,
                job: None,
            },
        ];
        // 146 W for 10 s: idle 46 W -> 460 J, 153.3 J per instance; active 100 W -> 1000 J,
        // 750 J to the 3-slice job and 250 J to the 1-slice job.
        let j = attribute(m, 146.0, 10.0, &loads);
        assert!((j[&1] - (460.0 / 3.0 + 750.0)).abs() < 1e-9, "{j:?}");
        assert!((j[&2] - (460.0 / 3.0 + 250.0)).abs() < 1e-9, "{j:?}");
        assert!(j.values().sum::<f64>() <= 1460.0);
        // Below idle nothing is active; an idle GPU charges nobody.
        let j = attribute(m, 30.0, 1.0, &loads);
        assert!((j[&1] - 10.0).abs() < 1e-9);
        assert!(attribute(
            m,
            100.0,
            1.0,
            &[InstanceLoad {
                compute_slices: 7,
                job: None
            }]
        )
        .is_empty());
    }

    #[test]
    fn ledger_charges_jobs_between_samples() {
        use crate::InstanceState;
        use dynmig_core::geometry::Placed;
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::in_dir(dir.path());
        let m = &A100_40GB;
        let inst = |gi, start, name: &str| InstanceState {
            gi_id: gi,
            ci_id: 0,
            placed: Placed {
                profile: m.profile(name).unwrap(),
                start,
            },
            uuid: String::new(),
            busy: false,
            device_files: vec![],
        };
        let gpu = GpuState {
            index: 0,
            model: m,
            mig_enabled: true,
            instances: vec![inst(1, 0, "4g.20gb"), inst(2, 4, "3g.20gb")],
        };
        ledger.job_started(7, &[(0, 2)]).unwrap();
        assert!(
            ledger.sample(&gpu, 170.0, 1000.0, 60.0).unwrap().is_empty(),
            "first sample sets the clock"
        );
        let c = ledger.sample(&gpu, 170.0, 1010.0, 60.0).unwrap();
        // 10 s: idle 46 W over 2 instances -> 230 J; active 124 W all to job 7 -> 1240 J.
        assert!((c[&7] - 1470.0).abs() < 1e-9, "{c:?}");
        // A long gap is charged at most max_dt.
        ledger.sample(&gpu, 170.0, 5000.0, 60.0).unwrap();
        let total = ledger.finish_job(7).unwrap().unwrap().joules;
        assert!((total - 1470.0 - 8820.0).abs() < 1e-6, "{total}");
        assert_eq!(ledger.finish_job(7).unwrap(), None);
    }

    #[test]
    fn ledger_files_are_private_to_root() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::in_dir(dir.path());
        ledger.job_started(1, &[(0, WHOLE_GPU)]).unwrap();
        for p in [ledger.path().to_path_buf(), ledger.path().with_extension("json.lock")] {
            let mode = fs::metadata(&p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", p.display());
        }
    }

    #[test]
    fn a_corrupt_ledger_is_an_error_not_silently_emptied() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::in_dir(dir.path());
        fs::write(ledger.path(), "{not json").unwrap();
        let e = ledger.joules(1).unwrap_err().to_string();
        assert!(e.contains("energy ledger") && e.contains("energy.json"), "{e}");
        assert_eq!(fs::read_to_string(ledger.path()).unwrap(), "{not json", "left as found");
    }
}
