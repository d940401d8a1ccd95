//! The layout a node's agent applied, published in the node's `Extra` field
//! (`scontrol update nodename=X extra=...`, shown by `sinfo --json` as `extra`; Slurm 22.05+),
//! so that the controller reads each GPU's real layout instead of guessing it from GRES totals.
//!
//! Form: `dynmig/v1 layout=<NodeLayout>`, e.g. `dynmig/v1 layout=2x3g.40gb,1x7g.80gb`.
//! The agent writes it after every apply and when it starts; a dynamic node deleted for
//! re-registration comes back without it until the agent writes it again, and the controller
//! then treats the node's layout as unknown (no candidate, no supply) for that moment.

use super::TAG;
use crate::geometry::{GpuModel, LayoutParseError, NodeLayout};

/// A node's published per-GPU layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedLayout(pub NodeLayout);

impl PublishedLayout {
    /// The `Extra` text.
    pub fn encode(&self) -> String {
        format!("{TAG} layout={}", self.0)
    }

    /// Reads a node's `Extra` field. `Ok(None)`: nothing of ours there (empty, or a site's
    /// own text).
    ///
    /// # Errors
    /// Tagged as ours, but the layout does not fit the node's model and GPU count.
    pub fn parse(extra: &str, model: &GpuModel, gpus: usize) -> Result<Option<Self>, LayoutParseError> {
        match extra.strip_prefix(TAG).and_then(|r| r.strip_prefix(" layout=")) {
            None => Ok(None),
            Some(l) => Ok(Some(Self(NodeLayout::parse(model, gpus, l.trim())?))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::H100_80GB;

    #[test]
    fn published_layout_round_trips() {
        let p = PublishedLayout(NodeLayout::parse(&H100_80GB, 2, "1x4g.40gb+1x3g.40gb,empty").unwrap());
        assert_eq!(PublishedLayout::parse(&p.encode(), &H100_80GB, 2).unwrap(), Some(p));
    }

    #[test]
    fn a_sites_own_extra_is_not_ours() {
        assert_eq!(PublishedLayout::parse("rack=4", &H100_80GB, 2).unwrap(), None);
        assert!(PublishedLayout::parse("dynmig/v1 layout=8x1g.10gb,empty", &H100_80GB, 2).is_err());
    }
}
