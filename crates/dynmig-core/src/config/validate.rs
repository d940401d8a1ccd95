// One piece: one checking function per config section, in the order of docs/config.md, sharing one error context (`Ctx`) and one table of what each key allows.
//! Raw dynmig.toml values to a checked [`Config`], one key at a time.

use super::raw::{
    PolicyKind, RawConfig, RawController, RawEstimator, RawHistory, RawLog, RawNodeGroup, RawPaths, RawPolicy,
};
use super::{
    expand_hostlist, AgentConfig, AllowedLayouts, Backend, Config, ConfigError, ControllerConfig, HistoryConfig,
    HistoryStore, JobsConfig, LogConfig, LogLevel, NodeGroup, NvmlAccess, Paths, PolicyConfig, CONFIG_VERSION,
};
use crate::estimate::{model_formula, EstimatorConfig};
use crate::geometry::{layout_examples, model_by_name, model_names, GpuModel, LayoutParseError, ProfileCounts};
use crate::hints::smallest_fitting;
use crate::size::{format_size, parse_size, MIB};
use crate::types::cut;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;
use toml::Spanned;

/// Most GPUs per node dynmig accepts.
const MAX_GPUS: i64 = 16;

/// Longest duration any key accepts: 30 days. Longer values are typos (`"5000000000h"`), and
/// staying far below `i64::MAX` nanoseconds keeps every later conversion exact.
pub(super) const MAX_DURATION: Duration = Duration::from_secs(30 * 24 * 3600);

/// [`MAX_DURATION`] as written in messages.
const MAX_DURATION_TEXT: &str = "30 days (\"30d\")";

/// Longest path accepted, in bytes (Linux `PATH_MAX`).
const MAX_PATH: usize = 4096;

/// Most nodes in all groups together (the same bound as one hostlist expression).
const MAX_NODES: usize = super::MAX_HOSTS;

/// Longest user text echoed in a message, in characters.
const ECHO: usize = 100;

/// What a key allows, for errors found by the TOML reader itself (syntax, type, a number too
/// large for any integer): the reader's message names neither the range nor an example.
pub(super) fn key_help(key: &str) -> Option<String> {
    let duration = |what: &str| format!("a duration string {what}, e.g. \"5s\", \"2m\" or \"1h 30m\"");
    let path = "a quoted absolute path, e.g. \"/var/lib/dynmig\"";
    let command = "a quoted absolute path or command name, e.g. \"/usr/bin/scontrol\"";
    let size = |e: &str| format!("a size string, e.g. \"{e}\"");
    let float = |lo: &str, hi: &str| format!("a number from {lo} to {hi}");
    let int = |lo: i64, hi: i64| format!("an integer from {lo} to {hi}");
    let addr = "a quoted \"host:port\" with port 1 to 65535, e.g. \"ctl1:6830\"";
    Some(match key {
        "version" => "version = 1".into(),
        "paths" | "estimator" | "history" | "jobs" | "controller" | "policy" | "agent" | "log" => {
            format!("a table header written [{key}]")
        }
        "node_group" => "a table header written [[node_group]]".into(),
        "paths.state_dir"
        | "paths.slurm_conf_dir"
        | "paths.gres_conf"
        | "paths.device_dir"
        | "paths.history_db"
        | "paths.history_snapshot"
        | "paths.history_spool"
        | "paths.dcgm_job_map_dir" => path.into(),
        "paths.slurmd" | "paths.scontrol" | "paths.squeue" | "paths.sinfo" | "paths.sacct" | "paths.sacctmgr" => {
            command.into()
        }
        "history.store" => "\"server\" (dynmig's own service) or \"slurmdbd\" (Slurm's accounting)".into(),
        "estimator.default_mem" => size("8G"),
        "estimator.cuda_context" => "\"cuda11\", \"cuda12\" (default), \"cuda13\" or a size such as \"600M\"".into(),
        "estimator.model_margin" | "estimator.model_margin_infer" | "estimator.history_margin" => float("1", "4"),
        "estimator.history_quantile" | "estimator.oom_peak_fraction" => float("0.5", "1"),
        "estimator.history_min_samples" => int(1, 1000),
        "estimator.history_window" => int(1, 100_000),
        "estimator.max_oom_restarts" => int(0, 10),
        "history.server" | "history.listen" => addr.into(),
        "history.max_connections" | "history.connections_per_address" => int(1, 4096),
        "history.checks_per_minute" => int(1, 60_000),
        "history.check_burst" => int(1, 100_000),
        "history.max_records" | "history.max_records_per_user" => int(1, 10_000_000),
        "controller.metrics_listen" | "agent.metrics_listen" | "history.metrics_listen" => {
            "a quoted \"ip:port\" with port 0 to 65535, e.g. \"127.0.0.1:9750\" or \"[::]:9750\", or a port alone (\"9750\": loopback)".into()
        }
        "agent.metrics_per_job" => "true or false".into(),
        "agent.wake_port" => int(0, 65_535),
        "log.level" => "\"off\", \"error\", \"warn\", \"info\", \"debug\" or \"trace\"".into(),
        "history.snapshot_refresh"
        | "history.sacct_interval"
        | "history.sacct_window"
        | "controller.interval"
        | "controller.drain_timeout"
        | "controller.reservation_duration"
        | "policy.forecast_window"
        | "policy.horizon"
        | "policy.max_wait"
        | "policy.lookahead"
        | "controller.min_layout_lifetime"
        | "node_group.nvml_timeout" => duration(&format!("from {}", duration_bounds(key).range())),
        "controller.max_concurrent_repartitions" => int(1, 10_000),
        "jobs.whole_gpu" => "\"full-profile\", \"estimate\" or \"reject\"".into(),
        "jobs.multi_gpu" => "\"full-profile\" or \"reject\"".into(),
        "controller.drain" => "\"reservation\" or \"immediate\"".into(),
        "policy.kind" => "\"plan\", \"consolidate\", \"mpc\", \"learned\", \"demand\", \"static\" or \"none\"".into(),
        "policy.min_gain" => int(1, 1000),
        "node_group.name" => "a quoted name of letters, digits, '-', '_' and '.', e.g. \"a100\"".into(),
        "node_group.nodes" => "a quoted hostlist or a list of them, e.g. \"n[1-2]\" or [\"n1\", \"n2\"]".into(),
        "node_group.gpu_model" => format!("a quoted GPU model: {}", model_names().join(", ")),
        "node_group.gpus" => int(1, MAX_GPUS),
        "node_group.backend" => "\"simulated\" or \"nvml\"".into(),
        "node_group.initial_layout" => "a quoted layout, e.g. \"1x7g.80gb\" or \"3x2g.20gb+1x1g.10gb\"".into(),
        "node_group.allowed_layouts" => {
            "\"all\" or a list of quoted layouts, e.g. [\"1x7g.80gb\", \"7x1g.10gb\"]".into()
        }
        "node_group.node_conf" => "a quoted slurmd --conf text, e.g. \"CPUs=4 RealMemory=4000\"".into(),
        "node_group.allow_mig_mode_change" => "true or false".into(),
        "node_group.nvml_library" => "an absolute path of a libnvidia-ml.so.1, e.g. \"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1\" ({node} is replaced by the node name)".into(),
        "node_group.nvml_device_root" => "an absolute path, \"/\" on a real node ({node} is replaced by the node name)".into(),
        _ => return None,
    })
}

/// What a duration key allows: at least its floor, at most its maximum.
#[derive(Debug, Clone, Copy)]
pub(super) struct DurationBounds {
    /// The shortest value allowed (zero: 0 is allowed).
    pub floor: Duration,
    /// The longest value allowed.
    pub max: Duration,
    /// [`Self::max`] as written in messages.
    pub max_text: &'static str,
    /// Why the floor is where it is, for the message of a value below it.
    pub why: &'static str,
}

impl DurationBounds {
    /// `"<floor> to <max>"`, as messages write the allowed range.
    fn range(&self) -> String {
        if self.floor.is_zero() {
            format!("0 to {}", self.max_text)
        } else {
            format!("{} to {}", humantime::format_duration(self.floor), self.max_text)
        }
    }
}

/// The bounds of each duration key (docs/config.md, "Duration floors"). The floors refuse
/// values that would turn a daemon into a busy loop against slurmctld or slurmdbd (`"1ns"`,
/// `"1ms"`) while leaving room for the short values the project's own tests use (a 200 ms
/// controller pass, a 50 ms snapshot look, a 1 s sacct rebuild on the test cluster).
pub(super) fn duration_bounds(key: &str) -> DurationBounds {
    let b = |floor: Duration, why: &'static str| DurationBounds {
        floor,
        max: MAX_DURATION,
        max_text: MAX_DURATION_TEXT,
        why,
    };
    let ms = Duration::from_millis;
    let s = Duration::from_secs;
    match key {
        "controller.interval" => b(ms(100), "each pass runs squeue and sinfo against slurmctld"),
        "controller.min_layout_lifetime" => b(Duration::ZERO, "0 turns the hysteresis off"),
        "controller.drain_timeout" => b(
            s(60),
            "a busy node needs time to drain; below a minute every repartition of a busy node is given up",
        ),
        "controller.reservation_duration" => b(s(60), "Slurm counts reservations in whole minutes"),
        "history.snapshot_refresh" => b(
            ms(10),
            "each look is a stat of the snapshot and the catalog inside slurmctld",
        ),
        "history.sacct_interval" => b(
            s(1),
            "each rebuild runs sacct --json over the whole window against slurmdbd",
        ),
        "history.sacct_window" => b(s(3600), "a shorter window drops the jobs the estimator learns from"),
        "policy.forecast_window" | "policy.horizon" | "policy.max_wait" | "policy.lookahead" => {
            b(s(60), "the policy plans in minutes; shorter looks ahead at nothing")
        }
        "node_group.nvml_timeout" => DurationBounds {
            floor: s(1),
            max: s(600),
            max_text: "10m",
            why: "NVML's own MIG calls take seconds; below 1 s a busy driver would count as hung",
        },
        // Every duration key is listed above (a test checks key_help's); a new one gets no
        // floor until it is added.
        _ => b(Duration::from_nanos(1), "a duration must be more than 0"),
    }
}

/// The address a metrics endpoint binds when `metrics_listen` gives a port alone.
pub(super) const METRICS_DEFAULT_IP: std::net::IpAddr = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

/// Builds errors pointing into the text being read.
struct Ctx<'a> {
    text: &'a str,
}

impl Ctx<'_> {
    fn err<T>(&self, v: &Spanned<T>, key: &str, msg: impl Into<String>) -> ConfigError {
        ConfigError::at(self.text, v.span(), key, msg)
    }

    /// A metrics endpoint's address: an IP address (not a name: the daemon binds it) and a
    /// port, or a port alone (`"9750"` or `":9750"`), which binds loopback
    /// ([`METRICS_DEFAULT_IP`]): the endpoint has no authentication, so reaching it from
    /// elsewhere takes an address written out.
    fn socket_addr(&self, v: &Option<Spanned<String>>, key: &str) -> Result<Option<SocketAddr>, ConfigError> {
        let Some(v) = v else { return Ok(None) };
        let s = v.get_ref().trim();
        let port_only = s.strip_prefix(':').unwrap_or(s);
        if !port_only.is_empty() && port_only.bytes().all(|b| b.is_ascii_digit()) {
            return match port_only.parse::<u16>() {
                Ok(port) => Ok(Some(SocketAddr::new(METRICS_DEFAULT_IP, port))),
                Err(_) => Err(self.err(
                    v,
                    key,
                    format!("port '{}' is not a number from 0 to 65535", cut(port_only, ECHO)),
                )),
            };
        }
        s.parse::<SocketAddr>().map(Some).map_err(|_| {
            let why = match s.rsplit_once(':') {
                None => "no ':port'".to_string(),
                Some((_, port)) if port.parse::<u16>().is_err() => {
                    format!("port '{}' is not a number from 0 to 65535", cut(port, ECHO))
                }
                Some((host, _)) => format!(
                    "'{}' is not an IP address (the daemon binds it; write IPv6 in brackets)",
                    cut(host, ECHO)
                ),
            };
            self.err(
                v,
                key,
                format!(
                    "'{}' is not ip:port: {why}; e.g. \"127.0.0.1:9750\", \"0.0.0.0:9750\" or \"[::]:9750\"",
                    cut(s, ECHO)
                ),
            )
        })
    }

    /// A duration key: its value, or `default` when left out; refused below the key's floor
    /// or above its maximum ([`duration_bounds`]), naming both.
    fn duration(&self, v: &Option<Spanned<String>>, key: &str, default: Duration) -> Result<Duration, ConfigError> {
        let Some(v) = v else { return Ok(default) };
        let b = duration_bounds(key);
        let range = b.range();
        let d = humantime::parse_duration(v.get_ref().trim()).map_err(|e| {
            self.err(
                v,
                key,
                format!(
                    "bad duration '{}': {e}; use a number with ms, s, m, h or d, e.g. \"5s\" or \"2m\" ({range})",
                    cut(v.get_ref(), ECHO)
                ),
            )
        })?;
        if d < b.floor {
            return Err(self.err(
                v,
                key,
                format!(
                    "'{}' is out of range: below the floor of {} for {key} ({}); allowed: {range}",
                    cut(v.get_ref(), ECHO),
                    humantime::format_duration(b.floor),
                    b.why
                ),
            ));
        }
        if d > b.max {
            return Err(self.err(
                v,
                key,
                format!(
                    "'{}' is out of range; allowed: {range}, e.g. \"5s\"",
                    cut(v.get_ref(), ECHO)
                ),
            ));
        }
        Ok(d)
    }

    fn layout(
        &self,
        model: &GpuModel,
        span: Range<usize>,
        text: &str,
        key: &str,
    ) -> Result<ProfileCounts, ConfigError> {
        ProfileCounts::parse(model, text).map_err(|e| {
            let msg = match e {
                LayoutParseError::UnknownProfile { .. } => {
                    format!("{e}; write layouts like {}", layout_examples(model))
                }
                _ => e.to_string(),
            };
            ConfigError::at(self.text, span, key, msg)
        })
    }

    fn count(&self, v: &Option<Spanned<i64>>, key: &str, default: u32, min: i64, max: i64) -> Result<u32, ConfigError> {
        let Some(v) = v else { return Ok(default) };
        let n = *v.get_ref();
        if n < min || n > max {
            return Err(self.err(v, key, format!("{n} is out of range; allowed: {min} to {max}")));
        }
        Ok(n as u32)
    }

    fn path(
        &self,
        v: &Option<Spanned<String>>,
        key: &str,
        default: PathBuf,
        command: bool,
    ) -> Result<PathBuf, ConfigError> {
        let Some(v) = v else { return Ok(default) };
        let s = v.get_ref();
        let bare = !s.contains('/');
        if s.is_empty() {
            return Err(self.err(v, key, "empty path; use an absolute path, e.g. \"/var/lib/dynmig\""));
        }
        if s.contains('\0') {
            return Err(self.err(
                v,
                key,
                format!(
                    "'{}' contains a NUL character, which no path may hold",
                    cut(&s.replace('\0', "\\0"), ECHO)
                ),
            ));
        }
        if s.len() > MAX_PATH {
            return Err(self.err(
                v,
                key,
                format!("a path of {} bytes; at most {MAX_PATH} allowed", s.len()),
            ));
        }
        let usable = s.starts_with('/') || (command && bare);
        if !usable {
            let allowed = if command {
                "an absolute path or a bare command name"
            } else {
                "an absolute path"
            };
            return Err(self.err(v, key, format!("'{}' is relative; use {allowed}", cut(s, ECHO))));
        }
        Ok(PathBuf::from(s))
    }
}

/// Checks every key of `raw` (read from `text`).
pub(super) fn validate(text: &str, raw: RawConfig) -> Result<Config, ConfigError> {
    let cx = Ctx { text };
    if *raw.version.get_ref() != i64::from(CONFIG_VERSION) {
        return Err(cx.err(
            &raw.version,
            "version",
            format!(
                "version {} is not supported; allowed: {CONFIG_VERSION}",
                raw.version.get_ref()
            ),
        ));
    }
    let paths = paths(&cx, &raw.paths)?;
    let controller = controller(&cx, &raw.controller)?;
    let node_groups = node_groups(&cx, &raw.node_group)?;
    // No kind: the guarded default where its engine can model the nodes (one GPU model and
    // GPU count in every group), else demand (docs/config.md, `kind`).
    let alike = node_groups
        .iter()
        .all(|g| g.gpu_model.name == node_groups[0].gpu_model.name && g.gpus == node_groups[0].gpus);
    let kind = raw
        .policy
        .kind
        .unwrap_or(if alike { PolicyKind::Guarded } else { PolicyKind::Demand });
    let policy = policy(&cx, &raw.policy, kind)?;
    if matches!(
        policy,
        PolicyConfig::Plan { lookahead: Some(_), .. }
            | PolicyConfig::Adaptive
            | PolicyConfig::Guarded { .. }
            | PolicyConfig::Learned { .. }
    ) {
        // The lookahead runs the simulator's engine, which models one GPU model and one GPU
        // count per node.
        if let Some((g, r)) = node_groups
            .iter()
            .zip(&raw.node_group)
            .find(|(g, _)| g.gpu_model.name != node_groups[0].gpu_model.name || g.gpus != node_groups[0].gpus)
        {
            return Err(cx.err(
                &r.gpu_model,
                "node_group.gpu_model",
                format!(
                    "policy kind = \"mpc\", \"guarded\", \"adaptive\" or \"learned\" needs one GPU model and GPU count in every node group; group '{}' has {} x {}, group '{}' has {} x {}: use kind = \"demand\" or \"plan\", or make the groups alike",
                    g.name, g.gpus, g.gpu_model.name, node_groups[0].name, node_groups[0].gpus, node_groups[0].gpu_model.name
                ),
            ));
        }
    }
    let policy = match policy {
        PolicyConfig::Guarded { .. } => PolicyConfig::Guarded {
            node_types: node_types(&cx, &raw.policy, &node_groups)?,
        },
        p => p,
    };
    let models: Vec<&'static GpuModel> = node_groups.iter().map(|g| g.gpu_model).collect();
    let default_mem_bytes = match &raw.estimator.default_mem {
        None => 8 << 30,
        Some(v) => {
            let key = "estimator.default_mem";
            let b = parse_size(v.get_ref())
                .map_err(|e| cx.err(v, key, format!("'{}': {e}, e.g. \"8G\"", cut(v.get_ref(), 100))))?;
            if smallest_fitting(&models, b).is_none() {
                let largest = models
                    .iter()
                    .map(|m| m.full_profile())
                    .max_by_key(|p| p.memory_mib)
                    .expect("at least one group");
                return Err(cx.err(
                    v,
                    key,
                    format!(
                        "{} is more than the largest profile of the configured GPUs ({}, {})",
                        format_size(b),
                        largest.name,
                        format_size(largest.memory_mib * MIB)
                    ),
                ));
            }
            b
        }
    };
    let estimator = estimator(&cx, &raw.estimator, default_mem_bytes)?;
    let history = history(&cx, &raw.history)?;
    let agent = AgentConfig {
        metrics_listen: cx.socket_addr(&raw.agent.metrics_listen, "agent.metrics_listen")?,
        metrics_per_job: raw.agent.metrics_per_job.as_ref().is_some_and(|v| *v.get_ref()),
        wake_port: cx.count(
            &raw.agent.wake_port,
            "agent.wake_port",
            super::DEFAULT_WAKE_PORT.into(),
            0,
            65_535,
        )? as u16,
    };
    let log = log(&cx, &raw.log)?;
    Ok(Config {
        version: CONFIG_VERSION,
        paths,
        estimator,
        history,
        jobs: JobsConfig {
            whole_gpu: raw.jobs.whole_gpu.unwrap_or_default(),
            multi_gpu: raw.jobs.multi_gpu.unwrap_or_default(),
        },
        controller,
        policy,
        agent,
        log,
        node_groups,
    })
}

fn log(cx: &Ctx, l: &RawLog) -> Result<LogConfig, ConfigError> {
    let Some(v) = &l.level else {
        return Ok(LogConfig { level: LogLevel::Info });
    };
    let s = v.get_ref().trim();
    let level = LogLevel::ALL
        .into_iter()
        .find(|l| l.name().eq_ignore_ascii_case(s))
        .ok_or_else(|| {
            let names: Vec<&str> = LogLevel::ALL.iter().map(|l| l.name()).collect();
            cx.err(
                v,
                "log.level",
                format!("'{}' is not a log level; allowed: {}", cut(s, ECHO), names.join(", ")),
            )
        })?;
    Ok(LogConfig { level })
}

fn paths(cx: &Ctx, p: &RawPaths) -> Result<Paths, ConfigError> {
    let state_dir = cx.path(&p.state_dir, "paths.state_dir", "/var/lib/dynmig".into(), false)?;
    let slurm_conf_dir = cx.path(&p.slurm_conf_dir, "paths.slurm_conf_dir", "/etc/slurm".into(), false)?;
    Ok(Paths {
        gres_conf: cx.path(&p.gres_conf, "paths.gres_conf", slurm_conf_dir.join("gres.conf"), false)?,
        device_dir: cx.path(&p.device_dir, "paths.device_dir", state_dir.join("devices"), false)?,
        history_db: cx.path(&p.history_db, "paths.history_db", state_dir.join("history.db"), false)?,
        history_snapshot: cx.path(
            &p.history_snapshot,
            "paths.history_snapshot",
            state_dir.join("history-snapshot.tsv"),
            false,
        )?,
        history_spool: cx.path(&p.history_spool, "paths.history_spool", state_dir.join("spool"), false)?,
        slurmd: cx.path(&p.slurmd, "paths.slurmd", "/usr/sbin/slurmd".into(), true)?,
        scontrol: cx.path(&p.scontrol, "paths.scontrol", "/usr/bin/scontrol".into(), true)?,
        squeue: cx.path(&p.squeue, "paths.squeue", "/usr/bin/squeue".into(), true)?,
        sinfo: cx.path(&p.sinfo, "paths.sinfo", "/usr/bin/sinfo".into(), true)?,
        sacct: cx.path(&p.sacct, "paths.sacct", "/usr/bin/sacct".into(), true)?,
        sacctmgr: cx.path(&p.sacctmgr, "paths.sacctmgr", "/usr/bin/sacctmgr".into(), true)?,
        dcgm_job_map_dir: match &p.dcgm_job_map_dir {
            None => None,
            Some(_) => Some(cx.path(&p.dcgm_job_map_dir, "paths.dcgm_job_map_dir", PathBuf::new(), false)?),
        },
        state_dir,
        slurm_conf_dir,
    })
}

fn fraction(
    cx: &Ctx,
    v: &Option<Spanned<f64>>,
    key: &str,
    default: f64,
    min: f64,
    max: f64,
) -> Result<f64, ConfigError> {
    let Some(v) = v else { return Ok(default) };
    let x = *v.get_ref();
    if !(min..=max).contains(&x) {
        return Err(cx.err(v, key, format!("{x} is out of range; allowed: {min} to {max}")));
    }
    Ok(x)
}

/// The CUDA major version of `"cudaN"` (any case), if `s` names one.
fn cuda_major(s: &str) -> Option<u32> {
    let t = s.trim().to_ascii_lowercase();
    t.strip_prefix("cuda")?.parse().ok()
}

fn estimator(cx: &Ctx, e: &RawEstimator, default_mem_bytes: u64) -> Result<EstimatorConfig, ConfigError> {
    let d = EstimatorConfig::default();
    let cuda_context_bytes = match &e.cuda_context {
        None => d.cuda_context_bytes,
        Some(v) => match cuda_major(v.get_ref()) {
            Some(major) => model_formula::cuda_context_for_major(major).ok_or_else(|| {
                cx.err(
                    v,
                    "estimator.cuda_context",
                    format!(
                        "'{}': no CUDA context is known for CUDA {major}; allowed: \"cuda11\", \"cuda12\", \"cuda13\" or a size such as \"600M\"",
                        cut(v.get_ref(), 100)
                    ),
                )
            })?,
            None => parse_size(v.get_ref()).map_err(|err| {
                cx.err(
                    v,
                    "estimator.cuda_context",
                    format!(
                        "'{}': {err}; allowed: \"cuda11\", \"cuda12\", \"cuda13\" or a size such as \"600M\"",
                        cut(v.get_ref(), 100)
                    ),
                )
            })?,
        },
    };
    if cuda_context_bytes > 16 << 30 {
        let v = e.cuda_context.as_ref().expect("set when not the default");
        return Err(cx.err(
            v,
            "estimator.cuda_context",
            "more than 16G; a CUDA context is about 0.3 to 2G",
        ));
    }
    Ok(EstimatorConfig {
        default_mem_bytes,
        cuda_context_bytes,
        model_margin: fraction(cx, &e.model_margin, "estimator.model_margin", d.model_margin, 1.0, 4.0)?,
        model_margin_infer: fraction(
            cx,
            &e.model_margin_infer,
            "estimator.model_margin_infer",
            d.model_margin_infer,
            1.0,
            4.0,
        )?,
        history_quantile: fraction(
            cx,
            &e.history_quantile,
            "estimator.history_quantile",
            d.history_quantile,
            0.5,
            1.0,
        )?,
        history_margin: fraction(
            cx,
            &e.history_margin,
            "estimator.history_margin",
            d.history_margin,
            1.0,
            4.0,
        )?,
        history_min_samples: cx.count(
            &e.history_min_samples,
            "estimator.history_min_samples",
            d.history_min_samples,
            1,
            1000,
        )?,
        history_window: cx.count(
            &e.history_window,
            "estimator.history_window",
            d.history_window,
            1,
            100_000,
        )?,
        max_oom_restarts: cx.count(
            &e.max_oom_restarts,
            "estimator.max_oom_restarts",
            d.max_oom_restarts,
            0,
            10,
        )?,
        oom_peak_fraction: fraction(
            cx,
            &e.oom_peak_fraction,
            "estimator.oom_peak_fraction",
            d.oom_peak_fraction,
            0.5,
            1.0,
        )?,
    })
}

fn history(cx: &Ctx, h: &RawHistory) -> Result<HistoryConfig, ConfigError> {
    let addr = |v: &Option<Spanned<String>>, key: &str| -> Result<Option<String>, ConfigError> {
        let Some(v) = v else { return Ok(None) };
        let s = v.get_ref().trim();
        let e = "e.g. \"ctl1:6830\" or \"10.0.0.1:6830\"";
        let why = match s.rsplit_once(':') {
            None => Some(format!("'{}' is not host:port (no ':port'); {e}", cut(s, ECHO))),
            Some(("", _)) => Some(format!("'{}' has no host before ':'; {e}", cut(s, ECHO))),
            Some((_, port)) => match port.parse::<u16>() {
                Ok(p) if p > 0 => None,
                _ => Some(format!(
                    "port '{}' in '{}' is not allowed; use a port from 1 to 65535, {e}",
                    cut(port, ECHO),
                    cut(s, ECHO)
                )),
            },
        };
        if let Some(why) = why {
            return Err(cx.err(v, key, why));
        }
        Ok(Some(s.to_string()))
    };
    let server = addr(&h.server, "history.server")?;
    let listen = addr(&h.listen, "history.listen")?.or_else(|| server.clone());
    let store = match &h.store {
        None => HistoryStore::Server,
        Some(v) => match v.get_ref().trim() {
            "server" => HistoryStore::Server,
            "slurmdbd" => HistoryStore::Slurmdbd,
            other => {
                return Err(cx.err(
                    v,
                    "history.store",
                    format!(
                        "'{}' is not a history store; use \"server\" (dynmig's own service, for sites without slurmdbd) or \"slurmdbd\" (Slurm's accounting: sacctmgr and sacct)",
                        cut(other, ECHO)
                    ),
                ))
            }
        },
    };
    Ok(HistoryConfig {
        store,
        sacct_interval: cx.duration(&h.sacct_interval, "history.sacct_interval", Duration::from_secs(60))?,
        sacct_window: cx.duration(
            &h.sacct_window,
            "history.sacct_window",
            Duration::from_secs(30 * 24 * 3600),
        )?,
        server,
        listen,
        snapshot_refresh: cx.duration(&h.snapshot_refresh, "history.snapshot_refresh", Duration::from_secs(5))?,
        metrics_listen: cx.socket_addr(&h.metrics_listen, "history.metrics_listen")?,
        max_connections: cx.count(&h.max_connections, "history.max_connections", 64, 1, 4096)?,
        connections_per_address: cx.count(
            &h.connections_per_address,
            "history.connections_per_address",
            4,
            1,
            4096,
        )?,
        checks_per_minute: cx.count(&h.checks_per_minute, "history.checks_per_minute", 1200, 1, 60_000)?,
        check_burst: cx.count(&h.check_burst, "history.check_burst", 120, 1, 100_000)?,
        max_records: cx.count(&h.max_records, "history.max_records", 200_000, 1, 10_000_000)?,
        max_records_per_user: cx.count(
            &h.max_records_per_user,
            "history.max_records_per_user",
            20_000,
            1,
            10_000_000,
        )?,
    })
}

fn controller(cx: &Ctx, c: &RawController) -> Result<ControllerConfig, ConfigError> {
    Ok(ControllerConfig {
        interval: cx.duration(&c.interval, "controller.interval", Duration::from_secs(5))?,
        max_concurrent_repartitions: cx.count(
            &c.max_concurrent_repartitions,
            "controller.max_concurrent_repartitions",
            1,
            1,
            10_000,
        )?,
        min_layout_lifetime: cx.duration(
            &c.min_layout_lifetime,
            "controller.min_layout_lifetime",
            Duration::from_secs(120),
        )?,
        drain_timeout: cx.duration(
            &c.drain_timeout,
            "controller.drain_timeout",
            Duration::from_secs(30 * 60),
        )?,
        drain: c.drain.unwrap_or_default(),
        reservation_duration: cx.duration(
            &c.reservation_duration,
            "controller.reservation_duration",
            Duration::from_secs(10 * 60),
        )?,
        metrics_listen: cx.socket_addr(&c.metrics_listen, "controller.metrics_listen")?,
    })
}

fn policy(cx: &Ctx, p: &RawPolicy, kind: PolicyKind) -> Result<PolicyConfig, ConfigError> {
    let planning = matches!(kind, PolicyKind::Plan | PolicyKind::Consolidate | PolicyKind::Mpc);
    if kind != PolicyKind::Learned {
        if let Some(v) = &p.model {
            return Err(cx.err(
                v,
                "policy.model",
                "policy.model applies only to kind = \"learned\"; remove it or set kind = \"learned\"",
            ));
        }
    }
    if kind != PolicyKind::Guarded {
        if let Some(v) = &p.node_types {
            return Err(cx.err(
                v,
                "policy.node_types",
                "policy.node_types applies only to kind = \"guarded\"; remove it or set kind = \"guarded\"",
            ));
        }
    }
    if kind != PolicyKind::Mpc {
        if let Some(v) = &p.lookahead {
            return Err(cx.err(
                v,
                "policy.lookahead",
                "policy.lookahead applies only to kind = \"mpc\"; remove it or set kind = \"mpc\"",
            ));
        }
    }
    if kind != PolicyKind::Demand {
        if let Some(v) = &p.forecast_window {
            return Err(cx.err(
                v,
                "policy.forecast_window",
                "policy.forecast_window applies only to kind = \"demand\"; remove it or set kind = \"demand\"",
            ));
        }
    }
    if !planning {
        for (v, key) in [(&p.horizon, "horizon"), (&p.max_wait, "max_wait")] {
            if let Some(v) = v {
                return Err(cx.err(
                    v,
                    &format!("policy.{key}"),
                    format!(
                        "policy.{key} applies only to kind = \"plan\", \"consolidate\" or \"mpc\"; remove it or set one of them"
                    ),
                ));
            }
        }
    }
    if !planning && kind != PolicyKind::Demand {
        if let Some(v) = &p.min_gain {
            return Err(cx.err(
                v,
                "policy.min_gain",
                "policy.min_gain applies only to kind = \"plan\", \"consolidate\", \"mpc\" or \"demand\"; remove it or set one of them",
            ));
        }
    }
    Ok(match kind {
        PolicyKind::Plan | PolicyKind::Consolidate | PolicyKind::Mpc => PolicyConfig::Plan {
            consolidate: kind == PolicyKind::Consolidate,
            lookahead: if kind == PolicyKind::Mpc {
                Some(cx.duration(&p.lookahead, "policy.lookahead", Duration::from_secs(4 * 3600))?)
            } else {
                None
            },
            horizon: cx.duration(&p.horizon, "policy.horizon", Duration::from_secs(2 * 3600))?,
            max_wait: cx.duration(&p.max_wait, "policy.max_wait", Duration::from_secs(4 * 3600))?,
            min_gain: cx.count(&p.min_gain, "policy.min_gain", 1, 1, 1_000)?,
        },
        PolicyKind::Adaptive => PolicyConfig::Adaptive,
        PolicyKind::Guarded => PolicyConfig::Guarded { node_types: Vec::new() },
        PolicyKind::Demand => PolicyConfig::Demand {
            forecast_window: cx.duration(&p.forecast_window, "policy.forecast_window", Duration::from_secs(600))?,
            min_gain: cx.count(&p.min_gain, "policy.min_gain", 1, 1, 1_000)?,
        },
        PolicyKind::Learned => {
            match &p.model {
                Some(v) if !v.get_ref().trim().is_empty() => PolicyConfig::Learned {
                    model: std::path::PathBuf::from(v.get_ref()),
                },
                Some(v) => {
                    return Err(cx.err(
                        v,
                        "policy.model",
                        "policy.model is empty; give the model file of dynmig train",
                    ))
                }
                None => return Err(ConfigError::at(
                    cx.text,
                    0..0,
                    "policy.model",
                    "kind = \"learned\" needs model = \"/path/to/model.safetensors\" (the model file of dynmig train)",
                )),
            }
        }
        PolicyKind::Static => PolicyConfig::Static,
        PolicyKind::None => PolicyConfig::None,
    })
}

/// `[policy] node_types` of `kind = "guarded"`: per-GPU layouts of the groups' model, each
/// allowed in every group; without the key, the groups' `allowed_layouts` lists (none when a
/// group allows all).
fn node_types(cx: &Ctx, p: &RawPolicy, groups: &[NodeGroup]) -> Result<Vec<ProfileCounts>, ConfigError> {
    let key = "policy.node_types";
    let Some(model) = groups.first().map(|g| g.gpu_model) else {
        return Ok(Vec::new());
    };
    let mut out: Vec<ProfileCounts> = Vec::new();
    match &p.node_types {
        Some(v) => {
            for s in v.get_ref() {
                let c = cx.layout(model, v.span(), s, key)?;
                if let Some(g) = groups.iter().find(|g| !g.allowed_layouts.allows(&c)) {
                    return Err(cx.err(
                        v,
                        key,
                        format!(
                            "{c} is not in the allowed_layouts of group '{}'; add it there or drop it here",
                            g.name
                        ),
                    ));
                }
                if !out.contains(&c) {
                    out.push(c);
                }
            }
        }
        None => {
            for g in groups {
                if let AllowedLayouts::Only(list) = &g.allowed_layouts {
                    for c in list {
                        if !out.contains(c) && groups.iter().all(|o| o.allowed_layouts.allows(c)) {
                            out.push(c.clone());
                        }
                    }
                }
            }
        }
    }
    Ok(out)
}

fn node_groups(cx: &Ctx, raw: &[RawNodeGroup]) -> Result<Vec<NodeGroup>, ConfigError> {
    if raw.is_empty() {
        return Err(ConfigError::at(
            cx.text,
            0..0,
            "node_group",
            "no [[node_group]]: add at least one (name, nodes, gpu_model, gpus, backend)",
        ));
    }
    let mut groups: Vec<NodeGroup> = Vec::new();
    // Node name -> index of its group: the duplicate check stays O(n) in the node count.
    let mut owner: HashMap<String, usize> = HashMap::new();
    for r in raw {
        let g = node_group(cx, r)?;
        if groups.iter().any(|o| o.name == g.name) {
            return Err(cx.err(
                &r.name,
                "node_group.name",
                format!("'{}' names two groups; names must be unique", g.name),
            ));
        }
        if owner.len() + g.nodes.len() > MAX_NODES {
            return Err(cx.err(
                &r.nodes,
                "node_group.nodes",
                format!("more than {MAX_NODES} nodes in all groups together; allowed: at most {MAX_NODES}"),
            ));
        }
        for n in &g.nodes {
            if let Some(&o) = owner.get(n) {
                return Err(cx.err(
                    &r.nodes,
                    "node_group.nodes",
                    format!(
                        "node {} is also in group '{}'; a node belongs to one group",
                        cut(n, ECHO),
                        groups[o].name
                    ),
                ));
            }
        }
        for n in &g.nodes {
            owner.insert(n.clone(), groups.len());
        }
        groups.push(g);
    }
    Ok(groups)
}

fn node_group(cx: &Ctx, r: &RawNodeGroup) -> Result<NodeGroup, ConfigError> {
    let name = r.name.get_ref().clone();
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
        return Err(cx.err(
            &r.name,
            "node_group.name",
            format!(
                "'{}': use letters, digits, '-', '_' and '.', e.g. \"a100\"",
                cut(&name, ECHO)
            ),
        ));
    }
    let model = model_by_name(r.gpu_model.get_ref()).ok_or_else(|| {
        cx.err(
            &r.gpu_model,
            "node_group.gpu_model",
            format!(
                "unknown GPU model '{}'; allowed: {}",
                cut(r.gpu_model.get_ref(), ECHO),
                model_names().join(", ")
            ),
        )
    })?;
    let gpus = *r.gpus.get_ref();
    if !(1..=MAX_GPUS).contains(&gpus) {
        return Err(cx.err(
            &r.gpus,
            "node_group.gpus",
            format!("{gpus} GPUs per node; allowed: 1 to {MAX_GPUS}"),
        ));
    }
    let allowed_layouts = match &r.allowed_layouts {
        None => AllowedLayouts::All,
        Some(v) => allowed(cx, model, v)?,
    };
    let initial_layout = match &r.initial_layout {
        None => {
            let mut c = ProfileCounts::empty();
            c.add(model.full_profile(), 1);
            c
        }
        Some(v) => {
            let c = cx.layout(model, v.span(), v.get_ref(), "node_group.initial_layout")?;
            if !allowed_layouts.allows(&c) {
                return Err(cx.err(
                    v,
                    "node_group.initial_layout",
                    format!("{c} is not in allowed_layouts; add it there or pick one of them"),
                ));
            }
            c
        }
    };
    let node_conf = match &r.node_conf {
        None => String::new(),
        Some(v) => {
            let bad = v.get_ref().split_whitespace().find(|t| {
                let k = t.split('=').next().unwrap_or("").to_ascii_lowercase();
                k == "gres" || k == "nodename"
            });
            if let Some(t) = bad {
                return Err(cx.err(
                    v,
                    "node_group.node_conf",
                    format!(
                        "'{}': dynmig sets NodeName and Gres itself; give the other node settings, e.g. \"CPUs=4 RealMemory=4000\"",
                        cut(t, ECHO)
                    ),
                ));
            }
            v.get_ref().trim().to_string()
        }
    };
    let allow_mig_mode_change = r.allow_mig_mode_change.as_ref().is_some_and(|v| *v.get_ref());
    if let Some(v) = &r.allow_mig_mode_change {
        if *v.get_ref() && r.backend == Backend::Simulated {
            return Err(cx.err(
                v,
                "node_group.allow_mig_mode_change",
                "true applies only to backend = \"nvml\"; the simulated backend has no MIG mode to guard: remove the key or set it to false",
            ));
        }
    }
    let nvml = nvml_access(cx, r)?;
    Ok(NodeGroup {
        name,
        nodes: nodes(cx, &r.nodes)?,
        gpu_model: model,
        gpus: gpus as u32,
        backend: r.backend,
        initial_layout,
        allowed_layouts,
        node_conf,
        allow_mig_mode_change,
        nvml,
    })
}

/// The NVML keys of a node group; each is an error with `backend = "simulated"`.
fn nvml_access(cx: &Ctx, r: &RawNodeGroup) -> Result<NvmlAccess, ConfigError> {
    let d = NvmlAccess::default();
    let keys = [
        ("node_group.nvml_library", r.nvml_library.as_ref()),
        ("node_group.nvml_device_root", r.nvml_device_root.as_ref()),
        ("node_group.nvml_timeout", r.nvml_timeout.as_ref()),
    ];
    if r.backend == Backend::Simulated {
        if let Some((key, Some(v))) = keys.iter().find(|(_, v)| v.is_some()) {
            let short = key.trim_start_matches("node_group.");
            return Err(cx.err(
                *v,
                key,
                format!("{short} applies only to backend = \"nvml\"; remove it or set backend = \"nvml\""),
            ));
        }
    }
    let library = match &r.nvml_library {
        None => None,
        Some(_) => Some(cx.path(&r.nvml_library, "node_group.nvml_library", PathBuf::new(), false)?),
    };
    let device_root = cx.path(&r.nvml_device_root, "node_group.nvml_device_root", d.device_root, false)?;
    let timeout = cx.duration(&r.nvml_timeout, "node_group.nvml_timeout", d.timeout)?;
    Ok(NvmlAccess {
        library,
        device_root,
        timeout,
    })
}

fn nodes(cx: &Ctx, v: &Spanned<toml::Value>) -> Result<Vec<String>, ConfigError> {
    let key = "node_group.nodes";
    let shape = "use a list of names or hostlists, e.g. [\"n1\", \"n2\"] or \"n[1-2]\"";
    let exprs: Vec<&str> = match v.get_ref() {
        toml::Value::String(s) => vec![s.as_str()],
        toml::Value::Array(a) => a
            .iter()
            .map(|e| {
                e.as_str()
                    .ok_or_else(|| cx.err(v, key, format!("{e} is not a string; {shape}")))
            })
            .collect::<Result<_, _>>()?,
        other => return Err(cx.err(v, key, format!("{} is not a node list; {shape}", other.type_str()))),
    };
    let mut out: Vec<String> = Vec::new();
    let mut seen: std::collections::HashSet<String> = std::collections::HashSet::new();
    for e in exprs {
        for n in expand_hostlist(e).map_err(|m| cx.err(v, key, format!("{m}; {shape}")))? {
            if !seen.insert(n.clone()) {
                return Err(cx.err(
                    v,
                    key,
                    format!("node {} is listed twice; list each node once", cut(&n, ECHO)),
                ));
            }
            if out.len() >= MAX_NODES {
                return Err(cx.err(
                    v,
                    key,
                    format!("more than {MAX_NODES} nodes; allowed: at most {MAX_NODES}"),
                ));
            }
            out.push(n);
        }
    }
    if out.is_empty() {
        return Err(cx.err(v, key, format!("no nodes; {shape}")));
    }
    Ok(out)
}

fn allowed(cx: &Ctx, model: &'static GpuModel, v: &Spanned<toml::Value>) -> Result<AllowedLayouts, ConfigError> {
    let key = "node_group.allowed_layouts";
    let examples = layout_examples(model);
    let shape = format!("use \"all\" or a list of layouts such as {examples}");
    match v.get_ref() {
        toml::Value::String(s) if s == "all" => Ok(AllowedLayouts::All),
        toml::Value::Array(a) if !a.is_empty() => {
            let mut list = Vec::new();
            for e in a {
                let s = e
                    .as_str()
                    .ok_or_else(|| cx.err(v, key, format!("{e} is not a string; {shape}")))?;
                list.push(cx.layout(model, v.span(), s, key)?);
            }
            Ok(AllowedLayouts::Only(list))
        }
        other => Err(cx.err(
            v,
            key,
            format!("{} is not allowed; {shape}", cut(&other.to_string(), ECHO)),
        )),
    }
}
