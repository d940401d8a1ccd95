//! The job record and its wire form, whose codec lives in
//! [`dynmig_core::protocol::history_record`] (versioned: `"v": 1`; a spool file without `v`
//! is read as version 0). Re-exported here, where the spool, the transport and the stores
//! use it.

pub use dynmig_core::protocol::history_record::{
    JobRecord, RecordError, MAX_JOB_NAME_LEN, MAX_NODE_LEN, MAX_RECORD_BYTES, MAX_TAG_LEN, MAX_USER_LEN, WIRE_VERSION,
};

/// `s` cut to 100 characters, with `...` when cut, for error messages
/// ([`dynmig_core::types::cut`]).
pub(crate) fn cut(s: &str) -> String {
    dynmig_core::types::cut(s, 100)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn sample() -> JobRecord {
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
}
