//! The GRES catalog: which MIG profiles job_submit/dynmig gives jobs it sizes, per GPU model,
//! when the policy's layouts decide them (`kind = "guarded"`, docs/policy.md "Guarded").
//!
//! JSON, one object, in `<state_dir>/catalog.json`, written atomically by the controller and
//! read by the job_submit plugin's refresher thread with a size bound:
//! `{"v":1,"types":{"A100-80GB":["3g.40gb","4g.40gb"]}}`.
//!
//! A model the catalog does not name keeps every profile (as without a catalog). Another
//! version, unknown fields, an unknown model or a profile its model does not have are errors
//! ([`CatalogError`]): the plugin then keeps every profile and logs why, so a bad file never
//! strands a job.

use crate::geometry::{model_by_name, GpuModel};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The catalog format version this code writes and reads.
pub const CATALOG_VERSION: u32 = 1;

/// Largest catalog file read, in bytes (a few models of a few dozen profiles fit in 4 KiB).
pub const MAX_CATALOG_BYTES: u64 = 64 << 10;

/// The catalog's file name in the state directory.
pub const CATALOG_FILE: &str = "catalog.json";

/// The profiles jobs are given, per GPU model.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Catalog {
    /// GPU model name -> the profile names (GRES types) of that model jobs may be given; a
    /// model absent here keeps all of its profiles.
    pub types: BTreeMap<&'static str, BTreeSet<&'static str>>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    v: u32,
    types: BTreeMap<String, Vec<String>>,
}

/// A catalog file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CatalogError {
    /// Not JSON of the catalog's shape.
    #[error("not a dynmig catalog: {0}")]
    Malformed(String),
    /// Written by another format version.
    #[error("catalog version {found}; this dynmig reads version {CATALOG_VERSION}")]
    Version {
        /// The version found.
        found: u32,
    },
    /// A GPU model dynmig does not know.
    #[error("catalog names GPU model '{0}', which dynmig does not know")]
    UnknownModel(String),
    /// A profile its model does not have, or a model with no profile.
    #[error("catalog gives {model} the profile '{profile}', which it does not have")]
    UnknownProfile {
        /// The model.
        model: String,
        /// The profile as written (empty: the model's list is empty).
        profile: String,
    },
}

impl Catalog {
    /// The catalog's JSON text (models and profiles sorted).
    pub fn encode(&self) -> String {
        let types = self
            .types
            .iter()
            .map(|(m, ps)| ((*m).to_string(), ps.iter().map(|p| (*p).to_string()).collect()))
            .collect();
        serde_json::to_string(&Wire {
            v: CATALOG_VERSION,
            types,
        })
        .expect("a catalog always serialises")
    }

    /// Reads a catalog file, checking every model and profile.
    ///
    /// # Errors
    /// [`CatalogError`].
    pub fn parse(text: &str) -> Result<Self, CatalogError> {
        let w: Wire =
            serde_json::from_str(text).map_err(|e| CatalogError::Malformed(super::clip(&e.to_string(), 200)))?;
        if w.v != CATALOG_VERSION {
            return Err(CatalogError::Version { found: w.v });
        }
        let mut types = BTreeMap::new();
        for (m, ps) in &w.types {
            let model = model_by_name(m).ok_or_else(|| CatalogError::UnknownModel(super::clip(m, 40)))?;
            let unknown = |p: &str| CatalogError::UnknownProfile {
                model: model.name.to_string(),
                profile: super::clip(p, 40),
            };
            if ps.is_empty() {
                return Err(unknown(""));
            }
            let mut set = BTreeSet::new();
            for p in ps {
                set.insert(model.profile(p).ok_or_else(|| unknown(p))?.name);
            }
            types.insert(model.name, set);
        }
        Ok(Catalog { types })
    }

    /// Whether jobs may be given `profile` of `model`.
    pub fn allows(&self, model: &GpuModel, profile: &str) -> bool {
        self.types.get(model.name).is_none_or(|ps| ps.contains(profile))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::A100_80GB;

    #[test]
    fn a_catalog_round_trips_and_limits_only_its_models() {
        let mut c = Catalog::default();
        c.types
            .insert("A100-80GB", ["4g.40gb", "3g.40gb"].into_iter().collect());
        let text = c.encode();
        assert_eq!(text, r#"{"v":1,"types":{"A100-80GB":["3g.40gb","4g.40gb"]}}"#);
        let back = Catalog::parse(&text).unwrap();
        assert_eq!(back, c);
        assert!(back.allows(&A100_80GB, "3g.40gb"));
        assert!(!back.allows(&A100_80GB, "1g.10gb"));
        let h100 = model_by_name("H100-80GB").unwrap();
        assert!(
            back.allows(h100, "1g.10gb"),
            "a model the catalog does not name keeps all"
        );
    }

    #[test]
    fn a_bad_catalog_says_what_is_wrong() {
        assert!(matches!(Catalog::parse("{"), Err(CatalogError::Malformed(_))));
        assert!(matches!(
            Catalog::parse(r#"{"v":2,"types":{}}"#),
            Err(CatalogError::Version { found: 2 })
        ));
        assert!(matches!(
            Catalog::parse(r#"{"v":1,"types":{"Z9":["1g.5gb"]}}"#),
            Err(CatalogError::UnknownModel(m)) if m == "Z9"
        ));
        let e = Catalog::parse(r#"{"v":1,"types":{"A100-80GB":["1g.5gb"]}}"#).unwrap_err();
        assert_eq!(
            e.to_string(),
            "catalog gives A100-80GB the profile '1g.5gb', which it does not have"
        );
        assert!(Catalog::parse(r#"{"v":1,"types":{"A100-80GB":[]}}"#).is_err());
        assert!(Catalog::parse(r#"{"v":1,"types":{},"x":1}"#).is_err());
    }
}
