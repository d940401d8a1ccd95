//! How a [`PolicySpec`] runs in the engine ([`crate::engine::RunSpec`]): its first layouts,
//! the GRES types jobs may ask for, how often it is asked, and the policy that plans.

use super::{Learned, PolicySpec};
use crate::cluster::Cluster;
use crate::engine::{Driven, Plain, RunSpec, SimConfig};
use crate::workload::Workload;
use dynmig_core::geometry::{NodeLayout, ProfileCounts};
use std::time::Duration;

/// The initial layouts of a policy on a cluster: a fixed or scheduled policy's own, the
/// guarded default's base, otherwise whole GPUs.
pub fn initial_layouts(spec: &PolicySpec, cfg: &SimConfig) -> Vec<NodeLayout> {
    match spec {
        PolicySpec::Static(l) => l.clone(),
        PolicySpec::Guarded(s) => s.base.clone(),
        PolicySpec::Scheduled(p) => p.first().map(|x| x.1.clone()).unwrap_or_default(),
        _ => {
            let full = ProfileCounts::parse(cfg.model, &format!("1x{}", cfg.model.full_profile().name))
                .expect("full profile parses");
            vec![
                NodeLayout {
                    gpus: vec![full; cfg.gpus_per_node]
                };
                cfg.nodes
            ]
        }
    }
}

impl RunSpec for PolicySpec {
    fn name(&self) -> &'static str {
        PolicySpec::name(self)
    }

    fn initial_layouts(&self, cfg: &SimConfig) -> Vec<NodeLayout> {
        initial_layouts(self, cfg)
    }

    /// The GRES types Slurm knows, from which the job_submit plugin picks the smallest that
    /// holds a job's request: under a policy that never changes the layouts (none, static,
    /// scheduled) the types its layouts have, as on a cluster without dynmig; the guarded
    /// default starts with its base's; under the others every profile of the model, as
    /// dynmig's catalog node offers them (a job of a type no node has waits for a
    /// repartition).
    fn catalog(&self, c: &Cluster) -> Vec<bool> {
        let fixed: Vec<&NodeLayout> = match self {
            PolicySpec::None | PolicySpec::Static(_) => {
                return (0..c.profiles.len()).map(|p| c.inst_count[p] > 0).collect();
            }
            PolicySpec::Scheduled(periods) => periods.iter().flat_map(|(_, l)| l.iter()).collect(),
            PolicySpec::Guarded(s) => s.base.iter().collect(),
            _ => return vec![true; c.profiles.len()],
        };
        let mut on = vec![false; c.profiles.len()];
        for g in fixed.iter().flat_map(|l| l.gpus.iter()) {
            for (name, n) in g.iter() {
                if let (Some(p), true) = (c.pidx(name), n > 0) {
                    on[p] = true;
                }
            }
        }
        on
    }

    fn is_external(&self) -> bool {
        matches!(self, PolicySpec::External(_))
    }

    fn dynamic_catalog(&self) -> bool {
        matches!(self, PolicySpec::Guarded(_))
    }

    fn quiet_ages(&self) -> Vec<Duration> {
        match self {
            // The ages at which a layout may change again: its lifetime, and the end of the
            // payback rule's hold on a layout the policy made that has not served yet.
            PolicySpec::Dynamic(limits) => {
                let hold = limits.min_layout_lifetime * dynmig_core::policy::payback::Payback::default().hold_factor;
                vec![limits.min_layout_lifetime, hold]
            }
            _ => Vec::new(),
        }
    }

    fn driver(&self, wl: &Workload, cfg: &SimConfig, c: &Cluster) -> anyhow::Result<Option<Box<dyn Driven>>> {
        if let PolicySpec::Learned { periods } = self {
            return Ok(Some(Box::new(Learned::new(*periods, c))));
        }
        // The planners are told the placement rule they run under, as the controller tells
        // them Slurm's (typed); only the `spill-up` what-if leaves it as they have it.
        let typed = !cfg.what_if.spill_up;
        // The demand-driven policy is asked only while jobs wait, as the controller's
        // passes find nothing to do otherwise.
        let only_when_pending = matches!(self, PolicySpec::Dynamic(_));
        Ok(self.policy(cfg, typed, &wl.jobs)?.map(|policy| {
            Box::new(Plain {
                policy,
                only_when_pending,
            }) as Box<dyn Driven>
        }))
    }

    fn interval_ms(&self, cfg: &SimConfig) -> i64 {
        match self {
            PolicySpec::None | PolicySpec::Static(_) => i64::MAX,
            PolicySpec::Dynamic(_)
            | PolicySpec::Plan(_)
            | PolicySpec::Mpc(_)
            | PolicySpec::Adaptive(_)
            | PolicySpec::Guarded(_)
            | PolicySpec::Clairvoyant(_)
            | PolicySpec::External(_) => (cfg.policy_interval_s * 1000.0).round().max(1.0) as i64,
            _ => 3_600_000,
        }
    }
}
