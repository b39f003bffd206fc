//! What the coordinator does between steps: apply the user's controls (pause, lr, save, stop,
//! a rewind dialog's hold) and the policy for a loss that stops being finite.

use crate::alert::NOT_FINITE;
use std::time::{Duration, Instant};

use crossbeam_channel::RecvTimeoutError;

use super::rewind::Plan;
use super::Coordinator;
use crate::dist::c10d::ReduceOp;
use crate::engine::config::{check_lr, OnNan};
use crate::engine::events::Control;
use crate::engine::EngineError;
use crate::record::{Change, FinishReason};

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
        self.points.due = self.point_due(position);
        loop {
            while let Ok(c) = self.channels.controls.try_recv() {
                self.apply(c);
            }
            if self.exchange.world.is_some() {
                self.agree()?;
            }
            if !self.waits() {
                return Ok(());
            }
            let waited = Instant::now();
            let next = if self.exchange.world.is_some() {
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
            let idle = waited.elapsed();
            self.report.window.paused += idle;
            self.report.epoch.paused += idle;
            if let Some(c) = next {
                self.apply(c);
            }
        }
    }

    /// One decision for every rank (an allreduce of a few numbers, maximum taken): rank 0's
    /// scale of the lr schedule, its pause (or hold), its rewind point and rewind, anyone's
    /// stop, divergence or preemption.
    fn agree(&mut self) -> Result<(), EngineError> {
        let Some(w) = &self.exchange.world else { return Ok(()) };
        let leader = w.rank == 0;
        let flag = |b: bool| if b { 1.0 } else { 0.0 };
        let ours = |x: f64| if leader { x } else { f64::NEG_INFINITY };
        let plan = self.points.pending.filter(|_| leader);
        let mut v = [
            ours(self.steps.plan.scale),
            flag(leader && self.waits()),
            flag(self.flow.stopping().is_some()),
            flag(self.flow.diverged()),
            flag(self.flow.stopping() == Some(FinishReason::Preempted)),
            flag(leader && self.points.due),
            plan.map_or(f64::NEG_INFINITY, |p| p.global_step as f64),
            plan.and_then(|p| p.lr).unwrap_or(f64::NEG_INFINITY),
            flag(plan.is_some_and(|p| p.skip)),
        ];
        w.allreduce_values(&mut v, ReduceOp::Max)?;
        let global_step = self.steps.global_step;
        if !leader {
            self.points.due = v[5] > 0.0;
            self.points.pending = (v[6] >= 0.0).then(|| Plan {
                global_step: v[6] as usize,
                lr: (v[7] > 0.0).then_some(v[7]),
                skip: v[8] > 0.0,
            });
            if let Some((from, to)) = self.steps.follow_scale(v[0]) {
                self.emit(Change::LrChanged { from, to, global_step });
            }
            let paused = v[1] > 0.0;
            self.steer(|c| {
                if paused {
                    c.flow.pause();
                } else {
                    c.flow.resume();
                }
            });
        }
        if v[2] > 0.0 && self.flow.stopping().is_none() {
            self.flow.end(FinishReason::Stopped);
            self.emit(Change::StopRequested { global_step });
        }
        if v[3] > 0.0 {
            self.flow.end(FinishReason::Diverged);
        }
        if v[4] > 0.0 {
            self.preempt();
        }
        Ok(())
    }

    /// Stops after this step, as preempted (once).
    fn preempt(&mut self) {
        if self.flow.end(FinishReason::Preempted) {
            self.emit(Change::Preempted { global_step: self.steps.global_step });
        }
    }

    /// Whether the loop waits at this boundary: paused, or held by a viewer's rewind dialog.
    pub(super) fn waits(&self) -> bool {
        self.flow.waits(self.holds)
    }

    /// Makes `change` and says `paused` or `resumed` where it changed whether the loop waits:
    /// to whoever watches, a hold is a pause, and a pause under a hold changes nothing.
    pub(super) fn steer(&mut self, change: impl FnOnce(&mut Self)) {
        let was = self.waits();
        change(self);
        let global_step = self.steps.global_step;
        match (was, self.waits()) {
            (false, true) => self.emit(Change::Paused { global_step }),
            (true, false) => self.emit(Change::Resumed { global_step }),
            _ => {}
        }
    }

    pub(super) fn apply(&mut self, control: Control) {
        let global_step = self.steps.global_step;
        match control {
            Control::Pause => self.steer(|c| {
                c.flow.pause();
            }),
            // Another viewer's `p` must not let the run go from under an open dialog.
            Control::Resume if !self.flow.is_paused() && self.waits() => self.emit(Change::Refused {
                reason: "a rewind dialog is open on the run: it goes on when the dialog closes".to_owned(),
            }),
            Control::Resume => self.steer(|c| {
                c.flow.resume();
            }),
            Control::Hold { on } => self.steer(|c| c.holds.set(on)),
            Control::SetLr { lr } => match check_lr(lr) {
                Ok(lr) => {
                    let from = self.steps.set_lr(lr);
                    self.emit(Change::LrChanged { from, to: lr, global_step });
                }
                Err(e) => self.emit(Change::Refused { reason: e.to_string() }),
            },
            Control::SaveNow => {
                let position = self.position_now();
                let _ = self.save_all(position, RETRY_ADVICE);
            }
            Control::SaveTo { dir } => {
                if self.set_save_dir(dir) {
                    let position = self.position_now();
                    let _ = self.save_all(position, RETRY_ADVICE);
                }
            }
            Control::Stop => {
                if self.flow.stopping().is_none() {
                    self.emit(Change::StopRequested { global_step });
                }
                self.flow.end(FinishReason::Stopped);
            }
            Control::Preempt => self.preempt(),
            Control::Rewind { global_step, lr, skip } => self.ask_rewind(Plan { global_step, lr, skip }),
        }
    }

    pub(super) fn on_nan(&mut self) {
        let at = self.steps.global_step;
        match self.cfg().on_nan {
            OnNan::Ignore => {
                if !self.report.nan_warned {
                    self.report.nan_warned = true;
                    self.emit(Change::Warning {
                        message: format!("{NOT_FINITE} at step {at} (--on-nan ignore)"),
                    });
                }
            }
            OnNan::Pause => {
                self.emit(Change::Warning {
                    message: format!(
                        "{NOT_FINITE} at step {at}: paused; the last good checkpoint is in the run directory (--resume it, with a lower --lr)"
                    ),
                });
                self.steer(|c| {
                    c.flow.pause();
                });
            }
            OnNan::Stop => {
                self.emit(Change::Warning {
                    message: format!("{NOT_FINITE} at step {at}: stopping; the last good checkpoint is kept"),
                });
                self.flow.end(FinishReason::Diverged);
            }
        }
    }
}
