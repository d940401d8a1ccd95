//! dynmig.toml: the example parses to the documented defaults; each bad key or value gives an
//! error naming the key, its line and what is allowed.

use dynmig_core::config::{parse_config, AllowedLayouts, Backend, Config, ConfigError, PolicyConfig, EXAMPLE_TOML};
use dynmig_core::size::GIB;
use dynmig_core::submit::SubmitPolicy;
use dynmig_core::types::{MultiGpu, WholeGpu};
use std::path::Path;
use std::time::Duration;

const MINIMAL: &str = r#"version = 1

[[node_group]]
name = "g"
nodes = ["a1", "a2"]
gpu_model = "A100-40GB"
gpus = 1
backend = "nvml"
"#;

/// Parses `text`, expects an error, checks its key and line, and returns its Display.
fn bad(text: &str, key: &str, line: usize) -> String {
    let e: ConfigError = parse_config(text).expect_err("expected a config error");
    let shown = e.to_string();
    assert_eq!((e.key.as_str(), e.line), (key, line), "{shown}");
    assert!(shown.starts_with(&format!("line {line}, column ")), "{shown}");
    shown
}

/// The example with `from` replaced by `to` (which must occur once).
/// The example's `[policy]` kind line (the guarded default).
const GUARDED_LINE: &str = "kind = \"guarded\"                         # \"guarded\" | \"demand\" | \"plan\" | \"consolidate\" | \"mpc\" | \"adaptive\" | \"learned\" | \"static\" | \"none\" (docs/policy.md)";

/// The example config with the demand policy and its two keys in place of the guarded
/// default, as the example read before guarded became the default: the tests of the other
/// keys start from it.
fn demand_example() -> String {
    assert_eq!(EXAMPLE_TOML.matches(GUARDED_LINE).count(), 1);
    EXAMPLE_TOML
        .replace(
            GUARDED_LINE,
            "kind = \"demand\"                          # \"demand\" | \"plan\" | \"consolidate\" | \"mpc\" | \"adaptive\" | \"learned\" | \"static\" | \"none\" (docs/policy.md)\nforecast_window = \"10m\"                  # demand only: how far ahead to forecast\nmin_gain = 1                             # demand, plan, consolidate, mpc: instances (plan: compute slices) a change must gain",
        )
        .replace("# forecast_window = \"10m\"                # demand only: how far ahead to forecast\n", "")
        .replace(
            "# node_types = [\"7x1g.10gb\", \"1x3g.40gb+1x4g.40gb\"] # guarded: more per-GPU layouts a node may move to (default: allowed_layouts when a list)\n",
            "",
        )
        .replace("# min_gain = 1                           # demand, plan, consolidate, mpc: instances (plan: compute slices) a change must gain\n", "")
}

fn example_with(from: &str, to: &str) -> String {
    let example = demand_example();
    assert_eq!(example.matches(from).count(), 1, "{from}");
    example.replace(from, to)
}

fn line_of(text: &str, needle: &str) -> usize {
    text[..text.find(needle).unwrap()].matches('\n').count() + 1
}

#[test]
fn example_parses_with_its_values() {
    let c = Config::default_embedded();
    assert_eq!(c, parse_config(EXAMPLE_TOML).unwrap());
    assert_eq!(c.version, 1);
    assert_eq!(c.paths.state_dir, Path::new("/var/lib/dynmig"));
    assert_eq!(c.paths.gres_conf, Path::new("/etc/slurm/gres.conf"));
    assert_eq!(c.paths.device_dir, Path::new("/var/lib/dynmig/devices"));
    assert_eq!(c.paths.slurmd, Path::new("/usr/sbin/slurmd"));
    assert_eq!(c.estimator.default_mem_bytes, 8 * GIB);
    assert_eq!(
        (c.jobs.whole_gpu, c.jobs.multi_gpu),
        (WholeGpu::FullProfile, MultiGpu::FullProfile)
    );
    assert_eq!(c.controller.interval, Duration::from_secs(5));
    assert_eq!(c.controller.min_layout_lifetime, Duration::from_secs(120));
    assert_eq!(c.controller.drain_timeout, Duration::from_secs(1800));
    assert_eq!(c.controller.drain, dynmig_core::types::DrainMode::Reservation);
    assert_eq!(c.controller.reservation_duration, Duration::from_secs(600));
    assert_eq!(c.controller.max_concurrent_repartitions, 1);
    assert_eq!(c.policy, PolicyConfig::Guarded { node_types: Vec::new() });
    let g = &c.node_groups[0];
    assert_eq!(
        (g.name.as_str(), g.nodes.clone(), g.gpu_model.name, g.gpus),
        ("a100", vec!["n1".to_string(), "n2".into()], "A100-80GB", 2)
    );
    assert_eq!(
        (g.backend, g.allowed_layouts.clone()),
        (Backend::Simulated, AllowedLayouts::All)
    );
    assert_eq!(g.initial_layout.to_string(), "1x7g.80gb");
    assert_eq!(g.initial_node_layout().to_string(), "1x7g.80gb,1x7g.80gb");
    assert_eq!(g.node_conf, "CPUs=4 RealMemory=4000");
    assert_eq!(c.group_of("n2").map(|g| g.name.as_str()), Some("a100"));
    assert!(c.group_of("n3").is_none());
    let p = SubmitPolicy::from_config(&c);
    assert_eq!(p.models.iter().map(|m| m.name).collect::<Vec<_>>(), ["A100-80GB"]);
    assert_eq!(p.default_mem_bytes, 8 * GIB);
}

#[test]
fn the_shipped_slurm_dynmig_toml_is_byte_equal_to_the_embedded_default() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../slurm/dynmig.toml");
    assert_eq!(std::fs::read_to_string(path).unwrap(), EXAMPLE_TOML);
}

#[test]
fn defaults_fill_left_out_keys() {
    let c = parse_config(MINIMAL).unwrap();
    assert_eq!(c.paths.history_db, Path::new("/var/lib/dynmig/history.db"));
    assert_eq!(c.paths.sinfo, Path::new("/usr/bin/sinfo"));
    assert_eq!(c.estimator.default_mem_bytes, 8 * GIB);
    assert_eq!(c.node_groups[0].initial_layout.to_string(), "1x7g.40gb");
    assert_eq!(c.node_groups[0].node_conf, "");
    assert_eq!(c.controller.interval, Duration::from_secs(5));
}

#[test]
fn other_values_are_read() {
    let text = r#"version = 1
[paths]
state_dir = "/tmp/dm"
scontrol = "scontrol"
[jobs]
whole_gpu = "estimate"
multi_gpu = "reject"
[estimator]
default_mem = "20000"
[controller]
interval = "500ms"
[policy]
kind = "static"

[[node_group]]
name = "a"
nodes = ["x1", "y[1-2]"]
gpu_model = "NVIDIA A100-SXM4-80GB"
gpus = 8
backend = "simulated"
initial_layout = "3x2g.20gb+1x1g.10gb"
allowed_layouts = ["1x7g.80gb", "1g.10gb + 3x2g.20gb"]

[[node_group]]
name = "h"
nodes = "h[01-02]"
gpu_model = "h100-80gb"
gpus = 4
backend = "nvml"
"#;
    let c = parse_config(text).unwrap();
    assert_eq!(c.paths.device_dir, Path::new("/tmp/dm/devices"));
    assert_eq!(c.paths.scontrol, Path::new("scontrol"));
    assert_eq!(
        (c.jobs.whole_gpu, c.jobs.multi_gpu),
        (WholeGpu::Estimate, MultiGpu::Reject)
    );
    assert_eq!(c.estimator.default_mem_bytes, 20000 << 20);
    assert_eq!(c.controller.interval, Duration::from_millis(500));
    assert_eq!(c.policy, PolicyConfig::Static);
    assert_eq!(c.node_groups[0].nodes, ["x1", "y1", "y2"]);
    assert_eq!(c.group_of("h02").unwrap().gpu_model.name, "H100-80GB");
    let AllowedLayouts::Only(list) = &c.node_groups[0].allowed_layouts else {
        panic!()
    };
    assert_eq!(list[1].to_string(), "3x2g.20gb+1x1g.10gb");
    let names: Vec<_> = SubmitPolicy::from_config(&c).models.iter().map(|m| m.name).collect();
    assert_eq!(names, ["A100-80GB", "H100-80GB"]);
}

#[test]
fn unknown_keys_are_named() {
    let t = example_with("sinfo = ", "sinfo_path = ");
    let e = bad(&t, "paths.sinfo_path", line_of(&t, "sinfo_path"));
    assert!(e.contains("unknown field `sinfo_path`") && e.contains("`sinfo`"), "{e}");
    let t = example_with("gpus = 2", "gpus = 2\ncolour = \"red\"");
    let e = bad(&t, "node_group.colour", line_of(&t, "colour"));
    assert!(e.contains("unknown field `colour`"), "{e}");
    let t = format!("{MINIMAL}\n[extra]\nx = 1\n");
    bad(&t, "extra", line_of(&t, "[extra]"));
}

#[test]
fn bad_enum_values_list_the_allowed_ones() {
    let t = example_with("whole_gpu = \"full-profile\"", "whole_gpu = \"whole\"");
    let e = bad(&t, "jobs.whole_gpu", line_of(&t, "whole_gpu"));
    assert!(e.contains("`full-profile`, `estimate`, `reject`"), "{e}");
    let t = example_with("kind = \"demand\"", "kind = \"neural\"");
    let e = bad(&t, "policy.kind", line_of(&t, "kind ="));
    assert!(
        e.contains("`demand`, `plan`, `consolidate`, `mpc`, `guarded`, `adaptive`, `learned`, `static`, `none`"),
        "{e}"
    );
    let t = example_with("backend = \"simulated\"", "backend = \"fake\"");
    let e = bad(&t, "node_group.backend", line_of(&t, "backend ="));
    assert!(e.contains("expected `simulated` or `nvml`"), "{e}");
}

#[test]
fn bad_gpu_model_lists_known_models() {
    let t = example_with("\"A100-80GB\" ", "\"A200\" ");
    let e = bad(&t, "node_group.gpu_model", line_of(&t, "gpu_model"));
    assert!(
        e.contains("unknown GPU model 'A200'; allowed: A100-40GB, A100-80GB, H100-80GB"),
        "{e}"
    );
}

#[test]
fn bad_layouts_say_why() {
    let t = example_with("\"1x7g.80gb\" ", "\"1x7g.40gb\" ");
    let e = bad(&t, "node_group.initial_layout", line_of(&t, "initial_layout"));
    assert!(
        e.contains("unknown MIG profile '7g.40gb' for A100-80GB; allowed:"),
        "{e}"
    );
    let t = example_with("\"1x7g.80gb\" ", "\"1x4g.40gb+2x3g.40gb\" ");
    let e = bad(&t, "node_group.initial_layout", line_of(&t, "initial_layout"));
    assert!(e.contains("does not fit on one A100-80GB"), "{e}");
    let t = example_with("\"1x7g.80gb\" ", "\"3x3g.40gb\" ");
    let e = bad(&t, "node_group.initial_layout", line_of(&t, "initial_layout"));
    assert!(
        e.contains("3 instances of 3g.40gb: one A100-80GB holds at most 2"),
        "{e}"
    );
    let t = example_with("\"1x7g.80gb\" ", "\"0x7g.80gb\" ");
    let e = bad(&t, "node_group.initial_layout", line_of(&t, "initial_layout"));
    assert!(e.contains("bad term '0x7g.80gb'"), "{e}");
    let t = example_with("allowed_layouts = \"all\"", "allowed_layouts = [\"7x1g.10gb\"]");
    let e = bad(&t, "node_group.initial_layout", line_of(&t, "initial_layout"));
    assert!(e.contains("1x7g.80gb is not in allowed_layouts"), "{e}");
    let t = example_with("allowed_layouts = \"all\"", "allowed_layouts = \"some\"");
    let e = bad(&t, "node_group.allowed_layouts", line_of(&t, "allowed_layouts"));
    assert!(e.contains("use \"all\" or a list of layouts"), "{e}");
}

#[test]
fn bad_durations_and_sizes() {
    let t = example_with("interval = \"5s\"", "interval = \"5\"");
    let e = bad(&t, "controller.interval", line_of(&t, "interval"));
    assert!(e.contains("bad duration '5'") && e.contains("e.g. \"5s\""), "{e}");
    let t = example_with("drain_timeout = \"30m\"", "drain_timeout = \"0s\"");
    let e = bad(&t, "controller.drain_timeout", line_of(&t, "drain_timeout"));
    assert!(
        e.contains("below the floor of 1m") && e.contains("allowed: 1m to 30 days"),
        "{e}"
    );
    let t = example_with("interval = \"5s\"", "interval = 5");
    let e = bad(&t, "controller.interval", line_of(&t, "interval"));
    assert!(e.contains("expected a string"), "{e}");
    let t = example_with("\"8G\"", "\"8Q\"");
    let e = bad(&t, "estimator.default_mem", line_of(&t, "default_mem"));
    assert!(e.contains("unknown unit 'Q'; use a number with K, M, G or T"), "{e}");
    let t = example_with("\"8G\"", "\"100G\"");
    let e = bad(&t, "estimator.default_mem", line_of(&t, "default_mem"));
    assert!(
        e.contains("more than the largest profile of the configured GPUs (7g.80gb, 79.0GiB)"),
        "{e}"
    );
}

#[test]
fn other_bad_values() {
    let t = example_with("version = 1 ", "version = 2 ");
    let e = bad(&t, "version", 8);
    assert!(e.contains("allowed: 1"), "{e}");
    let t = example_with("gpus = 2", "gpus = 0");
    let e = bad(&t, "node_group.gpus", line_of(&t, "gpus ="));
    assert!(e.contains("allowed: 1 to 16"), "{e}");
    let t = example_with("max_concurrent_repartitions = 1", "max_concurrent_repartitions = 0");
    bad(
        &t,
        "controller.max_concurrent_repartitions",
        line_of(&t, "max_concurrent"),
    );
    let t = example_with("state_dir = \"/var/lib/dynmig\"", "state_dir = \"var/lib\"");
    let e = bad(&t, "paths.state_dir", line_of(&t, "state_dir"));
    assert!(e.contains("use an absolute path"), "{e}");
    let t = example_with("\"n[1-2]\"", "\"n[2-1]\"");
    let e = bad(&t, "node_group.nodes", line_of(&t, "nodes ="));
    assert!(e.contains("bad range '2-1'"), "{e}");
    let t = example_with("\"CPUs=4 RealMemory=4000\"", "\"CPUs=4 Gres=gpu:1\"");
    let e = bad(&t, "node_group.node_conf", line_of(&t, "node_conf"));
    assert!(e.contains("dynmig sets NodeName and Gres itself"), "{e}");
    let t = example_with("kind = \"demand\"", "kind = \"static\"");
    let e = bad(&t, "policy.forecast_window", line_of(&t, "forecast_window"));
    assert!(e.contains("applies only to kind = \"demand\""), "{e}");
}

#[test]
fn node_groups_are_required_unique_and_disjoint() {
    let e = parse_config("version = 1\n").unwrap_err();
    assert_eq!(e.key, "node_group");
    assert!(e.message.contains("add at least one"), "{e}");
    let t = format!("{MINIMAL}\n[[node_group]]\nname = \"g2\"\nnodes = \"a[2-3]\"\ngpu_model = \"A100-40GB\"\ngpus = 1\nbackend = \"nvml\"\n");
    let e = bad(&t, "node_group.nodes", line_of(&t, "\"a[2-3]\""));
    assert!(e.contains("node a2 is also in group 'g'"), "{e}");
    let t = format!("{MINIMAL}\n[[node_group]]\nname = \"g\"\nnodes = \"b1\"\ngpu_model = \"A100-40GB\"\ngpus = 1\nbackend = \"nvml\"\n");
    let e = bad(&t, "node_group.name", line_of(&t, "name = \"g\"\nnodes = \"b1\""));
    assert!(e.contains("names must be unique"), "{e}");
    let t = MINIMAL.replace("backend = \"nvml\"\n", "");
    let e = parse_config(&t).unwrap_err();
    assert!(e.message.contains("missing field `backend`"), "{e}");
}

#[test]
fn durations_past_thirty_days_are_errors_not_wrapped_timeouts() {
    for (from, to, key) in [
        (
            "drain_timeout = \"30m\"",
            "drain_timeout = \"5000000000000000h\"",
            "controller.drain_timeout",
        ),
        (
            "interval = \"5s\"",
            "interval = \"1000000000000000h\"",
            "controller.interval",
        ),
        (
            "min_layout_lifetime = \"120s\"",
            "min_layout_lifetime = \"31d\"",
            "controller.min_layout_lifetime",
        ),
    ] {
        let t = example_with(from, to);
        let e = bad(&t, key, line_of(&t, to));
        assert!(e.contains("is out of range") && e.contains("30 days"), "{e}");
    }
    let t = example_with("drain_timeout = \"30m\"", "drain_timeout = \"30d\"");
    let c = parse_config(&t).unwrap();
    assert_eq!(c.controller.drain_timeout, Duration::from_secs(30 * 24 * 3600));
}

#[test]
fn a_nul_in_a_path_is_an_error() {
    let t = example_with("state_dir = \"/var/lib/dynmig\"", "state_dir = \"/var/lib\\u0000/x\"");
    let e = bad(&t, "paths.state_dir", line_of(&t, "state_dir"));
    assert!(e.contains("NUL"), "{e}");
}

#[test]
fn mig_mode_changes_with_the_simulated_backend_are_an_error_not_ignored() {
    let t = example_with("allow_mig_mode_change = false", "allow_mig_mode_change = true");
    let e = bad(
        &t,
        "node_group.allow_mig_mode_change",
        line_of(&t, "allow_mig_mode_change"),
    );
    assert!(e.contains("only to backend = \"nvml\""), "{e}");
    let nvml = t.replace("backend = \"simulated\"", "backend = \"nvml\"");
    assert!(parse_config(&nvml).unwrap().node_groups[0].allow_mig_mode_change);
}

#[test]
fn port_zero_is_named_as_the_problem_not_the_shape() {
    let t = example_with("# server = \"ctl1:6830\"", "server = \"ctl1:0\"");
    let e = bad(&t, "history.server", line_of(&t, "server = \"ctl1:0\""));
    assert!(
        e.contains("port '0'") && e.contains("1 to 65535") && !e.contains("not host:port"),
        "{e}"
    );
}

#[test]
fn a_number_too_large_for_toml_still_gets_the_allowed_range() {
    let t = example_with("gpus = 2", "gpus = 99999999999999999999");
    let e = bad(&t, "node_group.gpus", line_of(&t, "gpus ="));
    assert!(e.contains("99999999999999999999") && e.contains("from 1 to 16"), "{e}");
}

#[test]
fn a_huge_instance_count_in_initial_layout_is_a_config_error_not_an_abort() {
    for layout in ["4294967295x1g.10gb", "4294967295x1g.10gb+1x1g.10gb"] {
        let t = example_with("\"1x7g.80gb\" ", &format!("\"{layout}\" "));
        let e = bad(&t, "node_group.initial_layout", line_of(&t, "initial_layout"));
        assert!(
            e.contains("4294967295 instances of 1g.10gb") && e.contains("at most 7"),
            "{e}"
        );
    }
}

#[test]
fn media_extension_layouts_are_accepted_in_the_config() {
    let t = example_with(
        "allowed_layouts = \"all\"",
        "allowed_layouts = [\"1x7g.80gb\", \"1x1g.10gb+me+6x1g.10gb\"]",
    );
    let c = parse_config(&t).unwrap();
    let AllowedLayouts::Only(list) = &c.node_groups[0].allowed_layouts else {
        panic!("a list")
    };
    assert_eq!(list[1].count("1g.10gb+me"), 1);
    assert_eq!(list[1].to_string(), "1x1g.10gb+me+6x1g.10gb");
}

#[test]
fn the_planning_policy_is_read_and_its_keys_belong_to_it() {
    let t = example_with(
        "kind = \"demand\"                          # \"demand\" | \"plan\" | \"consolidate\" | \"mpc\" | \"adaptive\" | \"learned\" | \"static\" | \"none\" (docs/policy.md)\nforecast_window = \"10m\"                  # demand only: how far ahead to forecast",
        "kind = \"consolidate\"\nhorizon = \"90m\"\nmax_wait = \"1h\"",
    );
    let c = parse_config(&t).unwrap();
    assert_eq!(
        c.policy,
        PolicyConfig::Plan {
            consolidate: true,
            lookahead: None,
            horizon: Duration::from_secs(5400),
            max_wait: Duration::from_secs(3600),
            min_gain: 1
        }
    );
    let t = example_with(
        "kind = \"demand\"                          # \"demand\" | \"plan\" | \"consolidate\" | \"mpc\" | \"adaptive\" | \"learned\" | \"static\" | \"none\" (docs/policy.md)\nforecast_window = \"10m\"                  # demand only: how far ahead to forecast",
        "kind = \"static\"\nhorizon = \"2h\"",
    );
    let e = bad(&t, "policy.horizon", line_of(&t, "horizon ="));
    assert!(
        e.contains("applies only to kind = \"plan\", \"consolidate\" or \"mpc\""),
        "{e}"
    );
}

#[test]
fn the_mpc_policy_reads_its_lookahead_and_needs_alike_node_groups() {
    let kind_line = "kind = \"demand\"                          # \"demand\" | \"plan\" | \"consolidate\" | \"mpc\" | \"adaptive\" | \"learned\" | \"static\" | \"none\" (docs/policy.md)\nforecast_window = \"10m\"                  # demand only: how far ahead to forecast";
    let c = parse_config(&example_with(kind_line, "kind = \"mpc\"\nlookahead = \"3h\"")).unwrap();
    assert!(
        matches!(c.policy, PolicyConfig::Plan { consolidate: false, lookahead: Some(l), .. } if l == Duration::from_secs(3 * 3600)),
        "{:?}",
        c.policy
    );
    let c = parse_config(&example_with(kind_line, "kind = \"mpc\"")).unwrap();
    assert!(matches!(c.policy, PolicyConfig::Plan { lookahead: Some(l), .. } if l == Duration::from_secs(4 * 3600)));
    let t = example_with(kind_line, "kind = \"plan\"\nlookahead = \"3h\"");
    let e = bad(&t, "policy.lookahead", line_of(&t, "lookahead ="));
    assert!(e.contains("applies only to kind = \"mpc\""), "{e}");
    // Two node groups of different GPU models: the engine behind the lookahead models one.
    let t = example_with(kind_line, "kind = \"mpc\"")
        + "\n[[node_group]]\nname = \"h100\"\nnodes = \"h[1-2]\"\ngpu_model = \"H100-80GB\"\ngpus = 2\nbackend = \"simulated\"\ninitial_layout = \"1x7g.80gb\"\nnode_conf = \"CPUs=4 RealMemory=4000\"\n";
    let e = parse_config(&t).unwrap_err().to_string();
    assert!(
        e.contains("needs one GPU model and GPU count in every node group") && e.contains("'h100'"),
        "{e}"
    );
}

#[test]
fn the_learned_policy_needs_its_model_file_and_the_model_key_belongs_to_it() {
    let kind_line = "kind = \"demand\"                          # \"demand\" | \"plan\" | \"consolidate\" | \"mpc\" | \"adaptive\" | \"learned\" | \"static\" | \"none\" (docs/policy.md)\nforecast_window = \"10m\"                  # demand only: how far ahead to forecast";
    let learned = |t: String| t.replacen("min_gain = 1 ", "# min_gain = 1", 1);
    let c = parse_config(&learned(example_with(
        kind_line,
        "kind = \"learned\"\nmodel = \"/var/lib/dynmig/model.safetensors\"",
    )))
    .unwrap();
    assert_eq!(
        c.policy,
        PolicyConfig::Learned {
            model: "/var/lib/dynmig/model.safetensors".into()
        }
    );
    let e = parse_config(&learned(example_with(kind_line, "kind = \"learned\"")))
        .unwrap_err()
        .to_string();
    assert!(e.contains("needs model = "), "{e}");
    let t = example_with(kind_line, "kind = \"plan\"\nmodel = \"m.safetensors\"");
    let e = bad(&t, "policy.model", line_of(&t, "model ="));
    assert!(e.contains("applies only to kind = \"learned\""), "{e}");
}

#[test]
fn the_adaptive_policy_takes_no_planner_keys_and_needs_alike_node_groups() {
    let kind_line = "kind = \"demand\"                          # \"demand\" | \"plan\" | \"consolidate\" | \"mpc\" | \"adaptive\" | \"learned\" | \"static\" | \"none\" (docs/policy.md)\nforecast_window = \"10m\"                  # demand only: how far ahead to forecast";
    let adaptive = |t: String| t.replacen("min_gain = 1 ", "# min_gain = 1", 1);
    let c = parse_config(&adaptive(example_with(kind_line, "kind = \"adaptive\""))).unwrap();
    assert_eq!(c.policy, PolicyConfig::Adaptive);
    let t = adaptive(example_with(kind_line, "kind = \"adaptive\"\nlookahead = \"3h\""));
    let e = bad(&t, "policy.lookahead", line_of(&t, "lookahead ="));
    assert!(e.contains("applies only to kind = \"mpc\""), "{e}");
    let t = adaptive(example_with(kind_line, "kind = \"adaptive\"")).replacen("# min_gain = 1", "min_gain = 1 ", 1);
    let e = bad(&t, "policy.min_gain", line_of(&t, "min_gain ="));
    assert!(e.contains("applies only to kind"), "{e}");
    let t = adaptive(example_with(kind_line, "kind = \"adaptive\""))
        + "\n[[node_group]]\nname = \"h100\"\nnodes = \"h[1-2]\"\ngpu_model = \"H100-80GB\"\ngpus = 2\nbackend = \"simulated\"\ninitial_layout = \"1x7g.80gb\"\nnode_conf = \"CPUs=4 RealMemory=4000\"\n";
    let e = parse_config(&t).unwrap_err().to_string();
    assert!(
        e.contains("\"adaptive\"") && e.contains("needs one GPU model and GPU count in every node group"),
        "{e}"
    );
}

#[test]
fn history_store_is_server_by_default_slurmdbd_when_asked_and_anything_else_is_refused() {
    use dynmig_core::config::HistoryStore;
    let c = parse_config(MINIMAL).unwrap();
    assert_eq!(c.history.store, HistoryStore::Server);
    assert_eq!(c.history.sacct_interval, Duration::from_secs(60));
    assert_eq!(c.paths.sacctmgr, Path::new("/usr/bin/sacctmgr"));
    let t = format!("{MINIMAL}\n[history]\nstore = \"slurmdbd\"\nsacct_interval = \"2s\"\n");
    let c = parse_config(&t).unwrap();
    assert_eq!(c.history.store, HistoryStore::Slurmdbd);
    assert_eq!(c.history.sacct_interval, Duration::from_secs(2));
    let t = format!("{MINIMAL}\n[history]\nstore = \"mysql\"\n");
    let e = bad(&t, "history.store", t.lines().count());
    assert!(e.contains("'mysql' is not a history store"), "{e}");
    assert!(e.contains("\"server\"") && e.contains("\"slurmdbd\""), "{e}");
}

#[test]
fn the_guarded_default_reads_its_node_types_and_they_belong_to_it() {
    let c = parse_config(EXAMPLE_TOML).unwrap();
    assert_eq!(c.policy, PolicyConfig::Guarded { node_types: Vec::new() });
    let with =
        |types: &str| EXAMPLE_TOML.replacen(GUARDED_LINE, &format!("kind = \"guarded\"\nnode_types = {types}"), 1);
    let c = parse_config(&with(r#"["7x1g.10gb", "1x3g.40gb+1x4g.40gb", "7x1g.10gb"]"#)).unwrap();
    let PolicyConfig::Guarded { node_types } = &c.policy else {
        panic!("{:?}", c.policy)
    };
    let shown: Vec<String> = node_types.iter().map(ToString::to_string).collect();
    assert_eq!(shown, ["7x1g.10gb", "1x4g.40gb+1x3g.40gb"], "read once each, in order");
    let t = with(r#"["7x1g.5gb"]"#);
    let e = bad(&t, "policy.node_types", line_of(&t, "node_types ="));
    assert!(e.contains("unknown MIG profile '1g.5gb' for A100-80GB"), "{e}");
    // A node type a group does not allow.
    let t = with(r#"["7x1g.10gb"]"#).replacen(
        "allowed_layouts = \"all\"",
        "allowed_layouts = [\"1x7g.80gb\", \"2x3g.40gb\"]",
        1,
    );
    let e = bad(&t, "policy.node_types", line_of(&t, "node_types ="));
    assert!(
        e.contains("7x1g.10gb is not in the allowed_layouts of group 'a100'"),
        "{e}"
    );
    // Without the key, a group's allowed_layouts list is the shortlist.
    let t = EXAMPLE_TOML.replacen(
        "allowed_layouts = \"all\"",
        "allowed_layouts = [\"1x7g.80gb\", \"2x3g.40gb\"]",
        1,
    );
    let PolicyConfig::Guarded { node_types } = parse_config(&t).unwrap().policy else {
        panic!("not guarded")
    };
    assert_eq!(node_types.len(), 2);
    // No kind: guarded where every group has one GPU model and count, else demand (guarded's
    // engine models one of each), while an explicit guarded there is an error.
    let h100 = "\n[[node_group]]\nname = \"h100\"\nnodes = \"h[1-2]\"\ngpu_model = \"H100-80GB\"\ngpus = 2\nbackend = \"simulated\"\nnode_conf = \"CPUs=4 RealMemory=4000\"\n";
    let unlike = EXAMPLE_TOML.replacen(GUARDED_LINE, "", 1) + h100;
    assert!(matches!(
        parse_config(&unlike).unwrap().policy,
        PolicyConfig::Demand { .. }
    ));
    let alike = EXAMPLE_TOML.replacen(GUARDED_LINE, "", 1);
    assert!(matches!(
        parse_config(&alike).unwrap().policy,
        PolicyConfig::Guarded { .. }
    ));
    let e = parse_config(&(EXAMPLE_TOML.to_string() + h100))
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"guarded\"") && e.contains("needs one GPU model"), "{e}");
    // The key belongs to guarded.
    let t = EXAMPLE_TOML.replacen(GUARDED_LINE, "kind = \"static\"\nnode_types = [\"7x1g.10gb\"]", 1);
    let e = bad(&t, "policy.node_types", line_of(&t, "node_types ="));
    assert!(e.contains("applies only to kind = \"guarded\""), "{e}");
}

#[test]
fn nvml_access_keys_are_read_per_node_and_refused_where_they_cannot_apply() {
    let keys = "allow_mig_mode_change = false\nnvml_library = \"/opt/standin/{node}/libnvidia-ml.so.1\"\nnvml_device_root = \"/opt/standin/{node}\"\nnvml_timeout = \"5s\"";
    let t = example_with("allow_mig_mode_change = false", keys);
    // With the simulated backend each key is an error naming it.
    let e = bad(&t, "node_group.nvml_library", line_of(&t, "nvml_library"));
    assert!(e.contains("only to backend = \"nvml\""), "{e}");
    let nvml = t.replace("backend = \"simulated\"", "backend = \"nvml\"");
    let c = parse_config(&nvml).unwrap();
    let a = c.node_groups[0].nvml.for_node("n2");
    assert_eq!(
        a.library.as_deref(),
        Some(std::path::Path::new("/opt/standin/n2/libnvidia-ml.so.1"))
    );
    assert_eq!(a.device_root, std::path::PathBuf::from("/opt/standin/n2"));
    assert_eq!(a.timeout, std::time::Duration::from_secs(5));
    // Left out: the system's library, files under /, 30 s.
    let plain = parse_config(&demand_example().replace("backend = \"simulated\"", "backend = \"nvml\"")).unwrap();
    assert_eq!(plain.node_groups[0].nvml, dynmig_core::config::NvmlAccess::default());
    assert_eq!(plain.node_groups[0].nvml.device_root, std::path::PathBuf::from("/"));
    // Below the floor, relative paths.
    let short = nvml.replace("nvml_timeout = \"5s\"", "nvml_timeout = \"1ns\"");
    let e = bad(&short, "node_group.nvml_timeout", line_of(&short, "nvml_timeout"));
    assert!(e.contains("allowed: 1s to 10m"), "{e}");
    let rel = nvml.replace(
        "nvml_device_root = \"/opt/standin/{node}\"",
        "nvml_device_root = \"standin\"",
    );
    let e = bad(&rel, "node_group.nvml_device_root", line_of(&rel, "nvml_device_root"));
    assert!(e.contains("relative"), "{e}");
}

/// `[section] key = "value"` on top of MINIMAL (with `kind` when the key needs a policy).
fn with_duration(key: &str, value: &str) -> String {
    let (section, name) = key.split_once('.').unwrap();
    let kind = match name {
        "forecast_window" => "kind = \"demand\"\n",
        "horizon" | "max_wait" => "kind = \"plan\"\n",
        "lookahead" => "kind = \"mpc\"\n",
        _ => "",
    };
    if section == "node_group" {
        return format!("{MINIMAL}{name} = \"{value}\"\n");
    }
    format!("{MINIMAL}[{section}]\n{kind}{name} = \"{value}\"\n")
}

#[test]
fn durations_below_their_floor_are_refused_naming_key_value_and_floor() {
    // (key, floor as written in the message, the shortest accepted value)
    let floors = [
        ("controller.interval", "100ms", "100ms"),
        ("controller.drain_timeout", "1m", "60s"),
        ("controller.reservation_duration", "1m", "1m"),
        ("history.snapshot_refresh", "10ms", "10ms"),
        ("history.sacct_interval", "1s", "1s"),
        ("history.sacct_window", "1h", "60m"),
        ("policy.forecast_window", "1m", "1m"),
        ("policy.horizon", "1m", "1m"),
        ("policy.max_wait", "1m", "1m"),
        ("policy.lookahead", "1m", "1m"),
        ("node_group.nvml_timeout", "1s", "1s"),
    ];
    for (key, floor, shortest) in floors {
        let t = with_duration(key, "1ns");
        let e = parse_config(&t).expect_err(key);
        assert_eq!(e.key, key, "{e}");
        let shown = e.to_string();
        assert!(
            shown.contains("'1ns' is out of range: below the floor of ")
                && shown.contains(&format!("below the floor of {floor} for {key} ("))
                && shown.contains(&format!("allowed: {floor} to ")),
            "{shown}"
        );
        parse_config(&with_duration(key, shortest)).unwrap_or_else(|e| panic!("{key} = {shortest}: {e}"));
    }
    // The message docs/config.md shows, word for word.
    let t = format!(
        "version = 1\n[controller]\ninterval = \"1ns\"\n{}",
        &MINIMAL["version = 1\n".len()..]
    );
    assert_eq!(
        parse_config(&t).unwrap_err().to_string(),
        "line 3, column 12: controller.interval: '1ns' is out of range: below the floor of 100ms for controller.interval (each pass runs squeue and sinfo against slurmctld); allowed: 100ms to 30 days (\"30d\")"
    );
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/config.md")).unwrap();
    assert!(docs.contains("line 3, column 12: controller.interval: '1ns' is out of range: below the floor of 100ms"));
    // 0 stays allowed where it means "off".
    parse_config(&with_duration("controller.min_layout_lifetime", "0s")).unwrap();
    // The short values the project's own tests use stay valid: a 200 ms controller pass
    // (tests/daemon_signals.rs), a 50 ms snapshot look (job-submit-dynmig), a 1 s sacct
    // rebuild and a 1 s pass (slurm/local-dynmig.sh, packaging/install-test.sh).
    for (key, v) in [
        ("controller.interval", "200ms"),
        ("controller.interval", "1s"),
        ("history.snapshot_refresh", "50ms"),
        ("history.sacct_interval", "1s"),
    ] {
        parse_config(&with_duration(key, v)).unwrap_or_else(|e| panic!("{key} = {v}: {e}"));
    }
}
