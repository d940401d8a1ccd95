//! A learned residual on the guarded default (issue 27, item 4; docs/learned.md, "Residual"):
//! at each of the guard's decisions a small model adjusts its proposal instead of choosing a
//! layout from scratch.
//!
//! - **What it sees** ([`Context`]): the guard's best candidate against the layout the nodes
//!   follow, on the deciding (14-day) and the recent (3-day) evidence: the log-ratio of ET,
//!   of the worst job class's wait p95 and of mean bounded slowdown, whether the guard's own
//!   rule takes the candidate, and whether the nodes follow the base.
//! - **What it does** ([`Adjust`]): follow the guard; keep the current layout (refuse a change
//!   the guard would make); relax (take the candidate when it is better in ET on both
//!   windows, without the margin and the class check); or recent (take the best candidate of
//!   the recent window when it is better there by the margin, whatever the 14 days say). The rules that keep jobs from being
//!   stranded and the way back to the base are the guard's and are never adjusted.
//! - **Model**: a linear softmax over the four adjustments ([`Residual`]), 4 x
//!   [`FEATURES`] weights, evaluated in plain Rust; trained by `dynmig-train`'s
//!   `residual` module (REINFORCE against the guard's own run).

use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex, PoisonError};

/// Inputs of the model: bias, ET gain on the long and on the recent window, worst class wait
/// ratio, bounded slowdown ratio, whether the guard takes it, whether the nodes are on the base.
pub const FEATURES: usize = 7;

/// How the residual adjusts one of the guard's decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Adjust {
    /// What the guard decides.
    Follow,
    /// No change at this decision (the guard's way back and stranding rules still act).
    Keep,
    /// The candidate if its ET is lower than the current layout's on both windows.
    Relax,
    /// The best candidate on the recent window alone, if its ET there is lower by the
    /// guard's margin (the first build's rule: quick to follow a shift, blind to the 14 days).
    Recent,
}

/// How many adjustments there are: the model's outputs.
pub const N_ADJUSTS: usize = 4;

/// The adjustments, in the model's output order.
pub const ADJUSTS: [Adjust; N_ADJUSTS] = [Adjust::Follow, Adjust::Keep, Adjust::Relax, Adjust::Recent];

/// What one decision looked like to the residual (module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Context {
    /// ln(current ET / candidate ET) on the long window: above 0, the candidate is better.
    pub long_gain: f64,
    /// The same on the recent window.
    pub short_gain: f64,
    /// ln of the worst job class's wait p95 under the candidate over the current layout's
    /// (each plus 10 min, so that short waits do not dominate), on the long window.
    pub class_wait: f64,
    /// ln(candidate mean bounded slowdown / current's) on the long window.
    pub bsld: f64,
    /// Whether the guard's own rule takes the candidate.
    pub guard_takes: bool,
    /// Whether the nodes follow the base layout now.
    pub at_base: bool,
}

impl Context {
    /// The model's inputs, each clipped to [-3, 3].
    pub fn features(&self) -> [f64; FEATURES] {
        let c = |x: f64| if x.is_finite() { x.clamp(-3.0, 3.0) } else { 0.0 };
        [
            1.0,
            c(self.long_gain * 10.0),
            c(self.short_gain * 10.0),
            c(self.class_wait),
            c(self.bsld),
            f64::from(u8::from(self.guard_takes)),
            f64::from(u8::from(self.at_base)),
        ]
    }
}

/// The model: a linear softmax over [`ADJUSTS`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Residual {
    /// Format tag, [`Residual::FORMAT`].
    pub format: String,
    /// One row of [`FEATURES`] weights per adjustment, in [`ADJUSTS`] order.
    pub weights: Vec<Vec<f64>>,
    /// What it was trained on and how the checkpoint was picked (free text).
    pub trained_on: String,
}

impl Residual {
    /// The file format this code reads and writes.
    pub const FORMAT: &'static str = "dynmig-residual/v1";

    /// The untrained model: follows the guard with probability about 0.71 (a bias of 2 on
    /// follow), the other three adjustments alike.
    pub fn initial() -> Self {
        let mut weights = vec![vec![0.0; FEATURES]; ADJUSTS.len()];
        weights[0][0] = 2.0;
        Self {
            format: Self::FORMAT.into(),
            weights,
            trained_on: "untrained".into(),
        }
    }

    /// The probability of each adjustment for `features`.
    pub fn probs(&self, features: &[f64; FEATURES]) -> [f64; N_ADJUSTS] {
        let mut p = [0.0; N_ADJUSTS];
        for (q, w) in p.iter_mut().zip(&self.weights) {
            *q = w.iter().zip(features).map(|(a, b)| a * b).sum();
        }
        let m = p.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        for q in &mut p {
            *q = (*q - m).exp();
        }
        let z: f64 = p.iter().sum();
        p.map(|q| q / z)
    }

    /// Reads a model file.
    ///
    /// # Errors
    /// Not JSON of this shape, another format, or weights of the wrong shape (the message says
    /// which).
    pub fn parse(text: &str) -> Result<Self, String> {
        let r: Residual = serde_json::from_str(text).map_err(|e| format!("not a residual model: {e}"))?;
        if r.format != Self::FORMAT {
            return Err(format!(
                "residual model format '{}', this dynmig reads '{}'",
                r.format,
                Self::FORMAT
            ));
        }
        if r.weights.len() != ADJUSTS.len() || r.weights.iter().any(|w| w.len() != FEATURES) {
            return Err(format!("residual model weights are not {} x {FEATURES}", ADJUSTS.len()));
        }
        Ok(r)
    }

    /// The model file's text.
    pub fn encode(&self) -> String {
        serde_json::to_string_pretty(self).expect("a residual model serialises")
    }
}

/// One adjustment made while exploring: what the model saw, chose and with what
/// probabilities (training reads them back).
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The model's inputs.
    pub features: [f64; FEATURES],
    /// The index in [`ADJUSTS`] chosen.
    pub action: usize,
    /// The probabilities it was drawn from.
    pub probs: [f64; N_ADJUSTS],
}

/// How a run uses the residual: greedily (the most likely adjustment) or drawing adjustments
/// from its probabilities with a seed, recording each in `record`.
#[derive(Debug, Clone)]
pub struct ResidualUse {
    /// The model.
    pub model: Residual,
    /// `Some(seed)`: draw adjustments (training); `None`: the most likely one.
    pub explore: Option<u64>,
    /// Where drawn adjustments are recorded (training).
    pub record: Option<Arc<Mutex<Vec<Step>>>>,
}

impl PartialEq for ResidualUse {
    fn eq(&self, other: &Self) -> bool {
        self.model == other.model && self.explore == other.explore
    }
}

impl ResidualUse {
    /// The greedy use of `model`.
    pub fn greedy(model: Residual) -> Self {
        Self {
            model,
            explore: None,
            record: None,
        }
    }

    /// The adjustment for `cx` at decision time `now_s` (the draw's seed mixes it in, so that
    /// a run is the same every time it is made).
    pub fn adjust(&self, cx: &Context, now_s: f64) -> Adjust {
        let f = cx.features();
        let p = self.model.probs(&f);
        let action = match self.explore {
            None => (0..p.len()).max_by(|a, b| p[*a].total_cmp(&p[*b])).unwrap_or(0),
            Some(seed) => {
                let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ (now_s as u64).wrapping_mul(0x9E37_79B9));
                let u: f64 = rng.gen();
                let mut acc = 0.0;
                p.iter()
                    .position(|q| {
                        acc += q;
                        u < acc
                    })
                    .unwrap_or(p.len() - 1)
            }
        };
        if let Some(r) = &self.record {
            r.lock().unwrap_or_else(PoisonError::into_inner).push(Step {
                features: f,
                action,
                probs: p,
            });
        }
        ADJUSTS[action]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cx(long_gain: f64, guard_takes: bool) -> Context {
        Context {
            long_gain,
            short_gain: long_gain,
            class_wait: 0.0,
            bsld: 0.0,
            guard_takes,
            at_base: true,
        }
    }

    #[test]
    fn the_untrained_model_follows_the_guard_and_a_model_file_round_trips() {
        let r = Residual::initial();
        let p = r.probs(&cx(0.1, true).features());
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert!(
            p[0] > 0.7 && (p[1] - p[2]).abs() < 1e-12 && (p[2] - p[3]).abs() < 1e-12,
            "{p:?}"
        );
        assert_eq!(
            ResidualUse::greedy(r.clone()).adjust(&cx(0.1, true), 0.0),
            Adjust::Follow
        );
        assert_eq!(Residual::parse(&r.encode()).unwrap(), r);
        let mut bad = r.clone();
        bad.weights.pop();
        assert!(Residual::parse(&bad.encode()).unwrap_err().contains("not 4 x 7"));
        bad = r;
        bad.format = "x".into();
        assert!(Residual::parse(&bad.encode()).unwrap_err().contains("format 'x'"));
    }

    #[test]
    fn exploring_draws_each_adjustment_records_it_and_is_the_same_every_run() {
        let mut model = Residual::initial();
        model.weights[0][0] = 0.0;
        let record = Arc::new(Mutex::new(Vec::new()));
        let u = ResidualUse {
            model,
            explore: Some(7),
            record: Some(record.clone()),
        };
        let drawn: Vec<Adjust> = (0..80)
            .map(|d| u.adjust(&cx(0.0, false), f64::from(d) * 86_400.0))
            .collect();
        for a in ADJUSTS {
            assert!(drawn.contains(&a), "{a:?} never drawn");
        }
        let again: Vec<Adjust> = (0..80)
            .map(|d| u.adjust(&cx(0.0, false), f64::from(d) * 86_400.0))
            .collect();
        assert_eq!(drawn, again);
        assert_eq!(record.lock().unwrap().len(), 160);
    }
}
