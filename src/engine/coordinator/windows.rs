//! The loop's report windows: which step ends one, closing it with the workers' figures (on
//! their way to the host without a wait), the report due (this window's, or on GPUs the one
//! before: `reporter/closing.rs`), the flush where the loop needs the figures, and the records
//! a report makes.

use super::reporter::WindowEnd;
use super::Coordinator;
use crate::engine::worker::{FromWorker, ToWorker};
use crate::engine::EngineError;
use crate::record::{Change, Record};

impl Coordinator {
    /// Whether the step that makes `done` steps of the epoch (of `steps_per_epoch`) and
    /// `global` in the run ends a report window: the `--log-every`th, the epoch's last, the
    /// run's last by its step count or its step limit. (A stop ends a window anywhere.)
    pub(super) fn closes_window(&self, done: usize, steps_per_epoch: usize, global: usize) -> bool {
        let s = &self.cfg.settings;
        done == steps_per_epoch
            || done % s.placement.log_every == 0
            || s.recipe.steps.is_some_and(|n| global >= n)
            || s.placement.max_steps.is_some_and(|m| global >= m)
    }

    /// Closes the report window with the workers' figures (started on their way to the host
    /// without a wait) and makes the report due: this window's, or on GPUs the one before
    /// (see `reporter/closing.rs`).
    pub(super) fn report(
        &mut self,
        epoch: usize,
        step: usize,
        steps_per_epoch: usize,
    ) -> Result<(), EngineError> {
        self.pool.broadcast(|_| ToWorker::Report)?;
        let mut sums = Vec::new();
        for reply in self.pool.gather(self.cfg.step_timeout())? {
            if let FromWorker::Sums { sums: s, .. } = reply {
                sums.push(s);
            }
        }
        let global_step = self.steps.global_step();
        let end = WindowEnd {
            at: (epoch, step, steps_per_epoch),
            global_step,
            lr: self.steps.lr(),
            scaler: self.update.scaler_figures(),
            loader: (self.cfg.loader.prefetch, self.cfg.loader.decode_threads),
            world: self.exchange.world(),
        };
        let due = self.report.close_window(&end, sums, &self.report_wait())?;
        if let Some(w) = self.exchange.world() {
            w.mark_progress(global_step);
        }
        self.emit_report(due);
        Ok(())
    }

    /// Reports the window closed and not reported yet, if any: before anything that reads the
    /// epoch's figures or the last loss (an evaluation, a rewind point, a checkpoint), a pause
    /// and the summary.
    pub(super) fn flush_report(&mut self) -> Result<(), EngineError> {
        let due = self.report.flush(self.exchange.world(), &self.report_wait())?;
        self.emit_report(due);
        Ok(())
    }

    /// What reading a window's device figures waits for, with the step timeout.
    fn report_wait(&self) -> crate::device::gpu_wait::Waiting {
        let device = self.cfg.devices.first().copied().unwrap_or(dpt_core::device::DeviceId::Cpu);
        crate::engine::clock::waiting("the report window's figures", device, self.cfg.step_timeout())
    }

    /// A window's report as records: the stragglers newly found, the step record, and the NaN
    /// policy on a loss not finite.
    fn emit_report(&mut self, due: Option<super::reporter::Report>) {
        let Some((stats, stragglers)) = due else { return };
        let global_step = stats.global_step;
        for s in stragglers {
            let device = self.exchange.replica_device(s.replica);
            let (replica, step_ms, median_ms) = (s.replica, s.step_ms, s.median_ms);
            self.channels.emit(Change::Straggler { replica, device, step_ms, median_ms, global_step });
        }
        let finite = stats.loss.is_finite();
        self.channels.emit(Record::Step(Box::new(stats)));
        if !finite {
            let said = self.gate.not_finite(self.cfg.on_nan, global_step);
            self.channels.say(said);
        }
    }
}

/// Whether the run reports each window a window later, reading its device figures without a
/// drain: on GPUs, or with the `late-report` test fault on any device. The rule is the same on
/// every rank (NCCL ranks are all on GPUs), since each report sums its figures over the ranks.
pub(super) fn report_later(cfg: &crate::engine::config::TrainConfig, world: Option<&crate::dist::World>) -> bool {
    cfg.kit.faults.late_report
        || match world {
            Some(w) => w.backend == dpt_sys::c10d::Backend::Nccl,
            None => cfg.has_gpu(),
        }
}
