//! The simulated backend's state file: its JSON shape, the lock, and load/save.
//!
//! Files, all in the state file's folder (`sim.json` as an example name):
//! - `sim.json`: the state ([`SimState`]), replaced atomically (temp file + rename);
//! - `sim.json.lock`: an empty file every process `flock`s exclusively around a whole
//!   read-modify-write (the state file itself is replaced, so it cannot carry the lock);
//! - `sim.json.faults.json`: the shared [`FaultPlan`], optional.

use super::FaultPlan;
use crate::BackendError;
use dynmig_host::fs::{read_text_bounded, write_atomically};
use serde::{Deserialize, Serialize};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

/// The largest state or faults file read, bytes (a node of 64 GPUs with 7 instances each
/// is about 100 KiB).
const MAX_FILE_BYTES: u64 = 16 << 20;

/// Version of the state file's shape.
pub(crate) const STATE_VERSION: u32 = 1;

/// The whole simulated node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SimState {
    /// [`STATE_VERSION`].
    pub version: u32,
    /// Canonical GPU model name (`A100-80GB`).
    pub model: String,
    /// Mixed into instance UUIDs so that two simulated nodes never share one.
    pub seed: u64,
    /// Counts instance creations, for UUIDs.
    pub next_serial: u64,
    /// One record per GPU, GPU 0 first.
    pub gpus: Vec<SimGpu>,
}

/// One simulated GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SimGpu {
    /// MIG mode.
    pub mig_enabled: bool,
    /// Slurm job ids using the whole GPU while MIG is off (claimed by the prolog).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<u32>,
    /// GPU instances, in creation order.
    pub instances: Vec<SimInstance>,
}

/// One simulated GPU instance (with its single compute instance).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SimInstance {
    /// GPU-instance id.
    pub gi_id: u32,
    /// Compute-instance id.
    pub ci_id: u32,
    /// Profile name.
    pub profile: String,
    /// Start memory slice.
    pub start: u8,
    /// `MIG-<uuid>`.
    pub uuid: String,
    /// Slurm job ids using the instance (the prolog attaches, the epilog detaches).
    #[serde(default)]
    pub jobs: Vec<u32>,
}

impl SimState {
    /// A node of `gpu_count` GPUs with MIG on and no instances.
    pub fn fresh(model: &str, gpu_count: u32, seed: u64) -> Self {
        let gpu = SimGpu {
            mig_enabled: true,
            jobs: Vec::new(),
            instances: Vec::new(),
        };
        Self {
            version: STATE_VERSION,
            model: model.to_string(),
            seed,
            next_serial: 0,
            gpus: vec![gpu; gpu_count as usize],
        }
    }
}

/// The state, lock and faults files of one simulated node.
#[derive(Debug, Clone)]
pub(crate) struct Store {
    /// The state file.
    pub state: PathBuf,
    /// The lock file.
    pub lock: PathBuf,
    /// The shared faults file.
    pub faults: PathBuf,
}

impl Store {
    /// The files that go with `state`.
    pub fn new(state: &Path) -> Self {
        let name = state
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Self {
            state: state.to_path_buf(),
            lock: state.with_file_name(format!("{name}.lock")),
            faults: state.with_file_name(format!("{name}.faults.json")),
        }
    }

    /// Takes the exclusive lock; it is held until the returned file is dropped.
    fn lock(&self) -> Result<File, BackendError> {
        if let Some(dir) = self.state.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir).map_err(|e| BackendError::io("create the folder of", &self.state, e))?;
        }
        let f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&self.lock)
            .map_err(|e| BackendError::io("open", &self.lock, e))?;
        fs4::FileExt::lock(&f).map_err(|e| BackendError::io("lock", &self.lock, e))?;
        Ok(f)
    }

    /// Reads the state, `None` if there is no state file yet.
    fn read_state(&self) -> Result<Option<SimState>, BackendError> {
        let text = match read_text_bounded(&self.state, MAX_FILE_BYTES) {
            Ok(Some(t)) => t,
            Ok(None) => return Ok(None),
            Err(e) => return Err(BackendError::io("read", &self.state, e)),
        };
        let st: SimState = serde_json::from_str(&text).map_err(|e| {
            BackendError::io(
                "parse the state file",
                &self.state,
                io::Error::new(io::ErrorKind::InvalidData, e),
            )
        })?;
        if st.version != STATE_VERSION {
            let msg = format!("state file version {} (this dynmig reads {STATE_VERSION})", st.version);
            return Err(BackendError::io(
                "read",
                &self.state,
                io::Error::new(io::ErrorKind::InvalidData, msg),
            ));
        }
        Ok(Some(st))
    }

    /// Reads the shared fault plan (empty if there is no faults file).
    fn read_faults(&self) -> Result<FaultPlan, BackendError> {
        match read_text_bounded(&self.faults, MAX_FILE_BYTES) {
            Ok(Some(t)) => FaultPlan::parse(&t).map_err(|why| BackendError::InvalidArgument {
                what: format!("faults file {}: {why}", self.faults.display()),
            }),
            Ok(None) => Ok(FaultPlan::default()),
            Err(e) => Err(BackendError::io("read", &self.faults, e)),
        }
    }

    /// Reads the state under the lock without creating it.
    pub fn peek(&self) -> Result<Option<SimState>, BackendError> {
        let _lock = self.lock()?;
        self.read_state()
    }

    /// Replaces the shared fault plan under the lock.
    pub fn write_faults(&self, plan: &FaultPlan) -> Result<(), BackendError> {
        let _lock = self.lock()?;
        write_atomically(&self.faults, plan.to_json().as_bytes(), 0o644)
            .map_err(|e| BackendError::io("write", &self.faults, e))
    }

    /// Runs `f` on the state and the shared fault plan under the exclusive lock, then saves
    /// whichever of the two `f` changed. A missing state file starts as `fresh()`.
    pub fn transact<T>(
        &self,
        fresh: impl FnOnce() -> SimState,
        f: impl FnOnce(&mut SimState, &mut FaultPlan) -> T,
    ) -> Result<T, BackendError> {
        let _lock = self.lock()?;
        let loaded = self.read_state()?;
        let created = loaded.is_none();
        let mut st = loaded.unwrap_or_else(fresh);
        let before = st.clone();
        let mut plan = self.read_faults()?;
        let plan_before = plan.clone();
        let out = f(&mut st, &mut plan);
        if plan != plan_before {
            write_atomically(&self.faults, plan.to_json().as_bytes(), 0o644)
                .map_err(|e| BackendError::io("write", &self.faults, e))?;
        }
        if created || st != before {
            let text = serde_json::to_string_pretty(&st).expect("the state always serializes") + "\n";
            write_atomically(&self.state, text.as_bytes(), 0o644)
                .map_err(|e| BackendError::io("write", &self.state, e))?;
        }
        Ok(out)
    }
}
