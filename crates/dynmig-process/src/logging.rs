//! The one logger of every dynmig process, behind the `log` facade.
//!
//! - **Where**: to journald when systemd connected stderr to the journal (`JOURNAL_STREAM`
//!   names stderr's device and inode: `systemd_journal_logger::connected_to_journal`), with
//!   the level as the entry's priority and `SYSLOG_IDENTIFIER` naming the daemon
//!   (`dynmig-controller`, `dynmig-agent`, `dynmig-history`); to stderr otherwise, one line
//!   per record with time, level and module (env_logger's format).
//! - **What**: `RUST_LOG` when it is set (env_logger's syntax: `debug`,
//!   `info,dynmig_node=debug`); otherwise the config's `[log] level` once the config is read
//!   ([`apply_config_level`]), `info` before.
//!
//! The Slurm plugins do not use this: inside slurmctld and the client commands they log
//! through Slurm's own functions with the `dynmig:` prefix.

use dynmig_core::config::LogLevel;
use log::{LevelFilter, Log, Metadata, Record};

/// The environment variable that overrides `[log] level`.
pub const RUST_LOG: &str = "RUST_LOG";

/// Where records go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sink {
    /// The systemd journal.
    Journal,
    /// Standard error.
    Stderr,
}

enum Inner {
    Journal(systemd_journal_logger::JournalLog),
    Stderr(env_logger::Logger),
}

struct Logger {
    filter: env_filter::Filter,
    inner: Inner,
}

impl Log for Logger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        self.filter.enabled(metadata)
    }

    fn log(&self, record: &Record<'_>) {
        if !self.filter.matches(record) {
            return;
        }
        match &self.inner {
            Inner::Journal(j) => j.log(record),
            Inner::Stderr(e) => e.log(record),
        }
    }

    fn flush(&self) {
        match &self.inner {
            Inner::Journal(j) => j.flush(),
            Inner::Stderr(e) => e.flush(),
        }
    }
}

/// The filter for `rust_log` (the value of `RUST_LOG`, if set): its directives, or every
/// level (the global maximum, set from the config, then decides).
///
/// # Errors
/// `RUST_LOG` does not parse; the message quotes it and gives an example.
pub fn filter_for(rust_log: Option<&str>) -> Result<env_filter::Filter, String> {
    let mut b = env_filter::Builder::new();
    match rust_log.map(str::trim).filter(|s| !s.is_empty()) {
        Some(spec) => {
            b.try_parse(spec).map_err(|e| {
                format!("RUST_LOG='{spec}': {e}; e.g. RUST_LOG=debug or RUST_LOG=info,dynmig_node=debug")
            })?;
        }
        None => {
            b.filter_level(LevelFilter::Trace);
        }
    }
    Ok(b.build())
}

/// Installs the logger for the process (once; a second call changes nothing) and returns
/// where it writes. `daemon` names the process in the journal (`dynmig-<daemon>`); `None` for
/// the administrator's commands and the Prolog/Epilog, named `dynmig`. A `RUST_LOG` that does
/// not parse is reported on stderr and ignored: a typo in a site's environment must not fail
/// every Prolog.
pub fn init(daemon: Option<&str>) -> Sink {
    let rust_log = std::env::var(RUST_LOG).ok().filter(|s| !s.trim().is_empty());
    let (filter, max) = match filter_for(rust_log.as_deref()) {
        Ok(f) if rust_log.is_some() => {
            let max = f.filter();
            (f, max)
        }
        Ok(f) => (f, LevelFilter::Info),
        Err(e) => {
            eprintln!("dynmig: {e}; ignored");
            (filter_for(None).expect("no directives always parse"), LevelFilter::Info)
        }
    };
    let journal = if systemd_journal_logger::connected_to_journal() {
        systemd_journal_logger::JournalLog::new().ok()
    } else {
        None
    };
    let (inner, sink) = match journal {
        Some(j) => {
            let id = daemon.map_or_else(|| "dynmig".to_string(), |d| format!("dynmig-{d}"));
            (Inner::Journal(j.with_syslog_identifier(id)), Sink::Journal)
        }
        None => {
            let e = env_logger::Builder::new()
                .filter_level(LevelFilter::Trace)
                .target(env_logger::Target::Stderr)
                .build();
            (Inner::Stderr(e), Sink::Stderr)
        }
    };
    if log::set_boxed_logger(Box::new(Logger { filter, inner })).is_ok() {
        log::set_max_level(max);
    }
    sink
}

/// Reports the error that ends a process and exits with status 1: under systemd (`sink`
/// [`Sink::Journal`]) one journal entry at error priority, otherwise one line on stderr
/// prefixed with `program` (`dynmig: ...`).
pub fn exit_failed(sink: Sink, program: &str, e: &anyhow::Error) -> ! {
    if sink == Sink::Journal {
        log::error!("{e:#}");
        log::logger().flush();
    } else {
        eprintln!("{program}: {e:#}");
    }
    std::process::exit(1)
}

/// Applies the config's `[log] level` unless `RUST_LOG` is set (which wins).
pub fn apply_config_level(level: LogLevel) {
    if std::env::var(RUST_LOG).is_ok_and(|s| !s.trim().is_empty()) {
        return;
    }
    log::set_max_level(level_filter(level));
}

/// The `log` crate's filter for a config level.
pub fn level_filter(level: LogLevel) -> LevelFilter {
    match level {
        LogLevel::Off => LevelFilter::Off,
        LogLevel::Error => LevelFilter::Error,
        LogLevel::Warn => LevelFilter::Warn,
        LogLevel::Info => LevelFilter::Info,
        LogLevel::Debug => LevelFilter::Debug,
        LogLevel::Trace => LevelFilter::Trace,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_log_directives_filter_by_module_and_bad_ones_are_named() {
        let f = filter_for(Some("warn,dynmig_node=debug")).unwrap();
        let meta = |target: &'static str, level| Metadata::builder().target(target).level(level).build();
        assert!(f.enabled(&meta("dynmig_node::agent", log::Level::Debug)));
        assert!(!f.enabled(&meta("dynmig_controller", log::Level::Info)));
        assert!(f.enabled(&meta("dynmig_controller", log::Level::Warn)));
        assert_eq!(f.filter(), LevelFilter::Debug);
        let e = filter_for(Some("dynmig_node=loud")).err().unwrap();
        assert!(
            e.contains("RUST_LOG='dynmig_node=loud'") && e.contains("RUST_LOG=debug"),
            "{e}"
        );
        // Unset or empty: everything passes the filter; the global level decides.
        for unset in [None, Some(" ")] {
            assert!(filter_for(unset).unwrap().enabled(&meta("x", log::Level::Trace)));
        }
    }

    #[test]
    fn config_levels_map_to_the_same_log_levels() {
        for l in LogLevel::ALL {
            assert_eq!(level_filter(l).as_str().to_ascii_lowercase(), l.name());
        }
    }
}
