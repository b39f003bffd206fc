//! Rewind points and going back to one. A point is what a checkpoint continuing at a step
//! boundary holds (`checkpoint_at`), copied to host memory every `--snapshot-every`, the newest
//! `--snapshots` kept; in a one-process run the checkpoints kept on disk (`--keep-checkpoints`)
//! are points too. A rewind restores one into every replica and goes on exactly as a
//! `--resume` of the same checkpoint with `--resume-lr` and `--skip-batches` does: both end in
//! [`Coordinator::go_on`]. Across processes rank 0 decides when a point is taken and where to
//! go back, and every rank does it at the same boundary (`controls.rs`, the agreement).

use std::collections::VecDeque;
use std::time::Instant;

use super::Coordinator;
use crate::engine::tally::Tally;
use crate::engine::EngineError;
use crate::persist::checkpoint::CheckpointState;
use crate::persist::resume::{Continuation, Resume};
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
    kept: VecDeque<Resume>,
    last: Instant,
    /// Take a point at this boundary (decided by rank 0 across processes).
    pub(super) due: bool,
    /// Go back at this boundary (agreed across processes).
    pub(super) pending: Option<Plan>,
    /// The checkpoint kept on disk that the pending rewind goes back to, read when asked.
    from_disk: Option<Resume>,
}

impl Default for Points {
    fn default() -> Self {
        Points { kept: VecDeque::new(), last: Instant::now(), due: false, pending: None, from_disk: None }
    }
}

impl Points {
    /// The steps of the points kept, oldest first.
    pub(super) fn steps(&self) -> Vec<usize> {
        self.kept.iter().map(|r| r.state.global_step).collect()
    }

    fn at(&self, global_step: usize) -> Option<&Resume> {
        self.kept.iter().find(|r| r.state.global_step == global_step)
    }
}

/// `position` (0-based epoch, step) moved `skip` batches on, over epochs of `steps_per_epoch`.
pub(super) fn skipped(position: (usize, usize), skip: usize, steps_per_epoch: usize) -> (usize, usize) {
    let spe = steps_per_epoch.max(1);
    let at = position.0 * spe + position.1 + skip;
    (at / spe, at % spe)
}

/// The batches from `from` to `to`, positions of epochs of `steps_per_epoch`.
fn between(from: (usize, usize), to: (usize, usize), steps_per_epoch: usize) -> usize {
    let at = |p: (usize, usize)| p.0 * steps_per_epoch + p.1;
    at(to).saturating_sub(at(from))
}

impl Coordinator {
    /// Whether a rewind point is due at the boundary before `position` (this rank's view).
    pub(super) fn point_due(&self, position: (usize, usize)) -> bool {
        let c = &self.cfg().settings.checkpoints;
        let epoch_end = (position.1 == 0 && position.0 > 0).then_some(position.0);
        c.snapshots > 0
            && self.points.at(self.steps.global_step).is_none()
            && c.snapshot_every.due(self.steps.global_step, epoch_end, self.points.last.elapsed())
    }

    /// Takes a rewind point at the boundary before `position`: the checkpoint's tensors copied
    /// to the host and laid out as a resume reads them, the oldest point dropped past the
    /// number kept.
    pub(super) fn take_point(&mut self, position: (usize, usize)) {
        self.points.due = false;
        self.points.last = Instant::now();
        let finite = self.params_finite();
        if !finite.as_ref().is_ok_and(|&f| f) {
            let why = finite.map_or_else(|e| e.to_string(), |_| "the weights are not finite".to_owned());
            self.emit(Change::Warning {
                message: format!("no rewind point at step {}: {why}", self.steps.global_step),
            });
            return;
        }
        let model = self.cfg().settings.model_kind();
        let point = Resume::new(
            self.checkpoint_at(position),
            model,
            self.cfg().kit.script.as_deref(),
            std::path::Path::new("rewind point"),
        );
        match point {
            Ok(point) => {
                self.points.kept.push_back(point);
                while self.points.kept.len() > self.cfg().settings.checkpoints.snapshots {
                    self.points.kept.pop_front();
                }
                self.emit(Change::Snapshot {
                    global_step: self.steps.global_step,
                    epoch: position.0,
                    step: position.1,
                    loss: self.report.last_loss,
                    lr: self.steps.lr,
                    unix: crate::unix_now(),
                });
            }
            Err(e) => self.emit(Change::Warning { message: format!("no rewind point taken: {e}") }),
        }
    }

    /// The `r` key's request (rank 0's): refused with the points there are when the step has
    /// none; otherwise the run resumes if paused and goes back at the next boundary it passes
    /// (the boundary it is held at, once the dialog that sent it lets go).
    pub(super) fn ask_rewind(&mut self, plan: Plan) {
        if let Some(lr) = plan.lr.filter(|lr| !(lr.is_finite() && *lr > 0.0)) {
            self.emit(Change::Refused {
                reason: format!("cannot rewind with lr {lr}: give a positive number"),
            });
            return;
        }
        if self.points.at(plan.global_step).is_none() {
            match self.read_disk_point(plan.global_step) {
                Ok(point) => self.points.from_disk = point,
                Err(e) => {
                    let reason = format!(
                        "cannot rewind to the checkpoint of step {}: {}",
                        plan.global_step,
                        crate::error_chain(&e)
                    );
                    self.emit(Change::Refused { reason });
                    return;
                }
            }
        }
        if self.points.at(plan.global_step).is_none() && self.points.from_disk.is_none() {
            let mut steps = self.points.steps();
            steps.extend(self.disk_steps());
            steps.sort_unstable();
            steps.dedup();
            let reason = if steps.is_empty() {
                "no rewind point is kept yet (--snapshot-every, --snapshots)".to_owned()
            } else {
                let list: Vec<String> = steps.iter().map(ToString::to_string).collect();
                format!(
                    "no rewind point at step {}; the points are at steps {}",
                    plan.global_step,
                    list.join(", ")
                )
            };
            self.emit(Change::Refused { reason });
            return;
        }
        self.points.pending = Some(plan);
        // A dialog's hold, if any, still keeps the run until the dialog lets go.
        self.steer(|c| {
            c.flow.resume();
        });
    }

    /// Goes back to the point `plan` names from `now` (the position that would have trained
    /// next): its tensors into every replica, its counters, then on as a resume with the lr
    /// and the skip. Returns where the data goes on and the epoch's tally so far.
    pub(super) fn rewind(
        &mut self,
        plan: Plan,
        now: (usize, usize),
    ) -> Result<((usize, usize), Tally), EngineError> {
        let from = self.steps.global_step;
        let on_disk = self.points.from_disk.take().filter(|r| r.state.global_step == plan.global_step);
        let Some(point) = self.points.at(plan.global_step).or(on_disk.as_ref()) else {
            return Err(EngineError::Coordinator {
                replica: None,
                device: None,
                message: format!(
                    "rank 0 rewound to step {}, of which this rank keeps no point",
                    plan.global_step
                ),
            });
        };
        let state = point.state.clone();
        self.update.replicas.load(point);
        let scaler = self.loss_scaler(state.loss_scaler);
        self.update.start(scaler, state.global_step);
        self.points.kept.retain(|r| r.state.global_step <= plan.global_step);
        let spe = self.cfg().steps_per_epoch(self.facts.train_len);
        let skip = if plan.skip { between((state.epoch, state.step), now, spe) } else { 0 };
        self.take_counters(&state);
        let (position, partial) = self.go_on(&state, Continuation { lr: plan.lr, skip });
        self.emit(Change::Rewound {
            from,
            to: state.global_step,
            epoch: state.epoch,
            step: state.step,
            lr: self.steps.lr,
            skipped: skip,
        });
        Ok((position, partial))
    }

    /// The checkpoint kept on disk for step `global_step` (`--keep-checkpoints`), a rewind point
    /// of a one-process run (the other ranks of a multi-process run have no run directory).
    fn disk_point(&self, global_step: usize) -> Option<std::path::PathBuf> {
        let dir = self.persist.save_dir.as_ref().filter(|_| self.exchange.world.is_none())?;
        let path = dir.join("checkpoints").join(format!("step-{global_step:09}.safetensors"));
        path.is_file().then_some(path)
    }

    /// The steps of the checkpoints kept on disk that are rewind points.
    fn disk_steps(&self) -> Vec<usize> {
        let Some(dir) = self.persist.save_dir.as_ref().filter(|_| self.exchange.world.is_none()) else {
            return Vec::new();
        };
        let names = std::fs::read_dir(dir.join("checkpoints")).into_iter().flatten().flatten();
        names
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.strip_prefix("step-")?.strip_suffix(".safetensors")?.parse().ok()
            })
            .collect()
    }

    /// The checkpoint kept on disk for `global_step`, read as a resume reads it.
    fn read_disk_point(&self, global_step: usize) -> Result<Option<Resume>, EngineError> {
        let Some(path) = self.disk_point(global_step) else { return Ok(None) };
        let ckpt = crate::persist::checkpoint::Checkpoint::read(&path)?;
        let model = self.cfg().settings.model_kind();
        Ok(Some(Resume::new(ckpt, model, self.cfg().kit.script.as_deref(), &path)?))
    }

    /// Takes a checkpoint's counters: steps, the lr's live scale, the best kept, the epochs
    /// done.
    pub(super) fn take_counters(&mut self, s: &CheckpointState) {
        self.steps.restore(s.global_step, s.lr_scale);
        if let Some(b) = &s.best {
            let (keep, patience, metric) =
                (self.persist.best.keep, self.persist.best.patience, self.persist.best.metric);
            self.persist.best = crate::engine::best::BestKeeper { keep, patience, metric, ..b.clone() };
        }
        self.report.done = super::reporter::Done {
            epochs: s.epochs_done,
            tally: Tally { samples: s.samples_done, seconds: s.train_seconds, ..Tally::default() },
            last_test_acc: s.last_test_acc,
            last_test_loss: None,
        };
    }

    /// Goes on from checkpoint `s` (its counters taken) as `then` says: the lr set as the lr
    /// key sets it, the data `skip` batches further. Returns where the data goes on and the
    /// epoch's tally so far (none when the skip leaves the checkpoint's epoch).
    pub(super) fn go_on(&mut self, s: &CheckpointState, then: Continuation) -> ((usize, usize), Tally) {
        if let Some(lr) = then.lr {
            let from = self.steps.set_lr(lr);
            self.emit(Change::LrChanged { from, to: lr, global_step: s.global_step });
        }
        let spe = self.cfg().steps_per_epoch(self.facts.train_len);
        let position = skipped((s.epoch, s.step), then.skip, spe);
        let partial = if position.0 == s.epoch { s.partial_epoch } else { Tally::default() };
        (position, partial)
    }
}

/// Host bytes one rewind point takes: the flat `f32` weights, optimizer `slots` and buffers,
/// and the moving average of both.
pub fn point_bytes(params: i64, buffers: i64, slots: usize, ema: bool) -> u64 {
    let copies = 1 + u64::from(ema);
    4 * (params.max(0) as u64 * (copies + slots as u64) + buffers.max(0) as u64 * copies)
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
    use super::{between, check_point_memory, point_bytes, skipped};

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
