//! Helpers: install a stand-in, load it with nvml-wrapper, raw calls through `nvml.lib()`.
#![allow(dead_code)]

use nvml_standin::{NodeSpec, StandIn};
use nvml_wrapper::Nvml;
use nvml_wrapper_sys::bindings as sys;
use std::path::Path;

pub use sys::nvmlReturn_t as Ret;

pub const SUCCESS: Ret = sys::nvmlReturn_enum_NVML_SUCCESS;
pub const INVALID: Ret = sys::nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
pub const NOT_SUPPORTED: Ret = sys::nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
pub const NOT_FOUND: Ret = sys::nvmlReturn_enum_NVML_ERROR_NOT_FOUND;
pub const IN_USE: Ret = sys::nvmlReturn_enum_NVML_ERROR_IN_USE;
pub const INSUFFICIENT_RESOURCES: Ret = sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES;
pub const INSUFFICIENT_SIZE: Ret = sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE;
pub const GPU_IS_LOST: Ret = sys::nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST;
pub const RESET_REQUIRED: Ret = sys::nvmlReturn_enum_NVML_ERROR_RESET_REQUIRED;
pub const DRIVER_NOT_LOADED: Ret = sys::nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED;

/// Installs `spec` into `dir`.
pub fn install(dir: &Path, spec: &NodeSpec) -> StandIn {
    StandIn::install(dir, spec).unwrap_or_else(|e| panic!("{e}"))
}

/// A spec with MIG on.
pub fn mig_on(board: &str, gpus: u32) -> NodeSpec {
    let mut s = NodeSpec::new(board, gpus);
    s.mig_enabled = true;
    s
}

/// nvml-wrapper on the installed copy.
pub fn load(node: &StandIn) -> Nvml {
    let path = node.library_path();
    Nvml::builder()
        .lib_path(path.as_os_str())
        .init()
        .unwrap_or_else(|e| panic!("init {}: {e}", path.display()))
}

/// The raw handle of GPU `i`.
pub fn dev(nvml: &Nvml, i: u32) -> sys::nvmlDevice_t {
    unsafe { nvml.device_by_index(i).unwrap().handle() }
}

macro_rules! f {
    ($nvml:expr, $name:ident) => {
        $nvml.lib().$name.as_ref().expect(stringify!($name))
    };
}

pub fn profile_info(
    nvml: &Nvml,
    d: sys::nvmlDevice_t,
    index: u32,
) -> Result<sys::nvmlGpuInstanceProfileInfo_v2_t, Ret> {
    let mut info: sys::nvmlGpuInstanceProfileInfo_v2_t = unsafe { std::mem::zeroed() };
    info.version = std::mem::size_of::<sys::nvmlGpuInstanceProfileInfo_v2_t>() as u32 | (2 << 24);
    match unsafe { f!(nvml, nvmlDeviceGetGpuInstanceProfileInfoV)(d, index, &mut info) } {
        SUCCESS => Ok(info),
        c => Err(c),
    }
}

pub fn c_str(raw: &[std::os::raw::c_char]) -> String {
    let b: Vec<u8> = raw.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8(b).unwrap()
}

pub fn placements(nvml: &Nvml, d: sys::nvmlDevice_t, profile_id: u32) -> Result<Vec<(u32, u32)>, Ret> {
    let f = f!(nvml, nvmlDeviceGetGpuInstancePossiblePlacements_v2);
    let mut n = 0;
    let c = unsafe { f(d, profile_id, std::ptr::null_mut(), &mut n) };
    if c != SUCCESS {
        return Err(c);
    }
    let mut buf = vec![sys::nvmlGpuInstancePlacement_t { start: 0, size: 0 }; n as usize];
    let c = unsafe { f(d, profile_id, buf.as_mut_ptr(), &mut n) };
    if c != SUCCESS {
        return Err(c);
    }
    Ok(buf.iter().take(n as usize).map(|p| (p.start, p.size)).collect())
}

pub fn create_gi(
    nvml: &Nvml,
    d: sys::nvmlDevice_t,
    profile_id: u32,
    start: u32,
    size: u32,
) -> Result<sys::nvmlGpuInstance_t, Ret> {
    let p = sys::nvmlGpuInstancePlacement_t { start, size };
    let mut gi = std::ptr::null_mut();
    match unsafe { f!(nvml, nvmlDeviceCreateGpuInstanceWithPlacement)(d, profile_id, &p, &mut gi) } {
        SUCCESS => Ok(gi),
        c => Err(c),
    }
}

pub fn gi_info(nvml: &Nvml, gi: sys::nvmlGpuInstance_t) -> Result<sys::nvmlGpuInstanceInfo_t, Ret> {
    let mut info: sys::nvmlGpuInstanceInfo_t = unsafe { std::mem::zeroed() };
    match unsafe { f!(nvml, nvmlGpuInstanceGetInfo)(gi, &mut info) } {
        SUCCESS => Ok(info),
        c => Err(c),
    }
}

/// The CI profile ID with `slices` compute slices in `gi`.
pub fn ci_profile(nvml: &Nvml, gi: sys::nvmlGpuInstance_t, slices: u32) -> u32 {
    for i in 0..sys::NVML_COMPUTE_INSTANCE_PROFILE_COUNT {
        let mut p: sys::nvmlComputeInstanceProfileInfo_t = unsafe { std::mem::zeroed() };
        let c = unsafe {
            f!(nvml, nvmlGpuInstanceGetComputeInstanceProfileInfo)(
                gi,
                i,
                sys::NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                &mut p,
            )
        };
        if c == SUCCESS && p.sliceCount == slices {
            return p.id;
        }
    }
    panic!("no CI profile of {slices} slices");
}

pub fn create_ci(
    nvml: &Nvml,
    gi: sys::nvmlGpuInstance_t,
    ci_profile_id: u32,
) -> Result<sys::nvmlComputeInstance_t, Ret> {
    let mut ci = std::ptr::null_mut();
    match unsafe { f!(nvml, nvmlGpuInstanceCreateComputeInstance)(gi, ci_profile_id, &mut ci) } {
        SUCCESS => Ok(ci),
        c => Err(c),
    }
}

pub fn ci_info(nvml: &Nvml, ci: sys::nvmlComputeInstance_t) -> Result<sys::nvmlComputeInstanceInfo_t, Ret> {
    let mut info: sys::nvmlComputeInstanceInfo_t = unsafe { std::mem::zeroed() };
    match unsafe { f!(nvml, nvmlComputeInstanceGetInfo_v2)(ci, &mut info) } {
        SUCCESS => Ok(info),
        c => Err(c),
    }
}

pub fn destroy_gi(nvml: &Nvml, gi: sys::nvmlGpuInstance_t) -> Ret {
    unsafe { f!(nvml, nvmlGpuInstanceDestroy)(gi) }
}

pub fn destroy_ci(nvml: &Nvml, ci: sys::nvmlComputeInstance_t) -> Ret {
    unsafe { f!(nvml, nvmlComputeInstanceDestroy)(ci) }
}

pub fn gpu_instances(nvml: &Nvml, d: sys::nvmlDevice_t, profile_id: u32) -> Result<Vec<sys::nvmlGpuInstance_t>, Ret> {
    let mut buf = vec![std::ptr::null_mut(); 8];
    let mut n = 8;
    match unsafe { f!(nvml, nvmlDeviceGetGpuInstances)(d, profile_id, buf.as_mut_ptr(), &mut n) } {
        SUCCESS => {
            buf.truncate(n as usize);
            Ok(buf)
        }
        c => Err(c),
    }
}

/// Creates GI of `profile_id` at `start` (size from the profile) with one CI over all of it;
/// returns (gi, ci).
pub fn create_full(
    nvml: &Nvml,
    d: sys::nvmlDevice_t,
    profile_id: u32,
    start: u32,
) -> (sys::nvmlGpuInstance_t, sys::nvmlComputeInstance_t) {
    let size = placements(nvml, d, profile_id).unwrap()[0].1;
    let gi = create_gi(nvml, d, profile_id, start, size).unwrap();
    let slices = (0..17)
        .filter_map(|i| profile_info(nvml, d, i).ok())
        .find(|x| x.id == profile_id)
        .map(|x| x.sliceCount)
        .unwrap();
    let ci = create_ci(nvml, gi, ci_profile(nvml, gi, slices)).unwrap();
    (gi, ci)
}

/// `(gi id, ci id, uuid)` of every MIG device of GPU `i`, through the safe API.
pub fn mig_devices(nvml: &Nvml, i: u32) -> Vec<(u32, u32, String)> {
    let d = nvml.device_by_index(i).unwrap();
    let max = d.mig_device_count().unwrap();
    let mut v = Vec::new();
    for k in 0..max {
        let Ok(m) = d.mig_device_by_index(k) else { continue };
        let h = unsafe { m.handle() };
        let (mut g, mut c) = (0, 0);
        assert_eq!(unsafe { f!(nvml, nvmlDeviceGetGpuInstanceId)(h, &mut g) }, SUCCESS);
        assert_eq!(unsafe { f!(nvml, nvmlDeviceGetComputeInstanceId)(h, &mut c) }, SUCCESS);
        v.push((g, c, m.uuid().unwrap()));
    }
    v
}

pub(crate) use f;
