//! The node layouts a learned model chooses among: each GPU of a node in the same per-GPU
//! layout, from a small catalogue built the same way for every GPU model, so that one action
//! space (keep, or one of the catalogue's layouts) serves any cluster size.

use dynmig_core::geometry::{place, GpuModel, NodeLayout, ProfileCounts};

/// Compute slices of the instances of each catalogue layout, whole GPU first: 7, 4+3, 3+3,
/// 2+2+2+1, 4+2+1, 7x1 (the layouts NVIDIA's MIG user guide lists for A100/H100, on the
/// smallest-memory profile of each size). Layouts a model cannot place are left out.
const PATTERNS: &[&[u8]] = &[
    &[7],
    &[4, 3],
    &[3, 3],
    &[2, 2, 2, 1],
    &[4, 2, 1],
    &[1, 1, 1, 1, 1, 1, 1],
];

/// The catalogue of one GPU model.
#[derive(Debug, Clone)]
pub struct Catalogue {
    /// The GPU model.
    pub model: &'static GpuModel,
    /// Per-GPU layouts, whole GPU first.
    pub layouts: Vec<ProfileCounts>,
}

impl Catalogue {
    /// The catalogue of `model`: [`PATTERNS`] on its profiles (for each size, the one with the
    /// least memory, no media extensions); the whole GPU is always first.
    pub fn for_model(model: &'static GpuModel) -> Self {
        let mut layouts =
            vec![ProfileCounts::parse(model, &format!("1x{}", model.full_profile().name))
                .expect("the full profile parses")];
        for pattern in PATTERNS.iter().skip(1) {
            let mut pc = ProfileCounts::empty();
            let ok = pattern.iter().all(|slices| {
                let spec = model
                    .schedulable_profiles()
                    .into_iter()
                    .filter(|p| p.compute_slices == *slices)
                    .min_by_key(|p| p.memory_mib);
                spec.map(|p| pc.add(p, 1)).is_some()
            });
            if ok && place(model, &pc).is_some() && !layouts.contains(&pc) {
                layouts.push(pc);
            }
        }
        Self { model, layouts }
    }

    /// The layouts' texts (`1x4g.20gb+1x3g.20gb`), as a model file records them.
    pub fn names(&self) -> Vec<String> {
        self.layouts.iter().map(ToString::to_string).collect()
    }

    /// Which catalogue layout every GPU of `node` has, if they agree and it is one.
    pub fn kind_of(&self, node: &NodeLayout) -> Option<usize> {
        let first = node.gpus.first()?;
        if node.gpus.iter().any(|g| g != first) {
            return None;
        }
        self.layouts.iter().position(|l| l == first)
    }

    /// The node layout of catalogue entry `i` on `gpus` GPUs.
    pub fn node_layout(&self, i: usize, gpus: usize) -> NodeLayout {
        NodeLayout {
            gpus: vec![self.layouts[i].clone(); gpus],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dynmig_core::geometry::{A100_40GB, H100_80GB};

    #[test]
    fn every_catalogue_starts_whole_and_holds_placeable_layouts() {
        for m in [&A100_40GB, &H100_80GB] {
            let c = Catalogue::for_model(m);
            assert_eq!(c.layouts[0].to_string(), format!("1x{}", m.full_profile().name));
            assert_eq!(c.layouts.len(), 6, "{:?}", c.names());
            assert!(c.layouts.iter().all(|l| place(m, l).is_some()));
        }
        let c = Catalogue::for_model(&A100_40GB);
        assert!(c.names().contains(&"3x2g.10gb+1x1g.5gb".to_string()), "{:?}", c.names());
    }
}
