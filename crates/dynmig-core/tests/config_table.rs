//! dynmig.toml bad and odd input, as a table: each case changes one thing in a config that
//! sets every key, and says whether the result is accepted or which key, line and words the
//! error must carry (the key, the bad value, and what is allowed).
//!
//! The cases cover every key of docs/config.md, the values a security review tried (counts
//! that overflowed, durations past `i64` nanoseconds, NUL in paths, port 0, `+me` layouts, a
//! model with another model's layout) and TOML syntax and type errors.

use dynmig_core::config::{parse_config, ConfigError};
use dynmig_core::geometry::{model_by_name, ProfileCounts};

/// Every key set, on its own line, so that one line can be replaced.
const BASE: &str = r#"version = 1

[paths]
state_dir = "/var/lib/dynmig"
slurm_conf_dir = "/etc/slurm"
gres_conf = "/etc/slurm/gres.conf"
device_dir = "/var/lib/dynmig/devices"
history_db = "/var/lib/dynmig/history.db"
history_snapshot = "/var/lib/dynmig/history-snapshot.tsv"
history_spool = "/var/lib/dynmig/spool"
slurmd = "/usr/sbin/slurmd"
scontrol = "/usr/bin/scontrol"
squeue = "/usr/bin/squeue"
sinfo = "/usr/bin/sinfo"

[estimator]
default_mem = "8G"
cuda_context = "500M"
model_margin = 1.15
history_quantile = 0.95
history_margin = 1.1
history_min_samples = 3
history_window = 50
max_oom_restarts = 2
oom_peak_fraction = 0.98

[history]
server = "ctl1:6830"
listen = "0.0.0.0:6830"
snapshot_refresh = "5s"

[jobs]
whole_gpu = "full-profile"
multi_gpu = "full-profile"

[controller]
interval = "5s"
max_concurrent_repartitions = 1
min_layout_lifetime = "120s"
drain_timeout = "30m"
drain = "reservation"
reservation_duration = "10m"

[policy]
kind = "demand"
forecast_window = "10m"
min_gain = 1

[[node_group]]
name = "a100"
nodes = "n[1-2]"
gpu_model = "A100-80GB"
gpus = 2
backend = "simulated"
initial_layout = "1x7g.80gb"
allowed_layouts = "all"
node_conf = "CPUs=4 RealMemory=4000"
allow_mig_mode_change = false
"#;

/// A second group, appended by some cases.
const GROUP2: &str =
    "\n[[node_group]]\nname = \"b\"\nnodes = \"m1\"\ngpu_model = \"A30-24GB\"\ngpus = 1\nbackend = \"nvml\"\n";

/// What a case expects.
enum Expect {
    /// The config is accepted.
    Accepted,
    /// An error on `key`, at the line holding `at` (empty: the replaced text's first line),
    /// whose display holds every string of `has`.
    Error {
        key: &'static str,
        at: &'static str,
        has: Vec<&'static str>,
    },
}

struct Case {
    /// Text of [`BASE`] to replace (must occur once); empty: append `to`.
    from: &'static str,
    to: String,
    expect: Expect,
}

fn ok(from: &'static str, to: impl Into<String>) -> Case {
    Case {
        from,
        to: to.into(),
        expect: Expect::Accepted,
    }
}

fn err(from: &'static str, to: impl Into<String>, key: &'static str, has: &[&'static str]) -> Case {
    Case {
        from,
        to: to.into(),
        expect: Expect::Error {
            key,
            at: "",
            has: has.to_vec(),
        },
    }
}

fn err_at(
    from: &'static str,
    to: impl Into<String>,
    key: &'static str,
    at: &'static str,
    has: &[&'static str],
) -> Case {
    Case {
        from,
        to: to.into(),
        expect: Expect::Error {
            key,
            at,
            has: has.to_vec(),
        },
    }
}

const ABS: &str = "use an absolute path";
const DUR: &str = "to 30 days";

fn cases() -> Vec<Case> {
    let long_path = format!("sinfo = \"/{}\"", "a".repeat(5000));
    let long_name = format!("nodes = \"{}\"", "n".repeat(300));
    let padded = format!("nodes = \"n[{}1-99999]\"", "0".repeat(300));
    let long_value = format!("gpu_model = \"{}\"", "Z".repeat(10_000));
    vec![
        // version
        err("version = 1", "version = 2", "version", &["version 2 is not supported", "allowed: 1"]),
        err("version = 1", "version = \"1\"", "version", &["invalid type", "\"1\"", "allowed: version = 1"]),
        err("version = 1", "version = -1", "version", &["version -1", "allowed: 1"]),
        // [paths]
        err("state_dir = \"/var/lib/dynmig\"", "state_dir = \"var/lib\"", "paths.state_dir", &["'var/lib' is relative", ABS]),
        err("state_dir = \"/var/lib/dynmig\"", "state_dir = \"\"", "paths.state_dir", &["empty path", "absolute path"]),
        err("state_dir = \"/var/lib/dynmig\"", "state_dir = \"/var/lib\\u0000x\"", "paths.state_dir", &["/var/lib\\0x", "NUL", "no path may hold"]),
        err("state_dir = \"/var/lib/dynmig\"", "state_dir = 5", "paths.state_dir", &["invalid type: integer `5`", "allowed: a quoted absolute path"]),
        err("slurm_conf_dir = \"/etc/slurm\"", "slurm_conf_dir = \"etc\"", "paths.slurm_conf_dir", &["'etc' is relative", ABS]),
        ok("gres_conf = \"/etc/slurm/gres.conf\"", "gres_conf = \"/etc/slurm/{node}/gres.conf\""),
        err("device_dir = \"/var/lib/dynmig/devices\"", "device_dir = \"./dev\"", "paths.device_dir", &["'./dev' is relative", ABS]),
        err("history_db = \"/var/lib/dynmig/history.db\"", "history_db = \"/h\\u0000.db\"", "paths.history_db", &["NUL"]),
        err("history_snapshot = \"/var/lib/dynmig/history-snapshot.tsv\"", "history_snapshot = \"s.tsv\"", "paths.history_snapshot", &["'s.tsv' is relative", ABS]),
        ok("history_spool = \"/var/lib/dynmig/spool\"", "history_spool = \"/var/spool/dynmig/{node}\""),
        ok("slurmd = \"/usr/sbin/slurmd\"", "slurmd = \"slurmd\""),
        err("scontrol = \"/usr/bin/scontrol\"", "scontrol = \"bin/scontrol\"", "paths.scontrol", &["'bin/scontrol' is relative", "an absolute path or a bare command name"]),
        err("squeue = \"/usr/bin/squeue\"", "squeue = \"\"", "paths.squeue", &["empty path"]),
        err("sinfo = \"/usr/bin/sinfo\"", long_path, "paths.sinfo", &["a path of 5001 bytes", "at most 4096"]),
        err_at("sinfo = \"/usr/bin/sinfo\"", "sinfo = \"/usr/bin/sinfo\"\ncolour = \"red\"", "paths.colour", "colour", &["unknown field `colour`", "expected one of"]),
        // [estimator]
        err("default_mem = \"8G\"", "default_mem = \"8Q\"", "estimator.default_mem", &["'8Q'", "unknown unit 'Q'", "e.g. \"8G\""]),
        err("default_mem = \"8G\"", "default_mem = \"100G\"", "estimator.default_mem", &["100.0GiB", "more than the largest profile", "7g.80gb"]),
        err("default_mem = \"8G\"", "default_mem = 8", "estimator.default_mem", &["integer `8`", "allowed: a size string, e.g. \"8G\""]),
        err("default_mem = \"8G\"", "default_mem = \"0\"", "estimator.default_mem", &["'0'", "e.g. \"8G\""]),
        ok("default_mem = \"8G\"", "default_mem = \"20000\""),
        err("cuda_context = \"500M\"", "cuda_context = \"17G\"", "estimator.cuda_context", &["more than 16G", "0.3 to 2G"]),
        err("cuda_context = \"500M\"", "cuda_context = \"abc\"", "estimator.cuda_context", &["'abc'", "allowed: \"cuda11\", \"cuda12\", \"cuda13\" or a size"]),
        err("cuda_context = \"500M\"", "cuda_context = \"cuda10\"", "estimator.cuda_context", &["no CUDA context is known for CUDA 10", "allowed: \"cuda11\""]),
        ok("cuda_context = \"500M\"", "cuda_context = \"CUDA11\""),
        err("model_margin = 1.15", "model_margin = 0.5", "estimator.model_margin", &["0.5 is out of range", "allowed: 1 to 4"]),
        ok("model_margin = 1.15", "model_margin = 1"),
        err("model_margin = 1.15", "model_margin = nan", "estimator.model_margin", &["NaN is out of range", "allowed: 1 to 4"]),
        err("history_quantile = 0.95", "history_quantile = 0.4", "estimator.history_quantile", &["0.4 is out of range", "allowed: 0.5 to 1"]),
        ok("history_quantile = 0.95", "history_quantile = 1.0"),
        err("history_margin = 1.1", "history_margin = 5.0", "estimator.history_margin", &["5 is out of range", "allowed: 1 to 4"]),
        err("history_min_samples = 3", "history_min_samples = 0", "estimator.history_min_samples", &["0 is out of range", "allowed: 1 to 1000"]),
        err("history_min_samples = 3", "history_min_samples = 1001", "estimator.history_min_samples", &["1001 is out of range", "allowed: 1 to 1000"]),
        err("history_window = 50", "history_window = 100001", "estimator.history_window", &["100001 is out of range", "allowed: 1 to 100000"]),
        err("history_window = 50", "history_window = 99999999999999999999", "estimator.history_window", &["99999999999999999999", "an integer from 1 to 100000"]),
        err("max_oom_restarts = 2", "max_oom_restarts = -1", "estimator.max_oom_restarts", &["-1 is out of range", "allowed: 0 to 10"]),
        ok("max_oom_restarts = 2", "max_oom_restarts = 0"),
        err("oom_peak_fraction = 0.98", "oom_peak_fraction = 1.5", "estimator.oom_peak_fraction", &["1.5 is out of range", "allowed: 0.5 to 1"]),
        err("oom_peak_fraction = 0.98", "oom_peak_fraction = \"0.9\"", "estimator.oom_peak_fraction", &["string \"0.9\"", "a number from 0.5 to 1"]),
        // [history]
        err("server = \"ctl1:6830\"", "server = \"ctl1:0\"", "history.server", &["port '0' in 'ctl1:0'", "1 to 65535"]),
        err("server = \"ctl1:6830\"", "server = \"ctl1\"", "history.server", &["'ctl1' is not host:port", "e.g. \"ctl1:6830\""]),
        err("server = \"ctl1:6830\"", "server = \":6830\"", "history.server", &["':6830' has no host", "e.g. \"ctl1:6830\""]),
        err("server = \"ctl1:6830\"", "server = \"ctl1:70000\"", "history.server", &["port '70000'", "1 to 65535"]),
        err("server = \"ctl1:6830\"", "server = \"ctl1:abc\"", "history.server", &["port 'abc'", "1 to 65535"]),
        ok("server = \"ctl1:6830\"", "server = \"10.0.0.1:6830\""),
        ok("listen = \"0.0.0.0:6830\"", "listen = \"[::]:6830\""),
        err("listen = \"0.0.0.0:6830\"", "listen = \"0.0.0.0\"", "history.listen", &["'0.0.0.0' is not host:port"]),
        err("snapshot_refresh = \"5s\"", "snapshot_refresh = \"0s\"", "history.snapshot_refresh", &["'0s' is out of range", DUR]),
        err("snapshot_refresh = \"5s\"", "snapshot_refresh = \"40d\"", "history.snapshot_refresh", &["'40d' is out of range", DUR]),
        err("snapshot_refresh = \"5s\"", "snapshot_refresh = 5", "history.snapshot_refresh", &["integer `5`", "e.g. \"5s\""]),
        // [jobs]
        ok("whole_gpu = \"full-profile\"", "whole_gpu = \"estimate\""),
        ok("whole_gpu = \"full-profile\"", "whole_gpu = \"reject\""),
        err("whole_gpu = \"full-profile\"", "whole_gpu = \"maybe\"", "jobs.whole_gpu", &["unknown variant `maybe`", "\"full-profile\", \"estimate\" or \"reject\""]),
        ok("multi_gpu = \"full-profile\"", "multi_gpu = \"reject\""),
        err("multi_gpu = \"full-profile\"", "multi_gpu = \"estimate\"", "jobs.multi_gpu", &["unknown variant `estimate`", "\"full-profile\" or \"reject\""]),
        err_at("multi_gpu = \"full-profile\"", "multi_gpu = \"full-profile\"\nsingle_gpu = 1", "jobs.single_gpu", "single_gpu", &["unknown field `single_gpu`", "whole_gpu"]),
        // [controller]
        err("interval = \"5s\"", "interval = \"5\"", "controller.interval", &["bad duration '5'", "e.g. \"5s\"", DUR]),
        err("interval = \"5s\"", "interval = 5", "controller.interval", &["integer `5`", "a duration string", "e.g. \"5s\""]),
        err("interval = \"5s\"", "interval = \"1000000000000000h\"", "controller.interval", &["'1000000000000000h' is out of range", DUR]),
        err("interval = \"5s\"", "interval = \"0s\"", "controller.interval", &["'0s' is out of range", DUR]),
        ok("interval = \"5s\"", "interval = \"500ms\""),
        err("max_concurrent_repartitions = 1", "max_concurrent_repartitions = 0", "controller.max_concurrent_repartitions", &["0 is out of range", "allowed: 1 to 10000"]),
        err("max_concurrent_repartitions = 1", "max_concurrent_repartitions = 10001", "controller.max_concurrent_repartitions", &["10001 is out of range", "allowed: 1 to 10000"]),
        ok("min_layout_lifetime = \"120s\"", "min_layout_lifetime = \"0s\""),
        err("min_layout_lifetime = \"120s\"", "min_layout_lifetime = \"31d\"", "controller.min_layout_lifetime", &["'31d' is out of range", "0 to 30 days"]),
        err("drain_timeout = \"30m\"", "drain_timeout = \"5000000000000000h\"", "controller.drain_timeout", &["'5000000000000000h' is out of range", DUR]),
        ok("drain_timeout = \"30m\"", "drain_timeout = \"30d\""),
        ok("drain = \"reservation\"", "drain = \"immediate\""),
        err("drain = \"reservation\"", "drain = \"later\"", "controller.drain", &["unknown variant `later`", "\"reservation\" or \"immediate\""]),
        err("reservation_duration = \"10m\"", "reservation_duration = \"0s\"", "controller.reservation_duration", &["'0s' is out of range", DUR]),
        err("drain_timeout = \"30m\"", "drain_timeout = \"-5m\"", "controller.drain_timeout", &["bad duration '-5m'", "e.g. \"5s\""]),
        // [policy]
        err_at("kind = \"demand\"", "kind = \"static\"", "policy.forecast_window", "forecast_window", &["applies only to kind = \"demand\""]),
        err("kind = \"demand\"", "kind = \"smart\"", "policy.kind", &["unknown variant `smart`", "\"demand\", \"static\" or \"none\""]),
        err("forecast_window = \"10m\"", "forecast_window = \"0s\"", "policy.forecast_window", &["'0s' is out of range", DUR]),
        err("min_gain = 1", "min_gain = 0", "policy.min_gain", &["0 is out of range", "allowed: 1 to 1000"]),
        err("min_gain = 1", "min_gain = 1001", "policy.min_gain", &["1001 is out of range", "allowed: 1 to 1000"]),
        ok("kind = \"demand\"\nforecast_window = \"10m\"\nmin_gain = 1", "kind = \"none\""),
        // [[node_group]]: name, nodes
        err("name = \"a100\"", "name = \"a b\"", "node_group.name", &["'a b'", "letters, digits"]),
        err("name = \"a100\"", "name = \"\"", "node_group.name", &["''", "letters, digits"]),
        err_at("", GROUP2.replace("\"b\"", "\"a100\""), "node_group.name", "name = \"a100\"\nnodes = \"m1\"", &["'a100' names two groups", "unique"]),
        err("nodes = \"n[1-2]\"", "nodes = \"n[2-1]\"", "node_group.nodes", &["bad range '2-1'", "e.g. n[1-4,7]"]),
        err("nodes = \"n[1-2]\"", "nodes = \"n[1-2\"", "node_group.nodes", &["unbalanced brackets in 'n[1-2'", "e.g. [\"n1\", \"n2\"]"]),
        err("nodes = \"n[1-2]\"", "nodes = 5", "node_group.nodes", &["integer is not a node list", "\"n[1-2]\""]),
        err("nodes = \"n[1-2]\"", "nodes = [1, 2]", "node_group.nodes", &["1 is not a string", "\"n[1-2]\""]),
        err("nodes = \"n[1-2]\"", "nodes = [\"n1\", \"n1\"]", "node_group.nodes", &["node n1 is listed twice"]),
        err("nodes = \"n[1-2]\"", "nodes = \"n[1-1000000]\"", "node_group.nodes", &["'n[1-1000000]' expands to more than 100000 nodes"]),
        ok("nodes = \"n[1-2]\"", "nodes = \"n[1-100000]\""),
        err("nodes = \"n[1-2]\"", "nodes = []", "node_group.nodes", &["no nodes", "\"n[1-2]\""]),
        err_at("", GROUP2.replace("\"m1\"", "\"n2\""), "node_group.nodes", "nodes = \"n2\"", &["node n2 is also in group 'a100'"]),
        err("nodes = \"n[1-2]\"", long_name, "node_group.nodes", &["nnnn...", "at most 253"]),
        err("nodes = \"n[1-2]\"", padded, "node_group.nodes", &["longer than 253 bytes"]),
        // gpu_model, gpus, backend
        err("gpu_model = \"A100-80GB\"", "gpu_model = \"A200\"", "node_group.gpu_model", &["unknown GPU model 'A200'", "allowed: ", "H100-80GB"]),
        err("gpu_model = \"A100-80GB\"", long_value, "node_group.gpu_model", &["ZZZ...'", "allowed: "]),
        ok("gpu_model = \"A100-80GB\"", "gpu_model = \"nvidia a100-sxm4-80gb\""),
        err("gpus = 2", "gpus = 0", "node_group.gpus", &["0 GPUs per node", "allowed: 1 to 16"]),
        err("gpus = 2", "gpus = 17", "node_group.gpus", &["17 GPUs per node", "allowed: 1 to 16"]),
        err("gpus = 2", "gpus = 99999999999999999999", "node_group.gpus", &["99999999999999999999", "an integer from 1 to 16"]),
        err("gpus = 2", "gpus = \"2\"", "node_group.gpus", &["string \"2\"", "an integer from 1 to 16"]),
        err("backend = \"simulated\"", "backend = \"fake\"", "node_group.backend", &["unknown variant `fake`", "\"simulated\" or \"nvml\""]),
        err("backend = \"simulated\"", "backend = simulated", "node_group.backend", &["backend = simulated", "\"simulated\" or \"nvml\""]),
        // layouts (M3, L5)
        err("initial_layout = \"1x7g.80gb\"", "initial_layout = \"4294967295x1g.10gb\"", "node_group.initial_layout", &["4294967295 instances of 1g.10gb", "at most 7"]),
        err("initial_layout = \"1x7g.80gb\"", "initial_layout = \"4294967295x1g.10gb+1x1g.10gb\"", "node_group.initial_layout", &["4294967295 instances of 1g.10gb", "at most 7"]),
        err("initial_layout = \"1x7g.80gb\"", "initial_layout = \"99999999999999999999999x1g.10gb\"", "node_group.initial_layout", &["99999999999999999999999 instances of 1g.10gb", "at most 7"]),
        err("initial_layout = \"1x7g.80gb\"", "initial_layout = \"4x1g.10gb+4x1g.10gb\"", "node_group.initial_layout", &["8 instances of 1g.10gb", "at most 7"]),
        err("initial_layout = \"1x7g.80gb\"", "initial_layout = \"0x7g.80gb\"", "node_group.initial_layout", &["bad term '0x7g.80gb'", "\"1x7g.80gb\""]),
        err("initial_layout = \"1x7g.80gb\"", "initial_layout = \"1x7g.40gb\"", "node_group.initial_layout", &["unknown MIG profile '7g.40gb' for A100-80GB", "allowed: 7g.80gb", "\"1x7g.80gb\""]),
        err("initial_layout = \"1x7g.80gb\"", "initial_layout = \"1x4g.40gb+2x3g.40gb\"", "node_group.initial_layout", &["'1x4g.40gb+2x3g.40gb' does not fit on one A100-80GB", "e.g. \"1x7g.80gb\""]),
        err("initial_layout = \"1x7g.80gb\"", "initial_layout = \"+1x7g.80gb\"", "node_group.initial_layout", &["bad term ''"]),
        err("initial_layout = \"1x7g.80gb\"", "initial_layout = \"2x1g.10gb+me\"", "node_group.initial_layout", &["2 instances of 1g.10gb+me", "at most 1"]),
        ok("initial_layout = \"1x7g.80gb\"", "initial_layout = \"1x1g.10gb+me+6x1g.10gb\""),
        ok("initial_layout = \"1x7g.80gb\"", "initial_layout = \"1g.10gb+me\""),
        ok("initial_layout = \"1x7g.80gb\"", "initial_layout = \"empty\""),
        ok("initial_layout = \"1x7g.80gb\"", "initial_layout = \"2g.20gb + 2g.20gb\""),
        err_at("allowed_layouts = \"all\"", "allowed_layouts = [\"7x1g.10gb\"]", "node_group.initial_layout", "initial_layout", &["1x7g.80gb is not in allowed_layouts"]),
        err("allowed_layouts = \"all\"", "allowed_layouts = \"some\"", "node_group.allowed_layouts", &["\"some\" is not allowed", "use \"all\" or a list of layouts"]),
        err("allowed_layouts = \"all\"", "allowed_layouts = []", "node_group.allowed_layouts", &["[] is not allowed", "\"1x7g.80gb\""]),
        ok("allowed_layouts = \"all\"", "allowed_layouts = [\"1x7g.80gb\", \"7x1g.10gb\", \"1x1g.10gb+me+6x1g.10gb\"]"),
        err("allowed_layouts = \"all\"", "allowed_layouts = [\"1x7g.80gb\", \"8x1g.10gb\"]", "node_group.allowed_layouts", &["8 instances of 1g.10gb", "at most 7"]),
        err("allowed_layouts = \"all\"", "allowed_layouts = [1]", "node_group.allowed_layouts", &["1 is not a string", "\"1x7g.80gb\""]),
        // An A30 with an A100 layout: the examples are the A30's (checked below as well).
        err_at("gpu_model = \"A100-80GB\"", "gpu_model = \"A30-24GB\"", "node_group.initial_layout", "initial_layout", &["unknown MIG profile '7g.80gb' for A30-24GB", "\"1x4g.24gb\""]),
        // node_conf, allow_mig_mode_change
        err("node_conf = \"CPUs=4 RealMemory=4000\"", "node_conf = \"NodeName=x CPUs=4\"", "node_group.node_conf", &["'NodeName=x'", "sets NodeName and Gres itself", "e.g. \"CPUs=4 RealMemory=4000\""]),
        err("node_conf = \"CPUs=4 RealMemory=4000\"", "node_conf = \"CPUs=4 gres=gpu:1\"", "node_group.node_conf", &["'gres=gpu:1'"]),
        err("allow_mig_mode_change = false", "allow_mig_mode_change = true", "node_group.allow_mig_mode_change", &["applies only to backend = \"nvml\"", "set it to false"]),
        ok("backend = \"simulated\"\ninitial_layout = \"1x7g.80gb\"\nallowed_layouts = \"all\"\nnode_conf = \"CPUs=4 RealMemory=4000\"\nallow_mig_mode_change = false", "backend = \"nvml\"\nallow_mig_mode_change = true"),
        err("allow_mig_mode_change = false", "allow_mig_mode_change = 1", "node_group.allow_mig_mode_change", &["integer `1`", "true or false"]),
        err_at("allow_mig_mode_change = false", "allow_mig_mode_change = false\nmig = true", "node_group.mig", "mig = true", &["unknown field `mig`", "gpu_model"]),
        // TOML syntax
        err_at("[controller]\ninterval = \"5s\"", "[controller\ninterval = \"5s\"", "controller", "[controller", &["[controller", "a table header written [controller]"]),
        err_at("interval = \"5s\"", "interval = \"5s\"\ninterval = \"6s\"", "controller.interval", "interval = \"6s\"", &["duplicate key", "a duration string"]),
        err("squeue = \"/usr/bin/squeue\"", "squeue = \"/usr/bin/squeue", "paths.squeue", &["squeue = \"/usr/bin/squeue", "a quoted absolute path or command name"]),
        err("gpus = 2", "gpus = 2 2", "node_group.gpus", &["gpus = 2 2", "an integer from 1 to 16"]),
    ]
}

fn line_of(text: &str, needle: &str) -> usize {
    let at = text
        .find(needle)
        .unwrap_or_else(|| panic!("'{needle}' not in the case's text"));
    text[..at].matches('\n').count() + 1
}

#[test]
fn the_base_config_is_accepted() {
    parse_config(BASE).unwrap();
}

#[test]
fn every_case_of_the_table_is_accepted_or_refused_as_listed() {
    let cases = cases();
    assert!(cases.len() >= 90, "{} cases", cases.len());
    let mut failures = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        let text = if c.from.is_empty() {
            format!("{BASE}{}", c.to)
        } else {
            assert_eq!(
                BASE.matches(c.from).count(),
                1,
                "case {i}: '{}' must occur once",
                c.from
            );
            BASE.replace(c.from, &c.to)
        };
        let got = parse_config(&text);
        let why = match (&c.expect, got) {
            (Expect::Accepted, Ok(_)) => continue,
            (Expect::Accepted, Err(e)) => format!("refused: {e}"),
            (Expect::Error { .. }, Ok(_)) => "accepted".to_string(),
            (Expect::Error { key, at, has }, Err(e)) => {
                let e: ConfigError = e;
                let shown = e.to_string();
                let needle = if at.is_empty() {
                    c.to.lines().next().unwrap_or("")
                } else {
                    at
                };
                let line = line_of(&text, needle);
                let missing: Vec<_> = has.iter().filter(|h| !shown.contains(**h)).collect();
                if e.key == *key && e.line == line && missing.is_empty() && shown.len() < 2000 {
                    continue;
                }
                format!(
                    "got key {} line {} (want {key}, {line}), missing {missing:?}: {shown}",
                    e.key, e.line
                )
            }
        };
        failures.push(format!("case {i} ({}): {why}", c.to.lines().next().unwrap_or("")));
    }
    assert!(
        failures.is_empty(),
        "{} failing:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn a_layout_error_on_an_a30_gives_examples_valid_on_an_a30() {
    let text = BASE.replace("gpu_model = \"A100-80GB\"", "gpu_model = \"A30-24GB\"");
    let e = parse_config(&text).unwrap_err().to_string();
    let a30 = model_by_name("A30-24GB").unwrap();
    let examples: Vec<&str> = e.split('"').skip(1).step_by(2).collect();
    assert!(examples.len() >= 2, "{e}");
    for x in examples {
        assert!(
            ProfileCounts::parse(a30, x).is_ok(),
            "example {x} of '{e}' is not an A30 layout"
        );
    }
}

#[test]
fn the_duplicate_node_check_is_not_quadratic() {
    // 100000 nodes in one group and a second group checked against them: a quadratic check
    // took 7.8 s per parse here (and the config is parsed in every Prolog and Epilog).
    let text =
        BASE.replace("nodes = \"n[1-2]\"", "nodes = \"n[1-60000]\"") + &GROUP2.replace("\"m1\"", "\"m[1-40000]\"");
    let t0 = std::time::Instant::now();
    let c = parse_config(&text).unwrap();
    assert_eq!(c.node_groups[0].nodes.len() + c.node_groups[1].nodes.len(), 100_000);
    assert!(t0.elapsed() < std::time::Duration::from_secs(5), "{:?}", t0.elapsed());
    // The total over all groups is bounded like one hostlist.
    let over = text.replace("m[1-40000]", "m[1-40001]");
    let e = parse_config(&over).unwrap_err().to_string();
    assert!(e.contains("more than 100000 nodes in all groups together"), "{e}");
}
