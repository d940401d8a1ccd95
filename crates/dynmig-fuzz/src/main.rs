//! `dynmig-fuzz`: runs fuzz campaigns and prints a table per target: inputs, time, inputs/s,
//! findings, peak RSS and the slowest input.
//!
//! Each target runs in a child process (this executable with `--child`), so that an abort
//! or a crash is reported as a finding of its target instead of ending the campaign, and so
//! that each target's peak RSS is its own.
//!
//! ```text
//! cargo run --release -p dynmig-fuzz -- --cases 1000000
//! cargo run --release -p dynmig-fuzz -- --cases 20000 --target tres --target hints
//! ```

use std::io::Write;
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use clap::Parser;
use dynmig_fuzz::runner::{Finding, Report, Settings};
use dynmig_fuzz::{target, TARGETS};

/// Fuzz dynmig's plugins and parsers on stable Rust.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Inputs per target.
    #[arg(long, default_value_t = 1_000_000)]
    cases: u64,
    /// Run only this target (repeatable); default: all.
    #[arg(long = "target")]
    targets: Vec<String>,
    /// Generator seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// An input slower than this many milliseconds is a finding.
    #[arg(long, default_value_t = 1000)]
    slow_ms: u64,
    /// Peak RSS above this many MiB is a finding of the target.
    #[arg(long, default_value_t = 1024)]
    max_rss_mib: u64,
    /// Print a progress line every this many inputs.
    #[arg(long, default_value_t = 100_000)]
    progress: u64,
    /// List the targets and exit.
    #[arg(long)]
    list: bool,
    /// Internal: run one target in this process and print its report as JSON.
    #[arg(long, hide = true)]
    child: bool,
}

fn settings(a: &Args) -> Settings {
    Settings {
        cases: a.cases,
        seed: a.seed,
        slow: Duration::from_millis(a.slow_ms),
        max_shrink: 500,
        progress: a.progress,
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.list {
        for t in TARGETS {
            println!("{:<22} {}", t.name, t.what);
        }
        return ExitCode::SUCCESS;
    }
    let names: Vec<String> = if args.targets.is_empty() {
        TARGETS.iter().map(|t| t.name.to_string()).collect()
    } else {
        args.targets.clone()
    };
    if let Some(bad) = names.iter().find(|n| target(n).is_none()) {
        eprintln!("dynmig-fuzz: no target '{bad}' (--list shows them)");
        return ExitCode::from(2);
    }
    if args.child {
        let t = target(&names[0]).expect("checked");
        let report = (t.run)(&settings(&args));
        println!("REPORT {}", serde_json::to_string(&report).expect("report"));
        return ExitCode::SUCCESS;
    }
    println!(
        "dynmig-fuzz: {} inputs per target, seed {}, slow > {} ms, peak RSS bound {} MiB",
        args.cases, args.seed, args.slow_ms, args.max_rss_mib
    );
    let mut reports = Vec::new();
    for name in &names {
        let r = run_child(&args, name);
        println!("{}", row(&r));
        println!("    slowest input: {}", dynmig_fuzz::runner::cut(&r.slowest_input, 200));
        if !r.findings.is_empty() {
            println!("{}", r.describe_findings());
        }
        let _ = std::io::stdout().flush();
        reports.push(r);
    }
    println!();
    println!("| target | inputs | time (s) | inputs/s | slowest input (ms) | peak RSS (MiB) | failing inputs | distinct findings |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in &reports {
        println!(
            "| {} | {} | {:.1} | {:.0} | {:.1} | {:.0} | {} | {} |",
            r.target,
            r.inputs,
            r.secs,
            r.inputs as f64 / r.secs.max(1e-9),
            r.slowest_ms,
            r.peak_rss_kib as f64 / 1024.0,
            r.failed_inputs(),
            r.findings.len()
        );
    }
    let total: u64 = reports.iter().map(|r| r.inputs).sum();
    let failing: u64 = reports.iter().map(Report::failed_inputs).sum();
    println!("\ntotal: {total} inputs, {failing} failing");
    if failing == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn row(r: &Report) -> String {
    format!(
        "{}: {} inputs in {:.1} s ({:.0}/s), slowest {:.1} ms, peak RSS {:.0} MiB, {} failing, {} distinct",
        r.target,
        r.inputs,
        r.secs,
        r.inputs as f64 / r.secs.max(1e-9),
        r.slowest_ms,
        r.peak_rss_kib as f64 / 1024.0,
        r.failed_inputs(),
        r.findings.len()
    )
}

/// Runs `name` in a child process; an abnormal exit becomes an `abort` finding.
fn run_child(a: &Args, name: &str) -> Report {
    let exe = std::env::current_exe().expect("current exe");
    let out = Command::new(exe)
        .args(["--child", "--target", name])
        .args(["--cases", &a.cases.to_string(), "--seed", &a.seed.to_string()])
        .args([
            "--slow-ms",
            &a.slow_ms.to_string(),
            "--progress",
            &a.progress.to_string(),
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("spawn child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut report = stdout
        .lines()
        .find_map(|l| l.strip_prefix("REPORT "))
        .and_then(|j| serde_json::from_str::<Report>(j).ok())
        .unwrap_or_else(|| Report {
            target: name.to_string(),
            ..Report::default()
        });
    if !out.status.success() || !stdout.contains("REPORT ") {
        report.findings.push(Finding {
            kind: "abort".into(),
            message: format!(
                "the child ended with {} (rerun with --target {name} --seed {} to find the input; its last progress line is on stderr)",
                out.status, a.seed
            ),
            input: String::new(),
            hits: 1,
        });
    }
    if report.peak_rss_kib > a.max_rss_mib * 1024 {
        report.findings.push(Finding {
            kind: "memory".into(),
            message: format!(
                "peak RSS {} MiB above the bound {} MiB",
                report.peak_rss_kib / 1024,
                a.max_rss_mib
            ),
            input: String::new(),
            hits: 1,
        });
    }
    report
}
