//! `dynmig gres-conf --billing-weights` through the binary: the slurm.conf settings that bill
//! MIG types by memory slices, for the config's GPU models.

use std::process::Command;

fn gres_conf(config: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_dynmig"))
        .arg("--config")
        .arg(config)
        .arg("gres-conf")
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn billing_weights_charge_a_7g_eight_times_a_1g_and_refuse_a_bad_weight() {
    let d = tempfile::tempdir().unwrap();
    let config = d.path().join("dynmig.toml");
    std::fs::write(&config, dynmig_core::config::EXAMPLE_TOML).unwrap();
    let out = gres_conf(&config, &["--billing-weights", "--per-slice", "2"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let weights = text
        .lines()
        .find_map(|l| l.strip_prefix("TRESBillingWeights="))
        .expect("a TRESBillingWeights line")
        .trim_matches('"');
    let weight = |t: &str| -> f64 {
        weights
            .split(',')
            .find_map(|kv| kv.strip_prefix(&format!("GRES/gpu:{t}=")))
            .unwrap_or_else(|| panic!("no {t} in {weights}"))
            .parse()
            .unwrap()
    };
    assert_eq!(weight("1g.10gb"), 2.0);
    assert_eq!(weight("7g.80gb"), 8.0 * weight("1g.10gb"));
    assert_eq!(weight("3g.40gb"), 4.0 * weight("1g.10gb"));
    let tres = text
        .lines()
        .find_map(|l| l.strip_prefix("AccountingStorageTRES="))
        .unwrap();
    assert!(tres.split(',').any(|t| t == "gres/gpu:7g.80gb"), "{tres}");
    // A weight of 0 bills nothing: refused with what is allowed.
    let out = gres_conf(&config, &["--billing-weights", "--per-slice", "0"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("above 0"));
    // Without --billing-weights the node is needed.
    let out = gres_conf(&config, &[]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--node"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
