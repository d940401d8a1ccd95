//! GPU power: idle power plus a concave busy power per instance in its compute slices, capped
//! at the board's TDP. Fitted to measurements; derivation in docs/model.md ("Power").

use dynmig_core::geometry::GpuModel;
use serde::{Deserialize, Serialize};

/// A100-SXM4-40GB measurements (rakin000/Power-Aware-MIG-Scheduler, notes/mig.md): idle
/// board power, W.
pub const A100_IDLE_W: f64 = 46.0;
/// ... and whole-board power with one `gpu_burn` instance on a 1g, 2g and 3g instance:
/// `(compute slices, W)`.
pub const A100_BURN_W: [(u8, f64); 3] = [(1, 110.0), (2, 141.0), (3, 170.0)];
/// A100 SXM4 TDP, W (NVIDIA A100 datasheet; notes/mig.md).
pub const A100_TDP_W: f64 = 400.0;
/// H100 SXM5 TDP, W (NVIDIA H100 datasheet; notes/mig.md).
pub const H100_TDP_W: f64 = 700.0;

/// Power of one GPU: `min(tdp, idle + sum over busy instances of scale x (c / C)^exponent)`,
/// with `c` the instance's compute slices and `C` the GPU's.
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

impl PowerModel {
    /// Fits `scale` and `exponent` by least squares on `ln(W - idle) = ln(scale) +
    /// exponent x ln(c / C)` over `points` (compute slices, whole-board W).
    ///
    /// # Panics
    /// If fewer than two points with distinct slices lie above idle.
    pub fn fit(idle_w: f64, points: &[(u8, f64)], full_slices: u8, tdp_w: f64, source: &str) -> Self {
        let xy: Vec<(f64, f64)> = points
            .iter()
            .filter(|(_, w)| *w > idle_w)
            .map(|(c, w)| ((f64::from(*c) / f64::from(full_slices)).ln(), (w - idle_w).ln()))
            .collect();
        assert!(xy.len() >= 2, "a power fit needs two points above idle");
        let n = xy.len() as f64;
        let (mx, my) = (
            xy.iter().map(|p| p.0).sum::<f64>() / n,
            xy.iter().map(|p| p.1).sum::<f64>() / n,
        );
        let sxy: f64 = xy.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        let sxx: f64 = xy.iter().map(|p| (p.0 - mx).powi(2)).sum();
        let exponent = sxy / sxx;
        let scale_w = (my - exponent * mx).exp();
        Self {
            idle_w,
            scale_w,
            exponent,
            tdp_w,
            full_slices,
            source: source.to_string(),
        }
    }

    /// The A100 fit (46 W idle; 1g 110 W, 2g 141 W, 3g 170 W; 400 W cap). Gives about
    /// 64/96/123 W per 1g/2g/3g instance and 204 W for a busy 7g.
    pub fn a100() -> Self {
        Self::fit(
            A100_IDLE_W,
            &A100_BURN_W,
            7,
            A100_TDP_W,
            "A100-SXM4-40GB gpu_burn measurements (notes/mig.md), least-squares power-law fit",
        )
    }

    /// H100: no per-instance measurement is known to the project; the A100 fit scaled by the
    /// ratio of TDPs (700 / 400), idle included. An assumption, marked as such in reports.
    pub fn h100() -> Self {
        let a = Self::a100();
        let k = H100_TDP_W / A100_TDP_W;
        Self {
            idle_w: a.idle_w * k,
            scale_w: a.scale_w * k,
            exponent: a.exponent,
            tdp_w: H100_TDP_W,
            full_slices: 7,
            source: "assumed: A100 fit scaled by TDP ratio 700/400 (no H100 MIG power measurement known)".into(),
        }
    }

    /// The model for a GPU model (H100 names get [`PowerModel::h100`], the rest the A100 fit).
    pub fn for_model(model: &GpuModel) -> Self {
        if model.name.starts_with("H100") {
            Self::h100()
        } else {
            Self::a100()
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

    /// A lower bound on what one busy instance of `slices` adds to its board's power, however
    /// the board's other instances are loaded: `min(instance_w, (tdp - idle) x c / C)`.
    /// (Capped or not, a board's power above idle is at least the sum of these over its busy
    /// instances, since their slices sum to at most C; docs/model.md.)
    pub fn instance_lb_w(&self, slices: u8) -> f64 {
        self.instance_w(slices)
            .min((self.tdp_w - self.idle_w) * f64::from(slices) / f64::from(self.full_slices))
    }
}
