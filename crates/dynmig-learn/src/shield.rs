//! The learned policy's shield: which of a node's actions are invalid because they would leave
//! waiting jobs with no node that can ever run them. A model choosing freely can partition
//! every node into small instances while whole-GPU jobs wait (a 25-minute model did, on days
//! it was not trained on: 502 jobs never ran); masking such actions is the "invalid actions
//! masked" of the action space, the same mechanism as the node group's `allowed_layouts`
//! (shielding: Alshiekh et al., "Safe Reinforcement Learning via Shielding", AAAI 2018).
//!
//! Rules, for each profile with pending instances (a *need*), counting the nodes of the
//! model's GPU model that *offer* it in the layout they have or will have (a planned or running
//! repartition's target), unless the node is away for another reason:
//! 1. **keep what is needed**: a change that takes the last offering node away from a need is
//!    masked;
//! 2. **bring what is missing**: while a need has no offering node, keep and every layout that
//!    does not offer it are masked on the node asked first (whose work ends soonest), unless
//!    that would mask every action.
//!
//! A node *offers* a need with an instance that holds it (at least its compute slices and
//! memory), as the simulator runs a job; with `exact_profiles` (the controller: Slurm runs a
//! job only on the GRES type it asked for, as the planner's `exact_profiles`) only with an
//! instance of that very profile, unless no catalogue layout has it (on A100-40GB `1g.10gb`,
//! which the catalogue's smallest-memory profiles leave out).

use crate::catalogue::Catalogue;
use dynmig_core::demand::Demand;
use dynmig_core::geometry::{NodeLayout, ProfileCounts, ProfileSpec};
use dynmig_core::policy::NodeSnapshot;

/// The shield of one decision (module docs): the needs and how many nodes offer each, kept up
/// to date as the decision's actions are taken ([`Shield::take`]).
#[derive(Debug, Clone)]
pub struct Shield<'c> {
    cat: &'c Catalogue,
    /// Profiles with pending instances.
    needs: Vec<&'static ProfileSpec>,
    /// Per need, nodes that offer it.
    serving: Vec<u32>,
    /// Per need, whether some catalogue layout has that profile (offered exactly).
    exact: Vec<bool>,
    /// Per catalogue layout, which needs it offers.
    offers: Vec<Vec<bool>>,
}

/// Whether an instance of `inst` offers `need` (module docs).
fn offers(inst: &ProfileSpec, need: &ProfileSpec, exact: bool) -> bool {
    if exact {
        inst.name == need.name
    } else {
        inst.compute_slices >= need.compute_slices && inst.memory_mib >= need.memory_mib
    }
}

impl<'c> Shield<'c> {
    /// The shield for `nodes` and `demand` (its `pending`), for the nodes of `cat`'s model;
    /// `exact_profiles`: a need is offered only by its own profile where the catalogue has it
    /// (module docs).
    pub fn new(cat: &'c Catalogue, nodes: &[NodeSnapshot], demand: &Demand, exact_profiles: bool) -> Self {
        let needs: Vec<&'static ProfileSpec> = demand
            .pending
            .iter()
            .filter(|(_, n)| **n > 0)
            .filter_map(|(p, _)| cat.model.profile(p))
            .collect();
        let exact: Vec<bool> = needs
            .iter()
            .map(|n| exact_profiles && cat.layouts.iter().any(|l| l.iter().any(|(p, c)| c > 0 && p == n.name)))
            .collect();
        let by_layout = cat
            .layouts
            .iter()
            .map(|l| Self::offered(cat, &needs, &exact, [l]))
            .collect();
        let mut serving = vec![0u32; needs.len()];
        for n in nodes.iter().filter(|n| n.model.name == cat.model.name) {
            if n.unavailable && !n.repartitioning {
                continue;
            }
            let target: &NodeLayout = n.planned.as_ref().unwrap_or(&n.layout);
            let mut offered = Self::offered(cat, &needs, &exact, target.gpus.iter());
            for (p, c) in &n.incoming {
                if let Some(spec) = cat.model.profile(p).filter(|_| *c > 0) {
                    for (i, need) in needs.iter().enumerate() {
                        offered[i] |= offers(spec, need, exact[i]);
                    }
                }
            }
            for (s, o) in serving.iter_mut().zip(offered) {
                *s += u32::from(o);
            }
        }
        Self {
            cat,
            needs,
            serving,
            exact,
            offers: by_layout,
        }
    }

    /// Which of `needs` the GPU layouts `gpus` offer.
    fn offered<'a>(
        cat: &Catalogue,
        needs: &[&'static ProfileSpec],
        exact: &[bool],
        gpus: impl IntoIterator<Item = &'a ProfileCounts>,
    ) -> Vec<bool> {
        let mut out = vec![false; needs.len()];
        for g in gpus {
            for (p, c) in g.iter() {
                let Some(spec) = cat.model.profile(p).filter(|_| c > 0) else {
                    continue;
                };
                for ((o, need), x) in out.iter_mut().zip(needs).zip(exact) {
                    *o |= offers(spec, need, *x);
                }
            }
        }
        out
    }

    /// The actions of a node now in catalogue layout `current` (`None`: another layout, with
    /// `current_offers` what it offers): 1.0 allowed, 0.0 masked; action 0 keeps, action `k`
    /// takes catalogue layout `k - 1`. `allowed[k]`: whether the node group allows catalogue
    /// layout `k`. `first`: the node is the first asked in this decision (rule 2).
    pub fn mask(&self, current: Option<usize>, current_offers: &[bool], allowed: &[bool], first: bool) -> Vec<f32> {
        let mut mask = vec![1.0f32];
        for (k, ok) in allowed.iter().enumerate() {
            let valid = *ok
                && current != Some(k)
                && !self
                    .needs
                    .iter()
                    .enumerate()
                    .any(|(i, _)| current_offers[i] && !self.offers[k][i] && self.serving[i] <= 1);
            mask.push(if valid { 1.0 } else { 0.0 });
        }
        if first {
            let missing: Vec<usize> = (0..self.needs.len()).filter(|i| self.serving[*i] == 0).collect();
            if !missing.is_empty() {
                let mut forced = mask.clone();
                forced[0] = 0.0;
                for (k, m) in forced.iter_mut().enumerate().skip(1) {
                    if !missing.iter().any(|i| self.offers[k - 1][*i]) {
                        *m = 0.0;
                    }
                }
                if forced.iter().any(|m| *m > 0.0) {
                    return forced;
                }
            }
        }
        mask
    }

    /// What the node's layout `layout` offers of the needs.
    pub fn offers_of(&self, layout: &NodeLayout) -> Vec<bool> {
        Self::offered(self.cat, &self.needs, &self.exact, layout.gpus.iter())
    }

    /// Counts a node that offered `before` and now takes catalogue layout `k`.
    pub fn take(&mut self, before: &[bool], k: usize) {
        for (i, s) in self.serving.iter_mut().enumerate() {
            match (before[i], self.offers[k][i]) {
                (true, false) => *s = s.saturating_sub(1),
                (false, true) => *s += 1,
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dynmig_core::geometry::A100_40GB;
    use std::sync::Arc;
    use std::time::Duration;

    fn node(name: &str, cat: &Catalogue, k: usize) -> NodeSnapshot {
        NodeSnapshot {
            name: name.into(),
            model: &A100_40GB,
            layout: cat.node_layout(k, 8),
            allowed: Arc::from(cat.layouts.clone()),
            busy: Default::default(),
            running: Default::default(),
            unavailable: false,
            repartitioning: false,
            layout_age: Duration::from_secs(3600),
            incoming: Default::default(),
            schedulable_free: Default::default(),
            work_ends_in: Duration::ZERO,
            planned: None,
            version: 0,
        }
    }

    fn demand(p: &str, n: u32) -> Demand {
        let mut d = Demand::default();
        d.add_pending(p, n);
        d
    }

    #[test]
    fn the_last_node_of_whole_gpus_may_not_leave_while_whole_gpu_jobs_wait() {
        let cat = Catalogue::for_model(&A100_40GB);
        let seven = cat.layouts.len() - 1; // 7x1g
        let nodes = vec![node("a", &cat, 0), node("b", &cat, seven)];
        let s = Shield::new(&cat, &nodes, &demand("7g.40gb", 2), false);
        let all = vec![true; cat.layouts.len()];
        let m = s.mask(Some(0), &s.offers_of(&nodes[0].layout), &all, false);
        assert_eq!(m[0], 1.0, "keep stays allowed");
        assert_eq!(m[1], 0.0, "the current layout is no change");
        assert!(
            m[2..].iter().all(|x| *x == 0.0),
            "every partitioned layout is masked: {m:?}"
        );
        // With a second whole node, the first may change.
        let nodes = vec![node("a", &cat, 0), node("c", &cat, 0)];
        let s = Shield::new(&cat, &nodes, &demand("7g.40gb", 2), false);
        let m = s.mask(Some(0), &s.offers_of(&nodes[0].layout), &all, false);
        assert!(m[2..].iter().all(|x| *x == 1.0), "{m:?}");
    }

    #[test]
    fn a_need_no_catalogue_layout_has_is_offered_by_instances_that_hold_it() {
        let cat = Catalogue::for_model(&A100_40GB);
        assert!(!cat.names().iter().any(|n| n.contains("1g.10gb")));
        let s = Shield::new(&cat, &[], &demand("1g.10gb", 1), true);
        let whole = s.offers_of(&cat.node_layout(0, 8));
        let small = s.offers_of(&cat.node_layout(cat.layouts.len() - 1, 8));
        assert_eq!(
            (whole, small),
            (vec![true], vec![false]),
            "7g.40gb holds a 1g.10gb job, 1g.5gb does not"
        );
        let s = Shield::new(&cat, &[], &demand("3g.20gb", 1), true);
        assert_eq!(
            s.offers_of(&cat.node_layout(0, 8)),
            vec![false],
            "3g.20gb is offered exactly"
        );
        // As the simulator runs jobs, a whole GPU holds it.
        let s = Shield::new(&cat, &[], &demand("3g.20gb", 1), false);
        assert_eq!(s.offers_of(&cat.node_layout(0, 8)), vec![true]);
    }

    #[test]
    fn a_need_no_node_offers_forces_the_first_node_asked_toward_one_that_does() {
        let cat = Catalogue::for_model(&A100_40GB);
        let seven = cat.layouts.len() - 1;
        let nodes = vec![node("a", &cat, seven), node("b", &cat, seven)];
        let mut s = Shield::new(&cat, &nodes, &demand("3g.20gb", 1), true);
        let all = vec![true; cat.layouts.len()];
        let before = s.offers_of(&nodes[0].layout);
        let m = s.mask(Some(seven), &before, &all, true);
        assert_eq!(m[0], 0.0, "keep is masked");
        for (k, l) in cat.layouts.iter().enumerate() {
            let offers = l.iter().any(|(p, _)| p == "3g.20gb");
            assert_eq!(m[k + 1] == 1.0, offers && k != seven, "{l}: {m:?}");
        }
        // The next node asked is free again once the first offers the need.
        s.take(&before, 1); // 4g.20gb+3g.20gb
        let m = s.mask(Some(seven), &s.offers_of(&nodes[1].layout), &all, true);
        assert_eq!(m[0], 1.0);
        // A node group that allows no layout offering the need is not forced.
        let only_small: Vec<bool> = (0..cat.layouts.len()).map(|k| k == seven).collect();
        let s = Shield::new(&cat, &nodes, &demand("3g.20gb", 1), true);
        let m = s.mask(Some(seven), &before, &only_small, true);
        assert_eq!(m[0], 1.0, "keep stays when nothing else is allowed: {m:?}");
    }
}
