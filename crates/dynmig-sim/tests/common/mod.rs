//! Helpers shared by the simulator's integration tests (each test binary uses some).
#![allow(dead_code)]

use dynmig_sim::power::PowerModel;

/// Linear power, easy to add up by hand: 50 W idle, 100 W x c/7 for a busy instance of c
/// slices (100 W for a busy full GPU).
pub fn linear_power() -> PowerModel {
    PowerModel {
        idle_w: 50.0,
        scale_w: 100.0,
        exponent: 1.0,
        tdp_w: 1000.0,
        full_slices: 7,
        source: "test".into(),
    }
}

/// Three days of the steady synthetic workload on 16 x 8 A100-40GB with the `spill-up`
/// what-if: whole GPUs serve every job, and the planner partitions at daily peaks anyway
/// (the case of the mpc and clairvoyant tests).
pub fn spill_up_three_days() -> (dynmig_sim::workload::Workload, dynmig_sim::engine::SimConfig) {
    use dynmig_sim::workload::synthetic::{synthetic_workload, SyntheticParams};
    let params = SyntheticParams {
        days: 3.0,
        ..Default::default()
    };
    let wl = synthetic_workload(&params, &dynmig_sim::model::ModelParams::default()).unwrap();
    let mut cfg = dynmig_sim::engine::SimConfig::new(&dynmig_core::geometry::A100_40GB, 16, 8);
    cfg.what_if.spill_up = true;
    (wl, cfg)
}

/// Total tardiness of run `r` of `wl`, s.
pub fn total_tardiness_s(r: &dynmig_sim::engine::RunResult, wl: &dynmig_sim::workload::Workload) -> f64 {
    r.jobs
        .iter()
        .zip(&wl.jobs)
        .map(|(o, j)| (o.end_ms as f64 / 1000.0 - j.due).max(0.0))
        .sum()
}

/// A single-GPU training job released at `release` (s) with `work` s of full-GPU work and
/// `mem_mib` of GPU memory: speed-up exponent 0.7, due at 1.5x its work, time limit twice
/// its run (the guarded and frozen-mix tests).
pub fn training_job(release: f64, work: f64, mem_mib: u64) -> dynmig_sim::model::Job {
    dynmig_sim::model::Job {
        id: 0,
        release,
        work,
        mem_mib,
        gpus: 1,
        kind: dynmig_sim::model::JobKind::Training,
        gamma: 0.7,
        curve: Default::default(),
        due: release + 1.5 * work,
        limit_factor: 2.0,
        exact_slices: None,
    }
}
