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
use super::snapshot::InFlight;
use crate::device::gpu_wait::Waiting;
use crate::engine::checkpoint_every::CheckpointEvery;
use crate::model::script::ScriptModel;
use crate::model::ModelKind;
use crate::persist::resume::Resume;
use crate::record::Change;

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
    /// The point taken last, still on its way to the host, and its record, said once it is
    /// kept.
    in_flight: Option<(InFlight, Change)>,
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
            in_flight: None,
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
            self.keep(point);
        }
    }

    /// Keeps `point`, the oldest dropped past the number kept.
    fn keep(&mut self, point: Resume) {
        self.kept.push_back(point);
        while self.kept.len() > self.snapshots {
            self.kept.pop_front();
        }
    }

    /// The point due at this boundary is on its way to the host; [`Points::settle`] keeps it
    /// once it has arrived and says `said` then.
    pub(super) fn landing(&mut self, point: InFlight, said: Change) {
        self.taken(None);
        self.in_flight = Some((point, said));
    }

    /// Whether a point is on its way to the host.
    pub(super) fn in_flight(&self) -> bool {
        self.in_flight.is_some()
    }

    /// Keeps the point on its way to the host once it has arrived (`waiting`: waits for it,
    /// else only looks), laid out for `model`: its record, or a warning that says why no point
    /// was kept. Nothing while none is on its way or it has not arrived.
    pub(super) fn settle(
        &mut self,
        waiting: Option<&Waiting>,
        (model, script): (ModelKind, Option<&ScriptModel>),
    ) -> Option<Change> {
        let (point, _) = self.in_flight.as_ref()?;
        let global_step = point.global_step();
        let not_yet = match point.arrived() {
            Ok(arrived) => waiting.is_none() && !arrived,
            Err(_) => false,
        };
        if not_yet {
            return None;
        }
        let (point, said) = self.in_flight.take()?;
        let wait = waiting.cloned().unwrap_or_else(|| crate::engine::clock::waiting("a rewind point's copy", "the GPU", std::time::Duration::ZERO));
        let kept = match point.arrive(&wait) {
            Ok(Some(checkpoint)) => Resume::new(checkpoint, model, script, std::path::Path::new("rewind point"))
                .map_err(|e| format!("no rewind point taken: {e}")),
            Ok(None) => Err(format!("no rewind point at step {global_step}: the weights are not finite")),
            Err(e) => Err(format!("no rewind point at step {global_step}: {e}")),
        };
        match kept {
            Ok(point) => {
                self.keep(point);
                Some(said)
            }
            Err(message) => Some(Change::Warning { message }),
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
/// and the moving average of both. Copied from GPUs (`pinned`), each flat buffer is a block of
/// libtorch's page-locked cache, which rounds every block up to a power of two.
pub fn point_bytes(params: i64, buffers: i64, slots: usize, ema: bool, pinned: bool) -> u64 {
    let block = |n: i64| match 4 * n.max(0) as u64 {
        b if pinned && b > 0 => b.next_power_of_two(),
        b => b,
    };
    let copies = 1 + u64::from(ema);
    block(params) * (copies + slots as u64) + block(buffers) * copies
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
mod tests;
