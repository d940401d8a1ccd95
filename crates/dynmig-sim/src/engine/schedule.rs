//! The engine's scheduling pass: which queued jobs start now, on which instances, with
//! typed placement and the EASY reservation of the highest-priority blocked job planned with
//! time limits (Slurm's rules, [`crate::backfill`]; docs/model.md, "Placement").

use super::{Keys, Reservation, Sim};
use crate::backfill::{instance_reservation, node_reservation, quantise, Resv};
use crate::cluster::Cluster;
use crate::placement::Placement;
use rand::Rng;

impl Sim<'_> {
    /// One pass of the placement rule: start jobs until none of the queue heads can start.
    pub(super) fn schedule(&mut self) {
        if self.queued == 0 {
            return;
        }
        let resv = if self.cfg.placement == Placement::Slurm {
            self.reservation()
        } else {
            None
        };
        // Starting a job only takes free instances, so a queue head that cannot start now
        // cannot start later in this pass: it is not asked again until its queue's head
        // changes (except under random placement, whose search draws random numbers).
        let skip_dead = self.cfg.placement != Placement::Random && self.queues.len() <= 64;
        let mut dead = 0u64;
        // A backfill plan (every bf_interval) also tries the jobs behind a blocked first job
        // of its type, up to bf_max_job_test of them in the pass.
        //
        // A plan that would see what the last plan that started nothing saw (the same
        // instances, states, holds and queues, and the same reservation) is skipped: it would
        // try the same jobs in the same order, and with time passing a job fits no more than
        // it did (it must still end before the same hold deadlines and the same shadow time,
        // and ends later).
        let mut deep = 0usize;
        let mut plan: Option<(u64, u64, Reservation)> = None;
        if self.cfg.placement == Placement::Slurm && self.now >= self.next_backfill_ms {
            self.next_backfill_ms = self.now + (self.cfg.backfill_interval_s * 1000.0).round() as i64;
            let seen = (self.c.version, self.queue_version, resv);
            if self.idle_backfill != Some(seen) {
                deep = self.cfg.bf_max_job_test;
                plan = Some(seen);
            }
        }
        loop {
            let mut best: Option<((i64, u32), Keys)> = None;
            for class in 0..self.queues.len() {
                let Some(head) = self.heads[class] else {
                    continue;
                };
                if best.as_ref().is_some_and(|(b, _)| *b <= head) || (skip_dead && dead & (1 << class) != 0) {
                    continue;
                }
                let found = match self.find(head.1, class, resv) {
                    Some(keys) => Some((head, keys)),
                    None if deep > 0 => self.find_behind(class, head, resv, &mut deep),
                    None => None,
                };
                match found {
                    Some((entry, keys)) if best.as_ref().is_none_or(|(b, _)| entry < *b) => best = Some((entry, keys)),
                    Some(_) => {}
                    None if skip_dead => dead |= 1 << class,
                    None => {}
                }
            }
            let Some(((_, job), keys)) = best else { break };
            if skip_dead {
                dead &= !(1u64 << self.class[job as usize]);
            }
            self.start(job, keys);
        }
        if let Some(seen) = plan {
            if (self.c.version, self.queue_version) == (seen.0, seen.1) {
                self.idle_backfill = Some(seen);
            }
        }
    }

    /// The first job queued behind `head` in queue `class` that can start now, in priority
    /// order, trying at most `budget` jobs (counted down). Under Slurm's rules whether a job
    /// of a queue fits depends only on when it would end (its time limit): a job whose limit
    /// is no shorter than one that did not fit is passed over untried.
    fn find_behind(
        &mut self,
        class: usize,
        head: (i64, u32),
        resv: Reservation,
        budget: &mut usize,
    ) -> Option<((i64, u32), Keys)> {
        use std::ops::Bound::{Excluded, Unbounded};
        let monotone = !self.cfg.what_if.clairvoyant_backfill && !self.cfg.what_if.spill_up;
        let mut shortest_failed = self.limit[head.1 as usize];
        let behind = self.queues[class].range((Excluded(head), Unbounded)).take(*budget);
        for &entry in behind {
            *budget -= 1;
            let limit = self.limit[entry.1 as usize];
            if monotone && limit >= shortest_failed {
                continue;
            }
            if let Some(keys) = self.find_fixed(entry.1, class, resv) {
                return Some((entry, keys));
            }
            shortest_failed = shortest_failed.min(limit);
        }
        None
    }

    /// When `job`, started now on an instance of profile `p`, ends as backfill plans it: now
    /// plus its time limit (Slurm), or plus its true run there (`clairvoyant-backfill`),
    /// rounded down to `bf_resolution`.
    fn planned_end(&self, job: u32, p: usize) -> i64 {
        let d = if self.cfg.what_if.clairvoyant_backfill {
            self.attempt_ms(job, p)
        } else {
            self.limit[job as usize]
        };
        quantise(self.now + d, self.res_ms)
    }

    /// Whether `job` may start on the instance `key` (of profile `p`) now: its time limit
    /// ends before a planned repartition of this GPU (or of its node, for a multi-GPU job)
    /// starts, and, if it is behind the job holding the EASY reservation `resv`, it leaves
    /// that intact ([`Resv::allows`]).
    fn fits_reservation(&self, job: u32, key: u32, p: usize, resv: Reservation) -> bool {
        let gpu = (key / 8) as usize;
        let held = |g: usize| self.c.hold[g].as_ref().map(|h| h.deadline_ms);
        let deadline = if self.jobs[job as usize].gpus > 1 {
            let n = self.c.node_of(gpu);
            (n * self.c.gpn..(n + 1) * self.c.gpn).filter_map(held).min()
        } else {
            held(gpu)
        };
        if deadline.is_some_and(|d| self.now + self.limit[job as usize] > d) {
            return false;
        }
        match resv {
            Some((r, holder)) if (self.qkey[job as usize], job) > holder => {
                r.allows(&self.c, key, p, || self.planned_end(job, p))
            }
            _ => true,
        }
    }

    /// The profiles a single-GPU job of queue `class` may start on: its own (typed, Slurm's
    /// GRES), or with the `spill-up` what-if any with at least its memory.
    fn allowed_profiles(&self, job: u32, class: usize) -> (usize, usize) {
        if self.jobs[job as usize].exact_slices.is_some() || !self.cfg.what_if.spill_up {
            (class, class + 1)
        } else {
            (class, self.c.profiles.len())
        }
    }

    /// Free instance keys for `job` of queue `class`, if it can start now.
    pub(super) fn find(&mut self, job: u32, class: usize, resv: Reservation) -> Option<Keys> {
        if self.cfg.placement == Placement::Random && class < self.c.profiles.len() {
            let (lo, hi) = self.allowed_profiles(job, class);
            let total: usize = (lo..hi).map(|p| self.c.free[p].len()).sum();
            if total == 0 {
                return None;
            }
            let mut r = self.rng.gen_range(0..total);
            let mut p = lo;
            while r >= self.c.free[p].len() {
                r -= self.c.free[p].len();
                p += 1;
            }
            let from = self.rng.gen_range(0..(self.c.insts.len() as u32 * 8));
            let key = self.c.free[p].next_from(from).or_else(|| self.c.free[p].first())?;
            return self.fits_reservation(job, key, p, resv).then_some(Keys::One(key));
        }
        self.find_fixed(job, class, resv)
    }

    /// [`Sim::find`] for every placement rule but the random one (which draws random numbers).
    fn find_fixed(&self, job: u32, class: usize, resv: Reservation) -> Option<Keys> {
        let np = self.c.profiles.len();
        if class >= np {
            let n = class - np;
            let mut best: Option<u32> = None;
            for k in n..=self.c.gpn {
                for node in self.c.by_free_full[k].iter() {
                    if best.is_some_and(|b| node >= b) {
                        break;
                    }
                    let key = Cluster::key(node as usize * self.c.gpn, 0);
                    if self.fits_reservation(job, key, self.c.full, resv) {
                        best = Some(node);
                        break;
                    }
                }
            }
            let node = best? as usize;
            let lo = Cluster::key(node * self.c.gpn, 0);
            let hi = Cluster::key((node + 1) * self.c.gpn, 0);
            return Some(Keys::Many(
                self.c.free[self.c.full]
                    .iter_from(lo)
                    .take_while(|k| *k < hi)
                    .take(n)
                    .collect(),
            ));
        }
        let (lo, hi) = self.allowed_profiles(job, class);
        let fastest = self.cfg.placement.fastest_first();
        for i in 0..hi - lo {
            let p = if fastest { hi - 1 - i } else { lo + i };
            for key in self.c.free[p].iter() {
                if self.fits_reservation(job, key, p, resv) {
                    return Some(Keys::One(key));
                }
            }
        }
        None
    }

    /// The EASY reservation, as Slurm's backfill makes it: the queue heads in priority order
    /// (release order, then job id), the first that cannot start now and can be given a
    /// start within `bf_window` holds it against the jobs behind it: a multi-GPU job on the node where enough full-GPU
    /// instances free soonest, a single-GPU job on the instance of its type that frees
    /// soonest, both by the running jobs' time limits. A blocked job with no such start
    /// (its type is on no node, or its start is beyond the window) gets none, as in Slurm,
    /// and the next one is tried. Computed again every `bf_interval`, or when the first
    /// blocked job changes.
    pub(super) fn reservation(&mut self) -> Reservation {
        let mut prev: Option<(i64, u32)> = None;
        let mut first_blocked: Option<u32> = None;
        loop {
            let head = self
                .heads
                .iter()
                .flatten()
                .filter(|h| prev.is_none_or(|p| **h > p))
                .min()
                .copied()?;
            prev = Some(head);
            let job = head.1;
            let class = self.class[job as usize] as usize;
            if self.find(job, class, None).is_some() {
                continue;
            }
            if first_blocked.is_none() {
                first_blocked = Some(job);
                if let Some((j, until, r)) = self.resv_cache {
                    let holder_waits = r.is_none_or(|(_, (_, h))| self.out[h as usize].is_none());
                    if j == job && self.now < until && holder_waits {
                        return r;
                    }
                }
            }
            if let Some(r) = self.compute_reservation(job, class) {
                let r = Some((r, head));
                self.cache_reservation(first_blocked, r);
                return r;
            }
            if self.heads.iter().flatten().all(|h| *h <= head) {
                self.cache_reservation(first_blocked, None);
                return None;
            }
        }
    }

    fn cache_reservation(&mut self, first_blocked: Option<u32>, r: Reservation) {
        if let Some(job) = first_blocked {
            let every = (self.cfg.backfill_interval_s * 1000.0).round() as i64;
            self.resv_cache = Some((job, self.now + every, r));
        }
    }

    /// The reservation of the blocked `job` of queue `class` ([`Sim::reservation`]), if it
    /// can have one within `bf_window`.
    fn compute_reservation(&self, job: u32, class: usize) -> Option<Resv> {
        let np = self.c.profiles.len();
        let r = if class >= np {
            node_reservation(&self.c, class - np).map(|(node, s)| Resv::Node {
                node,
                shadow_ms: quantise(s, self.res_ms),
            })
        } else {
            let (lo, hi) = self.allowed_profiles(job, class);
            (lo..hi)
                .filter_map(|p| instance_reservation(&self.c, p))
                .min_by_key(|&(key, s)| (s, key))
                .map(|(key, s)| Resv::Inst {
                    key,
                    shadow_ms: quantise(s, self.res_ms),
                })
        };
        r.filter(|r| r.shadow_ms() <= self.now.saturating_add(self.window_ms))
    }
}
