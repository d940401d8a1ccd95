// One piece: one fuzz target per parser of dynmig-core, each a few lines around the same oracle; a list, read as one.
//! Every parser of user or admin input in dynmig-core: hints, sizes, TRES, dynmig.toml,
//! layouts, node lists, mig-parted YAML, and the protocol texts that cross a process
//! boundary (decision records, journals, plans, drain reasons, node `Extra`, the history
//! snapshot, events).

use dynmig_core::config::{expand_hostlist, parse_config, MAX_HOSTS, MAX_NAME};
use dynmig_core::estimate::HistorySnapshot;
use dynmig_core::geometry::{GpuModel, NodeLayout, ProfileCounts, MODELS};
use dynmig_core::gres::TresList;
use dynmig_core::hints::{hints_from_spank_env, parse_hint, OPTIONS};
use dynmig_core::protocol::decision::DecisionRecord;
use dynmig_core::protocol::event::Event;
use dynmig_core::protocol::intent::NodeIntent;
use dynmig_core::protocol::journal::Journal;
use dynmig_core::protocol::layout::PublishedLayout;
use dynmig_core::protocol::plan::Plans;
use dynmig_core::size::{format_size, parse_size, MAX_SIZE_BYTES};
use proptest::prelude::*;
use proptest::sample::select;

use crate::gen;
use crate::oracle;
use crate::runner::cut;

/// The longest error message a parser may give for any input, bytes: messages quote the
/// input cut to about 100 characters (of up to 4 bytes each), plus lists of what is allowed.
pub const MAX_ERROR: usize = 4096;

fn bounded(what: &str, msg: String) -> Result<(), String> {
    if msg.len() > MAX_ERROR {
        Err(format!(
            "{what}: error message of {} bytes: '{}'",
            msg.len(),
            cut(&msg, 150)
        ))
    } else {
        Ok(())
    }
}

// --- hints --------------------------------------------------------------------------------

/// `(option, value)` pairs, and the same as SPANK environment entries.
pub fn hints() -> impl Strategy<Value = Vec<(String, String)>> {
    proptest::collection::vec(
        (
            prop_oneof![10 => select(&OPTIONS[..]).prop_map(str::to_string), 1 => gen::text(), 1 => Just("mig_mem".to_string())],
            gen::hint_value(),
        ),
        1..4,
    )
}

/// `parse_hint` and `hints_from_spank_env`: no panic; a refusal starts `dynmig: --<option>`
/// and is bounded; a value that parses alone parses again from the environment.
pub fn check_hints(pairs: &[(String, String)]) -> Result<(), String> {
    for (option, value) in pairs {
        match parse_hint(option, value) {
            Ok(_) => {}
            Err(e) => {
                let msg = e.to_string();
                bounded("parse_hint", msg.clone())?;
                if !msg.starts_with("dynmig: ") {
                    return Err(format!("message does not start 'dynmig: ': {}", cut(&msg, 150)));
                }
            }
        }
    }
    let env: Vec<String> = pairs
        .iter()
        .map(|(o, v)| format!("_SLURM_SPANK_OPTION_dynmig_{}={v}", o.replace('-', "_")))
        .collect();
    let refs: Vec<&str> = env.iter().map(String::as_str).collect();
    if let Err(e) = hints_from_spank_env(&refs) {
        bounded("hints_from_spank_env", e.to_string())?;
    }
    Ok(())
}

// --- sizes --------------------------------------------------------------------------------

/// Size texts.
pub fn sizes() -> impl Strategy<Value = (String, u64)> {
    (
        prop_oneof![
            3 => gen::joined(&["1", "18", "0", ".", "5", "G", "M", "K", "T", "B", "iB", "g", "e", "-", "+", " ", "1024", "18446744073709551615"], 6),
            1 => gen::text(),
            1 => select(gen::HINT_VALUES).prop_map(str::to_string),
        ],
        any::<u64>(),
    )
}

/// `parse_size`: no panic; a size is at most `MAX_SIZE_BYTES`; a refusal is bounded;
/// `format_size` of any number does not panic and reads back within 0.1% when it is at most
/// `MAX_SIZE_BYTES`.
pub fn check_sizes(input: &(String, u64)) -> Result<(), String> {
    let (text, n) = input;
    match parse_size(text) {
        Ok(v) if v > MAX_SIZE_BYTES => return Err(format!("'{}' read as {v} bytes, above the bound", cut(text, 80))),
        Ok(_) => {}
        Err(e) => bounded("parse_size", e.to_string())?,
    }
    let shown = format_size(*n);
    if *n <= MAX_SIZE_BYTES && *n >= 1024 {
        let back = parse_size(&shown).map_err(|e| format!("format_size({n}) = '{shown}' does not read back: {e}"))?;
        let diff = back.abs_diff(*n) as f64 / *n as f64;
        if diff > 0.05 {
            return Err(format!("format_size({n}) = '{shown}' reads back as {back}"));
        }
    }
    Ok(())
}

// --- TRES ---------------------------------------------------------------------------------

/// `TresList::parse`, `render` and `set_gpu`: no panic; non-GPU entries come back byte for
/// byte; an untouched list renders as it came (empty entries aside); typing every GPU entry
/// leaves no untyped GPU request ([`oracle`]); the counts read agree with `strtoull`; a
/// refusal names a GPU entry.
pub fn check_tres(text: &str) -> Result<(), String> {
    let list = match TresList::parse(text) {
        Ok(l) => l,
        Err(e) => {
            bounded("TresList::parse", e.to_string())?;
            if !oracle::entries(text).iter().any(|e| e.gpu) {
                return Err(format!("refused a field without a GPU entry: {e}"));
            }
            return Ok(());
        }
    };
    let rendered = list.render();
    if oracle::non_gpu(&rendered) != oracle::non_gpu(text) {
        return Err(format!("render changed non-GPU entries: '{rendered}'"));
    }
    for (g, o) in list
        .gpu_entries()
        .zip(oracle::entries(text).into_iter().filter(|e| e.gpu))
    {
        if o.count.is_some_and(|c| c != Some(g.count)) {
            return Err(format!(
                "count of '{}' read as {}, strtoull says {:?}",
                o.raw, g.count, o.count
            ));
        }
    }
    let mut typed = list.clone();
    typed.set_gpu(Some("2g.20gb"), 1);
    let out = typed.render();
    if oracle::non_gpu(&out) != oracle::non_gpu(text) {
        return Err(format!("set_gpu changed non-GPU entries: '{out}'"));
    }
    if let Some(e) = oracle::entries(&out).into_iter().find(|e| e.untyped_gpu()) {
        return Err(format!("set_gpu left an untyped GPU request '{}' in '{out}'", e.raw));
    }
    let again = TresList::parse(&out).map_err(|e| format!("set_gpu's output '{out}' does not parse: {e}"))?;
    if again.render() != out {
        return Err(format!("'{out}' renders as '{}'", again.render()));
    }
    Ok(())
}

// --- dynmig.toml --------------------------------------------------------------------------

const CONFIG_VALUES: &[&str] = &[
    "1",
    "0",
    "-1",
    "2",
    "16",
    "17",
    "4294967295",
    "99999999999999999999",
    "1.5",
    "nan",
    "inf",
    "true",
    "false",
    "\"\"",
    "\"5s\"",
    "\"0s\"",
    "\"5000000000000000h\"",
    "\"1000000000000000h\"",
    "\"18446744073709551615s\"",
    "\"8G\"",
    "\"1025G\"",
    "\"-1G\"",
    "\"n[1-100000]\"",
    "\"n[1-100001]\"",
    "\"n[1-2]\"",
    "\"n[0-4294967295]\"",
    "\"a[1-300]b[1-400]\"",
    "[\"n1\", \"n1\"]",
    "\"A100-80GB\"",
    "\"A30-24GB\"",
    "\"H100-80GB\"",
    "\"NVIDIA A100-SXM4-80GB\"",
    "\"B300\"",
    "\"simulated\"",
    "\"nvml\"",
    "\"1x7g.80gb\"",
    "\"7x1g.10gb\"",
    "\"4294967295x1g.10gb\"",
    "\"4294967295x1g.10gb+1x1g.10gb\"",
    "\"1x1g.10gb+me+6x1g.10gb\"",
    "\"all\"",
    "[\"1x7g.80gb\", \"7x1g.10gb\"]",
    "\"estimate\"",
    "\"reject\"",
    "\"full-profile\"",
    "\"demand\"",
    "\"learned\"",
    "\"static\"",
    "\"/var/lib/dynmig\"",
    "\"relative/path\"",
    "\"/a\\u0000b\"",
    "\"ctl1:0\"",
    "\"ctl1:6819\"",
    "\"CPUs=4 RealMemory=4000\"",
    "{}",
    "[]",
];
const CONFIG_KEYS: &[&str] = &[
    "version",
    "name",
    "nodes",
    "gpu_model",
    "gpus",
    "backend",
    "initial_layout",
    "allowed_layouts",
    "node_conf",
    "allow_mig_mode_change",
    "default_mem",
    "cuda_context",
    "model_margin",
    "model_margin_infer",
    "history_quantile",
    "history_margin",
    "history_min_samples",
    "history_window",
    "max_oom_restarts",
    "oom_peak_fraction",
    "snapshot_refresh",
    "store",
    "server",
    "whole_gpu",
    "multi_gpu",
    "interval",
    "drain_timeout",
    "min_layout_lifetime",
    "max_concurrent_repartitions",
    "reservation_duration",
    "drain",
    "kind",
    "forecast_window",
    "min_gain",
    "layout",
    "state_dir",
    "history_snapshot",
    "level",
    "bogus_key",
];
const SECTIONS: &[&str] = &[
    "[paths]",
    "[estimator]",
    "[history]",
    "[jobs]",
    "[controller]",
    "[policy]",
    "[agent]",
    "[log]",
    "[[node_group]]",
    "[[node_group]]",
    "[bogus]",
    "[[paths]]",
];

/// A valid small configuration, the base of the mutations.
const BASE_CONFIG: &str = "version = 1\n[jobs]\nwhole_gpu = \"estimate\"\n[[node_group]]\nname = \"a\"\nnodes = \"n[1-2]\"\ngpu_model = \"A100-80GB\"\ngpus = 2\nbackend = \"simulated\"\ninitial_layout = \"1x7g.80gb\"\n";

/// Configuration texts: structured documents of hostile keys and values, the shipped example
/// and a small valid file with a line replaced, and byte-level mutations of both.
pub fn configs() -> BoxedStrategy<String> {
    let line = prop_oneof![
        6 => (select(CONFIG_KEYS), prop_oneof![40 => select(CONFIG_VALUES).prop_map(str::to_string), 6 => gen::text().prop_map(|t| format!("{t:?}")), 1 => gen::huge().prop_map(|t| format!("{t:?}"))])
            .prop_map(|(k, v)| format!("{k} = {v}")),
        1 => select(SECTIONS).prop_map(str::to_string),
        1 => gen::text(),
    ];
    let structured = proptest::collection::vec(line, 0..16).prop_map(|lines| {
        let mut s = String::from("version = 1\n");
        for l in lines {
            s.push_str(&l);
            s.push('\n');
        }
        s
    });
    let replaced = (
        prop_oneof![Just(dynmig_core::config::EXAMPLE_TOML), Just(BASE_CONFIG)],
        any::<prop::sample::Index>(),
        select(CONFIG_VALUES),
    )
        .prop_map(|(base, i, v)| {
            let lines: Vec<&str> = base.lines().collect();
            let at = i.index(lines.len());
            let mut out = String::new();
            for (n, l) in lines.iter().enumerate() {
                if n == at {
                    if let Some((k, _)) = l.split_once('=') {
                        out.push_str(&format!("{}= {v}\n", k));
                        continue;
                    }
                }
                out.push_str(l);
                out.push('\n');
            }
            out
        });
    prop_oneof![
        4 => structured,
        4 => replaced,
        2 => gen::mutated(vec![BASE_CONFIG.to_string(), dynmig_core::config::EXAMPLE_TOML.to_string()]),
    ]
    .boxed()
}

/// `parse_config`: no panic; a refusal is bounded; an accepted file gives a submit policy
/// and every group's initial layout.
pub fn check_config(text: &str) -> Result<(), String> {
    match parse_config(text) {
        Ok(c) => {
            let _ = dynmig_core::submit::SubmitPolicy::from_config(&c);
            for g in &c.node_groups {
                let layout = g.initial_node_layout();
                if layout.gpus.len() != g.gpus as usize {
                    return Err(format!(
                        "group {}: {} GPU layouts for {} GPUs",
                        g.name,
                        layout.gpus.len(),
                        g.gpus
                    ));
                }
                for n in &g.nodes {
                    if n.is_empty() || n.len() > MAX_NAME {
                        return Err(format!("group {}: node name '{}'", g.name, cut(n, 80)));
                    }
                }
            }
            Ok(())
        }
        Err(e) => bounded("parse_config", e.to_string()),
    }
}

// --- layouts ------------------------------------------------------------------------------

const LAYOUT_PIECES: &[&str] = &[
    "1x",
    "2x",
    "3x",
    "7x",
    "0x",
    "4294967295x",
    "4294967296x",
    "x",
    "1g.10gb",
    "1g.20gb",
    "2g.20gb",
    "3g.40gb",
    "4g.40gb",
    "7g.80gb",
    "1g.10gb+me",
    "1g.12gb",
    "2g.24gb",
    "1g.18gb",
    "7g.141gb",
    "+",
    "+me",
    ",",
    "empty",
    "mig-disabled",
    " ",
];

/// `(model, GPU count, text)`.
pub fn layouts() -> impl Strategy<Value = (usize, usize, String)> {
    (
        0..MODELS.len(),
        prop_oneof![1usize..=8, Just(16), Just(0)],
        prop_oneof![4 => gen::joined(LAYOUT_PIECES, 12), 1 => gen::text()],
    )
}

/// `ProfileCounts::parse` and `NodeLayout::parse`: no panic; bounded refusals; what is read
/// prints as text that reads back the same.
pub fn check_layouts(input: &(usize, usize, String)) -> Result<(), String> {
    let (m, gpus, text) = input;
    let model: &GpuModel = MODELS[*m];
    match ProfileCounts::parse(model, text) {
        Ok(c) => {
            let shown = c.to_string();
            let back = ProfileCounts::parse(model, &shown).map_err(|e| format!("'{shown}' does not read back: {e}"))?;
            if back != c {
                return Err(format!("'{shown}' reads back differently"));
            }
        }
        Err(e) => bounded("ProfileCounts::parse", e.to_string())?,
    }
    match NodeLayout::parse(model, *gpus, text) {
        Ok(l) => {
            let shown = l.to_string();
            let back =
                NodeLayout::parse(model, *gpus, &shown).map_err(|e| format!("'{shown}' does not read back: {e}"))?;
            if back != l {
                return Err(format!("'{shown}' reads back differently"));
            }
        }
        Err(e) => bounded("NodeLayout::parse", e.to_string())?,
    }
    Ok(())
}

// --- node lists ---------------------------------------------------------------------------

const HOST_PIECES: &[&str] = &[
    "n",
    "gpu",
    "node-",
    "[",
    "]",
    "1",
    "01",
    "08",
    "10",
    "-",
    ",",
    "1-3",
    "001-100",
    "1-100000",
    "1-100001",
    "0-4294967295",
    "1-99999999999999999999",
    "3-1",
    "[1-2]",
    "[1-300]",
    "[1-400]",
    "a.b",
    " ",
    "[[",
    "]]",
];

/// Hostlist expressions.
pub fn node_lists() -> BoxedStrategy<String> {
    prop_oneof![5 => gen::joined(HOST_PIECES, 10), 1 => gen::text()].boxed()
}

/// `expand_hostlist`: no panic; at most `MAX_HOSTS` names, each 1 to `MAX_NAME` bytes;
/// bounded refusals.
pub fn check_node_lists(expr: &str) -> Result<(), String> {
    match expand_hostlist(expr) {
        Ok(names) => {
            if names.len() > MAX_HOSTS {
                return Err(format!("{} names", names.len()));
            }
            if let Some(n) = names.iter().find(|n| n.is_empty() || n.len() > MAX_NAME) {
                return Err(format!("name of {} bytes", n.len()));
            }
            Ok(())
        }
        Err(e) => bounded("expand_hostlist", e),
    }
}

// --- mig-parted ---------------------------------------------------------------------------

const YAML_DEVICES: &[&str] = &[
    "all",
    "[0]",
    "[0, 1]",
    "[0, 4294967295]",
    "[-1]",
    "[]",
    "7",
    "\"all\"",
    "{}",
];
const YAML_FILTERS: &[&str] = &[
    "\"0x20B210DE\"",
    "\"0x20B510DE\"",
    "0x20B210DE",
    "\"0x1234\"",
    "[\"0x20B210DE\", \"0x233010DE\"]",
    "\"zz\"",
    "[]",
];
const YAML_COUNTS: &[&str] = &[
    "1",
    "7",
    "0",
    "-1",
    "4294967295",
    "4294967296",
    "99999999999999999999",
    "1.5",
    "\"1\"",
    "~",
    "[1]",
];
const YAML_PROFILES: &[&str] = &[
    "1g.10gb",
    "2g.20gb",
    "3g.40gb",
    "7g.80gb",
    "1g.20gb",
    "1g.10gb+me",
    "1g.5gb",
    "9g.99gb",
    "\"3g.20gb\"",
    "x",
];

/// mig-parted v1 files: structured configs with hostile entries, YAML tricks (anchors,
/// aliases, tags, deep nesting) and mutations.
pub fn migparted() -> BoxedStrategy<String> {
    let device = (
        select(YAML_DEVICES),
        prop_oneof![Just("true"), Just("false"), Just("yes"), Just("1"), Just("~")],
        proptest::collection::vec((select(YAML_PROFILES), select(YAML_COUNTS)), 0..4),
        proptest::option::of(select(YAML_FILTERS)),
    )
        .prop_map(|(devices, enabled, devs, filter)| {
            let mut s = format!("    - devices: {devices}\n      mig-enabled: {enabled}\n");
            if let Some(f) = filter {
                s.push_str(&format!("      device-filter: {f}\n"));
            }
            if !devs.is_empty() {
                s.push_str("      mig-devices:\n");
                for (p, c) in devs {
                    s.push_str(&format!("        {p}: {c}\n"));
                }
            }
            s
        });
    let config = (
        select(&["all-1g", "mixed", "all-disabled", "\"\"", "x y", "&a b"][..]),
        proptest::collection::vec(device, 0..3),
    )
        .prop_map(|(name, devs)| format!("  {name}:\n{}", devs.concat()));
    let structured = (
        select(&["v1", "v1", "v2", "\"v1\"", "1", "~"][..]),
        proptest::collection::vec(config, 0..4),
    )
        .prop_map(|(v, cs)| format!("version: {v}\nmig-configs:\n{}", cs.concat()));
    let tricks = select(&[
        "version: v1\nmig-configs:\n  a: &x\n    - devices: all\n      mig-enabled: true\n      mig-devices: {1g.10gb: 7}\n  b: *x\n",
        "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n      mig-devices: !!map {1g.10gb: !!int 7}\n",
        "a: &a [1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: [*f,*f,*f,*f,*f,*f,*f,*f,*f]\nversion: v1\nmig-configs: {}\n",
        "version: v1\nmig-configs:\n  deep: [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]\n",
        "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n      mig-devices:\n        1g.10gb: 1\n        1g.10gb: 2\n",
        "--- \nversion: v1\n...\n---\nversion: v2\n",
        "version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, mig-devices: {1g.10gb: 4294967295}}]}\n",
    ][..])
    .prop_map(str::to_string);
    prop_oneof![
        6 => structured.clone(),
        1 => tricks.clone(),
        2 => (structured, tricks).prop_flat_map(|(a, b)| gen::mutated(vec![a, b])),
    ]
    .boxed()
}

/// `(text, model, GPUs)`.
pub fn migparted_input() -> impl Strategy<Value = (String, usize, usize)> {
    (migparted(), 0..MODELS.len(), prop_oneof![1usize..=8, Just(16)])
}

/// `migparted::import`: no panic; bounded refusals; each imported config has one setting per
/// GPU and exports and imports back the same.
pub fn check_migparted(input: &(String, usize, usize)) -> Result<(), String> {
    let (text, m, gpus) = input;
    let model = MODELS[*m];
    match dynmig_core::migparted::import(text, model, *gpus) {
        Ok(imp) => {
            for (name, per_gpu) in &imp.configs {
                if per_gpu.len() != *gpus {
                    return Err(format!("config {name}: {} settings for {gpus} GPUs", per_gpu.len()));
                }
            }
            let out = dynmig_core::migparted::export(model, &imp.configs);
            let back = dynmig_core::migparted::import(&out, model, *gpus)
                .map_err(|e| format!("exported file does not import: {e}\n{}", cut(&out, 300)))?;
            if back.configs != imp.configs {
                return Err("export then import changed the configs".into());
            }
            Ok(())
        }
        Err(e) => bounded("migparted::import", e.to_string()),
    }
}

// --- protocol texts -----------------------------------------------------------------------

/// Valid encodings of every protocol text, the corpus of [`protocol`].
pub fn protocol_corpus() -> Vec<String> {
    vec![
        "dynmig/v1 profile=1g.10gb count=1 mem=9663676416 source=mig-mem".into(),
        "dynmig/v1 profile=7g.80gb count=8 mem=85899345920 source=whole-gpu".into(),
        r#"{"v":1,"target":"1x7g.80gb,7x1g.10gb","step":"instances","started":1764000000}"#.into(),
        r#"{"v":1,"target":"3x2g.20gb+1x1g.10gb","step":"gres_conf","started":0}"#.into(),
        r#"{"v":1,"plans":[{"node":"n1","target":"1x7g.80gb","start":1764000000,"reservation":"dynmig_n1","since":1763990000}]}"#.into(),
        "dynmig/v1 repartition to=1x7g.80gb,7x1g.10gb".into(),
        "dynmig/v1 failed: nvml said no".into(),
        "dynmig/v1 layout=3x2g.20gb+1x1g.10gb,1x7g.80gb".into(),
        "# dynmig history snapshot: uid samples quantile_peak max_peak ooms job_name\n1000\t5\t12884901888\t12884901888\t0\tft\n".into(),
        r#"{"time":1.5,"kind":"drain","node":"n1","layout":"1x7g.80gb","job":7,"detail":"x"}"#.into(),
    ]
}

/// `(which decoder, model, GPUs, text)`.
pub fn protocol() -> impl Strategy<Value = (u8, usize, usize, String)> {
    (
        0u8..7,
        0..MODELS.len(),
        prop_oneof![1usize..=2, 1usize..=8],
        gen::mutated(protocol_corpus()),
    )
}

/// The decoders of protocol texts: no panic; bounded refusals; what is read encodes to text
/// that reads back the same.
pub fn check_protocol(input: &(u8, usize, usize, String)) -> Result<(), String> {
    let (which, m, gpus, text) = input;
    let model = MODELS[*m];
    match which {
        0 => match DecisionRecord::parse(text) {
            Ok(r) => {
                let back = DecisionRecord::parse(&r.encode())
                    .map_err(|e| format!("'{}' does not read back: {e}", r.encode()))?;
                (back == r)
                    .then_some(())
                    .ok_or_else(|| "decision record reads back differently".to_string())
            }
            Err(e) => bounded("DecisionRecord::parse", e.to_string()),
        },
        1 => match Journal::parse(text, model, *gpus) {
            Ok(j) => {
                let back = Journal::parse(&j.encode(), model, *gpus)
                    .map_err(|e| format!("journal does not read back: {e}"))?;
                (back == j)
                    .then_some(())
                    .ok_or_else(|| "journal reads back differently".to_string())
            }
            Err(e) => bounded("Journal::parse", e.to_string()),
        },
        2 => match Plans::parse(text) {
            Ok(raw) => {
                for p in raw {
                    if let Err(e) = p.typed(model, *gpus) {
                        bounded("RawPlan::typed", e.to_string())?;
                    }
                }
                Ok(())
            }
            Err(e) => bounded("Plans::parse", e.to_string()),
        },
        3 => match NodeIntent::parse(text, model, *gpus) {
            Ok(Some(i)) => {
                let back = NodeIntent::parse(&i.encode(), model, *gpus)
                    .map_err(|e| format!("intent does not read back: {e}"))?;
                match (&i, back) {
                    (NodeIntent::Repartition(_), Some(b)) if b == i => Ok(()),
                    (NodeIntent::Failed(_), Some(NodeIntent::Failed(_))) => Ok(()),
                    (_, b) => Err(format!("intent '{}' reads back as {b:?}", i.encode())),
                }
            }
            Ok(None) => Ok(()),
            Err(e) => bounded("NodeIntent::parse", e.to_string()),
        },
        4 => match PublishedLayout::parse(text, model, *gpus) {
            Ok(Some(l)) => {
                let back = PublishedLayout::parse(&l.encode(), model, *gpus)
                    .map_err(|e| format!("layout does not read back: {e}"))?;
                (back == Some(l))
                    .then_some(())
                    .ok_or_else(|| "published layout reads back differently".to_string())
            }
            Ok(None) => Ok(()),
            Err(e) => bounded("PublishedLayout::parse", e.to_string()),
        },
        5 => match HistorySnapshot::parse(text) {
            Ok(s) => {
                let back =
                    HistorySnapshot::parse(&s.render()).map_err(|e| format!("snapshot does not read back: {e}"))?;
                (back.len() == s.len())
                    .then_some(())
                    .ok_or_else(|| "snapshot reads back with another size".to_string())
            }
            Err(e) => bounded("HistorySnapshot::parse", e),
        },
        _ => {
            let _ = Event::parse_lines(text);
            Ok(())
        }
    }
}
