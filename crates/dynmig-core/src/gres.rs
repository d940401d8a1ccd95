//! Slurm TRES request strings as `job_desc_msg_t` holds them, read and rewritten.
//!
//! `tres_per_node` (from `--gres` and `--gpus-per-node`), `tres_per_job` (`--gpus`),
//! `tres_per_socket` and `tres_per_task` are comma-separated lists of entries. A GRES entry is
//! `gres:NAME[:TYPE][:COUNT]` on Slurm 22.05 and 23.02, and `gres/NAME[:TYPE][:COUNT]` from
//! 23.11 (Slurm's sbatch(1) and gres.conf(5) documents; the 23.11 release notes for the
//! `gres/` form); `NAME[:TYPE]=COUNT` is read too. A missing count means 1, as in Slurm.
//! A GPU count is read as C's `strtoull` reads it (Slurm parses counts with it): leading
//! white space, a `+` and leading zeros are accepted, so `gres:gpu:+1` is one untyped GPU
//! and is rewritten like `gres:gpu:1`. A negative count, a unit suffix and a count above
//! `u32::MAX` are errors naming the entry. Entries of count 0 are never rewritten. Other entries (`cpu=2` in `tres_per_task` from 23.11, licenses, anything unknown)
//! are kept byte for byte.
//!
//! [`TresList::render`] writes every non-GPU entry back byte for byte. GPU entries are
//! written in normal form (`gres:gpu:01` comes back as `gres:gpu:1`), keeping their prefix
//! form (`gres:` or `gres/`) and count separator; [`TresList::set_gpu`] changes them.
//!
//! ```
//! use dynmig_core::gres::TresList;
//! let mut t = TresList::parse("gres/gpu:1,gres/shard:4").unwrap();
//! assert_eq!(t.gpu_entries().count(), 1);
//! t.set_gpu(Some("2g.20gb"), 1);
//! assert_eq!(t.render(), "gres/gpu:2g.20gb:1,gres/shard:4");
//! ```
//!
//! A job's request as Slurm's JSON holds it is read once, where the JSON is read, into a
//! [`GpuRequest`]: its text and its GPU entries, typed ([`GpuAsk`]); the controller, the
//! node's hooks and tools read the entries from it and rewrite it with
//! [`GpuRequest::retyped`].
//!
//! A node's GRES as Slurm shows it (`sinfo --json`'s `gres`, `gpu:3g.40gb:2(S:0),...`) is
//! another form, read by [`parse_node_gres`]; [`shows_totals`] is the one rule for "does
//! Slurm show this node with these GPU instances", which the controller, the agent and the
//! agent's re-registration all ask.

use std::collections::BTreeMap;
use std::fmt;

/// How a GRES entry starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GresPrefix {
    /// `gres:` (Slurm 22.05, 23.02).
    Colon,
    /// `gres/` (Slurm 23.11 and later).
    Slash,
    /// No prefix (`gpu:1`), as a user or a Lua script may write it.
    None,
}

impl GresPrefix {
    fn as_str(self) -> &'static str {
        match self {
            GresPrefix::Colon => "gres:",
            GresPrefix::Slash => "gres/",
            GresPrefix::None => "",
        }
    }
}

/// One GRES request: `NAME[:TYPE]:COUNT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GresEntry {
    /// The prefix form the entry used.
    pub prefix: GresPrefix,
    /// GRES name, e.g. `"gpu"`.
    pub name: String,
    /// GRES type, e.g. `"a100"` or `"2g.20gb"`.
    pub gres_type: Option<String>,
    /// Count; 1 when the entry gave none.
    pub count: u64,
    /// Whether the count was written `=COUNT` rather than `:COUNT`.
    pub count_with_equals: bool,
    /// Whether the entry wrote a count (entries without one are rendered as they came).
    pub count_written: bool,
}

impl GresEntry {
    /// Whether this is a GPU request (`name == "gpu"`).
    pub fn is_gpu(&self) -> bool {
        self.name.eq_ignore_ascii_case("gpu")
    }
}

impl fmt::Display for GresEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.prefix.as_str(), self.name)?;
        if let Some(t) = &self.gres_type {
            write!(f, ":{t}")?;
        }
        if self.count_written {
            let sep = if self.count_with_equals { '=' } else { ':' };
            write!(f, "{sep}{}", self.count)?;
        }
        Ok(())
    }
}

/// One entry of a TRES list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TresEntry {
    /// A GPU entry, read so that it can be changed.
    Gres(GresEntry),
    /// Anything else (other GRES, `cpu=2`, licenses), kept byte for byte.
    Other(String),
}

/// A TRES request string, entry by entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TresList {
    /// The entries, in the string's order.
    pub entries: Vec<TresEntry>,
}

/// A GPU entry that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot read GPU request '{entry}': {why}")]
pub struct GresError {
    /// The entry, cut to [`crate::hints::MAX_QUOTED`] characters.
    pub entry: String,
    /// What is wrong and what is allowed.
    pub why: String,
}

impl TresList {
    /// Reads a TRES string. Empty text gives an empty list.
    ///
    /// # Errors
    /// [`GresError`] when a GPU entry has a bad count or too many fields. Entries of other
    /// GRES that cannot be read are kept as [`TresEntry::Other`], since Slurm judges them.
    pub fn parse(text: &str) -> Result<Self, GresError> {
        let mut entries = Vec::new();
        for raw in text.split(',').filter(|s| !c_trim(s).is_empty()) {
            entries.push(match parse_entry(raw) {
                Ok(Some(e)) if e.is_gpu() => TresEntry::Gres(e),
                Ok(_) => TresEntry::Other(raw.to_string()),
                Err(why) if entry_name_is_gpu(raw) => {
                    return Err(GresError {
                        entry: crate::hints::shorten(raw, crate::hints::MAX_QUOTED),
                        why,
                    })
                }
                Err(_) => TresEntry::Other(raw.to_string()),
            });
        }
        Ok(Self { entries })
    }

    /// The GPU entries, including those with count 0.
    pub fn gpu_entries(&self) -> impl Iterator<Item = &GresEntry> {
        self.entries.iter().filter_map(|e| match e {
            TresEntry::Gres(g) if g.is_gpu() => Some(g),
            _ => None,
        })
    }

    /// Sets the type and count of every GPU entry with a count above 0 (there is normally
    /// one); the count is always written. Entries of count 0 (`gpu:0`, which asks for no
    /// GPU) are left as they are. Returns whether an entry was set.
    pub fn set_gpu(&mut self, gres_type: Option<&str>, count: u64) -> bool {
        let mut found = false;
        for e in &mut self.entries {
            if let TresEntry::Gres(g) = e {
                if g.is_gpu() && g.count > 0 {
                    g.gres_type = gres_type.map(str::to_string);
                    g.count = count;
                    g.count_written = true;
                    found = true;
                }
            }
        }
        found
    }

    /// Removes the GPU entries with a count above 0 (count-0 entries stay as they are);
    /// returns them.
    pub fn remove_gpu(&mut self) -> Vec<GresEntry> {
        let mut removed = Vec::new();
        self.entries.retain(|e| match e {
            TresEntry::Gres(g) if g.is_gpu() && g.count > 0 => {
                removed.push(g.clone());
                false
            }
            _ => true,
        });
        removed
    }

    /// Appends an entry.
    pub fn push(&mut self, entry: GresEntry) {
        self.entries.push(TresEntry::Gres(entry));
    }

    /// The prefix form this list's GRES entries use (the first one's, GPU or not), for new
    /// entries; `None` when it has no prefixed GRES entry.
    pub fn prefix(&self) -> Option<GresPrefix> {
        self.entries.iter().find_map(|e| match e {
            TresEntry::Gres(g) if g.prefix != GresPrefix::None => Some(g.prefix),
            TresEntry::Gres(_) => None,
            TresEntry::Other(raw) => match strip_prefix(c_trim(raw)).0 {
                GresPrefix::None => None,
                p => Some(p),
            },
        })
    }

    /// Whether the list has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The TRES string: entries joined by `,`.
    pub fn render(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for TresList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.entries.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            match e {
                TresEntry::Gres(g) => write!(f, "{g}")?,
                TresEntry::Other(s) => f.write_str(s)?,
            }
        }
        Ok(())
    }
}

/// One GPU entry of a job's request ([`GpuRequest`]): its type and count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuAsk<'a> {
    /// The GRES type: a MIG profile (`2g.20gb`), another type (`a100`), or `None` for an
    /// untyped request (`gres:gpu:2`).
    pub gres_type: Option<&'a str>,
    /// How many; 0 for an entry that asks for no GPU (`gres:gpu:0`).
    pub count: u32,
}

/// A job's GPU request per node as Slurm holds it (`tres_per_node` in `squeue --json`, e.g.
/// `gres:gpu:2g.20gb:1`), read once where Slurm's JSON is read: the text as Slurm gave it
/// and its GPU entries ([`TresList::parse`]), which cannot disagree with it (both are set
/// only together). A text that cannot be read is kept with its [`GresError`] and asks for no
/// GPU ([`GpuRequest::gpus`] is empty), as a job whose request cannot be read is no demand.
///
/// ```
/// use dynmig_core::gres::{GpuAsk, GpuRequest};
/// let r = GpuRequest::parse("gres/gpu:2g.20gb:2,gres/shard:4");
/// assert_eq!(r.typed().collect::<Vec<_>>(), [("2g.20gb", 2)]);
/// assert_eq!(r.retyped("3g.40gb", 1).as_deref(), Some("gres/gpu:3g.40gb:1,gres/shard:4"));
/// let untyped = GpuRequest::from("gres:gpu:1");
/// assert_eq!(untyped.gpus().collect::<Vec<_>>(), [GpuAsk { gres_type: None, count: 1 }]);
/// assert!(GpuRequest::parse("gres:gpu:-1").error().is_some());
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct GpuRequest {
    text: String,
    read: Result<TresList, GresError>,
}

impl GpuRequest {
    /// Reads `text` (Slurm's `tres_per_node`); never fails: an unreadable text is kept with
    /// its error ([`GpuRequest::error`]).
    pub fn parse(text: impl Into<String>) -> Self {
        let text = text.into();
        let read = TresList::parse(&text);
        Self { text, read }
    }

    /// The text as Slurm gave it.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Why the text is no request dynmig can read (a GPU entry with a bad count or too many
    /// fields); `None` when it was read.
    pub fn error(&self) -> Option<&GresError> {
        self.read.as_ref().err()
    }

    /// The GPU entries in the text's order, those of count 0 included; none when the text
    /// could not be read.
    pub fn gpus(&self) -> impl Iterator<Item = GpuAsk<'_>> {
        self.read.iter().flat_map(TresList::gpu_entries).map(|g| GpuAsk {
            gres_type: g.gres_type.as_deref(),
            // A read count is at most u32::MAX (parse_count).
            count: u32::try_from(g.count).unwrap_or(u32::MAX),
        })
    }

    /// The typed GPU entries (`gres:gpu:TYPE:COUNT`) as `(type, count)`, in the text's order.
    pub fn typed(&self) -> impl Iterator<Item = (&str, u32)> {
        self.gpus().filter_map(|g| Some((g.gres_type?, g.count)))
    }

    /// The text with every GPU entry of a count above 0 asking for `count` instances of
    /// `to` ([`TresList::set_gpu`]: other entries and the `gres:`/`gres/` form kept); `None`
    /// when the text could not be read or has no such entry.
    pub fn retyped(&self, to: &str, count: u32) -> Option<String> {
        let mut list = self.read.clone().ok()?;
        list.set_gpu(Some(to), u64::from(count)).then(|| list.render())
    }
}

impl Default for GpuRequest {
    fn default() -> Self {
        Self::parse(String::new())
    }
}

impl From<&str> for GpuRequest {
    fn from(text: &str) -> Self {
        Self::parse(text)
    }
}

impl From<String> for GpuRequest {
    fn from(text: String) -> Self {
        Self::parse(text)
    }
}

impl PartialEq<str> for GpuRequest {
    fn eq(&self, other: &str) -> bool {
        self.text == other
    }
}

impl PartialEq<&str> for GpuRequest {
    fn eq(&self, other: &&str) -> bool {
        self.text == *other
    }
}

impl fmt::Debug for GpuRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The entries follow from the text.
        f.debug_tuple("GpuRequest").field(&self.text).finish()
    }
}

impl fmt::Display for GpuRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// White space as C's `isspace` knows it (what Slurm skips), not Unicode's: an entry such as
/// `gres:gpu\u{a0}` is not a GPU request to Slurm, so it is not one here either (found by
/// fuzzing: it was trimmed, read as `gres:gpu` and rewritten).
const C_SPACE: [char; 6] = [' ', '\t', '\n', '\x0b', '\x0c', '\r'];

fn c_trim(raw: &str) -> &str {
    raw.trim_matches(C_SPACE)
}

fn entry_name_is_gpu(raw: &str) -> bool {
    let body = strip_prefix(c_trim(raw)).1;
    let name = body.split([':', '=']).next().unwrap_or("");
    name.eq_ignore_ascii_case("gpu")
}

fn strip_prefix(raw: &str) -> (GresPrefix, &str) {
    if let Some(b) = raw.strip_prefix("gres:") {
        (GresPrefix::Colon, b)
    } else if let Some(b) = raw.strip_prefix("gres/") {
        (GresPrefix::Slash, b)
    } else {
        (GresPrefix::None, raw)
    }
}

/// `Ok(None)`: not a GRES entry. `Err`: a GRES entry that cannot be read.
fn parse_entry(raw: &str) -> Result<Option<GresEntry>, String> {
    let (prefix, body) = strip_prefix(c_trim(raw));
    // Without a prefix only `gpu...` counts as GRES: `cpu=2` and licenses stay as they are.
    if prefix == GresPrefix::None && !entry_name_is_gpu(body) {
        return Ok(None);
    }
    let (fields_part, eq_count) = match body.split_once('=') {
        Some((l, r)) => (l, Some(r)),
        None => (body, None),
    };
    let mut fields: Vec<&str> = fields_part.split(':').collect();
    let name = fields.remove(0);
    if name.is_empty() || fields.iter().any(|f| f.is_empty()) {
        return Err(
            "a field is empty (`::`, or a `:` at the end); write NAME[:TYPE][:COUNT], e.g. gpu:2g.20gb:1".into(),
        );
    }
    let (count_text, count_with_equals) = match eq_count {
        Some(c) => (Some(c), true),
        // A last field that Slurm reads as a number is the count (`1`, `+1`, ` 1`, `01`,
        // `-1`, `1k`); `1g.10gb` is a type.
        None if fields.last().is_some_and(|f| looks_numeric(f)) => (fields.pop(), false),
        None => (None, false),
    };
    if fields.len() > 1 {
        return Err("too many fields; write NAME[:TYPE][:COUNT], e.g. gpu:2g.20gb:1".into());
    }
    let count = match count_text {
        Some(c) => parse_count(c)?,
        None => 1,
    };
    Ok(Some(GresEntry {
        prefix,
        name: name.to_string(),
        gres_type: fields.pop().map(str::to_string),
        count,
        count_with_equals,
        count_written: count_text.is_some(),
    }))
}

/// What C's `strtoull` skips before a number: leading white space, then one sign.
fn strtoull_body(text: &str) -> (Option<char>, &str) {
    let t = text.trim_start_matches(C_SPACE);
    match t.chars().next() {
        Some(sign @ ('+' | '-')) => (Some(sign), &t[1..]),
        _ => (None, t),
    }
}

/// Whether Slurm would read `field` as a count rather than a type: after optional white
/// space and sign, `strtoull` finds digits, followed by nothing or by one unit letter
/// (`k`, `m`, `g`, `t`, `p`, any case). `1g.10gb` goes on after its unit letter: a type.
fn looks_numeric(field: &str) -> bool {
    let body = strtoull_body(field).1;
    let rest = body.trim_start_matches(|c: char| c.is_ascii_digit());
    rest.len() < body.len() && (rest.is_empty() || (rest.len() == 1 && "kKmMgGtTpP".contains(rest)))
}

/// Reads a GPU count the way Slurm's `strtoull` accepts it (white space, `+`, leading
/// zeros), so that `gpu:+1` is read as 1 and rewritten like `gpu:1`. A sign `-`, a unit
/// suffix (`1k`) or trailing text is refused, and so is a count above `u32::MAX`, which
/// Slurm would not schedule either; nothing is clamped.
fn parse_count(text: &str) -> Result<u64, String> {
    let (sign, digits) = strtoull_body(text);
    if sign == Some('-') {
        return Err("a GPU count cannot be negative; write a whole number, e.g. gpu:1".into());
    }
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err("the count is not a whole number; write it in plain digits, e.g. gpu:2".into());
    }
    let significant = digits.trim_start_matches('0');
    let too_many = || {
        format!(
            "the count is more than {}, the most GPUs a request may ask for",
            u32::MAX
        )
    };
    if significant.len() > 10 {
        return Err(too_many());
    }
    let n: u64 = if significant.is_empty() {
        0
    } else {
        significant.parse().map_err(|_| too_many())?
    };
    if n > u64::from(u32::MAX) {
        return Err(too_many());
    }
    Ok(n)
}

/// A node's GRES string (`gpu:3g.40gb:2(S:0),gpu:1g.10gb:1`, or `gres/gpu:...` forms) as
/// `(type, count)` pairs; entries of other GRES and untyped GPUs are left out.
pub fn parse_node_gres(gres: &str) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    // Commas inside parentheses ("(IDX:0,2)") do not separate entries.
    let mut depth = 0usize;
    let mut parts = Vec::new();
    let mut cur = String::new();
    for c in gres.chars() {
        match c {
            '(' => {
                depth += 1;
                cur.push(c);
            }
            ')' => {
                depth = depth.saturating_sub(1);
                cur.push(c);
            }
            ',' if depth == 0 => parts.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    parts.push(cur);
    for part in parts {
        let part = part.split('(').next().unwrap_or("").trim();
        let part = part
            .strip_prefix("gres/")
            .or_else(|| part.strip_prefix("gres:"))
            .unwrap_or(part);
        let fields: Vec<&str> = part.split(':').collect();
        // An empty type is no profile (found by fuzzing: `gpu::22` gave 22 instances of "").
        if fields.len() == 3 && fields[0] == "gpu" && !fields[1].is_empty() {
            if let Ok(n) = fields[2].parse() {
                out.push((fields[1].to_string(), n));
            }
        }
    }
    out
}

/// The GPU instances per type a node's GRES string shows ([`parse_node_gres`]): the counts
/// of one type added (saturating at `u32::MAX`), types with none left out.
pub fn node_gres_totals(gres: &str) -> BTreeMap<String, u32> {
    let mut t: BTreeMap<String, u32> = BTreeMap::new();
    for (ty, n) in parse_node_gres(gres) {
        let e = t.entry(ty).or_insert(0);
        *e = e.saturating_add(n);
    }
    t.retain(|_, n| *n > 0);
    t
}

/// Whether Slurm shows a node with exactly `want` GPU instances: the per-type totals of its
/// GRES string `gres` ([`node_gres_totals`]) are `want`'s, with no other type. A type `want`
/// asks 0 of never matches (a node's totals leave such a type out); a layout's totals
/// ([`crate::geometry::NodeLayout::totals`]) have none.
///
/// ```
/// use dynmig_core::gres::shows_totals;
/// use std::collections::BTreeMap;
/// let want = BTreeMap::from([("3g.40gb", 2), ("1g.10gb", 1)]);
/// assert!(shows_totals("gpu:3g.40gb:1(S:0),gpu:1g.10gb:1,gpu:3g.40gb:1", &want));
/// assert!(!shows_totals("gpu:3g.40gb:2", &want));
/// ```
pub fn shows_totals<K: AsRef<str>>(gres: &str, want: &BTreeMap<K, u32>) -> bool {
    let have = node_gres_totals(gres);
    have.len() == want.len() && want.iter().all(|(t, n)| have.get(t.as_ref()) == Some(n))
}

#[cfg(test)]
mod tests;
