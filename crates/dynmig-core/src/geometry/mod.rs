//! MIG geometry: profile tables per GPU model, valid layouts, placements, and the instance
//! changes that move a GPU from one layout to another.
//!
//! Placement rules (NVIDIA Multi-Instance GPU User Guide, "A100 MIG placements"):
//! an instance of a profile starts at one of the profile's allowed memory slices and covers
//! `memory_slices` consecutive slices; instances never share a memory slice; the compute
//! slices of all instances add up to at most the GPU's compute slices; a profile has at
//! most `max_instances` instances; at most one `+me` instance per GPU. Nothing here assumes
//! a slice count: each model says its own ([`GpuModel::compute_slices`],
//! [`GpuModel::memory_slices`], at most [`MAX_SLICES`]).

mod enumerate;
mod layout;
mod models;
mod nvml;
pub mod place;
mod text;
mod transition;

pub use enumerate::{
    addable_layouts, all_layouts, all_layouts_with, classic_profiles, distinct_multisets, distinct_multisets_with,
    layout_order, maximal_layouts, maximal_layouts_with,
};
pub use layout::{NodeLayout, Placed, ProfileCounts};
pub use models::{
    model_by_name, model_by_pci_id, model_for_device, model_names, nominal_mib, BoardPower, GpuModel, ProfileSpec,
    A100_40GB, A100_80GB, A100_IDLE_W, A100_TDP_W, A30_24GB, B200_180GB, B300_269GB, DOUBLE_MEMORY_1G_PROFILE_ID,
    GB200_186GB, GH200_144GB, GH200_96GB, H100_80GB, H100_NVL_94GB, H200_141GB, MAX_PROFILES, MAX_SLICES, MODELS,
    NVIDIA_MIG_PARTED_DEFAULT_CONFIG, NVML_PROBE_2026_11_26, RTX_PRO_5000_48GB, RTX_PRO_6000_96GB,
};
pub use nvml::{cross_check, NvmlGeometry, NvmlProfile};
pub use place::{check_instances, place, place_around, LayoutError};
pub use text::{layout_examples, LayoutParseError};
pub use transition::{destroy_all_and_recreate, plan_transition, Transition, TransitionError};
