//! Authentication of history records with MUNGE, the cluster's own authentication service.
//!
//! A node seals each record with `munge` (the credential carries the payload, the encoding uid
//! and an expiry, sealed with the cluster's munge key); the controller host opens it with
//! `unmunge`. A record is accepted only if `unmunge` reports `Success` (the credential was made
//! with the same key, has not expired and was not seen before) and the encoding uid is 0: only
//! root on a host holding the cluster key, which is what a Slurm node is, can make one
//! (munge(1), unmunge(1); <https://github.com/dun/munge/wiki/Man-7-munge>). The munged socket is
//! the one Slurm uses: `AuthInfo=socket=...` in slurm.conf (slurm.conf(5)), else munge's
//! default.
//!
//! Both directions sit behind a trait ([`Sealer`], [`Verifier`]) so that the transport can be
//! tested without munged. [`Munge`] runs the commands through
//! [`dynmig_host::process::run`], each with a timeout; payload and credential go through a
//! private temporary file (`--input`), never the command line, where any local user could read
//! them.

use crate::record::cut;
use dynmig_host::process::{self, Limits, RunError};
use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why a credential could not be made or was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// `munge`/`unmunge` could not be run, timed out or printed too much.
    #[error("{0} (is munge installed and munged running?)")]
    Command(RunError),
    /// The temporary file for the payload or credential could not be written.
    #[error("cannot write a temporary file for munge: {0}")]
    TempFile(#[source] std::io::Error),
    /// munge refused to make a credential (munged not running, socket wrong): its message.
    #[error("munge failed: {0}")]
    SealFailed(String),
    /// The credential is not valid under the cluster's key (bad key, expired, replayed,
    /// garbage): unmunge's status.
    #[error("credential refused by munge: {0}")]
    Refused(String),
    /// The credential is valid but was made by another uid than 0.
    #[error("credential made by uid {0}, not root: only the cluster's nodes may send records")]
    NotRoot(u32),
    /// The credential line is not one line of printable ASCII or unmunge's output cannot be
    /// read.
    #[error("malformed credential: {0}")]
    Malformed(String),
}

/// Makes credentials (the node side).
pub trait Sealer {
    /// A credential carrying `payload`, as one line of printable ASCII.
    ///
    /// # Errors
    /// [`AuthError`] when no credential can be made.
    fn seal(&self, payload: &[u8]) -> Result<String, AuthError>;
}

/// Checks credentials (the server side). Implementations accept only credentials that a
/// cluster node's root made.
pub trait Verifier: Send + Sync {
    /// The payload of `credential` (one line, without its newline) if it is valid and made by
    /// root.
    ///
    /// # Errors
    /// [`AuthError`] saying why it is refused.
    fn verify(&self, credential: &str) -> Result<Vec<u8>, AuthError>;
}

/// The `munge`/`unmunge` commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Munge {
    /// munged's socket (`--socket`); `None`: munge's default.
    pub socket: Option<PathBuf>,
    /// Longest one `munge` or `unmunge` may run.
    pub timeout: Duration,
}

impl Munge {
    /// Default timeout of one munge command.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

    /// munge on `socket` (`None`: munge's default) with [`Munge::DEFAULT_TIMEOUT`].
    pub fn new(socket: Option<PathBuf>) -> Self {
        Self {
            socket,
            timeout: Self::DEFAULT_TIMEOUT,
        }
    }

    fn args(&self) -> Vec<OsString> {
        match &self.socket {
            Some(s) => vec!["--socket".into(), s.as_os_str().to_owned()],
            None => Vec::new(),
        }
    }

    fn limits(&self) -> Limits {
        Limits {
            timeout: self.timeout,
            max_output: 256 << 10,
        }
    }
}

impl Sealer for Munge {
    fn seal(&self, payload: &[u8]) -> Result<String, AuthError> {
        let mut input = tempfile::Builder::new()
            .prefix(".dynmig-munge-")
            .tempfile()
            .map_err(AuthError::TempFile)?;
        input.write_all(payload).map_err(AuthError::TempFile)?;
        input.flush().map_err(AuthError::TempFile)?;
        let mut args = self.args();
        args.extend(["--input".into(), input.path().as_os_str().to_owned()]);
        let out = process::run(OsStr::new("munge"), &args, self.limits()).map_err(|e| match e {
            RunError::Failed { stderr, .. } => AuthError::SealFailed(cut(&stderr)),
            e => AuthError::Command(e),
        })?;
        let cred = out.trim();
        check_line(cred)?;
        Ok(cred.to_string())
    }
}

impl Verifier for Munge {
    fn verify(&self, credential: &str) -> Result<Vec<u8>, AuthError> {
        check_line(credential)?;
        // A private folder (0700) for the credential, unmunge's metadata and the payload.
        let dir = tempfile::Builder::new()
            .prefix(".dynmig-unmunge-")
            .tempdir()
            .map_err(AuthError::TempFile)?;
        let (input, meta, payload) = (
            dir.path().join("cred"),
            dir.path().join("meta"),
            dir.path().join("payload"),
        );
        std::fs::write(&input, credential).map_err(AuthError::TempFile)?;
        let mut args = self.args();
        for (flag, path) in [("--input", &input), ("--metadata", &meta), ("--output", &payload)] {
            args.extend([flag.into(), path.as_os_str().to_owned()]);
        }
        let result = process::run(OsStr::new("unmunge"), &args, self.limits());
        // unmunge writes its metadata, STATUS first, also when it refuses a credential.
        let metadata = dynmig_host::fs::read_text_bounded(&meta, 64 << 10).ok().flatten();
        match (result, metadata) {
            (Err(RunError::Failed { .. }), Some(m)) | (Ok(_), Some(m)) if m.contains("STATUS:") => {
                check_metadata(&m)?;
                let bytes = dynmig_host::fs::read_bounded(&payload, 256 << 10)
                    .map_err(AuthError::TempFile)?
                    .unwrap_or_default();
                Ok(bytes)
            }
            (Err(RunError::Failed { stderr, .. }), _) => Err(AuthError::Refused(cut(&stderr))),
            (Err(e), _) => Err(AuthError::Command(e)),
            (Ok(_), _) => Err(AuthError::Malformed("unmunge wrote no STATUS".into())),
        }
    }
}

/// Checks that a credential is one non-empty line of printable ASCII (what munge writes:
/// `MUNGE:<base64>:`), before any program sees it.
///
/// # Errors
/// [`AuthError::Malformed`] saying what is wrong.
pub fn check_line(credential: &str) -> Result<(), AuthError> {
    if credential.is_empty() {
        return Err(AuthError::Malformed("empty line; expected a munge credential".into()));
    }
    if let Some(c) = credential.chars().find(|c| !c.is_ascii_graphic()) {
        return Err(AuthError::Malformed(format!(
            "character {c:?} in '{}'; a munge credential is printable ASCII without spaces",
            cut(credential)
        )));
    }
    Ok(())
}

/// Checks `unmunge`'s metadata (`KEY: value` lines): its status must be `Success` and its
/// uid 0.
///
/// # Errors
/// [`AuthError::Refused`] for another status, [`AuthError::NotRoot`] for another uid,
/// [`AuthError::Malformed`] when there is no status or uid.
pub fn check_metadata(metadata: &str) -> Result<(), AuthError> {
    let field = |k: &str| metadata.lines().find_map(|l| l.strip_prefix(k).map(str::trim));
    let status = field("STATUS:").ok_or_else(|| AuthError::Malformed("unmunge printed no STATUS".into()))?;
    if !status.starts_with("Success") {
        return Err(AuthError::Refused(cut(status)));
    }
    let uid = field("UID:").ok_or_else(|| AuthError::Malformed("unmunge printed no UID".into()))?;
    // "root (0)", or "0" with --numeric.
    let num = uid
        .rsplit_once('(')
        .map_or(uid, |(_, n)| n.trim_end_matches(')'))
        .trim()
        .parse::<u32>()
        .map_err(|_| AuthError::Malformed(format!("cannot read UID '{}'", cut(uid))))?;
    if num != 0 {
        return Err(AuthError::NotRoot(num));
    }
    Ok(())
}

/// The munged socket named by `AuthInfo=socket=<path>` in the slurm.conf at `slurm_conf`
/// (`SLURM_CONF`, else /etc/slurm/slurm.conf when `None`); `None` when it names none or the
/// file cannot be read (at most 4 MiB are read).
pub fn munge_socket(slurm_conf: Option<&Path>) -> Option<PathBuf> {
    let conf = slurm_conf
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("SLURM_CONF").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/etc/slurm/slurm.conf"));
    socket_from_conf(&dynmig_host::fs::read_text_bounded(&conf, 4 << 20).ok()??)
}

/// `AuthInfo=socket=<path>` (among other comma-separated AuthInfo options) of slurm.conf text.
pub fn socket_from_conf(text: &str) -> Option<PathBuf> {
    text.lines().find_map(|l| {
        let (k, v) = l.trim().split_once('=')?;
        if !k.trim().eq_ignore_ascii_case("AuthInfo") {
            return None;
        }
        v.split(',')
            .find_map(|o| o.trim().strip_prefix("socket=").map(PathBuf::from))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK_ROOT: &str = "STATUS:          Success (0)\nENCODE_HOST:     n1 (10.0.0.2)\nUID:             root (0)\nGID:             root (0)\nLENGTH:          7\n";

    #[test]
    fn socket_from_auth_info() {
        let conf = "AuthType=auth/munge\nAuthInfo=cred_expire=30,socket=/run/m/munge.socket\n";
        assert_eq!(socket_from_conf(conf), Some(PathBuf::from("/run/m/munge.socket")));
        assert_eq!(socket_from_conf("AuthType=auth/munge\n"), None);
    }

    #[test]
    fn unmunge_metadata_of_root_is_accepted() {
        check_metadata(OK_ROOT).unwrap();
        check_metadata(&OK_ROOT.replace("root (0)", "0")).unwrap();
    }

    #[test]
    fn a_credential_of_another_uid_is_refused() {
        let nobody = OK_ROOT.replace("UID:             root (0)", "UID:             nobody (65534)");
        assert!(matches!(check_metadata(&nobody), Err(AuthError::NotRoot(65534))));
    }

    #[test]
    fn a_replayed_credential_is_refused() {
        let replayed = OK_ROOT.replace("Success (0)", "Replayed credential (15)");
        let e = check_metadata(&replayed).unwrap_err();
        assert!(matches!(e, AuthError::Refused(ref s) if s.contains("Replayed")), "{e}");
        assert!(matches!(check_metadata("garbage"), Err(AuthError::Malformed(_))));
    }

    #[test]
    fn a_credential_with_spaces_or_control_characters_never_reaches_unmunge() {
        for bad in ["", "MUNGE:abc def:", "MUNGE:\u{1b}[2J:", "MUNGE:é:"] {
            assert!(matches!(check_line(bad), Err(AuthError::Malformed(_))), "{bad:?}");
        }
        check_line("MUNGE:AwQFAAB+abc/=:").unwrap();
    }

    /// Needs munged: `DYNMIG_TEST_MUNGE_SOCKET=/path/munge.socket cargo test -p
    /// dynmig-history -- --ignored` (as root, for the uid 0 check).
    #[test]
    #[ignore = "needs a running munged; give its socket in DYNMIG_TEST_MUNGE_SOCKET"]
    fn real_munge_accepts_roots_credential_once_and_refuses_another_uid() {
        let socket = PathBuf::from(std::env::var_os("DYNMIG_TEST_MUNGE_SOCKET").expect("DYNMIG_TEST_MUNGE_SOCKET"));
        let m = Munge::new(Some(socket.clone()));
        let cred = m.seal(b"{\"v\":1}").unwrap();
        assert!(cred.starts_with("MUNGE:"), "{cred}");
        assert_eq!(m.verify(&cred).unwrap(), b"{\"v\":1}");
        let e = m.verify(&cred).unwrap_err();
        assert!(matches!(e, AuthError::Refused(ref s) if s.contains("Replayed")), "{e}");
        let nobody = std::process::Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "munge",
                "-s",
                "x",
                "--socket",
            ])
            .arg(&socket)
            .output()
            .unwrap();
        let cred = String::from_utf8(nobody.stdout).unwrap();
        assert!(matches!(m.verify(cred.trim()), Err(AuthError::NotRoot(65534))));
    }

    #[test]
    fn a_missing_munge_program_is_an_error_not_a_hang() {
        // A socket that does not exist: munge fails fast (or is absent); either way an error.
        let m = Munge {
            socket: Some(PathBuf::from("/nonexistent/dynmig-test.socket")),
            timeout: Duration::from_secs(5),
        };
        let t = std::time::Instant::now();
        assert!(m.seal(b"x").is_err());
        assert!(m.verify("MUNGE:abc:").is_err());
        assert!(t.elapsed() < Duration::from_secs(12));
    }
}
