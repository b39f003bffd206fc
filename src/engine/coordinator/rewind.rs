//! Rewind points and going back to one. A point is what a checkpoint continuing at a step
//! boundary holds (the coordinator's `snapshot`), copied to host memory every `--snapshot-every`, the newest
//! `--snapshots` kept; in a one-process run the checkpoints kept on disk (`--keep-checkpoints`)
//! are points too. A rewind restores one into every replica and goes on exactly as a
//! `--resume` of the same checkpoint with `--resume-lr` and `--skip-batches` does: both end in
//! the coordinator's `restore`. Across processes rank 0 decides when a point is taken and where to
//! go back, and every rank does it at the same boundary (`controls.rs`, the agreement).

use std::collections::VecDeque;
use std::time::Instant;

use super::persist::Persistence;
use crate::engine::checkpoint_every::CheckpointEvery;
use crate::persist::resume::Resume;

/// A rewind asked for: the point's step, the lr to go on with, whether to skip the batches
/// trained on since the point.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Plan {
    pub(super) global_step: usize,
    pub(super) lr: Option<f64>,
    pub(super) skip: bool,
}

/// The points kept, oldest first, and what this boundary does with them.
pub(super) struct Points {
    /// `checkpoints.snapshots`: how many are kept.
    snapshots: usize,
    /// `checkpoints.snapshot_every`: when one is taken.
    every: CheckpointEvery,
    kept: VecDeque<Resume>,
    last: Instant,
    /// Take a point at this boundary (decided by rank 0 across processes).
    due: bool,
    /// Go back at this boundary (agreed across processes).
    pending: Option<Plan>,
    /// The checkpoint kept on disk that the pending rewind goes back to, read when asked.
    from_disk: Option<Resume>,
}

impl Points {
    pub(super) fn new(snapshots: usize, every: CheckpointEvery) -> Points {
        Points {
            snapshots,
            every,
            kept: VecDeque::new(),
            last: Instant::now(),
            due: false,
            pending: None,
            from_disk: None,
        }
    }

    /// The steps of the points kept, oldest first.
    fn steps(&self) -> Vec<usize> {
        self.kept.iter().map(|r| r.state.global_step).collect()
    }

    fn at(&self, global_step: usize) -> Option<&Resume> {
        self.kept.iter().find(|r| r.state.global_step == global_step)
    }

    /// Decides whether a point is due at the boundary before `position`, after `global_step`
    /// steps (this rank's view; rank 0's decision is agreed on across processes).
    pub(super) fn decide(&mut self, global_step: usize, position: (usize, usize)) {
        let epoch_end = (position.1 == 0 && position.0 > 0).then_some(position.0);
        self.due = self.snapshots > 0
            && self.at(global_step).is_none()
            && self.every.due(global_step, epoch_end, self.last.elapsed());
    }

    /// Whether a point is taken at this boundary.
    pub(super) fn due(&self) -> bool {
        self.due
    }

    /// Rank 0's decision, followed on another rank.
    pub(super) fn follow(&mut self, due: bool, pending: Option<Plan>) {
        (self.due, self.pending) = (due, pending);
    }

    /// The rewind to go back to at this boundary, if one is asked for.
    pub(super) fn pending(&self) -> Option<Plan> {
        self.pending
    }

    /// Takes the rewind asked for, to go back now.
    pub(super) fn take_pending(&mut self) -> Option<Plan> {
        self.pending.take()
    }

    /// The point due at this boundary is dealt with (`point`: taken, or none when the weights
    /// could not be), the oldest dropped past the number kept.
    pub(super) fn taken(&mut self, point: Option<Resume>) {
        self.due = false;
        self.last = Instant::now();
        if let Some(point) = point {
            self.kept.push_back(point);
            while self.kept.len() > self.snapshots {
                self.kept.pop_front();
            }
        }
    }

    /// The `r` key's request (rank 0's), to go back at the next boundary: refused, with the
    /// reason, when the step has no point here or on disk (`disk`'s kept checkpoints).
    pub(super) fn ask(&mut self, plan: Plan, disk: &Persistence) -> Result<(), String> {
        if let Some(lr) = plan.lr.filter(|lr| !(lr.is_finite() && *lr > 0.0)) {
            return Err(format!("cannot rewind with lr {lr}: give a positive number"));
        }
        if self.at(plan.global_step).is_none() {
            self.from_disk = disk.read_disk_point(plan.global_step).map_err(|e| {
                format!(
                    "cannot rewind to the checkpoint of step {}: {}",
                    plan.global_step,
                    crate::error_chain(&e)
                )
            })?;
            if self.from_disk.is_none() {
                let mut steps = self.steps();
                steps.extend(disk.disk_steps());
                steps.sort_unstable();
                steps.dedup();
                return Err(if steps.is_empty() {
                    "no rewind point is kept yet (--snapshot-every, --snapshots)".to_owned()
                } else {
                    let list: Vec<String> = steps.iter().map(ToString::to_string).collect();
                    format!(
                        "no rewind point at step {}; the points are at steps {}",
                        plan.global_step,
                        list.join(", ")
                    )
                });
            }
        }
        self.pending = Some(plan);
        Ok(())
    }

    /// Goes back to the point of `global_step` (kept here, a handle on it returned; or read from
    /// disk when asked), the newer points dropped. None when this rank keeps no such point.
    pub(super) fn back_to(&mut self, global_step: usize) -> Option<Resume> {
        let on_disk = self.from_disk.take().filter(|r| r.state.global_step == global_step);
        self.kept.retain(|r| r.state.global_step <= global_step);
        self.at(global_step).map(Resume::shallow_clone).or(on_disk)
    }
}

/// `position` (0-based epoch, step) moved `skip` batches on, over epochs of `steps_per_epoch`.
pub(super) fn skipped(position: (usize, usize), skip: usize, steps_per_epoch: usize) -> (usize, usize) {
    let spe = steps_per_epoch.max(1);
    let at = position.0 * spe + position.1 + skip;
    (at / spe, at % spe)
}

/// The batches from `from` to `to`, positions of epochs of `steps_per_epoch`.
pub(super) fn between(from: (usize, usize), to: (usize, usize), steps_per_epoch: usize) -> usize {
    let at = |p: (usize, usize)| p.0 * steps_per_epoch + p.1;
    at(to).saturating_sub(at(from))
}

/// Host bytes one rewind point takes: the flat `f32` weights, optimizer `slots` and buffers,
/// and the moving average of both.
pub fn point_bytes(params: i64, buffers: i64, slots: usize, ema: bool) -> u64 {
    let copies = 1 + u64::from(ema);
    4 * (params.max(0) as u64 * (copies + slots as u64) + buffers.max(0) as u64 * copies)
}

/// How many of `keep` points of `each` bytes a one-process run keeps when no count was asked
/// for: as many as fit half of the `available` host memory (the other half is the run's own).
pub fn points_that_fit(keep: usize, each: u64, available: Option<u64>) -> usize {
    match available {
        Some(available) if each > 0 => keep.min(usize::try_from(available / 2 / each).unwrap_or(usize::MAX)),
        _ => keep,
    }
}

/// The host memory the `keep` points of `each` bytes take on this host, where `ranks_here`
/// processes keep theirs; refused with the numbers when more than `available`.
pub fn check_point_memory(
    keep: usize,
    each: u64,
    ranks_here: usize,
    available: Option<u64>,
) -> Result<Option<u64>, crate::engine::ConfigError> {
    if keep == 0 {
        return Ok(None);
    }
    let ours = each * keep as u64;
    let needed = ours * ranks_here.max(1) as u64;
    match available {
        Some(available) if needed > available => Err(crate::engine::ConfigError::SnapshotMemory {
            snapshots: keep,
            each: crate::device::oom::human(each),
            per_host: if ranks_here > 1 {
                format!(", for {ranks_here} processes on this host")
            } else {
                String::new()
            },
            needed: crate::device::oom::human(needed),
            available: crate::device::oom::human(available),
        }),
        _ => Ok(Some(ours)),
    }
}

#[cfg(test)]
mod tests {
    use super::{between, check_point_memory, point_bytes, points_that_fit, skipped};

    #[test]
    fn the_default_points_are_as_many_as_fit_half_the_available_memory() {
        let gib = 1u64 << 30;
        assert_eq!(points_that_fit(3, gib, Some(16 * gib)), 3);
        assert_eq!(points_that_fit(3, gib, Some(5 * gib)), 2, "2 GiB of points in 5 available");
        assert_eq!(points_that_fit(3, 4 * gib, Some(5 * gib)), 0, "none fits half");
        assert_eq!(points_that_fit(3, gib, None), 3, "unknown memory: the default");
    }

    #[test]
    fn the_points_memory_is_counted_and_refused_with_the_numbers() {
        // 1,000 weights with Adam's two slots and an EMA, 10 buffer values with its EMA.
        assert_eq!(point_bytes(1000, 10, 2, true), 4 * (1000 * 4 + 10 * 2));
        assert_eq!(check_point_memory(3, 1 << 20, 1, Some(1 << 30)), Ok(Some(3 << 20)));
        assert_eq!(check_point_memory(0, 1 << 40, 8, Some(1)), Ok(None));
        let e = check_point_memory(3, 1 << 30, 2, Some(4 << 30)).unwrap_err().to_string();
        assert!(
            e.contains("6.00 GiB")
                && e.contains("1.00 GiB each, for 2 processes")
                && e.contains("4.00 GiB is available"),
            "{e}"
        );
        assert!(e.contains("--snapshots 0"), "{e}");
    }

    #[test]
    fn a_skip_moves_over_epoch_ends() {
        assert_eq!(skipped((0, 3), 0, 10), (0, 3));
        assert_eq!(skipped((0, 3), 7, 10), (1, 0));
        assert_eq!(skipped((2, 9), 25, 10), (5, 4));
        assert_eq!(between((0, 3), (1, 0), 10), 7);
        assert_eq!(between((2, 9), (5, 4), 10), 25);
        assert_eq!(between((1, 0), (0, 3), 10), 0, "never negative");
    }
}

#[cfg(test)]
mod points_tests {
    use super::*;
    use crate::engine::coordinator::persist::PersistSettings;
    use crate::persist::checkpoint::CheckpointState;
    use dpt_core::best::{BestKeeper, BestMetric};
    use tch::Tensor;

    fn point(global_step: usize) -> Resume {
        let normalize = crate::model::Normalization::uniform(0.5, 0.5);
        Resume {
            state: CheckpointState { global_step, ..CheckpointState::new(Default::default(), normalize) },
            params: Tensor::ones([2], tch::kind::FLOAT_CPU),
            optimizer: Vec::new(),
            buffers: Tensor::zeros([0], tch::kind::FLOAT_CPU),
            ema: None,
            then: Default::default(),
        }
    }

    fn no_disk() -> Persistence {
        let settings = PersistSettings {
            every: CheckpointEvery::Epochs(1),
            keep: 0,
            model: (crate::model::ModelKind::Lenet, None),
            disk_points: true,
            write_fault: false,
        };
        Persistence::new(None, BestKeeper::new(BestMetric::ValLoss, 0, None), settings)
    }

    #[test]
    fn a_point_is_due_by_its_cadence_once_per_step_and_the_newest_are_kept() {
        let mut p = Points::new(2, CheckpointEvery::Steps(5));
        p.decide(3, (0, 3));
        assert!(!p.due());
        p.decide(5, (0, 5));
        assert!(p.due());
        p.taken(Some(point(5)));
        assert!(!p.due());
        p.decide(5, (0, 5));
        assert!(!p.due(), "the step has its point");
        p.taken(Some(point(10)));
        p.taken(Some(point(15)));
        assert_eq!(p.steps(), [10, 15], "the newest 2");
        p.taken(None);
        assert_eq!(p.steps(), [10, 15], "a point not taken drops none");
    }

    #[test]
    fn a_rewind_is_refused_with_the_points_there_are_and_goes_back_dropping_the_newer() {
        let disk = no_disk();
        let mut p = Points::new(3, CheckpointEvery::Steps(5));
        let plan = |global_step, lr| Plan { global_step, lr, skip: false };
        let e = p.ask(plan(5, None), &disk).unwrap_err();
        assert!(e.contains("no rewind point is kept yet"), "{e}");
        p.taken(Some(point(5)));
        p.taken(Some(point(10)));
        let e = p.ask(plan(7, None), &disk).unwrap_err();
        assert!(e.ends_with("the points are at steps 5, 10"), "{e}");
        assert!(p.ask(plan(5, Some(-1.0)), &disk).unwrap_err().contains("positive"));
        assert_eq!(p.pending(), None, "nothing refused is pending");
        p.ask(plan(5, Some(0.1)), &disk).unwrap();
        assert_eq!(p.take_pending(), Some(plan(5, Some(0.1))));
        let back = p.back_to(5).expect("kept");
        assert_eq!(back.state.global_step, 5);
        assert_eq!(p.steps(), [5], "the newer point dropped, this one kept");
        assert!(p.back_to(10).is_none(), "gone");
    }
}
