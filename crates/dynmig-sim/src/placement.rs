//! Placement of queued jobs on free instances inside the current layouts: which job goes
//! next, and on which instance. Every rule runs a single-GPU job only on an instance of its
//! type, as Slurm runs a typed GRES job, unless the `spill-up` what-if is on
//! ([`crate::backfill::WhatIfs`]). Docs: docs/model.md ("Placement").

use crate::model::Job;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A placement rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Placement {
    /// Slurm-like: priority order (release time, then submit order) with backfill: a job that
    /// cannot start does not hold back the jobs behind it, except that the first blocked job
    /// that can have a start within `bf_window` holds an EASY reservation, planned with the
    /// running jobs' time limits: a multi-GPU job on the node whose full-GPU instances free
    /// soonest, a single-GPU job on the instance of its type that frees soonest (later jobs
    /// may use them only if their time limit ends before; [`crate::backfill`]). Each job
    /// takes a free instance of its type (with the `spill-up` what-if, the smallest that
    /// holds it), lowest GPU first.
    Slurm,
    /// Earliest due date first, on the slowest fitting instance (EDF-SS in the research).
    Edf,
    /// Release order, on the fastest fitting free instance (earliest finish time).
    Eft,
    /// Largest memory x GPUs first, smallest fitting instance.
    LargestFirst,
    /// Smallest memory x GPUs first, smallest fitting instance.
    SmallestFirst,
    /// Random order, random fitting instance (seeded).
    Random,
}

/// Every placement rule, in report order.
pub const ALL_PLACEMENTS: [Placement; 6] = [
    Placement::Slurm,
    Placement::Edf,
    Placement::Eft,
    Placement::LargestFirst,
    Placement::SmallestFirst,
    Placement::Random,
];

impl Placement {
    /// The queue key of a job (lower goes first; ties by job id). `random` is a fresh draw.
    pub fn key(self, job: &Job, random: i64) -> i64 {
        let size = (job.mem_mib as i64) * i64::from(job.gpus);
        match self {
            Placement::Slurm | Placement::Eft => (job.release * 1000.0).round() as i64,
            Placement::Edf => (job.due * 1000.0).round() as i64,
            Placement::LargestFirst => -size,
            Placement::SmallestFirst => size,
            Placement::Random => random,
        }
    }

    /// Whether the instance search goes from the largest fitting profile down (EFT).
    pub fn fastest_first(self) -> bool {
        self == Placement::Eft
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Placement::Slurm => "slurm",
            Placement::Edf => "edf",
            Placement::Eft => "eft",
            Placement::LargestFirst => "largest-first",
            Placement::SmallestFirst => "smallest-first",
            Placement::Random => "random",
        })
    }
}

impl FromStr for Placement {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        ALL_PLACEMENTS
            .iter()
            .copied()
            .find(|p| p.to_string() == s.to_ascii_lowercase())
            .ok_or_else(|| {
                format!("unknown placement '{s}'; allowed: slurm, edf, eft, largest-first, smallest-first, random")
            })
    }
}
