//! Slurm's scheduling rules in the engine: typed placement, the EASY reservation of the
//! highest-priority blocked job and the backfill test against it, planned with time limits as
//! Slurm's backfill scheduler does, and the what-ifs that depart from Slurm. Docs:
//! docs/model.md ("Placement").
//!
//! Slurm's defaults are those of SchedMD's slurm.conf manual
//! (<https://slurm.schedmd.com/slurm.conf.html>, `SchedulerParameters`): `bf_interval` 30 s,
//! `bf_window` 1440 min, `bf_resolution` 60 s (also `BACKFILL_INTERVAL`,
//! `BACKFILL_WINDOW`, `BACKFILL_RESOLUTION` in Slurm's `src/plugins/sched/backfill/backfill.c`).

use crate::cluster::Cluster;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// `bf_interval`: seconds between two backfill plans (Slurm's default, 30).
pub const BF_INTERVAL_S: f64 = 30.0;
/// `bf_window`: how far ahead backfill plans, s (Slurm's default, 1440 minutes).
pub const BF_WINDOW_S: f64 = 1440.0 * 60.0;
/// `bf_resolution`: the granularity of backfill's times, s (Slurm's default, 60).
pub const BF_RESOLUTION_S: f64 = 60.0;
/// `bf_max_job_test`: jobs backfill tries per plan (Slurm's default, 500: SchedMD's
/// slurm.conf manual, `SchedulerParameters`).
pub const BF_MAX_JOB_TEST: usize = 500;

/// Departures from Slurm's scheduling, for what-if runs (none by default). Neither is what a
/// Slurm cluster does; each exists to measure what the simpler rule of earlier results hid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct WhatIfs {
    /// `spill-up`: a single-GPU job may start on any free instance with at least the memory
    /// of the profile it asks for (smallest first), and asks for the smallest profile of the
    /// model that holds it whatever the layouts offer (the simulator's rule before typed
    /// placement). Slurm runs a typed GRES job (`gpu:3g.20gb:1`) only on its own type.
    pub spill_up: bool,
    /// `clairvoyant-backfill`: the EASY reservation and the backfill test use the jobs' true
    /// end times instead of their time limits (the simulator's rule before; Slurm knows only
    /// the limits).
    pub clairvoyant_backfill: bool,
}

impl WhatIfs {
    /// Every what-if's name, in the order of [`fmt::Display`].
    pub const NAMES: [&'static str; 2] = ["spill-up", "clairvoyant-backfill"];

    /// Whether none is on (Slurm's rules).
    pub fn is_slurm(&self) -> bool {
        *self == Self::default()
    }
}

impl fmt::Display for WhatIfs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let on: Vec<&str> = [self.spill_up, self.clairvoyant_backfill]
            .iter()
            .zip(Self::NAMES)
            .filter(|(b, _)| **b)
            .map(|(_, n)| n)
            .collect();
        if on.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&on.join(","))
        }
    }
}

impl FromStr for WhatIfs {
    type Err = String;
    /// Parses a comma-separated list of what-if names (`none` or empty: none).
    fn from_str(s: &str) -> Result<Self, String> {
        let mut w = Self::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part.to_ascii_lowercase().as_str() {
                "none" => {}
                "spill-up" => w.spill_up = true,
                "clairvoyant-backfill" => w.clairvoyant_backfill = true,
                o => {
                    return Err(format!(
                        "unknown what-if '{o}'; allowed: none, {}",
                        Self::NAMES.join(", ")
                    ))
                }
            }
        }
        Ok(w)
    }
}

/// The EASY reservation of the highest-priority blocked job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resv {
    /// A multi-GPU job: the full-GPU instances of `node` are wanted from `shadow_ms` on.
    Node {
        /// The node.
        node: usize,
        /// When enough of its full-GPU instances are free, ms (quantised).
        shadow_ms: i64,
    },
    /// A single-GPU job: the instance `key` of its type is wanted from `shadow_ms` on.
    Inst {
        /// The instance's key.
        key: u32,
        /// When its job's time limit ends, ms (quantised).
        shadow_ms: i64,
    },
}

impl Resv {
    /// When the reserved resources are wanted, ms.
    pub fn shadow_ms(&self) -> i64 {
        match self {
            Resv::Node { shadow_ms, .. } | Resv::Inst { shadow_ms, .. } => *shadow_ms,
        }
    }

    /// Whether a job starting now on the instance `key` (of profile `p`) and ending, as
    /// backfill plans it, at `end_ms()` (quantised) leaves the reservation intact: it takes
    /// none of the reserved resources (the full-GPU instances of the reserved node, or the
    /// reserved instance), or it ends by the shadow time.
    pub fn allows(&self, c: &Cluster, key: u32, p: usize, end_ms: impl FnOnce() -> i64) -> bool {
        match *self {
            Resv::Node { node, shadow_ms } => {
                p != c.full || c.node_of((key / 8) as usize) != node || end_ms() <= shadow_ms
            }
            Resv::Inst { key: k, shadow_ms } => key != k || end_ms() <= shadow_ms,
        }
    }
}

/// `t_ms` rounded down to a multiple of `res_ms` (Slurm's backfill keeps its times at
/// `bf_resolution`: `_add_reservation` rounds start and end down to it). `res_ms` <= 1: as is.
pub fn quantise(t_ms: i64, res_ms: i64) -> i64 {
    if res_ms <= 1 || t_ms == i64::MAX {
        t_ms
    } else {
        t_ms.div_euclid(res_ms) * res_ms
    }
}

/// The node where `n` full-GPU instances free soonest, and when (unquantised): per node,
/// its free full-GPU instances on up GPUs ([`Cluster::free_full`]) and the sorted planned
/// ends of the jobs on its busy ones ([`Cluster::full_ends`]). `None` when no node can hold
/// `n` full-GPU instances now.
pub fn node_reservation(c: &Cluster, n: usize) -> Option<(usize, i64)> {
    let mut best: Option<(i64, usize)> = None;
    for node in 0..c.nodes() {
        let free = usize::from(c.free_full[node]);
        let ends = &c.full_ends[node];
        if free + ends.len() < n || free >= n {
            continue;
        }
        let shadow = ends[n - free - 1];
        if best.is_none_or(|(s, _)| shadow < s) {
            best = Some((shadow, node));
        }
    }
    best.map(|(s, n)| (n, s))
}

/// The busy instance of profile `p` (on an up GPU not held for a repartition, whose layout
/// may change) whose job ends first as backfill plans it ([`Cluster::busy_ends`]), and when.
/// `None` when there is none (no instance of the type, or all on held GPUs).
pub fn instance_reservation(c: &Cluster, p: usize) -> Option<(u32, i64)> {
    c.busy_ends[p]
        .iter()
        .find(|(_, key)| c.hold[(*key / 8) as usize].is_none())
        .map(|&(end, key)| (key, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_ifs_parse_and_print() {
        assert!("none".parse::<WhatIfs>().unwrap().is_slurm());
        assert!("".parse::<WhatIfs>().unwrap().is_slurm());
        let w: WhatIfs = "clairvoyant-backfill, spill-up".parse().unwrap();
        assert!(w.spill_up && w.clairvoyant_backfill);
        assert_eq!(w.to_string(), "spill-up,clairvoyant-backfill");
        assert_eq!(w.to_string().parse::<WhatIfs>().unwrap(), w);
        assert!("spill".parse::<WhatIfs>().unwrap_err().contains("spill-up"));
    }

    #[test]
    fn times_round_down_to_the_resolution() {
        assert_eq!(quantise(1_010_000, 60_000), 960_000);
        assert_eq!(quantise(960_000, 60_000), 960_000);
        assert_eq!(quantise(1_010_123, 0), 1_010_123);
        assert_eq!(quantise(i64::MAX, 60_000), i64::MAX);
    }
}
