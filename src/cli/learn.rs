//! The simulator's and the learned policy's commands: `simulate`, `train` and
//! `train-residual`.

use anyhow::Result;

/// `dynmig simulate`: loads the `--learned-model` files (refused with each load's message when
/// none fits the one cluster's GPUs), then runs the simulator ([`dynmig_lab::cli::run`]).
///
/// # Errors
/// A model cannot be loaded or fits no GPU model, or the simulation fails.
pub fn simulate(mut args: Box<dynmig_lab::cli::SimulateArgs>) -> Result<()> {
    if !args.learned_model.is_empty() {
        let limits = dynmig_lab::cli::eval_options(&args)?.limits;
        args.learned = dynmig_sim::policies::learned_model::load_externals(&args.learned_model, &limits)?;
        // One cluster: a model for its GPUs is needed (the message of the load that
        // refuses it says what each was trained for).
        if !args.matrix && !args.sensitivity {
            let model = dynmig_lab::cli::parse_model(&args.model)?;
            if !args.learned.iter().any(|e| e.gpu_model == Some(model.name)) {
                let errors: Vec<String> = args
                    .learned_model
                    .iter()
                    .filter_map(|p| dynmig_learn::Model::load(p, model).err().map(|e| e.to_string()))
                    .collect();
                anyhow::bail!("{}", errors.join("; "));
            }
        }
    }
    dynmig_lab::cli::run(&args)
}

/// `dynmig train`: trains the learned policy and prints what it kept.
///
/// # Errors
/// The training fails ([`dynmig_train::train`]).
pub fn train(args: &dynmig_train::TrainArgs) -> Result<()> {
    let t = dynmig_train::train(args)?;
    let last = t.curve.last().map_or(0, |p| p.iteration);
    println!(
        "trained {last} iterations; model {} (greedy ET on the training days {:.4}; the warm-up's layouts kept {:.4}, plan {:.4}); curve {}",
        t.model.display(),
        t.best_et,
        t.keep_et,
        t.plan_et,
        t.model.with_file_name("curve.svg").display()
    );
    Ok(())
}

/// `dynmig train-residual`: trains the learned residual on the guarded default and prints its
/// checkpoints and what it kept.
///
/// # Errors
/// The training fails ([`dynmig_train::residual::train_residual`]).
pub fn train_residual(args: &dynmig_train::residual::ResidualArgs) -> Result<()> {
    let t = dynmig_train::residual::train_residual(args, &|line| eprintln!("train-residual: {line}"))?;
    for c in &t.checkpoints {
        println!(
            "checkpoint after {} episodes: mean reward {:.4} on the checkpoint days, adjustments (follow, keep, relax, recent) {:?}",
            c.episodes, c.reward, c.adjusted
        );
    }
    println!("kept: {}; written to {}", t.model.trained_on, args.model_out.display());
    Ok(())
}
