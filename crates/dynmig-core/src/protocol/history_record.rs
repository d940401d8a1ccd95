//! The history record and its wire form: what the Epilog records about one run of a job, as
//! it crosses from a node to the history server (and lies in the node's spool).
//!
//! Wire form: one JSON object, the record's fields plus `"v": 1`, the format version
//! ([`WIRE_VERSION`]), e.g.
//! `{"job_id":7,"restart":0,"node":"n1",...,"end_time":1764126000,"v":1}`. The same bytes are
//! the spool file (`<job>-<restart>-<node>.json`) and the munge credential's payload.
//!
//! Versions:
//! - **1** (written): the fields of [`JobRecord`] and `"v": 1`;
//! - **0** (read from spool files only, [`JobRecord::from_spool`]): the same fields without
//!   `v`, as spooled by a dynmig from before the version field; never accepted on the wire.
//!
//! [`JobRecord::from_wire`] refuses another version, a missing one, an unknown field, and
//! values that break the limits of [`JobRecord::validate`], with a [`RecordError`] that says
//! which.
//!
//! ```
//! use dynmig_core::protocol::history_record::JobRecord;
//! let r = JobRecord {
//!     job_id: 7, restart: 0, node: "n1".into(), uid: 1000, user: "alice".into(),
//!     job_name: "train".into(), profile: "1g.10gb".into(), estimate_bytes: 0,
//!     source: String::new(), peak_bytes: 5 << 30, limit_bytes: 10 << 30,
//!     exit_status: 0, oom: false, end_time: 1_764_126_000,
//! };
//! let wire = r.to_wire().unwrap();
//! assert!(std::str::from_utf8(&wire).unwrap().ends_with(r#""v":1}"#));
//! assert_eq!(JobRecord::from_wire(&wire).unwrap(), r);
//! ```

use serde::{Deserialize, Serialize};
use std::fmt;

/// The wire format version this crate writes and reads.
pub const WIRE_VERSION: u64 = 1;

/// Largest wire form accepted, bytes: the longest strings allowed, every character
/// JSON-escaped, fit in it.
pub const MAX_RECORD_BYTES: usize = 48 * 1024;

/// Longest `node`, bytes (a host name).
pub const MAX_NODE_LEN: usize = 255;
/// Longest `user`, bytes.
pub const MAX_USER_LEN: usize = 255;
/// Longest `job_name`, bytes.
pub const MAX_JOB_NAME_LEN: usize = 4096;
/// Longest `profile` and `source`, bytes.
pub const MAX_TAG_LEN: usize = 64;

/// What the Epilog records about one run of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobRecord {
    /// Slurm job id.
    pub job_id: u64,
    /// Slurm's `Restarts` count of the job when this run ended (0 for the first run).
    pub restart: u32,
    /// Node the job ran on: 1 to 255 bytes of `A-Z a-z 0-9 . _ -`, not starting with `.`
    /// (it is part of the spool file's name).
    pub node: String,
    /// The user's numeric id.
    pub uid: u32,
    /// The user's name (at most 255 bytes).
    pub user: String,
    /// Job name (at most 4096 bytes).
    pub job_name: String,
    /// MIG profile the job had, e.g. `2g.20gb` (empty when not a MIG job; at most 64 bytes).
    pub profile: String,
    /// The estimate job_submit/dynmig made, bytes (0 when unknown).
    pub estimate_bytes: u64,
    /// Where it came from (`mig-mem`, `model`, `history`, `default`, `whole-gpu`, ...; at
    /// most 64 bytes).
    pub source: String,
    /// Peak GPU memory the job used, bytes (for an out-of-memory run: the instance's memory).
    pub peak_bytes: u64,
    /// Memory of the instance, bytes.
    pub limit_bytes: u64,
    /// The job's exit status (`ExitCode=` status part).
    pub exit_status: i32,
    /// Whether it ran out of GPU memory.
    pub oom: bool,
    /// When the Epilog recorded it, seconds since the Unix epoch.
    pub end_time: i64,
}

/// A record that cannot be read or is out of bounds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// More bytes than [`MAX_RECORD_BYTES`].
    #[error("a history record is {len} bytes; at most {MAX_RECORD_BYTES} are allowed")]
    TooLarge {
        /// Its length, bytes.
        len: usize,
    },
    /// Not JSON, or not an object with exactly the record's fields (the message names the
    /// field when serde can).
    #[error("not a dynmig history record: {0}")]
    Malformed(String),
    /// No `v` field, or another version than [`WIRE_VERSION`].
    #[error("history record version {found}; this dynmig reads version {WIRE_VERSION} only")]
    Version {
        /// The `v` found (`missing` when none).
        found: String,
    },
    /// A field's value breaks its limit.
    #[error("history record field {field}: {why}")]
    Field {
        /// The field.
        field: &'static str,
        /// What is wrong and what is allowed.
        why: String,
    },
}

impl JobRecord {
    /// The spool file name: `<job>-<restart>-<node>.json`.
    pub fn spool_name(&self) -> String {
        format!("{}-{}-{}.json", self.job_id, self.restart, self.node)
    }

    /// Checks the limits documented on each field.
    ///
    /// # Errors
    /// [`RecordError::Field`] naming the first field out of bounds.
    pub fn validate(&self) -> Result<(), RecordError> {
        let node_ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        if self.node.is_empty()
            || self.node.len() > MAX_NODE_LEN
            || self.node.starts_with('.')
            || !self.node.chars().all(node_ok)
        {
            return Err(RecordError::Field {
                field: "node",
                why: format!(
                    "'{}' is not a node name (1 to {MAX_NODE_LEN} of A-Z a-z 0-9 . _ -, not starting with '.')",
                    cut(&self.node)
                ),
            });
        }
        for (field, value, max) in [
            ("user", &self.user, MAX_USER_LEN),
            ("job_name", &self.job_name, MAX_JOB_NAME_LEN),
            ("profile", &self.profile, MAX_TAG_LEN),
            ("source", &self.source, MAX_TAG_LEN),
        ] {
            if value.len() > max {
                return Err(RecordError::Field {
                    field,
                    why: format!("'{}' is {} bytes; at most {max} are allowed", cut(value), value.len()),
                });
            }
        }
        Ok(())
    }

    /// The wire form: the record's JSON with `"v": 1`.
    ///
    /// # Errors
    /// The record breaks a limit of [`JobRecord::validate`].
    pub fn to_wire(&self) -> Result<Vec<u8>, RecordError> {
        self.validate()?;
        let mut value = serde_json::to_value(self).map_err(|e| RecordError::Malformed(e.to_string()))?;
        if let serde_json::Value::Object(map) = &mut value {
            map.insert("v".into(), WIRE_VERSION.into());
        }
        let bytes = serde_json::to_vec(&value).map_err(|e| RecordError::Malformed(e.to_string()))?;
        if bytes.len() > MAX_RECORD_BYTES {
            return Err(RecordError::TooLarge { len: bytes.len() });
        }
        Ok(bytes)
    }

    /// Reads the wire form; the version field is required.
    ///
    /// # Errors
    /// [`RecordError`]: too large, not JSON, a missing or other version, an unknown or
    /// missing field, a value out of bounds.
    pub fn from_wire(bytes: &[u8]) -> Result<Self, RecordError> {
        Self::decode(bytes, false)
    }

    /// Reads a spool file: the wire form, or a record spooled by a dynmig that wrote no
    /// version field (read as version 1, which has the same fields).
    ///
    /// # Errors
    /// As [`JobRecord::from_wire`], a missing version excepted.
    pub fn from_spool(bytes: &[u8]) -> Result<Self, RecordError> {
        Self::decode(bytes, true)
    }

    fn decode(bytes: &[u8], allow_unversioned: bool) -> Result<Self, RecordError> {
        if bytes.len() > MAX_RECORD_BYTES {
            return Err(RecordError::TooLarge { len: bytes.len() });
        }
        let mut value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| RecordError::Malformed(e.to_string()))?;
        let map = value
            .as_object_mut()
            .ok_or_else(|| RecordError::Malformed("expected a JSON object".into()))?;
        match map.remove("v") {
            Some(v) if v.as_u64() == Some(WIRE_VERSION) => {}
            None if allow_unversioned => {}
            Some(v) => {
                return Err(RecordError::Version {
                    found: cut(&v.to_string()),
                })
            }
            None => {
                return Err(RecordError::Version {
                    found: "missing".into(),
                })
            }
        }
        let record: JobRecord =
            serde_json::from_value(value).map_err(|e| RecordError::Malformed(cut(&e.to_string())))?;
        record.validate()?;
        Ok(record)
    }
}

/// `s` cut to 100 characters, with `...` when cut, for error messages.
fn cut(s: &str) -> String {
    crate::types::cut(s, 100)
}

impl fmt::Display for JobRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "job {} restart {} on {}", self.job_id, self.restart, self.node)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn sample() -> JobRecord {
        JobRecord {
            job_id: 7,
            restart: 1,
            node: "gpu-n1.cluster".into(),
            uid: 1000,
            user: "alice".into(),
            job_name: "fine tune \"7b\"".into(),
            profile: "1g.10gb".into(),
            estimate_bytes: 9 << 30,
            source: "mig-mem".into(),
            peak_bytes: 10 << 30,
            limit_bytes: 10 << 30,
            exit_status: -1,
            oom: true,
            end_time: 1_700_000_000,
        }
    }

    #[test]
    fn wire_form_round_trips_and_carries_the_version() {
        let r = sample();
        let bytes = r.to_wire().unwrap();
        let text = std::str::from_utf8(&bytes).unwrap();
        assert!(text.contains("\"v\":1"), "{text}");
        assert_eq!(JobRecord::from_wire(&bytes).unwrap(), r);
        assert_eq!(JobRecord::from_spool(&bytes).unwrap(), r);
    }

    #[test]
    fn an_unknown_field_is_refused() {
        let mut v: serde_json::Value = serde_json::from_slice(&sample().to_wire().unwrap()).unwrap();
        v["admin"] = true.into();
        let e = JobRecord::from_wire(&serde_json::to_vec(&v).unwrap()).unwrap_err();
        assert!(e.to_string().contains("admin"), "{e}");
    }

    #[test]
    fn a_missing_or_other_version_is_refused_on_the_wire() {
        let plain = serde_json::to_vec(&sample()).unwrap();
        assert!(matches!(JobRecord::from_wire(&plain), Err(RecordError::Version { .. })));
        // A spool file of the dynmig before the version field is still delivered.
        assert_eq!(JobRecord::from_spool(&plain).unwrap(), sample());
        let mut v: serde_json::Value = serde_json::from_slice(&plain).unwrap();
        v["v"] = 2.into();
        let e = JobRecord::from_spool(&serde_json::to_vec(&v).unwrap()).unwrap_err();
        assert!(e.to_string().contains("version 2"), "{e}");
    }

    #[test]
    fn a_node_name_cannot_leave_the_spool_folder() {
        for bad in ["../../etc/cron.d/x", "", ".hidden", "a/b", "n\n1"] {
            let mut r = sample();
            r.node = bad.into();
            assert!(
                matches!(r.validate(), Err(RecordError::Field { field: "node", .. })),
                "{bad:?}"
            );
            assert!(r.to_wire().is_err());
        }
    }

    #[test]
    fn an_overlong_field_is_refused_with_a_cut_message() {
        let mut r = sample();
        r.job_name = "x".repeat(MAX_JOB_NAME_LEN + 1);
        let e = r.validate().unwrap_err().to_string();
        assert!(
            e.contains("job_name") && e.contains("at most 4096") && e.contains("..."),
            "{e}"
        );
        assert!(e.len() < 300, "message not cut: {} bytes", e.len());
    }

    #[test]
    fn the_longest_record_fits_the_wire_limit() {
        let mut r = sample();
        r.node = "n".repeat(MAX_NODE_LEN);
        r.user = "\u{1}".repeat(MAX_USER_LEN);
        r.job_name = "\u{1}".repeat(MAX_JOB_NAME_LEN);
        r.profile = "\u{1}".repeat(MAX_TAG_LEN);
        r.source = "\u{1}".repeat(MAX_TAG_LEN);
        let bytes = r.to_wire().unwrap();
        assert_eq!(JobRecord::from_wire(&bytes).unwrap(), r);
    }

    #[test]
    fn oversized_input_is_refused_before_parsing() {
        let big = vec![b' '; MAX_RECORD_BYTES + 1];
        assert!(matches!(JobRecord::from_wire(&big), Err(RecordError::TooLarge { .. })));
        assert!(matches!(JobRecord::from_wire(b"[1]"), Err(RecordError::Malformed(_))));
    }

    #[test]
    fn todays_unversioned_spool_file_still_decodes() {
        // A spool file as the dynmig before the version field wrote it (version 0).
        let text = br#"{"job_id":7,"restart":1,"node":"gpu-n1.cluster","uid":1000,"user":"alice","job_name":"fine tune \"7b\"","profile":"1g.10gb","estimate_bytes":9663676416,"source":"mig-mem","peak_bytes":10737418240,"limit_bytes":10737418240,"exit_status":-1,"oom":true,"end_time":1700000000}"#;
        assert_eq!(JobRecord::from_spool(text).unwrap(), sample());
        // What today's code writes, byte for byte, reads back.
        let today = String::from_utf8(sample().to_wire().unwrap()).unwrap();
        assert!(
            today.starts_with(r#"{"end_time":1700000000,"#) && today.ends_with(r#","v":1}"#),
            "{today}"
        );
    }

    #[test]
    fn bad_wire_forms_say_what_is_wrong() {
        let good: serde_json::Value = serde_json::from_slice(&sample().to_wire().unwrap()).unwrap();
        let with = |k: &str, v: serde_json::Value| {
            let mut g = good.clone();
            g[k] = v;
            serde_json::to_vec(&g).unwrap()
        };
        let without = |k: &str| {
            let mut g = good.clone();
            g.as_object_mut().unwrap().remove(k);
            serde_json::to_vec(&g).unwrap()
        };
        let table: Vec<(Vec<u8>, &str)> = vec![
            (b"".to_vec(), "not a dynmig history record"),
            (b"{".to_vec(), "not a dynmig history record"),
            (b"[1]".to_vec(), "expected a JSON object"),
            (without("v"), "version missing"),
            (with("v", 2.into()), "version 2"),
            (with("v", "1".into()), "version \"1\""),
            (without("oom"), "oom"),
            (with("admin", true.into()), "admin"),
            (with("uid", (-1).into()), "invalid value"),
            (with("job_id", "7".into()), "invalid type"),
            (with("node", "../x".into()), "field node"),
            (with("profile", "p".repeat(MAX_TAG_LEN + 1).into()), "field profile"),
        ];
        for (bytes, says) in table {
            let e = JobRecord::from_wire(&bytes).unwrap_err().to_string();
            assert!(e.contains(says), "{}: {e}", String::from_utf8_lossy(&bytes));
        }
    }

    /// Any record `validate` accepts: the round-trip property of this codec and of
    /// [`crate::protocol::system_comment`].
    pub(crate) fn any_record() -> impl proptest::strategy::Strategy<Value = JobRecord> {
        use proptest::prelude::*;
        (
            (any::<u64>(), any::<u32>(), any::<u32>(), any::<u64>(), any::<u64>()),
            (any::<u64>(), any::<i32>(), any::<bool>(), any::<i64>()),
            (
                "[a-z0-9][a-z0-9._-]{0,40}",
                "\\PC{0,20}",
                "\\PC{0,60}",
                "\\PC{0,10}",
                "\\PC{0,10}",
            ),
        )
            .prop_map(
                |(
                    (job_id, restart, uid, estimate_bytes, peak_bytes),
                    (limit_bytes, exit_status, oom, end_time),
                    (node, user, job_name, profile, source),
                )| JobRecord {
                    job_id,
                    restart,
                    node,
                    uid,
                    user,
                    job_name,
                    profile,
                    estimate_bytes,
                    source,
                    peak_bytes,
                    limit_bytes,
                    exit_status,
                    oom,
                    end_time,
                },
            )
    }

    proptest::proptest! {
        #[test]
        fn any_valid_record_round_trips(r in any_record()) {
            let wire = r.to_wire().unwrap();
            proptest::prop_assert_eq!(&JobRecord::from_wire(&wire).unwrap(), &r);
            proptest::prop_assert_eq!(&JobRecord::from_spool(&wire).unwrap(), &r);
        }
    }
}
