//! `dynmig-slurm-job ID...`: Slurm jobs' records as JSON, read with libslurm's
//! `slurm_load_job` (one RPC for each job, `SHOW_LOCAL`: no federation lookup first, which
//! was a second RPC per job), for Slurm 22.05. At most [`MAX_IDS`] ids a call; more than
//! [`ONE_BY_ONE_MAX`] are read with one `slurm_load_jobs` (one RPC for the whole queue, the
//! read `squeue` itself makes) and picked out.
//!
//! Why: 22.05's `squeue --json` ignores `--jobs` (squeue(1) of 22.05: "--json ... other
//! formatting and filtering arguments will be ignored"), so reading one job's JSON there costs
//! the whole queue's: with 10,000 queued jobs each GPU job's Epilog took 5 s (p50) and the
//! controller read the whole queue every pass (docs/results/queue-2026-11-28.md). From 23.02
//! `squeue --json --jobs=ID` is one job's RPC and this program is not used.
//!
//! What it prints: `{"jobs":[...]}` with the fields dynmig reads, named and shaped as 22.05's
//! `squeue --json` (Slurm's openapi plugin v0.0.38) writes them, so that the one parser
//! (`dynmig_slurm::json::parse_jobs`) reads both: `job_state` and `state_reason` as Slurm's
//! names, `exit_code` the raw wait status, `time_limit` in minutes (`null` when unlimited),
//! `priority`, `user_id` and `group_id` `null` for NO_VAL. A job slurmctld does not hold is
//! left out (one asked for alone: an empty list).
//!
//! Exit status: 0 printed; 1 Slurm answered an error (said on stderr); 2 bad arguments;
//! 3 not usable here: the program was built against another Slurm release than the
//! libslurm it finds, or finds none (the caller then reads with `squeue`). Struct layouts come
//! from the headers it was built with (crates/slurm-sys), so they are used only when
//! `slurm_api_version()` of the library opened at run time has the same major and minor.
//!
//! Runs as whoever calls it (the Epilog: root; the controller), reads no file but
//! `slurm.conf` (through libslurm, `SLURM_CONF`), and is run by dynmig under a timeout and an
//! output cap (`dynmig_slurm::SlurmCommands`).
use serde_json::{json, Value};
use slurm_sys::{job_info_msg_t, slurm_job_info_t};
use std::ffi::{c_char, c_int, c_long, CStr};
use std::process::ExitCode;

/// Slurm 22.05's library API: `SLURM_API_CURRENT` 38 (Slurm's META of 22.05; Debian's package
/// libslurm38), what `slurm_api_version()` gives as `0x260000` (38 << 16).
const API_CURRENT_2205: u32 = 38;

/// Slurm 22.05's library file, `libslurm.so.<SLURM_API_CURRENT>`, and the unversioned link a
/// -dev package adds.
const LIBRARIES: [&str; 2] = ["libslurm.so.38", "libslurm.so"];

/// `SLURM_PROTOCOL_VERSION_ERROR` (slurm_errno.h): slurmctld is of another release than this
/// libslurm ("Incompatible versions of client and server code"): not usable here.
const PROTOCOL_VERSION_ERROR: c_int = slurm_sys::slurm_err_t::SLURM_PROTOCOL_VERSION_ERROR as c_int;

/// `ESLURM_INVALID_JOB_ID` (slurm_errno.h): slurmctld holds no such job.
const INVALID_JOB_ID: c_int = slurm_sys::slurm_err_t::ESLURM_INVALID_JOB_ID as c_int;

/// The most job ids one call reads (the controller's reads per pass, `READS_PER_PASS`).
const MAX_IDS: usize = 1000;

/// The most job ids read one RPC each; more are read with one whole-queue load. A job's
/// load costs slurmctld little; the whole queue's (what `squeue` loads every call) costs as
/// much as the queue is long, but it is one RPC. The controller's pass reads the 4-6 jobs
/// changed since the last one one by one: with 2 here, its pass p50 at 50,000 queued jobs
/// went from 0.48 s to 1.01 s (docs/results/queue-2026-11-28.md, fourth run). The history
/// service reads half a minute's ended jobs with one call (docs/history.md, "Job names").
const ONE_BY_ONE_MAX: usize = 8;

type Init = unsafe extern "C" fn(*const c_char);
type ApiVersion = unsafe extern "C" fn() -> c_long;
type LoadJob = unsafe extern "C" fn(*mut *mut job_info_msg_t, u32, u16) -> c_int;
type LoadJobs = unsafe extern "C" fn(libc::time_t, *mut *mut job_info_msg_t, u16) -> c_int;
type FreeJobInfo = unsafe extern "C" fn(*mut job_info_msg_t);
type GetErrno = unsafe extern "C" fn() -> c_int;
type StrError = unsafe extern "C" fn(c_int) -> *mut c_char;
type StateString = unsafe extern "C" fn(u32) -> *mut c_char;
type ReasonString = unsafe extern "C" fn(c_int) -> *const c_char;

enum Fail {
    /// Exit 1.
    Slurm(String),
    /// Exit 3.
    NotUsable(String),
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() || args.len() > MAX_IDS {
        return usage(&format!("1 to {MAX_IDS} job ids"));
    }
    let mut ids = Vec::with_capacity(args.len());
    for a in &args {
        match a.parse::<u32>() {
            Ok(n) if n > 0 => ids.push(n),
            _ => return usage(&format!("'{}' is not a job id (1 to 4294967295)", cut(a))),
        }
    }
    match read(&ids) {
        Ok(v) => {
            println!("{v}");
            ExitCode::SUCCESS
        }
        Err(Fail::Slurm(why)) => {
            eprintln!("dynmig-slurm-job: {why}");
            ExitCode::from(1)
        }
        Err(Fail::NotUsable(why)) => {
            eprintln!("dynmig-slurm-job: not usable here: {why}");
            ExitCode::from(3)
        }
    }
}

fn usage(why: &str) -> ExitCode {
    eprintln!("usage: dynmig-slurm-job JOB_ID... ({why})");
    ExitCode::from(2)
}

fn cut(s: &str) -> String {
    s.chars().take(40).collect()
}

/// The build's Slurm release as (major, minor).
fn built_for() -> (u32, u32) {
    let (major, minor, _) = slurm_sys::version();
    (major, minor)
}

fn read(ids: &[u32]) -> Result<Value, Fail> {
    if built_for() != (22, 5) {
        return Err(Fail::NotUsable(format!(
            "built for Slurm {}.{:02}, where `squeue --json --jobs` reads one job",
            built_for().0,
            built_for().1
        )));
    }
    let lib = LIBRARIES
        .iter()
        // RTLD_GLOBAL: the plugins libslurm loads (auth/munge, hash/k12) take their symbols
        // from it (as they do from slurmctld or a client linked with it).
        // SAFETY: loading libslurm runs its initialisers, which only set up its own state.
        .find_map(|name| {
            unsafe { libloading::os::unix::Library::open(Some(name), libc::RTLD_NOW | libc::RTLD_GLOBAL) }.ok()
        })
        .ok_or_else(|| Fail::NotUsable(format!("no {} found", LIBRARIES.join(" or "))))?;
    // SAFETY: the symbols have these C signatures in 22.05 (slurm.h; slurm_job_state_string and
    // slurm_job_reason_string are exported by libslurm with src/common/slurm_protocol_defs.h's
    // prototypes), checked below to be that release's library before any is called but the
    // version.
    unsafe {
        let sym = |name: &[u8]| {
            lib.get::<*const ()>(name).map(|s| *s).map_err(|e| {
                Fail::NotUsable(format!(
                    "libslurm has no {}: {e}",
                    String::from_utf8_lossy(&name[..name.len() - 1])
                ))
            })
        };
        let api_version: ApiVersion = std::mem::transmute(sym(b"slurm_api_version\0")?);
        let api = ((api_version() >> 16) & 0xff) as u32;
        if api != API_CURRENT_2205 {
            return Err(Fail::NotUsable(format!(
                "libslurm has API {api}, not 22.05's {API_CURRENT_2205}, which this program was built for"
            )));
        }
        let init: Init = std::mem::transmute(sym(b"slurm_init\0")?);
        let load_job: LoadJob = std::mem::transmute(sym(b"slurm_load_job\0")?);
        let free: FreeJobInfo = std::mem::transmute(sym(b"slurm_free_job_info_msg\0")?);
        let errno: GetErrno = std::mem::transmute(sym(b"slurm_get_errno\0")?);
        let strerror: StrError = std::mem::transmute(sym(b"slurm_strerror\0")?);
        let state_string: StateString = std::mem::transmute(sym(b"slurm_job_state_string\0")?);
        let reason_string: ReasonString = std::mem::transmute(sym(b"slurm_job_reason_string\0")?);
        init(std::ptr::null());
        let flags = (slurm_sys::SHOW_ALL | slurm_sys::SHOW_DETAIL | slurm_sys::SHOW_LOCAL) as u16;
        let mut jobs: Vec<Value> = Vec::with_capacity(ids.len());
        // The error of the call that just failed: another release's slurmctld makes the
        // program not usable here.
        let failed = |what: String| {
            let e = errno();
            if e == PROTOCOL_VERSION_ERROR {
                Fail::NotUsable(format!(
                    "slurmctld is not of 22.05, the release of libslurm here: {}",
                    text(strerror(e))
                ))
            } else {
                Fail::Slurm(format!("{what}: {}", text(strerror(e))))
            }
        };
        // The records of `msg` (those `keep` says), then `msg` freed.
        let mut take = |msg: *mut job_info_msg_t, keep: &dyn Fn(u32) -> bool| {
            if msg.is_null() {
                return;
            }
            let m = &*msg;
            if !m.job_array.is_null() {
                jobs.extend(
                    std::slice::from_raw_parts(m.job_array, m.record_count as usize)
                        .iter()
                        .filter(|j| keep(j.job_id))
                        .map(|j| job_json(j, state_string(j.job_state), reason_string(j.state_reason as c_int))),
                );
            }
            free(msg);
        };
        if ids.len() > ONE_BY_ONE_MAX {
            let load_jobs: LoadJobs = std::mem::transmute(sym(b"slurm_load_jobs\0")?);
            let want: std::collections::HashSet<u32> = ids.iter().copied().collect();
            let mut msg: *mut job_info_msg_t = std::ptr::null_mut();
            if load_jobs(0, &mut msg, flags) != slurm_sys::SLURM_SUCCESS {
                return Err(failed("slurm_load_jobs".into()));
            }
            take(msg, &|id| want.contains(&id));
        } else {
            for &id in ids {
                let mut msg: *mut job_info_msg_t = std::ptr::null_mut();
                if load_job(&mut msg, id, flags) != slurm_sys::SLURM_SUCCESS {
                    if errno() == INVALID_JOB_ID {
                        continue;
                    }
                    return Err(failed(format!("job {id}: slurm_load_job")));
                }
                take(msg, &|_| true);
            }
        }
        Ok(json!({ "jobs": jobs }))
    }
}

/// A C string as text; `None` for NULL (JSON `null`, as Slurm writes an unset string).
///
/// # Safety
/// `p` is NULL or a NUL-terminated string that lives for the call.
unsafe fn opt_text(p: *const c_char) -> Option<String> {
    (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned())
}

/// # Safety
/// As [`opt_text`].
unsafe fn text(p: *const c_char) -> String {
    opt_text(p).unwrap_or_default()
}

/// A 32-bit value, `null` for NO_VAL and INFINITE (as 22.05's JSON writes them).
fn set_or_null(n: u32) -> Value {
    if n == slurm_sys::NO_VAL || n == slurm_sys::INFINITE {
        Value::Null
    } else {
        json!(n)
    }
}

/// The user name of `uid` from the password database, as 22.05's JSON falls back to when the
/// record holds none.
fn user_name(uid: u32) -> Option<String> {
    let mut buf = vec![0 as c_char; 16 << 10];
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: the buffers outlive the call; `out` is NULL or points at `pw`.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut out) };
    if rc != 0 || out.is_null() {
        return None;
    }
    // SAFETY: getpwuid_r filled pw_name with a NUL-terminated string inside `buf`.
    unsafe { opt_text(pw.pw_name) }
}

/// One job as 22.05's `squeue --json` writes the fields dynmig reads.
///
/// # Safety
/// `j` is a record of a live `job_info_msg_t`; `state` and `reason` are NULL or strings.
unsafe fn job_json(j: &slurm_job_info_t, state: *const c_char, reason: *const c_char) -> Value {
    let user =
        opt_text(j.user_name).or_else(|| (j.user_id != slurm_sys::NO_VAL).then(|| user_name(j.user_id)).flatten());
    json!({
        "job_id": set_or_null(j.job_id),
        "name": opt_text(j.name),
        "user_name": user,
        "user_id": set_or_null(j.user_id),
        "group_id": set_or_null(j.group_id),
        "current_working_directory": opt_text(j.work_dir),
        "job_state": opt_text(state),
        "state_reason": opt_text(reason),
        "state_description": opt_text(j.state_desc),
        "tres_per_node": opt_text(j.tres_per_node),
        "tres_req_str": opt_text(j.tres_req_str),
        "nodes": opt_text(j.nodes),
        "submit_time": j.submit_time,
        "start_time": j.start_time,
        "end_time": j.end_time,
        "eligible_time": j.eligible_time,
        "deadline": j.deadline,
        "time_limit": set_or_null(j.time_limit),
        "priority": set_or_null(j.priority),
        "admin_comment": opt_text(j.admin_comment),
        "exit_code": j.exit_code,
        "restart_cnt": j.restart_cnt,
        "standard_error": opt_text(j.std_err),
        "standard_output": opt_text(j.std_out),
    })
}
