//! NVIDIA mig-parted interop: its v1 YAML config in, dynmig layouts out, and back.
//!
//! mig-parted (NVIDIA/mig-parted, `api/spec/v1`) keeps named configs, each a list of device
//! entries:
//!
//! ```yaml
//! version: v1
//! mig-configs:
//!   all-balanced:
//!     - device-filter: ["0x20B210DE", "0x20B510DE"]   # PCI device ID << 16 | vendor 0x10DE
//!       devices: all                                  # or a list of GPU indices: [0, 1]
//!       mig-enabled: true
//!       mig-devices:                                  # profile name -> instance count
//!         "1g.10gb": 2
//!         "2g.20gb": 1
//!         "3g.40gb": 1
//! ```
//!
//! An entry applies to a GPU when `devices` selects its index and `device-filter` (if any)
//! names its PCI device ID. [`import`] resolves every config for one GPU model and node size
//! into one [`GpuConfig`] per GPU; configs with no entry for the model are listed as skipped
//! (a site's file usually covers several models). [`export`] writes the same shape back,
//! with the model's PCI IDs as the `device-filter`, GPUs with equal settings grouped, and
//! `devices: all` when every GPU has the same one, so that `import(export(x)) == x`.
//!
//! What is refused, with the config, entry and what is allowed named: a `version` other than
//! `v1`, unknown keys, `mig-devices` while `mig-enabled: false`, compute-instance profiles
//! (`1c.3g.20gb`: dynmig creates one compute instance per GPU instance), profile names the
//! model lacks, layouts that cannot be placed, and two entries giving one GPU different
//! settings.

use crate::geometry::{place, GpuModel, ProfileCounts};
use crate::types::cut;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// NVIDIA's PCI vendor ID, the low 16 bits of a mig-parted `device-filter` value.
pub const NVIDIA_VENDOR_ID: u32 = 0x10DE;

/// A mig-parted file that could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MigPartedError {
    /// The YAML does not have mig-parted's v1 shape.
    #[error("not a mig-parted v1 config: {0}")]
    Syntax(String),
    /// One config's entry is not acceptable for this model.
    #[error("mig-config '{config}' entry {entry}: {why}")]
    Entry {
        /// The config name.
        config: String,
        /// The entry's position in the config's list, from 0.
        entry: usize,
        /// What is wrong and what is allowed.
        why: String,
    },
    /// A config selects some GPUs of the node but not all of them.
    #[error("mig-config '{config}' says nothing about GPU(s) {missing:?} of this {model} node; dynmig needs a layout for every GPU (add an entry with those devices)")]
    Incomplete {
        /// The config name.
        config: String,
        /// GPU indices no entry selects.
        missing: Vec<u32>,
        /// The model.
        model: &'static str,
    },
}

/// The raw file, as mig-parted's `api/spec/v1` defines it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpec {
    version: String,
    #[serde(rename = "mig-configs")]
    mig_configs: BTreeMap<String, Vec<RawEntry>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    #[serde(rename = "device-filter", default, skip_serializing_if = "Option::is_none")]
    device_filter: Option<OneOrMany>,
    devices: RawDevices,
    #[serde(rename = "mig-enabled")]
    mig_enabled: bool,
    #[serde(rename = "mig-devices", default, skip_serializing_if = "Option::is_none")]
    mig_devices: Option<BTreeMap<String, u32>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
enum RawDevices {
    /// `all` (any other word is refused when resolved).
    Word(String),
    /// GPU indices.
    List(Vec<u32>),
}

/// One GPU's setting in a config: MIG off (the whole GPU), or MIG on with these instances.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuConfig {
    /// `mig-enabled: false`.
    Disabled,
    /// `mig-enabled: true` with `mig-devices` (empty: MIG on, no instances).
    Enabled(ProfileCounts),
}

impl std::fmt::Display for GpuConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GpuConfig::Disabled => f.write_str("mig-disabled"),
            GpuConfig::Enabled(c) => write!(f, "{c}"),
        }
    }
}

/// The configs of a file resolved for one model and node size.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Imported {
    /// Config name -> one setting per GPU, GPU 0 first.
    pub configs: BTreeMap<String, Vec<GpuConfig>>,
    /// Configs with no entry for this model (their device filters name other GPUs).
    pub skipped: Vec<String>,
}

/// The `device-filter` value of PCI device ID `id`, as mig-parted writes it: `0x20B210DE`.
pub fn device_filter_value(id: u16) -> String {
    format!("0x{:08X}", (u32::from(id) << 16) | NVIDIA_VENDOR_ID)
}

fn parse_filter(v: &str) -> Result<u16, String> {
    let hex = v.trim().trim_start_matches("0x").trim_start_matches("0X");
    let n = u32::from_str_radix(hex, 16).map_err(|_| {
        format!(
            "device-filter '{}' is not a hex PCI ID such as \"0x20B210DE\"",
            cut(v, 100)
        )
    })?;
    if n & 0xFFFF != NVIDIA_VENDOR_ID {
        return Err(format!(
            "device-filter '{}': the low 16 bits must be NVIDIA's vendor ID 10DE (\"0x20B210DE\")",
            cut(v, 100)
        ));
    }
    Ok((n >> 16) as u16)
}

/// Largest mig-parted file read, bytes (NVIDIA's own files are a few kB).
pub const MAX_FILE_BYTES: usize = 1 << 20;
/// Deepest `[`/`{` nesting read (a mig-parted file nests 2 or 3 deep).
pub const MAX_FLOW_DEPTH: usize = 32;

/// Why `text` is not parsed at all: too large, or flow collections nested deeper than
/// [`MAX_FLOW_DEPTH`], which makes the YAML parser take time that grows faster than the text
/// (found by fuzzing: 22 s for 256 kB of `{`). Brackets in quoted strings count too: a real
/// file never has 32 of them open.
fn too_big_or_deep(text: &str) -> Option<String> {
    if text.len() > MAX_FILE_BYTES {
        return Some(format!("{} bytes; at most {MAX_FILE_BYTES} are read", text.len()));
    }
    let mut depth = 0usize;
    for b in text.bytes() {
        match b {
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_FLOW_DEPTH {
                    return Some(format!("'[' and '{{' nested more than {MAX_FLOW_DEPTH} deep"));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// Reads a mig-parted v1 file and resolves every config for a node of `gpus` GPUs of `model`.
///
/// # Errors
/// [`MigPartedError`] naming the config, the entry and what is allowed.
pub fn import(text: &str, model: &GpuModel, gpus: usize) -> Result<Imported, MigPartedError> {
    if let Some(why) = too_big_or_deep(text) {
        return Err(MigPartedError::Syntax(why));
    }
    let raw: RawSpec = serde_yaml::from_str(text).map_err(|e| MigPartedError::Syntax(cut(&e.to_string(), 300)))?;
    if raw.version != "v1" {
        return Err(MigPartedError::Syntax(format!(
            "version '{}': only 'v1' exists",
            cut(&raw.version, 100)
        )));
    }
    let mut out = Imported::default();
    for (name, entries) in &raw.mig_configs {
        let mut per_gpu: Vec<Option<GpuConfig>> = vec![None; gpus];
        let mut any = false;
        for (i, e) in entries.iter().enumerate() {
            let err = |why: String| MigPartedError::Entry {
                config: cut(name, 100),
                entry: i,
                why,
            };
            if let Some(f) = &e.device_filter {
                let values = match f {
                    OneOrMany::One(v) => vec![v.clone()],
                    OneOrMany::Many(v) => v.clone(),
                };
                let ids = values
                    .iter()
                    .map(|v| parse_filter(v))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(err)?;
                if !ids.iter().any(|id| model.pci_device_ids.contains(id)) {
                    continue;
                }
            }
            any = true;
            let setting = entry_setting(model, e).map_err(err)?;
            let selected: Vec<usize> = match &e.devices {
                RawDevices::Word(w) if w == "all" => (0..gpus).collect(),
                RawDevices::Word(w) => {
                    return Err(err(format!(
                        "devices: '{}': use \"all\" or a list of GPU indices",
                        cut(w, 100)
                    )))
                }
                RawDevices::List(v) => v.iter().map(|&d| d as usize).collect(),
            };
            for d in selected {
                let slot = per_gpu
                    .get_mut(d)
                    .ok_or_else(|| err(format!("devices: GPU {d} does not exist on a node of {gpus} GPU(s)")))?;
                match slot {
                    Some(prev) if *prev != setting => {
                        return Err(err(format!(
                            "GPU {d} is already set to {prev} by an earlier entry; this entry says {setting}"
                        )))
                    }
                    _ => *slot = Some(setting.clone()),
                }
            }
        }
        if !any {
            out.skipped.push(name.clone());
            continue;
        }
        let missing: Vec<u32> = (0..gpus).filter(|&g| per_gpu[g].is_none()).map(|g| g as u32).collect();
        if !missing.is_empty() {
            return Err(MigPartedError::Incomplete {
                config: name.clone(),
                missing,
                model: model.name,
            });
        }
        out.configs
            .insert(name.clone(), per_gpu.into_iter().map(Option::unwrap).collect());
    }
    Ok(out)
}

fn entry_setting(model: &GpuModel, e: &RawEntry) -> Result<GpuConfig, String> {
    if !e.mig_enabled {
        return match &e.mig_devices {
            Some(d) if !d.is_empty() => Err("mig-devices listed while mig-enabled is false".into()),
            _ => Ok(GpuConfig::Disabled),
        };
    }
    let mut counts = ProfileCounts::empty();
    for (name, &n) in e.mig_devices.iter().flatten() {
        if name.contains("c.") {
            return Err(format!(
                "'{}' is a compute-instance profile; dynmig creates one compute instance per GPU instance, so list GPU-instance profiles only",
                cut(name, 100)
            ));
        }
        let p = model.profile(name).ok_or_else(|| {
            let allowed: Vec<&str> = model.profiles.iter().map(|p| p.name).collect();
            format!(
                "{} has no MIG profile '{}'; allowed: {}",
                model.name,
                cut(name, 100),
                allowed.join(", ")
            )
        })?;
        // Bounded before anything is built: a count is at most what one GPU holds.
        if n > u32::from(p.max_instances) {
            return Err(format!(
                "mig-devices '{}': {n} instances; one {} holds at most {}",
                p.name, model.name, p.max_instances
            ));
        }
        counts.add(p, n);
    }
    if place(model, &counts).is_none() {
        return Err(format!("{counts} does not fit on one {}", model.name));
    }
    Ok(GpuConfig::Enabled(counts))
}

/// Writes `configs` (config name -> one setting per GPU) for `model` as a mig-parted v1 file.
///
/// Each entry carries the model's PCI IDs as `device-filter` (none for a model whose PCI ID
/// is not published, such as the RTX PRO 5000 Blackwell: an empty filter would match no GPU
/// and the file would not import back); GPUs with the same setting share one entry
/// (`devices: all` when that is every GPU), in order of their first GPU.
pub fn export(model: &GpuModel, configs: &BTreeMap<String, Vec<GpuConfig>>) -> String {
    let filter = (!model.pci_device_ids.is_empty())
        .then(|| OneOrMany::Many(model.pci_device_ids.iter().map(|&id| device_filter_value(id)).collect()));
    let mut mig_configs = BTreeMap::new();
    for (name, gpus) in configs {
        let mut groups: Vec<(GpuConfig, Vec<u32>)> = Vec::new();
        for (i, g) in gpus.iter().enumerate() {
            match groups.iter_mut().find(|(s, _)| s == g) {
                Some((_, v)) => v.push(i as u32),
                None => groups.push((g.clone(), vec![i as u32])),
            }
        }
        let all = groups.len() == 1;
        let entries = groups
            .into_iter()
            .map(|(setting, devices)| RawEntry {
                device_filter: filter.clone(),
                devices: if all {
                    RawDevices::Word("all".into())
                } else {
                    RawDevices::List(devices)
                },
                mig_enabled: setting != GpuConfig::Disabled,
                mig_devices: match setting {
                    GpuConfig::Disabled => None,
                    GpuConfig::Enabled(c) => Some(c.iter().map(|(n, k)| (n.to_string(), k)).collect()),
                },
            })
            .collect();
        mig_configs.insert(name.clone(), entries);
    }
    let spec = RawSpec {
        version: "v1".into(),
        mig_configs,
    };
    serde_yaml::to_string(&spec).expect("a mig-parted spec always serialises")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::{A100_40GB, A100_80GB, A30_24GB};

    #[test]
    fn deep_or_huge_files_are_refused_before_the_yaml_parser_runs() {
        // Found by crates/dynmig-fuzz (migparted_yaml): 256 kB of '{' took 22 s to refuse.
        for text in [
            format!("version: {}", "{".repeat(256 * 1024)),
            format!("version: v1\nmig-configs: {}{}\n", "[".repeat(40), "]".repeat(40)),
            format!("version: v1\n#{}\n", "x".repeat(2 << 20)),
        ] {
            let started = std::time::Instant::now();
            let e = import(&text, &A100_80GB, 1).unwrap_err().to_string();
            assert!(
                e.contains("nested more than 32") || e.contains("at most 1048576"),
                "{e}"
            );
            assert!(started.elapsed() < std::time::Duration::from_millis(500));
        }
        let flow = "version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, mig-devices: {1g.10gb: 7}}]}\n";
        assert!(import(flow, &A100_80GB, 1).is_ok(), "ordinary flow style still reads");
    }

    #[test]
    fn a_huge_yaml_value_gives_a_bounded_message() {
        // Found by crates/dynmig-fuzz (migparted_yaml): serde_yaml's message quoted it whole.
        let text = format!("version: v1\nmig-configs:\n {}\n", "\u{202e}".repeat(5000));
        let e = import(&text, &A100_80GB, 1).unwrap_err().to_string();
        assert!(e.len() < 2000, "{} bytes", e.len());
    }

    #[test]
    fn filter_values_round_trip() {
        assert_eq!(device_filter_value(0x20B2), "0x20B210DE");
        assert_eq!(parse_filter("0x20B210DE"), Ok(0x20B2));
        assert!(parse_filter("0x20B21000").unwrap_err().contains("10DE"));
        assert!(parse_filter("A100").is_err());
    }

    #[test]
    fn refusals_name_the_problem() {
        let t = "version: v1\nmig-configs:\n  x:\n    - devices: all\n      mig-enabled: false\n      mig-devices: {\"1g.10gb\": 1}\n";
        let e = import(t, &A100_80GB, 1).unwrap_err().to_string();
        assert!(e.contains("'x' entry 0") && e.contains("mig-enabled is false"), "{e}");
        let t = "version: v2\nmig-configs: {}\n";
        assert!(import(t, &A100_80GB, 1).unwrap_err().to_string().contains("only 'v1'"));
        let t = "version: v1\nmig-configs:\n  x:\n    - devices: all\n      mig-enabled: true\n      colour: red\n";
        assert!(import(t, &A100_80GB, 1).unwrap_err().to_string().contains("colour"));
        let t = "version: v1\nmig-configs:\n  x:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1c.3g.40gb\": 1}\n";
        assert!(import(t, &A100_80GB, 1)
            .unwrap_err()
            .to_string()
            .contains("compute-instance"));
        let t = "version: v1\nmig-configs:\n  x:\n    - devices: [0]\n      mig-enabled: true\n      mig-devices: {\"4g.40gb\": 1, \"3g.40gb\": 2}\n";
        assert!(import(t, &A100_80GB, 1)
            .unwrap_err()
            .to_string()
            .contains("does not fit"));
        let t = "version: v1\nmig-configs:\n  x:\n    - devices: [0]\n      mig-enabled: false\n";
        let e = import(t, &A100_80GB, 2).unwrap_err();
        assert!(
            matches!(&e, MigPartedError::Incomplete { missing, .. } if missing == &[1]),
            "{e}"
        );
        let t = "version: v1\nmig-configs:\n  x:\n    - devices: [3]\n      mig-enabled: false\n";
        assert!(import(t, &A100_80GB, 2)
            .unwrap_err()
            .to_string()
            .contains("GPU 3 does not exist"));
    }

    #[test]
    fn export_then_import_is_identity_and_groups_gpus() {
        let m = &A30_24GB;
        let mut configs = BTreeMap::new();
        let c = |s: &str| GpuConfig::Enabled(ProfileCounts::parse(m, s).unwrap());
        configs.insert(
            "mixed".to_string(),
            vec![c("4x1g.6gb"), GpuConfig::Disabled, c("4x1g.6gb")],
        );
        configs.insert("same".to_string(), vec![c("1x2g.12gb+2x1g.6gb"); 3]);
        let text = export(m, &configs);
        assert!(text.contains("0x20B710DE") && text.contains("devices: all"), "{text}");
        assert!(text.contains("- 0\n") && text.contains("- 2\n"), "{text}");
        let back = import(&text, m, 3).unwrap();
        assert_eq!(back.configs, configs);
        // The same file means nothing to an A100-40GB: every config is skipped.
        let other = import(&text, &A100_40GB, 3).unwrap();
        assert!(other.configs.is_empty());
        assert_eq!(other.skipped, ["mixed", "same"]);
    }
}
