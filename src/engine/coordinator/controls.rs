//! What the coordinator does between steps: apply the user's controls (pause, lr, save, stop)
//! and the policy for a loss that stops being finite.

use crate::alert::NOT_FINITE;
use std::time::{Duration, Instant};

use crossbeam_channel::RecvTimeoutError;

use super::Coordinator;
use crate::dist::c10d::ReduceOp;
use crate::engine::config::{check_lr, OnNan};
use crate::engine::events::Control;
use crate::engine::EngineError;
use crate::record::Change;

/// How often a paused rank 0 tells the other ranks it is still paused (well inside any
/// collective timeout).
const HEARTBEAT: Duration = Duration::from_millis(500);

/// How to retry a save asked for during the run.
const RETRY_ADVICE: &str = "free some space and press s to try again, or S to save into another folder";

impl Coordinator {
    /// Applies every pending control; while paused, waits for the next one (no busy loop). In
    /// a multi-process run the ranks then agree, so every rank takes the same decision at the
    /// same step: rank 0's lr and pause, a stop or divergence from any rank.
    pub(super) fn poll_controls(&mut self) -> Result<(), EngineError> {
        loop {
            while let Ok(c) = self.controls.try_recv() {
                self.apply(c);
            }
            if self.world.is_some() {
                self.agree()?;
            }
            if !self.paused || self.stop {
                return Ok(());
            }
            let waited = Instant::now();
            let next = if self.world.is_some() {
                // The other ranks wait on our decision: tell them at least every heartbeat.
                match self.controls.recv_timeout(HEARTBEAT) {
                    Ok(c) => Some(c),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => Some(Control::Resume),
                }
            } else {
                // Nobody can resume us any more: carry on rather than hang.
                Some(self.controls.recv().unwrap_or(Control::Resume))
            };
            let idle = waited.elapsed();
            self.window.paused += idle;
            self.epoch.paused += idle;
            if let Some(c) = next {
                self.apply(c);
            }
        }
    }

    /// One decision for every rank (an allreduce of a few numbers, maximum taken): rank 0's
    /// scale of the lr schedule, its pause, anyone's stop, divergence or preemption.
    fn agree(&mut self) -> Result<(), EngineError> {
        let Some(w) = &self.world else { return Ok(()) };
        let leader = w.rank == 0;
        let flag = |b: bool| if b { 1.0 } else { 0.0 };
        let mut v = [
            if leader { self.plan.scale } else { f64::NEG_INFINITY },
            flag(leader && self.paused),
            flag(self.stop),
            flag(self.diverged),
            flag(self.preempted),
        ];
        w.allreduce_values(&mut v, ReduceOp::Max)?;
        let global_step = self.global_step;
        if !leader {
            if v[0] != self.plan.scale {
                self.plan.scale = v[0];
                let to = self.plan.at(global_step);
                let from = std::mem::replace(&mut self.lr, to);
                self.emit(Change::LrChanged { from, to, global_step });
            }
            let paused = v[1] > 0.0;
            if paused != self.paused {
                self.paused = paused;
                self.emit(if paused {
                    Change::Paused { global_step }
                } else {
                    Change::Resumed { global_step }
                });
            }
        }
        if v[2] > 0.0 && !self.stop {
            self.stop = true;
            self.emit(Change::StopRequested { global_step });
        }
        self.diverged |= v[3] > 0.0;
        if v[4] > 0.0 {
            self.preempt();
        }
        Ok(())
    }

    /// Stops after this step, as preempted (once).
    fn preempt(&mut self) {
        if !self.preempted {
            self.preempted = true;
            self.emit(Change::Preempted { global_step: self.global_step });
        }
        self.stop = true;
    }

    pub(super) fn apply(&mut self, control: Control) {
        let global_step = self.global_step;
        match control {
            Control::Pause if !self.paused => {
                self.paused = true;
                self.emit(Change::Paused { global_step });
            }
            Control::Resume if self.paused => {
                self.paused = false;
                self.emit(Change::Resumed { global_step });
            }
            Control::Pause | Control::Resume => {}
            Control::SetLr { lr } => match check_lr(lr) {
                Ok(lr) => {
                    self.plan.rescale_to(global_step, lr);
                    let from = std::mem::replace(&mut self.lr, lr);
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
                if !self.stop {
                    self.emit(Change::StopRequested { global_step });
                }
                self.stop = true;
            }
            Control::Preempt => self.preempt(),
        }
    }

    pub(super) fn on_nan(&mut self) {
        let at = self.global_step;
        match self.cfg().on_nan {
            OnNan::Ignore => {
                if !self.nan_warned {
                    self.nan_warned = true;
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
                if !self.paused {
                    self.paused = true;
                    self.emit(Change::Paused { global_step: at });
                }
            }
            OnNan::Stop => {
                self.emit(Change::Warning {
                    message: format!("{NOT_FINITE} at step {at}: stopping; the last good checkpoint is kept"),
                });
                self.diverged = true;
                self.stop = true;
            }
        }
    }
}
