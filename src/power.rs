//! Power telemetry: a power model for simulated GPUs, and the attribution of a GPU's energy
//! to the Slurm jobs on its MIG instances.
//!
//! NVML measures power per physical GPU only (notes/mig.md, "Power"; IBM, arXiv 2501.17752),
//! so a job's share on a shared GPU must be modelled. dynmig's attribution, per sample of
//! `P` watts held for `dt` seconds on one GPU ([`attribute`]):
//!
//! 1. **Idle part**: `min(P, idle)` where `idle` is the model's idle power ([`idle_watts`]),
//!    split evenly over the GPU's instances: each instance is charged `idle / n * dt`,
//!    whether it runs a job or not (it holds its slices either way). The shares of
//!    instances without a job are charged to nobody.
//! 2. **Active part**: `P - idle` (if positive) split over the instances that run a job, in
//!    proportion to their compute slices.
//!
//! A GPU with MIG off counts as one instance with all compute slices. The agent samples every
//! poll ([`Ledger::sample`]); the prolog records which instances a job got
//! ([`Ledger::job_started`]) and the epilog takes the job's total ([`Ledger::finish_job`])
//! and writes it into the `job_end` event (`energy_j=...`). The ledger is a JSON file under
//! the node's state dir, changed under an exclusive `flock`.

use crate::backend::{BackendError, GpuBackend, GpuState};
use dynmig_core::geometry::GpuModel;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};

/// Idle power of an A100-SXM4-40GB with MIG on and no work, watts. Measured by
/// rakin000/Power-Aware-MIG-Scheduler (notes/mig.md).
pub const A100_IDLE_W: f64 = 46.0;
/// Fixed part of one busy instance's power above idle, watts; with [`BUSY_W_PER_SLICE`] a
/// least-squares line through the same A100 measurements (one gpu_burn instance: 1g about
/// 110 W, 2g about 141 W, 3g about 170 W board power; minus 46 W idle = 64, 95, 124 W).
pub const BUSY_W_BASE: f64 = 34.0;
/// Power of one busy instance per compute slice, watts (see [`BUSY_W_BASE`]).
pub const BUSY_W_PER_SLICE: f64 = 30.0;

/// Board power limit (TDP) of `model`, watts, from notes/mig.md: A100 SXM4 400 W, H100
/// SXM5 700 W, H100 NVL 400 W, H200 600 W (NVL; the SXM board is higher). The A30's 165 W,
/// GH200's 900 W module and B200's 1000 W are from NVIDIA's product pages (unverified here).
pub fn tdp_watts(model: &GpuModel) -> f64 {
    match model.name {
        "A30-24GB" => 165.0,
        "A100-40GB" | "A100-80GB" => 400.0,
        "H100-80GB" => 700.0,
        "H100-NVL-94GB" => 400.0,
        "H200-141GB" => 600.0,
        "GH200-96GB" | "GH200-144GB" => 900.0,
        "B200-180GB" => 1000.0,
        _ => 400.0,
    }
}

/// Idle power of `model`, watts: the A100 measurement ([`A100_IDLE_W`]) scaled by the board
/// power limit (46 W of 400 W, 11.5%). Only the A100 figure is measured.
pub fn idle_watts(model: &GpuModel) -> f64 {
    A100_IDLE_W * tdp_watts(model) / 400.0
}

/// Modelled board power of a GPU of `model` whose busy instances have the given compute
/// slices: `idle + sum(BUSY_W_BASE + BUSY_W_PER_SLICE * slices)`, scaled like [`idle_watts`]
/// and capped at [`tdp_watts`]. For an A100: idle 46 W, one busy 3g 170 W, seven busy 1g
/// 494 W capped to 400 W.
pub fn modelled_watts(model: &GpuModel, busy_compute_slices: &[u8]) -> f64 {
    let scale = tdp_watts(model) / 400.0;
    let busy: f64 = busy_compute_slices
        .iter()
        .map(|&c| BUSY_W_BASE + BUSY_W_PER_SLICE * f64::from(c))
        .sum();
    (idle_watts(model) + busy * scale).min(tdp_watts(model))
}

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
    let idle = watts.min(idle_watts(model));
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

/// `gi_id` that stands for a whole GPU with MIG off.
pub const WHOLE_GPU: u32 = u32::MAX;

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

    /// Runs `f` on the ledger under an exclusive lock and saves it.
    fn transact<T>(&self, f: impl FnOnce(&mut LedgerState) -> T) -> Result<T, BackendError> {
        if let Some(dir) = self.path.parent() {
            fs::create_dir_all(dir).map_err(|e| BackendError::io("create", dir, e))?;
        }
        let lock_path = self.path.with_extension("json.lock");
        let lock = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(|e| BackendError::io("open", &lock_path, e))?;
        fs4::FileExt::lock(&lock).map_err(|e| BackendError::io("lock", &lock_path, e))?;
        let mut st: LedgerState = match fs::read_to_string(&self.path) {
            Ok(t) => serde_json::from_str(&t).unwrap_or_default(),
            Err(_) => LedgerState::default(),
        };
        let out = f(&mut st);
        let text = serde_json::to_string(&st).expect("ledger serialises");
        crate::backend::write_atomically(&self.path, text.as_bytes())
            .map_err(|e| BackendError::io("write", &self.path, e))?;
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

    /// Removes `job` and returns its joules, `None` if it was never recorded; the epilog's call.
    ///
    /// # Errors
    /// The ledger cannot be written.
    pub fn finish_job(&self, job: u32) -> Result<Option<f64>, BackendError> {
        self.transact(|st| st.jobs.remove(&job).map(|e| e.joules))
    }

    /// Joules charged to `job` so far.
    ///
    /// # Errors
    /// The ledger cannot be read.
    pub fn joules(&self, job: u32) -> Result<Option<f64>, BackendError> {
        self.transact(|st| st.jobs.get(&job).map(|e| e.joules))
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

/// Samples every GPU of `backend` once and charges the ledger in `state_dir`; the agent's
/// call each poll. GPUs whose backend cannot tell the power are skipped. Returns how many
/// GPUs were sampled.
///
/// # Errors
/// The GPUs or their power cannot be read, or the ledger cannot be written.
pub fn sample_node(backend: &dyn GpuBackend, state_dir: &Path, max_dt_s: f64) -> Result<usize, BackendError> {
    let ledger = Ledger::in_dir(state_dir);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let mut n = 0;
    for g in backend.gpus()? {
        if let Some(w) = backend.power_watts(g.index)? {
            ledger.sample(&g, w, now, max_dt_s)?;
            n += 1;
        }
    }
    Ok(n)
}

/// Records in the ledger of `state_dir` that `job` holds instance `gi_id` of `gpu` (the
/// prolog's call). A failure is printed, not returned: energy accounting never fails a job.
pub fn record_job(state_dir: &Path, job: u32, gpu: u32, gi_id: u32) {
    if let Err(e) = Ledger::in_dir(state_dir).job_started(job, &[(gpu, gi_id)]) {
        eprintln!("dynmig: energy ledger: job {job}: {e}");
    }
}

/// Takes `job` out of the ledger of `state_dir` (the epilog's call) and returns the `job_end`
/// event detail `energy_j=<joules>`, or `None` if the job was never recorded.
pub fn finish_job(state_dir: &Path, job: u32) -> Option<String> {
    match Ledger::in_dir(state_dir).finish_job(job) {
        Ok(j) => j.map(|j| format!("energy_j={j:.1}")),
        Err(e) => {
            eprintln!("dynmig: energy ledger: job {job}: {e}");
            None
        }
    }
}

/// The Prolog on a node with the NVML backend: checks that every device file of each GPU the
/// job got exists and names a MIG instance NVML lists, then records the job's instances in
/// the energy ledger and logs `job_start`. NVML sees the job's processes itself, so nothing
/// is claimed. `gres_text` is the node's gres.conf, `indices` the job's GPU indices.
///
/// # Errors
/// A missing device file or an instance NVML does not list (the Prolog then fails and Slurm
/// drains the node and requeues the job), or NVML cannot be read.
pub fn prolog_nvml(
    ctx: &crate::context::Ctx,
    node: &str,
    job: u32,
    gres_text: &str,
    indices: &[usize],
) -> anyhow::Result<()> {
    let lines = crate::gres_conf::line_files(gres_text);
    let gpus = ctx.backend(node)?.gpus()?;
    let mut claimed = Vec::new();
    for &i in indices {
        let files = lines
            .get(i)
            .ok_or_else(|| anyhow::anyhow!("GPU index {i} but gres.conf lists {} GPUs", lines.len()))?;
        if let Some(missing) = files.iter().find(|f| !f.exists()) {
            anyhow::bail!(
                "job {job}: device file {} (GPU index {i}) does not exist",
                missing.display()
            );
        }
        let found = gpus.iter().find_map(|g| {
            if !g.mig_enabled && files.len() == 1 && files[0] == Path::new(&format!("/dev/nvidia{}", g.index)) {
                return Some((g.index, WHOLE_GPU, g.model.full_profile().name.to_string()));
            }
            g.instances
                .iter()
                .find(|inst| &inst.device_files == files)
                .map(|inst| (g.index, inst.gi_id, inst.placed.to_string()))
        });
        let (gpu, gi, what) =
            found.ok_or_else(|| anyhow::anyhow!("job {job}: no MIG instance has the device files {files:?}"))?;
        record_job(&ctx.node_paths(node).state_dir, job, gpu, gi);
        claimed.push(format!("{what}@gpu{gpu}"));
    }
    ctx.events().log(
        &crate::events::Event::new("job_start", node)
            .job(job.into())
            .detail(&claimed.join(" ")),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use dynmig_core::geometry::{A100_40GB, H100_80GB};

    #[test]
    fn model_reproduces_the_a100_measurements() {
        let m = &A100_40GB;
        assert_eq!(modelled_watts(m, &[]), 46.0);
        assert_eq!(modelled_watts(m, &[1]), 110.0);
        assert_eq!(modelled_watts(m, &[2]), 140.0); // measured about 141 W
        assert_eq!(modelled_watts(m, &[3]), 170.0);
        assert_eq!(modelled_watts(m, &[1; 7]), 400.0, "capped at TDP");
        // An H100 scales with its 700 W limit.
        assert!((modelled_watts(&H100_80GB, &[]) - 80.5).abs() < 1e-9);
    }

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
        use crate::backend::InstanceState;
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
        let total = ledger.finish_job(7).unwrap().unwrap();
        assert!((total - 1470.0 - 8820.0).abs() < 1e-6, "{total}");
        assert_eq!(ledger.finish_job(7).unwrap(), None);
    }
}
