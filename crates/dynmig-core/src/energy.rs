//! The GPU power model: one for the simulator, the simulated backend and energy reports.
//!
//! NVML measures power per physical GPU only, so the power of a MIG instance must be
//! modelled. [`PowerModel`] is a power law fitted to the one public per-instance measurement
//! known to the project: an A100-SXM4-40GB running one `gpu_burn` per MIG instance
//! (rakin000/Power-Aware-MIG-Scheduler on GitHub): 46 W idle, 110 W with a busy 1g instance,
//! 141 W with a busy 2g, 170 W with a busy 3g, whole-board power. A board draws
//!
//! `min(tdp, idle + sum over busy instances of scale x (c / C)^exponent)`
//!
//! with `c` an instance's compute slices and `C` the GPU's. The A100 fit gives about
//! 64/96/123 W above idle for a busy 1g/2g/3g instance and 204 W for a busy 7g.
//! Other models have no per-instance measurement: their model is the A100 fit scaled by the
//! ratio of board power limits ([`GpuModel::power`], from NVIDIA's datasheets), an assumption
//! that [`PowerModel::source`] says, over the model's idle power (measured on an H100 80GB and
//! an H200 SXM with MIG off: docs/results/hardware-2026-11-26.md; else scaled the same way).
//!
//! ```
//! use dynmig_core::energy::PowerModel;
//! use dynmig_core::geometry::A100_40GB;
//! let m = PowerModel::for_model(&A100_40GB);
//! let w = m.gpu_w(m.instance_w(3)); // one busy 3g instance
//! assert!((w - 170.0).abs() < 3.0);
//! ```

use crate::geometry::{GpuModel, A100_IDLE_W, A100_TDP_W};
use serde::{Deserialize, Serialize};

/// A100-SXM4-40GB whole-board power with one `gpu_burn` on a busy 1g, 2g and 3g instance:
/// `(compute slices, W)` (rakin000/Power-Aware-MIG-Scheduler).
pub const A100_BURN_W: [(u8, f64); 3] = [(1, 110.0), (2, 141.0), (3, 170.0)];

/// The source of the A100 fit.
const A100_SOURCE: &str =
    "A100-SXM4-40GB gpu_burn measurements (rakin000/Power-Aware-MIG-Scheduler), least-squares power-law fit";

/// Power of one GPU: `min(tdp, idle + sum over busy instances of scale x (c / C)^exponent)`,
/// with `c` the instance's compute slices and `C` the GPU's. All powers in watts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PowerModel {
    /// Idle board power, W (also drawn while reconfiguring and by idle instances).
    pub idle_w: f64,
    /// Busy power of an instance holding all compute slices, above idle, W.
    pub scale_w: f64,
    /// Concavity exponent (< 1: small instances draw more per slice).
    pub exponent: f64,
    /// Board power cap (TDP), W.
    pub tdp_w: f64,
    /// Compute slices of the GPU.
    pub full_slices: u8,
    /// Where the numbers come from.
    pub source: String,
}

/// Why [`PowerModel::fit`] cannot fit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FitError {
    /// Fewer than two points with distinct compute slices lie above idle.
    #[error("a power fit needs two points above idle with different compute slices; got {usable} usable of {given}")]
    TooFewPoints {
        /// Points above idle with distinct slices.
        usable: usize,
        /// Points given.
        given: usize,
    },
    /// A point has 0 compute slices, more than the GPU's, or `full_slices` is 0.
    #[error("compute slices must be 1..={full_slices}; got {slices}")]
    BadSlices {
        /// The offending slice count.
        slices: u8,
        /// The GPU's compute slices.
        full_slices: u8,
    },
}

impl PowerModel {
    /// Fits `scale` and `exponent` by least squares on `ln(W - idle) = ln(scale) +
    /// exponent x ln(c / C)` over `points` (compute slices, whole-board W).
    ///
    /// # Errors
    /// [`FitError`] if a point's slices are outside `1..=full_slices`, or fewer than two
    /// points with distinct slices lie above idle.
    pub fn fit(idle_w: f64, points: &[(u8, f64)], full_slices: u8, tdp_w: f64, source: &str) -> Result<Self, FitError> {
        if let Some((c, _)) = points.iter().find(|(c, _)| *c == 0 || *c > full_slices) {
            return Err(FitError::BadSlices {
                slices: *c,
                full_slices,
            });
        }
        let xy: Vec<(f64, f64)> = points
            .iter()
            .filter(|(_, w)| *w > idle_w)
            .map(|(c, w)| ((f64::from(*c) / f64::from(full_slices)).ln(), (w - idle_w).ln()))
            .collect();
        let n = xy.len() as f64;
        let distinct = {
            let mut cs: Vec<u8> = points.iter().filter(|(_, w)| *w > idle_w).map(|(c, _)| *c).collect();
            cs.sort_unstable();
            cs.dedup();
            cs.len()
        };
        if distinct < 2 {
            return Err(FitError::TooFewPoints {
                usable: distinct,
                given: points.len(),
            });
        }
        let (mx, my) = (
            xy.iter().map(|p| p.0).sum::<f64>() / n,
            xy.iter().map(|p| p.1).sum::<f64>() / n,
        );
        let sxy: f64 = xy.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        let sxx: f64 = xy.iter().map(|p| (p.0 - mx).powi(2)).sum();
        let exponent = sxy / sxx;
        let scale_w = (my - exponent * mx).exp();
        Ok(Self {
            idle_w,
            scale_w,
            exponent,
            tdp_w,
            full_slices,
            source: source.to_string(),
        })
    }

    /// The A100 fit (46 W idle; 1g 110 W, 2g 141 W, 3g 170 W; 400 W cap). Gives about
    /// 64/96/123 W per 1g/2g/3g instance and 204 W for a busy 7g.
    pub fn a100() -> Self {
        Self::fit(
            A100_IDLE_W,
            &A100_BURN_W,
            crate::geometry::A100_40GB.compute_slices,
            A100_TDP_W,
            A100_SOURCE,
        )
        .expect("the A100 measurements are three points above idle")
    }

    /// H100 SXM5: no per-instance measurement is known; the A100 fit scaled by the ratio of
    /// TDPs (700 / 400), over the H100's measured idle (71.5 W). An assumption, marked as such
    /// in its `source`.
    pub fn h100() -> Self {
        Self::for_model(&crate::geometry::H100_80GB)
    }

    /// The model for `model`: the A100 fit's instance power scaled by `model.power.tdp_w /
    /// 400 W`, capped at the model's TDP, over the model's own compute slices and idle power
    /// (`model.power.idle_w`: measured for the A100, H100-80GB and H200-141GB, else the A100's
    /// scaled by the same ratio). For the A100-40GB and -80GB this is [`PowerModel::a100`]
    /// exactly.
    pub fn for_model(model: &GpuModel) -> Self {
        let a = Self::a100();
        let k = model.power.tdp_w / A100_TDP_W;
        if k == 1.0 && model.compute_slices == a.full_slices && model.power.idle_w == a.idle_w {
            return a;
        }
        let short = model.name.split('-').next().unwrap_or(model.name);
        let idle = if model.power.idle_measured {
            format!(", idle {} W measured", model.power.idle_w)
        } else {
            String::new()
        };
        Self {
            idle_w: model.power.idle_w,
            scale_w: a.scale_w * k,
            exponent: a.exponent,
            tdp_w: model.power.tdp_w,
            full_slices: model.compute_slices,
            source: format!(
                "assumed: A100 fit scaled by TDP ratio {}/{}{idle} (no {short} MIG power measurement known)",
                model.power.tdp_w, A100_TDP_W
            ),
        }
    }

    /// Busy power of one instance of `slices` compute slices above idle, W (before the cap).
    pub fn instance_w(&self, slices: u8) -> f64 {
        self.scale_w * (f64::from(slices) / f64::from(self.full_slices)).powf(self.exponent)
    }

    /// Board power with `busy_w` of instance power above idle, W.
    pub fn gpu_w(&self, busy_w: f64) -> f64 {
        (self.idle_w + busy_w).min(self.tdp_w)
    }

    /// Board power of a GPU whose busy instances have the given compute slices, W: idle plus
    /// [`PowerModel::instance_w`] of each, capped at the TDP.
    pub fn board_w(&self, busy_compute_slices: &[u8]) -> f64 {
        self.gpu_w(busy_compute_slices.iter().map(|&c| self.instance_w(c)).sum())
    }

    /// A lower bound on what one busy instance of `slices` adds to its board's power, however
    /// the board's other instances are loaded: `min(instance_w, (tdp - idle) x c / C)`.
    /// (Capped or not, a board's power above idle is at least the sum of these over its busy
    /// instances, since their slices sum to at most C.)
    pub fn instance_lb_w(&self, slices: u8) -> f64 {
        self.instance_w(slices)
            .min((self.tdp_w - self.idle_w) * f64::from(slices) / f64::from(self.full_slices))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::{A100_40GB, A100_80GB, A30_24GB, GH200_96GB, H100_80GB, H200_141GB, MODELS};

    #[test]
    fn the_a100_fit_stays_near_the_measurements() {
        let m = PowerModel::a100();
        for (c, w) in A100_BURN_W {
            assert!(
                (m.gpu_w(m.instance_w(c)) - w).abs() < 3.0,
                "{c}g: {}",
                m.gpu_w(m.instance_w(c))
            );
        }
        assert_eq!(m.board_w(&[]), 46.0);
        assert_eq!(m.board_w(&[1; 7]), 400.0, "seven busy 1g hit the cap");
        assert!(m.exponent < 1.0 && m.exponent > 0.5, "{}", m.exponent);
    }

    /// The simulator's results depend on these numbers: the A100 model must stay what
    /// `PowerModel::a100()` was; the H100's keeps the TDP-scaled A100 fit (scale, exponent,
    /// cap) over its measured idle (71.5 W, docs/results/hardware-2026-11-26.md).
    #[test]
    fn simulator_numbers_do_not_move_for_a100_and_h100() {
        let a = PowerModel::a100();
        assert_eq!(PowerModel::for_model(&A100_40GB), a);
        assert_eq!(PowerModel::for_model(&A100_80GB), a);
        let h = PowerModel::for_model(&H100_80GB);
        assert_eq!(h.scale_w.to_bits(), (a.scale_w * 1.75).to_bits());
        assert_eq!((h.tdp_w, h.full_slices, h.exponent), (700.0, 7, a.exponent));
        assert_eq!(h.idle_w, 71.5);
        assert_eq!(
            h.source,
            "assumed: A100 fit scaled by TDP ratio 700/400, idle 71.5 W measured (no H100 MIG power measurement known)"
        );
        let h200 = PowerModel::for_model(&H200_141GB);
        assert_eq!((h200.idle_w, h200.tdp_w), (80.2, 700.0));
        assert_eq!(h200.scale_w.to_bits(), h.scale_w.to_bits());
        // Unmeasured models keep the A100 idle scaled by TDP.
        let g = PowerModel::for_model(&GH200_96GB);
        assert_eq!(g.idle_w.to_bits(), (a.idle_w * 2.25).to_bits());
    }

    #[test]
    fn every_model_has_sane_board_power_and_its_own_slices() {
        for m in MODELS {
            let p = &m.power;
            assert!(p.idle_w > 0.0 && p.idle_w < p.tdp_w, "{}", m.name);
            assert!(!p.source.is_empty(), "{}", m.name);
            let pm = PowerModel::for_model(m);
            assert_eq!(pm.full_slices, m.compute_slices, "{}", m.name);
            assert!((pm.idle_w - p.idle_w).abs() < 1e-9, "{}", m.name);
        }
        assert_eq!(PowerModel::for_model(&A30_24GB).full_slices, 4);
    }

    #[test]
    fn a_fit_without_two_points_above_idle_is_an_error_not_a_panic() {
        assert_eq!(
            PowerModel::fit(46.0, &[(1, 110.0), (1, 111.0)], 7, 400.0, "x"),
            Err(FitError::TooFewPoints { usable: 1, given: 2 })
        );
        assert_eq!(
            PowerModel::fit(46.0, &[(0, 110.0), (2, 141.0)], 7, 400.0, "x"),
            Err(FitError::BadSlices {
                slices: 0,
                full_slices: 7
            })
        );
    }

    #[test]
    fn lower_bound_never_exceeds_the_instance_power() {
        let m = PowerModel::h100();
        for c in 1..=7 {
            assert!(m.instance_lb_w(c) <= m.instance_w(c));
        }
    }
}
