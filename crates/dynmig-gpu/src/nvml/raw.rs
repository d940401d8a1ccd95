//! The MIG calls nvml-wrapper 0.13 lacks, made through its raw bindings (`Nvml::lib()` and
//! `Device::handle()`, documented in nvml-wrapper's API docs): GPU- and compute-instance create,
//! destroy, list and info, remaining capacity, placements (the safe
//! `possible_placements` returns an empty list: it never sets the vector's length), and the
//! version-2 profile info that carries the profile's name.
//!
//! Every function returns the raw `nvmlReturn_t` code on failure; [`super::errors`] maps it.
//!
//! The module is private to the crate on purpose: its functions are safe to call but take
//! raw NVML handles, which must come from the same live `Nvml` (a handle from another
//! library instance or one already destroyed is undefined behaviour in the driver). Only
//! [`super::NvmlBackend`] calls them, with handles it just obtained from `nvml`.
//! Buffers are sized from the profile's instance count or the driver's own count.

use nvml_wrapper::Nvml;
use nvml_wrapper_sys::bindings as sys;
use std::mem;

/// A raw NVML result: the value, or the `nvmlReturn_t` code.
pub(crate) type RawResult<T> = Result<T, u32>;

fn check(code: sys::nvmlReturn_t) -> RawResult<()> {
    if code == sys::nvmlReturn_enum_NVML_SUCCESS {
        Ok(())
    } else {
        Err(code)
    }
}

/// A symbol of the loaded library, or `NVML_ERROR_FUNCTION_NOT_FOUND` if this driver lacks it.
macro_rules! sym {
    ($nvml:expr, $name:ident) => {
        $nvml
            .lib()
            .$name
            .as_ref()
            .map_err(|_| sys::nvmlReturn_enum_NVML_ERROR_FUNCTION_NOT_FOUND)?
    };
}

/// `nvmlGpuInstanceProfileInfo_v2_t` in the fields dynmig reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GiProfileInfo {
    /// The profile ID (`nvidia-smi mig -lgip` column `ID`), what create calls take.
    pub id: u32,
    /// Compute slices.
    pub slice_count: u32,
    /// Most instances of the profile on the GPU.
    pub instance_count: u32,
    /// Streaming multiprocessors.
    pub multiprocessor_count: u32,
    /// Memory in MiB (`memorySizeMB`, which NVML counts in MiB).
    pub memory_mib: u64,
    /// The name, e.g. `"MIG 1g.10gb"`; `None` from drivers without the v2 call.
    pub name: Option<String>,
}

/// Profile info for NVML profile index `index` (`NVML_GPU_INSTANCE_PROFILE_*`, 0..17), by
/// `nvmlDeviceGetGpuInstanceProfileInfoV` (version 2, with the name), falling back to the
/// version-1 call on drivers that lack it.
pub(crate) fn gi_profile_info(nvml: &Nvml, dev: sys::nvmlDevice_t, index: u32) -> RawResult<GiProfileInfo> {
    if let Ok(f) = nvml.lib().nvmlDeviceGetGpuInstanceProfileInfoV.as_ref() {
        // SAFETY: a zeroed plain C struct with its version set, as nvml.h's
        // NVML_STRUCT_VERSION(GpuInstanceProfileInfo, 2) = sizeof | 2 << 24.
        let mut info: sys::nvmlGpuInstanceProfileInfo_v2_t = unsafe { mem::zeroed() };
        info.version = mem::size_of::<sys::nvmlGpuInstanceProfileInfo_v2_t>() as u32 | (2 << 24);
        let code = unsafe { f(dev, index, &mut info) };
        if code == sys::nvmlReturn_enum_NVML_SUCCESS {
            let name = c_name(&info.name);
            return Ok(GiProfileInfo {
                id: info.id,
                slice_count: info.sliceCount,
                instance_count: info.instanceCount,
                multiprocessor_count: info.multiprocessorCount,
                memory_mib: info.memorySizeMB,
                name,
            });
        }
        if code != sys::nvmlReturn_enum_NVML_ERROR_FUNCTION_NOT_FOUND
            && code != sys::nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        {
            return Err(code);
        }
    }
    let f = sym!(nvml, nvmlDeviceGetGpuInstanceProfileInfo);
    // SAFETY: plain C struct filled by the driver.
    let mut info: sys::nvmlGpuInstanceProfileInfo_t = unsafe { mem::zeroed() };
    check(unsafe { f(dev, index, &mut info) })?;
    Ok(GiProfileInfo {
        id: info.id,
        slice_count: info.sliceCount,
        instance_count: info.instanceCount,
        multiprocessor_count: info.multiprocessorCount,
        memory_mib: info.memorySizeMB,
        name: None,
    })
}

fn c_name(raw: &[std::os::raw::c_char]) -> Option<String> {
    let bytes: Vec<u8> = raw.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    (!bytes.is_empty()).then(|| String::from_utf8_lossy(&bytes).into_owned())
}

/// Placements `(start, size)` in memory slices of GPU-instance profile ID `profile_id`.
pub(crate) fn gi_placements(nvml: &Nvml, dev: sys::nvmlDevice_t, profile_id: u32) -> RawResult<Vec<(u32, u32)>> {
    let f = sym!(nvml, nvmlDeviceGetGpuInstancePossiblePlacements_v2);
    let mut count: u32 = 0;
    // First call with no buffer asks for the count.
    let code = unsafe { f(dev, profile_id, std::ptr::null_mut(), &mut count) };
    if code != sys::nvmlReturn_enum_NVML_SUCCESS && code != sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE {
        return Err(code);
    }
    let mut buf = vec![sys::nvmlGpuInstancePlacement_t { start: 0, size: 0 }; count as usize];
    check(unsafe { f(dev, profile_id, buf.as_mut_ptr(), &mut count) })?;
    buf.truncate(count as usize);
    Ok(buf.iter().map(|p| (p.start, p.size)).collect())
}

/// How many more instances of profile ID `profile_id` fit next to the existing ones.
pub(crate) fn gi_remaining(nvml: &Nvml, dev: sys::nvmlDevice_t, profile_id: u32) -> RawResult<u32> {
    let f = sym!(nvml, nvmlDeviceGetGpuInstanceRemainingCapacity);
    let mut n = 0;
    check(unsafe { f(dev, profile_id, &mut n) })?;
    Ok(n)
}

/// A GPU instance as `nvmlGpuInstanceGetInfo` describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GiInfo {
    /// The handle (valid while the instance exists and NVML is initialised).
    pub handle: sys::nvmlGpuInstance_t,
    /// GPU-instance id.
    pub id: u32,
    /// Profile ID.
    pub profile_id: u32,
    /// Start memory slice.
    pub start: u32,
    /// Memory slices.
    pub size: u32,
}

/// The GPU instances of profile ID `profile_id`; at most `max` (the profile's instance count).
pub(crate) fn gpu_instances(nvml: &Nvml, dev: sys::nvmlDevice_t, profile_id: u32, max: u32) -> RawResult<Vec<GiInfo>> {
    let list = sym!(nvml, nvmlDeviceGetGpuInstances);
    let mut handles: Vec<sys::nvmlGpuInstance_t> = vec![std::ptr::null_mut(); max.max(1) as usize];
    let mut count = max.max(1);
    check(unsafe { list(dev, profile_id, handles.as_mut_ptr(), &mut count) })?;
    handles.truncate(count as usize);
    handles.into_iter().map(|h| gi_info(nvml, h)).collect()
}

/// `nvmlGpuInstanceGetInfo` of `gi`.
pub(crate) fn gi_info(nvml: &Nvml, gi: sys::nvmlGpuInstance_t) -> RawResult<GiInfo> {
    let f = sym!(nvml, nvmlGpuInstanceGetInfo);
    // SAFETY: plain C struct filled by the driver.
    let mut info: sys::nvmlGpuInstanceInfo_t = unsafe { mem::zeroed() };
    check(unsafe { f(gi, &mut info) })?;
    Ok(GiInfo {
        handle: gi,
        id: info.id,
        profile_id: info.profileId,
        start: info.placement.start,
        size: info.placement.size,
    })
}

/// The GPU instance with id `id`.
pub(crate) fn gpu_instance_by_id(nvml: &Nvml, dev: sys::nvmlDevice_t, id: u32) -> RawResult<sys::nvmlGpuInstance_t> {
    let f = sym!(nvml, nvmlDeviceGetGpuInstanceById);
    let mut gi: sys::nvmlGpuInstance_t = std::ptr::null_mut();
    check(unsafe { f(dev, id, &mut gi) })?;
    Ok(gi)
}

/// Creates a GPU instance of profile ID `profile_id` at memory slice `start` covering `size`.
pub(crate) fn create_gpu_instance(
    nvml: &Nvml,
    dev: sys::nvmlDevice_t,
    profile_id: u32,
    start: u32,
    size: u32,
) -> RawResult<sys::nvmlGpuInstance_t> {
    let f = sym!(nvml, nvmlDeviceCreateGpuInstanceWithPlacement);
    let placement = sys::nvmlGpuInstancePlacement_t { start, size };
    let mut gi: sys::nvmlGpuInstance_t = std::ptr::null_mut();
    check(unsafe { f(dev, profile_id, &placement, &mut gi) })?;
    Ok(gi)
}

/// Destroys GPU instance `gi` (its compute instances must be gone).
pub(crate) fn destroy_gpu_instance(nvml: &Nvml, gi: sys::nvmlGpuInstance_t) -> RawResult<()> {
    let f = sym!(nvml, nvmlGpuInstanceDestroy);
    check(unsafe { f(gi) })
}

/// The compute-instance profile ID covering `slices` compute slices of GPU instance `gi`
/// (the profile whose `sliceCount` is `slices`, shared engines).
pub(crate) fn ci_profile_for(nvml: &Nvml, gi: sys::nvmlGpuInstance_t, slices: u32) -> RawResult<u32> {
    let f = sym!(nvml, nvmlGpuInstanceGetComputeInstanceProfileInfo);
    for index in 0..sys::NVML_COMPUTE_INSTANCE_PROFILE_COUNT {
        // SAFETY: plain C struct filled by the driver.
        let mut info: sys::nvmlComputeInstanceProfileInfo_t = unsafe { mem::zeroed() };
        let code = unsafe { f(gi, index, sys::NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &mut info) };
        if code == sys::nvmlReturn_enum_NVML_SUCCESS && info.sliceCount == slices {
            return Ok(info.id);
        }
    }
    Err(sys::nvmlReturn_enum_NVML_ERROR_NOT_FOUND)
}

/// Creates a compute instance of compute-profile ID `ci_profile_id` in `gi`; returns its id.
pub(crate) fn create_compute_instance(nvml: &Nvml, gi: sys::nvmlGpuInstance_t, ci_profile_id: u32) -> RawResult<u32> {
    let create = sym!(nvml, nvmlGpuInstanceCreateComputeInstance);
    let info = sym!(nvml, nvmlComputeInstanceGetInfo_v2);
    let mut ci: sys::nvmlComputeInstance_t = std::ptr::null_mut();
    check(unsafe { create(gi, ci_profile_id, &mut ci) })?;
    // SAFETY: plain C struct filled by the driver.
    let mut out: sys::nvmlComputeInstanceInfo_t = unsafe { mem::zeroed() };
    check(unsafe { info(ci, &mut out) })?;
    Ok(out.id)
}

/// The compute instances of `gi`: `(id, handle)`, every compute profile asked.
pub(crate) fn compute_instances(
    nvml: &Nvml,
    gi: sys::nvmlGpuInstance_t,
) -> RawResult<Vec<(u32, sys::nvmlComputeInstance_t)>> {
    let prof = sym!(nvml, nvmlGpuInstanceGetComputeInstanceProfileInfo);
    let list = sym!(nvml, nvmlGpuInstanceGetComputeInstances);
    let info = sym!(nvml, nvmlComputeInstanceGetInfo_v2);
    let mut out = Vec::new();
    for index in 0..sys::NVML_COMPUTE_INSTANCE_PROFILE_COUNT {
        // SAFETY: plain C structs filled by the driver; buffers sized from the profile.
        let mut p: sys::nvmlComputeInstanceProfileInfo_t = unsafe { mem::zeroed() };
        if unsafe { prof(gi, index, sys::NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &mut p) }
            != sys::nvmlReturn_enum_NVML_SUCCESS
        {
            continue;
        }
        let mut handles: Vec<sys::nvmlComputeInstance_t> = vec![std::ptr::null_mut(); p.instanceCount.max(1) as usize];
        let mut count = p.instanceCount.max(1);
        check(unsafe { list(gi, p.id, handles.as_mut_ptr(), &mut count) })?;
        for &h in handles.iter().take(count as usize) {
            let mut i: sys::nvmlComputeInstanceInfo_t = unsafe { mem::zeroed() };
            check(unsafe { info(h, &mut i) })?;
            if !out.iter().any(|(id, _)| *id == i.id) {
                out.push((i.id, h));
            }
        }
    }
    out.sort_by_key(|(id, _)| *id);
    Ok(out)
}

/// Destroys compute instance `ci`.
pub(crate) fn destroy_compute_instance(nvml: &Nvml, ci: sys::nvmlComputeInstance_t) -> RawResult<()> {
    let f = sym!(nvml, nvmlComputeInstanceDestroy);
    check(unsafe { f(ci) })
}

/// The GPU-instance and compute-instance ids of MIG device handle `mig`.
pub(crate) fn mig_device_ids(nvml: &Nvml, mig: sys::nvmlDevice_t) -> RawResult<(u32, u32)> {
    let gi = sym!(nvml, nvmlDeviceGetGpuInstanceId);
    let ci = sym!(nvml, nvmlDeviceGetComputeInstanceId);
    let (mut g, mut c) = (0, 0);
    check(unsafe { gi(mig, &mut g) })?;
    check(unsafe { ci(mig, &mut c) })?;
    Ok((g, c))
}
