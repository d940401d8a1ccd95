//! Which Slurm release a plugin file was built for, against the release that runs.
//!
//! Slurm loads a plugin only if its exported `plugin_version` (a `uint32_t`,
//! `SLURM_VERSION_NUMBER` of the headers it was built with, `0xMMmmuu`) equals the running
//! Slurm's major.minor.micro for job_submit plugins and major.minor for SPANK plugins; it
//! otherwise refuses it ("Incompatible Slurm plugin version"). [`plugin_version`] reads that
//! symbol out of the file (ELF64, little-endian) without loading it; [`check_plugin`] compares.

use std::fmt;

/// A Slurm release as `SLURM_VERSION_NUMBER`: `0xMMmmuu` (24.11.5 is `0x180b05`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct SlurmVersion(pub u32);

impl SlurmVersion {
    /// `"24.11.5"`, or the last word of `"slurm 22.05.8"` / `"slurm-wlm 24.11.5"` (what
    /// `scontrol --version` prints), with or without a suffix like `24.11.5-1`.
    pub fn parse(text: &str) -> Option<Self> {
        let v = text.split_whitespace().last()?;
        let mut parts = v.split(['.', '-']);
        let major: u32 = parts.next()?.parse().ok()?;
        let minor: u32 = parts.next()?.parse().ok()?;
        let micro: u32 = parts.next()?.parse().ok()?;
        (major < 256 && minor < 256 && micro < 256).then_some(Self(major << 16 | minor << 8 | micro))
    }

    /// The release `scontrol --version` names (this host's client, which matches the Slurm it
    /// talks to), within 5 s; `None` when it cannot be read. `scontrol` is the config's
    /// `[paths] scontrol`, never a path a user chose.
    pub fn running(scontrol: &std::path::Path) -> Option<Self> {
        let limits = dynmig_host::process::Limits {
            timeout: std::time::Duration::from_secs(5),
            max_output: 4096,
        };
        dynmig_host::process::run(scontrol.as_os_str(), &["--version"], limits)
            .ok()
            .and_then(|v| Self::parse(&v))
    }

    /// Major and minor only (`0xMMmm00`): what a SPANK plugin must match.
    pub fn major_minor(self) -> u32 {
        self.0 & 0xffff00
    }
}

impl fmt::Display for SlurmVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:02}.{}", self.0 >> 16 & 0xff, self.0 >> 8 & 0xff, self.0 & 0xff)
    }
}

/// Why a plugin file's version could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PluginError {
    /// Not a 64-bit little-endian ELF file, or cut short.
    #[error("not a 64-bit little-endian ELF shared object ({0})")]
    NotElf(&'static str),
    /// No dynamic symbol `plugin_version`: not a Slurm plugin.
    #[error("no plugin_version symbol: not a Slurm plugin")]
    NoVersion,
}

/// Which kind of plugin: what part of the version must match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PluginKind {
    /// job_submit: major.minor.micro.
    JobSubmit,
    /// SPANK: major.minor.
    Spank,
}

/// `plugin_version` of a plugin file's contents, and its offset in the file.
///
/// # Errors
/// [`PluginError`]: not ELF64 little-endian, or no `plugin_version` in its dynamic symbols.
pub fn plugin_version(elf: &[u8]) -> Result<(SlurmVersion, usize), PluginError> {
    const SHT_DYNSYM: u32 = 11;
    const SHT_NOBITS: u32 = 8;
    const SHORT: PluginError = PluginError::NotElf("cut short");
    if elf.len() < 64 || &elf[..4] != b"\x7fELF" {
        return Err(PluginError::NotElf("no ELF magic"));
    }
    if elf[4] != 2 || elf[5] != 1 {
        return Err(PluginError::NotElf("not 64-bit little-endian"));
    }
    let shoff = u64_at(elf, 0x28).ok_or(SHORT)? as usize;
    let shentsize = u16_at(elf, 0x3a).ok_or(SHORT)? as usize;
    let shnum = u16_at(elf, 0x3c).ok_or(SHORT)? as usize;
    if shentsize < 64 {
        return Err(PluginError::NotElf("section headers too small"));
    }
    // (type, addr, offset, size, link, entsize) of section i.
    let section = |i: usize| -> Option<(u32, u64, usize, usize, usize, usize)> {
        let h = shoff.checked_add(i.checked_mul(shentsize)?)?;
        Some((
            u32_at(elf, h + 4)?,
            u64_at(elf, h + 16)?,
            u64_at(elf, h + 24)? as usize,
            u64_at(elf, h + 32)? as usize,
            u32_at(elf, h + 40)? as usize,
            u64_at(elf, h + 56)? as usize,
        ))
    };
    for i in 0..shnum {
        let (kind, _, off, size, link, entsize) = section(i).ok_or(SHORT)?;
        if kind != SHT_DYNSYM || entsize < 24 {
            continue;
        }
        let (_, _, str_off, str_size, _, _) = section(link).ok_or(SHORT)?;
        let strtab = elf.get(str_off..str_off.checked_add(str_size).ok_or(SHORT)?);
        let strtab = strtab.ok_or(SHORT)?;
        for s in 0..size / entsize {
            let sym = off + s * entsize;
            let name = u32_at(elf, sym).ok_or(SHORT)? as usize;
            let Some(tail) = strtab.get(name..) else { continue };
            if tail.split(|&b| b == 0).next() != Some(b"plugin_version") {
                continue;
            }
            let shndx = u16_at(elf, sym + 6).ok_or(SHORT)? as usize;
            let value = u64_at(elf, sym + 8).ok_or(SHORT)?;
            let (skind, saddr, soff, _, _, _) = section(shndx).ok_or(SHORT)?;
            if skind == SHT_NOBITS || value < saddr {
                return Err(PluginError::NoVersion);
            }
            let at = soff + (value - saddr) as usize;
            return Ok((SlurmVersion(u32_at(elf, at).ok_or(SHORT)?), at));
        }
    }
    Err(PluginError::NoVersion)
}

/// Whether a plugin built for `built` loads into a Slurm `running`; the refusal text when not.
pub fn check_plugin(kind: PluginKind, built: SlurmVersion, running: SlurmVersion) -> Result<(), String> {
    let (ok, part) = match kind {
        PluginKind::JobSubmit => (built == running, "major.minor.micro"),
        PluginKind::Spank => (built.major_minor() == running.major_minor(), "major.minor"),
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "built for Slurm {built} but slurmctld runs {running}: Slurm refuses it \
             (\"Incompatible Slurm plugin version\"; the {part} must match); \
             install the build for {running}"
        ))
    }
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at.checked_add(2)?)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64 file: sections null, .dynsym, .dynstr, .rodata (at address 0x1000)
    /// holding `version`, and a symbol `name` pointing at it.
    fn elf(name: &str, version: u32) -> Vec<u8> {
        let mut dynstr = b"\0other\0".to_vec();
        let name_at = dynstr.len() as u32;
        dynstr.extend_from_slice(name.as_bytes());
        dynstr.push(0);
        let mut rodata = vec![0xaa; 8];
        rodata.extend_from_slice(&version.to_le_bytes());
        let sym = |name: u32, shndx: u16, value: u64| {
            let mut s = name.to_le_bytes().to_vec();
            s.extend_from_slice(&[0x11, 0]);
            s.extend_from_slice(&shndx.to_le_bytes());
            s.extend_from_slice(&value.to_le_bytes());
            s.extend_from_slice(&4u64.to_le_bytes());
            s
        };
        let mut dynsym = vec![0u8; 24];
        dynsym.extend(sym(1, 3, 0x1000));
        dynsym.extend(sym(name_at, 3, 0x1008));
        let mut f = vec![0u8; 64];
        f[..6].copy_from_slice(b"\x7fELF\x02\x01");
        let offs: Vec<usize> = [&dynsym, &dynstr, &rodata]
            .iter()
            .scan(64usize, |at, d| {
                let here = *at;
                *at += d.len();
                Some(here)
            })
            .collect();
        f.extend(&dynsym);
        f.extend(&dynstr);
        f.extend(&rodata);
        let shoff = f.len() as u64;
        f[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
        f[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        f[0x3c..0x3e].copy_from_slice(&4u16.to_le_bytes());
        let header = |kind: u32, addr: u64, off: usize, size: usize, link: u32, entsize: u64| {
            let mut h = vec![0u8; 64];
            h[4..8].copy_from_slice(&kind.to_le_bytes());
            h[16..24].copy_from_slice(&addr.to_le_bytes());
            h[24..32].copy_from_slice(&(off as u64).to_le_bytes());
            h[32..40].copy_from_slice(&(size as u64).to_le_bytes());
            h[40..44].copy_from_slice(&link.to_le_bytes());
            h[56..64].copy_from_slice(&entsize.to_le_bytes());
            h
        };
        f.extend(vec![0u8; 64]);
        f.extend(header(11, 0, offs[0], dynsym.len(), 2, 24));
        f.extend(header(3, 0, offs[1], dynstr.len(), 0, 0));
        f.extend(header(1, 0x1000, offs[2], rodata.len(), 0, 0));
        f
    }

    #[test]
    fn reads_plugin_version_and_its_offset() {
        let f = elf("plugin_version", 0x180b05);
        let (v, at) = plugin_version(&f).unwrap();
        assert_eq!(v, SlurmVersion(0x180b05));
        assert_eq!(v.to_string(), "24.11.5");
        assert_eq!(u32_at(&f, at), Some(0x180b05));
    }

    #[test]
    fn refuses_files_that_are_not_plugins() {
        assert_eq!(plugin_version(&elf("plugin_versions", 1)), Err(PluginError::NoVersion));
        assert!(matches!(plugin_version(b"#!/bin/sh\n"), Err(PluginError::NotElf(_))));
        let mut cut = elf("plugin_version", 1);
        cut.truncate(cut.len() - 10);
        assert!(plugin_version(&cut).is_err());
    }

    #[test]
    fn versions_parse_and_compare_per_plugin_kind() {
        let v = |s| SlurmVersion::parse(s).unwrap();
        assert_eq!(v("slurm 22.05.8"), SlurmVersion(0x160508));
        assert_eq!(v("26.05.5-1"), SlurmVersion(0x1a0505));
        assert_eq!(v("slurm-wlm 24.11.5\n"), SlurmVersion(0x180b05));
        assert_eq!(SlurmVersion::parse("24.11"), None);
        assert!(check_plugin(PluginKind::JobSubmit, v("24.11.5"), v("24.11.5")).is_ok());
        let e = check_plugin(PluginKind::JobSubmit, v("22.05.11"), v("22.05.8")).unwrap_err();
        assert!(e.contains("22.05.11") && e.contains("22.05.8"), "{e}");
        assert!(check_plugin(PluginKind::Spank, v("22.05.11"), v("22.05.8")).is_ok());
        assert!(check_plugin(PluginKind::Spank, v("24.11.5"), v("26.05.5")).is_err());
    }
}
