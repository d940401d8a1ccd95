//! Memory sizes as users and admins write them: `18G`, `18GiB`, `18gb`, `512M`, `0.5T`, `20000`.
//!
//! Units are binary, as Slurm's `--mem` reads them: `K` = 2^10 bytes, `M` = 2^20, `G` = 2^30,
//! `T` = 2^40. The unit may be followed by `B` or `iB` and is case-insensitive, so `18G`,
//! `18g`, `18GB`, `18gb` and `18GiB` are all 18 x 2^30 bytes. A number without a unit is in
//! MiB, Slurm's convention for `--mem`. Fractions are allowed (`1.5G`, `0.5T`); the result is
//! rounded down to a whole byte.
//!
//! A size must be more than 0 and at most [`MAX_SIZE_BYTES`] (1 TiB): dynmig reads sizes of
//! one GPU's memory, and no GPU has more.

use std::fmt;

/// Bytes in one KiB.
pub const KIB: u64 = 1 << 10;
/// Bytes in one MiB.
pub const MIB: u64 = 1 << 20;
/// Bytes in one GiB.
pub const GIB: u64 = 1 << 30;
/// Bytes in one TiB.
pub const TIB: u64 = 1 << 40;

/// The largest size [`parse_size`] accepts: 1 TiB, far above any GPU's memory (the largest
/// MIG GPU, B200, has 180 GB).
pub const MAX_SIZE_BYTES: u64 = TIB;

/// Why a size could not be read. Display gives the reason and what is allowed, without the
/// context (the caller adds `--mig-mem=...` or the config key).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SizeError {
    /// Nothing was given.
    #[error("empty size; use a number with K, M, G or T (binary units)")]
    Empty,
    /// The number part is not a number.
    #[error("'{0}' is not a number; use a number with K, M, G or T (binary units)")]
    BadNumber(String),
    /// The unit is not one of K, M, G, T (with optional B or iB).
    #[error("unknown unit '{0}'; use a number with K, M, G or T (binary units)")]
    UnknownUnit(String),
    /// The size is negative.
    #[error("a size cannot be negative")]
    Negative,
    /// The size is zero (or rounds down to zero bytes).
    #[error("a size must be more than 0")]
    Zero,
    /// The size is more than [`MAX_SIZE_BYTES`].
    #[error("{0} is more than any GPU has (at most 1T)")]
    TooLarge(String),
}

/// Reads a size such as `18G` into bytes. See the [module docs](self) for the units.
///
/// # Errors
/// [`SizeError`]: empty text, a bad number, an unknown unit, a negative or zero size, or
/// more than [`MAX_SIZE_BYTES`].
///
/// # Examples
/// ```
/// use dynmig_core::size::{parse_size, GIB, MIB};
/// assert_eq!(parse_size("18G").unwrap(), 18 * GIB);
/// assert_eq!(parse_size("18gb").unwrap(), 18 * GIB);
/// assert_eq!(parse_size("20000").unwrap(), 20000 * MIB);
/// assert!(parse_size("18Q").is_err());
/// ```
pub fn parse_size(s: &str) -> Result<u64, SizeError> {
    let s = s.trim();
    if s.is_empty() {
        return Err(SizeError::Empty);
    }
    if s.starts_with('-') {
        return Err(SizeError::Negative);
    }
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+'))
        .unwrap_or(s.len());
    let (num, unit) = (&s[..split], s[split..].trim());
    if num.is_empty() || num.starts_with('+') && num.len() == 1 {
        return Err(SizeError::BadNumber(quoted(s)));
    }
    let value: f64 = num.parse().map_err(|_| SizeError::BadNumber(quoted(num)))?;
    let multiplier = unit_multiplier(unit)?;
    let bytes = value * multiplier as f64;
    if !bytes.is_finite() || bytes > MAX_SIZE_BYTES as f64 {
        return Err(SizeError::TooLarge(quoted(s)));
    }
    let bytes = bytes as u64;
    if bytes == 0 {
        return Err(SizeError::Zero);
    }
    Ok(bytes)
}

/// Text of the input quoted in an error, cut to [`crate::types::MAX_QUOTED`] characters: a
/// size comes from a user or a config file and may be huge (found by fuzzing).
fn quoted(text: &str) -> String {
    crate::types::cut(text, crate::types::MAX_QUOTED)
}

/// Bytes per unit for `K`, `KB`, `KiB` .. `T`, `TB`, `TiB` (any case); `""` is MiB.
fn unit_multiplier(unit: &str) -> Result<u64, SizeError> {
    let lower = unit.to_ascii_lowercase();
    let prefix = lower
        .strip_suffix("ib")
        .or_else(|| lower.strip_suffix('b'))
        .unwrap_or(&lower);
    match prefix {
        "" if unit.is_empty() => Ok(MIB),
        "k" => Ok(KIB),
        "m" => Ok(MIB),
        "g" => Ok(GIB),
        "t" => Ok(TIB),
        _ => Err(SizeError::UnknownUnit(quoted(unit))),
    }
}

/// Writes `bytes` with one decimal in the largest binary unit that gives at least 1:
/// `18.0GiB`, `512.0MiB`, `1.5TiB`, `100B`.
///
/// ```
/// assert_eq!(dynmig_core::size::format_size(18 << 30), "18.0GiB");
/// ```
pub fn format_size(bytes: u64) -> String {
    Size(bytes).to_string()
}

/// A size in bytes whose Display is [`format_size`]'s text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Size(pub u64);

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        let (unit, name) = match b {
            b if b >= TIB => (TIB, "TiB"),
            b if b >= GIB => (GIB, "GiB"),
            b if b >= MIB => (MIB, "MiB"),
            b if b >= KIB => (KIB, "KiB"),
            _ => return write!(f, "{b}B"),
        };
        // Round down to one decimal so that a size just under a limit never prints as the limit.
        let tenths = (u128::from(b) * 10) / u128::from(unit);
        write!(f, "{}.{}{name}", tenths / 10, tenths % 10)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_are_binary_and_case_insensitive() {
        for s in ["18G", "18g", "18GB", "18gb", "18GiB", "18gib", " 18G ", "18 G"] {
            assert_eq!(parse_size(s), Ok(18 * GIB), "{s}");
        }
        assert_eq!(parse_size("512M"), Ok(512 * MIB));
        assert_eq!(parse_size("0.5T"), Ok(TIB / 2));
        assert_eq!(parse_size("1T"), Ok(TIB));
        assert_eq!(parse_size("0.5G"), Ok(GIB / 2));
        assert_eq!(parse_size("1024K"), Ok(MIB));
    }

    #[test]
    fn bare_numbers_are_mib() {
        assert_eq!(parse_size("20000"), Ok(20000 * MIB));
    }

    #[test]
    fn rejects_bad_sizes_with_reason() {
        assert_eq!(parse_size("18Q"), Err(SizeError::UnknownUnit("Q".into())));
        assert_eq!(parse_size("18GG"), Err(SizeError::UnknownUnit("GG".into())));
        assert_eq!(parse_size(""), Err(SizeError::Empty));
        assert_eq!(parse_size("-4G"), Err(SizeError::Negative));
        assert_eq!(parse_size("0G"), Err(SizeError::Zero));
        assert_eq!(parse_size("G"), Err(SizeError::BadNumber("G".into())));
        assert_eq!(parse_size("1.2.3G"), Err(SizeError::BadNumber("1.2.3".into())));
        assert_eq!(parse_size("2T"), Err(SizeError::TooLarge("2T".into())));
        assert_eq!(parse_size("1.5T"), Err(SizeError::TooLarge("1.5T".into())));
    }

    #[test]
    fn errors_quote_at_most_100_characters_of_a_huge_input() {
        // Found by crates/dynmig-fuzz (sizes): the whole input was echoed.
        for huge in [
            format!("1{}", "Q".repeat(100_000)),
            "x".repeat(100_000),
            format!("{}T", "9".repeat(100_000)),
        ] {
            let msg = parse_size(&huge).unwrap_err().to_string();
            assert!(msg.len() < 300, "{} bytes", msg.len());
        }
        assert!(parse_size("18Q").unwrap_err().to_string().contains("unknown unit 'Q'"));
    }

    #[test]
    fn formats_one_decimal_rounded_down() {
        assert_eq!(format_size(18 * GIB), "18.0GiB");
        assert_eq!(format_size(512 * MIB), "512.0MiB");
        assert_eq!(format_size(GIB + GIB / 2), "1.5GiB");
        assert_eq!(format_size(19968 * MIB), "19.5GiB");
        assert_eq!(format_size(20 * GIB - 1), "19.9GiB");
        assert_eq!(format_size(100), "100B");
        assert_eq!(format_size(TIB), "1.0TiB");
    }
}
