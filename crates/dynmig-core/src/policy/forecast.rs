//! A time-of-day forecast learned online: the need seen in each bin of the day (e.g. 24 one-hour
//! bins), the mean of a day's observations of a bin folded into what the bin held with weight
//! `memory` (an exponential moving average over days), and the most each key needs over the
//! bins of the next `horizon`. The planner ([`super::planner::Planner`]) plans for it; the
//! learned policy (crate dynmig-learn) sees it in its observation.
//!
//! The need is any per-key amount (instances per MIG profile in both users); no unit is
//! assumed.

use std::collections::BTreeMap;
use std::time::Duration;

const DAY_S: f64 = 86_400.0;

/// Need per key (a MIG profile name), in the caller's unit.
pub type Need = BTreeMap<String, f64>;

/// How a [`TimeOfDayForecast`] learns and looks ahead.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ForecastSettings {
    /// Bins per day (at least 1).
    pub bins: u32,
    /// Weight of a new day's observation of a bin, clamped to `[0, 1]`.
    pub memory: f64,
    /// How far ahead [`TimeOfDayForecast::observe`] looks.
    pub horizon: Duration,
}

impl Default for ForecastSettings {
    /// The planner's defaults (docs/policy.md): 24 one-hour bins, memory 0.5, a 2 h horizon
    /// (about the time a reservation waits for a node's running work; trace p90 run time
    /// 2.05 h, docs/model.md).
    fn default() -> Self {
        Self {
            bins: 24,
            memory: 0.5,
            horizon: Duration::from_secs(2 * 3600),
        }
    }
}

/// The learned need per time-of-day bin (module docs).
#[derive(Debug, Clone, Default)]
pub struct TimeOfDayForecast {
    /// Per bin, the learned need.
    bins: Vec<Option<Need>>,
    /// The bin being observed now, the sum of its observations and their count.
    open: Option<(usize, Need, u32)>,
}

impl TimeOfDayForecast {
    /// Records `now` as an observation at `time_of_day` (since midnight); returns, per key, the
    /// most any bin of the next `horizon` (the bins after the current one) has learned. Keys no
    /// such bin has seen are absent. A bin's learning is folded in when the clock leaves it.
    pub fn observe(&mut self, s: ForecastSettings, time_of_day: Duration, now: &Need) -> Need {
        let bins = s.bins.max(1) as usize;
        let bin = ((time_of_day.as_secs_f64() / DAY_S * bins as f64) as usize).min(bins - 1);
        let memory = s.memory.clamp(0.0, 1.0);
        if self.bins.len() != bins {
            self.bins = vec![None; bins];
        }
        match &mut self.open {
            Some((b, sum, n)) if *b == bin => {
                for (p, x) in now {
                    *sum.entry(p.clone()).or_insert(0.0) += x;
                }
                *n += 1;
            }
            open => {
                if let Some((b, sum, n)) = open.take() {
                    let mean: Need = sum.into_iter().map(|(p, x)| (p, x / f64::from(n.max(1)))).collect();
                    self.bins[b] = Some(match self.bins[b].take() {
                        None => mean,
                        Some(old) => blend(&old, &mean, memory),
                    });
                }
                self.open = Some((bin, now.clone(), 1));
            }
        }
        let mut out = Need::new();
        let ahead = (s.horizon.as_secs_f64() / DAY_S * bins as f64).ceil() as usize;
        for k in 1..=ahead.min(bins) {
            if let Some(n) = &self.bins[(bin + k) % bins] {
                for (p, x) in n {
                    let e = out.entry(p.clone()).or_insert(0.0);
                    *e = e.max(*x);
                }
            }
        }
        out
    }
}

/// `(1 - w) * old + w * new`, per key (a missing key counts 0).
fn blend(old: &Need, new: &Need, w: f64) -> Need {
    let mut out = Need::new();
    for p in old.keys().chain(new.keys()) {
        let a = old.get(p).copied().unwrap_or(0.0);
        let b = new.get(p).copied().unwrap_or(0.0);
        out.insert(p.clone(), (1.0 - w) * a + w * b);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn need(x: f64) -> Need {
        [("1g.10gb".to_string(), x)].into_iter().collect()
    }

    const S: ForecastSettings = ForecastSettings {
        bins: 24,
        memory: 0.5,
        horizon: Duration::from_secs(2 * 3600),
    };

    fn h(hours: u64) -> Duration {
        Duration::from_secs(hours * 3600)
    }

    #[test]
    fn a_bin_is_forecast_the_day_after_it_was_seen_and_blended_with_memory() {
        let mut f = TimeOfDayForecast::default();
        // Day 1: 8 at 10:00, 0 elsewhere.
        assert!(f.observe(S, h(8), &need(0.0)).is_empty());
        f.observe(S, h(10), &need(8.0));
        f.observe(S, h(11), &need(0.0));
        // Day 2, 08:00: the bins 09:00 and 10:00 are ahead; 10:00 learned 8.
        assert_eq!(f.observe(S, h(8), &need(0.0)).get("1g.10gb"), Some(&8.0));
        // Seen 4 on day 2: (8 + 4) / 2 = 6 with memory 0.5.
        f.observe(S, h(10), &need(4.0));
        f.observe(S, h(11), &need(0.0));
        assert_eq!(f.observe(S, h(8), &need(0.0)).get("1g.10gb"), Some(&6.0));
        // 12:00: 13:00 and 14:00 ahead, never seen.
        assert!(f.observe(S, h(12), &need(0.0)).is_empty());
    }

    #[test]
    fn observations_within_a_bin_are_averaged() {
        let mut f = TimeOfDayForecast::default();
        f.observe(S, h(10), &need(2.0));
        f.observe(S, h(10) + Duration::from_secs(60), &need(6.0));
        f.observe(S, h(11), &need(0.0));
        assert_eq!(f.observe(S, h(9), &need(0.0)).get("1g.10gb"), Some(&4.0));
    }
}
