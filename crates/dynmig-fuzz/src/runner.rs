//! The fuzz loop: draws inputs from a proptest strategy, runs a property check on each under
//! `catch_unwind`, times it, and shrinks each new failure with proptest's value tree.
//!
//! Unlike `proptest!`, the loop does not stop at the first failure: it counts every failing
//! input, keeps the first (shrunk) input of each distinct finding, and goes on, so that a
//! campaign reports how many inputs of each kind failed. A panic is a finding even when the
//! code under test catches it (the plugins' `extern "C"` guards turn a panic into
//! `SLURM_ERROR`): a panic hook records every panic of the fuzzing thread.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;
use std::time::{Duration, Instant};

use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde::{Deserialize, Serialize};

/// How one target is run.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Inputs to draw.
    pub cases: u64,
    /// Seed of the generator (mixed with the target's name).
    pub seed: u64,
    /// An input that takes longer than this is a finding (bounded time).
    pub slow: Duration,
    /// Most checks spent shrinking one finding.
    pub max_shrink: u32,
    /// Print a progress line to stderr every this many inputs (0: never).
    pub progress: u64,
}

impl Settings {
    /// Settings for `cargo test`: `cases` inputs, a fixed seed, a generous time bound (debug
    /// build, shared machine).
    pub fn test(cases: u64) -> Self {
        Settings {
            cases,
            seed: 20261126,
            slow: Duration::from_secs(10),
            max_shrink: 300,
            progress: 0,
        }
    }
}

/// One distinct failure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// `panic`, `property`, `slow`, `abort` or `memory`.
    pub kind: String,
    /// What went wrong (the panic message with its location, or the property's message).
    pub message: String,
    /// The first failing input, shrunk, as `Debug` prints it (cut to 2,000 characters).
    pub input: String,
    /// How many inputs failed this way.
    pub hits: u64,
}

/// What a run of one target found.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Target name.
    pub target: String,
    /// Inputs checked (shrinking steps not counted).
    pub inputs: u64,
    /// Wall time of the loop, seconds.
    pub secs: f64,
    /// The slowest single input, milliseconds.
    pub slowest_ms: f64,
    /// That input (cut to 300 characters).
    pub slowest_input: String,
    /// Peak resident memory of the process (VmHWM), KiB; 0 when unknown.
    pub peak_rss_kib: u64,
    /// Distinct findings.
    pub findings: Vec<Finding>,
}

impl Report {
    /// Failing inputs, all findings together.
    pub fn failed_inputs(&self) -> u64 {
        self.findings.iter().map(|f| f.hits).sum()
    }

    /// One paragraph per finding, for a test failure or the campaign's output.
    pub fn describe_findings(&self) -> String {
        self.findings
            .iter()
            .map(|f| format!("[{}] x{}: {}\n    input: {}", f.kind, f.hits, f.message, f.input))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

thread_local! {
    static FUZZING: Cell<bool> = const { Cell::new(false) };
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Installs (once) the panic hook that records the panics of fuzzing threads and leaves
/// other threads to the previous hook.
fn install_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if FUZZING.with(Cell::get) {
                let payload = info
                    .payload()
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| info.payload().downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "non-string panic".into());
                let at = info
                    .location()
                    .map(|l| format!(" at {}:{}", l.file(), l.line()))
                    .unwrap_or_default();
                LAST_PANIC.with(|p| {
                    p.borrow_mut().get_or_insert(format!("{payload}{at}"));
                });
            } else {
                previous(info);
            }
        }));
    });
}

/// Runs `check` on `value`: `Some((kind, message))` for a failure.
fn attempt<T>(check: &impl Fn(&T) -> Result<(), String>, value: &T) -> (Option<(&'static str, String)>, Duration) {
    LAST_PANIC.with(|p| p.borrow_mut().take());
    FUZZING.with(|f| f.set(true));
    let started = Instant::now();
    let result = catch_unwind(AssertUnwindSafe(|| check(value)));
    let took = started.elapsed();
    FUZZING.with(|f| f.set(false));
    let panicked = LAST_PANIC.with(|p| p.borrow_mut().take());
    let failure = match (result, panicked) {
        (_, Some(p)) => Some(("panic", p)),
        (Err(_), None) => Some(("panic", "a panic the hook did not see".into())),
        (Ok(Err(m)), None) => Some(("property", m)),
        (Ok(Ok(())), None) => None,
    };
    (failure, took)
}

pub use dynmig_core::types::cut;

/// The key two failures share when they are the same finding: the kind and the message's
/// first 60 characters with digits folded.
fn key(kind: &str, message: &str) -> String {
    let folded: String = message
        .chars()
        .take(60)
        .map(|c| if c.is_ascii_digit() { '#' } else { c })
        .collect();
    format!("{kind}:{folded}")
}

/// The seed of `target`'s generator.
fn rng(seed: u64, target: &str) -> TestRng {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    // FNV-1a of the name: each target draws its own sequence.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in target.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    bytes[8..16].copy_from_slice(&h.to_le_bytes());
    TestRng::from_seed(RngAlgorithm::ChaCha, &bytes)
}

/// Peak resident memory of this process (VmHWM), KiB; 0 when unknown.
pub fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Most distinct findings kept (and shrunk) per target.
const MAX_FINDINGS: usize = 50;

/// Draws `settings.cases` inputs from `strategy` and checks each with `check`.
pub fn run<S>(target: &str, strategy: S, check: impl Fn(&S::Value) -> Result<(), String>, settings: &Settings) -> Report
where
    S: Strategy,
    S::Value: Debug,
{
    install_hook();
    let mut runner = TestRunner::new_with_rng(Config::default(), rng(settings.seed, target));
    let mut findings: BTreeMap<String, Finding> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut report = Report {
        target: target.to_string(),
        ..Report::default()
    };
    let mut slowest = Duration::ZERO;
    let started = Instant::now();
    for i in 0..settings.cases {
        if settings.progress > 0 && i > 0 && i % settings.progress == 0 {
            eprintln!(
                "{target}: {i} inputs, {:.0} s, {} failing",
                started.elapsed().as_secs_f64(),
                findings.values().map(|f| f.hits).sum::<u64>()
            );
        }
        let Ok(mut tree) = strategy.new_tree(&mut runner) else {
            continue;
        };
        let value = tree.current();
        let (failure, took) = attempt(&check, &value);
        report.inputs += 1;
        if took > slowest {
            slowest = took;
            report.slowest_input = cut(&format!("{value:?}"), 300);
        }
        let mut failures = Vec::new();
        if took > settings.slow {
            failures.push((
                "slow",
                format!("one input took {:.3} s (bound {:?})", took.as_secs_f64(), settings.slow),
            ));
        }
        failures.extend(failure);
        for (kind, message) in failures {
            let k = key(kind, &message);
            if let Some(f) = findings.get_mut(&k) {
                f.hits += 1;
                continue;
            }
            if findings.len() >= MAX_FINDINGS {
                continue;
            }
            let (message, input) = if kind == "slow" {
                (message, cut(&format!("{value:?}"), 2000))
            } else {
                shrink(&mut tree, &check, kind, message, settings.max_shrink)
            };
            order.push(k.clone());
            findings.insert(
                k,
                Finding {
                    kind: kind.to_string(),
                    message: cut(&message, 1000),
                    input,
                    hits: 1,
                },
            );
        }
    }
    report.secs = started.elapsed().as_secs_f64();
    report.slowest_ms = slowest.as_secs_f64() * 1e3;
    report.peak_rss_kib = peak_rss_kib();
    report.findings = order.into_iter().filter_map(|k| findings.remove(&k)).collect();
    report
}

/// Shrinks a failing input: proptest's simplify/complicate walk, keeping the simplest input
/// that fails with the same kind. Returns its message and `Debug` text.
fn shrink<T: ValueTree>(
    tree: &mut T,
    check: &impl Fn(&T::Value) -> Result<(), String>,
    kind: &str,
    mut message: String,
    max: u32,
) -> (String, String)
where
    T::Value: Debug,
{
    let mut best = tree.current();
    let mut steps = 0;
    if tree.simplify() {
        while steps < max {
            steps += 1;
            let candidate = tree.current();
            match attempt(check, &candidate).0 {
                Some((k, m)) if k == kind => {
                    best = candidate;
                    message = m;
                    if !tree.simplify() {
                        break;
                    }
                }
                _ => {
                    if !tree.complicate() {
                        break;
                    }
                }
            }
        }
    }
    (message, cut(&format!("{best:?}"), 2000))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn counts_and_shrinks_findings_and_goes_on() {
        let r = run(
            "selftest",
            0u32..1000,
            |n| {
                if *n >= 500 {
                    Err(format!("{n} is too big"))
                } else if *n == 7 {
                    panic!("seven")
                } else {
                    Ok(())
                }
            },
            &Settings::test(2000),
        );
        assert_eq!(r.inputs, 2000);
        let big = r.findings.iter().find(|f| f.kind == "property").unwrap();
        assert_eq!(big.input, "500", "shrunk to the smallest failing input");
        assert!(big.hits > 500, "{big:?}");
        let seven = r.findings.iter().find(|f| f.kind == "panic").unwrap();
        assert!(seven.message.starts_with("seven at "), "{seven:?}");
        assert!(r.peak_rss_kib > 0);
    }

    #[test]
    fn a_panic_caught_inside_the_check_is_still_a_finding() {
        let r = run(
            "caught",
            Just(()),
            |_| {
                let _ = std::panic::catch_unwind(|| panic!("swallowed"));
                Ok(())
            },
            &Settings::test(3),
        );
        assert_eq!(r.findings.len(), 1);
        assert_eq!(r.findings[0].hits, 3);
    }
}
