//! The SystemComment codec: one job run's [`JobRecord`] as the text the Epilog writes into the
//! job's SystemComment in slurmdbd (`[history] store = "slurmdbd"`, docs/history.md), and the
//! merge that keeps what else the comment holds.
//!
//! The text is [`COMMENT_PREFIX`] (`dynmig-history/v1 `: the format and its version,
//! [`COMMENT_VERSION`], the same as the wire form's), the record's fields as `key=value`
//! separated by spaces, and [`COMMENT_END`]: numbers and booleans as themselves, strings as
//! `s:` and the string percent-encoded (every byte outside `A-Z a-z 0-9 . _ -`), e.g.
//!
//! ```text
//! dynmig-history/v1 end_time=1764126000 estimate_bytes=0 exit_status=0 job_id=7 job_name=s:acct-hist limit_bytes=85899345920 node=s:n1 oom=false peak_bytes=5368709120 profile=s:7g.80gb restart=0 source=s: uid=0 user=s:root end
//! ```
//!
//! No quote, comma or space can occur in a value: sacctmgr cuts a value at its first quote.
//! The reader builds the same JSON object the wire form has and decodes it with the record's
//! own serde type, so the same field checks apply ([`JobRecord::validate`]). Version 1 is the
//! only one written and the first one ever written (there is no unversioned form); a comment
//! of the family with another version (`dynmig-history/v2 ...`) is a
//! [`RecordError::Version`], never read as version 1 and never taken for Slurm's own text.
//!
//! ```
//! use dynmig_core::protocol::history_record::JobRecord;
//! use dynmig_core::protocol::system_comment::{decode_comment, encode_comment};
//! let r = JobRecord {
//!     job_id: 7, restart: 0, node: "n1".into(), uid: 0, user: "root".into(),
//!     job_name: "acct-hist".into(), profile: "7g.80gb".into(), estimate_bytes: 0,
//!     source: String::new(), peak_bytes: 5 << 30, limit_bytes: 80 << 30,
//!     exit_status: 0, oom: false, end_time: 1_764_126_000,
//! };
//! let c = encode_comment(&r).unwrap();
//! assert!(c.starts_with("dynmig-history/v1 end_time=1764126000 ") && c.ends_with(" end"));
//! assert_eq!(decode_comment(&c).unwrap(), Some(r));
//! assert_eq!(decode_comment("burst_buffer/lua: setup failed").unwrap(), None);
//! ```

use super::history_record::{JobRecord, RecordError, WIRE_VERSION};

/// The SystemComment format version this code writes and the only one it reads: the wire
/// form's ([`WIRE_VERSION`]), whose fields it carries.
pub const COMMENT_VERSION: u64 = WIRE_VERSION;

/// What every dynmig SystemComment of any version starts with, before the version number.
pub const COMMENT_FAMILY: &str = "dynmig-history/v";

/// What every dynmig SystemComment starts with (the `v1` is [`COMMENT_VERSION`]).
pub const COMMENT_PREFIX: &str = "dynmig-history/v1 ";

/// What every dynmig SystemComment ends with: a comment cut anywhere is refused, never read
/// as a shorter record.
pub const COMMENT_END: &str = " end";

/// Longest comment written or read, bytes: the longest job name allowed, every byte
/// percent-encoded, fits in it (MariaDB's `text` column holds 65,535).
pub const MAX_COMMENT_BYTES: usize = 16 * 1024;

/// Between the parts of a SystemComment that holds more than one thing: Slurm's own text,
/// then dynmig's records of the job's runs, oldest first. An encoded record never holds `|`.
pub const SEPARATOR: &str = " | ";

/// Most dynmig records one SystemComment keeps (the latest runs of a requeued job).
pub const MAX_RECORDS_PER_COMMENT: usize = 8;

/// Most bytes of a SystemComment Slurm itself wrote that are kept in front of dynmig's records
/// (cut at a character boundary).
pub const MAX_FOREIGN_BYTES: usize = 1024;

fn pct(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn unpct(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = s.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') => {
                out.push(b);
                i += 1;
            }
            _ => return None,
        }
    }
    String::from_utf8(out).ok()
}

/// The SystemComment for `r`: [`COMMENT_PREFIX`] and its fields (module docs).
///
/// # Errors
/// The record breaks a limit of [`JobRecord::validate`], or the comment would be longer than
/// [`MAX_COMMENT_BYTES`].
pub fn encode_comment(r: &JobRecord) -> Result<String, RecordError> {
    r.validate()?;
    let value = serde_json::to_value(r).map_err(|e| RecordError::Malformed(e.to_string()))?;
    let serde_json::Value::Object(map) = value else {
        return Err(RecordError::Malformed("a record is not a JSON object".into()));
    };
    let mut out = COMMENT_PREFIX.trim_end().to_string();
    for (k, v) in map {
        let v = match v {
            serde_json::Value::String(s) => format!("s:{}", pct(&s)),
            serde_json::Value::Number(n) => n.to_string(),
            serde_json::Value::Bool(b) => b.to_string(),
            other => return Err(RecordError::Malformed(format!("field {k}: unexpected {other}"))),
        };
        out.push(' ');
        out.push_str(&k);
        out.push('=');
        out.push_str(&v);
    }
    out.push_str(COMMENT_END);
    if out.len() > MAX_COMMENT_BYTES {
        return Err(RecordError::TooLarge { len: out.len() });
    }
    Ok(out)
}

/// The version of a comment of dynmig's family: the digits of `dynmig-history/v<digits> `;
/// `None` when `s` does not start so (not dynmig's).
fn family_version(s: &str) -> Option<&str> {
    let rest = s.strip_prefix(COMMENT_FAMILY)?;
    let digits = rest.split_once(' ')?.0;
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())).then_some(digits)
}

/// Reads a SystemComment written by [`encode_comment`]; `Ok(None)` when it is not dynmig's
/// (empty, or not `dynmig-history/v<N> `: Slurm itself writes SystemComment on some failures).
///
/// # Errors
/// A dynmig comment that is too long ([`RecordError::TooLarge`]), of another version than
/// [`COMMENT_VERSION`] ([`RecordError::Version`]), malformed, of a repeated or unknown
/// field, a missing field ([`RecordError::Malformed`], naming the field), or a value out of
/// bounds ([`RecordError::Field`]).
pub fn decode_comment(s: &str) -> Result<Option<JobRecord>, RecordError> {
    let Some(version) = family_version(s) else {
        return Ok(None);
    };
    if s.len() > MAX_COMMENT_BYTES {
        return Err(RecordError::TooLarge { len: s.len() });
    }
    let Some(body) = s.strip_prefix(COMMENT_PREFIX) else {
        return Err(RecordError::Version { found: cut(version) });
    };
    let body = body
        .strip_suffix(COMMENT_END)
        .ok_or_else(|| RecordError::Malformed(format!("no '{}' at the end: cut short?", COMMENT_END.trim())))?;
    let mut map = serde_json::Map::new();
    for pair in body.split(' ') {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| RecordError::Malformed(format!("'{}' is not key=value", cut(pair))))?;
        let value = if let Some(text) = v.strip_prefix("s:") {
            serde_json::Value::String(
                unpct(text).ok_or_else(|| RecordError::Malformed(format!("field {}: bad encoding", cut(k))))?,
            )
        } else if v == "true" || v == "false" {
            serde_json::Value::Bool(v == "true")
        } else if let Ok(n) = v.parse::<u64>() {
            n.into()
        } else if let Ok(n) = v.parse::<i64>() {
            n.into()
        } else {
            return Err(RecordError::Malformed(format!(
                "field {}: '{}' is no value",
                cut(k),
                cut(v)
            )));
        };
        if map.insert(k.to_string(), value).is_some() {
            return Err(RecordError::Malformed(format!("field {} given twice", cut(k))));
        }
    }
    map.insert("v".into(), COMMENT_VERSION.into());
    let bytes = serde_json::to_vec(&map).map_err(|e| RecordError::Malformed(e.to_string()))?;
    JobRecord::from_wire(&bytes).map(Some)
}

/// Every dynmig record in a SystemComment ([`SEPARATOR`]-separated parts that start with
/// `dynmig-history/v<N> `), each decoded by [`decode_comment`] (a part of another version
/// than [`COMMENT_VERSION`] gives its [`RecordError::Version`]); other parts (Slurm's own
/// text) are not records and are left out.
pub fn decode_comments(s: &str) -> Vec<Result<JobRecord, RecordError>> {
    if s.len() > MAX_COMMENT_BYTES {
        return vec![Err(RecordError::TooLarge { len: s.len() })];
    }
    s.split(SEPARATOR)
        .filter(|part| family_version(part).is_some())
        .filter_map(|part| decode_comment(part).transpose())
        .collect()
}

/// The SystemComment that adds `r` to `existing` (the job's SystemComment now, if any):
/// Slurm's own text first (quotes replaced by `` ` ``, since sacctmgr cuts a value at a
/// quote; at most [`MAX_FOREIGN_BYTES`]), then the records of the job's other runs that
/// `existing` holds (a record of the same run and node is replaced, at most
/// [`MAX_RECORDS_PER_COMMENT`] in all, the oldest dropped first), then `r`. So a requeued
/// job keeps every run's record whichever row of the job sacctmgr modifies, and what Slurm
/// wrote stays. A record of another version (a newer dynmig's, during an upgrade) is kept as
/// it is, counted among the records.
///
/// # Errors
/// `r` cannot be encoded ([`encode_comment`]).
pub fn merge_comment(existing: Option<&str>, r: &JobRecord) -> Result<String, RecordError> {
    let ours = encode_comment(r)?;
    let mut foreign = String::new();
    let mut kept: Vec<String> = Vec::new();
    for part in existing.unwrap_or("").split(SEPARATOR).filter(|p| !p.trim().is_empty()) {
        if family_version(part).is_some() {
            match decode_comment(part) {
                Ok(Some(o)) if !(o.job_id == r.job_id && o.restart == r.restart && o.node == r.node) => {
                    kept.push(part.to_string())
                }
                Err(RecordError::Version { .. }) => kept.push(part.to_string()),
                // The same run's record (a retry), or one that does not decode: replaced.
                _ => {}
            }
        } else {
            if !foreign.is_empty() {
                foreign.push_str(SEPARATOR);
            }
            foreign.push_str(&part.replace(['"', '\''], "`"));
        }
    }
    if foreign.len() > MAX_FOREIGN_BYTES {
        let mut end = MAX_FOREIGN_BYTES;
        while !foreign.is_char_boundary(end) {
            end -= 1;
        }
        foreign.truncate(end);
    }
    let mut parts: Vec<String> = Vec::new();
    if !foreign.is_empty() {
        parts.push(foreign);
    }
    let skip = (kept.len() + 1).saturating_sub(MAX_RECORDS_PER_COMMENT);
    parts.extend(kept.into_iter().skip(skip));
    parts.push(ours);
    // Drop the oldest records (never ours) until it fits.
    while parts.iter().map(|p| p.len() + SEPARATOR.len()).sum::<usize>() > MAX_COMMENT_BYTES && parts.len() > 1 {
        parts.remove(0);
    }
    Ok(parts.join(SEPARATOR))
}

/// `s` cut to 100 characters, with `...` when cut, for error messages.
fn cut(s: &str) -> String {
    crate::types::cut(s, 100)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec() -> JobRecord {
        JobRecord {
            job_id: 42,
            restart: 1,
            node: "gpu1".into(),
            uid: 1000,
            user: "alice".into(),
            job_name: "train \"x\", y=1 %z é".into(),
            profile: "2g.20gb".into(),
            estimate_bytes: 18 << 30,
            source: "mig-mem".into(),
            peak_bytes: 17 << 30,
            limit_bytes: 20 << 30,
            exit_status: -1,
            oom: true,
            end_time: 1_700_000_000,
        }
    }

    #[test]
    fn a_comment_round_trips_and_has_no_quote_comma_or_stray_space() {
        let c = encode_comment(&rec()).unwrap();
        assert!(c.starts_with(COMMENT_PREFIX), "{c}");
        assert!(!c.contains('"') && !c.contains('\'') && !c.contains(','), "{c}");
        assert_eq!(c.split(' ').count(), 16, "{c}");
        assert!(c.ends_with(" end"), "{c}");
        assert!(c.contains(" profile=s:2g.20gb") && c.contains(" oom=true") && c.contains(" exit_status=-1"));
        assert_eq!(decode_comment(&c).unwrap(), Some(rec()));
    }

    #[test]
    fn other_comments_are_not_ours_and_bad_ones_are_refused_with_the_field() {
        assert_eq!(decode_comment("").unwrap(), None);
        assert_eq!(decode_comment("burst_buffer/lua: setup failed").unwrap(), None);
        let c = encode_comment(&rec()).unwrap();
        // Truncated anywhere: refused, never a partial record.
        for n in COMMENT_PREFIX.len()..c.len() {
            let t = &c[..n];
            assert!(decode_comment(t).is_err(), "accepted a cut comment: {t}");
        }
        let e = decode_comment(&c.replace(" oom=true", "")).unwrap_err().to_string();
        assert!(e.contains("oom"), "{e}");
        let e = decode_comment(&c.replace(" end", " oom=false end"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("given twice"), "{e}");
        let e = decode_comment(&c.replace(" end", " admin=true end"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("admin"), "{e}");
        let e = decode_comment(&c.replace("node=s:gpu1", "node=s:..%2Fetc"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("node"), "{e}");
        assert!(decode_comment(&c.replace("s:gpu1", "s:gpu%Z1")).is_err());
        assert!(decode_comment(&c.replace("s:gpu1", "s:gpu 1")).is_err());
        assert!(decode_comment(&c.replace("peak_bytes=", "peak_bytes=x")).is_err());
        assert!(decode_comment(&c.replace("peak_bytes=", "peak_bytes=s:")).is_err());
        let long = format!("{COMMENT_PREFIX}{}", "a".repeat(MAX_COMMENT_BYTES));
        assert!(matches!(decode_comment(&long), Err(RecordError::TooLarge { .. })));
        let mut big = rec();
        big.job_name = "\"".repeat(4096);
        assert!(encode_comment(&big).unwrap().len() <= MAX_COMMENT_BYTES);
        big.job_name.push('x');
        assert!(encode_comment(&big).is_err());
    }

    #[test]
    fn a_merged_comment_keeps_slurms_text_and_every_runs_record_once() {
        let r0 = JobRecord { restart: 0, ..rec() };
        let r1 = rec();
        // Nothing yet: our record alone.
        let c0 = merge_comment(None, &r0).unwrap();
        assert_eq!(c0, encode_comment(&r0).unwrap());
        // Slurm's own text and run 0's record stay; run 1's is added after them.
        let existing = format!("Launch failed \"requeued\"{SEPARATOR}{c0}");
        let c1 = merge_comment(Some(&existing), &r1).unwrap();
        assert!(c1.starts_with("Launch failed `requeued`"), "{c1}");
        assert!(!c1.contains('"'), "{c1}");
        let got: Vec<JobRecord> = decode_comments(&c1).into_iter().map(Result::unwrap).collect();
        assert_eq!(got, vec![r0.clone(), r1.clone()]);
        // A retry of the same run replaces its record, never duplicates it.
        let again = merge_comment(Some(&c1), &r1).unwrap();
        assert_eq!(again, c1);
        // At most MAX_RECORDS_PER_COMMENT records, the oldest dropped; Slurm's text cut.
        let mut c = "x".repeat(3 * MAX_FOREIGN_BYTES);
        for restart in 0..20 {
            c = merge_comment(Some(&c), &JobRecord { restart, ..rec() }).unwrap();
        }
        let got: Vec<u32> = decode_comments(&c).into_iter().map(|r| r.unwrap().restart).collect();
        assert_eq!(got, (20 - MAX_RECORDS_PER_COMMENT as u32..20).collect::<Vec<_>>());
        assert!(c.starts_with(&"x".repeat(MAX_FOREIGN_BYTES)) && !c.starts_with(&"x".repeat(MAX_FOREIGN_BYTES + 1)));
        assert!(c.len() <= MAX_COMMENT_BYTES);
    }

    #[test]
    fn todays_comment_still_decodes() {
        // The comment the cluster test read from slurmdbd (docs/history.md), as written today.
        let today = "dynmig-history/v1 end_time=1764126000 estimate_bytes=0 exit_status=0 job_id=7 \
            job_name=s:acct-hist limit_bytes=85899345920 node=s:n1 oom=false peak_bytes=5368709120 \
            profile=s:7g.80gb restart=0 source=s: uid=0 user=s:root end";
        let r = decode_comment(today).unwrap().unwrap();
        assert_eq!((r.job_id, r.job_name.as_str(), r.source.as_str()), (7, "acct-hist", ""));
        assert_eq!(encode_comment(&r).unwrap(), today);
    }

    #[test]
    fn bad_comments_say_what_is_wrong() {
        let c = encode_comment(&rec()).unwrap();
        for (bad, says) in [
            (c.replacen("/v1 ", "/v2 ", 1), "version 2;"),
            (c.replacen("/v1 ", "/v10 ", 1), "version 10;"),
            (c.strip_suffix(" end").unwrap().to_string(), "no 'end' at the end"),
            (c.replace(" oom=true", " oom"), "'oom' is not key=value"),
            (c.replace(" oom=true", " oom=yes"), "field oom: 'yes' is no value"),
            (c.replace("s:gpu1", "s:gpu%Z1"), "field node: bad encoding"),
            (c.replace(" oom=true", ""), "missing field `oom`"),
            (c.replace(" uid=1000", " uid=-5"), "integer `-5`, expected u32"),
            (
                format!("{} uid=1 end", c.strip_suffix(" end").unwrap()),
                "field uid given twice",
            ),
        ] {
            let e = decode_comment(&bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        // Not of dynmig's family: not ours, whatever follows.
        for other in [
            "dynmig-history/v1",
            "dynmig-history/vx a=1 end",
            "dynmig/v1 profile=x",
            "Launch failed",
        ] {
            assert_eq!(decode_comment(other).unwrap(), None, "{other}");
        }
    }

    #[test]
    fn a_newer_versions_record_is_reported_and_kept_by_the_merge() {
        let v2 = encode_comment(&JobRecord { restart: 0, ..rec() })
            .unwrap()
            .replacen("/v1 ", "/v2 ", 1);
        let merged = merge_comment(Some(&v2), &rec()).unwrap();
        assert!(merged.starts_with(&v2), "{merged}");
        let got = decode_comments(&merged);
        assert!(
            matches!(&got[0], Err(RecordError::Version { found }) if found == "2"),
            "{got:?}"
        );
        assert_eq!(got[1].as_ref().unwrap(), &rec());
    }

    proptest::proptest! {
        #[test]
        fn any_valid_record_round_trips(r in crate::protocol::history_record::tests::any_record()) {
            let c = encode_comment(&r).unwrap();
            proptest::prop_assert!(!c.contains(['"', '\'', ',', '|']), "{}", c);
            proptest::prop_assert_eq!(decode_comment(&c).unwrap(), Some(r));
        }

        #[test]
        fn any_text_decodes_or_errs_without_panicking(s in "\\PC{0,200}") {
            let _ = decode_comment(&s);
            let _ = decode_comments(&s);
        }
    }
}
