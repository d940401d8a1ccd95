//! `dynmig simulate`'s options as the docs write them (docs/simulate.md).

use clap::Parser;
use dynmig_lab::cli::{eval_options, model_params, SimulateArgs};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: SimulateArgs,
}

fn args(a: &[&str]) -> SimulateArgs {
    Cli::parse_from(std::iter::once("simulate").chain(a.iter().copied())).args
}

#[test]
fn pairs_are_written_with_a_comma_and_a_wrong_count_is_refused_with_the_form() {
    let a = args(&["--due", "2,4", "--search-days", "0,7"]);
    let m = model_params(&a).unwrap();
    assert_eq!((m.due_lo, m.due_hi), (2.0, 4.0));
    assert_eq!(eval_options(&a).unwrap().search_days, Some((0.0, 7.0)));
    let d = model_params(&args(&[])).unwrap();
    assert_eq!((d.due_lo, d.due_hi), (1.0, 1.5), "the default range");
    let e = model_params(&args(&["--due", "2"])).unwrap_err().to_string();
    assert!(e.contains("allowed two factors LO,HI"), "{e}");
    let e = eval_options(&args(&["--search-days", "0,7,9"]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("allowed two days A,B"), "{e}");
}
