//! Slurm's JSON (`squeue --json`, `sinfo --json`; `scontrol show ... --json` from 23.02) into
//! [`JobInfo`] and [`NodeInfo`]. Only the fields dynmig uses are read, in the shapes of every
//! release from 22.05 (OpenAPI v0.0.38 data) on: later releases wrap numbers in
//! `{"set":..,"number":..}` objects ([`num`]) and give states as lists.

use crate::{JobInfo, JobState, NodeInfo, NodeState, SlurmError};
use dynmig_core::gres::GpuRequest;
use serde_json::Value;

/// A number in Slurm's JSON: a plain number, or `{"set": true, "number": n}` (v0.0.39+); 0 when
/// absent or unset.
pub fn num(v: Option<&Value>) -> i64 {
    match v {
        Some(Value::Number(n)) => n.as_i64().unwrap_or(0),
        Some(Value::Object(o)) => {
            if o.get("set").and_then(Value::as_bool) == Some(false) {
                0
            } else {
                num(o.get("number"))
            }
        }
        _ => 0,
    }
}

/// A job's `time_limit` (minutes) in seconds: `None` when absent, unset, `{"infinite": true}`
/// (v0.0.39+) or Slurm's INFINITE/NO_VAL (`0xffffffff`/`0xfffffffe`, 22.05's plain number).
fn time_limit_s(v: Option<&Value>) -> Option<i64> {
    if let Some(Value::Object(o)) = v {
        if o.get("infinite").and_then(Value::as_bool) == Some(true)
            || o.get("set").and_then(Value::as_bool) == Some(false)
        {
            return None;
        }
    }
    let minutes = num(v);
    // Lazily: `minutes` may be any i64 (fuzzing found `then_some(minutes * 60)` overflowing).
    (1..0xffff_fffe).contains(&minutes).then(|| minutes * 60)
}

/// Whether a job is held: `"hold": true` (v0.0.39+), or a priority of 0 (22.05: a plain
/// number, `null` for NO_VAL/INFINITE; later: `{"set": true, "number": 0}`; an unset or absent
/// priority is no hold).
fn held(j: &Value) -> bool {
    if j.get("hold").and_then(Value::as_bool) == Some(true) {
        return true;
    }
    match j.get("priority") {
        Some(Value::Number(n)) => n.as_i64() == Some(0),
        Some(Value::Object(o)) => {
            o.get("set").and_then(Value::as_bool) != Some(false)
                && o.get("infinite").and_then(Value::as_bool) != Some(true)
                && o.get("number").and_then(Value::as_i64) == Some(0)
        }
        _ => false,
    }
}

/// A uid or gid: a plain number or `{"set": true, "number": n}` within `u32`; `None` when
/// absent, unset, null, out of range or Slurm's NO_VAL/INFINITE (`0xfffffffe`/`0xffffffff`):
/// never 0, a missing id is no root.
fn id(v: Option<&Value>) -> Option<u32> {
    match v? {
        Value::Number(n) => n
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .filter(|&n| n < 0xffff_fffe),
        Value::Object(o) if o.get("set").and_then(Value::as_bool) != Some(false) => id(o.get("number")),
        _ => None,
    }
}

fn text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(","),
        _ => String::new(),
    }
}

fn array<'a>(json: &'a str, key: &str, what: &'static str) -> Result<(Value, &'a str), SlurmError> {
    let v: Value = serde_json::from_str(json).map_err(|e| SlurmError::Json {
        what,
        why: format!("not JSON: {e}"),
    })?;
    if !v.get(key).is_some_and(Value::is_array) {
        return Err(SlurmError::Json {
            what,
            why: format!("no '{key}' list"),
        });
    }
    Ok((v, json))
}

/// Whether `json` is an object with a list under `key` (which layout a command answered in).
pub fn has_list(json: &str, key: &str) -> bool {
    serde_json::from_str::<Value>(json).is_ok_and(|v| v.get(key).is_some_and(Value::is_array))
}

/// Reads the job list of `squeue --json` output.
///
/// # Errors
/// [`SlurmError::Json`]: not JSON, or no `jobs` list.
pub fn parse_jobs(json: &str) -> Result<Vec<JobInfo>, SlurmError> {
    let (v, _) = array(json, "jobs", "squeue --json")?;
    Ok(v["jobs"]
        .as_array()
        .expect("checked")
        .iter()
        .map(|j| {
            // 23.02+: job_state is a list of strings; 22.05: a string.
            let state = match j.get("job_state") {
                Some(Value::Array(a)) => a.first().and_then(Value::as_str).unwrap_or(""),
                Some(Value::String(s)) => s.as_str(),
                _ => "",
            };
            // 23.02+: exit_code {"status":..,"return_code":..}; 22.05: a number.
            let exit_status = match j.get("exit_code") {
                Some(Value::Object(o)) if o.contains_key("return_code") => num(o.get("return_code")),
                other => num(other),
            };
            JobInfo {
                id: u32::try_from(num(j.get("job_id"))).unwrap_or(0),
                name: text(j.get("name")),
                user: text(j.get("user_name")),
                uid: id(j.get("user_id")),
                gid: id(j.get("group_id")),
                cwd: text(j.get("current_working_directory")),
                state: JobState::from_slurm(state),
                reason: text(j.get("state_reason")),
                tres_per_node: GpuRequest::parse(text(j.get("tres_per_node"))),
                nodes: text(j.get("nodes")),
                submit_time: num(j.get("submit_time")),
                start_time: num(j.get("start_time")),
                end_time: num(j.get("end_time")),
                time_limit_s: time_limit_s(j.get("time_limit")),
                deadline: num(j.get("deadline")),
                admin_comment: text(j.get("admin_comment")),
                exit_status: i32::try_from(exit_status).unwrap_or(-1),
                restarts: u32::try_from(num(j.get("restart_cnt"))).unwrap_or(0),
                std_err: text(j.get("standard_error")),
                std_out: text(j.get("standard_output")),
                held: held(j),
                eligible_time: num(j.get("eligible_time")),
                tres_req: text(j.get("tres_req_str")),
                reason_detail: text(j.get("state_description")),
            }
        })
        .collect())
}

/// Whether `squeue --json` output holds a job that was not asked for: neither its id nor its
/// array's id (`array_job_id`: asking for an array's id answers its tasks too) is in `asked`.
/// 22.05's `squeue --json` ignores `--jobs` and answers the whole queue, which this tells.
/// Output that is not JSON holds none.
pub fn holds_jobs_not_asked(json: &str, asked: &std::collections::HashSet<u32>) -> bool {
    let Ok((v, _)) = array(json, "jobs", "squeue --json") else {
        return false;
    };
    v["jobs"].as_array().is_some_and(|jobs| {
        jobs.iter().any(|j| {
            let id = |k: &str| u32::try_from(num(j.get(k))).unwrap_or(0);
            !asked.contains(&id("job_id")) && !asked.contains(&id("array_job_id"))
        })
    })
}

/// Reads the node list of `sinfo --json` (or `scontrol show node --json`) output.
///
/// # Errors
/// [`SlurmError::Json`]: not JSON, or no `nodes` list.
pub fn parse_nodes(json: &str) -> Result<Vec<NodeInfo>, SlurmError> {
    let (v, _) = array(json, "nodes", "sinfo --json")?;
    Ok(v["nodes"]
        .as_array()
        .expect("checked")
        .iter()
        .map(|n| {
            // 22.05: "state": "idle", "state_flags": ["DRAIN"]; 23.02+: "state": ["IDLE","DRAIN"].
            let (state, mut flags) = match n.get("state") {
                Some(Value::Array(a)) => {
                    let all: Vec<String> = a.iter().filter_map(Value::as_str).map(str::to_uppercase).collect();
                    (
                        all.first().cloned().unwrap_or_default(),
                        all.into_iter().skip(1).collect(),
                    )
                }
                other => (text(other), Vec::new()),
            };
            if let Some(Value::Array(a)) = n.get("state_flags") {
                flags.extend(a.iter().filter_map(Value::as_str).map(str::to_uppercase));
            }
            NodeInfo {
                name: text(n.get("name")),
                state: NodeState::from_slurm(&state),
                flags,
                reason: text(n.get("reason")),
                gres: text(n.get("gres")),
                gres_used: text(n.get("gres_used")),
                extra: text(n.get("extra")),
                slurmd_start_time: num(n.get("slurmd_start_time")),
                alloc_cpus: num(n.get("alloc_cpus")),
                reason_changed_at: num(n.get("reason_changed_at")),
                address: text(n.get("address")),
            }
        })
        .collect())
}

/// A node's GRES string as `(type, count)` pairs: [`dynmig_core::gres::parse_node_gres`].
pub use dynmig_core::gres::parse_node_gres;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tasks_of_an_array_asked_for_are_asked_for_and_other_jobs_are_not() {
        let asked: std::collections::HashSet<u32> = [10, 20].into_iter().collect();
        let tasks = r#"{"jobs":[{"job_id":10,"array_job_id":{"set":true,"number":10}},{"job_id":11,"array_job_id":{"set":true,"number":10}},{"job_id":20,"array_job_id":0}]}"#;
        assert!(!holds_jobs_not_asked(tasks, &asked));
        let whole = r#"{"jobs":[{"job_id":10,"array_job_id":0},{"job_id":30,"array_job_id":0}]}"#;
        assert!(holds_jobs_not_asked(whole, &asked));
        assert!(!holds_jobs_not_asked("not json", &asked));
    }

    #[test]
    fn node_gres_strings() {
        assert_eq!(
            parse_node_gres("gpu:3g.40gb:2(S:0),gpu:1g.10gb:1"),
            vec![("3g.40gb".to_string(), 2), ("1g.10gb".to_string(), 1)]
        );
        assert_eq!(
            parse_node_gres("gpu:7g.80gb:1(IDX:0,1),gres/gpu:2g.20gb:3"),
            vec![("7g.80gb".into(), 1), ("2g.20gb".into(), 3)]
        );
        assert!(parse_node_gres("(null)").is_empty());
        assert!(parse_node_gres("gpu::22").is_empty(), "an empty type is no profile");
        assert_eq!(parse_node_gres("gpu::1,gpu:1g.10gb:2"), vec![("1g.10gb".into(), 2)]);
    }

    #[test]
    fn numbers_old_and_new_forms() {
        assert_eq!(num(Some(&serde_json::json!(5))), 5);
        assert_eq!(
            num(Some(&serde_json::json!({"set": true, "infinite": false, "number": 7}))),
            7
        );
        assert_eq!(num(Some(&serde_json::json!({"set": false, "number": 7}))), 0);
    }

    #[test]
    fn a_huge_time_limit_is_unlimited_not_an_overflow() {
        use serde_json::json;
        // Found by crates/dynmig-fuzz (slurm_json_jobs): a panic in debug builds.
        assert_eq!(time_limit_s(Some(&json!(8_871_901_345_382_703_215_i64))), None);
        assert_eq!(time_limit_s(Some(&json!(i64::MIN))), None);
        assert_eq!(time_limit_s(Some(&json!({"set": true, "number": i64::MAX}))), None);
        let j = r#"{"jobs":[{"job_id":3,"time_limit":9223372036854775807}]}"#;
        assert_eq!(parse_jobs(j).unwrap()[0].time_limit_s, None);
    }

    #[test]
    fn time_limits_old_and_new_forms_and_unlimited() {
        use serde_json::json;
        assert_eq!(time_limit_s(Some(&json!(90))), Some(5400));
        assert_eq!(
            time_limit_s(Some(&json!({"set": true, "infinite": false, "number": 2}))),
            Some(120)
        );
        assert_eq!(
            time_limit_s(Some(&json!({"set": true, "infinite": true, "number": 0}))),
            None
        );
        assert_eq!(
            time_limit_s(Some(&json!({"set": false, "infinite": false, "number": 5}))),
            None
        );
        assert_eq!(time_limit_s(Some(&json!(4_294_967_295_i64))), None);
        assert_eq!(time_limit_s(Some(&json!(4_294_967_294_i64))), None);
        assert_eq!(time_limit_s(None), None);
        let j = r#"{"jobs":[{"job_id":3,"job_state":"PENDING","time_limit":{"set":true,"infinite":false,"number":30},"deadline":{"set":true,"number":1700000000}}]}"#;
        let job = &parse_jobs(j).unwrap()[0];
        assert_eq!((job.time_limit_s, job.deadline), (Some(1800), 1_700_000_000));
    }

    #[test]
    fn nodes_2205_and_2302_state_forms() {
        let old = r#"{"nodes":[{"name":"n1","state":"idle","state_flags":["DRAIN"],"reason":"r","gres":"gpu:7g.80gb:1","gres_used":"","extra":"dynmig/v1 layout=1x7g.80gb","slurmd_start_time":10,"alloc_cpus":0}]}"#;
        let n = &parse_nodes(old).unwrap()[0];
        assert_eq!(
            (n.state.clone(), n.is_drain(), n.has_jobs()),
            (NodeState::Idle, true, false)
        );
        assert_eq!(n.extra, "dynmig/v1 layout=1x7g.80gb");
        let new = r#"{"nodes":[{"name":"n1","state":["MIXED","DRAIN"],"reason":"x","gres":"","alloc_cpus":2}]}"#;
        let n = &parse_nodes(new).unwrap()[0];
        assert_eq!(
            (n.state.clone(), n.is_drain(), n.has_jobs()),
            (NodeState::Mixed, true, true)
        );
    }

    #[test]
    fn a_job_field_holding_key_value_text_stays_in_its_field() {
        // The text-scraping Epilog took later `Key=` tokens from user fields (StdOut, Comment)
        // as the real ones; JSON keeps each field where it is.
        let j = r#"{"jobs":[{"job_id":12,"name":"my job ExitCode=97:0","user_name":"alice","user_id":1000,
            "job_state":"COMPLETED","exit_code":0,"restart_cnt":0,
            "standard_output":"/home/alice/o ExitCode=97:0 UserId=bob(1001) StdErr=/etc/victim.conf",
            "standard_error":"/home/alice/e","admin_comment":"","tres_per_node":"gres:gpu:1g.10gb:1"}]}"#;
        let job = &parse_jobs(j).unwrap()[0];
        assert_eq!((job.id, job.uid, job.exit_status), (12, Some(1000), 0));
        assert_eq!(
            (job.user.as_str(), job.name.as_str()),
            ("alice", "my job ExitCode=97:0")
        );
        assert_eq!(job.std_err, "/home/alice/e");
        assert_eq!(
            job.std_out,
            "/home/alice/o ExitCode=97:0 UserId=bob(1001) StdErr=/etc/victim.conf"
        );
    }

    #[test]
    fn job_forms_of_later_releases() {
        let j = r#"{"jobs":[{"job_id":{"set":true,"number":5},"job_state":["PENDING"],"user_id":7,
            "exit_code":{"status":["SUCCESS"],"return_code":{"set":true,"number":3}}}]}"#;
        let job = &parse_jobs(j).unwrap()[0];
        assert_eq!(
            (job.id, job.state.clone(), job.exit_status, job.uid),
            (5, JobState::Pending, 3, Some(7))
        );
    }

    #[test]
    fn a_missing_or_unset_uid_or_gid_is_none_never_root() {
        let j = r#"{"jobs":[
            {"job_id":1},
            {"job_id":2,"user_id":null,"group_id":{"set":false,"number":0}},
            {"job_id":3,"user_id":4294967294,"group_id":-1},
            {"job_id":4,"user_id":{"set":true,"number":0},"group_id":0}]}"#;
        let jobs = parse_jobs(j).unwrap();
        for job in &jobs[..3] {
            assert_eq!((job.uid, job.gid), (None, None), "job {}", job.id);
        }
        assert_eq!(
            (jobs[3].uid, jobs[3].gid),
            (Some(0), Some(0)),
            "root's own job is root's"
        );
    }

    #[test]
    fn hold_begin_time_and_tres_request_in_the_forms_of_each_release() {
        // 22.05 (v0.0.38): priority a plain number (null for NO_VAL), eligible_time a number.
        let old = r#"{"jobs":[
            {"job_id":1,"job_state":"PENDING","state_reason":"JobHeldUser","priority":0,"eligible_time":0},
            {"job_id":2,"job_state":"PENDING","state_reason":"Resources","priority":4294901758,"eligible_time":1700000000,
             "tres_per_node":"gres:gpu:3g.40gb:1","tres_req_str":"cpu=1,mem=1M,node=1,billing=1,gres/gpu=2,gres/gpu:2g.20gb=1,gres/gpu:3g.40gb=1",
             "state_description":"ReqNodeNotAvail, UnavailableNodes:catalog"},
            {"job_id":3,"job_state":"PENDING","state_reason":"None","priority":null}]}"#;
        let jobs = parse_jobs(old).unwrap();
        let held: Vec<bool> = jobs.iter().map(|j| j.held).collect();
        assert_eq!(held, [true, false, false]);
        assert_eq!(jobs[1].eligible_time, 1_700_000_000);
        assert_eq!(
            jobs[1].tres_req,
            "cpu=1,mem=1M,node=1,billing=1,gres/gpu=2,gres/gpu:2g.20gb=1,gres/gpu:3g.40gb=1"
        );
        assert_eq!(jobs[1].reason_detail, "ReqNodeNotAvail, UnavailableNodes:catalog");
        // 24.11 and 26.05 (v0.0.4x): "hold" and priority/eligible_time as objects.
        let new = r#"{"jobs":[
            {"job_id":4,"job_state":["PENDING"],"state_reason":"JobHeldAdmin","hold":true,
             "priority":{"set":true,"infinite":false,"number":0},"eligible_time":{"set":true,"infinite":false,"number":0}},
            {"job_id":5,"job_state":["PENDING"],"state_reason":"BeginTime","hold":false,
             "priority":{"set":true,"infinite":false,"number":1},"eligible_time":{"set":true,"infinite":false,"number":1900000000}},
            {"job_id":6,"job_state":["PENDING"],"priority":{"set":false,"infinite":false,"number":0}},
            {"job_id":7,"job_state":["PENDING"],"priority":{"set":true,"infinite":false,"number":0}}]}"#;
        let jobs = parse_jobs(new).unwrap();
        let held: Vec<bool> = jobs.iter().map(|j| j.held).collect();
        assert_eq!(held, [true, false, false, true]);
        assert_eq!(jobs[1].eligible_time, 1_900_000_000);
    }

    #[test]
    fn malformed_output_is_an_error_not_a_panic() {
        assert!(parse_jobs("nope").is_err());
        assert!(parse_jobs("{}").is_err());
        assert!(parse_nodes(r#"{"nodes":3}"#).is_err());
    }
}
