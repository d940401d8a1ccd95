//! Authentication of history records with munge, the cluster's own authentication service.
//!
//! A node encodes each record with `munge` (the credential carries the payload, the encoding
//! uid and an expiry, sealed with the cluster's munge key); the controller host decodes it with
//! `unmunge`. A record is accepted only if `unmunge` reports `Success` (the credential was made
//! with the same key, has not expired and was not seen before) and the encoding uid is 0: only
//! root on a host holding the cluster key, which is what a Slurm node is, can make one. The
//! munged socket is the one Slurm uses: `AuthInfo=socket=...` in slurm.conf, else munge's
//! default.

use anyhow::{anyhow, bail, Context, Result};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The munged socket named by `AuthInfo=socket=<path>` in the slurm.conf at `slurm_conf`
/// (`SLURM_CONF`, else /etc/slurm/slurm.conf when `None`); `None` when it names none.
pub fn munge_socket(slurm_conf: Option<&Path>) -> Option<PathBuf> {
    let conf = slurm_conf
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("SLURM_CONF").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/etc/slurm/slurm.conf"));
    socket_from_conf(&std::fs::read_to_string(conf).ok()?)
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

fn run(program: &str, socket: Option<&Path>, input: &[u8]) -> Result<(bool, String)> {
    let mut cmd = Command::new(program);
    if let Some(s) = socket {
        cmd.arg("--socket").arg(s);
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {program} (is munge installed?)"))?;
    child.stdin.take().expect("piped").write_all(input)?;
    let out = child.wait_with_output()?;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        text = format!("{}{}", String::from_utf8_lossy(&out.stderr).trim(), text);
    }
    Ok((out.status.success(), text))
}

/// Encodes `payload` into a munge credential (one line of text).
///
/// # Errors
/// munge cannot be run or fails (munged not running, socket wrong).
pub fn encode(socket: Option<&Path>, payload: &[u8]) -> Result<String> {
    let (ok, text) = run("munge", socket, payload)?;
    if !ok {
        bail!("munge failed: {}", text.trim());
    }
    Ok(text.trim().to_string())
}

/// Decodes a credential and returns its payload if it is valid and was made by root.
///
/// # Errors
/// The credential is invalid (bad key, expired, replayed, garbage: unmunge's status), or was
/// encoded by a uid other than 0.
pub fn decode_from_root(socket: Option<&Path>, credential: &str) -> Result<Vec<u8>> {
    let (ok, text) = run("unmunge", socket, credential.trim().as_bytes())?;
    let (meta, payload) = text.split_once("\n\n").unwrap_or((&text, ""));
    let field = |k: &str| {
        meta.lines()
            .find_map(|l| l.strip_prefix(k).map(|v| v.trim().to_string()))
    };
    let status = field("STATUS:").unwrap_or_else(|| text.trim().to_string());
    if !ok || !status.starts_with("Success") {
        bail!("credential refused by munge: {status}");
    }
    let uid = field("UID:").ok_or_else(|| anyhow!("unmunge gave no UID"))?;
    // "root (0)"
    let num = uid
        .rsplit_once('(')
        .and_then(|(_, n)| n.trim_end_matches(')').parse::<u32>().ok())
        .ok_or_else(|| anyhow!("cannot read UID '{uid}'"))?;
    if num != 0 {
        bail!("credential made by uid {num}, not root: only the cluster's nodes may send records");
    }
    Ok(payload.as_bytes().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_from_auth_info() {
        let conf = "AuthType=auth/munge\nAuthInfo=cred_expire=30,socket=/run/m/munge.socket\n";
        assert_eq!(socket_from_conf(conf), Some(PathBuf::from("/run/m/munge.socket")));
        assert_eq!(socket_from_conf("AuthType=auth/munge\n"), None);
    }
}
