//! Unit tests of [`super`].

use super::*;
use crate::policies::PolicyLimits;
use dynmig_core::geometry::A100_40GB;

fn layouts(cfg: &SimConfig, gpu: &str) -> Vec<NodeLayout> {
    let l = ProfileCounts::parse(cfg.model, gpu).unwrap();
    vec![
        NodeLayout {
            gpus: vec![l; cfg.gpus_per_node]
        };
        cfg.nodes
    ]
}

/// Where Slurm cannot change a submitted job's type (the controller on 22.05), a layout
/// without the type of a job still waiting strands it; once it started, it does not.
#[test]
fn with_fixed_pending_types_a_layout_without_a_waiting_jobs_type_strands_it() {
    let cfg = SimConfig::new(&A100_40GB, 2, 2);
    let whole = layouts(&cfg, "1x7g.40gb");
    let sevenths = layouts(&cfg, "7x1g.5gb");
    let submitted = JobEvent::Submitted {
        id: 1,
        at_s: 10.0,
        profile: "7g.40gb",
        gpus: 1,
        time_limit_s: 3600.0,
        deadline_s: None,
    };
    for fixed in [false, true] {
        let mut s = GuardedSettings::new(whole.clone(), PolicyLimits::default());
        s.pending_types_fixed = fixed;
        let mut g = Guarded::new(s, &cfg);
        g.observe(10.0, std::slice::from_ref(&submitted));
        assert!(!g.decision(2).strands(&whole));
        // A 7g.40gb job (its whole GPU's memory) strands 7x1g.5gb either way: too big.
        assert!(g.decision(2).strands(&sevenths));
    }
    let small = JobEvent::Submitted {
        id: 2,
        at_s: 20.0,
        profile: "1g.5gb",
        gpus: 1,
        time_limit_s: 3600.0,
        deadline_s: None,
    };
    let started = JobEvent::Started {
        id: 2,
        at_s: 30.0,
        node: "n1".into(),
        slices: 7,
    };
    let mut s = GuardedSettings::new(sevenths.clone(), PolicyLimits::default());
    s.pending_types_fixed = true;
    let mut g = Guarded::new(s.clone(), &cfg);
    g.observe(20.0, std::slice::from_ref(&small));
    assert!(
        g.decision(2).strands(&whole),
        "whole GPUs lack the waiting job's 1g.5gb"
    );
    assert!(!g.decision(2).strands(&sevenths));
    g.observe(30.0, std::slice::from_ref(&started));
    assert!(!g.decision(2).strands(&whole), "a started job waits for no type");
    s.pending_types_fixed = false;
    let mut g = Guarded::new(s, &cfg);
    g.observe(20.0, std::slice::from_ref(&small));
    assert!(!g.decision(2).strands(&whole), "its type follows the catalog");
}

/// A guard on the overloaded whole GPUs of `adaptive`'s tests, the sevenths on its
/// shortlist, deciding after a day.
fn overloaded(background: bool) -> Guarded {
    let cfg = SimConfig::new(&A100_40GB, 2, 2);
    let mut s = GuardedSettings::new(layouts(&cfg, "1x7g.40gb"), PolicyLimits::default());
    s.shortlist = vec![layouts(&cfg, "7x1g.5gb")];
    s.min_history = Duration::from_secs(86_400);
    s.background = background;
    Guarded::new(s, &cfg)
}

#[test]
fn a_background_decision_leaves_the_call_at_once_and_decides_as_the_call_would() {
    use super::super::adaptive::tests::{history, nodes};
    let at = 1.5 * 86_400.0;
    let plan = |g: &mut Guarded| {
        g.observe(0.0, &[]);
        assert!(g.plan(&nodes(), &Demand::default()).is_empty(), "no history yet");
        g.observe(at, &history(at));
        g.plan(&nodes(), &Demand::default())
    };
    let mut inline = overloaded(false);
    let decided = plan(&mut inline);
    assert!(!decided.is_empty(), "the overload moves the nodes to the sevenths");
    let mut background = overloaded(true);
    assert!(
        plan(&mut background).is_empty(),
        "the call that starts it changes nothing"
    );
    assert!(background.deciding());
    background.finish_decision();
    assert!(!background.deciding());
    assert_eq!(background.plan(&nodes(), &Demand::default()), decided);
    assert_eq!(background.catalog(), inline.catalog());
}
