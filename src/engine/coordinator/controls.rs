//! What the coordinator does between steps: apply the user's controls (pause, lr, save, stop)
//! and the policy for a loss that stops being finite.

use std::time::Instant;

use super::super::config::{check_lr, OnNan};
use super::super::events::Control;
use super::super::EngineError;
use super::Coordinator;
use crate::record::Change;

/// How to retry a save asked for during the run.
const RETRY_ADVICE: &str = "free some space and press s to try again, or S to save into another folder";

impl Coordinator {
    /// Applies every pending control; while paused, waits for the next one (no busy loop).
    pub(super) fn poll_controls(&mut self) -> Result<(), EngineError> {
        loop {
            let control = if self.paused {
                let waited = Instant::now();
                let c = self.p.controls.recv();
                let idle = waited.elapsed();
                self.window.paused += idle;
                self.epoch.paused += idle;
                // Nobody can resume us any more: carry on rather than hang.
                c.unwrap_or(Control::Resume)
            } else {
                match self.p.controls.try_recv() {
                    Ok(c) => c,
                    Err(_) => return Ok(()),
                }
            };
            self.apply(control);
            if self.stop {
                return Ok(());
            }
        }
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
        }
    }

    pub(super) fn on_nan(&mut self) {
        let at = self.global_step;
        match self.cfg().on_nan {
            OnNan::Ignore => {
                if !self.nan_warned {
                    self.nan_warned = true;
                    self.emit(Change::Warning {
                        message: format!("the loss is not finite at step {at} (--on-nan ignore)"),
                    });
                }
            }
            OnNan::Pause => {
                self.emit(Change::Warning {
                    message: format!(
                        "the loss is not finite at step {at}: paused; the last good checkpoint is in the run directory (--resume it, with a lower --lr)"
                    ),
                });
                if !self.paused {
                    self.paused = true;
                    self.emit(Change::Paused { global_step: at });
                }
            }
            OnNan::Stop => {
                self.emit(Change::Warning {
                    message: format!(
                        "the loss is not finite at step {at}: stopping; the last good checkpoint is kept"
                    ),
                });
                self.diverged = true;
                self.stop = true;
            }
        }
    }
}
