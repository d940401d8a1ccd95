//! The plugin's one piece of global state: the submit policy, read from the configuration
//! in `init` and shared by concurrent `job_submit`/`job_modify` calls (Slurm 23.02+ may run
//! them in parallel) behind a read-write lock.

use std::path::{Path, PathBuf};
use std::sync::{PoisonError, RwLock};

use dynmig_core::config::{parse_config, Config};
use dynmig_core::submit::SubmitPolicy;

/// Environment variable of slurmctld naming the configuration file.
pub const CONFIG_ENV: &str = "DYNMIG_CONFIG";
/// The configuration file read when [`CONFIG_ENV`] is not set.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/slurm/dynmig.toml";

static POLICY: RwLock<Option<SubmitPolicy>> = RwLock::new(None);

/// Where the policy came from, for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A configuration file.
    File(PathBuf),
    /// The built-in defaults, because the default file does not exist.
    Embedded,
}

/// Reads the configuration: the file named by `DYNMIG_CONFIG`, else
/// `/etc/slurm/dynmig.toml`, else (only when that default file is absent) the embedded
/// defaults.
///
/// # Errors
/// A message naming the file: it cannot be read (a file named by `DYNMIG_CONFIG` must
/// exist) or is not a valid configuration.
pub fn load(env_path: Option<&str>) -> Result<(SubmitPolicy, Source), String> {
    load_from(env_path, Path::new(DEFAULT_CONFIG_PATH))
}

/// [`load`] with another default path (for tests).
///
/// # Errors
/// As [`load`].
pub fn load_from(env_path: Option<&str>, default_path: &Path) -> Result<(SubmitPolicy, Source), String> {
    let (path, required) = match env_path {
        Some(p) if !p.is_empty() => (PathBuf::from(p), true),
        _ => (default_path.to_path_buf(), false),
    };
    if !required && !path.exists() {
        let config = Config::default_embedded();
        return Ok((config.submit_policy(), Source::Embedded));
    }
    let config = read(&path)?;
    Ok((config.submit_policy(), Source::File(path)))
}

fn read(path: &Path) -> Result<Config, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("dynmig: cannot read {}: {e}", path.display()))?;
    parse_config(&text).map_err(|e| format!("dynmig: {}: {e}", path.display()))
}

/// Makes `policy` the one that `job_submit` and `job_modify` use.
pub fn install(policy: SubmitPolicy) {
    *POLICY.write().unwrap_or_else(PoisonError::into_inner) = Some(policy);
}

/// Drops the policy (plugin `fini`).
pub fn clear() {
    *POLICY.write().unwrap_or_else(PoisonError::into_inner) = None;
}

/// Runs `f` with the installed policy, or returns `None` if `init` has not installed one.
pub fn with_policy<T>(f: impl FnOnce(&SubmitPolicy) -> T) -> Option<T> {
    let guard = POLICY.read().unwrap_or_else(PoisonError::into_inner);
    guard.as_ref().map(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_default_file_falls_back_to_embedded() {
        let (policy, source) = load_from(None, Path::new("/nonexistent/dynmig.toml")).unwrap();
        assert_eq!(source, Source::Embedded);
        assert!(!policy.models.is_empty());
    }

    #[test]
    fn file_named_by_env_must_exist_and_parse() {
        let err = load_from(Some("/nonexistent/x.toml"), Path::new("/x")).unwrap_err();
        assert!(err.starts_with("dynmig: cannot read /nonexistent/x.toml"), "{err}");
        let dir = std::env::temp_dir().join(format!("dynmig-state-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bad = dir.join("bad.toml");
        std::fs::write(&bad, "no_such_key = 1\n").unwrap();
        let err = load_from(bad.to_str(), Path::new("/x")).unwrap_err();
        assert!(err.starts_with(&format!("dynmig: {}: ", bad.display())), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn install_and_clear() {
        install(Config::default_embedded().submit_policy());
        assert_eq!(with_policy(|p| p.models.len()), Some(1));
        clear();
        assert!(with_policy(|_| ()).is_none());
    }
}
