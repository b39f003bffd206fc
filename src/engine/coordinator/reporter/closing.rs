//! A report window's close and its report. At the close the host's figures are frozen (the
//! window's clock, steps, timings, the loop's lr and position) and the device's are started on
//! their way to the host without waiting (each worker's loss and correct sums, the gradient
//! norms, the loss scale and the steps it skipped: [`LateRead`]). A run on GPUs reports the
//! window when the next one closes, or when the loop flushes it (before an evaluation, a rewind
//! point, a checkpoint, a pause and the summary), so a report never drains the device; a CPU
//! run reports at once. The rule is the
//! run's, never an event's readiness: every rank reports the same windows at the same points,
//! as its sums over the ranks need.

use super::{Reporter, Straggler};
use crate::device::gpu_wait::Waiting;
use crate::device::late_read::LateRead;
use crate::dist::World;
use crate::engine::tally::Window;
use crate::engine::worker::WindowSums;
use crate::engine::EngineError;
use crate::record::StepStats;

/// The end of a report window as the loop knows it.
pub(in crate::engine::coordinator) struct WindowEnd<'a> {
    /// 1-based epoch, steps of it done, steps per epoch.
    pub(in crate::engine::coordinator) at: (usize, usize, usize),
    pub(in crate::engine::coordinator) global_step: usize,
    pub(in crate::engine::coordinator) lr: f64,
    /// With loss scaling, `[scale, steps skipped over the window]` on the device (see
    /// `Update::scaler_figures`).
    pub(in crate::engine::coordinator) scaler: Option<tch::Tensor>,
    /// The loader's queue depth and decode threads.
    pub(in crate::engine::coordinator) loader: (usize, usize),
    /// The other processes, whose figures the window's are summed with.
    pub(in crate::engine::coordinator) world: Option<&'a World>,
}

/// A window's step record and the replicas newly slower than the others.
pub(in crate::engine::coordinator) type Report = (StepStats, Vec<Straggler>);

/// A window closed and not yet reported.
pub(in crate::engine::coordinator) struct Closed {
    /// Its clock stopped at the close.
    window: Window,
    at: (usize, usize, usize),
    global_step: usize,
    lr: f64,
    /// With loss scaling, `[scale, steps skipped over the window]`.
    scaler: Option<LateRead>,
    loader: (usize, usize),
    cuda_syncs: Option<f64>,
    sums: Vec<WindowSums>,
    /// The gradient norms summed over the window's steps that took one, and their count.
    norms: Option<LateRead>,
}

impl Reporter {
    /// Closes the report window with the workers' `sums` over it. Returns the report due now:
    /// this window's, or with [`Reporter::reporting_later`] the one closed before (`None`
    /// for the first). `waiting` bounds a read of device figures.
    pub(in crate::engine::coordinator) fn close_window(
        &mut self,
        end: &WindowEnd,
        sums: Vec<WindowSums>,
        waiting: &Waiting,
    ) -> Result<Option<Report>, EngineError> {
        let earlier = if self.later { self.flush(end.world, waiting)? } else { None };
        let mut window = std::mem::replace(&mut self.window, Window::new(self.replicas));
        window.close();
        let closed = Closed {
            cuda_syncs: self.syncs.as_mut().and_then(|t| t.per_step(window.steps)),
            window,
            at: end.at,
            global_step: end.global_step,
            lr: end.lr,
            scaler: end.scaler.as_ref().map(LateRead::start).transpose()?,
            loader: end.loader,
            sums,
            norms: self.grad_norms.take().map(|n| LateRead::start(&n)).transpose()?,
        };
        if self.later {
            self.closed = Some(closed);
            return Ok(earlier);
        }
        self.report(closed, end.world, waiting).map(Some)
    }

    /// The report of the window closed and not reported yet, if there is one.
    pub(in crate::engine::coordinator) fn flush(
        &mut self,
        world: Option<&World>,
        waiting: &Waiting,
    ) -> Result<Option<Report>, EngineError> {
        match self.closed.take() {
            Some(closed) => self.report(closed, world, waiting).map(Some),
            None => Ok(None),
        }
    }

    /// Reads a closed window's device figures and makes its report: figures summed over the
    /// ranks, the step record, the replicas newly slower than the others; the epoch counts it.
    fn report(&mut self, closed: Closed, world: Option<&World>, waiting: &Waiting) -> Result<Report, EngineError> {
        let Closed { mut window, at, global_step, lr, scaler, loader, cuda_syncs, sums, norms } = closed;
        for s in sums {
            window.add(s.read(waiting)?);
        }
        if let Some(world) = world {
            window.sum_over_ranks(world)?;
        }
        let loss_scale = match scaler {
            Some(figures) => {
                let [scale, skipped] = figures.read_exactly(waiting)?;
                // Every rank skips the same steps: the count on this rank's device is the run's.
                window.skipped = skipped as usize;
                Some(scale)
            }
            None => None,
        };
        let w = window;
        let (epoch, step, steps_per_epoch) = at;
        let mut stats = w.stats(epoch, step, steps_per_epoch, global_step, lr);
        stats.loader = w.loader.stats(loader.0, loader.1);
        if let Some(norms) = norms {
            // Every rank reduced the same gradients: the norm is already global.
            let [sum, counted] = norms.read_exactly(waiting)?;
            stats.grad_norm = Some(sum / counted.max(1.0));
        }
        (stats.model_flops, stats.mfu) = self.rates.model_flops(stats.samples_per_sec);
        stats.cuda_syncs = cuda_syncs;
        if let Some(scale) = loss_scale {
            stats.loss_scale = Some(scale);
            stats.skipped_steps = Some(w.skipped);
        }
        let compute: Vec<f64> = stats.replicas.iter().map(|r| r.compute).collect();
        let stragglers = if w.timed > 0 { self.stragglers.new_ones(&compute) } else { Vec::new() };
        self.epoch.add(w.tally);
        self.last_loss = Some(stats.loss);
        Ok((stats, stragglers))
    }
}
