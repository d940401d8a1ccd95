//! What a policy may learn about jobs besides the snapshot: when each was submitted, started
//! and ended, with what Slurm knows of it at that time (its GRES request, time limit and
//! deadline). The simulator's engine reports these as they happen; a controller reads them
//! from Slurm's JSON. Policies that look ahead ([`super::Policy::observes_jobs`]) use them to
//! rebuild the queue and to forecast arrivals from past days.

/// A job event. Times are seconds on the caller's clock (the simulator's virtual time, or
/// UNIX time in a controller); one clock for every event given to one policy.
#[derive(Debug, Clone, PartialEq)]
pub enum JobEvent {
    /// A job entered the queue (submitted, or requeued after a failed attempt).
    Submitted {
        /// Job id, unique for the policy's lifetime.
        id: u64,
        /// Submit time, s.
        at_s: f64,
        /// The MIG profile each of its GPUs asks for (its GRES type; the full-GPU profile for
        /// a multi-GPU job).
        profile: &'static str,
        /// GPUs (instances) it asks for, all on one node.
        gpus: u32,
        /// Its time limit, s (Slurm kills it then).
        time_limit_s: f64,
        /// Its deadline (`sbatch --deadline`), absolute, s; `None` if it has none.
        deadline_s: Option<f64>,
    },
    /// A job started on `node`, on instances of `slices` compute slices each.
    Started {
        /// Job id.
        id: u64,
        /// Start time, s.
        at_s: f64,
        /// Slurm node name.
        node: String,
        /// Compute slices of each instance it holds.
        slices: u8,
    },
    /// A job (or one attempt of it) ended: completed, failed, cancelled or timed out. A job
    /// requeued after a failed attempt is `Submitted` again with the same id.
    Ended {
        /// Job id.
        id: u64,
        /// End time, s.
        at_s: f64,
    },
}
