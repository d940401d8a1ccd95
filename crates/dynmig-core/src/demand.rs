//! Demand: how many instances of each MIG profile pending jobs need.

use std::collections::BTreeMap;

/// Pending demand per MIG profile (GRES type), in instances.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Demand {
    /// Instances per profile that pending jobs ask for (a job asking `gpu:2g.20gb:2` adds 2).
    pub pending: BTreeMap<String, u32>,
    /// Instances per profile that nodes now repartitioning will bring (their target layouts).
    pub incoming: BTreeMap<String, u32>,
}

impl Demand {
    /// Adds `count` pending instances of `profile`.
    pub fn add_pending(&mut self, profile: &str, count: u32) {
        if count > 0 {
            *self.pending.entry(profile.to_string()).or_insert(0) += count;
        }
    }

    /// Adds `count` instances of `profile` that a repartition under way will bring.
    pub fn add_incoming(&mut self, profile: &str, count: u32) {
        if count > 0 {
            *self.incoming.entry(profile.to_string()).or_insert(0) += count;
        }
    }

    /// Total pending instances.
    pub fn total_pending(&self) -> u32 {
        self.pending.values().sum()
    }
}
