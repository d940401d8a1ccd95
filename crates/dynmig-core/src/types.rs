//! Small enums shared by the config, the estimator and the submit decision, and the rule
//! for echoing user text in messages.
//!
//! They live here, below all three, so that [`crate::config`] can name the `[jobs]` choices
//! and [`crate::estimate`] can name where a figure came from without either importing
//! [`crate::submit`] (which uses both).

use std::fmt;

/// The most characters of a user's value that a message quotes; longer values are cut and
/// end in `...`.
pub const MAX_QUOTED: usize = 100;

/// `[jobs] whole_gpu`: what to do with a job that asks for one GPU and gives no hint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WholeGpu {
    /// `"full-profile"`: `gpu:1` with no hint gets the first configured model's full profile
    /// (`7g.80gb`).
    #[default]
    FullProfile,
    /// `"estimate"`: use `estimator.default_mem`
    /// ([`crate::submit::SubmitPolicy::default_mem_bytes`]) as if it were `--mig-mem`.
    Estimate,
    /// `"reject"`: refuse the job and tell the user to give `--mig-mem` or `--mig-profile`.
    Reject,
}

/// `[jobs] multi_gpu`: what to do with a job that asks for more than one GPU (per node, job,
/// socket or task).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MultiGpu {
    /// `"full-profile"`: `gpu:N` becomes N instances of a full profile, in the same field.
    #[default]
    FullProfile,
    /// `"reject"`: refuse the job.
    Reject,
}

/// `[controller] drain`: how the controller takes a busy node out of service for a
/// repartition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DrainMode {
    /// `"reservation"`: a maintenance reservation starting when the node's running jobs must
    /// end (their time limits); backfill keeps the node busy until then with jobs that end in
    /// time, and the node is drained when the reservation starts or the node is idle. An idle
    /// node is drained at once.
    #[default]
    Reservation,
    /// `"immediate"`: drain the node at once; every instance idles until its last job ends.
    Immediate,
}

/// Where a job's memory figure came from (`source=` in the AdminComment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EstimateSource {
    /// The user's `--mig-mem`.
    MigMemHint,
    /// The user's `--mig-profile` (memory is the profile's).
    MigProfileHint,
    /// `estimator.default_mem`.
    Default,
    /// A whole GPU, from [`WholeGpu::FullProfile`] or [`MultiGpu::FullProfile`].
    WholeGpu,
    /// The model formula, from `--mig-model-params` and its companions.
    Model,
    /// The history of the same user and job name.
    History,
}

impl fmt::Display for EstimateSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EstimateSource::MigMemHint => "mig-mem",
            EstimateSource::MigProfileHint => "mig-profile",
            EstimateSource::Default => "default",
            EstimateSource::WholeGpu => "whole-gpu",
            EstimateSource::Model => "model",
            EstimateSource::History => "history",
        })
    }
}

/// What [`clip`] does with the control characters of the text it cuts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Controls {
    /// Kept as they are ([`cut`]).
    Keep,
    /// Each becomes one space (`char::is_control`): the text stays on one line, for a
    /// message or a Slurm field ([`crate::protocol::clip`]).
    Space,
    /// Each is written as its escape ([`escape_control`]), for a message or a log line that
    /// quotes a user's text ([`crate::hints::shorten`]).
    Escape,
}

/// The one rule for cutting text to show: `text` with its control characters treated as
/// `controls` says, cut to at most `max_chars` characters of that result (an escape counts
/// its own characters and is never split), with `...` appended when something was cut.
///
/// ```
/// use dynmig_core::types::{clip, Controls};
/// assert_eq!(clip("abcdef", 3, Controls::Keep), "abc...");
/// assert_eq!(clip("a\nb", 10, Controls::Space), "a b");
/// assert_eq!(clip("a\nb", 2, Controls::Escape), "a...");
/// ```
pub fn clip(text: &str, max_chars: usize, controls: Controls) -> String {
    let mut out = String::new();
    let mut used = 0;
    for c in text.chars() {
        let piece = match controls {
            Controls::Keep => None,
            Controls::Space => c.is_control().then(|| " ".to_string()),
            Controls::Escape => escaped(c),
        };
        let n = piece.as_deref().map_or(1, |e| e.chars().count());
        if used + n > max_chars {
            out.push_str("...");
            return out;
        }
        match piece {
            Some(e) => out.push_str(&e),
            None => out.push(c),
        }
        used += n;
    }
    out
}

/// `text` cut to at most `max_chars` characters, with `...` appended when it was longer: user
/// text echoed in an error message stays readable whatever its length ([`clip`] keeping the
/// control characters).
///
/// ```
/// assert_eq!(dynmig_core::types::cut("abcdef", 3), "abc...");
/// assert_eq!(dynmig_core::types::cut("abc", 3), "abc");
/// ```
pub fn cut(text: &str, max_chars: usize) -> String {
    clip(text, max_chars, Controls::Keep)
}

/// `text` with every character that could break a log line or drive a terminal written as
/// an escape: newline, carriage return and tab as `\n`, `\r`, `\t`; the other ASCII
/// control characters and DEL as `\xNN` (ESC is `\x1b`); the C1 controls (U+0080 to
/// U+009F), the line and paragraph separators (U+2028, U+2029) and the bidirectional
/// overrides and isolates (U+202A to U+202E, U+2066 to U+2069) as `\u{NNNN}`. Everything
/// else, backslashes included, is kept as it is (an escape is for reading, not for parsing
/// back). [`clip`] with [`Controls::Escape`] applies it and cuts.
///
/// ```
/// use dynmig_core::types::escape_control;
/// assert_eq!(escape_control("job\n\x1b[31mred"), "job\\n\\x1b[31mred");
/// assert_eq!(escape_control("plain é"), "plain é");
/// ```
pub fn escape_control(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match escaped(c) {
            Some(e) => out.push_str(&e),
            None => out.push(c),
        }
    }
    out
}

/// The escape of `c` for [`escape_control`], or `None` when `c` is kept.
fn escaped(c: char) -> Option<String> {
    let needs =
        c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    if !needs {
        return None;
    }
    Some(match c {
        '\n' => "\\n".to_string(),
        '\r' => "\\r".to_string(),
        '\t' => "\\t".to_string(),
        c if c.is_ascii() => format!("\\x{:02x}", c as u32),
        c => format!("\\u{{{:04x}}}", c as u32),
    })
}

#[cfg(test)]
mod tests {
    use super::{clip, Controls};

    #[test]
    fn clip_counts_what_it_shows_and_marks_a_cut() {
        for c in [Controls::Keep, Controls::Space, Controls::Escape] {
            assert_eq!(clip("", 0, c), "");
            assert_eq!(clip("ab", 2, c), "ab");
            assert_eq!(clip("abc", 2, c), "ab...");
            assert_eq!(clip("ééé", 2, c), "éé...");
            assert_eq!(clip("x", 0, c), "...");
        }
        assert_eq!(clip("a\nb", 3, Controls::Keep), "a\nb");
        assert_eq!(clip("a\nb\tc", 4, Controls::Space), "a b ...");
        assert_eq!(clip("a\nb", 4, Controls::Escape), "a\\nb");
        // An escape is never split: it is shown whole or not at all.
        assert_eq!(clip("a\nb", 2, Controls::Escape), "a...");
        assert_eq!(clip("a\x1bb", 5, Controls::Escape), "a\\x1b...");
        assert_eq!(clip("\u{202e}", 8, Controls::Escape), "\\u{202e}");
    }
}
