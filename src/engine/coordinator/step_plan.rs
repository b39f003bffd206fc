//! The coordinator's step count and the learning rate it trains each step with: the schedule's
//! plan, scaled by the live lr key, restored on a resume.

use crate::engine::optim::schedule::LrPlan;

pub(super) struct StepPlan {
    /// The learning rate of the step that runs next.
    pub(super) lr: f64,
    /// The schedule and the live key's scale on it.
    pub(super) plan: LrPlan,
    /// Optimizer steps taken in all.
    pub(super) global_step: usize,
    /// The global step this process started at (0, or where it resumed).
    pub(super) first_step: usize,
}

impl StepPlan {
    pub(super) fn new(plan: LrPlan) -> StepPlan {
        StepPlan { lr: plan.at(0), plan, global_step: 0, first_step: 0 }
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
    fn another_rank_follows_a_new_scale_only() {
        let mut s = cosine();
        assert_eq!(s.follow_scale(1.0), None);
        let (from, to) = s.follow_scale(0.5).expect("a new scale");
        assert_eq!((from, to), (0.4, 0.2));
    }
}
