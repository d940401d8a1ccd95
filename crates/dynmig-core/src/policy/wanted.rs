//! Wanted node layouts, and which nodes take them: what a policy that has chosen a cluster
//! layout mix (a multiset of node layouts) uses to turn it into [`Repartition`]s.

use super::Repartition;
use crate::geometry::{NodeLayout, ProfileCounts};
use crate::snapshot::NodeSnapshot;
use std::collections::BTreeMap;
use std::time::Duration;

/// How many nodes may get a new plan now: at most `max_concurrent` away (draining or
/// reconfiguring with no plan left) and at most `max_planned` with a plan, counting those
/// already so among `nodes`.
pub fn change_budget(nodes: &[NodeSnapshot], max_concurrent: usize, max_planned: usize) -> usize {
    let away = nodes.iter().filter(|n| n.repartitioning && n.planned.is_none()).count();
    let planned = nodes.iter().filter(|n| n.planned.is_some()).count();
    max_concurrent
        .saturating_sub(away)
        .min(max_planned.saturating_sub(planned))
}

/// Instance creates and destroys to go from `a` to `b` (per GPU, counts only).
pub fn distance(a: &NodeLayout, b: &NodeLayout) -> u32 {
    a.gpus
        .iter()
        .zip(&b.gpus)
        .map(|(x, y)| {
            let mut d = 0;
            for (p, n) in x.iter() {
                d += n.abs_diff(y.count(p));
            }
            for (p, n) in y.iter() {
                if x.count(p) == 0 {
                    d += n;
                }
            }
            d
        })
        .sum()
}

/// Each distinct item of `items` (by `same`) with how many times it comes, in order of first
/// appearance.
fn count_distinct<T: Copy>(items: impl IntoIterator<Item = T>, same: impl Fn(T, T) -> bool) -> Vec<(T, usize)> {
    let mut distinct: Vec<(T, usize)> = Vec::new();
    for item in items {
        match distinct.iter_mut().find(|(x, _)| same(*x, item)) {
            Some((_, n)) => *n += 1,
            None => distinct.push((item, 1)),
        }
    }
    distinct
}

/// Wanted node layouts: each distinct layout and how many nodes should still get it (the
/// planner's mix, or a searched cluster layout).
#[derive(Debug, Default)]
pub struct Wanted(Vec<(NodeLayout, usize)>);

impl Wanted {
    /// One node of layout `k` on every GPU per entry of `kinds`.
    pub fn new<'a>(kinds: impl IntoIterator<Item = &'a ProfileCounts>, gpn: usize) -> Self {
        // A mix names thousands of nodes but few layouts, mostly as the same references
        // (equal without comparing them): a node layout is built once per distinct one.
        let same = |x: &ProfileCounts, k: &ProfileCounts| std::ptr::eq(x, k) || x == k;
        Wanted(
            count_distinct(kinds, same)
                .into_iter()
                .map(|(k, n)| {
                    (
                        NodeLayout {
                            gpus: vec![k.clone(); gpn],
                        },
                        n,
                    )
                })
                .collect(),
        )
    }

    /// Wanted layouts from whole node layouts (`layouts[i]` one node each).
    pub fn from_layouts(layouts: &[NodeLayout]) -> Self {
        Wanted(
            count_distinct(layouts, |a, b| a == b)
                .into_iter()
                .map(|(l, n)| (l.clone(), n))
                .collect(),
        )
    }

    /// Whether no layout is wanted any more.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|(_, n)| *n == 0)
    }

    /// Takes one `l` if it is still wanted.
    pub fn take(&mut self, l: &NodeLayout) -> bool {
        match self.0.iter_mut().find(|(x, n)| *n > 0 && x == l) {
            Some((_, n)) => {
                *n -= 1;
                true
            }
            None => false,
        }
    }

    /// Takes the wanted layout closest to `l` (fewest instance changes; first on ties).
    pub fn take_nearest(&mut self, l: &NodeLayout) -> Option<NodeLayout> {
        let i = (0..self.0.len())
            .filter(|i| self.0[*i].1 > 0)
            .min_by_key(|i| (distance(l, &self.0[*i].0), *i))?;
        self.0[i].1 -= 1;
        Some(self.0[i].0.clone())
    }

    /// Moves `nodes` towards the wanted layouts: nodes already in (or planned to) a wanted
    /// layout keep it; a plan no longer wanted is cancelled (the node keeps its layout when
    /// that is wanted) or moved to the nearest wanted layout; then the nodes whose running
    /// work ends soonest ([`NodeSnapshot::work_ends_in`]; name breaks ties), older than
    /// `min_age` and ending within `max_wait`, take the nearest wanted layout, at most
    /// `budget` of them. Unavailable nodes count with their layout and are left alone.
    pub fn assign(
        mut self,
        nodes: &[&NodeSnapshot],
        budget: &mut usize,
        min_age: Duration,
        max_wait: Duration,
        out: &mut Vec<Repartition>,
    ) {
        let mut free_nodes: Vec<&NodeSnapshot> = Vec::new();
        let mut stale_plans: Vec<&NodeSnapshot> = Vec::new();
        for n in nodes {
            if n.unavailable {
                self.take(&n.layout);
            } else if let Some(t) = &n.planned {
                if !self.take(t) {
                    stale_plans.push(n);
                }
            } else if !self.take(&n.layout) {
                free_nodes.push(n);
            }
        }
        for n in stale_plans {
            let target = if self.take(&n.layout) {
                Some(n.layout.clone())
            } else {
                self.take_nearest(&n.layout)
            };
            if let Some(target) = target {
                out.push(Repartition {
                    node: n.name.clone(),
                    target,
                    serves: BTreeMap::new(),
                });
            }
        }
        if *budget == 0 || self.is_empty() {
            return;
        }
        // Nodes too young or busy too long are never taken: they are left out before sorting.
        free_nodes.retain(|n| n.layout_age >= min_age && n.work_ends_in <= max_wait);
        free_nodes.sort_by(|a, b| a.work_ends_in.cmp(&b.work_ends_in).then(a.name.cmp(&b.name)));
        for n in free_nodes {
            if *budget == 0 || self.is_empty() {
                break;
            }
            let Some(target) = self.take_nearest(&n.layout) else {
                break;
            };
            out.push(Repartition {
                node: n.name.clone(),
                target,
                serves: BTreeMap::new(),
            });
            *budget -= 1;
        }
    }
}
