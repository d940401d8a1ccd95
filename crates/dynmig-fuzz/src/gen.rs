//! Generators shared by the targets: hostile text, TRES fields of every Slurm release, SPANK
//! environment entries, and mutations of a corpus of valid encodings.
//!
//! Every strategy mixes well-formed pieces (so that deep paths are reached) with hostile
//! ones: empty, white space, signs, huge numbers, `%` conversions, control characters,
//! right-to-left marks, non-UTF-8 bytes (byte strategies only) and, rarely, huge strings.

use proptest::prelude::*;
use proptest::sample::select;

/// Tokens that break parsers: separators, signs, numbers at the edges of integer types, units,
/// format conversions, control and invisible characters.
pub const TOKENS: &[&str] = &[
    "",
    " ",
    "\t",
    "\n",
    "\r\n",
    "\u{a0}",
    "\u{2028}",
    "\u{202e}",
    "\u{feff}",
    "ÿ",
    "é",
    ":",
    "=",
    ",",
    ";",
    "/",
    ".",
    "+",
    "-",
    "x",
    "[",
    "]",
    "[1-3]",
    "[0-4294967295]",
    "(",
    ")",
    "{",
    "}",
    "\"",
    "'",
    "\\",
    "#",
    "%s",
    "%n",
    "0",
    "1",
    "01",
    "+1",
    "-1",
    "7",
    "1k",
    "1e3",
    "0x10",
    "1.5",
    "NaN",
    "inf",
    "127",
    "255",
    "65535",
    "2147483647",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999",
    "G",
    "GB",
    "GiB",
    "T",
    "Q",
    "gpu",
    "GPU",
    "gres",
    "gres:",
    "gres/",
    "shard",
    "mps",
    "license",
    "cpu",
    "mem",
    "1g.10gb",
    "1g.20gb",
    "2g.20gb",
    "3g.40gb",
    "4g.40gb",
    "7g.80gb",
    "1g.10gb+me",
    "1g.12gb",
    "9g.99gb",
    "a100",
    "dynmig/v1",
    "mig-mem",
    "mig_mem",
];

/// One of [`TOKENS`].
pub fn token() -> impl Strategy<Value = String> {
    select(TOKENS).prop_map(str::to_string)
}

/// Text from `pieces` and [`TOKENS`], joined.
pub fn joined(pieces: &'static [&'static str], max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(prop_oneof![3 => select(pieces), 1 => select(TOKENS)], 0..max).prop_map(|v| v.concat())
}

/// A huge string: a token repeated up to 256 KiB.
pub fn huge() -> impl Strategy<Value = String> {
    (
        prop_oneof![token(), Just("1".to_string()), Just("gpu:1,".to_string())],
        1usize..=256 * 1024,
    )
        .prop_map(|(t, n)| {
            let unit = if t.is_empty() { "A".to_string() } else { t };
            let mut s = unit.repeat(n / unit.len() + 1);
            let mut cut = n.min(s.len());
            while !s.is_char_boundary(cut) {
                cut -= 1;
            }
            s.truncate(cut);
            s
        })
}

/// Hostile text: printable ASCII, any Unicode, token soup, and (1 in 200) huge.
pub fn text() -> BoxedStrategy<String> {
    prop_oneof![
        60 => "[ -~]{0,24}",
        30 => "\\PC{0,12}",
        80 => proptest::collection::vec(token(), 0..6).prop_map(|v| v.concat()),
        1 => huge(),
    ]
    .boxed()
}

/// Bytes of a C string (no NUL): text, raw bytes, or text with an invalid UTF-8 byte.
pub fn c_bytes_from(text: BoxedStrategy<String>) -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        12 => text.clone().prop_map(String::into_bytes),
        1 => proptest::collection::vec(1u8..=255, 0..40),
        2 => (text, any::<prop::sample::Index>(), select(&[0xffu8, 0xc3, 0x80, 0xc0, 0xed, 0xfe][..]))
            .prop_map(|(t, i, b)| {
                let mut v = t.into_bytes();
                let at = if v.is_empty() { 0 } else { i.index(v.len() + 1) };
                v.insert(at, b);
                v
            }),
    ]
    .boxed()
}

/// GRES prefixes of every release: `gres:` (22.05, 23.02), `gres/` (23.11+), none (a user's or
/// a Lua script's form), and wrong ones.
const PREFIXES: &[&str] = &[
    "gres:", "gres:", "gres/", "gres/", "", "", " gres/", "gres: ", "GRES:", "gres//", "tres/",
];
const NAMES: &[&str] = &[
    "gpu", "gpu", "gpu", "gpu", "GPU", "Gpu", "gpus", "gpu_mem", "gpumem", "gp u", "gpu ",
];
const TYPES: &[&str] = &[
    "1g.10gb",
    "2g.20gb",
    "3g.40gb",
    "4g.40gb",
    "7g.80gb",
    "1g.20gb",
    "1g.10gb+me",
    "1G.10GB",
    "2g.24gb",
    "1g.12gb",
    "3g.47gb",
    "7g.141gb",
    "9g.99gb",
    "a100",
    "tesla",
    "nvidia_a100-sxm4-80gb",
    "1",
    "k",
    "1g",
    "0",
];
const COUNTS: &[&str] = &[
    "1",
    "1",
    "1",
    "2",
    "4",
    "8",
    "0",
    "00",
    "+1",
    " 1",
    "\t1",
    "01",
    "-1",
    "-0",
    "1k",
    "2M",
    "1 ",
    " +0",
    "4294967295",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999",
    "1.5",
    "0x1",
    "",
    "one",
];
/// Entries that are not GPU requests, as Slurm writes them in each release: they must come
/// back byte for byte.
pub const OTHER_ENTRIES: &[&str] = &[
    "cpu=2",
    "cpu=1",
    "mem=4G",
    "mem=4096M",
    "node=1",
    "billing=3",
    "energy=5",
    "fs/disk=10G",
    "license/foo:1",
    "license/foo=1",
    "license:bar:2",
    "gres/shard:4",
    "gres:shard:00",
    "gres:shard:gpu:1",
    "gres/shard=2",
    "gres:mps:100k",
    "gres/mps:50",
    "gres/gpumem:10G",
    "gres/gpu_foo:1",
    "gres:gpus:1",
    "gres/gpux",
    "gres:gpuarch:1",
    "gres/nic:1",
    "gres:craynetwork:1",
    "gres/tmpfs:1G",
    "gpumem=4G",
    "shard:2",
    "%s%n",
];

/// One GPU entry of a TRES field, in the forms of every release and wrong ones.
pub fn gpu_entry() -> impl Strategy<Value = String> {
    (
        select(PREFIXES),
        select(NAMES),
        prop_oneof![
            4 => Just(None),
            4 => select(TYPES).prop_map(|t| Some(t.to_string())),
            1 => text().prop_map(Some),
        ],
        prop_oneof![
            1 => Just(None),
            5 => (select(&[":", ":", ":", "="][..]), prop_oneof![6 => select(COUNTS).prop_map(str::to_string), 1 => "[0-9]{1,24}"])
                .prop_map(|(sep, c)| Some(format!("{sep}{c}"))),
        ],
        prop_oneof![12 => Just(String::new()), 1 => select(&[":", ":x", "(S:0)", " ", "\u{a0}", ":1:2"][..]).prop_map(str::to_string)],
    )
        .prop_map(|(prefix, name, ty, count, tail)| {
            let mut s = format!("{prefix}{name}");
            if let Some(t) = ty {
                s.push(':');
                s.push_str(&t);
            }
            if let Some(c) = count {
                s.push_str(&c);
            }
            s.push_str(&tail);
            s
        })
}

/// A GPU request as sbatch writes it in one release or another: `gres:gpu:1`,
/// `gres/gpu:2g.20gb:1`, `gres/gpu=2`, `gpu:4`.
pub fn clean_gpu_entry() -> impl Strategy<Value = String> {
    (
        select(&["gres:", "gres/", ""][..]),
        prop_oneof![6 => Just(""), 1 => select(&[":1g.10gb", ":2g.20gb", ":7g.80gb", ":a100", ":3g.20gb"][..])],
        select(&[":1", ":1", ":1", ":2", ":4", "=1", "=2", ""][..]),
    )
        .prop_map(|(p, t, c)| format!("{p}gpu{t}{c}"))
}

/// One TRES entry: a GPU request, another TRES, or hostile text.
pub fn tres_entry() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => clean_gpu_entry(),
        4 => gpu_entry(),
        4 => select(OTHER_ENTRIES).prop_map(str::to_string),
        1 => text(),
    ]
}

/// A TRES field (`tres_per_node` and friends): mostly one GPU entry among other TRES, else
/// any entries joined by `,` (with the odd empty entry or space).
pub fn tres_field() -> BoxedStrategy<String> {
    let one_gpu = (
        prop_oneof![3 => clean_gpu_entry(), 1 => gpu_entry()],
        proptest::collection::vec(
            prop_oneof![4 => select(OTHER_ENTRIES).prop_map(str::to_string), 1 => text()],
            0..3,
        ),
        any::<prop::sample::Index>(),
    )
        .prop_map(|(gpu, mut others, at)| {
            let i = at.index(others.len() + 1);
            others.insert(i, gpu);
            others.join(",")
        });
    prop_oneof![3 => one_gpu, 2 => any_entries()].boxed()
}

fn any_entries() -> BoxedStrategy<String> {
    proptest::collection::vec(
        (
            tres_entry(),
            prop_oneof![10 => Just(","), 1 => Just(",,"), 1 => Just(", "), 1 => Just(" ,")],
        ),
        0..5,
    )
    .prop_map(|v| {
        let mut s = String::new();
        for (i, (e, sep)) in v.iter().enumerate() {
            if i > 0 {
                s.push_str(sep);
            }
            s.push_str(e);
        }
        s
    })
    .boxed()
}

/// Option names as the SPANK environment carries them (`mig_mem`), the `-` form, and unknown
/// ones.
const SPANK_OPTIONS: &[&str] = &[
    "mig_mem",
    "mig_profile",
    "mig_model_params",
    "mig_dtype",
    "mig_phase",
    "mig_batch",
    "mig_seq",
    "mig-mem",
    "mig-profile",
    "mig_bogus",
    "",
];

/// Values of the `--mig-*` options: good, bad and at the edges.
pub const HINT_VALUES: &[&str] = &[
    "18G",
    "18g",
    "1",
    "0",
    "-1",
    "+5G",
    " 18G",
    "18 G",
    "18Q",
    "1T",
    "1025G",
    "80G",
    "79.9G",
    "0.5G",
    "1e3M",
    "18446744073709551615",
    "18446744073709551616K",
    "2g.20gb",
    "2G.20GB",
    "7g.80gb",
    "1g.10gb+me",
    "1g.20gb",
    "9g.99gb",
    "7B",
    "7b",
    "350M",
    "0B",
    "1.5B",
    "1000000B",
    "fp32",
    "fp16",
    "bf16",
    "int8",
    "int4",
    "fp8",
    "train",
    "infer",
    "2048",
    "4294967296",
    "",
];

/// A hint value.
pub fn hint_value() -> BoxedStrategy<String> {
    prop_oneof![4 => select(HINT_VALUES).prop_map(str::to_string), 2 => joined(HINT_VALUES, 3), 1 => text()].boxed()
}

/// A good value for each option, as the SPANK environment names it.
const GOOD_HINTS: &[(&str, &str)] = &[
    ("mig_mem", "18G"),
    ("mig_mem", "4G"),
    ("mig_mem", "9G"),
    ("mig_mem", "40G"),
    ("mig_mem", "79G"),
    ("mig_mem", "130G"),
    ("mig_profile", "1g.10gb"),
    ("mig_profile", "2g.20gb"),
    ("mig_profile", "3g.40gb"),
    ("mig_profile", "7g.80gb"),
    ("mig_profile", "1g.6gb"),
    ("mig_profile", "4g.24gb"),
    ("mig_model_params", "7B"),
    ("mig_model_params", "350M"),
];

/// The `spank_job_env` of a job: none, good hints, or any entries.
pub fn spank_env() -> BoxedStrategy<Vec<Option<Vec<u8>>>> {
    let good = select(GOOD_HINTS).prop_map(|(o, v)| Some(format!("_SLURM_SPANK_OPTION_dynmig_{o}={v}").into_bytes()));
    prop_oneof![
        3 => Just(Vec::new()),
        3 => proptest::collection::vec(good, 1..3),
        2 => proptest::collection::vec(spank_entry(), 0..5),
    ]
    .boxed()
}

/// One `spank_job_env` entry: NULL (`None`), a dynmig hint, another plugin's entry, no `=`,
/// or hostile bytes.
pub fn spank_entry() -> BoxedStrategy<Option<Vec<u8>>> {
    prop_oneof![
        1 => Just(None),
        8 => (select(SPANK_OPTIONS), hint_value())
            .prop_map(|(o, v)| Some(format!("_SLURM_SPANK_OPTION_dynmig_{o}={v}").into_bytes())),
        2 => Just(Some(b"_SLURM_SPANK_OPTION_other_opt=1".to_vec())),
        1 => Just(Some(b"_SLURM_SPANK_OPTION_dynmig_mig_mem".to_vec())),
        2 => c_bytes_from(text()).prop_map(Some),
        1 => (select(SPANK_OPTIONS), c_bytes_from(hint_value())).prop_map(|(o, v)| {
            let mut e = format!("_SLURM_SPANK_OPTION_dynmig_{o}=").into_bytes();
            e.extend(v);
            Some(e)
        }),
    ]
    .boxed()
}

/// Mutations of valid encodings: a corpus entry as it is, truncated, with a range deleted,
/// with a token inserted or a byte range replaced, or pure hostile text.
pub fn mutated(corpus: Vec<String>) -> BoxedStrategy<String> {
    let pick = select(corpus);
    prop_oneof![
        2 => pick.clone(),
        3 => (pick.clone(), any::<prop::sample::Index>()).prop_map(|(s, i)| {
            let at = floor(&s, i.index(s.len() + 1));
            s[..at].to_string()
        }),
        4 => (pick.clone(), proptest::collection::vec((any::<prop::sample::Index>(), text()), 1..4)).prop_map(|(mut s, edits)| {
            for (i, t) in edits {
                let at = floor(&s, i.index(s.len() + 1));
                s.insert_str(at, &t);
            }
            s
        }),
        4 => (pick.clone(), any::<prop::sample::Index>(), any::<prop::sample::Index>(), text()).prop_map(|(s, a, b, t)| {
            let (mut x, mut y) = (floor(&s, a.index(s.len() + 1)), floor(&s, b.index(s.len() + 1)));
            if x > y {
                std::mem::swap(&mut x, &mut y);
            }
            format!("{}{}{}", &s[..x], t, &s[y..])
        }),
        1 => text(),
    ]
    .boxed()
}

/// The largest char boundary of `s` at or below `i`.
pub fn floor(s: &str, i: usize) -> usize {
    let mut i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// A JSON value with hostile leaves (wrong types, huge and negative numbers, long strings,
/// deep nesting).
pub fn json_leaf() -> BoxedStrategy<serde_json::Value> {
    use serde_json::{json, Value};
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| serde_json::Number::from_f64(f)
            .map(Value::Number)
            .unwrap_or(Value::Null)),
        select(&[0i64, 1, -1, 4294967294, 4294967295, 4294967296, i64::MAX, i64::MIN][..]).prop_map(|n| json!(n)),
        text().prop_map(Value::String),
        (any::<bool>(), any::<i64>(), any::<bool>())
            .prop_map(|(set, n, inf)| json!({"set": set, "number": n, "infinite": inf})),
        proptest::collection::vec(text().prop_map(Value::String), 0..3).prop_map(Value::Array),
        Just(json!({})),
    ]
    .boxed()
}
