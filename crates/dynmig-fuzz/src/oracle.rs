//! An independent reading of TRES fields, to judge the plugin's rewrites: which entries are
//! GPU requests, whether they are typed, and their counts, with C's own `strtoull` (Slurm
//! reads GRES counts with it) rather than dynmig's parser.
//!
//! An entry is split off at `,`; ASCII white space around it is ignored (as C's `isspace`
//! does); `gres:` or `gres/` is dropped; the name is what comes before the first `:` or
//! `=`, and the entry is a GPU request when that name is `gpu` in any case. The count is
//! what follows `=`, else the last `:` field when `strtoull` reads a number there (followed by
//! nothing or one unit letter, as Slurm allows `k`, `m`, `g`, `t`, `p`); any other non-empty
//! field after the name is a type.

use std::ffi::CString;

/// One entry as the oracle reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry<'a> {
    /// The entry as it is in the field, white space included.
    pub raw: &'a str,
    /// Whether it is a GPU request.
    pub gpu: bool,
    /// Whether a GPU request names a type.
    pub typed: bool,
    /// The count as `strtoull` reads it (`None`: no count written, i.e. 1; `Some(None)`:
    /// not a number Slurm would take, or out of range).
    pub count: Option<Option<u64>>,
}

impl Entry<'_> {
    /// An untyped GPU request that asks for at least one GPU (or for a count that cannot be
    /// read): what must be typed or refused.
    pub fn untyped_gpu(&self) -> bool {
        self.gpu && !self.typed && self.count != Some(Some(0))
    }
}

const C_SPACE: &[char] = &[' ', '\t', '\n', '\x0b', '\x0c', '\r'];

/// The entries of a TRES field, empty ones (nothing but C white space) left out.
pub fn entries(field: &str) -> Vec<Entry<'_>> {
    field
        .split(',')
        .filter(|raw| !raw.trim_matches(C_SPACE).is_empty())
        .map(|raw| {
            let t = raw.trim_matches(C_SPACE);
            let body = t.strip_prefix("gres:").or_else(|| t.strip_prefix("gres/")).unwrap_or(t);
            let (lhs, eq) = match body.split_once('=') {
                Some((l, r)) => (l, Some(r)),
                None => (body, None),
            };
            let mut fields: Vec<&str> = lhs.split(':').collect();
            let name = fields.remove(0);
            if !name.eq_ignore_ascii_case("gpu") {
                return Entry {
                    raw,
                    gpu: false,
                    typed: false,
                    count: None,
                };
            }
            let count_text = match eq {
                Some(c) => Some(c),
                None if fields.last().is_some_and(|f| strtoull(f).is_some()) => fields.pop(),
                None => None,
            };
            Entry {
                raw,
                gpu: true,
                typed: fields.iter().any(|f| !f.is_empty()),
                count: count_text.map(|c| strtoull(c).flatten()),
            }
        })
        .collect()
}

/// `strtoull(text, &end, 10)` as Slurm uses it for a count: `None` when it reads no number or
/// stops before something other than one unit letter; `Some(None)` for a number out of range
/// (or a negative one, which `strtoull` wraps); else the value with its unit.
pub fn strtoull(text: &str) -> Option<Option<u64>> {
    let c = CString::new(text).ok()?;
    let mut end: *mut libc::c_char = std::ptr::null_mut();
    // SAFETY: a valid C string; `end` points into it afterwards.
    let (value, errno, used) = unsafe {
        *libc::__errno_location() = 0;
        let v = libc::strtoull(c.as_ptr(), &mut end, 10);
        (v, *libc::__errno_location(), end.offset_from(c.as_ptr()) as usize)
    };
    let before = &c.as_bytes()[..used];
    if !before.iter().any(u8::is_ascii_digit) {
        return None;
    }
    let rest = &c.as_bytes()[used..];
    let scale: u64 = match rest {
        [] => 1,
        [b'k' | b'K'] => 1 << 10,
        [b'm' | b'M'] => 1 << 20,
        [b'g' | b'G'] => 1 << 30,
        [b't' | b'T'] => 1 << 40,
        [b'p' | b'P'] => 1 << 50,
        _ => return None,
    };
    let negative = before.contains(&b'-');
    if errno != 0 || (negative && value != 0) {
        return Some(None);
    }
    Some(value.checked_mul(scale))
}

/// The entries of `field` that are not GPU requests, as they are in the field.
pub fn non_gpu(field: &str) -> Vec<&str> {
    entries(field).into_iter().filter(|e| !e.gpu).map(|e| e.raw).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_entries_like_slurm() {
        let e = entries("gres:gpu:1,gres/shard:4, cpu=2");
        assert!(e[0].untyped_gpu() && e[0].count == Some(Some(1)));
        assert!(!e[1].gpu && !e[2].gpu);
        assert_eq!(non_gpu("gres:gpu:1,gres/shard:4, cpu=2"), ["gres/shard:4", " cpu=2"]);
        assert!(entries("gres/gpu:2g.20gb:1")[0].typed);
        assert!(entries("gres:gpu:1g.10gb")[0].typed, "1g.10gb is a type, not a count");
        assert!(entries("gres:gpu:+1")[0].untyped_gpu());
        assert!(!entries("gres:gpu:0")[0].untyped_gpu());
        assert!(entries("GPU=4")[0].untyped_gpu());
        assert_eq!(entries("gpu:1k")[0].count, Some(Some(1024)));
        assert_eq!(entries("gpu:-1")[0].count, Some(None));
        assert_eq!(entries("gpu:99999999999999999999")[0].count, Some(None));
        assert!(entries("gres:gpu")[0].untyped_gpu());
        assert!(entries(",, ,").is_empty());
    }
}
