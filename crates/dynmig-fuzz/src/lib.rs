//! dynmig's fuzz targets, on stable Rust (cargo-fuzz needs a nightly toolchain).
//!
//! A target is a proptest strategy that draws inputs and a property check that judges one
//! ([`runner::run`] draws, checks, times and shrinks). [`TARGETS`] lists them:
//! the Slurm plugins through their C entry points ([`targets::plugins`]), every parser of
//! user or admin input in dynmig-core ([`targets::parsers`]), and the readers of text from
//! other processes: the history wire format and Slurm's JSON ([`targets::wire`]).
//!
//! Properties everywhere: no panic (a panic caught by the plugins' `extern "C"` guards
//! counts), no abort (it kills the process: the campaign runs each target in a child process
//! and reports the signal), bounded time per input ([`runner::Settings::slow`]), bounded
//! memory (peak RSS per target), bounded error messages. The job_submit targets also check
//! that non-GPU TRES entries come back byte for byte and that every untyped GPU request is
//! either typed or refused, judged by an independent reading of the fields ([`oracle`]).
//!
//! `cargo test -p dynmig-fuzz` runs each target for a bounded number of inputs
//! (tests/targets.rs); `cargo run --release -p dynmig-fuzz -- --cases 1000000` runs a
//! campaign and prints a table (docs/fuzz.md).

pub mod gen;
pub mod oracle;
pub mod runner;
pub mod spank_stubs;
pub mod targets;

use runner::{Report, Settings};

/// One fuzz target.
pub struct Target {
    /// Name, for `--target` and the table.
    pub name: &'static str,
    /// What it feeds and checks, one line.
    pub what: &'static str,
    /// Runs it.
    pub run: fn(&Settings) -> Report,
}

macro_rules! target {
    ($name:literal, $what:literal, $strategy:expr, $check:path) => {
        Target {
            name: $name,
            what: $what,
            run: |s| runner::run($name, $strategy, |v| $check(v), s),
        }
    };
}

use targets::{parsers, plugins, wire};

/// Every target, in the table's order.
pub const TARGETS: &[Target] = &[
    target!(
        "job_submit_entry",
        "job_submit() of job_submit/dynmig with a job_desc_msg_t built in Rust",
        plugins::job_desc(),
        plugins::check_submit
    ),
    target!(
        "job_modify_entry",
        "job_modify() of job_submit/dynmig with a job_desc_msg_t built in Rust",
        plugins::job_desc(),
        plugins::check_modify
    ),
    target!(
        "spank_option",
        "libspank_dynmig.so (dlopen): the option callback, then init_post_opt",
        plugins::spank_calls(),
        plugins::check_spank
    ),
    target!(
        "hints",
        "parse_hint, hints_from_spank_env",
        parsers::hints(),
        parsers::check_hints
    ),
    target!(
        "sizes",
        "parse_size, format_size",
        parsers::sizes(),
        parsers::check_sizes
    ),
    target!(
        "tres",
        "TresList parse, render, set_gpu",
        gen::tres_field(),
        parsers::check_tres
    ),
    target!(
        "config_toml",
        "parse_config (dynmig.toml)",
        parsers::configs(),
        parsers::check_config
    ),
    target!(
        "layouts",
        "ProfileCounts::parse, NodeLayout::parse",
        parsers::layouts(),
        parsers::check_layouts
    ),
    target!(
        "node_lists",
        "expand_hostlist",
        parsers::node_lists(),
        parsers::check_node_lists
    ),
    target!(
        "migparted_yaml",
        "migparted::import, export",
        parsers::migparted_input(),
        parsers::check_migparted
    ),
    target!(
        "protocol_texts",
        "decision record, journal, plans, drain reason, Extra, history snapshot, events",
        parsers::protocol(),
        parsers::check_protocol
    ),
    target!(
        "history_wire",
        "JobRecord::from_wire, from_spool",
        wire::history_wire(),
        wire::check_history_wire
    ),
    target!(
        "history_auth_comment",
        "munge check_line, check_metadata, socket_from_conf, accounting decode_comment",
        wire::munge_and_comments(),
        wire::check_munge_and_comments
    ),
    target!(
        "slurm_json_sacct",
        "records_from_sacct (sacct --json)",
        wire::sacct(),
        wire::check_sacct
    ),
    target!(
        "slurm_json_jobs",
        "parse_jobs (squeue --json)",
        wire::slurm_jobs(),
        wire::check_slurm_jobs
    ),
    target!(
        "slurm_json_nodes",
        "parse_nodes (sinfo --json), parse_node_gres",
        wire::slurm_nodes(),
        wire::check_slurm_nodes
    ),
];

/// The target named `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

/// Slurm's `log_options_t` (src/common/log.h, 22.05 to 26.05): three levels, three flags.
#[repr(C)]
struct LogOptions {
    stderr_level: libc::c_int,
    syslog_level: libc::c_int,
    logfile_level: libc::c_int,
    prefix_level: bool,
    buffered: bool,
    raw: bool,
}

extern "C" {
    fn slurm_log_init(
        argv0: *mut libc::c_char,
        opts: LogOptions,
        fac: libc::c_int,
        logfile: *mut libc::c_char,
    ) -> libc::c_int;
}

/// Silences libslurm's log (the plugins log every decision at info level, to stderr outside
/// slurmctld) unless `DYNMIG_FUZZ_SLURM_LOG` is set.
pub fn quiet_slurm_log() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("DYNMIG_FUZZ_SLURM_LOG").is_some() {
            return;
        }
        let quiet = LogOptions {
            stderr_level: 0,
            syslog_level: 0,
            logfile_level: 0,
            prefix_level: false,
            buffered: false,
            raw: false,
        };
        // SAFETY: LOG_LEVEL_QUIET everywhere, no log file; argv0 is only copied.
        unsafe {
            slurm_log_init(
                c"dynmig-fuzz".as_ptr() as *mut libc::c_char,
                quiet,
                0,
                std::ptr::null_mut(),
            );
        }
    });
}
