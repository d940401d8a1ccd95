//! dynmig.toml's metrics and log keys: `[controller]`, `[agent]` and `[history]`
//! `metrics_listen` (off when absent), `[log] level`; bad values name the key, the line and
//! what is allowed.

use dynmig_core::config::{parse_config, ConfigError, LogLevel};

const MINIMAL: &str = r#"version = 1

[[node_group]]
name = "g"
nodes = ["a1"]
gpu_model = "A100-40GB"
gpus = 1
backend = "nvml"
"#;

fn with(extra: &str) -> String {
    format!("{MINIMAL}\n{extra}\n")
}

fn bad(text: &str, key: &str) -> String {
    let e: ConfigError = parse_config(text).expect_err("expected a config error");
    assert_eq!(e.key, key, "{e}");
    let line = text[..text.find("metrics_listen =").or_else(|| text.find("level =")).unwrap()]
        .matches('\n')
        .count()
        + 1;
    assert_eq!(e.line, line, "{e}");
    e.to_string()
}

#[test]
fn metrics_are_off_and_logs_at_info_when_the_keys_are_absent() {
    let c = parse_config(MINIMAL).unwrap();
    assert_eq!(c.controller.metrics_listen, None);
    assert_eq!(c.agent.metrics_listen, None);
    assert_eq!(c.history.metrics_listen, None);
    assert_eq!(c.log.level, LogLevel::Info);
}

#[test]
fn each_daemon_reads_its_metrics_address() {
    let c = parse_config(&with(
        "[controller]\nmetrics_listen = \"127.0.0.1:9750\"\n[agent]\nmetrics_listen = \"0.0.0.0:9751\"\n[history]\nmetrics_listen = \"[::1]:9752\"\n[log]\nlevel = \"Debug\"",
    ))
    .unwrap();
    assert_eq!(c.controller.metrics_listen, Some("127.0.0.1:9750".parse().unwrap()));
    assert_eq!(c.agent.metrics_listen, Some("0.0.0.0:9751".parse().unwrap()));
    assert_eq!(c.history.metrics_listen, Some("[::1]:9752".parse().unwrap()));
    assert_eq!(c.log.level, LogLevel::Debug);
}

#[test]
fn a_bad_metrics_address_says_what_is_wrong() {
    let e = bad(
        &with("[controller]\nmetrics_listen = \"localhost:9750\""),
        "controller.metrics_listen",
    );
    assert!(
        e.contains("'localhost' is not an IP address") && e.contains("127.0.0.1:9750"),
        "{e}"
    );
    let e = bad(&with("[agent]\nmetrics_listen = \"127.0.0.1\""), "agent.metrics_listen");
    assert!(e.contains("no ':port'"), "{e}");
    let e = bad(
        &with("[history]\nmetrics_listen = \"127.0.0.1:99999\""),
        "history.metrics_listen",
    );
    assert!(e.contains("port '99999'") && e.contains("0 to 65535"), "{e}");
    let e = parse_config(&with("[agent]\nmetrics_listen = 9750")).unwrap_err();
    assert_eq!(e.key, "agent.metrics_listen", "{e}");
    assert!(e.to_string().contains("\"127.0.0.1:9750\""), "{e}");
    let e = parse_config(&with("[agent]\nlisten = \"127.0.0.1:1\"")).unwrap_err();
    assert!(e.to_string().contains("listen"), "{e}");
}

#[test]
fn a_bad_log_level_lists_the_levels() {
    let e = bad(&with("[log]\nlevel = \"verbose\""), "log.level");
    assert!(
        e.contains("'verbose' is not a log level") && e.contains("off, error, warn, info, debug, trace"),
        "{e}"
    );
}

#[test]
fn a_port_alone_binds_loopback_and_per_job_series_are_off_by_default() {
    let c = parse_config(&with(
        "[controller]\nmetrics_listen = \"9750\"\n[agent]\nmetrics_listen = \":9751\"\n[history]\nmetrics_listen = \"9752\"",
    ))
    .unwrap();
    assert_eq!(c.controller.metrics_listen, Some("127.0.0.1:9750".parse().unwrap()));
    assert_eq!(c.agent.metrics_listen, Some("127.0.0.1:9751".parse().unwrap()));
    assert_eq!(c.history.metrics_listen, Some("127.0.0.1:9752".parse().unwrap()));
    assert!(!c.agent.metrics_per_job, "per-job series must be opt-in");
    assert!(!parse_config(MINIMAL).unwrap().agent.metrics_per_job);
    let on = parse_config(&with("[agent]\nmetrics_listen = \"9751\"\nmetrics_per_job = true")).unwrap();
    assert!(on.agent.metrics_per_job);
    let e = bad(&with("[agent]\nmetrics_listen = \"99999\""), "agent.metrics_listen");
    assert!(e.contains("port '99999' is not a number from 0 to 65535"), "{e}");
    let e = parse_config(&with("[agent]\nmetrics_per_job = \"yes\"")).unwrap_err();
    assert_eq!(e.key, "agent.metrics_per_job", "{e}");
    assert!(e.to_string().contains("true or false"), "{e}");
}
