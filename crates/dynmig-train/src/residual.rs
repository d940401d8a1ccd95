//! Training the learned residual on the guarded default (issue 27, item 4; the model and
//! what it adjusts: `dynmig_sim::policies::residual`; docs/learned.md, "Residual").
//!
//! - **Episodes** are cells as `dynmig simulate --matrix` runs them (30 days, judged from
//!   day 14) on development data only: the default trace and the synthetic workloads
//!   (`--matrix-traces`), seeds `--train-seeds` (5-12 by default; the reported matrices use
//!   1-4). Each episode runs the guarded default with the residual drawing its adjustments,
//!   beside the guarded default itself on the same cell (run once per cell and kept).
//! - **Reward**: ln(ET of the guarded default / ET with the residual) on the judged days:
//!   above 0, the residual did better than the default it adjusts.
//! - **Order**: the training cells are visited with a stride prime to their count (every
//!   cell once before any twice, traces and models mixed).
//! - **Update**: REINFORCE with a running-mean baseline, episodes in batches of `--parallel`
//!   (run on that many threads), the gradient of the log-probability of each drawn
//!   adjustment times the episode's advantage, averaged over its adjustments.
//! - **Checkpoints** every `--checkpoint-every` batches, the untrained model included, are
//!   judged greedily on the checkpoint days (seeds `--checkpoint-seeds`, 13-14: days no
//!   report judges); the best mean reward there is kept, and the untrained model (which
//!   always follows: the guarded default itself) wins ties, so a residual that does not
//!   beat the default on those days is never chosen.

use anyhow::{bail, Context as _, Result};
use dynmig_lab::cli::SimulateArgs;
use dynmig_lab::evaluate::PolicyName;
use dynmig_lab::matrix::{matrix_cells, parse_seeds, run_cell, Cell, Setup};
use dynmig_sim::policies::residual::{Residual, ResidualUse, Step, FEATURES, N_ADJUSTS};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Arguments of `dynmig train-residual`.
#[derive(Debug, Clone, clap::Args)]
pub struct ResidualArgs {
    /// Cluster, load and traces (`--matrix-traces`, `--matrix-models`, `--matrix-drains`), as
    /// for `dynmig simulate --matrix`.
    #[command(flatten)]
    pub sim: SimulateArgs,
    /// Episodes in all.
    #[arg(long, default_value_t = 96)]
    pub episodes: usize,
    /// Episodes per update (run at once, one thread each).
    #[arg(long, default_value_t = 2)]
    pub parallel: usize,
    /// Seeds of the training episodes.
    #[arg(long, default_value = "5-12")]
    pub train_seeds: String,
    /// Seeds of the checkpoint days.
    #[arg(long, default_value = "13-14")]
    pub checkpoint_seeds: String,
    /// Updates between checkpoints.
    #[arg(long, default_value_t = 12)]
    pub checkpoint_every: usize,
    /// Learning rate.
    #[arg(long, default_value_t = 0.5)]
    pub lr: f64,
    /// The model file written.
    #[arg(long, default_value = "residual.json")]
    pub model_out: PathBuf,
}

/// One checkpoint's judgement.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// Episodes trained on before it.
    pub episodes: usize,
    /// Mean reward on the checkpoint days (greedy).
    pub reward: f64,
    /// Its adjustments there: follow, keep, relax, recent.
    pub adjusted: [usize; N_ADJUSTS],
}

/// What a training run produced.
#[derive(Debug, Clone)]
pub struct ResidualTrained {
    /// The model kept (the best checkpoint).
    pub model: Residual,
    /// Every checkpoint, in order.
    pub checkpoints: Vec<Checkpoint>,
    /// Mean reward of each batch of training episodes.
    pub curve: Vec<f64>,
}

/// The ET of the guarded default and of the residual's run in a cell's rows.
fn ets(rows: &[dynmig_sim::metrics::Metrics]) -> (Option<f64>, Option<f64>) {
    let et = |name: &str| rows.iter().find(|r| r.policy == name).map(|r| r.et);
    (et("guarded"), et("guarded-residual"))
}

/// Runs `cell` with `use_` (and the guarded default when `guarded` has no ET for it yet);
/// returns the reward and the adjustments recorded.
fn episode(
    cell: &Cell,
    setup: &Setup,
    pods: &BTreeMapPods,
    use_: ResidualUse,
    guarded: &Mutex<HashMap<String, f64>>,
) -> Result<(f64, Vec<Step>)> {
    let key = format!("{} / {}", cell.group(), cell.seed);
    let known = guarded
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(&key)
        .copied();
    let record = Arc::new(Mutex::new(Vec::new()));
    let mut setup = setup.clone();
    setup.opts.policies = match known {
        Some(_) => vec![PolicyName::GuardedResidual],
        None => vec![PolicyName::Guarded, PolicyName::GuardedResidual],
    };
    setup.opts.frozen = false;
    setup.opts.residual = Some(ResidualUse {
        record: Some(record.clone()),
        ..use_
    });
    let out = run_cell(cell, &setup, pods)?;
    let (g, r) = ets(&out.rows);
    let g = match (known, g) {
        (Some(g), _) | (None, Some(g)) => g,
        (None, None) => bail!("{key}: no guarded row ({:?})", out.skipped),
    };
    guarded
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(key.clone(), g);
    let r = r.with_context(|| format!("{key}: no guarded-residual row ({:?})", out.skipped))?;
    let steps = std::mem::take(&mut *record.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    Ok(((g / r).ln(), steps))
}

type BTreeMapPods = std::collections::BTreeMap<String, Vec<dynmig_sim::workload::alibaba::Pod>>;

/// Runs `jobs` (cell index, residual use) on one thread each, in order.
fn run_batch(
    cells: &[Cell],
    setup: &Setup,
    pods: &BTreeMapPods,
    jobs: Vec<(usize, ResidualUse)>,
    guarded: &Mutex<HashMap<String, f64>>,
) -> Vec<Result<(f64, Vec<Step>)>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = jobs
            .into_iter()
            .map(|(i, u)| s.spawn(move || episode(&cells[i], setup, pods, u, guarded)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("an episode panicked"))))
            .collect()
    })
}

/// A step through `n` cells that is prime to `n` and not 1 (1 for n < 3): 37 or the next
/// number prime to `n` above it.
fn stride(n: usize) -> usize {
    fn gcd(a: usize, b: usize) -> usize {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }
    if n < 3 {
        return 1;
    }
    (37..).find(|s| gcd(*s, n) == 1).unwrap_or(1)
}

/// The REINFORCE step of `steps` with `advantage` on `model` (learning rate `lr`).
fn update(model: &mut Residual, steps: &[Step], advantage: f64, lr: f64) {
    if steps.is_empty() {
        return;
    }
    let n = steps.len() as f64;
    for st in steps {
        for (k, row) in model.weights.iter_mut().enumerate() {
            let chosen = if k == st.action { 1.0 } else { 0.0 };
            for (j, w) in row.iter_mut().enumerate().take(FEATURES) {
                *w += lr * advantage * (chosen - st.probs[k]) * st.features[j] / n;
            }
        }
    }
}

/// Judges `model` greedily on `cells` (checkpoint days): mean reward and adjustments made.
fn judge(
    model: &Residual,
    cells: &[Cell],
    setup: &Setup,
    pods: &BTreeMapPods,
    threads: usize,
    guarded: &Mutex<HashMap<String, f64>>,
) -> Result<Checkpoint> {
    let mut rewards = Vec::new();
    let mut adjusted = [0usize; N_ADJUSTS];
    for chunk in (0..cells.len()).collect::<Vec<_>>().chunks(threads.max(1)) {
        let jobs = chunk.iter().map(|&i| (i, ResidualUse::greedy(model.clone()))).collect();
        for r in run_batch(cells, setup, pods, jobs, guarded) {
            let (reward, steps) = r?;
            rewards.push(reward);
            for st in steps {
                adjusted[st.action] += 1;
            }
        }
    }
    Ok(Checkpoint {
        episodes: 0,
        reward: rewards.iter().sum::<f64>() / rewards.len().max(1) as f64,
        adjusted,
    })
}

/// Trains the residual as the module docs say and writes the kept model to `--model-out`.
///
/// # Errors
/// Bad arguments, a trace that cannot be read, a cell that fails, or a model file that cannot
/// be written.
pub fn train_residual(a: &ResidualArgs, progress: &dyn Fn(&str)) -> Result<ResidualTrained> {
    let sim = &a.sim;
    let model0 = dynmig_lab::cli::parse_model(&sim.model)?;
    let gpus = sim.nodes * sim.gpus_per_node;
    let load = dynmig_lab::cli::parse_load(&sim.load, gpus)?;
    let params = dynmig_lab::cli::model_params(sim)?;
    let mut setup = dynmig_lab::matrix_cli::setup(sim, load, model0)?;
    setup.opts.warn = false;
    let models = sim
        .matrix_models
        .iter()
        .map(|m| dynmig_lab::cli::parse_model(m))
        .collect::<Result<Vec<_>>>()?;
    let drains = sim
        .matrix_drains
        .iter()
        .map(|d| dynmig_lab::cli::parse_drain(d))
        .collect::<Result<Vec<_>>>()?;
    for t in &sim.matrix_traces {
        if t.starts_with("gpushare") {
            bail!("--matrix-traces {t}: the residual trains on development data only (the default trace and the synthetic workloads)");
        }
    }
    let pods = dynmig_lab::matrix_cli::read_traces(&sim.matrix_traces)?;
    let train = matrix_cells(
        &sim.matrix_traces,
        &models,
        &drains,
        &parse_seeds(&a.train_seeds)?,
        &params,
    );
    let check = matrix_cells(
        &sim.matrix_traces,
        &models,
        &drains,
        &parse_seeds(&a.checkpoint_seeds)?,
        &params,
    );
    if train.is_empty() || check.is_empty() {
        bail!("no training or checkpoint cells: give --matrix-traces, --train-seeds and --checkpoint-seeds");
    }
    let guarded = Mutex::new(HashMap::new());
    let threads = a.parallel.max(1);
    let mut model = Residual::initial();
    let mut best = (judge(&model, &check, &setup, &pods, threads, &guarded)?, model.clone());
    progress(&format!(
        "checkpoint 0 (untrained): reward {:.4}, adjustments {:?}",
        best.0.reward, best.0.adjusted
    ));
    let mut checkpoints = vec![best.0.clone()];
    let mut curve = Vec::new();
    let mut baseline = 0.0;
    let mut done = 0usize;
    let mut updates = 0usize;
    while done < a.episodes {
        let jobs: Vec<(usize, ResidualUse)> = (0..threads.min(a.episodes - done))
            .map(|k| {
                // A stride prime to the cell count visits every cell once before any twice, in
                // an order that mixes traces, models and seeds.
                let i = ((done + k) * stride(train.len())) % train.len();
                let use_ = ResidualUse {
                    model: model.clone(),
                    explore: Some(0xD1A6 + (done + k) as u64),
                    record: None,
                };
                (i, use_)
            })
            .collect();
        let n = jobs.len();
        let results = run_batch(&train, &setup, &pods, jobs, &guarded);
        let mut batch = Vec::new();
        for r in results {
            batch.push(r?);
        }
        let mean = batch.iter().map(|(r, _)| r).sum::<f64>() / batch.len() as f64;
        for (reward, steps) in &batch {
            update(&mut model, steps, reward - baseline, a.lr);
        }
        baseline = if updates == 0 {
            mean
        } else {
            0.9 * baseline + 0.1 * mean
        };
        curve.push(mean);
        done += n;
        updates += 1;
        progress(&format!("episodes {done}: mean reward {mean:.4}"));
        if updates.is_multiple_of(a.checkpoint_every.max(1)) || done >= a.episodes {
            let mut c = judge(&model, &check, &setup, &pods, threads, &guarded)?;
            c.episodes = done;
            progress(&format!(
                "checkpoint after {done} episodes: reward {:.4}, adjustments {:?}",
                c.reward, c.adjusted
            ));
            if c.reward > best.0.reward {
                best = (c.clone(), model.clone());
            }
            checkpoints.push(c);
        }
    }
    let mut kept = best.1;
    kept.trained_on = format!(
        "REINFORCE, {} episodes on {} (seeds {}), checkpoint of {} episodes picked on seeds {} (reward {:.4})",
        a.episodes,
        sim.matrix_traces.join(","),
        a.train_seeds,
        best.0.episodes,
        a.checkpoint_seeds,
        best.0.reward
    );
    std::fs::write(&a.model_out, kept.encode()).with_context(|| format!("writing {}", a.model_out.display()))?;
    Ok(ResidualTrained {
        model: kept,
        checkpoints,
        curve,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rewarded_adjustment_gets_likelier_and_a_punished_one_less_likely() {
        let f = [1.0, 0.5, 0.2, 0.0, 0.0, 1.0, 1.0];
        for (advantage, likelier) in [(1.0, true), (-1.0, false)] {
            let mut m = Residual::initial();
            let p0 = m.probs(&f);
            let st = Step {
                features: f,
                action: 3,
                probs: p0,
            };
            update(&mut m, &[st], advantage, 0.5);
            let p1 = m.probs(&f);
            assert_eq!(p1[3] > p0[3], likelier, "{p0:?} -> {p1:?}");
        }
    }

    #[test]
    fn the_stride_visits_every_cell_once_before_any_twice() {
        for n in [1usize, 2, 7, 37, 56, 74] {
            let s = stride(n);
            let mut seen: Vec<usize> = (0..n).map(|i| (i * s) % n).collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..n).collect::<Vec<_>>(), "n {n}, stride {s}");
        }
    }
}
