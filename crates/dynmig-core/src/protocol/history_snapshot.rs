//! The history snapshot: the per-(user, job name) summaries that the history service writes
//! and job_submit/dynmig reads inside slurmctld (docs/history.md), as text.
//!
//! One line per (user, job name), tab separated (`<TAB>` below), the name last (so it may
//! hold any character but a tab or newline; the writer turns those into spaces):
//!
//! ```text
//! # dynmig-history-snapshot/v1 uid samples quantile_peak max_peak ooms job_name
//! 1000<TAB>5<TAB>12884901888<TAB>12884901888<TAB>0<TAB>train
//! ```
//!
//! `uid`, `samples` and `ooms` are whole numbers up to `u32::MAX`, the two peaks bytes up to
//! `u64::MAX`, in decimal. Lines starting with `#` are comments; blank lines are skipped.
//!
//! Versions, carried by the first line ([`SNAPSHOT_HEADER`]):
//! - **1** (written): the first line is `# dynmig-history-snapshot/v1 ...`;
//! - **0** (read): any other first line, e.g. the header `# dynmig history snapshot: ...` of
//!   the dynmig before the version, or none: the same columns as version 1, so a snapshot
//!   written by an installed history service keeps being read.
//!
//! A first line `# dynmig-history-snapshot/v<N>` of another `N` is a
//! [`SnapshotError::Version`]. A job_submit/dynmig from before the version reads a version 1
//! file too (to it the header is a comment).
//!
//! The reader ([`decode`]) runs inside slurmctld: it never panics, allocates nothing per
//! line (each line is handed to the caller borrowed from the text), and stops at the first
//! bad line with a [`SnapshotError`] that names its 1-based line number and what is wrong.
//!
//! ```
//! use dynmig_core::estimate::HistoryEntry;
//! use dynmig_core::protocol::history_snapshot::{decode, encode};
//! let e = HistoryEntry { samples: 5, quantile_peak_bytes: 12 << 30, max_peak_bytes: 12 << 30, ooms: 0 };
//! let text = encode([(1000, "train", &e)]);
//! assert!(text.starts_with("# dynmig-history-snapshot/v1 "));
//! let mut back = Vec::new();
//! let version = decode(&text, |l| back.push((l.uid, l.job_name.to_string(), l.entry))).unwrap();
//! assert_eq!((version, back), (1, vec![(1000, "train".to_string(), e)]));
//! ```

/// The summary of one user's jobs of one name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryEntry {
    /// Jobs counted.
    pub samples: u32,
    /// The configured quantile of their peaks, in bytes.
    pub quantile_peak_bytes: u64,
    /// The largest peak, in bytes.
    pub max_peak_bytes: u64,
    /// Jobs that ran out of memory.
    pub ooms: u32,
}

/// The snapshot format version this code writes, and the newest it reads.
pub const SNAPSHOT_VERSION: u32 = 1;

/// What the first line of a versioned snapshot starts with, before the version number.
pub const VERSION_TAG: &str = "# dynmig-history-snapshot/v";

/// The first line [`encode`] writes: the version and the column names.
pub const SNAPSHOT_HEADER: &str = "# dynmig-history-snapshot/v1 uid samples quantile_peak max_peak ooms job_name\n";

/// The first line of the unversioned snapshot (version 0) that dynmig wrote before
/// [`SNAPSHOT_VERSION`] 1; still read.
pub const UNVERSIONED_HEADER: &str = "# dynmig history snapshot: uid samples quantile_peak max_peak ooms job_name\n";

/// Most bytes one snapshot line takes besides its job name: five numbers of at most 20 digits,
/// five tabs and the newline (an upper bound; real lines are shorter).
pub const LINE_OVERHEAD_BYTES: u64 = 5 * 20 + 6;

/// One line of a snapshot, its name borrowed from the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotLine<'a> {
    /// The user's numeric id.
    pub uid: u32,
    /// The job name (no tab or newline).
    pub job_name: &'a str,
    /// The summary of the user's jobs of that name.
    pub entry: HistoryEntry,
}

/// A snapshot that cannot be read. Every message starts with `line N:` (1-based).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// The first line names another version than this code reads.
    #[error(
        "line 1: snapshot version '{found}'; this dynmig reads version {SNAPSHOT_VERSION} and the unversioned form"
    )]
    Version {
        /// The version text after `v` (cut to 20 characters).
        found: String,
    },
    /// Fewer than six tab-separated fields.
    #[error("line {line}: expected 6 tab-separated fields (uid samples quantile_peak max_peak ooms job_name)")]
    Fields {
        /// The line, 1-based.
        line: usize,
    },
    /// A number field that is not a decimal number of its range.
    #[error("line {line}: {field} '{value}' is not a whole number from 0 to {max}")]
    Number {
        /// The line, 1-based.
        line: usize,
        /// The column's name (`uid`, `samples`, `quantile_peak`, `max_peak`, `ooms`).
        field: &'static str,
        /// The text found (cut to 20 characters).
        value: String,
        /// The largest value allowed.
        max: u64,
    },
}

/// The snapshot text of `entries` (uid, job name, summary): [`SNAPSHOT_HEADER`], then one line
/// each, sorted by uid then name; a tab or newline in a name is written as a space.
pub fn encode<'a>(entries: impl IntoIterator<Item = (u32, &'a str, &'a HistoryEntry)>) -> String {
    let mut sorted: Vec<(u32, &str, &HistoryEntry)> = entries.into_iter().collect();
    sorted.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    let mut out = String::from(SNAPSHOT_HEADER);
    for (uid, name, e) in sorted {
        let name: String = name
            .chars()
            .map(|c| if c == '\t' || c == '\n' { ' ' } else { c })
            .collect();
        out += &format!(
            "{uid}\t{}\t{}\t{}\t{}\t{name}\n",
            e.samples, e.quantile_peak_bytes, e.max_peak_bytes, e.ooms
        );
    }
    out
}

/// Reads a snapshot of version 1 or 0 (module docs), handing each entry line to `line` in
/// order; returns the version read.
///
/// # Errors
/// The first bad line's [`SnapshotError`]: another version, fewer than six fields, or a
/// number out of its range. Lines before it have been handed to `line`.
pub fn decode<'a>(text: &'a str, mut line: impl FnMut(SnapshotLine<'a>)) -> Result<u32, SnapshotError> {
    let mut version = 0;
    for (i, l) in text.lines().enumerate() {
        if i == 0 {
            if let Some(rest) = l.strip_prefix(VERSION_TAG) {
                let found = rest.split(' ').next().unwrap_or("");
                if found.parse::<u32>() != Ok(SNAPSHOT_VERSION) {
                    return Err(SnapshotError::Version {
                        found: crate::types::cut(found, 20),
                    });
                }
                version = SNAPSHOT_VERSION;
            }
        }
        if l.starts_with('#') || l.trim().is_empty() {
            continue;
        }
        line(parse_line(i + 1, l)?);
    }
    Ok(version)
}

fn parse_line(n: usize, l: &str) -> Result<SnapshotLine<'_>, SnapshotError> {
    let mut f = l.splitn(6, '\t');
    let mut next = || f.next().ok_or(SnapshotError::Fields { line: n });
    let (uid, samples, quantile, max, ooms, name) = (next()?, next()?, next()?, next()?, next()?, next()?);
    let u64_of = |field, s: &str, max: u64| {
        s.parse::<u64>()
            .ok()
            .filter(|v| *v <= max)
            .ok_or_else(|| SnapshotError::Number {
                line: n,
                field,
                value: crate::types::cut(s, 20),
                max,
            })
    };
    let u32_of = |field, s: &str| u64_of(field, s, u32::MAX.into()).map(|v| v as u32);
    Ok(SnapshotLine {
        uid: u32_of("uid", uid)?,
        job_name: name,
        entry: HistoryEntry {
            samples: u32_of("samples", samples)?,
            quantile_peak_bytes: u64_of("quantile_peak", quantile, u64::MAX)?,
            max_peak_bytes: u64_of("max_peak", max, u64::MAX)?,
            ooms: u32_of("ooms", ooms)?,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(samples: u32, q: u64, max: u64, ooms: u32) -> HistoryEntry {
        HistoryEntry {
            samples,
            quantile_peak_bytes: q,
            max_peak_bytes: max,
            ooms,
        }
    }

    type Read = (u32, Vec<(u32, String, HistoryEntry)>);

    fn read(text: &str) -> Result<Read, SnapshotError> {
        let mut got = Vec::new();
        let v = decode(text, |l| got.push((l.uid, l.job_name.to_string(), l.entry)))?;
        Ok((v, got))
    }

    #[test]
    fn a_snapshot_round_trips_sorted_with_its_version() {
        let a = entry(5, 12 << 30, 13 << 30, 1);
        let b = entry(1, 0, u64::MAX, u32::MAX);
        let text = encode([(1001, "eval", &a), (1000, "we ird: é", &b), (1000, "a", &a)]);
        assert!(text.starts_with(SNAPSHOT_HEADER), "{text}");
        assert_eq!(
            read(&text).unwrap(),
            (
                1,
                vec![
                    (1000, "a".into(), a),
                    (1000, "we ird: é".into(), b),
                    (1001, "eval".into(), a)
                ]
            )
        );
        // A tab or newline in a name becomes a space: the line stays one line of 6 fields.
        let text = encode([(7, "x\ty\nz", &a)]);
        assert_eq!(read(&text).unwrap().1, vec![(7, "x y z".into(), a)]);
        assert_eq!(read(&encode([])).unwrap(), (1, vec![]));
    }

    #[test]
    fn todays_unversioned_snapshot_still_decodes() {
        // As the history service wrote it before the version (and as installed ones still do).
        let today = format!(
            "{UNVERSIONED_HEADER}1000\t5\t12884901888\t12884901888\t0\tft\n1000\t2\t1\t2\t1\tname with spaces\n"
        );
        assert_eq!(
            read(&today).unwrap(),
            (
                0,
                vec![
                    (1000, "ft".into(), entry(5, 12 << 30, 12 << 30, 0)),
                    (1000, "name with spaces".into(), entry(2, 1, 2, 1))
                ]
            )
        );
        // No header at all, CRLF line ends, blank lines and comments.
        assert_eq!(
            read("1\t1\t1\t1\t0\ta\r\n\n# x\n").unwrap(),
            (0, vec![(1, "a".into(), entry(1, 1, 1, 0))])
        );
    }

    #[test]
    fn bad_snapshots_say_which_line_and_what_is_wrong() {
        let h = SNAPSHOT_HEADER;
        for (text, says) in [
            (
                "# dynmig-history-snapshot/v2 uid ...\n".to_string(),
                "line 1: snapshot version '2'",
            ),
            (
                "# dynmig-history-snapshot/vx\n".to_string(),
                "line 1: snapshot version 'x'",
            ),
            ("1\t2\n".to_string(), "line 1: expected 6 tab-separated fields"),
            (format!("{h}1\t1\t1\t1\t0\n"), "line 2: expected 6"),
            (
                format!("{h}x\t1\t1\t1\t0\ta\n"),
                "line 2: uid 'x' is not a whole number from 0 to 4294967295",
            ),
            (
                format!("{h}1\t4294967296\t1\t1\t0\ta\n"),
                "line 2: samples '4294967296'",
            ),
            (format!("{h}1\t1\t-1\t1\t0\ta\n"), "line 2: quantile_peak '-1'"),
            (format!("{h}1\t1\t1\t18446744073709551616\t0\ta\n"), "line 2: max_peak"),
            (format!("{h}1\t1\t1\t1\t \ta\n"), "line 2: ooms ' '"),
            (format!("{h}\n\n1\t1\t1\t1\t0\n"), "line 4: expected 6"),
        ] {
            let e = read(&text).unwrap_err().to_string();
            assert!(e.starts_with(says), "{text:?}: {e}");
        }
        // A version line further down is a comment, not a version.
        assert_eq!(read("1\t1\t1\t1\t0\ta\n# dynmig-history-snapshot/v9\n").unwrap().0, 0);
    }

    proptest::proptest! {
        #[test]
        fn any_entries_round_trip(
            lines in proptest::collection::btree_map(
                (proptest::prelude::any::<u32>(), "\\PC{0,30}"),
                (proptest::prelude::any::<u32>(), proptest::prelude::any::<u64>(),
                 proptest::prelude::any::<u64>(), proptest::prelude::any::<u32>()),
                0..20,
            )
        ) {
            let entries: Vec<(u32, &str, HistoryEntry)> = lines
                .iter()
                .map(|((uid, name), (s, q, m, o))| (*uid, name.as_str(), entry(*s, *q, *m, *o)))
                .collect();
            let text = encode(entries.iter().map(|(u, n, e)| (*u, *n, e)));
            let (version, back) = read(&text).unwrap();
            proptest::prop_assert_eq!(version, 1);
            let want: Vec<(u32, String, HistoryEntry)> =
                entries.into_iter().map(|(u, n, e)| (u, n.to_string(), e)).collect();
            proptest::prop_assert_eq!(back, want);
        }

        #[test]
        fn any_text_reads_or_errs_without_panicking(s in "(\\PC|\t|\n){0,300}") {
            let _ = read(&s);
        }
    }
}
