//! Raw dynmig.toml values to a checked [`Config`], one key at a time.

use super::raw::{PolicyKind, RawConfig, RawController, RawEstimator, RawHistory, RawNodeGroup, RawPaths, RawPolicy};
use super::{
    expand_hostlist, AllowedLayouts, Config, ConfigError, ControllerConfig, EstimatorConfig, HistoryConfig, JobsConfig,
    NodeGroup, Paths, PolicyConfig, CONFIG_VERSION,
};
use crate::geometry::{model_by_name, model_names, GpuModel, ProfileCounts};
use crate::hints::smallest_fitting;
use crate::size::{format_size, parse_size, MIB};
use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;
use toml::Spanned;

/// Most GPUs per node dynmig accepts.
const MAX_GPUS: i64 = 16;

/// Builds errors pointing into the text being read.
struct Ctx<'a> {
    text: &'a str,
}

impl Ctx<'_> {
    fn err<T>(&self, v: &Spanned<T>, key: &str, msg: impl Into<String>) -> ConfigError {
        ConfigError::at(self.text, v.span(), key, msg)
    }

    fn duration(
        &self,
        v: &Option<Spanned<String>>,
        key: &str,
        default: Duration,
        positive: bool,
    ) -> Result<Duration, ConfigError> {
        let Some(v) = v else { return Ok(default) };
        let d = humantime::parse_duration(v.get_ref().trim()).map_err(|e| {
            self.err(
                v,
                key,
                format!(
                    "bad duration '{}': {e}; use a number with ms, s, m or h, e.g. \"5s\" or \"2m\"",
                    v.get_ref()
                ),
            )
        })?;
        if positive && d.is_zero() {
            return Err(self.err(v, key, "must be more than 0, e.g. \"5s\""));
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
            let example = model.full_profile().name;
            let msg = format!("{e} (write layouts like \"1x{example}\" or \"3x2g.20gb+1x1g.10gb\")");
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
            return Err(self.err(v, key, "empty path"));
        }
        let usable = s.starts_with('/') || (command && bare);
        if !usable {
            let allowed = if command {
                "an absolute path or a bare command name"
            } else {
                "an absolute path"
            };
            return Err(self.err(v, key, format!("'{s}' is relative; use {allowed}")));
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
    let policy = policy(&cx, &raw.policy)?;
    let node_groups = node_groups(&cx, &raw.node_group)?;
    let models: Vec<&'static GpuModel> = node_groups.iter().map(|g| g.gpu_model).collect();
    let default_mem_bytes = match &raw.estimator.default_mem {
        None => 8 << 30,
        Some(v) => {
            let key = "estimator.default_mem";
            let b =
                parse_size(v.get_ref()).map_err(|e| cx.err(v, key, format!("'{}': {e}, e.g. \"8G\"", v.get_ref())))?;
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
        node_groups,
    })
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

fn estimator(cx: &Ctx, e: &RawEstimator, default_mem_bytes: u64) -> Result<EstimatorConfig, ConfigError> {
    let d = EstimatorConfig::default();
    let cuda_context_bytes = match &e.cuda_context {
        None => d.cuda_context_bytes,
        Some(v) => parse_size(v.get_ref()).map_err(|err| {
            cx.err(
                v,
                "estimator.cuda_context",
                format!("'{}': {err}, e.g. \"500M\"", v.get_ref()),
            )
        })?,
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
        let ok = s
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0));
        if !ok {
            return Err(cx.err(
                v,
                key,
                format!("'{s}' is not host:port; e.g. \"ctl1:6830\" or \"10.0.0.1:6830\""),
            ));
        }
        Ok(Some(s.to_string()))
    };
    let server = addr(&h.server, "history.server")?;
    let listen = addr(&h.listen, "history.listen")?.or_else(|| server.clone());
    Ok(HistoryConfig {
        server,
        listen,
        snapshot_refresh: cx.duration(
            &h.snapshot_refresh,
            "history.snapshot_refresh",
            Duration::from_secs(5),
            true,
        )?,
    })
}

fn controller(cx: &Ctx, c: &RawController) -> Result<ControllerConfig, ConfigError> {
    Ok(ControllerConfig {
        interval: cx.duration(&c.interval, "controller.interval", Duration::from_secs(5), true)?,
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
            false,
        )?,
        drain_timeout: cx.duration(
            &c.drain_timeout,
            "controller.drain_timeout",
            Duration::from_secs(30 * 60),
            true,
        )?,
    })
}

fn policy(cx: &Ctx, p: &RawPolicy) -> Result<PolicyConfig, ConfigError> {
    if p.kind != PolicyKind::Demand {
        let only_demand =
            |key: &str| format!("policy.{key} applies only to kind = \"demand\"; remove it or set kind = \"demand\"");
        if let Some(v) = &p.forecast_window {
            return Err(cx.err(v, "policy.forecast_window", only_demand("forecast_window")));
        }
        if let Some(v) = &p.min_gain {
            return Err(cx.err(v, "policy.min_gain", only_demand("min_gain")));
        }
    }
    Ok(match p.kind {
        PolicyKind::Demand => PolicyConfig::Demand {
            forecast_window: cx.duration(
                &p.forecast_window,
                "policy.forecast_window",
                Duration::from_secs(600),
                true,
            )?,
            min_gain: cx.count(&p.min_gain, "policy.min_gain", 1, 1, 1_000)?,
        },
        PolicyKind::Static => PolicyConfig::Static,
        PolicyKind::None => PolicyConfig::None,
    })
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
    for r in raw {
        let g = node_group(cx, r)?;
        if groups.iter().any(|o| o.name == g.name) {
            return Err(cx.err(
                &r.name,
                "node_group.name",
                format!("'{}' names two groups; names must be unique", g.name),
            ));
        }
        for n in &g.nodes {
            if let Some(o) = groups.iter().find(|o| o.nodes.contains(n)) {
                return Err(cx.err(
                    &r.nodes,
                    "node_group.nodes",
                    format!("node {n} is also in group '{}'; a node belongs to one group", o.name),
                ));
            }
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
            format!("'{name}': use letters, digits, '-', '_' and '.'"),
        ));
    }
    let model = model_by_name(r.gpu_model.get_ref()).ok_or_else(|| {
        cx.err(
            &r.gpu_model,
            "node_group.gpu_model",
            format!(
                "unknown GPU model '{}'; allowed: {}",
                r.gpu_model.get_ref(),
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
                return Err(cx.err(v, "node_group.initial_layout", format!("{c} is not in allowed_layouts")));
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
                return Err(cx.err(v, "node_group.node_conf", format!("'{t}': dynmig sets NodeName and Gres itself; give the other node settings, e.g. \"CPUs=4 RealMemory=4000\"")));
            }
            v.get_ref().trim().to_string()
        }
    };
    Ok(NodeGroup {
        name,
        nodes: nodes(cx, &r.nodes)?,
        gpu_model: model,
        gpus: gpus as u32,
        backend: r.backend,
        initial_layout,
        allowed_layouts,
        node_conf,
        allow_mig_mode_change: r.allow_mig_mode_change.unwrap_or(false),
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
    for e in exprs {
        for n in expand_hostlist(e).map_err(|m| cx.err(v, key, format!("{m}; {shape}")))? {
            if out.contains(&n) {
                return Err(cx.err(v, key, format!("node {n} is listed twice")));
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
    let shape = "use \"all\" or a list of layouts, e.g. [\"1x7g.80gb\", \"2x3g.40gb\"]";
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
        other => Err(cx.err(v, key, format!("{other} is not allowed; {shape}"))),
    }
}
