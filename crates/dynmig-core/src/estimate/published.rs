//! Peak GPU memory published by others, as one numbered table
//! (`crates/dynmig-core/data/published-peaks.tsv`, embedded): the estimator's fit and judged
//! halves (docs/estimator-data/split.md). A row's number is its place among its source's
//! rows; even rows fit the formula's constants, odd rows judge it.
//!
//! Columns: `source`, `row`, `counts` (`yes`; `context` for a CUDA-context-only measurement;
//! otherwise `no: <why>`), `name`, then the hints (`params` as a user writes them, `dtype`,
//! `phase`, `batch`, `seq`, `optimizer`, `attention`, `vocab`, `kv_heads`), `loss` (`ce`, or
//! `sum` for a benchmark whose loss is `logits.sum()`), `kind` (what the source measured:
//! `nvml` = the process's whole use, context included; `allocated` = PyTorch's
//! `max_memory_allocated`, tensors only), `cuda` (major version, where stated), `gpu`,
//! `measured` and its `unit` as printed (`MiB`, `MB` = 10^6 bytes, `GiB`, `GB` = 10^9 bytes).
//! Every source is cited in docs/estimator-data/published-tables-draft.md.

use super::model_formula::{
    breakdown_with, parse_params, ActivationCoefficients, Attention, Dtype, ModelOptions, ModelSpec, Optimizer, Phase,
};

/// The embedded table.
pub const PUBLISHED_TSV: &str = include_str!("../../data/published-peaks.tsv");

/// Whether a row is used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Counts {
    /// A job the hints describe.
    Yes,
    /// The CUDA context alone (no job).
    Context,
    /// Not used, and why.
    No(String),
}

/// What the source measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// NVML's used memory of the process: what a MIG instance must hold, context included.
    Nvml,
    /// `torch.cuda.max_memory_allocated`: live tensors only.
    Allocated,
    /// Anything else (`max_memory_reserved`, not stated).
    Other,
}

/// One row of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct PublishedRow {
    /// The source's short name (docs/estimator-data/published-tables-draft.md).
    pub source: String,
    /// The row's number within its source.
    pub row: u32,
    /// Whether it is used.
    pub counts: Counts,
    /// The workload.
    pub name: String,
    /// The hints a user would give (rows that count only).
    pub spec: Option<ModelSpec>,
    /// The loss is `logits.sum()` (no fp32 cross-entropy).
    pub loss_sum: bool,
    /// What was measured.
    pub kind: Kind,
    /// CUDA major version, where the source states it.
    pub cuda: Option<u32>,
    /// The GPU, as the source names it.
    pub gpu: String,
    /// The measurement, bytes.
    pub measured_bytes: u64,
}

impl PublishedRow {
    /// Fit half (even row) or judged half (odd row).
    pub fn is_fit(&self) -> bool {
        self.row.is_multiple_of(2)
    }

    /// The tensors the formula counts for this row (weights, gradients, optimizer state,
    /// activations, KV cache, logits; no context, no margin), bytes; `None` for a row without
    /// hints or one the formula refuses. A `loss = sum` row's logits are `2 b s V w`.
    pub fn tensor_bytes(&self, coefficients: &ActivationCoefficients) -> Option<u64> {
        let spec = self.spec.as_ref()?;
        let mut b = breakdown_with(spec, 0, coefficients).ok()?;
        if self.loss_sum && spec.options.act_per_sample.is_none() {
            let w = spec.dtype.activation_bytes();
            b.logits = u64::from(spec.batch) * u64::from(spec.seq) * u64::from(spec.options.vocab) * 2 * w;
        }
        Some(b.total())
    }
}

/// The estimator's relative error (`estimate / measured - 1`) on every counted row of kind
/// [`Kind::Nvml`] of the embedded table, both halves, under the settings `cfg`: the whole
/// estimate, `(tensors + context) x` the phase's margin, with the row's CUDA context where
/// the source states its CUDA version ([`super::model_formula::cuda_context_for_major`]) and
/// `cfg.cuda_context_bytes` otherwise. `(name, error)` in table order; an unreadable table
/// gives none.
pub fn nvml_errors(cfg: &super::EstimatorConfig) -> Vec<(String, f64)> {
    let Ok(rows) = published_rows() else {
        return Vec::new();
    };
    rows.iter()
        .filter(|r| r.counts == Counts::Yes && r.kind == Kind::Nvml)
        .filter_map(|r| {
            let spec = r.spec.as_ref()?;
            let tensors = r.tensor_bytes(&ActivationCoefficients::FITTED)?;
            let context = r
                .cuda
                .and_then(super::model_formula::cuda_context_for_major)
                .unwrap_or(cfg.cuda_context_bytes);
            let est = cfg.with_margin(tensors + context, spec.phase);
            Some((r.name.clone(), est as f64 / r.measured_bytes as f64 - 1.0))
        })
        .collect()
}

/// Reads the embedded table.
///
/// # Errors
/// The line number and what is wrong, for a line the reader cannot take.
pub fn published_rows() -> Result<Vec<PublishedRow>, String> {
    parse(PUBLISHED_TSV)
}

/// Reads a table in the embedded table's format (module docs).
///
/// # Errors
/// As [`published_rows`].
pub fn parse(text: &str) -> Result<Vec<PublishedRow>, String> {
    let mut lines = text.lines().enumerate();
    let header: Vec<&str> = lines.next().ok_or("empty table")?.1.split('\t').collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .ok_or_else(|| format!("no column '{name}'"))
    };
    let cols: Vec<usize> = [
        "source",
        "row",
        "counts",
        "name",
        "params",
        "dtype",
        "phase",
        "batch",
        "seq",
        "optimizer",
        "attention",
        "vocab",
        "kv_heads",
        "loss",
        "kind",
        "cuda",
        "gpu",
        "measured",
        "unit",
    ]
    .iter()
    .map(|c| col(c))
    .collect::<Result<_, _>>()?;
    let mut rows = Vec::new();
    for (i, line) in lines {
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split('\t').collect();
        let at = |k: usize| f.get(cols[k]).copied().unwrap_or("").trim();
        let bad = |what: &str, v: &str| format!("line {}: {what} '{v}'", i + 1);
        let counts = match at(2) {
            "yes" => Counts::Yes,
            "context" => Counts::Context,
            v => Counts::No(
                v.strip_prefix("no:")
                    .ok_or_else(|| bad("counts", v))?
                    .trim()
                    .to_string(),
            ),
        };
        let spec = if counts == Counts::Yes {
            let params = parse_params(at(4)).map_err(|e| bad(&format!("params ({e})"), at(4)))?;
            let dtype = Dtype::parse(at(5)).ok_or_else(|| bad("dtype", at(5)))?;
            let phase = Phase::parse(at(6)).ok_or_else(|| bad("phase", at(6)))?;
            let batch = at(7).parse().map_err(|_| bad("batch", at(7)))?;
            let seq = at(8).parse().map_err(|_| bad("seq", at(8)))?;
            let mut options = ModelOptions::DEFAULT;
            if !at(9).is_empty() {
                options.optimizer = Optimizer::parse(at(9)).ok_or_else(|| bad("optimizer", at(9)))?;
            }
            if !at(10).is_empty() {
                options.attention = Attention::parse(at(10)).ok_or_else(|| bad("attention", at(10)))?;
            }
            if !at(11).is_empty() {
                options.vocab = at(11).parse().map_err(|_| bad("vocab", at(11)))?;
            }
            if !at(12).is_empty() {
                options.kv_heads = Some(at(12).parse().map_err(|_| bad("kv_heads", at(12)))?);
            }
            Some(ModelSpec {
                params,
                dtype,
                phase,
                batch,
                seq,
                options,
            })
        } else {
            None
        };
        let kind = match at(14) {
            "nvml" => Kind::Nvml,
            "allocated" => Kind::Allocated,
            _ => Kind::Other,
        };
        let value: f64 = at(17).parse().map_err(|_| bad("measured", at(17)))?;
        let unit = match at(18) {
            "MiB" => (1u64 << 20) as f64,
            "MB" => 1e6,
            "GiB" => (1u64 << 30) as f64,
            "GB" => 1e9,
            v => return Err(bad("unit", v)),
        };
        rows.push(PublishedRow {
            source: at(0).to_string(),
            row: at(1).parse().map_err(|_| bad("row", at(1)))?,
            counts,
            name: at(3).to_string(),
            spec,
            loss_sum: at(13) == "sum",
            kind,
            cuda: if at(15).is_empty() {
                None
            } else {
                Some(at(15).parse().map_err(|_| bad("cuda", at(15)))?)
            },
            gpu: at(16).to_string(),
            measured_bytes: (value * unit).round() as u64,
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_table_reads_and_numbers_each_source_from_zero_without_gaps() {
        let rows = published_rows().unwrap();
        assert!(rows.len() > 150);
        let mut next = std::collections::HashMap::new();
        for r in &rows {
            let n = next.entry(r.source.clone()).or_insert(0u32);
            assert_eq!(r.row, *n, "{} row {}", r.source, r.name);
            *n += 1;
            if r.counts == Counts::Yes {
                assert!(
                    r.spec.is_some() && r.tensor_bytes(&ActivationCoefficients::FITTED).is_some(),
                    "{}",
                    r.name
                );
            }
        }
        let used = rows.iter().filter(|r| r.counts == Counts::Yes).count();
        assert!(used >= 90, "{used} rows count");
    }

    #[test]
    fn a_bad_line_names_its_line_and_field() {
        let head = PUBLISHED_TSV.lines().next().unwrap();
        let text = format!("{head}\ns\t0\tyes\tx\t7Q\tfp16\tinfer\t1\t8\t\t\t\t\t\tnvml\t\tgpu\t1\tMiB\n");
        let e = parse(&text).unwrap_err();
        assert!(e.starts_with("line 2: params"), "{e}");
    }
}
