use super::*;
use dynmig_core::config::{parse_config, EXAMPLE_TOML};

/// The example config with `[policy] kind = policy` (and `extra` lines after it).
fn config(policy: &str, extra: &str) -> Config {
    let toml = EXAMPLE_TOML.replacen("kind = \"guarded\" ", &format!("kind = \"{policy}\"\n{extra}\n#"), 1);
    parse_config(&toml).unwrap_or_else(|e| panic!("{policy}: {e}"))
}

#[test]
fn every_kind_gives_the_same_policy_to_the_controller_and_the_simulator() {
    // (kind, extra lines, the simulator's spec name, the controller's policy name)
    let kinds = [
        ("demand", "", "dynamic", "demand"),
        ("plan", "", "plan", "plan"),
        ("consolidate", "", "consolidate", "consolidate"),
        ("mpc", "", "mpc", "mpc"),
        ("adaptive", "", "adaptive", "adaptive"),
        ("guarded", "", "guarded", "guarded"),
        ("static", "", "static", "none"),
        ("none", "", "none", "none"),
    ];
    for (kind, extra, spec_name, policy_name) in kinds {
        let c = config(kind, extra);
        let spec = spec_from_config(&c, Host::Simulator).unwrap();
        assert_eq!(spec.name(), spec_name, "{kind}");
        let p = controller_policy(&c, true).unwrap();
        assert_eq!(p.name(), policy_name, "{kind}");
        // The simulator makes the very policy the controller runs.
        let sim = spec.policy(&sim_config(&c).unwrap(), true, &[]).unwrap();
        assert_eq!(sim.map_or("none", |p| p.name()), policy_name, "{kind}");
    }
}

#[test]
fn the_controller_types_jobs_and_searches_in_the_background() {
    let c = config("adaptive", "");
    let PolicySpec::Adaptive(sim) = spec_from_config(&c, Host::Simulator).unwrap() else {
        panic!("adaptive")
    };
    assert!(!sim.background && !sim.exact_profiles);
    let PolicySpec::Adaptive(ctl) = spec_from_config(&c, Host::Controller { retype: true }).unwrap() else {
        panic!("adaptive")
    };
    assert!(ctl.background && ctl.exact_profiles);

    let c = config("guarded", "");
    for retype in [true, false] {
        let PolicySpec::Guarded(s) = spec_from_config(&c, Host::Controller { retype }).unwrap() else {
            panic!("guarded")
        };
        assert_eq!(s.pending_types_fixed, !retype);
        assert!(s.background);
    }
    let PolicySpec::Guarded(s) = spec_from_config(&c, Host::Simulator).unwrap() else {
        panic!("guarded")
    };
    assert!(!s.background && !s.pending_types_fixed);
}

#[test]
fn the_model_of_the_cluster_follows_the_controller_section() {
    let c = config("mpc", "lookahead = \"2h\"");
    let PolicySpec::Mpc(m) = spec_from_config(&c, Host::Simulator).unwrap() else {
        panic!("mpc")
    };
    assert_eq!(m.horizon, std::time::Duration::from_secs(7200));
    let cfg = sim_config(&c).unwrap();
    assert_eq!((cfg.nodes, cfg.gpus_per_node, cfg.model.name), (2, 2, "A100-80GB"));
    // The lookahead runs ask the policy every 60 s, not every `[controller] interval` (5 s).
    assert_eq!(cfg.policy_interval_s, 60.0);
    assert!(matches!(cfg.timing, DrainTiming::Reservation));

    let immediate =
        parse_config(&EXAMPLE_TOML.replacen("drain = \"reservation\"", "drain = \"immediate\"", 1)).unwrap();
    assert!(matches!(sim_config(&immediate).unwrap().timing, DrainTiming::Immediate));
}

#[test]
fn a_learned_model_that_cannot_be_read_is_refused_with_its_file() {
    let c = config("learned", "model = \"/nonexistent/model.safetensors\"");
    for host in [Host::Simulator, Host::Controller { retype: true }] {
        let e = spec_from_config(&c, host).unwrap_err();
        assert!(format!("{e:#}").contains("/nonexistent/model.safetensors"), "{e:#}");
    }
    assert!(controller_policy(&c, true).is_err());
}

#[test]
fn the_time_of_day_policy_runs_only_in_the_engine() {
    let cfg = sim_config(&config("none", "")).unwrap();
    let Err(e) = PolicySpec::Learned { periods: 4 }.policy(&cfg, true, &[]) else {
        panic!("the time-of-day policy was made outside the engine")
    };
    assert!(e.to_string().contains("only in the engine"), "{e}");
}
