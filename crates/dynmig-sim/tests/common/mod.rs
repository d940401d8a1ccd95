//! Helpers shared by the simulator's integration tests.

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
