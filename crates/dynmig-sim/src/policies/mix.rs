//! Turning a demand mix into per-GPU layouts for a whole cluster (used by the static "mix"
//! candidate, the twice-daily pairs and the learned time-of-day schedule).

use dynmig_core::geometry::{GpuModel, NodeLayout, ProfileCounts, ProfileSpec};

/// Per-GPU layouts for `nodes` nodes of `gpn` GPUs serving a demand mix.
///
/// `demand[p]` is the mean number of instances of `profiles[p]` in use (single-GPU jobs,
/// each counted at its smallest fitting profile); `multi_gpus` the mean number of whole GPUs
/// multi-GPU jobs use. Steps:
/// 1. `ceil(multi_gpus / gpn)` nodes (at least one when `multi_gpus > 0`) get whole GPUs.
/// 2. The single-GPU demand is scaled so that its compute slices fill the other GPUs.
/// 3. GPU by GPU, the candidate layout serving the most remaining demand (weighted by compute
///    slices) is taken and its instances are subtracted; ties go to the earlier candidate
///    (candidates come in NVIDIA's table order, `1x7g` first).
pub fn mix_for_demand(
    model: &GpuModel,
    profiles: &[&'static ProfileSpec],
    nodes: usize,
    gpn: usize,
    demand: &[f64],
    multi_gpus: f64,
    candidates: &[ProfileCounts],
) -> Vec<NodeLayout> {
    let full = ProfileCounts::parse(model, &format!("1x{}", model.full_profile().name)).expect("full profile parses");
    let whole = if multi_gpus > 0.0 {
        ((multi_gpus / gpn as f64).ceil() as usize).clamp(1, nodes)
    } else {
        0
    };
    let slices: f64 = demand
        .iter()
        .zip(profiles)
        .map(|(d, p)| d * f64::from(p.compute_slices))
        .sum();
    let capacity = ((nodes - whole) * gpn) as f64 * f64::from(model.compute_slices);
    let k = if slices > 0.0 { capacity / slices } else { 0.0 };
    let mut left: Vec<f64> = demand.iter().map(|d| d * k).collect();
    let cand: Vec<Vec<(usize, u32)>> = candidates
        .iter()
        .map(|c| {
            c.iter()
                .filter_map(|(name, n)| profiles.iter().position(|p| p.name == name).map(|i| (i, n)))
                .collect()
        })
        .collect();
    let mut out = Vec::with_capacity(nodes);
    for n in 0..nodes {
        if n < whole {
            out.push(NodeLayout {
                gpus: vec![full.clone(); gpn],
            });
            continue;
        }
        let mut gpus = Vec::with_capacity(gpn);
        for _ in 0..gpn {
            let score = |c: &Vec<(usize, u32)>| -> f64 {
                c.iter()
                    .map(|(p, n)| f64::from(profiles[*p].compute_slices) * f64::from(*n).min(left[*p].max(0.0)))
                    .sum()
            };
            let mut best = 0;
            let mut best_s = f64::NEG_INFINITY;
            for (i, c) in cand.iter().enumerate() {
                let s = score(c);
                if s > best_s + 1e-9 {
                    best = i;
                    best_s = s;
                }
            }
            for (p, n) in &cand[best] {
                left[*p] -= f64::from(*n);
            }
            gpus.push(candidates[best].clone());
        }
        out.push(NodeLayout { gpus });
    }
    out
}

/// Every node gets `layout` on each GPU, except the first `whole` nodes, which get whole GPUs.
pub fn uniform(model: &GpuModel, nodes: usize, gpn: usize, layout: &ProfileCounts, whole: usize) -> Vec<NodeLayout> {
    let full = ProfileCounts::parse(model, &format!("1x{}", model.full_profile().name)).expect("full profile parses");
    (0..nodes)
        .map(|n| NodeLayout {
            gpus: vec![if n < whole { full.clone() } else { layout.clone() }; gpn],
        })
        .collect()
}

/// The mean node mix of `layout_time` over `nodes` nodes, as a static layout: each node
/// layout gets its share of the node-seconds in whole nodes (largest remainder; ties to the
/// layout held longer), most nodes first. Issue 27, item 6: a dynamic policy within 2% of
/// the static layout of its own mean mix found a better static, not a reason to change
/// layouts. `None` when no time was counted.
pub fn frozen_mix(layout_time: &[(NodeLayout, f64)], nodes: usize) -> Option<Vec<NodeLayout>> {
    let total: f64 = layout_time.iter().map(|(_, s)| s).sum();
    if total <= 0.0 || nodes == 0 {
        return None;
    }
    let quota: Vec<f64> = layout_time.iter().map(|(_, s)| s / total * nodes as f64).collect();
    let mut count: Vec<usize> = quota.iter().map(|q| q.floor() as usize).collect();
    let mut order: Vec<usize> = (0..quota.len()).collect();
    order.sort_by(|&a, &b| {
        (quota[b] - quota[b].floor())
            .total_cmp(&(quota[a] - quota[a].floor()))
            .then(a.cmp(&b))
    });
    let short = nodes - count.iter().sum::<usize>();
    for &i in order.iter().take(short) {
        count[i] += 1;
    }
    let mut by: Vec<usize> = (0..count.len()).collect();
    by.sort_by(|&a, &b| count[b].cmp(&count[a]).then(a.cmp(&b)));
    Some(
        by.into_iter()
            .flat_map(|i| std::iter::repeat_n(layout_time[i].0.clone(), count[i]))
            .collect(),
    )
}
