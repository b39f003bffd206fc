//! What the coordinator does between steps: apply the user's controls (pause, lr, save, stop,
//! a rewind dialog's hold, a rewind), agreed on across processes; go back to a rewind point;
//! save on request and at the end, where a failed final save waits for the user or retries.

use std::time::{Duration, Instant};

use crossbeam_channel::RecvTimeoutError;

use super::rewind::{between, Plan};
use super::{Coordinator, Held, Restored};
use crate::engine::config::{check_lr, SavePolicy};
use crate::engine::events::Control;
use crate::engine::EngineError;
use crate::persist::checkpoint::Checkpoint;
use crate::persist::resume::Continuation;
use crate::record::{Change, FinishReason};

/// A save gathered and ready to write: the weights by name and the checkpoint.
type Prepared = (Vec<(String, tch::Tensor)>, Checkpoint);
use dpt_sys::c10d::ReduceOp;

/// How often a paused rank 0 tells the other ranks it is still paused (well inside any
/// collective timeout).
const HEARTBEAT: Duration = Duration::from_millis(500);

/// How to retry a save asked for during the run.
const RETRY_ADVICE: &str = "free some space and press s to try again, or S to save into another folder";

impl Coordinator {
    /// Applies every pending control at the boundary before `position`; while paused or held,
    /// waits for the next one (no busy loop). In a multi-process run the ranks then agree, so
    /// every rank takes the same decision at the same step: rank 0's lr, pause, rewind point
    /// and rewind, a stop or divergence from any rank.
    pub(super) fn poll_controls(&mut self, position: (usize, usize)) -> Result<(), EngineError> {
        // A rewind point taken at an earlier boundary has long arrived: kept and said now.
        self.settle_point(false);
        self.points.decide(self.steps.global_step(), position);
        loop {
            while let Ok(c) = self.channels.controls.try_recv() {
                self.apply(c);
            }
            if self.exchange.world().is_some() {
                self.agree()?;
            }
            if !self.gate.waits() {
                return Ok(());
            }
            // A paused run shows its last window, and the rewind point it took last.
            self.flush_report()?;
            self.settle_point(true);
            let waited = Instant::now();
            let next = if self.exchange.world().is_some() {
                // The other ranks wait on our decision: tell them at least every heartbeat.
                match self.channels.controls.recv_timeout(HEARTBEAT) {
                    Ok(c) => Some(c),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => Some(Control::Resume),
                }
            } else {
                // Nobody can resume us any more: carry on rather than hang.
                Some(self.channels.controls.recv().unwrap_or(Control::Resume))
            };
            self.report.paused(waited.elapsed());
            if let Some(c) = next {
                self.apply(c);
            }
        }
    }

    /// One decision for every rank (an allreduce of a few numbers, maximum taken): rank 0's
    /// scale of the lr schedule, its pause (or hold), its rewind point and rewind, anyone's
    /// stop, divergence or preemption.
    fn agree(&mut self) -> Result<(), EngineError> {
        let Some(w) = self.exchange.world() else { return Ok(()) };
        let leader = w.rank == 0;
        let flag = |b: bool| if b { 1.0 } else { 0.0 };
        let ours = |x: f64| if leader { x } else { f64::NEG_INFINITY };
        let plan = self.points.pending().filter(|_| leader);
        let flow = self.gate.flow();
        let mut v = [
            ours(self.steps.scale()),
            flag(leader && self.gate.waits()),
            flag(flow.stopping().is_some()),
            flag(flow.diverged()),
            flag(flow.stopping() == Some(FinishReason::Preempted)),
            flag(leader && self.points.due()),
            plan.map_or(f64::NEG_INFINITY, |p| p.global_step as f64),
            plan.and_then(|p| p.lr).unwrap_or(f64::NEG_INFINITY),
            flag(plan.is_some_and(|p| p.skip)),
            flag(leader && self.persist.asked().waiting()),
        ];
        w.allreduce_values(&mut v, ReduceOp::Max)?;
        let global_step = self.steps.global_step();
        if !leader {
            let pending = (v[6] >= 0.0).then(|| Plan {
                global_step: v[6] as usize,
                lr: (v[7] > 0.0).then_some(v[7]),
                skip: v[8] > 0.0,
            });
            self.points.follow(v[5] > 0.0, pending);
            if let Some((from, to)) = self.steps.follow_scale(v[0]) {
                self.channels.emit(Change::LrChanged { from, to, global_step });
            }
            self.channels.say(self.gate.follow(v[1] > 0.0, global_step));
        }
        if v[2] > 0.0 && self.gate.flow().stopping().is_none() {
            self.gate.end(FinishReason::Stopped);
            self.channels.emit(Change::StopRequested { global_step });
        }
        if v[3] > 0.0 {
            self.gate.end(FinishReason::Diverged);
        }
        if v[4] > 0.0 && self.gate.end(FinishReason::Preempted) {
            self.channels.emit(Change::Preempted { global_step });
        }
        if let Some(position) = self.persist.asked().agreed(v[9] > 0.0) {
            // Every rank gathers the split state; rank 0 writes it (a failed write is said).
            if let Some(prepared) = self.prepare_save(position)? {
                let _ = self.write_save(&prepared, RETRY_ADVICE);
            }
        }
        Ok(())
    }

    /// A save asked for between steps: now, or where the optimizer state is split over the
    /// ranks, once they have agreed on it (the next agreement, at this boundary).
    fn save_between_steps(&mut self) {
        let split = self.split();
        if let Some(position) = self.persist.asked().ask(split) {
            let _ = self.save(position, RETRY_ADVICE);
        }
    }

    /// Applies one control between steps.
    fn apply(&mut self, control: Control) {
        let global_step = self.steps.global_step();
        let said = match control {
            Control::Pause => self.gate.pause(global_step),
            Control::Resume => self.gate.resume(global_step),
            Control::Hold { on } => self.gate.hold(on, global_step),
            Control::SetLr { lr } => Some(match check_lr(lr) {
                Ok(lr) => Change::LrChanged { from: self.steps.set_lr(lr), to: lr, global_step },
                Err(e) => Change::Refused { reason: e.to_string() },
            }),
            Control::SaveNow => {
                self.save_between_steps();
                None
            }
            Control::SaveTo { dir } => {
                let (taken, said) = self.persist.set_save_dir(dir);
                self.channels.emit(said);
                if taken {
                    self.save_between_steps();
                }
                None
            }
            Control::Stop => {
                let first = self.gate.flow().stopping().is_none();
                self.gate.end(FinishReason::Stopped);
                first.then_some(Change::StopRequested { global_step })
            }
            Control::Preempt => {
                self.gate.end(FinishReason::Preempted).then_some(Change::Preempted { global_step })
            }
            // Rank 0's `r` key: the run resumes if paused and goes back at the next boundary it
            // passes (the boundary it is held at, once the dialog that sent it lets go).
            Control::Rewind { global_step: to, lr, skip } => {
                // The point on its way to the host may be the one asked for.
                self.settle_point(true);
                match self.points.ask(Plan { global_step: to, lr, skip }, &self.persist) {
                    Ok(()) => self.gate.release(global_step),
                    Err(reason) => Some(Change::Refused { reason }),
                }
            }
        };
        self.channels.say(said);
    }

    /// Goes back to the point `plan` names from `now` (the position that would have trained
    /// next): its state into every part, then on as a resume with the lr and the skip.
    pub(super) fn rewind(&mut self, plan: Plan, now: (usize, usize)) -> Result<Restored, EngineError> {
        let from = self.steps.global_step();
        self.settle_point(true);
        let Some(point) = self.points.back_to(plan.global_step) else {
            return Err(EngineError::Coordinator {
                replica: None,
                device: None,
                message: format!(
                    "rank 0 rewound to step {}, of which this rank keeps no point",
                    plan.global_step
                ),
            });
        };
        let s = &point.state;
        let spe = self.cfg.steps_per_epoch(self.facts.train_len);
        let skip = if plan.skip { between((s.epoch, s.step), now, spe) } else { 0 };
        let mut restored = self.restore(&point, Continuation { lr: plan.lr, skip })?;
        self.channels.say(restored.lr.take());
        self.channels.emit(Change::Rewound {
            from,
            to: s.global_step,
            epoch: s.epoch,
            step: s.step,
            lr: self.steps.lr(),
            skipped: skip,
        });
        Ok(restored)
    }

    /// Writes the weights and a checkpoint that continues at `position`, reporting each; on a
    /// failure says what failed and how to retry (`advice`). Parameters that are not finite
    /// are never written over good files.
    pub(super) fn save(&mut self, position: (usize, usize), advice: &str) -> Result<(), EngineError> {
        match self.prepare_save(position)? {
            Some(prepared) => self.write_save(&prepared, advice),
            None => Ok(()),
        }
    }

    /// What a save at `position` writes: the weights and the checkpoint, as views written
    /// before anything trains again (each tensor copied to the host in turn); none where this
    /// rank saves nothing or the weights are not finite (which is said). Where the optimizer
    /// state is split over the ranks, every rank calls this together.
    fn prepare_save(&mut self, position: (usize, usize)) -> Result<Option<Prepared>, EngineError> {
        let keep = self.persist.save_dir().is_some();
        if !keep && !self.split() {
            return Ok(None);
        }
        // The weights are the same on every rank, and so is this answer.
        if !self.update.params_finite()? {
            if keep {
                self.channels.emit(Change::Warning {
                    message: "weights and checkpoint not saved: they are not finite".into(),
                });
            }
            return Ok(None);
        }
        let checkpoint = self.snapshot_for(keep, position, Held::Views)?;
        Ok(checkpoint.map(|c| (self.update.replicas().named_views(), c)))
    }

    /// Writes a prepared save, reporting each file; on a failure says what failed and how to
    /// retry (`advice`).
    fn write_save(&mut self, (weights, checkpoint): &Prepared, advice: &str) -> Result<(), EngineError> {
        let (said, result) = self.persist.save_all(weights, checkpoint, advice);
        self.channels.say(said);
        result
    }

    /// The save when the run ends or stops. If it fails, the weights are still in memory: by
    /// the [`SavePolicy`], wait for the user to free space or name another folder, or retry a
    /// few times; a run whose weights could not be saved ends as failed, never as done.
    pub(super) fn final_save(&mut self, position: (usize, usize)) -> Result<(), EngineError> {
        let global_step = self.steps.global_step();
        // Training is over: the pages its activations took go back to the system before the
        // save reloads a TorchScript module beside the weights, so the save adds nothing to
        // the run's peak.
        crate::sys::release_free_memory();
        // Gathered once (a collective where the state is split over the ranks); the retries
        // write the same tensors, which nothing trains any more.
        let Some(prepared) = self.prepare_save(position)? else { return Ok(()) };
        match self.cfg.save_policy {
            SavePolicy::WaitForUser => {
                let advice = "paused with the weights in memory: free some space and press s to retry, or S to save into another folder; q gives up";
                let Err(mut failure) = self.write_save(&prepared, advice) else { return Ok(()) };
                // Shown as paused while the weights wait in memory; the loop itself is over.
                if !self.gate.flow().is_paused() {
                    self.channels.emit(Change::Paused { global_step });
                }
                loop {
                    let control = match self.channels.controls.recv() {
                        Ok(c) => c,
                        // Nobody can steer the run any more.
                        Err(_) => return Err(failure),
                    };
                    match control {
                        Control::SaveNow | Control::Resume => {}
                        // Nothing trains any more: there is no boundary to hold.
                        Control::Hold { .. } => continue,
                        Control::SaveTo { dir } => {
                            let (taken, said) = self.persist.set_save_dir(dir);
                            self.channels.emit(said);
                            if !taken {
                                continue;
                            }
                        }
                        Control::Stop | Control::Preempt => return Err(failure),
                        Control::Pause | Control::SetLr { .. } | Control::Rewind { .. } => {
                            self.channels.emit(Change::Refused {
                                reason: "training is over; save the weights first (s)".into(),
                            });
                            continue;
                        }
                    }
                    match self.write_save(&prepared, advice) {
                        Ok(()) => {
                            self.channels.emit(Change::Resumed { global_step });
                            return Ok(());
                        }
                        Err(e) => failure = e,
                    }
                }
            }
            SavePolicy::Retry { tries, every } => {
                let advice = |left: u32| {
                    if left == 0 {
                        "giving up; the trained weights are lost, the last checkpoint on disk is kept"
                            .to_owned()
                    } else {
                        format!(
                            "trying again in {} s ({left} tries left; --save-retries)",
                            every.as_secs_f64()
                        )
                    }
                };
                let Err(mut failure) = self.write_save(&prepared, &advice(tries)) else { return Ok(()) };
                for left in (0..tries).rev() {
                    // A stop gives up; another folder is taken; nothing else waits on us.
                    match self.channels.controls.recv_timeout(every) {
                        Ok(Control::Stop | Control::Preempt) => return Err(failure),
                        Ok(Control::SaveTo { dir }) => {
                            let (_, said) = self.persist.set_save_dir(dir);
                            self.channels.emit(said);
                        }
                        _ => {}
                    }
                    match self.write_save(&prepared, &advice(left)) {
                        Ok(()) => return Ok(()),
                        Err(e) => failure = e,
                    }
                }
                Err(failure)
            }
        }
    }
}
