//! Unit tests of [`super`].

use super::*;
use crate::geometry::{all_layouts, NodeLayout, A100_80GB};

fn node(name: &str, layout: &str, running: &[(&str, u32)], ends_in_s: u64) -> NodeSnapshot {
    let l = NodeLayout::parse(&A100_80GB, 2, layout).unwrap();
    let r: BTreeMap<String, u32> = running.iter().map(|(p, n)| (p.to_string(), *n)).collect();
    NodeSnapshot {
        name: name.into(),
        model: &A100_80GB,
        layout: l,
        allowed: all_layouts(&A100_80GB).into(),
        busy: r.clone(),
        running: r,
        unavailable: false,
        repartitioning: false,
        layout_age: Duration::from_secs(3600),
        incoming: BTreeMap::new(),
        schedulable_free: BTreeMap::new(),
        work_ends_in: Duration::from_secs(ends_in_s),
        planned: None,
        version: 0,
    }
}

/// What a planner tallies of `nodes` (need of the running jobs, GPU layouts in any order,
/// partitioned nodes), as text.
fn tally_of(p: &mut Planner, nodes: &[NodeSnapshot]) -> String {
    let refs: Vec<&NodeSnapshot> = nodes.iter().collect();
    let whole = ProfileCounts::parse(&A100_80GB, "1x7g.80gb").unwrap();
    let (need, layouts, partitioned) = p.tally(&A100_80GB, &refs, &whole);
    let mut layouts: Vec<String> = layouts.iter().map(|(l, gpus)| format!("{gpus} x {l}")).collect();
    layouts.sort();
    format!("{need:?} {layouts:?} {partitioned}")
}

#[test]
fn what_a_node_contributes_is_kept_while_its_version_stays_and_never_changes_the_tally() {
    let mut kept = planner(1);
    let mut nodes = vec![
        node("a", "1x7g.80gb,1x7g.80gb", &[("7g.80gb", 1)], 0),
        node("b", "2x3g.40gb,1x7g.80gb", &[("3g.40gb", 2)], 0),
    ];
    nodes[0].version = 1;
    nodes[1].version = 2;
    let first = tally_of(&mut kept, &nodes);
    assert!(first.contains("3g.40gb") && first.contains("7g.80gb"), "{first}");
    // Node a changes (a new version); node b changes with version 0 (unknown, as the
    // controller gives it): both are read again, and the tally is that of a planner that
    // never saw them.
    nodes[0] = node("a", "7x1g.10gb,1x7g.80gb", &[("1g.10gb", 3)], 0);
    nodes[0].version = 3;
    nodes[1] = node("b", "1x7g.80gb,1x7g.80gb", &[], 0);
    let second = tally_of(&mut kept, &nodes);
    assert_ne!(second, first);
    assert_eq!(second, tally_of(&mut planner(1), &nodes));
    assert!(second.contains("1g.10gb") && !second.contains("3g.40gb"), "{second}");
    // Unchanged versions: the same tally again.
    assert_eq!(tally_of(&mut kept, &nodes), second);
}

fn demand(p: &[(&str, u32)]) -> Demand {
    Demand {
        pending: p.iter().map(|(p, n)| (p.to_string(), *n)).collect(),
        incoming: BTreeMap::new(),
    }
}

fn planner(max: usize) -> Planner {
    Planner::new(PlannerSettings::new(
        PolicyLimits {
            max_concurrent: max,
            min_layout_lifetime: Duration::from_secs(60),
            min_gain: 1,
        },
        Objective::Speed,
    ))
}

#[test]
fn need_that_whole_gpus_cover_changes_nothing() {
    let nodes = [node("a", "1x7g.80gb,1x7g.80gb", &[("7g.80gb", 1)], 600)];
    assert!(planner(1).plan(&nodes, &demand(&[("1g.10gb", 1)])).is_empty());
}

#[test]
fn the_node_whose_work_ends_soonest_is_partitioned() {
    let nodes = [
        node("a", "1x7g.80gb,1x7g.80gb", &[("7g.80gb", 1)], 3000),
        node("b", "1x7g.80gb,1x7g.80gb", &[("7g.80gb", 1)], 300),
        node("c", "1x7g.80gb,1x7g.80gb", &[("7g.80gb", 2)], 100),
    ];
    let plan = planner(1).plan(&nodes, &demand(&[("1g.10gb", 9)]));
    assert_eq!(plan.len(), 1, "{plan:?}");
    assert_eq!(plan[0].node, "c", "c's work ends first");
    assert!(
        plan[0].target.gpus.iter().all(|g| g.count("1g.10gb") >= 1),
        "{}",
        plan[0].target
    );
}

#[test]
fn need_waits_at_most_max_wait_a_surplus_any_time_one_at_a_time() {
    let late = node("a", "1x7g.80gb,1x7g.80gb", &[("1g.10gb", 2)], 48 * 3600);
    assert!(
        planner(1).plan(&[late], &demand(&[("1g.10gb", 9)])).is_empty(),
        "a need"
    );
    let soon = node("a", "1x7g.80gb,1x7g.80gb", &[("1g.10gb", 2)], 3600);
    assert_eq!(planner(1).plan(&[soon], &demand(&[("1g.10gb", 9)])).len(), 1);
    let late = node("a", "7x1g.10gb,7x1g.10gb", &[("1g.10gb", 1)], 48 * 3600);
    let plan = planner(1).plan(std::slice::from_ref(&late), &demand(&[]));
    assert_eq!(plan.len(), 1, "a surplus reserves the node however late: {plan:?}");
    let mut held = node("b", "7x1g.10gb,7x1g.10gb", &[("1g.10gb", 1)], 48 * 3600);
    held.planned = Some(NodeLayout::parse(&A100_80GB, 2, "1x7g.80gb,1x7g.80gb").unwrap());
    held.repartitioning = true;
    let plan = planner(1).plan(&[late, held], &demand(&[]));
    assert!(plan.is_empty(), "one surplus change at a time: {plan:?}");
}

#[test]
fn surplus_partitions_go_back_to_whole_gpus() {
    let nodes = [
        node("a", "7x1g.10gb,7x1g.10gb", &[], 0),
        node("b", "1x7g.80gb,1x7g.80gb", &[], 0),
    ];
    let plan = planner(2).plan(&nodes, &demand(&[("1g.10gb", 2)]));
    assert_eq!(plan.len(), 1, "{plan:?}");
    assert_eq!(plan[0].node, "a");
    assert_eq!(plan[0].target.to_string(), "1x7g.80gb,1x7g.80gb");
}

#[test]
fn a_plan_no_longer_wanted_is_cancelled() {
    let mut a = node("a", "1x7g.80gb,1x7g.80gb", &[("7g.80gb", 1)], 600);
    a.planned = Some(NodeLayout::parse(&A100_80GB, 2, "7x1g.10gb,7x1g.10gb").unwrap());
    a.repartitioning = true;
    let plan = planner(1).plan(&[a.clone()], &demand(&[]));
    assert_eq!(plan.len(), 1, "{plan:?}");
    assert_eq!(plan[0].target, a.layout, "the current layout cancels the plan");
}

#[test]
fn learned_need_of_the_next_hours_is_planned_for() {
    let mut p = planner(1);
    let idle = [node("a", "1x7g.80gb,1x7g.80gb", &[], 0)];
    // Day 1: a burst of small jobs at 18:00.
    let evening = Duration::from_secs(18 * 3600);
    let _ = p.plan_at(evening, &idle, &demand(&[("1g.10gb", 10)]));
    // Close the 18:00 bin by observing the next one.
    let _ = p.plan_at(evening + Duration::from_secs(3600), &idle, &demand(&[]));
    // Day 2, 17:00: nothing pending, but the 18:00 need is learned.
    let plan = p.plan_at(Duration::from_secs(17 * 3600), &idle, &demand(&[]));
    assert_eq!(plan.len(), 1, "{plan:?}");
    assert!(plan[0].target.to_string().contains("1g.10gb"), "{}", plan[0].target);
}

#[test]
fn consolidate_packs_the_need_onto_few_nodes() {
    let mut p = Planner::new(PlannerSettings::new(
        PolicyLimits {
            max_concurrent: 2,
            min_layout_lifetime: Duration::ZERO,
            min_gain: 1,
        },
        Objective::Consolidate,
    ));
    let nodes = [
        node("a", "1x7g.80gb,1x7g.80gb", &[], 0),
        node("b", "1x7g.80gb,1x7g.80gb", &[], 0),
    ];
    let plan = p.plan(&nodes, &demand(&[("1g.10gb", 3)]));
    assert_eq!(plan.len(), 1, "one node serves three 1g jobs: {plan:?}");
}

#[test]
fn a_queue_shorter_than_the_running_jobs_is_waited_out_on_whole_gpus() {
    let busy = |name| node(name, "1x7g.80gb,1x7g.80gb", &[("1g.10gb", 2)], 600);
    let nodes = [
        busy("a"),
        busy("b"),
        busy("c"),
        node("d", "1x7g.80gb,1x7g.80gb", &[], 0),
    ];
    assert!(
        planner(1).plan(&nodes, &demand(&[("1g.10gb", 6)])).is_empty(),
        "6 queued behind 6 running: wait"
    );
    assert_eq!(planner(1).plan(&nodes, &demand(&[("1g.10gb", 12)])).len(), 1);
}

#[test]
fn with_exact_profiles_a_small_job_is_never_left_to_whole_gpus() {
    let mut p = planner(1);
    p.settings.exact_profiles = true;
    let nodes = [
        node("a", "1x7g.80gb,1x7g.80gb", &[], 0),
        node("b", "1x7g.80gb,1x7g.80gb", &[], 0),
    ];
    let plan = p.plan(&nodes, &demand(&[("2g.20gb", 1)]));
    assert_eq!(plan.len(), 1, "{plan:?}");
    assert!(plan[0].target.to_string().contains("2g.20gb"), "{}", plan[0].target);
    assert!(
        planner(1).plan(&nodes, &demand(&[("2g.20gb", 1)])).is_empty(),
        "with larger instances allowed, a whole GPU serves it"
    );
}

#[test]
fn an_overload_is_shared_between_profiles() {
    let ps = profiles_of(&A100_80GB, &all_layouts(&A100_80GB));
    let i3 = ps.iter().position(|p| p.name == "3g.40gb").unwrap();
    let i7 = ps.iter().position(|p| p.name == "7g.80gb").unwrap();
    let mut need = vec![0.0; ps.len()];
    need[i3] = 100.0;
    need[i7] = 10.0;
    let whole = ProfileCounts::parse(&A100_80GB, "1x7g.80gb").unwrap();
    let split = ProfileCounts::parse(&A100_80GB, "2x3g.40gb").unwrap();
    let allowed = [whole.clone(), split.clone()];
    let kinds = compose(Objective::Speed, false, 8, 1, &need, &allowed, &whole, &ps);
    let n_split = kinds.iter().filter(|k| ***k == split).count();
    assert!(
        (2..8).contains(&n_split),
        "neither profile gets all the GPUs: {n_split} of 8 split"
    );
    assert!(shortfall(&[0.0; 6][..ps.len()], &need, &ps, false).0 == 1.0);
}

#[test]
fn shortfall_serves_large_needs_from_the_smallest_fitting_instance() {
    let ps = profiles_of(&A100_80GB, &all_layouts(&A100_80GB));
    let i1 = ps.iter().position(|p| p.name == "1g.10gb").unwrap();
    let i7 = ps.iter().position(|p| p.name == "7g.80gb").unwrap();
    let mut supply = vec![0.0; ps.len()];
    supply[i7] = 1.0;
    let mut need = vec![0.0; ps.len()];
    need[i1] = 2.0;
    assert_eq!(
        shortfall(&supply, &need, &ps, true).1,
        2.0,
        "exact: the 7g serves no 1g job"
    );
    assert_eq!(
        shortfall(&supply, &need, &ps, false).1,
        1.0,
        "one 1g job on the 7g, one left"
    );
}
