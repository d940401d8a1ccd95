//! Every fuzz target for a bounded number of inputs (CI runs `cargo test --workspace`); the
//! campaign is `cargo run --release -p dynmig-fuzz -- --cases 1000000` (docs/fuzz.md).
//!
//! `DYNMIG_FUZZ_CASES` overrides the number of inputs per target.

use dynmig_fuzz::runner::Settings;
use dynmig_fuzz::{target, TARGETS};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;

/// Inputs per target in `cargo test` (debug build): the whole file stays well under two
/// minutes on two shared cores.
const CASES: u64 = 2500;

fn run(name: &str) {
    let cases = std::env::var("DYNMIG_FUZZ_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(CASES);
    let t = target(name).expect("a target of that name");
    let report = (t.run)(&Settings::test(cases));
    assert_eq!(report.inputs, cases, "{name}: every input was drawn");
    assert!(
        report.findings.is_empty(),
        "{name}: {} failing inputs\n{}",
        report.failed_inputs(),
        report.describe_findings()
    );
}

macro_rules! fuzz_test {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                run(stringify!($name));
            }
        )*

        #[test]
        fn every_target_has_a_test() {
            let tested = [$(stringify!($name)),*];
            for t in TARGETS {
                assert!(tested.contains(&t.name), "no test runs target {}", t.name);
            }
        }
    };
}

fuzz_test!(
    job_submit_entry,
    job_modify_entry,
    spank_option,
    hints,
    sizes,
    tres,
    config_toml,
    layouts,
    node_lists,
    migparted_yaml,
    protocol_texts,
    history_wire,
    history_auth_comment,
    slurm_json_sacct,
    slurm_json_jobs,
    slurm_json_nodes,
);

/// The job_submit generator is not vacuous: it reaches refusals, rewrites and jobs passed
/// through unchanged, at submit and at update.
#[test]
fn the_job_desc_generator_reaches_every_outcome() {
    let mut runner = TestRunner::deterministic();
    let strategy = dynmig_fuzz::targets::plugins::job_desc();
    for modify in [false, true] {
        let (mut refused, mut rewritten, mut passed) = (0, 0, 0);
        for _ in 0..400 {
            let input = strategy.new_tree(&mut runner).unwrap().current();
            match dynmig_fuzz::targets::plugins::outcome(&input, modify) {
                (true, _) => refused += 1,
                (false, true) => rewritten += 1,
                (false, false) => passed += 1,
            }
        }
        // Before Slurm 23.02.6 every update naming a GPU is refused (dynmig_core::modify):
        // none is rewritten there.
        let retype = dynmig_core::modify::update_replaces_gpu_request(job_submit_dynmig::entry::plugin_version);
        let rewrites_expected = !modify || retype;
        assert!(
            refused >= 20 && passed >= 20 && (rewritten >= 20) == rewrites_expected,
            "modify={modify}: refused {refused}, rewritten {rewritten}, passed {passed}"
        );
    }
}
