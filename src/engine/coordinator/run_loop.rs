//! The training loop proper, where the coordinator's parts meet: epochs of steps from a
//! position of the data until the run ends or a rewind sends it back; one step as typed
//! hand-offs from part to part (the step plan's assignments → the pool's replies gathered while
//! the exchange sums buckets → the reduced gradients → the update applied → the reporter's
//! count); the report windows (made in `windows.rs`), the evaluations, the rewind points and
//! periodic checkpoints taken at step boundaries, the best kept at epoch ends. The parts return the records their
//! work causes; only this loop and the controls emit them.

use std::sync::Arc;
use std::time::Instant;

use super::rewind::Plan;
use super::{Coordinator, Held, SLOW_WORK_FACTOR};
use crate::engine::config::TrainConfig;
use crate::engine::evaluation::Evaluation;
use crate::engine::worker::{FromWorker, ToWorker};
use crate::engine::EngineError;
use crate::input::shard::{epoch_order, replica_rows, shards, step_rows};
use crate::record::{Change, FinishReason, Record};
use dpt_sys::c10d::ReduceOp;

/// How a run of the loop ended.
pub(super) enum Leg {
    /// The run is over, for `reason`, the data at `position` (what would train next).
    Ended { reason: FinishReason, position: (usize, usize) },
    /// Go back to a rewind point; `now` is what would have trained next.
    Rewind { plan: Plan, now: (usize, usize) },
}

/// Whether a run of `cfg` has done all it was asked to with the data at `position` after
/// `global_step` steps: its steps (a run measured in steps, which a skip may carry past its
/// planned periods), else its epochs.
fn finished(cfg: &TrainConfig, global_step: usize, position: (usize, usize)) -> bool {
    match cfg.settings.recipe.steps {
        Some(n) => global_step >= n,
        None => position.0 >= cfg.settings.recipe.epochs,
    }
}

/// The records saying each streamed image that did not decode and was left out.
fn bad_images(bad: Vec<String>) -> impl Iterator<Item = Change> {
    bad.into_iter()
        .map(|b| Change::Warning { message: format!("skipped an image that does not decode: {b}") })
}

impl Coordinator {
    /// Trains from `start` (0-based epoch and step of the data), the epoch's figures so far
    /// `partial`.
    pub(super) fn epochs_from(
        &mut self,
        start: (usize, usize),
        partial: Option<dpt_core::tally::Tally>,
    ) -> Result<Leg, EngineError> {
        let steps_per_epoch = self.cfg.steps_per_epoch(self.facts.train_len);
        let (batch, seed) = (self.cfg.settings.recipe.batch_size, self.cfg.settings.recipe.seed);
        let mut position = start;
        let mut epoch = start.0;
        while !finished(&self.cfg, self.steps.global_step(), (epoch, 0)) {
            let order = Arc::new(epoch_order(seed, epoch, self.facts.train_len));
            let first = if epoch == start.0 { start.1 } else { 0 };
            let (offset, total) = self.exchange.span();
            let rows = (batch, self.facts.train_len);
            self.pool.broadcast(|i| ToWorker::Epoch {
                order: Arc::clone(&order),
                epoch,
                steps: replica_rows(first, steps_per_epoch, rows, (offset + i, total)),
            })?;
            self.report.begin_epoch(if epoch == start.0 { partial } else { None });
            for step in first..steps_per_epoch {
                position = (epoch, step);
                self.persist.asked().at(position);
                self.poll_controls(position)?;
                if let Some(plan) = self.points.take_pending() {
                    self.flush_report()?;
                    return Ok(Leg::Rewind { plan, now: position });
                }
                if let Some(reason) = self.gate.flow().stopping() {
                    return Ok(Leg::Ended { reason, position });
                }
                if self.cfg.settings.placement.max_steps.is_some_and(|m| self.steps.global_step() >= m) {
                    return Ok(Leg::Ended { reason: FinishReason::StepLimit, position });
                }
                if self.points.due() {
                    self.flush_report()?;
                    self.take_point(position)?;
                }
                let (start, len) = step_rows(step, batch, self.facts.train_len);
                let closes = self.closes_window(step + 1, steps_per_epoch, self.steps.global_step() + 1);
                self.train_step(start, len, closes)?;
                let run_done = self.cfg.settings.recipe.steps.is_some_and(|n| self.steps.global_step() >= n);
                let last = step + 1 == steps_per_epoch || run_done;
                if last || (step + 1) % self.cfg.settings.placement.log_every == 0 {
                    self.report(epoch + 1, step + 1, steps_per_epoch)?;
                }
                let written = self.persist.note_written(false);
                self.channels.say(written);
                self.checkpoint_if_due(
                    None,
                    ((step + 1) / steps_per_epoch + epoch, (step + 1) % steps_per_epoch),
                )?;
                if run_done {
                    // A run measured in steps: its last evaluation period may be shorter.
                    break;
                }
            }
            self.end_epoch(epoch)?;
            position = (epoch + 1, 0);
            self.checkpoint_if_due(Some(epoch + 1), position)?;
            if self.gate.flow().early_stopped() {
                return Ok(Leg::Ended { reason: FinishReason::EarlyStopped, position });
            }
            epoch += 1;
        }
        Ok(Leg::Ended { reason: FinishReason::Completed, position })
    }

    /// Trains on rows `start..start + len` of the epoch order, split over the replicas;
    /// `closes`: the step ends a report window (its gradient norm is then taken).
    pub(super) fn train_step(&mut self, start: usize, len: usize, closes: bool) -> Result<(), EngineError> {
        let global_step = self.steps.global_step();
        let timed = self.steps.timed(self.cfg.has_gpu());
        let assignments = self.steps.assignments(
            self.cfg.settings.recipe.seed,
            (start, len),
            self.exchange.span(),
            self.cfg.devices.len(),
        );
        let factors = self.update.loss_factors(len);
        let graphs: Vec<_> = assignments.iter().enumerate().map(|(i, a)| self.graphs.next(i, a.len)).collect();
        self.pool.broadcast(|i| ToWorker::Step {
            start: assignments[i].start,
            len: assignments[i].len,
            global_step,
            dropout_seed: assignments[i].dropout_seed,
            timed,
            loss_factor: factors[i].shallow_clone(),
            graph: graphs[i],
        })?;
        // With buckets, their reduction starts while the backward passes run.
        let gathered = self.exchange.gather_step(&self.pool, self.update.replicas(), timed)?;
        for reply in &gathered.replies {
            if let FromWorker::StepDone { replica, uncaptured: Some(why), .. } = reply {
                let device = self.cfg.devices[*replica].to_string();
                self.channels.emit(self.graphs.failed(*replica, &device, why));
            }
        }
        let could_overlap = (gathered.early, gathered.buckets);
        let bad = self.report.take_replies(gathered.replies);
        self.channels.say(bad_images(bad));
        self.report.begin_phases(timed, global_step)?;
        // Only the trainable parameters' gradients travel (a frozen backbone's are zero). With
        // buckets, this phase is what the backward passes did not hide.
        let reduced = self.exchange.finish_reduce(self.update.replicas())?;
        if let Some(o) = self.exchange.overlap(could_overlap)? {
            self.report.add_overlap(o);
        }
        self.report.end_phase()?;
        let lr = self.steps.step_lr();
        let applied = self.update.step(&reduced.holders, (lr, global_step), closes, self.exchange.world())?;
        if let Some(norm) = &applied.grad_norm {
            self.report.add_grad_norm(norm);
        }
        if let Some(why) = applied.uncaptured {
            let message = format!("the update could not be captured as a CUDA graph and runs eagerly: {why}");
            self.channels.emit(Change::Warning { message });
        }
        self.report.end_phase()?;
        self.report.end_step(self.exchange.span().0, global_step)?;
        self.steps.advance();
        let rebucketed = self.exchange.replan_buckets(self.steps.global_step())?;
        self.channels.say(rebucketed);
        self.update.check_replicas(self.steps.global_step())
    }

    /// The evaluated split's figures (the validation split when there is one and `final_test`
    /// is false; else the test set), split over the replicas.
    pub(super) fn evaluate(&mut self, final_test: bool) -> Result<Evaluation, EngineError> {
        let (offset, replicas) = self.exchange.span();
        let val = self.facts.val_len.is_some() && !final_test;
        let len = if val { self.facts.val_len.unwrap_or(0) } else { self.facts.test_len };
        let parts = shards(len, replicas);
        self.pool.broadcast(|i| ToWorker::Evaluate {
            start: parts[offset + i].0,
            len: parts[offset + i].1,
            val,
        })?;
        let mut total = Evaluation::new(self.facts.classes);
        for reply in self.pool.gather(self.cfg.step_timeout() * SLOW_WORK_FACTOR)? {
            if let FromWorker::Evaluated { sums, top5, confusion, bad, .. } = reply {
                self.channels.say(bad_images(bad));
                total.add(sums, top5, &confusion);
            }
        }
        if let Some(w) = self.exchange.world() {
            let t = &mut total.sums;
            let mut v = vec![t.loss, t.correct, t.samples, total.top5];
            v.extend_from_slice(&total.confusion);
            w.allreduce_values(&mut v, ReduceOp::Sum)?;
            [t.loss, t.correct, t.samples, total.top5] = [v[0], v[1], v[2], v[3]];
            total.confusion.copy_from_slice(&v[4..]);
        }
        Ok(total)
    }

    /// Ends epoch `epoch` (0-based): its evaluation (and the moving average's), its record, a
    /// language model's sample, the best kept and the early stop.
    fn end_epoch(&mut self, epoch: usize) -> Result<(), EngineError> {
        self.flush_report()?;
        let train = self.report.epoch_so_far();
        let eval_start = Instant::now();
        let evaluation = self.evaluate(false)?;
        let ema = match self.update.swap_in_ema()? {
            Some(own) => {
                let result = self.evaluate(false);
                self.update.put_back(own);
                Some(result?.sums)
            }
            None => None,
        };
        let at = (epoch, self.steps.lr(), eval_start.elapsed().as_secs_f64());
        let stats = self.report.end_epoch(at, train, (&evaluation, ema), self.facts.classes);
        self.channels.emit(Record::Epoch(Box::new(stats)));
        let seed = self.cfg.settings.recipe.seed;
        let sampling = super::sample::Sampling {
            count: self.cfg.settings.recipe.sample_tokens,
            leads: self.exchange.leads(),
            seed: dpt_core::seed::mix_seed(seed, self.steps.global_step() as u64) as i64,
            timeout: self.cfg.step_timeout() * SLOW_WORK_FACTOR,
        };
        let sample = super::sample::sample_text(&self.pool, self.facts.sample_prompt.as_ref(), &sampling)?;
        self.channels.say(sample.map(|(prompt, text)| Change::Sampled {
            global_step: self.steps.global_step(),
            prompt,
            text,
        }));
        // Kept among the best: weights and a checkpoint in `best/epoch-E/`, judged by the
        // evaluation's loss or accuracy.
        let (loss, acc) = (evaluation.sums.mean_loss(), evaluation.sums.accuracy());
        let judged = self.persist.judge(epoch + 1, loss, acc);
        // Every rank judges the same evaluation alike: where the state is split over the ranks,
        // all gather the checkpoint of one kept and the rank that saves keeps it.
        let kept = match judged.keep() {
            true => self
                .snapshot_for(self.persist.save_dir().is_some(), (epoch + 1, 0), Held::Views)?
                .map(|c| (self.update.replicas().named_views(), c)),
            false => None,
        };
        let said = self.persist.keep_best(&judged, kept.as_ref().map(|(w, c)| (w.as_slice(), c)));
        self.channels.say(said);
        if judged.stop() {
            self.gate.end(FinishReason::EarlyStopped);
        }
        Ok(())
    }

    /// Takes a rewind point at the boundary before `position`: the checkpoint's tensors landed
    /// on the host without waiting ([`super::snapshot::InFlight`]), kept and said once they
    /// have arrived and the weights were finite ([`Coordinator::settle_point`]). A point still
    /// on its way is settled first.
    fn take_point(&mut self, position: (usize, usize)) -> Result<(), EngineError> {
        self.settle_point(true);
        let Some(point) = self.land_for(true, position)? else { return Ok(()) };
        let said = Change::Snapshot {
            global_step: self.steps.global_step(),
            epoch: position.0,
            step: position.1,
            loss: self.report.last_loss(),
            lr: self.steps.lr(),
            unix: crate::unix_now(),
        };
        self.points.landing(point, said);
        self.settle_point(false);
        Ok(())
    }

    /// Keeps the rewind point on its way to the host once it has arrived (`wait`: waits for
    /// it, within the step timeout), saying it or why none was kept.
    pub(super) fn settle_point(&mut self, wait: bool) {
        // Nothing on its way (most boundaries): nothing to build a wait for.
        if !self.points.in_flight() {
            return;
        }
        let waiting = self.update.waiting("a rewind point's copy to the host");
        let model = (self.cfg.settings.model_kind(), self.cfg.kit.script.as_deref());
        let said = self.points.settle(wait.then_some(&waiting), model);
        self.channels.say(said);
    }

    /// The periodic checkpoint, if one is due after the step that made the global step count
    /// (`epoch_end`: the 1-based epoch that step ended), continuing at `position`: copied to
    /// the host here and written by the checkpoint thread; a failure is a warning (the previous
    /// checkpoint is intact). Where the optimizer state is split over the ranks, every rank
    /// decides alike (a clock's decision is rank 0's, sent to all) and all gather the
    /// checkpoint together.
    fn checkpoint_if_due(
        &mut self,
        epoch_end: Option<usize>,
        position: (usize, usize),
    ) -> Result<(), EngineError> {
        // A step-or-time checkpoint due on an epoch's last step waits for its evaluation.
        let last_of_epoch = epoch_end.is_none() && position.1 == 0;
        if last_of_epoch || finished(&self.cfg, self.steps.global_step(), position) {
            return Ok(());
        }
        let global_step = self.steps.global_step();
        let due = match self.exchange.world().filter(|_| self.split()) {
            // Every rank takes part: steps and epochs say the same on each, a clock is rank 0's.
            Some(w) if self.persist.cadence_by_clock() => {
                let mut decided =
                    [if self.persist.checkpoint_due(global_step, epoch_end) { 1.0 } else { 0.0 }];
                w.broadcast_values(&mut decided)?;
                decided[0] > 0.0
            }
            Some(_) => self.persist.cadence_due(global_step, epoch_end),
            None => self.persist.checkpoint_due(global_step, epoch_end),
        };
        if !due {
            return Ok(());
        }
        self.flush_report()?;
        let keep = self.persist.save_dir().is_some();
        // Landed without waiting, and written by the checkpoint thread once it has arrived
        // (not at all where the weights were not finite, which it says).
        let said = match self.land_for(keep, position)? {
            Some(checkpoint) => {
                let waiting = self.update.waiting("a checkpoint's copy to the host");
                self.persist.submit(checkpoint, waiting)
            }
            None => Vec::new(),
        };
        self.channels.say(said);
        Ok(())
    }
}
