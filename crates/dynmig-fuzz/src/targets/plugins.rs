//! The Slurm plugins through their C entry points.
//!
//! - `job_submit_entry`, `job_modify_entry`: `job_submit`/`job_modify` of job_submit/dynmig,
//!   linked in, with a `job_desc_msg_t` built here with libslurm's allocator, as slurmctld
//!   hands it over: NULL or non-UTF-8 fields, huge strings, TRES and GRES in the forms of
//!   every release, SPANK environment entries (NULL ones included), an operator's
//!   AdminComment, an `err_msg` an earlier plugin set. The plugin's state is installed by its
//!   own `init` from one of four configurations (policies, GPU models, a history snapshot).
//! - `spank_option`: `libspank_dynmig.so` loaded with `dlopen` as Slurm loads it, its
//!   `slurm_spank_init` run against a stub SPANK API ([`crate::spank_stubs`]) that records
//!   the options it registers, then the registered option callback called with hostile values
//!   and `slurm_spank_init_post_opt` after each.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::{Mutex, OnceLock, PoisonError};

use dynmig_core::hints::{parse_hint, Hints, OPTIONS};
use dynmig_core::protocol::decision::DecisionRecord;
use job_submit_dynmig::entry::{fini, init, job_modify, job_submit, NOT_SUPPORTED, REJECT};
use proptest::prelude::*;
use slurm_sys::{job_desc_msg_t, slurm_xfree, slurm_xstrdup, SLURM_SUCCESS};

use crate::gen;
use crate::oracle;

/// Bytes with a readable `Debug` (`b"gres:gpu:\xff"`).
#[derive(Clone, PartialEq, Eq)]
pub struct Bytes(pub Vec<u8>);

impl std::fmt::Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "b\"{}\"", self.0.escape_ascii())
    }
}

/// A job description as slurmctld would hand it to the plugin.
#[derive(Debug, Clone)]
pub struct JobDesc {
    /// Which of [`CONFIGS`] the plugin runs with.
    pub config: usize,
    /// `tres_per_node`, `tres_per_job`, `tres_per_socket`, `tres_per_task` (`None`: NULL).
    pub tres: [Option<Bytes>; 4],
    /// `spank_job_env` entries (`None`: a NULL pointer in the array).
    pub spank_env: Vec<Option<Bytes>>,
    /// `name`.
    pub name: Option<Bytes>,
    /// `admin_comment` (an operator's `--admin-comment`).
    pub admin_comment: Option<Bytes>,
    /// `*err_msg` as an earlier job_submit plugin left it.
    pub err_msg: Option<Bytes>,
    /// `user_id` and `submit_uid`.
    pub uid: u32,
}

/// The configurations the plugin is initialised with (`@SNAPSHOT@` is replaced by the path
/// of a history snapshot).
pub const CONFIGS: [&str; 4] = [
    "version = 1\n[[node_group]]\nname = \"a\"\nnodes = \"n1\"\ngpu_model = \"A100-80GB\"\ngpus = 1\nbackend = \"simulated\"\n",
    "version = 1\n[paths]\nhistory_snapshot = \"@SNAPSHOT@\"\n[jobs]\nwhole_gpu = \"estimate\"\nmulti_gpu = \"reject\"\n\
     [[node_group]]\nname = \"a\"\nnodes = \"a[1-4]\"\ngpu_model = \"A100-40GB\"\ngpus = 2\nbackend = \"simulated\"\n\
     [[node_group]]\nname = \"h\"\nnodes = \"h[01-02]\"\ngpu_model = \"H100-80GB\"\ngpus = 8\nbackend = \"simulated\"\n",
    "version = 1\n[jobs]\nwhole_gpu = \"reject\"\n[[node_group]]\nname = \"a\"\nnodes = \"n[1-2]\"\ngpu_model = \"A30-24GB\"\ngpus = 4\nbackend = \"simulated\"\n",
    "version = 1\n[jobs]\nwhole_gpu = \"estimate\"\n[estimator]\ndefault_mem = \"30G\"\n\
     [[node_group]]\nname = \"b\"\nnodes = \"b1\"\ngpu_model = \"H200-141GB\"\ngpus = 1\nbackend = \"simulated\"\n\
     [[node_group]]\nname = \"a\"\nnodes = \"a1\"\ngpu_model = \"A100-80GB\"\ngpus = 1\nbackend = \"simulated\"\n",
];

/// The history snapshot of configuration 1: user 1000's job `ft` and user 0's unnamed job.
const SNAPSHOT: &str =
    "1000\t5\t12884901888\t12884901888\t0\tft\n0\t9\t999999999999\t999999999999\t3\t\n1000\t1\t1\t1\t0\tone\n";

/// The longest message dynmig may add to `err_msg`, bytes.
pub const MAX_MESSAGE: usize = 2048;
/// The longest message of the SPANK option callback, bytes: the value quoted cut to 100
/// characters (up to 400 bytes) and the list of what is allowed.
pub const MAX_OPTION_MESSAGE: usize = 1024;

fn opt_bytes(s: impl Strategy<Value = Vec<u8>>) -> impl Strategy<Value = Option<Bytes>> {
    s.prop_map(|b| Some(Bytes(b)))
}

/// A TRES field set in `percent` of the jobs (UTF-8 or not).
fn tres_bytes(percent: u32) -> BoxedStrategy<Option<Bytes>> {
    prop_oneof![
        100 - percent => Just(None),
        percent => opt_bytes(gen::c_bytes_from(gen::tres_field())),
    ]
    .boxed()
}

/// Job descriptions.
pub fn job_desc() -> impl Strategy<Value = JobDesc> {
    let names = prop_oneof![
        1 => Just(None),
        2 => Just(Some(Bytes(b"ft".to_vec()))),
        2 => opt_bytes(gen::c_bytes_from(gen::text())),
    ];
    let comments = prop_oneof![
        6 => Just(None),
        1 => Just(Some(Bytes(Vec::new()))),
        1 => Just(Some(Bytes(b"operator: keep me".to_vec()))),
        1 => Just(Some(Bytes(b"dynmig/v1 profile=1g.10gb count=1 mem=9663676416 source=mig-mem".to_vec()))),
        1 => opt_bytes(gen::c_bytes_from(gen::text())),
    ];
    let errs = prop_oneof![
        8 => Just(None),
        1 => Just(Some(Bytes(b"lua: earlier plugin".to_vec()))),
        1 => Just(Some(Bytes(Vec::new()))),
    ];
    (
        0..CONFIGS.len(),
        [tres_bytes(90), tres_bytes(12), tres_bytes(6), tres_bytes(6)],
        gen::spank_env().prop_map(|v| v.into_iter().map(|e| e.map(Bytes)).collect::<Vec<_>>()),
        names,
        comments,
        errs,
        prop_oneof![Just(1000u32), Just(0), any::<u32>()],
    )
        .prop_map(|(config, tres, spank_env, name, admin_comment, err_msg, uid)| JobDesc {
            config,
            tres,
            spank_env,
            name,
            admin_comment,
            err_msg,
            uid,
        })
}

/// Serialises the plugin's global state: `init` with another configuration, then one call.
static PLUGIN: Mutex<Option<usize>> = Mutex::new(None);

fn config_dir() -> &'static std::path::Path {
    static DIR: OnceLock<std::path::PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("dynmig-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let snap = dir.join("snapshot.tsv");
        std::fs::write(&snap, SNAPSHOT).expect("snapshot");
        for (i, c) in CONFIGS.iter().enumerate() {
            let text = c.replace("@SNAPSHOT@", &snap.display().to_string());
            std::fs::write(dir.join(format!("c{i}.toml")), text).expect("config");
        }
        dir
    })
}

/// Makes `config` the plugin's configuration (through its own `init`).
fn ensure_config(current: &mut Option<usize>, config: usize) {
    if *current == Some(config) {
        return;
    }
    crate::quiet_slurm_log();
    let path = config_dir().join(format!("c{config}.toml"));
    std::env::set_var(job_submit_dynmig::state::CONFIG_ENV, &path);
    if current.is_some() {
        fini();
    }
    assert_eq!(init(), SLURM_SUCCESS, "init never fails");
    match job_submit_dynmig::state::current().as_deref() {
        Some(job_submit_dynmig::state::State::Ready(_)) => {}
        other => panic!("config {config} did not load: {other:?}"),
    }
    *current = Some(config);
}

/// A string allocated by libslurm's xmalloc; NULL for `None`.
unsafe fn xdup(b: &Option<Bytes>) -> *mut c_char {
    match b {
        None => std::ptr::null_mut(),
        Some(b) => {
            let c = CString::new(b.0.clone()).expect("generators make no NUL");
            slurm_xstrdup(c.as_ptr())
        }
    }
}

/// Reads and frees an xmalloc'd string.
unsafe fn take(p: &mut *mut c_char) -> Option<Vec<u8>> {
    let out = (!p.is_null()).then(|| CStr::from_ptr(*p).to_bytes().to_vec());
    slurm_xfree(p as *mut *mut c_char as *mut *mut c_void);
    out
}

/// What the call left behind.
#[derive(Debug)]
struct After {
    rc: c_int,
    tres: [Option<Vec<u8>>; 4],
    admin_comment: Option<Vec<u8>>,
    err_msg: Option<Vec<u8>>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Call {
    Submit,
    Modify,
}

/// Builds the job description, makes the call, reads everything back and frees it.
fn call(input: &JobDesc, which: Call) -> After {
    let mut current = PLUGIN.lock().unwrap_or_else(PoisonError::into_inner);
    ensure_config(&mut current, input.config);
    let env: Vec<Option<CString>> = input
        .spank_env
        .iter()
        .map(|e| e.as_ref().map(|b| CString::new(b.0.clone()).expect("no NUL")))
        .collect();
    let mut env_ptrs: Vec<*mut c_char> = env
        .iter()
        .map(|e| e.as_ref().map_or(std::ptr::null_mut(), |c| c.as_ptr() as *mut c_char))
        .collect();
    // SAFETY: job_desc_msg_t is plain C data (all-zero: every pointer NULL); every string
    // is allocated with libslurm's xmalloc as slurmctld's are, and freed with xfree.
    unsafe {
        let mut d: job_desc_msg_t = std::mem::zeroed();
        d.tres_per_node = xdup(&input.tres[0]);
        d.tres_per_job = xdup(&input.tres[1]);
        d.tres_per_socket = xdup(&input.tres[2]);
        d.tres_per_task = xdup(&input.tres[3]);
        d.name = xdup(&input.name);
        d.admin_comment = xdup(&input.admin_comment);
        d.user_id = input.uid;
        if !env_ptrs.is_empty() {
            d.spank_job_env = env_ptrs.as_mut_ptr();
            d.spank_job_env_size = env_ptrs.len() as _;
        }
        let mut err = xdup(&input.err_msg);
        let rc = match which {
            Call::Submit => job_submit(&mut d, input.uid, &mut err),
            Call::Modify => modify(&mut d, input.uid, &mut err),
        };
        let after = After {
            rc,
            tres: [
                take(&mut d.tres_per_node),
                take(&mut d.tres_per_job),
                take(&mut d.tres_per_socket),
                take(&mut d.tres_per_task),
            ],
            admin_comment: take(&mut d.admin_comment),
            err_msg: take(&mut err),
        };
        take(&mut d.name);
        after
    }
}

unsafe fn modify(d: &mut job_desc_msg_t, uid: u32, err: &mut *mut c_char) -> c_int {
    #[cfg(slurm_2302_plus)]
    return job_modify(d, std::ptr::null_mut(), uid, err);
    #[cfg(not(slurm_2302_plus))]
    {
        let _ = err;
        job_modify(d, std::ptr::null_mut(), uid)
    }
}

fn bytes(b: &Option<Bytes>) -> Option<&[u8]> {
    b.as_ref().map(|b| b.0.as_slice())
}

fn show(b: Option<&[u8]>) -> String {
    b.map_or("NULL".into(), |b| {
        format!("'{}'", crate::runner::cut(&String::from_utf8_lossy(b), 200))
    })
}

const FIELDS: [&str; 4] = ["tres_per_node", "tres_per_job", "tres_per_socket", "tres_per_task"];

/// The properties both calls share.
fn judge(input: &JobDesc, after: &After, which: Call) -> Result<(), String> {
    let before: Vec<Option<&[u8]>> = input.tres.iter().map(bytes).collect();
    let now: Vec<Option<&[u8]>> = after.tres.iter().map(Option::as_deref).collect();
    let comment_before = bytes(&input.admin_comment);
    let err_before = bytes(&input.err_msg);
    // NOT_SUPPORTED: an update the running release cannot carry out (dynmig_core::modify).
    if after.rc == REJECT || (which == Call::Modify && after.rc == NOT_SUPPORTED) {
        if before != now {
            return Err(format!("refused, yet a TRES field changed: {before:?} -> {now:?}"));
        }
        if after.admin_comment.as_deref() != comment_before {
            return Err("refused, yet admin_comment changed".into());
        }
        // 22.05's job_modify has no err_msg: the reason goes to the log only.
        let has_err_msg = which == Call::Submit || cfg!(slurm_2302_plus);
        if has_err_msg {
            let msg = after.err_msg.as_deref().ok_or("refused without a message in err_msg")?;
            let msg = String::from_utf8_lossy(msg);
            let own = match err_before.filter(|e| !e.is_empty()) {
                Some(prev) => {
                    let prefix = format!("{}; ", String::from_utf8_lossy(prev));
                    msg.strip_prefix(&prefix)
                        .ok_or_else(|| format!("an earlier plugin's err_msg was not kept first: '{msg}'"))?
                        .to_string()
                }
                None => msg.to_string(),
            };
            if !own.starts_with("dynmig: ") {
                return Err(format!(
                    "refusal message does not start 'dynmig: ': '{}'",
                    crate::runner::cut(&own, 200)
                ));
            }
            if own.len() > MAX_MESSAGE {
                return Err(format!("refusal message of {} bytes (bound {MAX_MESSAGE})", own.len()));
            }
        }
        return Ok(());
    }
    if after.rc != SLURM_SUCCESS {
        return Err(format!(
            "returned {} (neither SLURM_SUCCESS nor the refusal code)",
            after.rc
        ));
    }
    if after.err_msg.as_deref() != err_before {
        return Err(format!(
            "accepted, yet err_msg changed to {}",
            show(after.err_msg.as_deref())
        ));
    }
    let texts: Option<Vec<Option<&str>>> = before
        .iter()
        .map(|b| match b {
            None => Some(None),
            Some(b) => std::str::from_utf8(b).ok().map(Some),
        })
        .collect();
    let Some(texts) = texts else {
        // A field that is not UTF-8: nothing may change (a GPU job is refused).
        if before != now || after.admin_comment.as_deref() != comment_before {
            return Err(format!("a field is not UTF-8, yet the job was changed: {now:?}"));
        }
        return Ok(());
    };
    for i in 0..4 {
        let out = match now[i] {
            None => None,
            Some(b) => Some(std::str::from_utf8(b).map_err(|_| format!("{} is no longer UTF-8", FIELDS[i]))?),
        };
        let kept_in = texts[i].map(oracle::non_gpu).unwrap_or_default();
        let kept_out = out.map(oracle::non_gpu).unwrap_or_default();
        if kept_in != kept_out {
            return Err(format!(
                "{}: non-GPU entries not kept byte for byte: {kept_in:?} -> {kept_out:?}",
                FIELDS[i]
            ));
        }
        if let Some(e) = out.and_then(|o| oracle::entries(o).into_iter().find(|e| e.untyped_gpu())) {
            return Err(format!(
                "accepted with an untyped GPU request left in {}: '{}' (was {})",
                FIELDS[i],
                crate::runner::cut(e.raw, 100),
                show(before[i])
            ));
        }
    }
    let comment_after = after.admin_comment.as_deref();
    match which {
        Call::Modify => {
            if comment_after != comment_before {
                return Err("an update changed admin_comment".into());
            }
        }
        Call::Submit => {
            let was_empty = comment_before.filter(|c| !c.is_empty()).is_none();
            if !was_empty && comment_after != comment_before {
                return Err("an operator's admin_comment was replaced".into());
            }
            if was_empty && comment_after != comment_before {
                let text =
                    std::str::from_utf8(comment_after.unwrap_or_default()).map_err(|_| "admin_comment not UTF-8")?;
                DecisionRecord::parse(text)
                    .map_err(|e| format!("admin_comment '{text}' is not a decision record: {e}"))?;
            }
            if was_empty && before != now && comment_after == comment_before {
                return Err("rewritten without a decision record in an empty admin_comment".into());
            }
        }
    }
    Ok(())
}

/// `job_submit` property check.
pub fn check_submit(input: &JobDesc) -> Result<(), String> {
    let after = call(input, Call::Submit);
    judge(input, &after, Call::Submit)
}

/// What a call did, for the generator's coverage test: `(refused, rewritten)`.
pub fn outcome(input: &JobDesc, modify: bool) -> (bool, bool) {
    let after = call(input, if modify { Call::Modify } else { Call::Submit });
    let before: Vec<Option<&[u8]>> = input.tres.iter().map(bytes).collect();
    let now: Vec<Option<&[u8]>> = after.tres.iter().map(Option::as_deref).collect();
    (after.rc == REJECT || after.rc == NOT_SUPPORTED, before != now)
}

/// `job_modify` property check.
pub fn check_modify(input: &JobDesc) -> Result<(), String> {
    let after = call(input, Call::Modify);
    judge(input, &after, Call::Modify)
}

// ---------------------------------------------------------------------------------------
// SPANK

type OptionCallback = unsafe extern "C" fn(c_int, *const c_char, c_int) -> c_int;
type SpankHook = unsafe extern "C" fn(*mut c_void, c_int, *const *const c_char) -> c_int;

/// The loaded SPANK plugin.
struct Spank {
    post_opt: SpankHook,
    /// Registered options: name, `val`, callback.
    options: Vec<(String, c_int, OptionCallback)>,
}

// SAFETY: function pointers into a library that stays loaded.
unsafe impl Send for Spank {}

/// `libspank_dynmig.so`: `DYNMIG_FUZZ_SPANK_SO`, else next to this executable (cargo puts
/// it in `target/<profile>/deps`, which is where tests run from and one below binaries).
pub fn spank_library() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("DYNMIG_FUZZ_SPANK_SO") {
        return p.into();
    }
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().expect("exe dir");
    for candidate in [dir.join("libspank_dynmig.so"), dir.join("deps/libspank_dynmig.so")] {
        if candidate.exists() {
            return candidate;
        }
    }
    dir.join("deps/libspank_dynmig.so")
}

fn spank() -> &'static Mutex<Spank> {
    static SPANK: OnceLock<Mutex<Spank>> = OnceLock::new();
    SPANK.get_or_init(|| {
        crate::quiet_slurm_log();
        crate::spank_stubs::linked();
        let path = spank_library();
        let c = CString::new(path.as_os_str().as_encoded_bytes()).expect("path");
        // SAFETY: loading a SPANK plugin as slurmd/sbatch do; the stub SPANK API is exported
        // by this executable (build.rs) for it to bind to.
        unsafe {
            let lib = libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
            assert!(
                !lib.is_null(),
                "dlopen {}: {}",
                path.display(),
                CStr::from_ptr(libc::dlerror()).to_string_lossy()
            );
            let sym = |name: &CStr| {
                let p = libc::dlsym(lib, name.as_ptr());
                assert!(!p.is_null(), "{} has no {name:?}", path.display());
                std::mem::transmute::<*mut c_void, SpankHook>(p)
            };
            let init = sym(c"slurm_spank_init");
            let post_opt = sym(c"slurm_spank_init_post_opt");
            let handle = std::ptr::NonNull::<c_void>::dangling().as_ptr();
            assert_eq!(init(handle, 0, std::ptr::null()), 0, "slurm_spank_init failed");
            let options = crate::spank_stubs::registered();
            Mutex::new(Spank { post_opt, options })
        }
    })
}

/// One command-line option as Slurm hands it to the callback.
#[derive(Debug, Clone)]
pub struct SpankCall {
    /// `val` (an index into the registered options; out of range too).
    pub val: c_int,
    /// The option's argument (`None`: NULL).
    pub optarg: Option<Bytes>,
}

/// Option callback calls.
pub fn spank_calls() -> impl Strategy<Value = SpankCall> {
    (
        prop_oneof![20 => 0..OPTIONS.len() as c_int, 1 => any::<c_int>(), 1 => Just(OPTIONS.len() as c_int)],
        prop_oneof![
            1 => Just(None),
            8 => opt_bytes(gen::hint_value().prop_map(String::into_bytes)),
            2 => opt_bytes(gen::c_bytes_from(gen::hint_value())),
        ],
    )
        .prop_map(|(val, optarg)| SpankCall { val, optarg })
}

/// The model of what the plugin holds: the last accepted value of each option.
static ACCEPTED: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

/// Calls the option callback, then `slurm_spank_init_post_opt`: the callback accepts exactly
/// what the core's [`parse_hint`] accepts; `init_post_opt` accepts exactly the pairs
/// [`Hints::check`] accepts; both return 0 or -1.
pub fn check_spank(input: &SpankCall) -> Result<(), String> {
    let spank = spank().lock().unwrap_or_else(PoisonError::into_inner);
    let mut accepted = ACCEPTED.lock().unwrap_or_else(PoisonError::into_inner);
    if spank.options.len() != OPTIONS.len() {
        return Err(format!(
            "{} options registered, expected {}",
            spank.options.len(),
            OPTIONS.len()
        ));
    }
    let arg = input
        .optarg
        .as_ref()
        .map(|b| CString::new(b.0.clone()).expect("no NUL"));
    let registered = usize::try_from(input.val).ok().and_then(|i| spank.options.get(i));
    // Slurm calls the callback of the option it matched, with that option's `val`.
    let cb = registered.map_or(spank.options[0].2, |o| o.2);
    // SAFETY: the plugin's callback, called as Slurm calls it.
    let rc = unsafe { cb(input.val, arg.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()), 0) };
    let expected = match (registered, &input.optarg) {
        (None, _) | (_, None) => None,
        (Some((name, _, _)), Some(b)) => std::str::from_utf8(&b.0)
            .ok()
            .and_then(|t| parse_hint(name, t).ok().map(|_| (name.clone(), t.to_string()))),
    };
    match (rc, &expected) {
        (0, Some((name, value))) => {
            accepted.retain(|(n, _)| n != name);
            accepted.push((name.clone(), value.clone()));
        }
        (-1, None) => {}
        _ => return Err(format!("option callback returned {rc}; the core says {expected:?}")),
    }
    let text = input.optarg.as_ref().and_then(|b| std::str::from_utf8(&b.0).ok());
    if let (Some((name, _, _)), Some(text)) = (registered, text) {
        if let Err(e) = parse_hint(name, text) {
            let msg = e.to_string();
            if msg.len() > MAX_OPTION_MESSAGE || !msg.starts_with(&format!("dynmig: --{name}")) {
                return Err(format!(
                    "bad message for --{name}: {} bytes: '{}'",
                    msg.len(),
                    crate::runner::cut(&msg, 200)
                ));
            }
        }
    }
    // SAFETY: as Slurm calls it after the options.
    let rc = unsafe { (spank.post_opt)(std::ptr::NonNull::<c_void>::dangling().as_ptr(), 0, std::ptr::null()) };
    let mut hints = Hints::default();
    for (name, value) in accepted.iter() {
        hints.set(parse_hint(name, value).expect("accepted before"));
    }
    let pair_ok = hints.check(dynmig_core::geometry::MODELS).is_ok();
    match (rc, pair_ok) {
        (0, true) | (-1, false) => Ok(()),
        _ => Err(format!(
            "init_post_opt returned {rc} for {accepted:?}; Hints::check ok = {pair_ok}"
        )),
    }
}
