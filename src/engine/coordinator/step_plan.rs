//! The coordinator's step count and the learning rate it trains each step with: the schedule's
//! plan, scaled by the live lr key, restored on a resume.

use crate::engine::optim::schedule::LrPlan;
use crate::input::shard::shards;
use dpt_core::seed::mix_seed;

/// One replica's part of a step: its rows of the epoch order and its dropout seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Assignment {
    pub(super) start: usize,
    pub(super) len: usize,
    pub(super) dropout_seed: i64,
}

pub(super) struct StepPlan {
    /// The learning rate of the step that runs next.
    lr: f64,
    /// The schedule and the live key's scale on it.
    plan: LrPlan,
    /// Optimizer steps taken in all.
    global_step: usize,
    /// The global step this process started at (0, or where it resumed).
    first_step: usize,
}

impl StepPlan {
    pub(super) fn new(plan: LrPlan) -> StepPlan {
        StepPlan { lr: plan.at(0), plan, global_step: 0, first_step: 0 }
    }

    /// Optimizer steps taken in all.
    pub(super) fn global_step(&self) -> usize {
        self.global_step
    }

    /// The rate of the step that runs next (as last set or planned).
    pub(super) fn lr(&self) -> f64 {
        self.lr
    }

    /// The live lr key's scale on the schedule (1 until the key is used).
    pub(super) fn scale(&self) -> f64 {
        self.plan.scale
    }

    /// One more optimizer step taken.
    pub(super) fn advance(&mut self) {
        self.global_step += 1;
    }

    /// Whether the step that runs next has its phases timed (see `clock::sampled`): counted
    /// from where this process started.
    pub(super) fn timed(&self, on_gpu: bool) -> bool {
        crate::engine::clock::sampled(on_gpu, self.global_step - self.first_step)
    }

    /// Continues at a checkpoint's step with its live scale.
    pub(super) fn restore(&mut self, global_step: usize, scale: f64) {
        (self.global_step, self.first_step) = (global_step, global_step);
        self.plan.scale = scale;
        self.lr = self.plan.at(global_step);
    }

    /// The live lr key: `lr` from this step on, the rest of the schedule scaled to it; the
    /// rate it replaces.
    pub(super) fn set_lr(&mut self, lr: f64) -> f64 {
        self.plan.rescale_to(self.global_step, lr);
        std::mem::replace(&mut self.lr, lr)
    }

    /// Rank 0's scale, followed on another rank: the change of rate, if the scale is new.
    pub(super) fn follow_scale(&mut self, scale: f64) -> Option<(f64, f64)> {
        if scale == self.plan.scale {
            return None;
        }
        self.plan.scale = scale;
        let to = self.plan.at(self.global_step);
        Some((std::mem::replace(&mut self.lr, to), to))
    }

    /// What each of `ours` replicas trains on in the step over rows `start..start + len` of the
    /// epoch order: the global batch split over all `total` replicas of every process (sizes
    /// differing by at most one), ours the slice from `offset`; each replica's dropout stream a
    /// function of (seed, step, global replica) only.
    pub(super) fn assignments(
        &self,
        seed: u64,
        (start, len): (usize, usize),
        (offset, total): (usize, usize),
        ours: usize,
    ) -> Vec<Assignment> {
        let parts = shards(len, total);
        (offset..offset + ours)
            .map(|r| Assignment {
                start: start + parts[r].0,
                len: parts[r].1,
                dropout_seed: mix_seed(mix_seed(seed, self.global_step as u64), r as u64 + 1) as i64,
            })
            .collect()
    }

    /// The rate of the step about to run, by the plan.
    pub(super) fn step_lr(&mut self) -> f64 {
        self.lr = self.plan.at(self.global_step);
        self.lr
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::optim::schedule::{Schedule, Shape};

    fn cosine() -> StepPlan {
        let schedule = Schedule { shape: Shape::Cosine, warmup_steps: 0, min_lr: 0.0, gamma: 0.1 };
        StepPlan::new(LrPlan { base: 0.4, schedule, total: 10, steps_per_epoch: 5, scale: 1.0 })
    }

    #[test]
    fn the_live_key_scales_the_rest_of_the_schedule_and_a_resume_keeps_it() {
        let mut s = cosine();
        s.global_step = 4;
        let planned = s.step_lr();
        assert_eq!(s.set_lr(planned / 2.0), planned, "the rate it replaces");
        s.global_step = 6;
        let halved = s.step_lr();
        let mut plain = cosine();
        plain.global_step = 6;
        assert!((halved - plain.step_lr() / 2.0).abs() < 1e-12, "{halved}");
        let mut resumed = cosine();
        resumed.restore(6, s.plan.scale);
        assert_eq!((resumed.lr, resumed.first_step), (halved, 6));
    }

    #[test]
    fn a_step_splits_the_global_batch_over_every_process_and_seeds_by_global_replica() {
        let mut s = cosine();
        s.global_step = 7;
        // 10 rows from row 20 over 4 replicas in all; this process holds replicas 2 and 3.
        let ours = s.assignments(5, (20, 10), (2, 4), 2);
        let all = s.assignments(5, (20, 10), (0, 4), 4);
        assert_eq!(ours, all[2..], "a rank's slice is the whole plan's");
        assert_eq!(all.iter().map(|a| a.len).collect::<Vec<_>>(), [3, 3, 2, 2]);
        assert_eq!(all.iter().map(|a| a.start).collect::<Vec<_>>(), [20, 23, 26, 28]);
        let seeds: std::collections::HashSet<i64> = all.iter().map(|a| a.dropout_seed).collect();
        assert_eq!(seeds.len(), 4, "each replica its own dropout stream");
        s.global_step = 8;
        assert_ne!(s.assignments(5, (20, 10), (0, 4), 4)[0].dropout_seed, all[0].dropout_seed);
    }

    #[test]
    fn another_rank_follows_a_new_scale_only() {
        let mut s = cosine();
        assert_eq!(s.follow_scale(1.0), None);
        let (from, to) = s.follow_scale(0.5).expect("a new scale");
        assert_eq!((from, to), (0.4, 0.2));
    }
}
