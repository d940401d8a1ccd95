// One piece: one exported C function per NVML call the stand-in serves, in nvml.h's order; a reader looks a function up by its NVML name, and each is short.
//! The exported NVML functions (`#[no_mangle] extern "C"`), with nvml.h's signatures and the
//! return codes NVIDIA's NVML API reference (<https://docs.nvidia.com/deploy/nvml-api/>)
//! documents for each.
//!
//! Every export: catches panics (`NVML_ERROR_UNKNOWN`), returns `NVML_ERROR_UNINITIALIZED`
//! before `nvmlInit*`, `NVML_ERROR_INVALID_ARGUMENT` for a null pointer it must write
//! through or an unknown or stale handle, `NVML_ERROR_GPU_IS_LOST` for a GPU marked lost. Each
//! call locks the node's state file, counts itself, applies a planned fault, does its work and
//! saves the state.
//!
//! Handles are opaque pointer values that encode what they name (never dereferenced): kind
//! (4 bits), GPU index (8), GPU-instance id (8), compute-instance id (8) and the instance's
//! creation serial (36 bits), so a handle means the same in every process and a handle to a
//! destroyed instance never names a later one with the same id.
#![allow(non_snake_case)]
#![allow(clippy::missing_safety_doc)]

use crate::state::{self, ComputeInstance, GpuInstance, Locked, State, Store};
use nvml_wrapper_sys::bindings as sys;
use std::ffi::{c_char, c_uint, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::Mutex;

type Ret = sys::nvmlReturn_t;
type R<T = ()> = Result<T, Ret>;

const SUCCESS: Ret = sys::nvmlReturn_enum_NVML_SUCCESS;
const UNINITIALIZED: Ret = sys::nvmlReturn_enum_NVML_ERROR_UNINITIALIZED;
const INVALID: Ret = sys::nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
const NOT_SUPPORTED: Ret = sys::nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
const NO_PERMISSION: Ret = sys::nvmlReturn_enum_NVML_ERROR_NO_PERMISSION;
const NOT_FOUND: Ret = sys::nvmlReturn_enum_NVML_ERROR_NOT_FOUND;
const INSUFFICIENT_SIZE: Ret = sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE;
const DRIVER_NOT_LOADED: Ret = sys::nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED;
const GPU_IS_LOST: Ret = sys::nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST;
const RESET_REQUIRED: Ret = sys::nvmlReturn_enum_NVML_ERROR_RESET_REQUIRED;
const IN_USE: Ret = sys::nvmlReturn_enum_NVML_ERROR_IN_USE;
const INSUFFICIENT_RESOURCES: Ret = sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES;
const VERSION_MISMATCH: Ret = sys::nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
const UNKNOWN: Ret = sys::nvmlReturn_enum_NVML_ERROR_UNKNOWN;

/// nvml.h's return codes by name (`NVML_ERROR_` and `NVML_` left off), for faults and
/// `nvmlErrorString`.
pub const RETURN_CODES: &[(&str, Ret, &str)] = &[
    ("SUCCESS", SUCCESS, "Success\0"),
    ("UNINITIALIZED", UNINITIALIZED, "Uninitialized\0"),
    ("INVALID_ARGUMENT", INVALID, "Invalid Argument\0"),
    ("NOT_SUPPORTED", NOT_SUPPORTED, "Not Supported\0"),
    ("NO_PERMISSION", NO_PERMISSION, "Insufficient Permissions\0"),
    (
        "ALREADY_INITIALIZED",
        sys::nvmlReturn_enum_NVML_ERROR_ALREADY_INITIALIZED,
        "Already Initialized\0",
    ),
    ("NOT_FOUND", NOT_FOUND, "Not Found\0"),
    ("INSUFFICIENT_SIZE", INSUFFICIENT_SIZE, "Insufficient Size\0"),
    (
        "INSUFFICIENT_POWER",
        sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_POWER,
        "Insufficient External Power\0",
    ),
    ("DRIVER_NOT_LOADED", DRIVER_NOT_LOADED, "Driver Not Loaded\0"),
    ("TIMEOUT", sys::nvmlReturn_enum_NVML_ERROR_TIMEOUT, "Timeout\0"),
    (
        "IRQ_ISSUE",
        sys::nvmlReturn_enum_NVML_ERROR_IRQ_ISSUE,
        "Interrupt Request Issue\0",
    ),
    (
        "LIBRARY_NOT_FOUND",
        sys::nvmlReturn_enum_NVML_ERROR_LIBRARY_NOT_FOUND,
        "NVML Shared Library Not Found\0",
    ),
    (
        "FUNCTION_NOT_FOUND",
        sys::nvmlReturn_enum_NVML_ERROR_FUNCTION_NOT_FOUND,
        "Function Not Found\0",
    ),
    (
        "CORRUPTED_INFOROM",
        sys::nvmlReturn_enum_NVML_ERROR_CORRUPTED_INFOROM,
        "Corrupted infoROM\0",
    ),
    ("GPU_IS_LOST", GPU_IS_LOST, "GPU is lost\0"),
    ("RESET_REQUIRED", RESET_REQUIRED, "GPU requires restart\0"),
    (
        "OPERATING_SYSTEM",
        sys::nvmlReturn_enum_NVML_ERROR_OPERATING_SYSTEM,
        "The operating system has blocked the request.\0",
    ),
    (
        "LIB_RM_VERSION_MISMATCH",
        sys::nvmlReturn_enum_NVML_ERROR_LIB_RM_VERSION_MISMATCH,
        "RM has detected an NVML/RM version mismatch.\0",
    ),
    ("IN_USE", IN_USE, "In use by another client\0"),
    (
        "MEMORY",
        sys::nvmlReturn_enum_NVML_ERROR_MEMORY,
        "Insufficient Memory\0",
    ),
    ("NO_DATA", sys::nvmlReturn_enum_NVML_ERROR_NO_DATA, "No data\0"),
    (
        "INSUFFICIENT_RESOURCES",
        INSUFFICIENT_RESOURCES,
        "Ran out of critical resources, other than memory\0",
    ),
    (
        "ARGUMENT_VERSION_MISMATCH",
        VERSION_MISMATCH,
        "Struct version mismatch\0",
    ),
    ("DEPRECATED", sys::nvmlReturn_enum_NVML_ERROR_DEPRECATED, "Deprecated\0"),
    ("NOT_READY", sys::nvmlReturn_enum_NVML_ERROR_NOT_READY, "Not Ready\0"),
    (
        "GPU_NOT_FOUND",
        sys::nvmlReturn_enum_NVML_ERROR_GPU_NOT_FOUND,
        "GPU Not Found\0",
    ),
    (
        "INVALID_STATE",
        sys::nvmlReturn_enum_NVML_ERROR_INVALID_STATE,
        "Invalid State\0",
    ),
    ("UNKNOWN", UNKNOWN, "Unknown Error\0"),
];

/// The code of a return-code name (`"IN_USE"`, also accepted with the `NVML_ERROR_` prefix).
pub fn return_code(name: &str) -> Option<Ret> {
    let n = name
        .strip_prefix("NVML_ERROR_")
        .or_else(|| name.strip_prefix("NVML_"))
        .unwrap_or(name);
    RETURN_CODES
        .iter()
        .find(|(k, _, _)| k.eq_ignore_ascii_case(n))
        .map(|x| x.1)
}

// ---------------------------------------------------------------------------------------
// Initialisation state of this library instance (per process, per loaded copy).

struct Init {
    store: Store,
    refs: u32,
}

static INIT: Mutex<Option<Init>> = Mutex::new(None);

/// The init state, also after a panic elsewhere poisoned the mutex (its data stays valid).
fn init_lock() -> std::sync::MutexGuard<'static, Option<Init>> {
    INIT.lock().unwrap_or_else(|e| e.into_inner())
}

fn init_store() -> Option<Store> {
    init_lock().as_ref().map(|i| i.store.clone())
}

/// The stand-in's folder: `$DYNMIG_NVML_STANDIN_DIR`, else the folder of the loaded library
/// file (`dladdr` on one of its own functions).
pub fn own_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("DYNMIG_NVML_STANDIN_DIR") {
        return Some(PathBuf::from(d));
    }
    // SAFETY: dladdr only reads the loader's tables; dli_fname is a C string owned by the loader.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(own_dir as *const libc::c_void, &mut info) == 0 || info.dli_fname.is_null() {
            return None;
        }
        let path = PathBuf::from(CStr::from_ptr(info.dli_fname).to_string_lossy().into_owned());
        let path = std::fs::canonicalize(&path).unwrap_or(path);
        path.parent().map(|p| p.to_path_buf())
    }
}

// ---------------------------------------------------------------------------------------
// The call wrapper.

fn guard(f: impl FnOnce() -> Ret) -> Ret {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(UNKNOWN)
}

/// Locks and loads the state, counts the call of `name`, and applies a planned fault: a
/// hang sleeps without the lock (the state saved first) and then reloads; an error is
/// returned (the state saved).
fn prologue(store: &Store, name: &str) -> R<(Locked, State)> {
    let lock = store.lock().map_err(|_| UNKNOWN)?;
    let mut s = store.load(&lock).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            DRIVER_NOT_LOADED
        } else {
            UNKNOWN
        }
    })?;
    *s.calls.entry(name.to_string()).or_default() += 1;
    let mut fired = None;
    for f in s.faults.iter_mut().filter(|f| f.function == name) {
        f.after = f.after.saturating_sub(1);
        if f.after == 0 && fired.is_none() {
            fired = Some(f.clone());
        }
    }
    let Some(fault) = fired else { return Ok((lock, s)) };
    let pos = s.faults.iter().position(|f| f.function == name && f.after == 0);
    if let Some(p) = pos {
        s.faults.remove(p);
    }
    store.save(&lock, &s).map_err(|_| UNKNOWN)?;
    let (lock, s) = if let Some(ms) = fault.hang_ms {
        drop(lock);
        std::thread::sleep(std::time::Duration::from_millis(ms));
        let lock = store.lock().map_err(|_| UNKNOWN)?;
        let s = store.load(&lock).map_err(|_| UNKNOWN)?;
        (lock, s)
    } else {
        (lock, s)
    };
    match fault.error.as_deref() {
        Some(e) => Err(return_code(e).unwrap_or(UNKNOWN)),
        None => Ok((lock, s)),
    }
}

/// Runs `body` on the state of an initialised library: the prologue, dead processes pruned,
/// the permission check of mutating calls, the save, and a planned crash.
fn call(name: &'static str, mutating: bool, body: impl FnOnce(&mut State) -> R) -> Ret {
    guard(|| {
        let Some(store) = init_store() else {
            return UNINITIALIZED;
        };
        if !store.writable() {
            // An unprivileged process: reads see the node (uncounted, no faults); changes
            // need root, as NVML's MIG calls do.
            if mutating {
                return NO_PERMISSION;
            }
            let Ok(mut s) = store.load_unlocked() else {
                return UNKNOWN;
            };
            s.prune_dead_processes();
            return match body(&mut s) {
                Ok(()) => SUCCESS,
                Err(c) => c,
            };
        }
        let (lock, mut s) = match prologue(&store, name) {
            Ok(x) => x,
            Err(c) => return c,
        };
        s.prune_dead_processes();
        let r = if mutating && s.spec.require_root && unsafe { libc::geteuid() } != 0 {
            Err(NO_PERMISSION)
        } else {
            body(&mut s)
        };
        let mut crash = false;
        if mutating && r.is_ok() {
            if let Some(n) = s.crash_after_mutations {
                if n <= 1 {
                    s.crash_after_mutations = None;
                    crash = true;
                } else {
                    s.crash_after_mutations = Some(n - 1);
                }
            }
        }
        if store.save(&lock, &s).is_err() {
            return UNKNOWN;
        }
        if mutating && r.is_ok() {
            let _ = state::ensure_device_files(&s);
        }
        drop(lock);
        if crash {
            // SAFETY: the process kills itself, as `kill -9` mid-apply would.
            unsafe {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
        }
        match r {
            Ok(()) => SUCCESS,
            Err(c) => c,
        }
    })
}

fn out<T>(p: *mut T, v: T) -> R {
    if p.is_null() {
        return Err(INVALID);
    }
    // SAFETY: non-null pointer the caller passed for the output, per nvml.h.
    unsafe { p.write(v) };
    Ok(())
}

fn write_str(buf: *mut c_char, len: c_uint, s: &str) -> R {
    if buf.is_null() {
        return Err(INVALID);
    }
    if s.len() + 1 > len as usize {
        return Err(INSUFFICIENT_SIZE);
    }
    // SAFETY: the caller's buffer holds `len` bytes, checked above to fit s and the NUL.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr().cast::<c_char>(), buf, s.len());
        *buf.add(s.len()) = 0;
    }
    Ok(())
}

fn fill_str<const N: usize>(dst: &mut [c_char; N], s: &str) {
    for (d, b) in dst.iter_mut().zip(s.bytes().take(N - 1)) {
        *d = b as c_char;
    }
}

// ---------------------------------------------------------------------------------------
// Handles.

const TAG_GPU: usize = 1;
const TAG_GI: usize = 2;
const TAG_CI: usize = 3;
const TAG_MIG: usize = 4;
const SERIAL_MASK: u64 = (1 << 36) - 1;

const _: () = assert!(std::mem::size_of::<usize>() == 8, "handles need 64-bit pointers");

/// What a handle names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Handle {
    Gpu(usize),
    Gi { gpu: usize, gi: u32, serial: u64 },
    Ci { gpu: usize, gi: u32, ci: u32, serial: u64 },
    Mig { gpu: usize, gi: u32, ci: u32, serial: u64 },
}

fn encode(tag: usize, gpu: usize, gi: u32, ci: u32, serial: u64) -> usize {
    (tag << 60)
        | ((gpu & 0xff) << 52)
        | ((gi as usize & 0xff) << 44)
        | ((ci as usize & 0xff) << 36)
        | (serial & SERIAL_MASK) as usize
}

fn decode<T>(p: *mut T) -> Option<Handle> {
    let v = p as usize;
    let gpu = (v >> 52) & 0xff;
    let gi = ((v >> 44) & 0xff) as u32;
    let ci = ((v >> 36) & 0xff) as u32;
    let serial = v as u64 & SERIAL_MASK;
    match v >> 60 {
        TAG_GPU if v & ((1 << 52) - 1) == 0 => Some(Handle::Gpu(gpu)),
        TAG_GI => Some(Handle::Gi { gpu, gi, serial }),
        TAG_CI => Some(Handle::Ci { gpu, gi, ci, serial }),
        TAG_MIG => Some(Handle::Mig { gpu, gi, ci, serial }),
        _ => None,
    }
}

fn gpu_handle(gpu: usize) -> sys::nvmlDevice_t {
    encode(TAG_GPU, gpu, 0, 0, 0) as sys::nvmlDevice_t
}

fn gi_handle(gpu: usize, gi: &GpuInstance) -> sys::nvmlGpuInstance_t {
    encode(TAG_GI, gpu, gi.id, 0, gi.serial) as sys::nvmlGpuInstance_t
}

fn ci_handle(gpu: usize, gi: u32, ci: &ComputeInstance) -> sys::nvmlComputeInstance_t {
    encode(TAG_CI, gpu, gi, ci.id, ci.serial) as sys::nvmlComputeInstance_t
}

fn mig_handle(gpu: usize, gi: u32, ci: &ComputeInstance) -> sys::nvmlDevice_t {
    encode(TAG_MIG, gpu, gi, ci.id, ci.serial) as sys::nvmlDevice_t
}

fn check_gpu(s: &State, gpu: usize) -> R<usize> {
    let g = s.gpus.get(gpu).ok_or(INVALID)?;
    if g.lost {
        return Err(GPU_IS_LOST);
    }
    Ok(gpu)
}

/// A device handle: a physical GPU (`None`) or a MIG device `(gi id, ci id)`.
fn device(s: &State, dev: sys::nvmlDevice_t) -> R<(usize, Option<(u32, u32)>)> {
    match decode(dev).ok_or(INVALID)? {
        Handle::Gpu(g) => Ok((check_gpu(s, g)?, None)),
        Handle::Mig { gpu, gi, ci, serial } => {
            let g = check_gpu(s, gpu)?;
            find_ci(s, g, gi, ci, serial)?;
            Ok((g, Some((gi, ci))))
        }
        _ => Err(INVALID),
    }
}

/// A physical GPU's handle only.
fn physical(s: &State, dev: sys::nvmlDevice_t) -> R<usize> {
    match device(s, dev)? {
        (g, None) => Ok(g),
        _ => Err(INVALID),
    }
}

fn find_ci(s: &State, gpu: usize, gi: u32, ci: u32, serial: u64) -> R<(usize, usize)> {
    let gis = &s.gpus[gpu].gpu_instances;
    let gx = gis.iter().position(|g| g.id == gi).ok_or(INVALID)?;
    let cx = gis[gx]
        .compute_instances
        .iter()
        .position(|c| c.id == ci && c.serial & SERIAL_MASK == serial)
        .ok_or(INVALID)?;
    Ok((gx, cx))
}

/// A GPU-instance handle: `(gpu, index in gpu_instances)`.
fn gpu_instance(s: &State, h: sys::nvmlGpuInstance_t) -> R<(usize, usize)> {
    match decode(h).ok_or(INVALID)? {
        Handle::Gi { gpu, gi, serial } => {
            let g = check_gpu(s, gpu)?;
            let x = s.gpus[g]
                .gpu_instances
                .iter()
                .position(|x| x.id == gi && x.serial & SERIAL_MASK == serial)
                .ok_or(INVALID)?;
            Ok((g, x))
        }
        _ => Err(INVALID),
    }
}

/// A compute-instance handle: `(gpu, gi index, ci index)`.
fn compute_instance(s: &State, h: sys::nvmlComputeInstance_t) -> R<(usize, usize, usize)> {
    match decode(h).ok_or(INVALID)? {
        Handle::Ci { gpu, gi, ci, serial } => {
            let g = check_gpu(s, gpu)?;
            let (gx, cx) = find_ci(s, g, gi, ci, serial)?;
            Ok((g, gx, cx))
        }
        _ => Err(INVALID),
    }
}

fn mig_on(s: &State, gpu: usize) -> R {
    let g = &s.gpus[gpu];
    if !g.board.has_mig() || !g.mig_current {
        return Err(NOT_SUPPORTED);
    }
    Ok(())
}

/// Every MIG device of `gpu`, `(gi id, ci)`, by GI id then CI id.
fn mig_devices(s: &State, gpu: usize) -> Vec<(u32, &ComputeInstance)> {
    let mut v: Vec<(u32, &ComputeInstance)> = s.gpus[gpu]
        .gpu_instances
        .iter()
        .flat_map(|g| g.compute_instances.iter().map(move |c| (g.id, c)))
        .collect();
    v.sort_by_key(|(g, c)| (*g, c.id));
    v
}

// ---------------------------------------------------------------------------------------
// Initialisation.

fn init_impl(name: &'static str) -> Ret {
    guard(|| {
        let Some(dir) = own_dir() else { return DRIVER_NOT_LOADED };
        let store = Store::new(&dir);
        if !store.exists() {
            return DRIVER_NOT_LOADED;
        }
        if !store.writable() {
            // An unprivileged process: it reads the node, as NVML lets any user do.
            if store.load_unlocked().is_err() {
                return UNKNOWN;
            }
            let mut g = init_lock();
            match g.as_mut() {
                Some(i) => i.refs += 1,
                None => *g = Some(Init { store, refs: 1 }),
            }
            return SUCCESS;
        }
        let (lock, mut s) = match prologue(&store, name) {
            Ok(x) => x,
            Err(c) => return c,
        };
        *s.inits.entry(std::process::id()).or_default() += 1;
        s.prune_dead_processes();
        if store.save(&lock, &s).is_err() || state::ensure_device_files(&s).is_err() {
            return UNKNOWN;
        }
        drop(lock);
        let mut g = init_lock();
        match g.as_mut() {
            Some(i) => i.refs += 1,
            None => *g = Some(Init { store, refs: 1 }),
        }
        SUCCESS
    })
}

/// `nvmlInit_v2`: initialises NVML (reference counted). `NVML_ERROR_DRIVER_NOT_LOADED` when
/// the stand-in's folder has no `standin.json`.
#[no_mangle]
pub unsafe extern "C" fn nvmlInit_v2() -> Ret {
    init_impl("nvmlInit_v2")
}

/// `nvmlInit` (the version-1 symbol): as [`nvmlInit_v2`].
#[no_mangle]
pub unsafe extern "C" fn nvmlInit() -> Ret {
    init_impl("nvmlInit")
}

/// `nvmlInitWithFlags`: as [`nvmlInit_v2`]; the flags (`NVML_INIT_FLAG_NO_GPUS`,
/// `NVML_INIT_FLAG_NO_ATTACH`) change nothing here.
#[no_mangle]
pub unsafe extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> Ret {
    init_impl("nvmlInitWithFlags")
}

/// `nvmlShutdown`: drops one reference; the last one uninitialises.
/// `NVML_ERROR_UNINITIALIZED` if not initialised.
#[no_mangle]
pub unsafe extern "C" fn nvmlShutdown() -> Ret {
    guard(|| {
        let mut g = init_lock();
        match g.as_mut() {
            None => UNINITIALIZED,
            Some(i) if i.refs > 1 => {
                i.refs -= 1;
                SUCCESS
            }
            Some(_) => {
                *g = None;
                SUCCESS
            }
        }
    })
}

/// `nvmlErrorString`: a static string for a return code ("Unknown Error" for others).
#[no_mangle]
pub unsafe extern "C" fn nvmlErrorString(result: Ret) -> *const c_char {
    let s = RETURN_CODES
        .iter()
        .find(|x| x.1 == result)
        .map_or("Unknown Error\0", |x| x.2);
    s.as_ptr().cast()
}

// ---------------------------------------------------------------------------------------
// System and device queries.

/// `nvmlSystemGetDriverVersion`: `INSUFFICIENT_SIZE` if `length` is too small.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(version: *mut c_char, length: c_uint) -> Ret {
    call("nvmlSystemGetDriverVersion", false, |s| {
        write_str(version, length, &s.driver_version)
    })
}

/// `nvmlSystemGetNVMLVersion`: `INSUFFICIENT_SIZE` if `length` is too small.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(version: *mut c_char, length: c_uint) -> Ret {
    call("nvmlSystemGetNVMLVersion", false, |s| {
        write_str(version, length, &s.nvml_version)
    })
}

fn count_impl(name: &'static str, count: *mut c_uint) -> Ret {
    call(name, false, |s| out(count, s.gpus.len() as c_uint))
}

/// `nvmlDeviceGetCount_v2`: the number of GPUs (lost ones included).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(device_count: *mut c_uint) -> Ret {
    count_impl("nvmlDeviceGetCount_v2", device_count)
}

/// `nvmlDeviceGetCount`: as [`nvmlDeviceGetCount_v2`].
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount(device_count: *mut c_uint) -> Ret {
    count_impl("nvmlDeviceGetCount", device_count)
}

fn by_index_impl(name: &'static str, index: c_uint, device: *mut sys::nvmlDevice_t) -> Ret {
    call(name, false, |s| {
        if device.is_null() {
            return Err(INVALID);
        }
        let g = check_gpu(s, index as usize)?;
        out(device, gpu_handle(g))
    })
}

/// `nvmlDeviceGetHandleByIndex_v2`: `INVALID_ARGUMENT` for an index past the count,
/// `GPU_IS_LOST` for a lost GPU.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, device: *mut sys::nvmlDevice_t) -> Ret {
    by_index_impl("nvmlDeviceGetHandleByIndex_v2", index, device)
}

/// `nvmlDeviceGetHandleByIndex`: as [`nvmlDeviceGetHandleByIndex_v2`].
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex(index: c_uint, device: *mut sys::nvmlDevice_t) -> Ret {
    by_index_impl("nvmlDeviceGetHandleByIndex", index, device)
}

/// `nvmlDeviceGetHandleByUUID`: a GPU (`GPU-...`) or a MIG device (`MIG-...`);
/// `NOT_FOUND` if none has it.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(uuid: *const c_char, device: *mut sys::nvmlDevice_t) -> Ret {
    call("nvmlDeviceGetHandleByUUID", false, |s| {
        if uuid.is_null() || device.is_null() {
            return Err(INVALID);
        }
        let want = CStr::from_ptr(uuid).to_string_lossy();
        for (i, g) in s.gpus.iter().enumerate() {
            if g.uuid == want {
                check_gpu(s, i)?;
                return out(device, gpu_handle(i));
            }
            for gi in &g.gpu_instances {
                if let Some(c) = gi.compute_instances.iter().find(|c| c.uuid == want) {
                    check_gpu(s, i)?;
                    return out(device, mig_handle(i, gi.id, c));
                }
            }
        }
        Err(NOT_FOUND)
    })
}

/// `nvmlDeviceGetName`: the board's name; a MIG device's is `<board> MIG <profile>`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(device: sys::nvmlDevice_t, name: *mut c_char, length: c_uint) -> Ret {
    call("nvmlDeviceGetName", false, |s| {
        let (g, mig) = self::device(s, device)?;
        let gpu = &s.gpus[g];
        let text = match mig {
            None => gpu.board.name.clone(),
            Some((gi, _)) => {
                let p = gpu.gi(gi).and_then(|x| gpu.board.profile_by_id(x.profile_id));
                let short = p
                    .map(|p| p.name.trim_start_matches("MIG ").to_string())
                    .unwrap_or_default();
                format!("{} MIG {short}", gpu.board.name)
            }
        };
        write_str(name, length, &text)
    })
}

/// `nvmlDeviceGetUUID`: `GPU-<uuid>` for a GPU, `MIG-<uuid>` for a MIG device.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(device: sys::nvmlDevice_t, uuid: *mut c_char, length: c_uint) -> Ret {
    call("nvmlDeviceGetUUID", false, |s| {
        let text = match self::device(s, device)? {
            (g, None) => s.gpus[g].uuid.clone(),
            (g, Some((gi, ci))) => {
                let x = s.gpus[g].gi(gi).ok_or(INVALID)?;
                x.compute_instances
                    .iter()
                    .find(|c| c.id == ci)
                    .ok_or(INVALID)?
                    .uuid
                    .clone()
            }
        };
        write_str(uuid, length, &text)
    })
}

/// `nvmlDeviceGetPciInfo_v3`: `pciDeviceId` = device id << 16 | 0x10DE; a MIG device
/// reports its parent's.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(device: sys::nvmlDevice_t, pci: *mut sys::nvmlPciInfo_t) -> Ret {
    call("nvmlDeviceGetPciInfo_v3", false, |s| {
        let (g, _) = self::device(s, device)?;
        let gpu = &s.gpus[g];
        // SAFETY: plain C struct.
        let mut p: sys::nvmlPciInfo_t = std::mem::zeroed();
        p.domain = 0;
        p.bus = gpu.bus;
        p.device = 0;
        p.pciDeviceId = (u32::from(gpu.board.pci_device_id) << 16) | 0x10DE;
        p.pciSubSystemId = (0x1796 << 16) | 0x10DE;
        fill_str(&mut p.busId, &gpu.bus_id);
        fill_str(&mut p.busIdLegacy, &gpu.bus_id[4..]);
        out(pci, p)
    })
}

fn memory(s: &State, g: usize, mig: Option<(u32, u32)>) -> R<(u64, u64)> {
    let gpu = &s.gpus[g];
    let mib = 1024 * 1024;
    match mig {
        None => {
            let used: u64 = gpu.processes.iter().map(|p| p.used_mib).sum();
            Ok((gpu.board.total_memory_mib * mib, used * mib))
        }
        Some((gi, _)) => {
            let x = gpu.gi(gi).ok_or(INVALID)?;
            let p = gpu.board.profile_by_id(x.profile_id).ok_or(INVALID)?;
            let used: u64 = gpu.processes.iter().filter(|p| p.gi_id == gi).map(|p| p.used_mib).sum();
            Ok((p.memory_mib * mib, used * mib))
        }
    }
}

/// `nvmlDeviceGetMemoryInfo_v2`: total, used (the processes' memory), free, reserved 0; the
/// struct's `version` must be `nvmlMemory_v2` (else `ARGUMENT_VERSION_MISMATCH`).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(device: sys::nvmlDevice_t, mem: *mut sys::nvmlMemory_v2_t) -> Ret {
    call("nvmlDeviceGetMemoryInfo_v2", false, |s| {
        let (g, mig) = self::device(s, device)?;
        if mem.is_null() {
            return Err(INVALID);
        }
        let v2 = (std::mem::size_of::<sys::nvmlMemory_v2_t>() as u32) | (2 << 24);
        if (*mem).version != v2 {
            return Err(VERSION_MISMATCH);
        }
        let (total, used) = memory(s, g, mig)?;
        (*mem).total = total;
        (*mem).reserved = 0;
        (*mem).used = used.min(total);
        (*mem).free = total - used.min(total);
        Ok(())
    })
}

/// `nvmlDeviceGetMemoryInfo`: total, free, used.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(device: sys::nvmlDevice_t, mem: *mut sys::nvmlMemory_t) -> Ret {
    call("nvmlDeviceGetMemoryInfo", false, |s| {
        let (g, mig) = self::device(s, device)?;
        let (total, used) = memory(s, g, mig)?;
        out(
            mem,
            sys::nvmlMemory_t {
                total,
                free: total - used.min(total),
                used: used.min(total),
            },
        )
    })
}

/// `nvmlDeviceGetMinorNumber`: `/dev/nvidia<minor>`; `NOT_SUPPORTED` on a MIG device.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMinorNumber(device: sys::nvmlDevice_t, minor: *mut c_uint) -> Ret {
    call("nvmlDeviceGetMinorNumber", false, |s| match self::device(s, device)? {
        (g, None) => out(minor, s.gpus[g].minor),
        _ => Err(NOT_SUPPORTED),
    })
}

/// `nvmlDeviceGetPowerUsage`: milliwatts, dynmig's power model for the board (idle plus each
/// busy GPU instance's share); `NOT_SUPPORTED` on a MIG device or a board dynmig has no
/// model for.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPowerUsage(device: sys::nvmlDevice_t, power: *mut c_uint) -> Ret {
    call("nvmlDeviceGetPowerUsage", false, |s| {
        let g = match self::device(s, device)? {
            (g, None) => g,
            _ => return Err(NOT_SUPPORTED),
        };
        let gpu = &s.gpus[g];
        let busy: Vec<u8> = gpu
            .gpu_instances
            .iter()
            .filter(|x| gpu.processes.iter().any(|p| p.gi_id == x.id))
            .map(|x| x.slice_count as u8)
            .collect();
        let busy = if gpu.mig_current {
            busy
        } else if gpu.processes.is_empty() {
            Vec::new()
        } else {
            vec![gpu.board.compute_slices.max(1) as u8]
        };
        let w = gpu.board.power_w(&busy).ok_or(NOT_SUPPORTED)?;
        out(power, (w * 1000.0).round() as c_uint)
    })
}

// ---------------------------------------------------------------------------------------
// Processes.

unsafe fn processes<T>(
    name: &'static str,
    device: sys::nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut T,
    make: impl Fn(&state::ProcessEntry, bool) -> T,
) -> Ret {
    call(name, false, |s| {
        let (g, mig) = self::device(s, device)?;
        if count.is_null() {
            return Err(INVALID);
        }
        let gpu = &s.gpus[g];
        let list: Vec<&state::ProcessEntry> = gpu
            .processes
            .iter()
            .filter(|p| match mig {
                None => true,
                Some((gi, ci)) => p.gi_id == gi && p.ci_id == ci,
            })
            .collect();
        let n = list.len() as c_uint;
        if *count < n {
            *count = n;
            return Err(INSUFFICIENT_SIZE);
        }
        *count = n;
        if n == 0 {
            return Ok(());
        }
        if infos.is_null() {
            return Err(INVALID);
        }
        for (i, p) in list.iter().enumerate() {
            infos.add(i).write(make(p, gpu.mig_current && mig.is_none()));
        }
        Ok(())
    })
}

fn info_v2(p: &state::ProcessEntry, ids: bool) -> sys::nvmlProcessInfo_t {
    sys::nvmlProcessInfo_t {
        pid: p.pid,
        usedGpuMemory: p.used_mib * 1024 * 1024,
        gpuInstanceId: if ids { p.gi_id } else { u32::MAX },
        computeInstanceId: if ids { p.ci_id } else { u32::MAX },
    }
}

/// `nvmlDeviceGetComputeRunningProcesses_v3`: the compute processes; on a GPU with MIG on
/// each carries its GPU- and compute-instance id. `*infoCount` too small: the count needed
/// and `INSUFFICIENT_SIZE` (`SUCCESS` with 0 when there are none).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: sys::nvmlDevice_t,
    info_count: *mut c_uint,
    infos: *mut sys::nvmlProcessInfo_t,
) -> Ret {
    processes(
        "nvmlDeviceGetComputeRunningProcesses_v3",
        device,
        info_count,
        infos,
        info_v2,
    )
}

/// `nvmlDeviceGetComputeRunningProcesses_v2`: as the `_v3` call (same struct).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v2(
    device: sys::nvmlDevice_t,
    info_count: *mut c_uint,
    infos: *mut sys::nvmlProcessInfo_v2_t,
) -> Ret {
    processes(
        "nvmlDeviceGetComputeRunningProcesses_v2",
        device,
        info_count,
        infos,
        info_v2,
    )
}

/// `nvmlDeviceGetComputeRunningProcesses` (version 1 struct: pid and memory only).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses(
    device: sys::nvmlDevice_t,
    info_count: *mut c_uint,
    infos: *mut sys::nvmlProcessInfo_v1_t,
) -> Ret {
    processes(
        "nvmlDeviceGetComputeRunningProcesses",
        device,
        info_count,
        infos,
        |p, _| sys::nvmlProcessInfo_v1_t {
            pid: p.pid,
            usedGpuMemory: p.used_mib * 1024 * 1024,
        },
    )
}

// ---------------------------------------------------------------------------------------
// MIG mode and MIG devices.

/// `nvmlDeviceGetMigMode`: current and pending mode; `NOT_SUPPORTED` on a board without MIG.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: sys::nvmlDevice_t,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> Ret {
    call("nvmlDeviceGetMigMode", false, |s| {
        let g = physical(s, device)?;
        let gpu = &s.gpus[g];
        if !gpu.board.has_mig() {
            return Err(NOT_SUPPORTED);
        }
        if current.is_null() || pending.is_null() {
            return Err(INVALID);
        }
        out(current, u32::from(gpu.mig_current))?;
        out(pending, u32::from(gpu.mig_pending))
    })
}

/// `nvmlDeviceSetMigMode`: `IN_USE` while GPU instances or processes exist; takes effect at
/// once, or (spec `mode_change_needs_reset`) stays pending with `*activationStatus` =
/// `NVML_ERROR_RESET_REQUIRED`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceSetMigMode(
    device: sys::nvmlDevice_t,
    mode: c_uint,
    activation_status: *mut Ret,
) -> Ret {
    call("nvmlDeviceSetMigMode", true, |s| {
        let g = physical(s, device)?;
        if activation_status.is_null() || mode > 1 {
            return Err(INVALID);
        }
        let needs_reset = s.spec.mode_change_needs_reset;
        let gpu = &mut s.gpus[g];
        if !gpu.board.has_mig() {
            return Err(NOT_SUPPORTED);
        }
        if !gpu.gpu_instances.is_empty() || !gpu.processes.is_empty() {
            return Err(IN_USE);
        }
        let on = mode == 1;
        gpu.mig_pending = on;
        if needs_reset && gpu.mig_current != on {
            *activation_status = RESET_REQUIRED;
        } else {
            gpu.mig_current = on;
            *activation_status = SUCCESS;
        }
        Ok(())
    })
}

/// `nvmlDeviceGetMaxMigDeviceCount`: the most MIG devices the GPU can have (its compute
/// slices); 0 if MIG is unsupported or off.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(device: sys::nvmlDevice_t, count: *mut c_uint) -> Ret {
    call("nvmlDeviceGetMaxMigDeviceCount", false, |s| {
        let g = physical(s, device)?;
        let gpu = &s.gpus[g];
        out(count, if gpu.mig_current { gpu.board.compute_slices } else { 0 })
    })
}

/// `nvmlDeviceGetMigDeviceHandleByIndex`: the `index`-th existing MIG device (by GPU-instance
/// then compute-instance id); `NOT_FOUND` past the existing ones, `INVALID_ARGUMENT` past the
/// maximum, `NOT_SUPPORTED` with MIG off.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: sys::nvmlDevice_t,
    index: c_uint,
    mig: *mut sys::nvmlDevice_t,
) -> Ret {
    call("nvmlDeviceGetMigDeviceHandleByIndex", false, |s| {
        let g = physical(s, device)?;
        mig_on(s, g)?;
        if mig.is_null() || index >= s.gpus[g].board.compute_slices {
            return Err(INVALID);
        }
        let list = mig_devices(s, g);
        let (gi, ci) = list.get(index as usize).ok_or(NOT_FOUND)?;
        out(mig, mig_handle(g, *gi, ci))
    })
}

/// `nvmlDeviceIsMigDeviceHandle`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceIsMigDeviceHandle(device: sys::nvmlDevice_t, is_mig: *mut c_uint) -> Ret {
    call("nvmlDeviceIsMigDeviceHandle", false, |s| {
        let (_, mig) = self::device(s, device)?;
        out(is_mig, u32::from(mig.is_some()))
    })
}

/// `nvmlDeviceGetDeviceHandleFromMigDeviceHandle`: the parent GPU; `INVALID_ARGUMENT` for a
/// handle that is not a MIG device.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
    mig: sys::nvmlDevice_t,
    device: *mut sys::nvmlDevice_t,
) -> Ret {
    call(
        "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
        false,
        |s| match self::device(s, mig)? {
            (g, Some(_)) => out(device, gpu_handle(g)),
            _ => Err(INVALID),
        },
    )
}

/// `nvmlDeviceGetGpuInstanceId`: of a MIG device; `NOT_SUPPORTED` for a GPU.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceId(device: sys::nvmlDevice_t, id: *mut c_uint) -> Ret {
    call("nvmlDeviceGetGpuInstanceId", false, |s| {
        match self::device(s, device)? {
            (_, Some((gi, _))) => out(id, gi),
            _ => Err(NOT_SUPPORTED),
        }
    })
}

/// `nvmlDeviceGetComputeInstanceId`: of a MIG device; `NOT_SUPPORTED` for a GPU.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeInstanceId(device: sys::nvmlDevice_t, id: *mut c_uint) -> Ret {
    call("nvmlDeviceGetComputeInstanceId", false, |s| {
        match self::device(s, device)? {
            (_, Some((_, ci))) => out(id, ci),
            _ => Err(NOT_SUPPORTED),
        }
    })
}

// ---------------------------------------------------------------------------------------
// GPU-instance profiles and placements (answered with MIG off too, as the driver does).

fn gi_profile(s: &State, device: sys::nvmlDevice_t, index: c_uint) -> R<crate::boards::BoardProfile> {
    let g = physical(s, device)?;
    if index >= sys::NVML_GPU_INSTANCE_PROFILE_COUNT {
        return Err(INVALID);
    }
    let b = &s.gpus[g].board;
    b.profile_by_index(index).cloned().ok_or(NOT_SUPPORTED)
}

macro_rules! fill_gi_profile {
    ($info:expr, $p:expr) => {{
        let p = $p;
        $info.id = p.id;
        $info.isP2pSupported = 0;
        $info.sliceCount = p.slice_count;
        $info.instanceCount = p.instance_count;
        $info.multiprocessorCount = p.multiprocessor_count;
        $info.copyEngineCount = p.slice_count.max(1);
        $info.decoderCount = if p.media_extensions { 1 } else { p.slice_count / 2 };
        $info.encoderCount = 0;
        $info.jpegCount = u32::from(p.media_extensions);
        $info.ofaCount = u32::from(p.media_extensions);
        $info.memorySizeMB = p.memory_mib;
    }};
}

/// `nvmlDeviceGetGpuInstanceProfileInfo`: profile `profile` (an `NVML_GPU_INSTANCE_PROFILE_*`
/// index); `NOT_SUPPORTED` for an index the board lacks, `INVALID_ARGUMENT` past the count.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceProfileInfo(
    device: sys::nvmlDevice_t,
    profile: c_uint,
    info: *mut sys::nvmlGpuInstanceProfileInfo_t,
) -> Ret {
    call("nvmlDeviceGetGpuInstanceProfileInfo", false, |s| {
        let p = gi_profile(s, device, profile)?;
        if info.is_null() {
            return Err(INVALID);
        }
        let mut i: sys::nvmlGpuInstanceProfileInfo_t = std::mem::zeroed();
        fill_gi_profile!(i, &p);
        out(info, i)
    })
}

/// `nvmlDeviceGetGpuInstanceProfileInfoV`: as the version-1 call plus the name; `version`
/// must be `nvmlGpuInstanceProfileInfo_v2` (else `ARGUMENT_VERSION_MISMATCH`).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceProfileInfoV(
    device: sys::nvmlDevice_t,
    profile: c_uint,
    info: *mut sys::nvmlGpuInstanceProfileInfo_v2_t,
) -> Ret {
    call("nvmlDeviceGetGpuInstanceProfileInfoV", false, |s| {
        let p = gi_profile(s, device, profile)?;
        if info.is_null() {
            return Err(INVALID);
        }
        let v2 = (std::mem::size_of::<sys::nvmlGpuInstanceProfileInfo_v2_t>() as u32) | (2 << 24);
        if (*info).version != v2 {
            return Err(VERSION_MISMATCH);
        }
        let mut i: sys::nvmlGpuInstanceProfileInfo_v2_t = std::mem::zeroed();
        i.version = v2;
        fill_gi_profile!(i, &p);
        fill_str(&mut i.name, &p.name);
        out(info, i)
    })
}

fn profile_by_id(s: &State, g: usize, id: c_uint) -> R<crate::boards::BoardProfile> {
    let b = &s.gpus[g].board;
    if !b.has_mig() {
        return Err(NOT_SUPPORTED);
    }
    b.profile_by_id(id).cloned().ok_or(INVALID)
}

/// `nvmlDeviceGetGpuInstancePossiblePlacements_v2`: every placement of profile ID
/// `profileId`, whatever exists; with `placements` NULL only `*count` (SUCCESS), as nvml.h
/// documents for this call.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstancePossiblePlacements_v2(
    device: sys::nvmlDevice_t,
    profile_id: c_uint,
    placements: *mut sys::nvmlGpuInstancePlacement_t,
    count: *mut c_uint,
) -> Ret {
    call("nvmlDeviceGetGpuInstancePossiblePlacements_v2", false, |s| {
        let g = physical(s, device)?;
        let p = profile_by_id(s, g, profile_id)?;
        if count.is_null() {
            return Err(INVALID);
        }
        *count = p.placements.len() as c_uint;
        if placements.is_null() {
            return Ok(());
        }
        for (i, (start, size)) in p.placements.iter().enumerate() {
            placements.add(i).write(sys::nvmlGpuInstancePlacement_t {
                start: *start,
                size: *size,
            });
        }
        Ok(())
    })
}

/// Whether a GI of `p` may be created at `start` now: the placement rules of the NVIDIA MIG
/// User Guide.
fn gi_fits(s: &State, g: usize, p: &crate::boards::BoardProfile, start: u32) -> R {
    let gpu = &s.gpus[g];
    if !p.placements.contains(&(start, p.memory_slices)) {
        return Err(INVALID);
    }
    let gis = &gpu.gpu_instances;
    if gis.iter().filter(|x| x.profile_id == p.id).count() as u32 >= p.instance_count {
        return Err(INSUFFICIENT_RESOURCES);
    }
    if gis
        .iter()
        .any(|x| start < x.start + x.size && x.start < start + p.memory_slices)
    {
        return Err(INSUFFICIENT_RESOURCES);
    }
    let used: u32 = gis.iter().map(|x| x.slice_count).sum();
    if used + p.slice_count > gpu.board.compute_slices {
        return Err(INSUFFICIENT_RESOURCES);
    }
    let is_me = |id: u32| gpu.board.profile_by_id(id).is_some_and(|q| q.media_extensions);
    if p.media_extensions && gis.iter().any(|x| is_me(x.profile_id)) {
        return Err(INSUFFICIENT_RESOURCES);
    }
    Ok(())
}

fn create_gi(s: &mut State, g: usize, p: &crate::boards::BoardProfile, start: u32) -> R<GpuInstance> {
    gi_fits(s, g, p, start)?;
    let gpu = &s.gpus[g];
    let id = (1..)
        .find(|i| gpu.gpu_instances.iter().all(|x| x.id != *i))
        .ok_or(INSUFFICIENT_RESOURCES)?;
    let gi = GpuInstance {
        id,
        profile_id: p.id,
        start,
        size: p.memory_slices,
        slice_count: p.slice_count,
        serial: s.serial(),
        compute_instances: Vec::new(),
    };
    s.gpus[g].gpu_instances.push(gi.clone());
    s.gpus[g].gpu_instances.sort_by_key(|x| x.id);
    Ok(gi)
}

/// `nvmlDeviceGetGpuInstanceRemainingCapacity`: how many more GIs of profile ID `profileId`
/// could be created now (each at its lowest free placement).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceRemainingCapacity(
    device: sys::nvmlDevice_t,
    profile_id: c_uint,
    count: *mut c_uint,
) -> Ret {
    call("nvmlDeviceGetGpuInstanceRemainingCapacity", false, |s| {
        let g = physical(s, device)?;
        let p = profile_by_id(s, g, profile_id)?;
        mig_on(s, g)?;
        let mut scratch = s.clone();
        let mut n = 0;
        while let Some(&(start, _)) = p
            .placements
            .iter()
            .find(|(st, _)| gi_fits(&scratch, g, &p, *st).is_ok())
        {
            create_gi(&mut scratch, g, &p, start)?;
            n += 1;
        }
        out(count, n)
    })
}

/// `nvmlDeviceCreateGpuInstanceWithPlacement`: `INVALID_ARGUMENT` for a placement not among
/// the profile's, `INSUFFICIENT_RESOURCES` for an overlap, too many of the profile, too few
/// compute slices left or a second `+me`; `NOT_SUPPORTED` with MIG off. GI ids: the lowest
/// free from 1.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceCreateGpuInstanceWithPlacement(
    device: sys::nvmlDevice_t,
    profile_id: c_uint,
    placement: *const sys::nvmlGpuInstancePlacement_t,
    gpu_instance: *mut sys::nvmlGpuInstance_t,
) -> Ret {
    call("nvmlDeviceCreateGpuInstanceWithPlacement", true, |s| {
        let g = physical(s, device)?;
        mig_on(s, g)?;
        let p = profile_by_id(s, g, profile_id)?;
        if placement.is_null() || gpu_instance.is_null() {
            return Err(INVALID);
        }
        let pl = *placement;
        if pl.size != p.memory_slices {
            return Err(INVALID);
        }
        let gi = create_gi(s, g, &p, pl.start)?;
        out(gpu_instance, gi_handle(g, &gi))
    })
}

/// `nvmlDeviceCreateGpuInstance`: at the profile's lowest free placement;
/// `INSUFFICIENT_RESOURCES` if none is free.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceCreateGpuInstance(
    device: sys::nvmlDevice_t,
    profile_id: c_uint,
    gpu_instance: *mut sys::nvmlGpuInstance_t,
) -> Ret {
    call("nvmlDeviceCreateGpuInstance", true, |s| {
        let g = physical(s, device)?;
        mig_on(s, g)?;
        let p = profile_by_id(s, g, profile_id)?;
        if gpu_instance.is_null() {
            return Err(INVALID);
        }
        let start = p
            .placements
            .iter()
            .find(|(st, _)| gi_fits(s, g, &p, *st).is_ok())
            .map(|x| x.0)
            .ok_or(INSUFFICIENT_RESOURCES)?;
        let gi = create_gi(s, g, &p, start)?;
        out(gpu_instance, gi_handle(g, &gi))
    })
}

/// `nvmlGpuInstanceDestroy`: `IN_USE` while it has compute instances or processes;
/// `INVALID_ARGUMENT` for a handle to a GI that no longer exists.
#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceDestroy(gpu_instance: sys::nvmlGpuInstance_t) -> Ret {
    call("nvmlGpuInstanceDestroy", true, |s| {
        let (g, x) = self::gpu_instance(s, gpu_instance)?;
        let gpu = &mut s.gpus[g];
        let id = gpu.gpu_instances[x].id;
        if !gpu.gpu_instances[x].compute_instances.is_empty() || gpu.processes.iter().any(|p| p.gi_id == id) {
            return Err(IN_USE);
        }
        gpu.gpu_instances.remove(x);
        Ok(())
    })
}

/// `nvmlDeviceGetGpuInstances`: the GIs of profile ID `profileId` (the buffer must hold the
/// profile's instance count, as nvml.h says); `NOT_SUPPORTED` with MIG off.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstances(
    device: sys::nvmlDevice_t,
    profile_id: c_uint,
    gpu_instances: *mut sys::nvmlGpuInstance_t,
    count: *mut c_uint,
) -> Ret {
    call("nvmlDeviceGetGpuInstances", false, |s| {
        let g = physical(s, device)?;
        mig_on(s, g)?;
        profile_by_id(s, g, profile_id)?;
        if gpu_instances.is_null() || count.is_null() {
            return Err(INVALID);
        }
        let list: Vec<&GpuInstance> = s.gpus[g]
            .gpu_instances
            .iter()
            .filter(|x| x.profile_id == profile_id)
            .collect();
        for (i, gi) in list.iter().enumerate() {
            gpu_instances.add(i).write(gi_handle(g, gi));
        }
        *count = list.len() as c_uint;
        Ok(())
    })
}

/// `nvmlDeviceGetGpuInstanceById`: `NOT_FOUND` if no GI has id `id`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceById(
    device: sys::nvmlDevice_t,
    id: c_uint,
    gpu_instance: *mut sys::nvmlGpuInstance_t,
) -> Ret {
    call("nvmlDeviceGetGpuInstanceById", false, |s| {
        let g = physical(s, device)?;
        mig_on(s, g)?;
        if gpu_instance.is_null() {
            return Err(INVALID);
        }
        let gi = s.gpus[g].gi(id).ok_or(NOT_FOUND)?;
        out(gpu_instance, gi_handle(g, gi))
    })
}

/// `nvmlGpuInstanceGetInfo`: parent device, id, profile ID, placement.
#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceGetInfo(
    gpu_instance: sys::nvmlGpuInstance_t,
    info: *mut sys::nvmlGpuInstanceInfo_t,
) -> Ret {
    call("nvmlGpuInstanceGetInfo", false, |s| {
        let (g, x) = self::gpu_instance(s, gpu_instance)?;
        let gi = &s.gpus[g].gpu_instances[x];
        out(
            info,
            sys::nvmlGpuInstanceInfo_t {
                device: gpu_handle(g),
                id: gi.id,
                profileId: gi.profile_id,
                placement: sys::nvmlGpuInstancePlacement_t {
                    start: gi.start,
                    size: gi.size,
                },
            },
        )
    })
}

// ---------------------------------------------------------------------------------------
// Compute instances.

/// Compute slices of compute-instance profile index `i` (`NVML_COMPUTE_INSTANCE_PROFILE_*`);
/// the `1_SLICE_REV1` profile (index 7) is not offered.
fn ci_slices(i: u32) -> Option<u32> {
    [1, 2, 3, 4, 7, 8, 6].get(i as usize).copied()
}

fn ci_profile(s: &State, g: usize, x: usize, index: u32) -> R<sys::nvmlComputeInstanceProfileInfo_t> {
    let gi = &s.gpus[g].gpu_instances[x];
    let slices = ci_slices(index).filter(|&n| n <= gi.slice_count).ok_or(NOT_SUPPORTED)?;
    let p = s.gpus[g].board.profile_by_id(gi.profile_id).ok_or(NOT_SUPPORTED)?;
    Ok(sys::nvmlComputeInstanceProfileInfo_t {
        id: index,
        sliceCount: slices,
        instanceCount: gi.slice_count / slices,
        multiprocessorCount: p.multiprocessor_count * slices / gi.slice_count.max(1),
        sharedCopyEngineCount: p.slice_count.max(1),
        sharedDecoderCount: if p.media_extensions { 1 } else { p.slice_count / 2 },
        sharedEncoderCount: 0,
        sharedJpegCount: u32::from(p.media_extensions),
        sharedOfaCount: u32::from(p.media_extensions),
    })
}

/// `nvmlGpuInstanceGetComputeInstanceProfileInfo`: one profile per compute-slice count up
/// to the GI's slices (profile ID = index); `NOT_SUPPORTED` for a larger one,
/// `INVALID_ARGUMENT` past the counts.
#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstanceProfileInfo(
    gpu_instance: sys::nvmlGpuInstance_t,
    profile: c_uint,
    eng_profile: c_uint,
    info: *mut sys::nvmlComputeInstanceProfileInfo_t,
) -> Ret {
    call("nvmlGpuInstanceGetComputeInstanceProfileInfo", false, |s| {
        let (g, x) = self::gpu_instance(s, gpu_instance)?;
        if profile >= sys::NVML_COMPUTE_INSTANCE_PROFILE_COUNT
            || eng_profile >= sys::NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT
            || info.is_null()
        {
            return Err(INVALID);
        }
        out(info, ci_profile(s, g, x, profile)?)
    })
}

/// The first compute slice (within the GI) where a CI of `slices` fits, if any.
fn ci_start(gi: &GpuInstance, slices: u32) -> Option<u32> {
    (0..=gi.slice_count.checked_sub(slices)?).find(|&st| {
        gi.compute_instances
            .iter()
            .all(|c| st + slices <= c.start || c.start + c.slice_count <= st)
    })
}

fn ci_room(s: &State, g: usize, x: usize, profile_id: u32) -> R<(u32, sys::nvmlComputeInstanceProfileInfo_t)> {
    let info = ci_profile(s, g, x, profile_id).map_err(|_| INVALID)?;
    let gi = &s.gpus[g].gpu_instances[x];
    let same = gi
        .compute_instances
        .iter()
        .filter(|c| c.profile_id == profile_id)
        .count() as u32;
    if same >= info.instanceCount {
        return Err(INSUFFICIENT_RESOURCES);
    }
    let start = ci_start(gi, info.sliceCount).ok_or(INSUFFICIENT_RESOURCES)?;
    Ok((start, info))
}

/// `nvmlGpuInstanceGetComputeInstanceRemainingCapacity`.
#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstanceRemainingCapacity(
    gpu_instance: sys::nvmlGpuInstance_t,
    profile_id: c_uint,
    count: *mut c_uint,
) -> Ret {
    call("nvmlGpuInstanceGetComputeInstanceRemainingCapacity", false, |s| {
        let (g, x) = self::gpu_instance(s, gpu_instance)?;
        ci_profile(s, g, x, profile_id).map_err(|_| INVALID)?;
        let mut scratch = s.gpus[g].gpu_instances[x].clone();
        let mut n = 0;
        let mut tmp = s.clone();
        while let Ok((start, info)) = ci_room(&tmp, g, x, profile_id) {
            scratch.compute_instances.push(ComputeInstance {
                id: 1000 + n,
                profile_id,
                slice_count: info.sliceCount,
                start,
                serial: 0,
                uuid: String::new(),
            });
            tmp.gpus[g].gpu_instances[x] = scratch.clone();
            n += 1;
        }
        out(count, n)
    })
}

/// `nvmlGpuInstanceCreateComputeInstance`: a CI of profile ID `profileId` at the first free
/// compute slices; `INSUFFICIENT_RESOURCES` if it does not fit, `INVALID_ARGUMENT` for a
/// profile the GI lacks. CI ids: the lowest free from 0. The MIG device it makes gets a new
/// `MIG-<uuid>`.
#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceCreateComputeInstance(
    gpu_instance: sys::nvmlGpuInstance_t,
    profile_id: c_uint,
    compute_instance: *mut sys::nvmlComputeInstance_t,
) -> Ret {
    call("nvmlGpuInstanceCreateComputeInstance", true, |s| {
        let (g, x) = self::gpu_instance(s, gpu_instance)?;
        if compute_instance.is_null() {
            return Err(INVALID);
        }
        let (start, info) = ci_room(s, g, x, profile_id)?;
        let serial = s.serial();
        let gi = &mut s.gpus[g].gpu_instances[x];
        let id = (0..)
            .find(|i| gi.compute_instances.iter().all(|c| c.id != *i))
            .unwrap_or(0);
        let ci = ComputeInstance {
            id,
            profile_id,
            slice_count: info.sliceCount,
            start,
            serial,
            uuid: format!("MIG-{}", state::new_uuid()),
        };
        gi.compute_instances.push(ci.clone());
        gi.compute_instances.sort_by_key(|c| c.id);
        out(compute_instance, ci_handle(g, gi.id, &ci))
    })
}

/// `nvmlGpuInstanceGetComputeInstances`: the CIs of profile ID `profileId` (the buffer must
/// hold the profile's instance count).
#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstances(
    gpu_instance: sys::nvmlGpuInstance_t,
    profile_id: c_uint,
    compute_instances: *mut sys::nvmlComputeInstance_t,
    count: *mut c_uint,
) -> Ret {
    call("nvmlGpuInstanceGetComputeInstances", false, |s| {
        let (g, x) = self::gpu_instance(s, gpu_instance)?;
        ci_profile(s, g, x, profile_id).map_err(|_| INVALID)?;
        if compute_instances.is_null() || count.is_null() {
            return Err(INVALID);
        }
        let gi = &s.gpus[g].gpu_instances[x];
        let list: Vec<&ComputeInstance> = gi
            .compute_instances
            .iter()
            .filter(|c| c.profile_id == profile_id)
            .collect();
        for (i, c) in list.iter().enumerate() {
            compute_instances.add(i).write(ci_handle(g, gi.id, c));
        }
        *count = list.len() as c_uint;
        Ok(())
    })
}

/// `nvmlGpuInstanceGetComputeInstanceById`: `NOT_FOUND` if no CI has id `id`.
#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstanceById(
    gpu_instance: sys::nvmlGpuInstance_t,
    id: c_uint,
    compute_instance: *mut sys::nvmlComputeInstance_t,
) -> Ret {
    call("nvmlGpuInstanceGetComputeInstanceById", false, |s| {
        let (g, x) = self::gpu_instance(s, gpu_instance)?;
        let gi = &s.gpus[g].gpu_instances[x];
        let c = gi.compute_instances.iter().find(|c| c.id == id).ok_or(NOT_FOUND)?;
        out(compute_instance, ci_handle(g, gi.id, c))
    })
}

/// `nvmlComputeInstanceGetInfo_v2`: `device` is the PARENT GPU's handle (as the driver
/// fills it; the MIG device's own UUID comes from its MIG device handle), then the GPU
/// instance, id, profile ID and placement.
#[no_mangle]
pub unsafe extern "C" fn nvmlComputeInstanceGetInfo_v2(
    compute_instance: sys::nvmlComputeInstance_t,
    info: *mut sys::nvmlComputeInstanceInfo_t,
) -> Ret {
    call("nvmlComputeInstanceGetInfo_v2", false, |s| {
        let (g, x, c) = self::compute_instance(s, compute_instance)?;
        let gi = &s.gpus[g].gpu_instances[x];
        let ci = &gi.compute_instances[c];
        out(
            info,
            sys::nvmlComputeInstanceInfo_t {
                device: gpu_handle(g),
                gpuInstance: gi_handle(g, gi),
                id: ci.id,
                profileId: ci.profile_id,
                placement: sys::nvmlComputeInstancePlacement_t {
                    start: ci.start,
                    size: ci.slice_count,
                },
            },
        )
    })
}

/// `nvmlComputeInstanceDestroy`: `IN_USE` while a process runs on it.
#[no_mangle]
pub unsafe extern "C" fn nvmlComputeInstanceDestroy(compute_instance: sys::nvmlComputeInstance_t) -> Ret {
    call("nvmlComputeInstanceDestroy", true, |s| {
        let (g, x, c) = self::compute_instance(s, compute_instance)?;
        let gpu = &mut s.gpus[g];
        let (gi_id, ci_id) = (gpu.gpu_instances[x].id, gpu.gpu_instances[x].compute_instances[c].id);
        if gpu.processes.iter().any(|p| p.gi_id == gi_id && p.ci_id == ci_id) {
            return Err(IN_USE);
        }
        gpu.gpu_instances[x].compute_instances.remove(c);
        Ok(())
    })
}

/// Every symbol this library exports, for FUNCTIONS.md's check.
pub const EXPORTED: &[&str] = &[
    "nvmlInit_v2",
    "nvmlInit",
    "nvmlInitWithFlags",
    "nvmlShutdown",
    "nvmlErrorString",
    "nvmlSystemGetDriverVersion",
    "nvmlSystemGetNVMLVersion",
    "nvmlDeviceGetCount_v2",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetHandleByUUID",
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetMinorNumber",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceSetMigMode",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceIsMigDeviceHandle",
    "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
    "nvmlDeviceGetGpuInstanceId",
    "nvmlDeviceGetComputeInstanceId",
    "nvmlDeviceGetGpuInstanceProfileInfo",
    "nvmlDeviceGetGpuInstanceProfileInfoV",
    "nvmlDeviceGetGpuInstancePossiblePlacements_v2",
    "nvmlDeviceGetGpuInstanceRemainingCapacity",
    "nvmlDeviceCreateGpuInstanceWithPlacement",
    "nvmlDeviceCreateGpuInstance",
    "nvmlGpuInstanceDestroy",
    "nvmlDeviceGetGpuInstances",
    "nvmlDeviceGetGpuInstanceById",
    "nvmlGpuInstanceGetInfo",
    "nvmlGpuInstanceGetComputeInstanceProfileInfo",
    "nvmlGpuInstanceGetComputeInstanceRemainingCapacity",
    "nvmlGpuInstanceCreateComputeInstance",
    "nvmlGpuInstanceGetComputeInstances",
    "nvmlGpuInstanceGetComputeInstanceById",
    "nvmlComputeInstanceGetInfo_v2",
    "nvmlComputeInstanceDestroy",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_are_not_null() {
        let h = encode(TAG_CI, 3, 14, 7, 12345);
        assert_ne!(h, 0);
        assert_eq!(
            decode(h as *mut u8),
            Some(Handle::Ci {
                gpu: 3,
                gi: 14,
                ci: 7,
                serial: 12345
            })
        );
        assert_eq!(decode(gpu_handle(2)), Some(Handle::Gpu(2)));
        assert_eq!(decode(std::ptr::null_mut::<u8>()), None);
        assert_eq!(decode(0x1234usize as *mut u8), None);
    }

    #[test]
    fn return_codes_by_name() {
        assert_eq!(return_code("INSUFFICIENT_RESOURCES"), Some(INSUFFICIENT_RESOURCES));
        assert_eq!(return_code("NVML_ERROR_IN_USE"), Some(IN_USE));
        assert_eq!(return_code("nope"), None);
        assert!(RETURN_CODES.iter().all(|x| x.2.ends_with('\0')));
    }

    #[test]
    fn uninitialised_calls_say_so() {
        let mut n = 0;
        assert_eq!(unsafe { nvmlDeviceGetCount_v2(&mut n) }, UNINITIALIZED);
        assert_eq!(unsafe { nvmlShutdown() }, UNINITIALIZED);
    }
}
