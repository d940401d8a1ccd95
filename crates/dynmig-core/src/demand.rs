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
    /// Adds `count` pending instances of `profile` (saturating at `u32::MAX`).
    pub fn add_pending(&mut self, profile: &str, count: u32) {
        if count > 0 {
            let c = self.pending.entry(profile.to_string()).or_insert(0);
            *c = c.saturating_add(count);
        }
    }

    /// Adds `count` instances of `profile` that a repartition under way will bring
    /// (saturating at `u32::MAX`).
    pub fn add_incoming(&mut self, profile: &str, count: u32) {
        if count > 0 {
            let c = self.incoming.entry(profile.to_string()).or_insert(0);
            *c = c.saturating_add(count);
        }
    }

    /// Total pending instances (saturating at `u32::MAX`).
    pub fn total_pending(&self) -> u32 {
        self.pending.values().fold(0u32, |a, &n| a.saturating_add(n))
    }
}

impl Demand {
    /// Accounts for multi-instance jobs, which need all their instances on one node: a node's
    /// free instances of a profile cannot serve a pending job that asks for more of them than
    /// the node has free. Such stranded instances are added to the pending count, so that the
    /// policy does not take them as supply for that job (found by the simulator's invariant
    /// tests: free whole GPUs scattered over nodes left a 2-GPU job waiting forever).
    ///
    /// `widest`: per profile, the largest instance count one pending job asks for;
    /// `node_free`: per node, its free instances per profile.
    pub fn add_stranded<'a>(
        &mut self,
        widest: &BTreeMap<String, u32>,
        node_free: impl IntoIterator<Item = &'a BTreeMap<&'static str, u32>>,
    ) {
        for free in node_free {
            for (p, n) in free {
                if widest.get(*p).is_some_and(|w| *w > 1 && n < w) {
                    self.add_pending(p, *n);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_instances_scattered_over_nodes_do_not_serve_a_wide_job() {
        let mut d = Demand::default();
        d.add_pending("7g.80gb", 2);
        let widest: BTreeMap<String, u32> = [("7g.80gb".to_string(), 2)].into();
        let one_free: BTreeMap<&'static str, u32> = [("7g.80gb", 1)].into();
        let two_free: BTreeMap<&'static str, u32> = [("7g.80gb", 2)].into();
        let mut scattered = d.clone();
        scattered.add_stranded(&widest, [&one_free, &one_free]);
        assert_eq!(scattered.pending["7g.80gb"], 4, "two stranded instances cancel nothing");
        let mut together = d.clone();
        together.add_stranded(&widest, [&two_free]);
        assert_eq!(together.pending["7g.80gb"], 2, "a node with both free serves the job");
    }

    #[test]
    fn demand_counters_saturate_instead_of_overflowing() {
        let mut d = Demand::default();
        d.add_pending("1g.10gb", u32::MAX);
        d.add_pending("1g.10gb", 5);
        d.add_pending("2g.20gb", u32::MAX);
        d.add_incoming("1g.10gb", u32::MAX);
        d.add_incoming("1g.10gb", 1);
        assert_eq!(d.pending["1g.10gb"], u32::MAX);
        assert_eq!(d.incoming["1g.10gb"], u32::MAX);
        assert_eq!(d.total_pending(), u32::MAX);
    }
}
