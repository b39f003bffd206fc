//! The coordinator thread: runs the epochs, one step at a time (`step.rs`: dispatch, gather,
//! reduce, update), applies controls and the NaN policy at step boundaries (`controls.rs`),
//! evaluates at epoch ends, writes weights and checkpoints (`persist.rs`) and reports
//! everything as records. The threads it drives are the [`WorkerPool`] (`pool.rs`); the
//! tensors it updates are the [`Replicas`] (`replicas.rs`), each with its optimizer state.

mod controls;
mod failure;
mod flow;
mod overlap;
mod persist;
mod persistence;
pub mod pool;
mod reduce;
pub mod replicas;
mod reporter;
mod rewind;
pub use rewind::{check_point_memory, point_bytes};
mod run_info;
mod run_loop;
pub mod sample;
mod step;
mod step_plan;
mod timed;
mod update;
mod writer;

use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};

use crate::engine::config::TrainConfig;
use crate::engine::events::Control;
use crate::engine::tally::Tally;
use crate::engine::{EngineError, Outcome};
use crate::record::{Change, EpochStats, FinishReason, Record, Summary};
pub use persist::WEIGHTS_FILE;
pub use pool::WorkerPool;
pub use replicas::{ModelLayout, Replicas};

/// Work slower than a training step (start-up, evaluation) gets this many step timeouts.
const SLOW_WORK_FACTOR: u32 = 10;

/// What the coordinator is built from.
pub struct CoordinatorParts {
    pub cfg: TrainConfig,
    /// The other processes of a multi-process run.
    pub world: Option<Box<crate::dist::World>>,
    pub facts: RunFacts,
    pub layout: ModelLayout,
    pub events: Sender<Record>,
    pub controls: Receiver<Control>,
    pub pool: WorkerPool,
}

/// What the run trains on and starts from, as its records tell it.
pub struct RunFacts {
    pub train_len: usize,
    pub test_len: usize,
    /// The validation split's samples (`--val-fraction`), evaluated every epoch.
    pub val_len: Option<usize>,
    /// The test split is the data set's own `val/` folder.
    pub test_is_val: bool,
    /// What the data set is (`CIFAR-10 binary batches in DIR, 3x32x32, 10 classes`).
    pub data: String,
    /// Classes an evaluation counts (rows and columns of its confusion counts).
    pub classes: usize,
    /// What `--init-from` loaded, said once the run starts.
    pub init_report: Option<Change>,
    /// A language model on text: the prompt each evaluation's sample continues, and the
    /// tokens the model sees at once.
    pub sample_prompt: Option<sample::Prompt>,
    /// Host memory the rewind points take when all are kept.
    pub snapshot_bytes: Option<u64>,
    /// The allreduce bus bandwidth doctor measured across this run's GPUs.
    pub bus_bandwidth: Option<crate::record::bottleneck::MeasuredBus>,
    /// What the run's GPUs can do at most in its precision, for the MFU.
    pub peak_flops: Option<crate::flops::PeakFlops>,
    /// What the products compute in, in words (`Math::describe`).
    pub math: String,
    /// `DPT_SYNC_DEBUG` warns of and counts the GPUs' synchronizing calls.
    pub sync_debug: bool,
}

/// The coordinator's channels: records out, controls in.
struct Channels {
    events: Sender<Record>,
    controls: Receiver<Control>,
}

/// The coordinator: a few parts, each owning one concern of the loop.
pub struct Coordinator {
    cfg: TrainConfig,
    facts: RunFacts,
    channels: Channels,
    pool: WorkerPool,
    /// How gradients are summed here and across processes.
    exchange: reduce::Exchange,
    /// The replicas' tensors, the loss scaler and which replica is being touched.
    update: update::Update,
    /// The step count and the learning rate's plan.
    steps: step_plan::StepPlan,
    /// Report windows, epochs done, stragglers, the phase clock.
    report: reporter::Reporter,
    /// Where and when weights and checkpoints are written, and the best kept.
    persist: persistence::Persistence,
    flow: flow::Flow,
    /// The viewers' rewind dialogs holding the loop at a step boundary.
    holds: flow::Holds,
    /// The rewind points kept and what the next boundary does with them.
    points: rewind::Points,
    /// The (epoch, step) of the data that trains next (a save asked for between steps writes
    /// it into the checkpoint).
    data_at: (usize, usize),
}

impl Coordinator {
    pub fn new(p: CoordinatorParts) -> Self {
        let total = p.world.as_ref().map_or(p.cfg.devices.len(), |w| w.total_replicas());
        let b = &p.cfg.settings.best;
        Coordinator {
            steps: step_plan::StepPlan::new(p.cfg.lr_plan(p.facts.train_len)),
            update: update::Update::new(Replicas::new(p.layout)),
            report: reporter::Reporter::new(total, p.cfg.devices.len(), p.facts.peak_flops.clone())
                .counting_syncs(p.facts.sync_debug),
            persist: persistence::Persistence {
                save_dir: p.cfg.run_dir.clone(),
                writer: None,
                last_checkpoint: std::time::Instant::now(),
                // A run without classes has its loss to judge by, not an accuracy.
                best: crate::engine::best::BestKeeper::new(
                    if p.facts.classes > 0 { b.metric } else { crate::engine::best::BestMetric::ValLoss },
                    b.keep,
                    b.early_stop,
                ),
            },
            exchange: reduce::Exchange { world: p.world, reduction: reduce::Reduction::plan(&p.cfg.devices) },
            flow: flow::Flow::default(),
            holds: flow::Holds::default(),
            points: rewind::Points::default(),
            data_at: (0, 0),
            channels: Channels { events: p.events, controls: p.controls },
            cfg: p.cfg,
            facts: p.facts,
            pool: p.pool,
        }
    }

    fn cfg(&self) -> &TrainConfig {
        &self.cfg
    }

    /// Runs the whole training, then shuts the workers down whatever happened. A panic here
    /// (a libtorch error, often a CUDA fault that a worker's kernel caused and the coordinator's
    /// next operation on that device reports) is caught and names the device.
    pub fn run(mut self) -> Result<Outcome, EngineError> {
        // The update runs on one intra-op thread: the cores are the CPU replicas' (device::intra_op).
        crate::device::intra_op::keep_to_one_thread();
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.set_device().and_then(|()| self.wait_ready()).and_then(|()| {
                // Every replica has set its own count; threads started from now on take one.
                crate::device::intra_op::keep_to_one_thread();
                self.train()
            })
        }));
        let result = caught
            .unwrap_or_else(|panic| Err(self.panic_error(panic.as_ref())))
            .map_err(|e| self.explain_oom(e));
        if let Err(e) = &result {
            let (replica, device) = match e {
                EngineError::Worker { replica, device, .. } => (Some(*replica), Some(device.clone())),
                EngineError::Coordinator { replica, device, .. } => (*replica, device.clone()),
                EngineError::Stalled { replicas, .. } => {
                    (replicas.first().copied(), replicas.first().map(|&r| self.cfg().devices[r].to_string()))
                }
                _ => (None, None),
            };
            self.emit(Change::Failed { replica, device, message: crate::error_chain(e) });
        }
        self.pool.shutdown();
        result
    }

    fn emit(&mut self, record: impl Into<Record>) {
        // A consumer that has gone away must not stop training.
        let _ = self.channels.events.send(record.into());
    }

    fn train(&mut self) -> Result<Outcome, EngineError> {
        let restored = self.cfg.kit.resume.as_ref().map(|r| (r.state.clone(), r.then));
        if let Some((s, _)) = &restored {
            self.take_counters(s);
        }
        let info = self.run_info(self.cfg().steps_per_epoch(self.facts.train_len));
        self.emit(Record::Start(Box::new(info)));
        if let Some(report) = self.facts.init_report.take() {
            self.emit(report);
        }
        let mut start = ((0, 0), Tally::default());
        if let Some((s, then)) = restored {
            self.emit(Change::Restored { epoch: s.epoch, step: s.step, global_step: s.global_step });
            start = self.go_on(&s, then);
        }
        let (mut reason, position) = loop {
            match self.epochs_from(start.0, start.1)? {
                run_loop::Leg::Ended { reason, position } => break (reason, position),
                run_loop::Leg::Rewind { plan, now } => start = self.rewind(plan, now)?,
            }
        };
        let steps_per_epoch = self.cfg().steps_per_epoch(self.facts.train_len);
        if self.flow.diverged() {
            // A loss found non-finite at the very last report ends the loop as if completed.
            reason = FinishReason::Diverged;
        }
        if reason != FinishReason::Completed && self.report.window.steps > 0 {
            // Statistics of the partial window, so the curves and the checkpoint include them.
            self.report(position.0 + 1, position.1, steps_per_epoch)?;
        }
        // The periodic write in flight ends before the final save writes over it.
        self.note_written(true);
        if !self.flow.diverged() {
            self.final_save(position)?;
        }
        let mut val_acc = None;
        if self.facts.val_len.is_some() && !self.flow.diverged() && self.report.done.epochs > 0 {
            // The test set, kept out of every choice, is evaluated once, at the end.
            let test = self.evaluate(true)?;
            val_acc = self.report.done.last_test_acc.replace(test.sums.accuracy());
            self.emit(Change::Tested {
                loss: test.sums.mean_loss(),
                acc: test.sums.accuracy(),
                top5_acc: test.top5_acc(),
                samples: test.sums.samples as usize,
            });
        }
        let mut summary = self.summary(reason, position);
        summary.val_acc = val_acc;
        self.emit(Record::Summary(Box::new(summary.clone())));
        Ok(Outcome { summary, final_params: self.update.replicas.named_cpu() })
    }

    fn summary(&self, reason: FinishReason, position: (usize, usize)) -> Summary {
        let mut all = self.report.done.tally;
        // A partial epoch counts for throughput.
        if position.1 > 0 {
            all.add(self.report.epoch.now());
        }
        let (flops_per_sample, peak_flops) = self.report.flops_facts();
        let (model_flops, mfu) = self.report.model_flops(all.throughput());
        Summary {
            val_acc: None,
            model: self.cfg().model(),
            devices: self.cfg().devices.clone(),
            test_acc: self.report.done.last_test_acc,
            sec_per_epoch: (self.report.done.epochs > 0)
                .then(|| self.report.done.tally.seconds / self.report.done.epochs as f64),
            samples_per_sec: all.throughput(),
            epochs_done: self.report.done.epochs,
            global_steps: self.steps.global_step,
            reason,
            peak_rss_mib: crate::sys::peak_resident_bytes().map(|b| b as f64 / f64::from(1 << 20)),
            val_loss: self.report.done.last_test_loss.filter(|_| self.facts.classes == 0),
            perplexity: self
                .report
                .done
                .last_test_loss
                .filter(|_| self.facts.classes == 0 && self.cfg().settings.data.block_size.is_some())
                .map(f64::exp),
            tokens_per_sec: match (self.cfg().settings.recipe.steps, self.cfg().settings.data.block_size) {
                (Some(_), Some(t)) => Some(all.throughput() * t as f64),
                _ => None,
            },
            bottleneck: None,
            flops_per_sample,
            model_flops,
            mfu,
            peak_flops,
            peak_device_mib: crate::device::peak::device_peak_mib(&self.cfg().devices),
        }
    }

    fn end_epoch(&mut self, epoch: usize) -> Result<(), EngineError> {
        let train = self.report.epoch.now();
        let eval_start = Instant::now();
        let evaluation = self.evaluate(false)?;
        let test = evaluation.sums;
        let ema = match self.update.replicas.swap_in_ema() {
            Some(own) => {
                let result = self.evaluate(false);
                self.update.replicas.put_back(own);
                Some(result?.sums)
            }
            None => None,
        };
        let stats = EpochStats {
            epoch: epoch + 1,
            train_loss: train.mean_loss(),
            train_acc: train.accuracy(),
            test_loss: test.mean_loss(),
            test_acc: test.accuracy(),
            epoch_seconds: train.seconds,
            eval_seconds: eval_start.elapsed().as_secs_f64(),
            samples_per_sec: train.throughput(),
            lr: self.steps.lr,
            ema_test_acc: ema.map(|t| t.accuracy()),
            ema_test_loss: ema.map(|t| t.mean_loss()),
            top5_acc: evaluation.top5_acc(),
            per_class_acc: (evaluation.classes > 0).then(|| evaluation.per_class_acc()),
            // Rows of columns: at most 100 classes, so a line of the record stays small.
            confusion: (evaluation.classes > 0
                && evaluation.classes <= crate::record::stats::CONFUSION_MAX_CLASSES)
                .then(|| evaluation.matrix()),
        };
        // A run without classes has no accuracy to report (its records carry the loss).
        self.report.done.last_test_acc = (self.facts.classes > 0).then_some(stats.test_acc);
        self.report.done.last_test_loss = Some(stats.test_loss);
        self.report.done.epochs += 1;
        self.report.done.tally.add(train);
        self.emit(Record::Epoch(Box::new(stats)));
        self.sample_text()?;
        self.choose_best(epoch + 1, test.mean_loss(), test.accuracy());
        Ok(())
    }
}
