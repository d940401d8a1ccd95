//! [`StandIn`]: installing the stand-in into a folder and working its state from Rust (tests
//! and tools), under the same lock the library takes.

use crate::state::{self, Fault, NodeSpec, ProcessEntry, State, Store};
use std::io;
use std::path::{Path, PathBuf};

/// The library file name the stand-in is installed as.
pub const LIBRARY_NAME: &str = "libnvidia-ml.so.1";
/// The development link to [`LIBRARY_NAME`] that [`StandIn::install`] also makes (what
/// `nvml_wrapper::Nvml::init()` opens).
pub const DEV_LINK_NAME: &str = "libnvidia-ml.so";
/// The cdylib cargo builds.
pub const CDYLIB_NAME: &str = "libnvml_standin.so";

/// One installed stand-in: a folder with `libnvidia-ml.so.1` and its state.
#[derive(Debug, Clone)]
pub struct StandIn {
    store: Store,
}

fn invalid(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, what.into())
}

/// The built `libnvml_standin.so`: `$DYNMIG_NVML_STANDIN_LIB`, else next to the running
/// executable (its folder, the folder above, `deps/`), as `cargo test` lays out a target
/// folder.
pub fn built_cdylib() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("DYNMIG_NVML_STANDIN_LIB") {
        let p = PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    let mut candidates = vec![dir.join(CDYLIB_NAME)];
    if let Some(up) = dir.parent() {
        candidates.push(up.join(CDYLIB_NAME));
        candidates.push(up.join("deps").join(CDYLIB_NAME));
    }
    candidates.push(dir.join("deps").join(CDYLIB_NAME));
    candidates.into_iter().find(|p| p.is_file())
}

/// How to get the cdylib built, for error messages.
pub const BUILD_HINT: &str = "libnvml_standin.so not found: build it with `cargo build -p nvml-standin` (same \
     CARGO_TARGET_DIR and profile as the tests), or set DYNMIG_NVML_STANDIN_LIB to its path";

impl StandIn {
    /// Installs the stand-in into `dir` (created if missing): COPIES the built cdylib
    /// ([`built_cdylib`]) to `dir/libnvidia-ml.so.1` (a copy, so two folders loaded in one
    /// process are two library instances), links `dir/libnvidia-ml.so` to it, and writes a
    /// fresh `standin.json` for `spec`.
    ///
    /// # Errors
    /// No built cdylib ([`BUILD_HINT`]), an unknown board, or a file error.
    pub fn install(dir: &Path, spec: &NodeSpec) -> io::Result<StandIn> {
        let lib = built_cdylib().ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, BUILD_HINT))?;
        Self::install_from(&lib, dir, spec)
    }

    /// As [`Self::install`] with the cdylib at `lib`.
    ///
    /// # Errors
    /// As [`Self::install`].
    pub fn install_from(lib: &Path, dir: &Path, spec: &NodeSpec) -> io::Result<StandIn> {
        std::fs::create_dir_all(dir)?;
        let state = State::new(spec).map_err(invalid)?;
        let dst = dir.join(LIBRARY_NAME);
        let tmp = dir.join(format!(".{LIBRARY_NAME}.tmp"));
        std::fs::copy(lib, &tmp)?;
        std::fs::rename(&tmp, &dst)?;
        // `libnvidia-ml.so` -> `libnvidia-ml.so.1`, as the driver's packages link it, so that
        // `Nvml::init()` (which opens `libnvidia-ml.so`) finds it on LD_LIBRARY_PATH.
        let dev_link = dir.join(DEV_LINK_NAME);
        if dev_link.symlink_metadata().is_err() {
            std::os::unix::fs::symlink(LIBRARY_NAME, &dev_link)?;
        }
        let store = Store::new(dir);
        {
            let lock = store.lock()?;
            store.save(&lock, &state)?;
        }
        state::ensure_device_files(&state)?;
        Ok(StandIn { store })
    }

    /// The stand-in already installed in `dir`.
    ///
    /// # Errors
    /// `dir` has no `standin.json`.
    pub fn open(dir: &Path) -> io::Result<StandIn> {
        let store = Store::new(dir);
        if !store.exists() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} has no {}", dir.display(), state::STATE_FILE),
            ));
        }
        Ok(StandIn { store })
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        self.store.dir()
    }

    /// `dir/libnvidia-ml.so.1`, what `Nvml::builder().lib_path(..)` takes.
    pub fn library_path(&self) -> PathBuf {
        self.dir().join(LIBRARY_NAME)
    }

    /// The state now (dead processes pruned, as the library would on its next call).
    ///
    /// # Errors
    /// The state cannot be read or written.
    pub fn read(&self) -> io::Result<State> {
        self.store.update(|s| {
            s.prune_dead_processes();
            s.clone()
        })
    }

    /// Changes the state under the lock and saves it (device files follow).
    ///
    /// # Errors
    /// The state cannot be read or written.
    pub fn update<R>(&self, f: impl FnOnce(&mut State) -> R) -> io::Result<R> {
        let (r, s) = self.store.update(|s| {
            let r = f(s);
            (r, s.clone())
        })?;
        state::ensure_device_files(&s)?;
        Ok(r)
    }

    /// Records process `pid` on the MIG device `mig_uuid` (`MIG-...`), using 1024 MiB, as
    /// if it had opened a CUDA context there.
    ///
    /// # Errors
    /// No MIG device has that UUID, or a state error.
    pub fn attach_process(&self, mig_uuid: &str, pid: u32) -> io::Result<()> {
        self.attach_process_using(mig_uuid, pid, 1024)
    }

    /// As [`Self::attach_process`] using `used_mib` of GPU memory.
    ///
    /// # Errors
    /// As [`Self::attach_process`].
    pub fn attach_process_using(&self, mig_uuid: &str, pid: u32, used_mib: u64) -> io::Result<()> {
        self.update(|s| {
            for g in &mut s.gpus {
                let found = g.gpu_instances.iter().find_map(|gi| {
                    gi.compute_instances
                        .iter()
                        .find(|c| c.uuid == mig_uuid)
                        .map(|c| (gi.id, c.id))
                });
                if let Some((gi_id, ci_id)) = found {
                    g.processes.push(ProcessEntry {
                        pid,
                        gi_id,
                        ci_id,
                        used_mib,
                    });
                    return Ok(());
                }
            }
            Err(invalid(format!("no MIG device {mig_uuid}")))
        })?
    }

    /// Forgets process `pid` everywhere (as when it exits). Returns whether it was listed.
    ///
    /// # Errors
    /// A state error.
    pub fn detach_process(&self, pid: u32) -> io::Result<bool> {
        self.update(|s| {
            let mut any = false;
            for g in &mut s.gpus {
                let n = g.processes.len();
                g.processes.retain(|p| p.pid != pid);
                any |= g.processes.len() != n;
            }
            any
        })
    }

    /// Replaces the planned faults.
    ///
    /// # Errors
    /// A fault names an unknown error code, or a state error.
    pub fn set_faults(&self, faults: Vec<Fault>) -> io::Result<()> {
        for f in &faults {
            if let Some(e) = &f.error {
                if crate::ffi::return_code(e).is_none() {
                    return Err(invalid(format!("fault on {}: unknown error '{e}'", f.function)));
                }
            }
            if f.after == 0 {
                return Err(invalid(format!("fault on {}: after must be at least 1", f.function)));
            }
        }
        self.update(|s| s.faults = faults)
    }

    /// Plans a crash (SIGKILL) right after the `n`-th mutating call from now is saved.
    ///
    /// # Errors
    /// A state error.
    pub fn crash_after_mutations(&self, n: u32) -> io::Result<()> {
        self.update(|s| s.crash_after_mutations = Some(n))
    }

    /// Marks GPU `gpu` lost (every call naming it fails with `GPU_IS_LOST`) or found.
    ///
    /// # Errors
    /// No such GPU, or a state error.
    pub fn set_lost(&self, gpu: u32, lost: bool) -> io::Result<()> {
        self.update(|s| match s.gpus.get_mut(gpu as usize) {
            Some(g) => {
                g.lost = lost;
                Ok(())
            }
            None => Err(invalid(format!("no GPU {gpu}"))),
        })?
    }

    /// Resets GPU `gpu` as `nvidia-smi -r` would: a pending MIG mode takes effect. Refused
    /// while it has GPU instances or processes.
    ///
    /// # Errors
    /// No such GPU, instances or processes exist, or a state error.
    pub fn reset_gpu(&self, gpu: u32) -> io::Result<()> {
        self.update(|s| match s.gpus.get_mut(gpu as usize) {
            Some(g) if g.gpu_instances.is_empty() && g.processes.is_empty() => {
                g.mig_current = g.mig_pending;
                Ok(())
            }
            Some(_) => Err(invalid(format!("GPU {gpu} is in use"))),
            None => Err(invalid(format!("no GPU {gpu}"))),
        })?
    }

    /// How many times process `pid` called `nvmlInit*` on this stand-in.
    ///
    /// # Errors
    /// A state error.
    pub fn init_count(&self, pid: u32) -> io::Result<u64> {
        Ok(self.read()?.inits.get(&pid).copied().unwrap_or(0))
    }

    /// How many times any process called exported function `function`.
    ///
    /// # Errors
    /// A state error.
    pub fn call_count(&self, function: &str) -> io::Result<u64> {
        Ok(self.read()?.calls.get(function).copied().unwrap_or(0))
    }
}
