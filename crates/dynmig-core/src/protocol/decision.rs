//! The decision record: what job_submit/dynmig decided for a job, as one line of text.
//!
//! job_submit writes it into the job's `AdminComment` with [`DecisionRecord::encode`]; a
//! reader (the Epilog, through `scontrol`/`squeue --json`) gets it back with
//! [`DecisionRecord::parse`]. The text is
//!
//! ```text
//! dynmig/v1 profile=2g.20gb count=1 mem=19327352832 source=mig-mem
//! ```
//!
//! - `dynmig/v1`: the format and its version ([`VERSION`]);
//! - `profile`: the MIG profile, which is the GRES type (1 to [`MAX_PROFILE_LEN`] ASCII
//!   letters, digits, `.`, `+`, `-` or `_`);
//! - `count`: instances per unit of the field the request was in (node, job, socket or
//!   task), 1 to `u32::MAX`;
//! - `mem`: the memory estimate in bytes, exact (no rounding);
//! - `source`: where the estimate came from ([`EstimateSource`], written as its `Display`);
//! - then, only for a job whose request changed after submit, three more fields together:
//!   `restarts=N` (Slurm's restart count when it changed), `prev=P1,P2` (the profiles asked
//!   for before, oldest first, at most [`MAX_PREV`]) and `by=oom-restart|update|catalog`
//!   ([`ChangeCause`]): `dynmig/v1 profile=2g.20gb count=1 mem=9663676416 source=mig-mem
//!   restarts=1 prev=1g.10gb by=oom-restart`. `mem` stays the submit's estimate.
//!
//! The parser is strict: the fields in this order, separated by one space, numbers in
//! plain decimal without sign or leading zero, nothing before or after. Anything else (an
//! administrator's own comment, the old `dynmig: ... mem=18.0GiB` form, trailing text) is
//! a [`DecisionError`], never half-read. So `parse(encode(r)) == r` and
//! `encode(parse(t)) == t` for every accepted `t`.
//!
//! ```
//! use dynmig_core::protocol::decision::DecisionRecord;
//! use dynmig_core::submit::EstimateSource;
//! let r = DecisionRecord::new("2g.20gb", 1, 19_327_352_832, EstimateSource::MigMemHint);
//! let text = r.encode();
//! assert_eq!(text, "dynmig/v1 profile=2g.20gb count=1 mem=19327352832 source=mig-mem");
//! assert_eq!(DecisionRecord::parse(&text).unwrap(), r);
//! assert!(DecisionRecord::parse("dynmig: profile=2g.20gb count=1 mem=18.0GiB source=mig-mem").is_err());
//! ```

use std::fmt;

use crate::submit::Decision;
use crate::types::EstimateSource;

/// The record format version this code writes and the only one it reads.
pub const VERSION: u32 = 1;

/// The longest profile name a record may hold, in bytes (the longest MIG profile name,
/// `1g.12gb+me`, has 10).
pub const MAX_PROFILE_LEN: usize = 32;

/// The longest text [`DecisionRecord::parse`] looks at; a longer text is refused before it
/// is split (a record is at most about 100 bytes).
pub const MAX_RECORD_LEN: usize = 256;

/// The most earlier profiles a record keeps in `prev=` (the oldest are dropped).
pub const MAX_PREV: usize = 4;

/// Who changed a job's request after submit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeCause {
    /// `dynmig oom-restart` requeued the job on a larger profile.
    OomRestart,
    /// The job's user or an operator changed its GPU request (`scontrol update`).
    Update,
    /// The controller moved the pending job to a type of the catalog the layout now has
    /// (`kind = "guarded"`).
    Catalog,
}

impl ChangeCause {
    /// The word in `by=`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OomRestart => "oom-restart",
            Self::Update => "update",
            Self::Catalog => "catalog",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        [Self::OomRestart, Self::Update, Self::Catalog]
            .into_iter()
            .find(|c| c.as_str() == text)
    }
}

impl fmt::Display for ChangeCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What changed a job's request after submit: the record's optional fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Slurm's restart count of the job when the change was recorded.
    pub restarts: u32,
    /// The profiles the job asked for before, oldest first, at most [`MAX_PREV`].
    pub prev: Vec<String>,
    /// Who changed it.
    pub by: ChangeCause,
}

/// The format tag that starts every record, without the version digits.
const TAG: &str = "dynmig/v";

/// Every [`EstimateSource`], for [`source_from_str`] (keep in step with the enum).
const SOURCES: [EstimateSource; 6] = [
    EstimateSource::MigMemHint,
    EstimateSource::MigProfileHint,
    EstimateSource::Default,
    EstimateSource::WholeGpu,
    EstimateSource::Model,
    EstimateSource::History,
];

/// What job_submit decided for one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionRecord {
    /// Record format version; [`VERSION`] for every record made or parsed here.
    pub version: u32,
    /// MIG profile name, which is the GRES type, e.g. `"2g.20gb"`.
    pub profile: String,
    /// Instances per unit of the request's field (node, job, socket or task); at least 1.
    pub count: u32,
    /// Estimated GPU memory the job needs, in bytes, exact.
    pub mem_bytes: u64,
    /// Where the estimate came from.
    pub source: EstimateSource,
    /// The change after submit, if the job's request changed (restart or update).
    pub change: Option<Change>,
}

/// A text that is not exactly a decision record. Display says what was wrong and what is
/// expected; the text is quoted cut to 100 characters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecisionError {
    /// The text does not start with `dynmig/v` (e.g. an administrator's own comment).
    #[error(
        "'{text}' is not a dynmig decision record (expected 'dynmig/v1 profile=... count=... mem=... source=...')"
    )]
    NotARecord {
        /// The text, cut.
        text: String,
    },
    /// A record of a version this code does not read.
    #[error("dynmig decision record version '{found}' is not supported; this dynmig reads version {VERSION}")]
    UnsupportedVersion {
        /// The version as written, cut.
        found: String,
    },
    /// Fields missing, out of order, repeated, unknown, or extra text.
    #[error(
        "dynmig decision record '{text}': {why}; expected 'dynmig/v1 profile=NAME count=N mem=BYTES source=SOURCE'"
    )]
    Malformed {
        /// The text, cut.
        text: String,
        /// What is wrong.
        why: String,
    },
    /// A field's value cannot be used.
    #[error("dynmig decision record: {key}='{value}': {why}")]
    BadValue {
        /// The field name.
        key: &'static str,
        /// The value as written, cut.
        value: String,
        /// What is allowed.
        why: String,
    },
}

impl DecisionRecord {
    /// A record of the current [`VERSION`].
    pub fn new(profile: impl Into<String>, count: u32, mem_bytes: u64, source: EstimateSource) -> Self {
        Self {
            version: VERSION,
            profile: profile.into(),
            count,
            mem_bytes,
            source,
            change: None,
        }
    }

    /// The record after the job's request moved to `profile` (count `count`), with Slurm's
    /// restart count `restarts` then: the current profile joins `prev` (the oldest dropped
    /// beyond [`MAX_PREV`]); `mem` and `source` stay the submit's. Moving to the profile the
    /// record already names changes only `restarts` and `by`.
    pub fn changed(&self, profile: &str, count: u32, restarts: u32, by: ChangeCause) -> Self {
        let mut prev = self.change.as_ref().map(|c| c.prev.clone()).unwrap_or_default();
        if profile != self.profile {
            prev.push(self.profile.clone());
        }
        if prev.len() > MAX_PREV {
            prev.drain(..prev.len() - MAX_PREV);
        }
        Self {
            profile: profile.to_string(),
            count: count.max(1),
            change: Some(Change { restarts, prev, by }),
            ..self.clone()
        }
    }

    /// The record of a submit [`Decision`].
    pub fn from_decision(d: &Decision) -> Self {
        Self::new(d.profile, d.count, d.memory_bytes, d.source)
    }

    /// The record as one line: `dynmig/v1 profile=2g.20gb count=1 mem=19327352832
    /// source=mig-mem` (see the [module docs](self)).
    pub fn encode(&self) -> String {
        let mut out = format!(
            "{TAG}{} profile={} count={} mem={} source={}",
            self.version, self.profile, self.count, self.mem_bytes, self.source
        );
        if let Some(c) = &self.change {
            let prev = if c.prev.is_empty() {
                "-".to_string()
            } else {
                c.prev.join(",")
            };
            out.push_str(&format!(" restarts={} prev={prev} by={}", c.restarts, c.by));
        }
        out
    }

    /// Reads a text that is exactly one record, as [`encode`](Self::encode) writes it.
    ///
    /// # Errors
    /// [`DecisionError`]: not a record, another version, a field missing, out of order,
    /// unknown or repeated, a bad value (count 0, a number with a sign or leading zero, a
    /// profile with other characters, an unknown source), or anything after the record.
    pub fn parse(text: &str) -> Result<Self, DecisionError> {
        let Some(rest) = text.strip_prefix(TAG) else {
            return Err(DecisionError::NotARecord { text: cut(text) });
        };
        if text.len() > MAX_RECORD_LEN {
            return Err(malformed(text, format!("longer than {MAX_RECORD_LEN} bytes")));
        }
        let mut words = rest.split(' ');
        let version_text = words.next().unwrap_or("");
        if version_text != VERSION.to_string() {
            return Err(DecisionError::UnsupportedVersion {
                found: cut(version_text),
            });
        }
        let profile = next_value(&mut words, text, "profile")?;
        let count = next_value(&mut words, text, "count")?;
        let mem = next_value(&mut words, text, "mem")?;
        let source = next_value(&mut words, text, "source")?;
        let change_words = match words.next() {
            None => None,
            Some(first) => {
                let restarts = match first.split_once('=') {
                    Some(("restarts", v)) => v,
                    _ => {
                        return Err(malformed(
                            text,
                            format!(
                                "expected 'restarts=' or the end after 'source=' but found '{}'",
                                cut(first)
                            ),
                        ))
                    }
                };
                let prev = next_value(&mut words, text, "prev")?;
                let by = next_value(&mut words, text, "by")?;
                if words.next().is_some() {
                    return Err(malformed(text, "text after 'by='".into()));
                }
                Some((restarts, prev, by))
            }
        };
        if !profile_ok(profile) {
            return Err(bad(
                "profile",
                profile,
                format!("a MIG profile name is 1 to {MAX_PROFILE_LEN} ASCII letters, digits, '.', '+', '-' or '_'"),
            ));
        }
        let count = decimal(count)
            .and_then(|n| u32::try_from(n).ok())
            .filter(|&n| n >= 1)
            .ok_or_else(|| {
                bad(
                    "count",
                    count,
                    format!("a whole number from 1 to {} without sign or leading zero", u32::MAX),
                )
            })?;
        let mem_bytes = decimal(mem).ok_or_else(|| {
            bad(
                "mem",
                mem,
                format!(
                    "a number of bytes from 0 to {} without sign, unit or leading zero",
                    u64::MAX
                ),
            )
        })?;
        let source = source_from_str(source).ok_or_else(|| {
            let allowed: Vec<String> = SOURCES.iter().map(ToString::to_string).collect();
            bad("source", source, format!("allowed: {}", allowed.join(", ")))
        })?;
        let change = match change_words {
            None => None,
            Some((restarts, prev, by)) => Some(parse_change(restarts, prev, by)?),
        };
        Ok(Self {
            version: VERSION,
            profile: profile.to_string(),
            count,
            mem_bytes,
            source,
            change,
        })
    }
}

impl fmt::Display for DecisionRecord {
    /// As [`DecisionRecord::encode`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.encode())
    }
}

/// The value of the next word of a record, which must be `key=VALUE`.
fn next_value<'a>(
    words: &mut std::str::Split<'a, char>,
    text: &str,
    key: &'static str,
) -> Result<&'a str, DecisionError> {
    let Some(word) = words.next() else {
        return Err(malformed(text, format!("'{key}=' is missing")));
    };
    match word.split_once('=') {
        Some((k, v)) if k == key => Ok(v),
        _ => Err(malformed(text, format!("expected '{key}=' but found '{}'", cut(word)))),
    }
}

/// The optional fields' values: `restarts` a plain decimal u32, `prev` `-` or up to
/// [`MAX_PREV`] profile names joined by `,`, `by` a [`ChangeCause`].
fn parse_change(restarts: &str, prev: &str, by: &str) -> Result<Change, DecisionError> {
    let restarts_n = decimal(restarts).and_then(|n| u32::try_from(n).ok()).ok_or_else(|| {
        bad(
            "restarts",
            restarts,
            "a whole number from 0 without sign or leading zero".into(),
        )
    })?;
    let prev_list: Vec<String> = if prev == "-" {
        Vec::new()
    } else {
        prev.split(',').map(str::to_string).collect()
    };
    if prev_list.len() > MAX_PREV || prev_list.iter().any(|p| !profile_ok(p)) {
        return Err(bad(
            "prev",
            prev,
            format!("'-' or 1 to {MAX_PREV} MIG profile names joined by ','"),
        ));
    }
    let by_cause = ChangeCause::parse(by).ok_or_else(|| bad("by", by, "allowed: oom-restart, update".into()))?;
    Ok(Change {
        restarts: restarts_n,
        prev: prev_list,
        by: by_cause,
    })
}

/// A profile name as a record holds it: 1 to [`MAX_PROFILE_LEN`] ASCII letters, digits,
/// `.`, `+`, `-` or `_`.
fn profile_ok(p: &str) -> bool {
    !p.is_empty() && p.len() <= MAX_PROFILE_LEN && p.bytes().all(|b| b.is_ascii_alphanumeric() || b"+-._".contains(&b))
}

/// The [`EstimateSource`] whose `Display` is `text`.
pub fn source_from_str(text: &str) -> Option<EstimateSource> {
    SOURCES.into_iter().find(|s| s.to_string() == text)
}

/// Plain decimal: digits only, no sign, no leading zero (except `0` itself), fits u64.
fn decimal(text: &str) -> Option<u64> {
    let canonical =
        !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) && (text == "0" || !text.starts_with('0'));
    canonical.then(|| text.parse().ok()).flatten()
}

fn malformed(text: &str, why: String) -> DecisionError {
    DecisionError::Malformed { text: cut(text), why }
}

fn bad(key: &'static str, value: &str, why: String) -> DecisionError {
    DecisionError::BadValue {
        key,
        value: cut(value),
        why,
    }
}

fn cut(text: &str) -> String {
    super::clip(text, 100)
}

#[cfg(test)]
mod change_tests {
    use super::*;

    #[test]
    fn a_changed_record_names_the_new_profile_the_restarts_and_what_came_before() {
        let r = DecisionRecord::new("1g.10gb", 1, 9 << 30, EstimateSource::MigMemHint);
        let once = r.changed("2g.20gb", 1, 1, ChangeCause::OomRestart);
        let text = once.encode();
        assert_eq!(
            text,
            "dynmig/v1 profile=2g.20gb count=1 mem=9663676416 source=mig-mem restarts=1 prev=1g.10gb by=oom-restart"
        );
        assert_eq!(DecisionRecord::parse(&text).unwrap(), once);
        let twice = once.changed("3g.40gb", 1, 2, ChangeCause::Update);
        assert_eq!(twice.change.as_ref().unwrap().prev, ["1g.10gb", "2g.20gb"]);
        assert_eq!(DecisionRecord::parse(&twice.encode()).unwrap(), twice);
        // The same profile again: no duplicate in prev.
        let same = twice.changed("3g.40gb", 1, 3, ChangeCause::OomRestart);
        assert_eq!(same.change.as_ref().unwrap().prev.len(), 2);
        // At most MAX_PREV earlier profiles: the oldest go.
        let mut long = r.clone();
        for (i, p) in ["1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
            .iter()
            .enumerate()
        {
            long = long.changed(p, 1, i as u32 + 1, ChangeCause::Update);
        }
        let prev = &long.change.as_ref().unwrap().prev;
        assert_eq!(prev.len(), MAX_PREV);
        assert_eq!(prev[0], "1g.20gb");
        assert_eq!(DecisionRecord::parse(&long.encode()).unwrap(), long);
    }

    #[test]
    fn the_optional_fields_come_all_three_in_order_or_not_at_all() {
        let base = "dynmig/v1 profile=2g.20gb count=1 mem=1 source=mig-mem";
        assert!(DecisionRecord::parse(base).unwrap().change.is_none());
        assert!(DecisionRecord::parse(&format!("{base} restarts=0 prev=- by=update")).is_ok());
        for bad in [
            format!("{base} restarts=1"),
            format!("{base} restarts=1 prev=1g.10gb"),
            format!("{base} prev=1g.10gb restarts=1 by=update"),
            format!("{base} restarts=01 prev=1g.10gb by=update"),
            format!("{base} restarts=1 prev=1g.10gb by=admin"),
            format!("{base} restarts=1 prev=a,b,c,d,e by=update"),
            format!("{base} restarts=1 prev=1g.10gb;x by=update"),
            format!("{base} restarts=1 prev=1g.10gb by=update extra"),
        ] {
            assert!(DecisionRecord::parse(&bad).is_err(), "{bad}");
        }
    }
}
