//! Slurm hostlist expressions: `n[1-3]`, `gpu[01-04,07]`, `a[1-2]b[1-2]`, `n1,n[3-4]`.
//!
//! Numbers keep the zero padding of the range's lower bound, as Slurm does (`n[08-10]` gives
//! `n08 n09 n10`).

use crate::types::cut;

/// Most names one expression may expand to (a typo like `n[1-1000000]` stays an error).
pub const MAX_HOSTS: usize = 100_000;

/// Longest node name, in bytes (a DNS name's limit): with [`MAX_HOSTS`] it bounds what an
/// expression can make, whatever its numbers or zero padding say.
pub const MAX_NAME: usize = 253;

/// Expands a hostlist expression into node names, in order.
///
/// # Errors
/// A message saying what is wrong: unbalanced brackets, a bad or reversed range, an empty
/// name, a name longer than [`MAX_NAME`], or more than [`MAX_HOSTS`] names.
///
/// ```
/// use dynmig_core::config::expand_hostlist;
/// assert_eq!(expand_hostlist("n[1-2],gpu[08-10]").unwrap(), ["n1", "n2", "gpu08", "gpu09", "gpu10"]);
/// ```
pub fn expand_hostlist(expr: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for part in split_top_level(expr)? {
        let part = part.trim();
        if part.is_empty() {
            return Err(format!("empty node name in '{}'", cut(expr, 100)));
        }
        expand_one(part, &mut out)?;
        if out.len() > MAX_HOSTS {
            return Err(format!("'{}' expands to more than {MAX_HOSTS} nodes", cut(expr, 100)));
        }
    }
    Ok(out)
}

/// Splits on commas that are not inside brackets.
fn split_top_level(expr: &str) -> Result<Vec<&str>, String> {
    let (mut depth, mut start, mut parts) = (0i32, 0, Vec::new());
    for (i, c) in expr.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&expr[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(format!("unbalanced or nested brackets in '{}'", cut(expr, 100)));
        }
    }
    if depth != 0 {
        return Err(format!("unbalanced brackets in '{}'", cut(expr, 100)));
    }
    parts.push(&expr[start..]);
    Ok(parts)
}

fn expand_one(part: &str, out: &mut Vec<String>) -> Result<(), String> {
    if part.chars().any(char::is_whitespace) {
        return Err(format!("node name '{}' contains white space", cut(part, 100)));
    }
    let Some(open) = part.find('[') else {
        if part.len() > MAX_NAME {
            return Err(format!(
                "node name '{}' is {} bytes long; at most {MAX_NAME} allowed",
                cut(part, 100),
                part.len()
            ));
        }
        out.push(part.to_string());
        return Ok(());
    };
    let close = open
        + part[open..]
            .find(']')
            .ok_or_else(|| format!("unbalanced brackets in '{}'", cut(part, 100)))?;
    let (prefix, ranges, rest) = (&part[..open], &part[open + 1..close], &part[close + 1..]);
    for range in ranges.split(',') {
        let (lo, hi) = range.split_once('-').unwrap_or((range, range));
        let bad = || {
            format!(
                "bad range '{}' in '{}'; use N or N-M, e.g. n[1-4,7]",
                cut(range, 100),
                cut(part, 100)
            )
        };
        if lo.is_empty() || !lo.bytes().all(|b| b.is_ascii_digit()) || !hi.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let (a, b): (u64, u64) = (lo.parse().map_err(|_| bad())?, hi.parse().map_err(|_| bad())?);
        if a > b {
            return Err(bad());
        }
        if b - a > MAX_HOSTS as u64 {
            return Err(format!("'{}' expands to more than {MAX_HOSTS} nodes", cut(part, 100)));
        }
        let width = lo.len();
        // Every name made here starts with the prefix and the padded number.
        if prefix.len() + width.max(hi.len()) > MAX_NAME {
            return Err(format!(
                "'{}' makes node names longer than {MAX_NAME} bytes",
                cut(part, 100)
            ));
        }
        for n in a..=b {
            let mut tails = Vec::new();
            expand_one(&format!("{prefix}{n:0width$}{rest}"), &mut tails)?;
            out.extend(tails);
            if out.len() > MAX_HOSTS {
                return Err(format!("'{}' expands to more than {MAX_HOSTS} nodes", cut(part, 100)));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_ranges_lists_and_padding() {
        assert_eq!(expand_hostlist("n1").unwrap(), ["n1"]);
        assert_eq!(expand_hostlist("n[1-3]").unwrap(), ["n1", "n2", "n3"]);
        assert_eq!(
            expand_hostlist("gpu[08-10,12]").unwrap(),
            ["gpu08", "gpu09", "gpu10", "gpu12"]
        );
        assert_eq!(
            expand_hostlist("a[1-2]b[1-2]").unwrap(),
            ["a1b1", "a1b2", "a2b1", "a2b2"]
        );
        assert_eq!(expand_hostlist("x,n[3-4]").unwrap(), ["x", "n3", "n4"]);
    }

    #[test]
    fn rejects_bad_expressions() {
        for bad in [
            "n[1-2",
            "n1-2]",
            "n[2-1]",
            "n[a-b]",
            "n[]",
            "n[[1]]",
            "a,,b",
            "n[1-1000000]",
            "a b",
        ] {
            assert!(expand_hostlist(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn node_names_are_bounded_whatever_the_padding_or_prefix() {
        let long = "n".repeat(MAX_NAME + 1);
        let e = expand_hostlist(&long).unwrap_err();
        assert!(
            e.contains("at most 253") && e.contains("nnn...") && e.len() < 300,
            "{e}"
        );
        assert_eq!(expand_hostlist(&"n".repeat(MAX_NAME)).unwrap().len(), 1);
        let padded = format!("n[{}1-99999]", "0".repeat(300));
        let e = expand_hostlist(&padded).unwrap_err();
        assert!(e.contains("longer than 253 bytes"), "{e}");
        let e = expand_hostlist(&format!("{}[1-2]", "p".repeat(300))).unwrap_err();
        assert!(e.contains("longer than 253 bytes"), "{e}");
    }
}
