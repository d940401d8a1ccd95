//! The search and evaluation windows of a fair comparison (docs/simulate.md, "Fair
//! baselines"): static and twice-daily layouts are searched on the jobs released in the
//! search window only, and every policy is judged on the jobs released from the evaluation
//! window's start on.

use anyhow::{bail, Result};
use dynmig_sim::workload::Workload;
use serde::{Deserialize, Serialize};

/// Default search window, days of the workload: `[0, 14)`.
pub const DEFAULT_SEARCH_DAYS: (f64, f64) = (0.0, 14.0);

/// Default start of the evaluation window, days: 14 (judged on `[14, end)`).
pub const DEFAULT_EVAL_FROM_DAYS: f64 = 14.0;

/// Days the defaults need to leave at least this much to judge after
/// [`DEFAULT_EVAL_FROM_DAYS`]; a shorter workload is split in halves.
pub const MIN_EVAL_DAYS: f64 = 1.0;

/// The windows of one evaluation, in days from the workload's start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Windows {
    /// Jobs released in `[from, to)` days are the search workload.
    pub search_days: (f64, f64),
    /// Jobs released at or after this day are judged.
    pub eval_from_days: f64,
    /// Days the workload spans (last release / 86,400 s).
    pub span_days: f64,
    /// How the windows were chosen, for the report (e.g. that a short workload was halved).
    pub note: String,
}

impl Windows {
    /// Start of the evaluation window, s.
    pub fn eval_from_s(&self) -> f64 {
        self.eval_from_days * 86400.0
    }

    /// Whether the search window ends at or before the evaluation window starts.
    pub fn disjoint(&self) -> bool {
        self.search_days.1 <= self.eval_from_days
    }
}

/// Chooses the windows for `wl`. `search` and `eval_from` are the user's (days); `None` takes
/// the default: search `[0, 14)` and judge `[14, end)`; with only one of them given, the other
/// one meets it (search `[0, eval_from)`, or judge from the search window's end). If neither
/// is given and the workload spans less than 14 + [`MIN_EVAL_DAYS`] days, its first half is
/// searched and its second half judged (the note says so).
///
/// # Errors
/// A window out of range: negative, empty, or starting after the last release. A workload
/// whose jobs are all released at 0 (a batch) is searched and judged whole.
pub fn windows(wl: &Workload, search: Option<(f64, f64)>, eval_from: Option<f64>) -> Result<Windows> {
    let span = wl.jobs.last().map_or(0.0, |j| j.release / 86400.0);
    if span <= 0.0 {
        // A batch (every job released at 0): nothing to split in time.
        return Ok(Windows {
            search_days: (0.0, 1.0),
            eval_from_days: 0.0,
            span_days: 0.0,
            note: "every job is released at 0: searched and judged on every job (the fair rows equal the oracle's)"
                .into(),
        });
    }
    let (s, e, note) = match (search, eval_from) {
        (None, None) if span < DEFAULT_EVAL_FROM_DAYS + MIN_EVAL_DAYS => {
            let h = span / 2.0;
            (
                (0.0, h),
                h,
                format!(
                    "the workload spans {span:.1} days, shorter than the default windows need ({} days): searched on the first half [0, {h:.2}), judged on the second half [{h:.2}, {span:.1}]",
                    DEFAULT_EVAL_FROM_DAYS + MIN_EVAL_DAYS
                ),
            )
        }
        (None, None) => (DEFAULT_SEARCH_DAYS, DEFAULT_EVAL_FROM_DAYS, String::new()),
        (Some(s), None) => (s, s.1, String::new()),
        (None, Some(e)) => ((0.0, e), e, String::new()),
        (Some(s), Some(e)) => (s, e, String::new()),
    };
    if !(s.0 >= 0.0 && s.1 > s.0 && s.0.is_finite() && s.1.is_finite()) {
        bail!("search window [{}, {}) days: allowed 0 <= A < B", s.0, s.1);
    }
    if !(e >= 0.0 && e < span) {
        bail!("evaluation window from day {e}: allowed 0 <= D < {span:.2} (the workload's last release)");
    }
    if s.0 >= span {
        bail!(
            "search window [{}, {}) days starts after the workload's last release (day {span:.2})",
            s.0,
            s.1
        );
    }
    let mut note = note;
    if s.1 > e {
        if !note.is_empty() {
            note.push_str("; ");
        }
        note.push_str("the search window overlaps the judged jobs: the fair rows are not out-of-sample");
    }
    Ok(Windows {
        search_days: s,
        eval_from_days: e,
        span_days: span,
        note,
    })
}

/// The jobs of `wl` released in `[from_s, to_s)`, renumbered (releases and due dates kept).
pub fn released_in(wl: &Workload, from_s: f64, to_s: f64) -> Workload {
    let jobs = wl
        .jobs
        .iter()
        .filter(|j| j.release >= from_s && j.release < to_s)
        .cloned()
        .collect();
    Workload::new(
        jobs,
        format!(
            "{}, released in days [{}, {})",
            wl.description,
            fmt_days(from_s / 86400.0),
            fmt_days(to_s / 86400.0)
        ),
    )
}

/// A day count for text: integers without decimals, else two decimals.
pub fn fmt_days(d: f64) -> String {
    if d.fract() == 0.0 {
        format!("{d:.0}")
    } else {
        format!("{d:.2}")
    }
}
