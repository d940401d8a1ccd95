//! [`ConfigError`]: what is wrong in dynmig.toml, and where.

use std::fmt;
use std::ops::Range;

/// Longest key named in an error, characters: a key is the file's text and may be huge
/// (found by fuzzing: a 4 kB error for a long bogus key).
const MAX_KEY_CHARS: usize = 100;
/// Longest message, characters (it quotes values cut to 100 characters, and lists what is
/// allowed).
const MAX_MESSAGE_CHARS: usize = 1000;

/// A dynmig.toml that cannot be used.
///
/// Display: `line 12, column 13: node_group.gpu_model: unknown GPU model 'A200'; allowed: ...`.
/// The caller adds the file name.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConfigError {
    /// Dotted key, e.g. `controller.interval` (`node_group.gpu_model` for any group; the line
    /// tells which).
    pub key: String,
    /// 1-based line of the key or value.
    pub line: usize,
    /// 1-based column (in characters).
    pub column: usize,
    /// What is wrong and what is allowed.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {}, column {}: {}: {}",
            self.line, self.column, self.key, self.message
        )
    }
}

impl std::error::Error for ConfigError {}

impl ConfigError {
    /// An error about `key` whose value sits at byte range `span` of `text`.
    pub(super) fn at(text: &str, span: Range<usize>, key: &str, message: impl Into<String>) -> Self {
        let (line, column) = line_col(text, span.start);
        Self {
            key: crate::types::cut(key, MAX_KEY_CHARS),
            line,
            column,
            message: crate::types::cut(&message.into(), MAX_MESSAGE_CHARS),
        }
    }

    /// A TOML syntax or shape error (unknown key, wrong type, missing key, bad enum value).
    pub(super) fn from_toml(text: &str, e: &toml::de::Error) -> Self {
        let start = e.span().map_or(0, |s| s.start);
        let (line, column) = line_col(text, start);
        let key = key_at(text, start).unwrap_or_else(|| "(document)".into());
        let key = crate::types::cut(&key, MAX_KEY_CHARS);
        // toml's message may quote the document (a key, a value): cut like the rest.
        let what = crate::types::cut(&e.message().trim().replace('\n', "; "), MAX_MESSAGE_CHARS / 2);
        let written = line_text(text, start).trim();
        let message = if written.is_empty() {
            what
        } else {
            format!("{what} in `{}`", crate::types::cut(written, 100))
        };
        Self {
            key,
            line,
            column,
            message,
        }
    }
}

/// The text of the line holding byte `offset`.
fn line_text(text: &str, offset: usize) -> &str {
    let offset = offset.min(text.len());
    let start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    text[start..].lines().next().unwrap_or("")
}

/// 1-based line and column (in characters) of byte `offset`.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

/// The dotted key written on the line holding `offset`: the last table header above it
/// joined with the key before `=` (or the header itself on a header line).
fn key_at(text: &str, offset: usize) -> Option<String> {
    let offset = offset.min(text.len());
    let line_start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let line = text[line_start..].lines().next().unwrap_or("").trim();
    let header = |l: &str| {
        let l = l.trim();
        l.starts_with('[')
            .then(|| l.trim_matches(|c| c == '[' || c == ']').trim().to_string())
    };
    if let Some(h) = header(line) {
        return Some(h);
    }
    let key = line
        .split_once('=')
        .map(|(k, _)| k.trim().trim_matches('"').to_string());
    let table = text[..line_start].lines().rev().find_map(header);
    match (table, key) {
        (Some(t), Some(k)) => Some(format!("{t}.{k}")),
        (None, Some(k)) => Some(k),
        (t, None) => t,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_huge_key_or_value_gives_a_bounded_message() {
        // Found by crates/dynmig-fuzz (config_toml): the key was quoted whole.
        let key = "\u{202e}".repeat(5000);
        for text in [
            format!("version = 1\n{key}\n"),
            format!("version = 1\n[jobs]\n{key} = 1\n"),
            format!("version = 1\n[{key}]\n"),
            format!("version = 1\n[jobs]\nwhole_gpu = \"{}\"\n", "x".repeat(100_000)),
        ] {
            let e = crate::config::parse_config(&text).unwrap_err().to_string();
            assert!(e.len() < 4096, "{} bytes: {}", e.len(), crate::types::cut(&e, 200));
        }
    }

    #[test]
    fn positions_and_keys() {
        let text = "version = 1\n[jobs]\nwhole_gpu = \"x\"\n";
        let off = text.find("\"x\"").unwrap();
        assert_eq!(line_col(text, off), (3, 13));
        assert_eq!(key_at(text, off).as_deref(), Some("jobs.whole_gpu"));
        assert_eq!(key_at(text, 0).as_deref(), Some("version"));
        let off = text.find("[jobs]").unwrap();
        assert_eq!(key_at(text, off).as_deref(), Some("jobs"));
    }
}
