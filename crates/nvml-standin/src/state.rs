//! The node's state, one JSON file shared by every process that loads the stand-in, as a
//! driver's state is: `standin.json` under an exclusive lock on `standin.lock`.

use crate::boards::{self, Board};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// The value of `format` in `standin.json`.
pub const FORMAT: &str = "dynmig-nvml-standin/v1";
/// The state file's name in the stand-in's folder.
pub const STATE_FILE: &str = "standin.json";
/// The lock file's name in the stand-in's folder.
pub const LOCK_FILE: &str = "standin.lock";
/// The largest state file read, bytes.
pub const MAX_STATE_BYTES: u64 = 4 << 20;

/// What the node is: which boards, how many, and how the driver behaves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSpec {
    /// The board of every GPU: a dynmig model name (`"A100-80GB"`) or a capture
    /// (`"capture:h100-80gb"`, `"capture:h200"`).
    pub board: String,
    /// How many GPUs.
    pub gpus: u32,
    /// If set, the driver's device files live under it: `<root>/dev/nvidia<minor>`,
    /// `<root>/proc/driver/nvidia-caps/mig-minors`, `<root>/dev/nvidia-caps/nvidia-cap<minor>`.
    #[serde(default)]
    pub device_root: Option<PathBuf>,
    /// Mutating calls fail with `NVML_ERROR_NO_PERMISSION` unless the caller is root.
    #[serde(default)]
    pub require_root: bool,
    /// MIG mode changes stay pending until [`crate::StandIn::reset_gpu`] (Ampere-like);
    /// otherwise they take effect at once (Hopper-like).
    #[serde(default)]
    pub mode_change_needs_reset: bool,
    /// MIG mode of every GPU at install.
    #[serde(default)]
    pub mig_enabled: bool,
}

impl NodeSpec {
    /// `gpus` GPUs of board `board`, MIG off, everything else default.
    pub fn new(board: &str, gpus: u32) -> Self {
        Self {
            board: board.to_string(),
            gpus,
            device_root: None,
            require_root: false,
            mode_change_needs_reset: false,
            mig_enabled: false,
        }
    }
}

/// A compute process on a GPU, as `nvmlDeviceGetComputeRunningProcesses_v3` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessEntry {
    /// The process id; the entry is dropped once the process is gone.
    pub pid: u32,
    /// GPU-instance id.
    pub gi_id: u32,
    /// Compute-instance id.
    pub ci_id: u32,
    /// GPU memory used, MiB.
    pub used_mib: u64,
}

/// A compute instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComputeInstance {
    /// Compute-instance id within its GPU instance (lowest free from 0).
    pub id: u32,
    /// Compute-instance profile ID (= its index here).
    pub profile_id: u32,
    /// Compute slices.
    pub slice_count: u32,
    /// First compute slice within the GPU instance.
    pub start: u32,
    /// Unique creation number: handles carry it, so a handle to a destroyed instance never
    /// names a new one with the same id.
    pub serial: u64,
    /// `MIG-<uuid>` of the MIG device this compute instance makes; new per creation.
    pub uuid: String,
}

/// A GPU instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuInstance {
    /// GPU-instance id (lowest free from 1).
    pub id: u32,
    /// Profile ID.
    pub profile_id: u32,
    /// First memory slice.
    pub start: u32,
    /// Memory slices.
    pub size: u32,
    /// Compute slices.
    pub slice_count: u32,
    /// Unique creation number (see [`ComputeInstance::serial`]).
    pub serial: u64,
    /// Its compute instances.
    pub compute_instances: Vec<ComputeInstance>,
}

/// One GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gpu {
    /// `GPU-<uuid>`.
    pub uuid: String,
    /// Device minor (`/dev/nvidia<minor>`).
    pub minor: u32,
    /// PCI bus id, `00000000:BB:00.0`.
    pub bus_id: String,
    /// PCI bus number.
    pub bus: u32,
    /// The board.
    pub board: Board,
    /// Every call naming a lost GPU fails with `NVML_ERROR_GPU_IS_LOST`.
    #[serde(default)]
    pub lost: bool,
    /// Current MIG mode.
    pub mig_current: bool,
    /// Pending MIG mode (equal to current unless a change awaits a reset).
    pub mig_pending: bool,
    /// GPU instances.
    pub gpu_instances: Vec<GpuInstance>,
    /// Compute processes.
    pub processes: Vec<ProcessEntry>,
}

impl Gpu {
    /// The GPU instance with id `id`.
    pub fn gi(&self, id: u32) -> Option<&GpuInstance> {
        self.gpu_instances.iter().find(|g| g.id == id)
    }
}

/// One planned failure: the `after`-th call of `function` from now fails with `error`
/// (after sleeping `hang_ms`), once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fault {
    /// The exported symbol, e.g. `"nvmlGpuInstanceCreateComputeInstance"`.
    pub function: String,
    /// Which call from now: 1 = the next one. Counted down across processes.
    pub after: u32,
    /// nvml.h's name less `NVML_ERROR_` (`"INSUFFICIENT_RESOURCES"`); `None` with `hang_ms`
    /// only delays the call.
    #[serde(default)]
    pub error: Option<String>,
    /// Milliseconds the call sleeps first (without holding the lock).
    #[serde(default)]
    pub hang_ms: Option<u64>,
}

/// Everything in `standin.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// Always [`FORMAT`].
    pub format: String,
    /// The node spec it was installed with.
    pub spec: NodeSpec,
    /// `nvmlSystemGetDriverVersion`.
    pub driver_version: String,
    /// `nvmlSystemGetNVMLVersion`.
    pub nvml_version: String,
    /// The GPUs, by NVML index.
    pub gpus: Vec<Gpu>,
    /// Planned failures.
    #[serde(default)]
    pub faults: Vec<Fault>,
    /// The n-th mutating call from now is carried out and saved, then the calling process
    /// kills itself with SIGKILL; cleared when it fires.
    #[serde(default)]
    pub crash_after_mutations: Option<u32>,
    /// Calls per exported function, all processes.
    #[serde(default)]
    pub calls: BTreeMap<String, u64>,
    /// `nvmlInit*` calls per process id.
    #[serde(default)]
    pub inits: BTreeMap<u32, u64>,
    /// The next instance serial.
    #[serde(default)]
    pub next_serial: u64,
}

/// A fresh `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` from /dev/urandom (time and pid if that
/// cannot be read).
pub fn new_uuid() -> String {
    let mut b = [0u8; 16];
    let ok = File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_ok();
    if !ok {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
            ^ (u128::from(std::process::id()) << 64);
        b = t.to_le_bytes();
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: Vec<String> = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        h[0..4].concat(),
        h[4..6].concat(),
        h[6..8].concat(),
        h[8..10].concat(),
        h[10..16].concat()
    )
}

impl State {
    /// The state of a freshly booted node of `spec`.
    ///
    /// # Errors
    /// An unknown board name.
    pub fn new(spec: &NodeSpec) -> Result<Self, String> {
        let board = boards::board(&spec.board)?;
        let mig = spec.mig_enabled && board.has_mig();
        let gpus = (0..spec.gpus)
            .map(|i| Gpu {
                uuid: format!("GPU-{}", new_uuid()),
                minor: i,
                bus_id: format!("00000000:{:02X}:00.0", 0x18 + i * 0x10),
                bus: 0x18 + i * 0x10,
                board: board.clone(),
                lost: false,
                mig_current: mig,
                mig_pending: mig,
                gpu_instances: Vec::new(),
                processes: Vec::new(),
            })
            .collect();
        Ok(Self {
            format: FORMAT.to_string(),
            spec: spec.clone(),
            driver_version: "580.159.04".to_string(),
            nvml_version: "13.580.159.04".to_string(),
            gpus,
            faults: Vec::new(),
            crash_after_mutations: None,
            calls: BTreeMap::new(),
            inits: BTreeMap::new(),
            next_serial: 1,
        })
    }

    /// Drops the processes whose pid no longer exists (`kill(pid, 0)` fails with ESRCH), as
    /// the driver forgets dead processes. Returns whether any went.
    pub fn prune_dead_processes(&mut self) -> bool {
        let mut changed = false;
        for g in &mut self.gpus {
            let before = g.processes.len();
            g.processes.retain(|p| pid_alive(p.pid));
            changed |= g.processes.len() != before;
        }
        changed
    }

    /// A new instance serial.
    pub fn serial(&mut self) -> u64 {
        self.next_serial = self.next_serial.max(1);
        let s = self.next_serial;
        self.next_serial += 1;
        s
    }
}

/// Whether process `pid` exists.
pub fn pid_alive(pid: u32) -> bool {
    let Ok(p) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if p <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks existence and permission.
    let r = unsafe { libc::kill(p, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// The state file of one stand-in folder, with its lock.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
}

/// A held lock on a [`Store`] (released when dropped).
pub struct Locked {
    _file: File,
}

impl Store {
    /// The store in `dir`.
    pub fn new(dir: &Path) -> Self {
        Self { dir: dir.to_path_buf() }
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `dir/standin.json`.
    pub fn state_path(&self) -> PathBuf {
        self.dir.join(STATE_FILE)
    }

    /// Whether the state file exists.
    pub fn exists(&self) -> bool {
        self.state_path().is_file()
    }

    /// Whether this process may change the state: it can open the lock file for writing
    /// (root and the folder's owner can; an ordinary user on a root-installed node cannot).
    pub fn writable(&self) -> bool {
        OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.dir.join(LOCK_FILE))
            .is_ok()
    }

    /// Reads the state without the lock (an unprivileged reader: the writers replace the
    /// file atomically, so a read sees one whole state).
    ///
    /// # Errors
    /// As [`Self::load`].
    pub fn load_unlocked(&self) -> io::Result<State> {
        let f = OpenOptions::new().read(true).open(self.dir.join(LOCK_FILE))?;
        self.load(&Locked { _file: f })
    }

    /// Takes the exclusive lock.
    ///
    /// # Errors
    /// The lock file cannot be opened or locked.
    pub fn lock(&self) -> io::Result<Locked> {
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(self.dir.join(LOCK_FILE))?;
        fs4::FileExt::lock(&f)?;
        Ok(Locked { _file: f })
    }

    /// Reads the state (call with the lock held for a consistent read-modify-write).
    ///
    /// # Errors
    /// Missing, over [`MAX_STATE_BYTES`], not JSON, or another format.
    pub fn load(&self, _lock: &Locked) -> io::Result<State> {
        let f = File::open(self.state_path())?;
        let mut text = String::new();
        f.take(MAX_STATE_BYTES + 1).read_to_string(&mut text)?;
        if text.len() as u64 > MAX_STATE_BYTES {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "standin.json is over 4 MiB"));
        }
        let s: State = serde_json::from_str(&text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        if s.format != FORMAT {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("standin.json format '{}', expected '{FORMAT}'", s.format),
            ));
        }
        Ok(s)
    }

    /// Writes the state atomically (temp file, then rename). Not fsynced: other processes
    /// see it at once and a killed process loses nothing; only a power cut could (this is a
    /// test stand-in, and every call writes).
    ///
    /// # Errors
    /// The write or rename fails.
    pub fn save(&self, _lock: &Locked, s: &State) -> io::Result<()> {
        let tmp = self.dir.join(format!(".{STATE_FILE}.{}.tmp", std::process::id()));
        let text = serde_json::to_vec_pretty(s).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        {
            let mut f = File::create(&tmp)?;
            f.write_all(&text)?;
        }
        fs::rename(&tmp, self.state_path())
    }

    /// Runs `f` on the state under the lock and saves what it leaves.
    ///
    /// # Errors
    /// As [`Self::load`] and [`Self::save`].
    pub fn update<R>(&self, f: impl FnOnce(&mut State) -> R) -> io::Result<R> {
        let lock = self.lock()?;
        let mut s = self.load(&lock)?;
        let r = f(&mut s);
        self.save(&lock, &s)?;
        Ok(r)
    }
}

/// The device minors the driver gives MIG capabilities in
/// `/proc/driver/nvidia-caps/mig-minors`: `config` 1, `monitor` 2, then per GPU minor 135
/// entries, per GI id 0..15 one for the GI and 8 for its CIs.
pub fn cap_minor(gpu_minor: u32, gi: u32, ci: Option<u32>) -> u32 {
    3 + gpu_minor * 15 * 9 + gi * 9 + ci.map_or(0, |c| c + 1)
}

/// The whole `mig-minors` text for GPUs with these minors, as the driver lists it.
pub fn mig_minors_text(gpu_minors: &[u32]) -> String {
    let mut t = String::from("config 1\nmonitor 2\n");
    for &m in gpu_minors {
        for gi in 0..15 {
            t.push_str(&format!("gpu{m}/gi{gi}/access {}\n", cap_minor(m, gi, None)));
            for ci in 0..8 {
                t.push_str(&format!("gpu{m}/gi{gi}/ci{ci}/access {}\n", cap_minor(m, gi, Some(ci))));
            }
        }
    }
    t
}

/// Creates the device files of `s` under its spec's `device_root` (if any), character devices
/// numbered as /dev/null where the process may make them (root): `/dev/nvidia<N>`,
/// the mig-minors file, and the capability files of every existing instance. Existing files
/// are left alone.
///
/// # Errors
/// A file cannot be created.
pub fn ensure_device_files(s: &State) -> io::Result<()> {
    let Some(root) = &s.spec.device_root else { return Ok(()) };
    let dev = root.join("dev");
    let caps = dev.join("nvidia-caps");
    let proc_caps = root.join("proc/driver/nvidia-caps");
    fs::create_dir_all(&caps)?;
    fs::create_dir_all(&proc_caps)?;
    let touch = |p: PathBuf| -> io::Result<()> {
        if p.symlink_metadata().is_ok() {
            return Ok(());
        }
        // A character device, as the driver's are, so that Slurm takes it in gres.conf
        // (`MultipleFiles=` refuses other files: "is not a valid character or block device").
        // Its number is /dev/null's (1, 3): opening it touches nothing. Without the right to
        // make device nodes (not root), a plain file.
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).map_err(io::Error::other)?;
        // SAFETY: a valid NUL-terminated path; mknod has no other precondition.
        let made = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) } == 0;
        if !made {
            File::create(p)?;
        }
        Ok(())
    };
    let minors: Vec<u32> = s.gpus.iter().map(|g| g.minor).collect();
    let mm = proc_caps.join("mig-minors");
    if !mm.exists() {
        fs::write(&mm, mig_minors_text(&minors))?;
    }
    for g in &s.gpus {
        touch(dev.join(format!("nvidia{}", g.minor)))?;
        for gi in &g.gpu_instances {
            touch(caps.join(format!("nvidia-cap{}", cap_minor(g.minor, gi.id, None))))?;
            for ci in &gi.compute_instances {
                touch(caps.join(format!("nvidia-cap{}", cap_minor(g.minor, gi.id, Some(ci.id)))))?;
            }
        }
    }
    Ok(())
}
