//! Cost of one submit decision, as job_submit/dynmig pays it inside slurmctld.
//!
//! Criterion prints the median of `decide()` per input; then, for the same inputs and for
//! the whole plugin step on a `job_desc_msg_t` (`glue::submit`: read fields, decide, write
//! xmalloc'd strings, free them), a plain loop times 100,000 single calls and prints the
//! median and p99 in nanoseconds. Run: `cargo bench -p job-submit-dynmig`.
use std::ffi::{c_char, CString};
use std::hint::black_box;
use std::time::Instant;

use criterion::{criterion_group, Criterion};
use dynmig_core::config::Config;
use dynmig_core::submit::{decide, JobRequest, SubmitPolicy};
use job_submit_dynmig::state::{self, Ready};
use job_submit_dynmig::{glue, xalloc};

/// (label, tres_per_node, tres_per_job, spank env)
type Case = (
    &'static str,
    Option<&'static str>,
    Option<&'static str>,
    &'static [&'static str],
);

const CASES: &[Case] = &[
    (
        "gres:gpu:1 --mig-mem=18G",
        Some("gres:gpu:1"),
        None,
        &["_SLURM_SPANK_OPTION_dynmig_mig_mem=18G"],
    ),
    (
        "--gpus=1 --mig-profile=3g.40gb",
        None,
        Some("gres:gpu:1"),
        &["_SLURM_SPANK_OPTION_dynmig_mig_profile=3g.40gb"],
    ),
    ("gres:gpu:1 no hint", Some("gres:gpu:1"), None, &[]),
    ("gres:gpu:1g.10gb:1 typed", Some("gres:gpu:1g.10gb:1"), None, &[]),
    ("no GPU", None, None, &["SOME_OTHER=1"]),
    ("gres:gpu:4 multi-GPU", Some("gres:gpu:4"), None, &[]),
    (
        "bad hint 18Q",
        Some("gres:gpu:1"),
        None,
        &["_SLURM_SPANK_OPTION_dynmig_mig_mem=18Q"],
    ),
];

fn request(case: &Case) -> JobRequest<'static> {
    JobRequest {
        tres_per_node: case.1,
        tres_per_job: case.2,
        tres_per_socket: None,
        tres_per_task: None,
        spank_env: case.3.to_vec(),
    }
}

fn policy() -> SubmitPolicy {
    SubmitPolicy::from_config(&Config::default_embedded())
}

fn criterion_decide(c: &mut Criterion) {
    let policy = policy();
    for case in CASES {
        let req = request(case);
        c.bench_function(&format!("decide/{}", case.0), |b| {
            b.iter(|| black_box(decide(black_box(&req), &policy).is_ok()))
        });
    }
}

fn percentiles(mut ns: Vec<u64>) -> (u64, u64) {
    ns.sort_unstable();
    (ns[ns.len() / 2], ns[ns.len() * 99 / 100])
}

fn sample<F: FnMut()>(mut f: F) -> (u64, u64) {
    const N: usize = 100_000;
    for _ in 0..1000 {
        f();
    }
    let mut ns = Vec::with_capacity(N);
    for _ in 0..N {
        let t = Instant::now();
        f();
        ns.push(t.elapsed().as_nanos() as u64);
    }
    percentiles(ns)
}

/// One plugin step on a job description, as slurmctld would hand it over.
fn handle_once(case: &Case, env: &mut [*mut c_char], ready: &Ready) {
    // SAFETY: a zeroed job_desc with xmalloc'd strings, freed below.
    unsafe {
        let mut d: slurm_sys::job_desc_msg_t = std::mem::zeroed();
        d.tres_per_node = case.1.map_or(std::ptr::null_mut(), |s| xalloc::xstrdup(s));
        d.tres_per_job = case.2.map_or(std::ptr::null_mut(), |s| xalloc::xstrdup(s));
        d.spank_job_env = env.as_mut_ptr();
        d.spank_job_env_size = env.len() as u32;
        black_box(glue::submit(&mut d, ready).is_ok());
        for f in [&mut d.tres_per_node, &mut d.tres_per_job, &mut d.admin_comment] {
            xalloc::xfree(f);
        }
    }
}

fn p99_report() {
    let policy = policy();
    let ready = state::load(None, std::path::Path::new("/nonexistent/dynmig.toml")).expect("built-in defaults");
    println!(
        "\n{:<34} {:>12} {:>10} {:>16} {:>10}",
        "input", "decide p50", "p99", "job_desc p50", "p99"
    );
    for case in CASES {
        let req = request(case);
        let (p50, p99) = sample(|| {
            black_box(decide(black_box(&req), &policy).is_ok());
        });
        let owned: Vec<CString> = case.3.iter().map(|s| CString::new(*s).unwrap()).collect();
        let mut env: Vec<*mut c_char> = owned.iter().map(|c| c.as_ptr() as *mut c_char).collect();
        let (h50, h99) = sample(|| handle_once(case, &mut env, &ready));
        println!(
            "{:<34} {:>9} ns {:>7} ns {:>13} ns {:>7} ns",
            case.0, p50, p99, h50, h99
        );
    }
}

criterion_group!(benches, criterion_decide);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    p99_report();
}
