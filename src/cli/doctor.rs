//! `dynmig doctor`: whether the dynmig plugins installed here are builds for the Slurm that
//! runs. Slurm refuses a job_submit plugin built for another major.minor.micro, and a SPANK
//! plugin for another major.minor ("Incompatible Slurm plugin version"), so a Slurm upgrade
//! without a matching dynmig build leaves jobs unrewritten.
//!
//! The running slurmctld's version, `PluginDir`, `PlugStackConfig` and `JobSubmitPlugins` come
//! from `scontrol show config`: no release from 22.05 on prints the controller's configuration
//! as JSON, so this reads the `Key = Value` lines of exactly these keys.

use anyhow::{anyhow, Context, Result};
use dynmig_core::config::Config;
use dynmig_host::process::{run, Limits};
use dynmig_slurm::plugin::{check_plugin, plugin_version, PluginKind, SlurmVersion};
use std::path::{Path, PathBuf};

/// The file name Slurm loads job_submit/dynmig from in each `PluginDir` entry.
pub const JOB_SUBMIT_FILE: &str = "job_submit_dynmig.so";

/// The value of `key` in `scontrol show config` text (`Key  = Value` lines).
pub fn config_value<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.trim() == key).then(|| v.trim())
    })
}

/// The SPANK plugin lines of a plugstack.conf naming `spank_dynmig` (`optional|required PATH`).
pub fn spank_paths(plugstack: &str) -> Vec<String> {
    plugstack
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            match (w.next(), w.next()) {
                (Some("optional" | "required"), Some(p)) if p.contains("spank_dynmig") => Some(p.to_string()),
                _ => None,
            }
        })
        .collect()
}

/// Checks the plugins against the running slurmctld; prints one line per finding. Returns
/// whether everything matches.
///
/// # Errors
/// `scontrol` cannot reach slurmctld (or times out), or reports no version.
pub fn doctor(config: &Config, job_submit: Option<&Path>, spank: Option<&Path>) -> Result<bool> {
    let scontrol = config.paths.scontrol.as_os_str();
    let limits = Limits {
        timeout: std::time::Duration::from_secs(15),
        ..Limits::default()
    };
    let show = run(scontrol, &["show", "config"], limits).context("scontrol show config")?;
    let running = config_value(&show, "SLURM_VERSION")
        .and_then(SlurmVersion::parse)
        .ok_or_else(|| anyhow!("scontrol show config names no SLURM_VERSION"))?;
    let client = run(scontrol, &["--version"], limits)
        .ok()
        .and_then(|v| SlurmVersion::parse(&v));
    let mut ok = true;
    match client {
        Some(c) if c != running => {
            println!("slurmctld: Slurm {running}; this node's scontrol is {c} (client and daemons of one release are safest)");
        }
        _ => println!("slurmctld: Slurm {running}"),
    }
    let plugin_dirs: Vec<PathBuf> = config_value(&show, "PluginDir")
        .unwrap_or("")
        .split(':')
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .collect();
    let enabled = config_value(&show, "JobSubmitPlugins").is_some_and(|v| v.split(',').any(|p| p.trim() == "dynmig"));
    let job_submit = job_submit
        .map(Path::to_path_buf)
        .or_else(|| plugin_dirs.iter().map(|d| d.join(JOB_SUBMIT_FILE)).find(|p| p.exists()));
    match job_submit {
        Some(path) => ok &= report("job_submit/dynmig", PluginKind::JobSubmit, &path, running),
        None if enabled => {
            println!(
                "job_submit/dynmig: MISSING: JobSubmitPlugins names dynmig but no PluginDir entry ({}) holds {JOB_SUBMIT_FILE}",
                plugin_dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(":")
            );
            ok = false;
        }
        None => println!("job_submit/dynmig: not enabled (JobSubmitPlugins does not name dynmig)"),
    }
    let spank: Vec<PathBuf> = match spank {
        Some(p) => vec![p.to_path_buf()],
        None => config_value(&show, "PlugStackConfig")
            .and_then(|f| std::fs::read_to_string(f).ok())
            .map(|text| {
                spank_paths(&text)
                    .into_iter()
                    .map(|p| {
                        let p = PathBuf::from(p);
                        if p.is_absolute() {
                            p
                        } else {
                            plugin_dirs.iter().map(|d| d.join(&p)).find(|c| c.exists()).unwrap_or(p)
                        }
                    })
                    .collect()
            })
            .unwrap_or_default(),
    };
    if spank.is_empty() {
        println!("spank/dynmig: not in PlugStackConfig");
    }
    for path in spank {
        ok &= report("spank/dynmig", PluginKind::Spank, &path, running);
    }
    ok &= nvml_settings(config, &show, running);
    Ok(ok)
}

/// From 25.11, slurmstepd (and slurmd with `acct_gather_energy/gpu`) keep NVML open, so that
/// no other process can configure the GPU: with real GPUs (`backend = "nvml"`) GPU accounting
/// must be off. Prints a finding when it matters; returns whether the settings are safe.
fn nvml_settings(config: &Config, show: &str, running: SlurmVersion) -> bool {
    use dynmig_core::config::Backend;
    if running < SlurmVersion(0x19_0b_00) || !config.node_groups.iter().any(|g| g.backend == Backend::Nvml) {
        return true;
    }
    let gather = config_value(show, "JobAcctGatherParams").unwrap_or("");
    let energy = config_value(show, "AcctGatherEnergyType").unwrap_or("");
    let mut ok = true;
    if !gather.contains("DisableGPUAcct") {
        println!("slurm.conf: MISSING JobAcctGatherParams=DisableGPUAcct: from 25.11 slurmstepd holds NVML open and dynmig cannot change MIG instances");
        ok = false;
    }
    if energy.contains("gpu") {
        println!(
            "slurm.conf: AcctGatherEnergyType={energy}: slurmd holds NVML open from 25.11; use none on dynmig nodes"
        );
        ok = false;
    }
    if ok {
        println!("slurm.conf: GPU accounting off (JobAcctGatherParams=DisableGPUAcct): ok");
    }
    ok
}

/// One plugin file against the running version; prints the finding, returns whether it loads.
fn report(what: &str, kind: PluginKind, path: &Path, running: SlurmVersion) -> bool {
    let built = std::fs::read(path)
        .map_err(|e| e.to_string())
        .and_then(|b| plugin_version(&b).map(|(v, _)| v).map_err(|e| e.to_string()));
    match built.map(|b| (b, check_plugin(kind, b, running))) {
        Ok((b, Ok(()))) => {
            println!("{what}: {} built for Slurm {b}: ok", path.display());
            true
        }
        Ok((_, Err(why))) => {
            println!("{what}: {}: MISMATCH: {why}", path.display());
            false
        }
        Err(e) => {
            println!("{what}: {}: cannot read its version: {e}", path.display());
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_values_and_plugstack_lines() {
        let show = "Configuration data as of 2026-11-23T19:00:00\nPluginDir               = /a:/b\nPlugStackConfig         = /etc/slurm/plugstack.conf\nSLURM_VERSION           = 24.11.5\n";
        assert_eq!(config_value(show, "SLURM_VERSION"), Some("24.11.5"));
        assert_eq!(config_value(show, "PluginDir"), Some("/a:/b"));
        assert_eq!(config_value(show, "Plugin"), None);
        let plugstack = "# comment spank_dynmig.so\noptional /x/spank_dynmig.so arg\nrequired other.so\ninclude /etc/x/*\nrequired spank_dynmig.so\n";
        assert_eq!(spank_paths(plugstack), ["/x/spank_dynmig.so", "spank_dynmig.so"]);
    }

    #[test]
    fn gpu_accounting_must_be_off_with_real_gpus_from_25_11() {
        let mut config = Config::default_embedded();
        assert!(!config.node_groups.is_empty());
        let on = "JobAcctGatherParams     = (null)\n";
        let off = "JobAcctGatherParams     = DisableGPUAcct\n";
        let energy = "JobAcctGatherParams = DisableGPUAcct\nAcctGatherEnergyType = acct_gather_energy/gpu\n";
        let v2511 = SlurmVersion::parse("25.11.0").unwrap();
        let v2505 = SlurmVersion::parse("25.05.3").unwrap();
        for g in &mut config.node_groups {
            g.backend = dynmig_core::config::Backend::Simulated;
        }
        assert!(nvml_settings(&config, on, v2511), "simulated GPUs need nothing");
        config.node_groups[0].backend = dynmig_core::config::Backend::Nvml;
        assert!(nvml_settings(&config, on, v2505), "before 25.11 nothing holds NVML");
        assert!(!nvml_settings(&config, on, v2511));
        assert!(nvml_settings(&config, off, v2511));
        assert!(!nvml_settings(&config, energy, v2511));
    }
}
