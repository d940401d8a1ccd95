//! Text from other processes: the history wire format (records, munge lines and metadata,
//! the accounting comment, `sacct --json`), and Slurm's JSON (`squeue --json`,
//! `sinfo --json`, node GRES strings). Inputs are truncated, of the wrong types, huge, or
//! mutated valid documents.

use dynmig_history::accounting::{decode_comment, encode_comment, records_from_sacct};
use dynmig_history::auth::{check_line, check_metadata, socket_from_conf};
use dynmig_history::JobRecord;
use proptest::prelude::*;
use serde_json::{json, Map, Value};

use crate::gen;
use crate::targets::parsers::MAX_ERROR;

fn bounded(what: &str, msg: String) -> Result<(), String> {
    if msg.len() > MAX_ERROR {
        Err(format!(
            "{what}: error message of {} bytes: '{}'",
            msg.len(),
            crate::runner::cut(&msg, 150)
        ))
    } else {
        Ok(())
    }
}

/// A valid record.
pub fn sample_record() -> JobRecord {
    JobRecord {
        job_id: 42,
        restart: 0,
        node: "n1".into(),
        uid: 1000,
        user: "alice".into(),
        job_name: "train llama".into(),
        profile: "2g.20gb".into(),
        estimate_bytes: 18 << 30,
        source: "mig-mem".into(),
        peak_bytes: 17 << 30,
        limit_bytes: 20 << 30,
        exit_status: 0,
        oom: false,
        end_time: 1_764_000_000,
    }
}

/// A JSON document shaped like `template` with some values replaced by hostile leaves, keys
/// dropped or added, and (sometimes) wrapped in lists or nested.
fn shaped(template: Value) -> BoxedStrategy<Value> {
    let Value::Object(map) = template else {
        return Just(template).boxed();
    };
    let keys: Vec<String> = map.keys().cloned().collect();
    let n = keys.len();
    (
        proptest::collection::vec((0..n + 3, gen::json_leaf()), 0..5),
        proptest::collection::vec(0..n, 0..2),
    )
        .prop_map(move |(edits, drops)| {
            let mut m: Map<String, Value> = map.clone();
            for (i, v) in edits {
                let k = keys.get(i).cloned().unwrap_or_else(|| format!("extra{i}"));
                m.insert(k, v);
            }
            for d in drops {
                m.remove(&keys[d]);
            }
            Value::Object(m)
        })
        .boxed()
}

/// A document serialised, then maybe cut short or mutated as text.
fn as_text(doc: BoxedStrategy<Value>) -> BoxedStrategy<String> {
    doc.prop_flat_map(|v| {
        let text = v.to_string();
        prop_oneof![
            4 => Just(text.clone()),
            2 => (Just(text.clone()), any::<prop::sample::Index>()).prop_map(|(t, i)| t[..gen::floor(&t, i.index(t.len() + 1))].to_string()),
            2 => gen::mutated(vec![text]),
        ]
    })
    .boxed()
}

// --- history wire -------------------------------------------------------------------------

/// Wire and spool bytes: the record's JSON with hostile fields, versions, truncation, huge
/// strings, non-UTF-8.
pub fn history_wire() -> BoxedStrategy<(bool, Vec<u8>)> {
    let mut template = serde_json::to_value(sample_record()).expect("record");
    template["v"] = json!(1);
    let v = template.clone();
    let docs = prop_oneof![
        6 => shaped(template),
        1 => (gen::json_leaf()).prop_map(move |leaf| {
            let mut d = v.clone();
            d["v"] = leaf;
            d
        }),
    ]
    .boxed();
    (any::<bool>(), gen::c_bytes_from(as_text(docs)))
        .prop_map(|(spool, b)| (spool, b))
        .boxed()
}

/// `JobRecord::from_wire`/`from_spool`: no panic; bounded refusals; an accepted record
/// passes `validate`, encodes and decodes back the same (wire and accounting comment).
pub fn check_history_wire(input: &(bool, Vec<u8>)) -> Result<(), String> {
    let (spool, bytes) = input;
    let r = if *spool {
        JobRecord::from_spool(bytes)
    } else {
        JobRecord::from_wire(bytes)
    };
    match r {
        Ok(r) => {
            r.validate()
                .map_err(|e| format!("accepted a record that does not validate: {e}"))?;
            let wire = r
                .to_wire()
                .map_err(|e| format!("accepted record does not encode: {e}"))?;
            let back = JobRecord::from_wire(&wire).map_err(|e| format!("encoded record does not decode: {e}"))?;
            if back != r {
                return Err("record reads back differently".into());
            }
            let comment = encode_comment(&r).map_err(|e| format!("accepted record has no accounting comment: {e}"))?;
            let back = decode_comment(&comment).map_err(|e| format!("comment does not decode: {e}"))?;
            if back.as_ref() != Some(&r) {
                return Err(format!("comment '{comment}' reads back differently"));
            }
            Ok(())
        }
        Err(e) => bounded("JobRecord::from_wire", e.to_string()),
    }
}

/// Munge credential lines, `unmunge` metadata, slurm.conf text and accounting comments.
pub fn munge_and_comments() -> impl Strategy<Value = (u8, String)> {
    let comment = encode_comment(&sample_record()).expect("comment");
    (
        0u8..4,
        gen::mutated(vec![
            "MUNGE:AwQDAADm3gJ5rFvQ:".into(),
            "STATUS:          Success (0)\nENCODE_HOST:     n1 (10.0.0.2)\nUID:             root (0)\nGID:             root (0)\n".into(),
            "AuthType=auth/munge\nAuthInfo=cred_expire=30,socket=/run/m/munge.socket\n".into(),
            comment,
        ]),
    )
}

/// `check_line`, `check_metadata`, `socket_from_conf`, `decode_comment`: no panic; bounded
/// refusals; metadata is accepted only with status Success and uid 0; an accepted comment
/// re-encodes to a comment that reads back the same.
pub fn check_munge_and_comments(input: &(u8, String)) -> Result<(), String> {
    let (which, text) = input;
    match which {
        0 => match check_line(text) {
            Ok(()) if text.is_empty() || !text.chars().all(|c| c.is_ascii_graphic()) => {
                Err("accepted a credential that is not one line of printable ASCII".into())
            }
            Ok(()) => Ok(()),
            Err(e) => bounded("check_line", e.to_string()),
        },
        1 => match check_metadata(text) {
            Ok(()) => {
                let status = text.lines().find_map(|l| l.strip_prefix("STATUS:")).unwrap_or("");
                if !status.trim().starts_with("Success") {
                    return Err("accepted metadata without STATUS Success".into());
                }
                Ok(())
            }
            Err(e) => bounded("check_metadata", e.to_string()),
        },
        2 => {
            let _ = socket_from_conf(text);
            Ok(())
        }
        _ => match decode_comment(text) {
            Ok(Some(r)) => {
                let again = encode_comment(&r).map_err(|e| format!("decoded comment does not encode: {e}"))?;
                let back = decode_comment(&again).map_err(|e| format!("re-encoded comment does not decode: {e}"))?;
                (back == Some(r))
                    .then_some(())
                    .ok_or_else(|| "comment reads back differently".to_string())
            }
            Ok(None) => Ok(()),
            Err(e) => bounded("decode_comment", e.to_string()),
        },
    }
}

// --- Slurm's JSON -------------------------------------------------------------------------

fn job_22_05() -> Value {
    json!({"job_id": 7, "name": "train", "user_name": "alice", "user_id": 1000, "group_id": 1000,
           "current_working_directory": "/home/alice", "job_state": "PENDING", "state_reason": "Resources",
           "tres_per_node": "gres:gpu:1", "nodes": "n1", "submit_time": 1764000000, "start_time": 0,
           "end_time": 0, "time_limit": 60, "deadline": 0, "admin_comment": "", "exit_code": 0,
           "restart_cnt": 0, "standard_error": "/home/alice/e"})
}

fn job_24_11() -> Value {
    json!({"job_id": 8, "name": "x", "user_name": "bob", "user_id": 1001, "group_id": 1001,
           "job_state": ["RUNNING", "REQUEUED"], "tres_per_node": "gres/gpu:2g.20gb:1",
           "submit_time": {"set": true, "infinite": false, "number": 1764000000},
           "time_limit": {"set": true, "infinite": true, "number": 0},
           "exit_code": {"status": ["SUCCESS"], "return_code": {"set": true, "number": 0}},
           "restart_cnt": 1, "admin_comment": "dynmig/v1 profile=2g.20gb count=1 mem=1 source=mig-mem"})
}

fn node_22_05() -> Value {
    json!({"name": "n1", "state": "idle", "state_flags": ["DRAIN"], "reason": "dynmig/v1 repartition to=1x7g.80gb",
           "gres": "gpu:3g.40gb:2(S:0),gpu:1g.10gb:1", "gres_used": "gpu:3g.40gb:1(IDX:0)", "extra": "",
           "slurmd_start_time": 1764000000, "alloc_cpus": 0, "reason_changed_at": 1764000000})
}

fn node_24_11() -> Value {
    json!({"name": "n2", "state": ["IDLE", "DRAIN", "DYNAMIC_NORM"], "gres": "gres/gpu:7g.80gb:1",
           "extra": "dynmig/v1 layout=1x7g.80gb", "alloc_cpus": {"set": true, "number": 4}})
}

/// `squeue --json` or `sinfo --json` documents of every release's shape: lists of hostile
/// entries, the list of the wrong type, truncated or mutated text, huge lists.
fn slurm_doc(key: &'static str, a: Value, b: Value) -> BoxedStrategy<String> {
    let entry = prop_oneof![4 => shaped(a), 4 => shaped(b), 1 => gen::json_leaf()];
    let docs = prop_oneof![
        8 => proptest::collection::vec(entry, 0..4).prop_map(move |list| json!({ key: list, "meta": {"plugin": {}} })),
        1 => gen::json_leaf().prop_map(move |v| json!({ key: v })),
        1 => gen::json_leaf(),
    ]
    .boxed();
    prop_oneof![
        20 => as_text(docs),
        1 => (0usize..20_000).prop_map(move |n| format!("{{\"{key}\":[{}]}}", vec!["{}"; n].join(","))),
        1 => (1usize..5000).prop_map(|n| format!("{}{}", "[".repeat(n), "]".repeat(n))),
    ]
    .boxed()
}

/// `squeue --json` texts.
pub fn slurm_jobs() -> BoxedStrategy<String> {
    slurm_doc("jobs", job_22_05(), job_24_11())
}

/// `sinfo --json` texts, and node GRES strings.
pub fn slurm_nodes() -> BoxedStrategy<(String, String)> {
    let gres = prop_oneof![
        3 => gen::joined(&["gpu", ":", "3g.40gb", "1g.10gb", "2", "(S:0)", "(IDX:0,2)", ",", "gres/", "(", ")", "4294967296", "-1", "shard"], 10),
        1 => gen::text(),
    ];
    (slurm_doc("nodes", node_22_05(), node_24_11()), gres).boxed()
}

/// `parse_jobs`: no panic; an accepted document gives one job per list entry.
pub fn check_slurm_jobs(text: &str) -> Result<(), String> {
    match dynmig_slurm::json::parse_jobs(text) {
        Ok(jobs) => {
            let n = serde_json::from_str::<Value>(text)
                .ok()
                .and_then(|v| v["jobs"].as_array().map(Vec::len));
            if n != Some(jobs.len()) {
                return Err(format!("{} jobs read from a list of {n:?}", jobs.len()));
            }
            for j in &jobs {
                let _ = (j.state.clone(), j.time_limit_s);
            }
            Ok(())
        }
        Err(e) => bounded("parse_jobs", e.to_string()),
    }
}

/// `parse_nodes` and `parse_node_gres`: no panic; one node per list entry; GRES pairs are
/// typed GPU entries.
pub fn check_slurm_nodes(input: &(String, String)) -> Result<(), String> {
    let (text, gres) = input;
    match dynmig_slurm::json::parse_nodes(text) {
        Ok(nodes) => {
            let n = serde_json::from_str::<Value>(text)
                .ok()
                .and_then(|v| v["nodes"].as_array().map(Vec::len));
            if n != Some(nodes.len()) {
                return Err(format!("{} nodes read from a list of {n:?}", nodes.len()));
            }
            for node in &nodes {
                let _ = (node.is_drain(), node.has_jobs(), node.is_down());
                let _ = dynmig_slurm::json::parse_node_gres(&node.gres);
            }
        }
        Err(e) => bounded("parse_nodes", e.to_string())?,
    }
    for (t, _) in dynmig_slurm::json::parse_node_gres(gres) {
        if t.is_empty() {
            return Err(format!(
                "an empty GRES type read from '{}'",
                crate::runner::cut(gres, 100)
            ));
        }
    }
    Ok(())
}

/// `sacct --json` bytes.
pub fn sacct() -> BoxedStrategy<Vec<u8>> {
    let comment = encode_comment(&sample_record()).expect("comment");
    let job = json!({"job_id": 42, "name": "allocation", "user": "alice", "comment": {"administrator": null, "job": "x", "system": comment}});
    let other = json!({"job_id": 43, "user": "bob", "comment": {"system": "dynmig/v1 job_id=43"}});
    let entry = prop_oneof![
        4 => Just(job.clone()),
        4 => shaped(job),
        2 => shaped(other),
        1 => gen::json_leaf(),
    ];
    let docs = prop_oneof![
        8 => proptest::collection::vec(entry, 0..4).prop_map(|jobs| json!({"jobs": jobs})),
        1 => gen::json_leaf(),
    ]
    .boxed();
    gen::c_bytes_from(as_text(docs))
}

/// `records_from_sacct`: no panic; bounded refusals; every record read validates.
pub fn check_sacct(bytes: &[u8]) -> Result<(), String> {
    match records_from_sacct(bytes) {
        Ok(r) => {
            for rec in &r.records {
                rec.validate()
                    .map_err(|e| format!("a record read from sacct does not validate: {e}"))?;
            }
            for s in &r.skipped {
                bounded("records_from_sacct skipped", s.clone())?;
            }
            Ok(())
        }
        Err(e) => bounded("records_from_sacct", e.to_string()),
    }
}
