//! The coordinator thread. Its parts each own one concern and their state: the [`WorkerPool`]
//! (`pool.rs`) drives the replicas' threads, the exchange (`reduce.rs`) sums their gradients,
//! the update (`update.rs`) owns the replicas' tensors (`replicas.rs`) and applies the
//! optimizer, the step plan (`step_plan.rs`) the step count and lr, the reporter
//! (`reporter.rs`) the figures and records, persistence (`persist.rs`) what is written where,
//! the rewind points (`rewind.rs`) and the gate (`flow.rs`) where the loop stands. They meet
//! only here: the loop (`run_loop.rs`: epochs, one step, reports, evaluations) and the controls
//! between steps (`controls.rs`) hand each part what another produced and emit the records
//! the parts return. A checkpoint is one [`Coordinator::snapshot`] of every part's state, and a
//! resume or a rewind one [`Coordinator::restore`].

mod asked_save;
mod controls;
mod failure;
mod flow;
mod graph_steps;
mod layout;
mod overlap;
mod persist;
pub mod pool;
mod reduce;
pub mod replicas;
mod reporter;
mod rewind;
pub use rewind::{check_point_memory, point_bytes, points_that_fit};
mod run_info;
pub use run_info::RunFacts;
mod run_loop;
pub mod sample;
mod snapshot;
mod step_plan;
mod timed;
mod update;
mod update_graph;
mod windows;
mod writer;

use crossbeam_channel::{Receiver, Sender};

use crate::engine::config::TrainConfig;
use crate::engine::events::Control;
use crate::engine::{EngineError, Outcome};

use crate::persist::resume::{Continuation, Resume};
use crate::record::{Change, Record};
use dpt_core::tally::Tally;
pub use pool::WorkerPool;
pub use replicas::{Held, ModelLayout, Replicas};

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

/// The coordinator's channels: records out, controls in.
struct Channels {
    events: Sender<Record>,
    controls: Receiver<Control>,
}

impl Channels {
    fn emit(&self, record: impl Into<Record>) {
        // A consumer that has gone away must not stop training.
        let _ = self.events.send(record.into());
    }

    /// Emits the records a part returned, in order.
    fn say(&self, changes: impl IntoIterator<Item = Change>) {
        for c in changes {
            self.emit(c);
        }
    }
}

/// Where the data goes on after a restore, and what the restore changed.
struct Restored {
    /// The (epoch, step) of the data that trains next.
    position: (usize, usize),
    /// The epoch's figures so far (none when the data goes on in a later epoch).
    partial: Option<Tally>,
    /// The lr set by the continuation, said once the run has started.
    lr: Option<Change>,
}

/// The coordinator: its parts, and the loop where they meet.
pub struct Coordinator {
    cfg: TrainConfig,
    facts: RunFacts,
    channels: Channels,
    pool: WorkerPool,
    /// How gradients are summed here and across processes.
    exchange: reduce::Exchange,
    /// The replicas' tensors, their optimizer state and the loss scale.
    update: update::Update,
    /// The step count and the learning rate's plan.
    steps: step_plan::StepPlan,
    /// Report windows, epochs done, stragglers, the phase clock.
    report: reporter::Reporter,
    /// Where and when weights and checkpoints are written, and the best kept.
    persist: persist::Persistence,
    /// Running, paused, held or ending, and the NaN policy.
    gate: flow::Gate,
    /// The rewind points kept and what the next boundary does with them.
    points: rewind::Points,
    /// Which steps each replica runs eagerly, captures or replays.
    graphs: graph_steps::GraphSteps,
}

impl Coordinator {
    pub fn new(p: CoordinatorParts) -> Self {
        let cfg = p.cfg;
        let total = p.world.as_ref().map_or(cfg.devices.len(), |w| w.total_replicas());
        let settings = &cfg.settings;
        let b = &settings.best;
        let first = cfg.devices.first().copied().unwrap_or(dpt_core::device::DeviceId::Cpu);
        let metric = b.metric.judged(p.facts.classes > 0);
        let persist = persist::Persistence::new(
            cfg.run_dir.clone(),
            dpt_core::best::BestKeeper::new(metric, b.keep, b.early_stop),
            persist::PersistSettings {
                every: settings.checkpoints.every,
                keep: settings.checkpoints.keep,
                model: (settings.model_kind(), cfg.kit.script.clone()),
                disk_points: p.world.is_none(),
                write_fault: cfg.kit.faults.checkpoint_write,
            },
        );
        let update = update::UpdateSettings {
            optimizer: settings.optimizer,
            scaling: settings.precision.loss_scaling(),
            clip: settings.recipe.clip_grad_norm,
            ema: settings.recipe.ema,
            check_replicas: settings.placement.check_replicas,
            fence: (first, cfg.step_timeout()),
            fault: cfg.kit.faults.coordinator_panic,
            replicas: (p.world.as_ref().map_or(0, |w| w.replica_offset()), total),
            // One replica in the run whose steps are graphed: its update is too.
            graph: (p.facts.cuda_graphs.is_none() && total == 1)
                .then_some(cfg.kit.faults.graph_stand_in.then_some(cfg.kit.faults.graph_capture_fails == Some(0))),
        };
        Coordinator {
            steps: step_plan::StepPlan::new(cfg.lr_plan(p.facts.train_len)),
            update: update::Update::new(p.layout, update),
            report: reporter::Reporter::new(total, cfg.devices.len(), first, p.facts.peak_flops.clone())
                .counting_syncs(p.facts.sync_debug)
                .reporting_later(windows::report_later(&cfg, p.world.as_deref())),
            persist,
            exchange: reduce::Exchange::new(p.world, &cfg.devices, cfg.step_timeout()),
            gate: flow::Gate::default(),
            points: rewind::Points::new(settings.checkpoints.snapshots, settings.checkpoints.snapshot_every),
            graphs: graph_steps::GraphSteps::new(p.facts.cuda_graphs, cfg.devices.len()),
            channels: Channels { events: p.events, controls: p.controls },
            facts: p.facts,
            pool: p.pool,
            cfg,
        }
    }

    /// Runs the whole training, then shuts the workers down whatever happened. A panic here
    /// (a libtorch error, often a CUDA fault that a worker's kernel caused and the coordinator's
    /// next operation on that device reports) is caught and names the device.
    pub fn run(mut self) -> Result<Outcome, EngineError> {
        // The update runs on one intra-op thread: the cores are the CPU replicas' (device::intra_op).
        crate::device::intra_op::keep_to_one_thread();
        // The coordinator's streams, kept until the workers are shut down.
        let mut streams = Vec::new();
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // c10's warning handler is per thread: the update's syncs are counted too.
            let counted = || dpt_sys::c10d::count_syncs_here().map_err(EngineError::from);
            let entered = failure::enter_devices(&self.cfg).map(|s| streams = s);
            entered.and_then(|()| counted()).and_then(|()| self.wait_ready()).and_then(|()| {
                // Every replica has set its own count; threads started from now on take one.
                crate::device::intra_op::keep_to_one_thread();
                self.train()
            })
        }));
        let result = caught
            .unwrap_or_else(|panic| {
                Err(failure::panic_error(&self.cfg, self.update.touching(), panic.as_ref()))
            })
            .map_err(|e| {
                // The window closed before the failure and not reported yet (a GPU run reports
                // each a window later) is reported now where no other process waits on its
                // sums; a read that fails too says no more than the failure does.
                if self.exchange.world().is_none() {
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.flush_report()));
                }
                // A periodic checkpoint still being written when the run failed is finished
                // first, so that the failure names the last checkpoint on disk.
                let written = self.persist.note_written(true);
                self.channels.say(written);
                let checkpoint = self.persist.checkpoint_file();
                failure::explain_oom(&self.cfg, e, checkpoint, self.exchange.span().1)
            });
        if let Err(e) = &result {
            self.channels.emit(failure::failed(&self.cfg, e));
        }
        self.pool.shutdown();
        drop(streams);
        result
    }

    /// Waits for every replica to be built, and takes its buffers and hooks; sets up what the
    /// steps need before the first one (the phase clock, the update's state, NCCL).
    fn wait_ready(&mut self) -> Result<(), EngineError> {
        for reply in self.pool.gather(self.cfg.step_timeout() * SLOW_WORK_FACTOR)? {
            if let crate::engine::worker::FromWorker::Ready { mut handles, .. } = reply {
                self.exchange.adopt(&mut handles);
                self.update.adopt(*handles);
            }
        }
        self.report.start_clock(self.update.first_device());
        self.update.begin();
        self.exchange.set_up(self.update.replicas(), self.cfg.kit.faults.setup_hang)
    }

    fn train(&mut self) -> Result<Outcome, EngineError> {
        let resumed = self.cfg.kit.resume.as_deref().map(Resume::shallow_clone);
        let mut start = Restored { position: (0, 0), partial: None, lr: None };
        if let Some(r) = &resumed {
            start = self.restore(r, r.then)?;
        }
        let mut memory = self.update.replicas().state_bytes();
        // Under --accumulate every bucket's buffer is held over the step's micro-batches.
        let at_once = match self.cfg.settings.recipe.accumulate {
            0 | 1 => crate::engine::bucket_pool::BUFFERS_PER_REPLICA,
            _ => usize::MAX,
        };
        memory.bucket_buffers = self.exchange.bucket_buffer_bytes(at_once);
        let accounts = run_info::Accounts {
            param_count: self.update.replicas().param_count(),
            memory,
            lr: (self.steps.lr(), self.steps.scale()),
            allreduce: self.exchange.describe(),
            world: self.exchange.world(),
            timing: self.report.timing(),
        };
        let info = run_info::run_info(&self.cfg, &self.facts, accounts);
        self.channels.emit(Record::Start(Box::new(info)));
        for note in std::mem::take(&mut self.facts.start_notes) {
            self.channels.emit(note);
        }
        if let Some(r) = &resumed {
            let s = &r.state;
            self.channels.emit(Change::Restored { epoch: s.epoch, step: s.step, global_step: s.global_step });
        }
        self.channels.say(start.lr.take());
        let (mut reason, position) = loop {
            match self.epochs_from(start.position, start.partial)? {
                run_loop::Leg::Ended { reason, position } => break (reason, position),
                run_loop::Leg::Rewind { plan, now } => start = self.rewind(plan, now)?,
            }
        };
        // The rewind point taken last is said, even where the run ends before the next boundary.
        self.settle_point(true);
        let steps_per_epoch = self.cfg.steps_per_epoch(self.facts.train_len);
        if reason != crate::record::FinishReason::Completed && self.report.window_open() {
            // Statistics of the partial window, so the curves and the checkpoint include them.
            self.report(position.0 + 1, position.1, steps_per_epoch)?;
        }
        self.flush_report()?;
        // A loss found not finite at the very last report (which ends the loop as if
        // completed) or in the partial window's (`--on-nan stop`): the run has diverged.
        let diverged = self.gate.flow().diverged();
        if diverged {
            reason = crate::record::FinishReason::Diverged;
        }
        // The periodic write in flight ends before the final save writes over it.
        let written = self.persist.note_written(true);
        self.channels.say(written);
        if !diverged {
            self.final_save(position)?;
        }
        let mut val_acc = None;
        if self.facts.val_len.is_some() && !diverged && self.report.done().epochs > 0 {
            // The test set, kept out of every choice, is evaluated once, at the end.
            let test = self.evaluate(true)?;
            val_acc = self.report.tested(test.sums.accuracy());
            self.channels.emit(Change::Tested {
                loss: test.sums.mean_loss(),
                acc: test.sums.accuracy(),
                top5_acc: test.top5_acc(),
                samples: test.sums.samples as usize,
            });
        }
        let ended = (reason, position.1 > 0, self.steps.global_step());
        let mut summary = self.report.summary(&self.cfg, ended, self.facts.classes);
        summary.val_acc = val_acc;
        self.channels.emit(Record::Summary(Box::new(summary.clone())));
        Ok(Outcome { summary, final_params: self.update.replicas().named_host() })
    }

    /// Whether the optimizer state is split over the run's processes (`--zero 1` across
    /// ranks): saving the state is then a collective every rank takes part in.
    fn split(&self) -> bool {
        self.update.replicas().split_over(self.exchange.world())
    }

    /// Puts a checkpoint's (or a rewind point's) state back into every part, then goes on as
    /// `then` says: the lr set as the lr key sets it, the data `skip` batches further.
    fn restore(&mut self, point: &Resume, then: Continuation) -> Result<Restored, EngineError> {
        let s = &point.state;
        self.update.restore(point)?;
        self.steps.restore(s.global_step, s.lr_scale);
        if let Some(b) = &s.best {
            self.persist.restore_best(b);
        }
        self.report.restore(reporter::Done {
            epochs: s.epochs_done,
            tally: Tally { samples: s.samples_done, seconds: s.train_seconds, ..Tally::default() },
            last_test_acc: s.last_test_acc,
            last_test_loss: None,
        });
        let lr = then.lr.map(|lr| {
            let from = self.steps.set_lr(lr);
            Change::LrChanged { from, to: lr, global_step: s.global_step }
        });
        let spe = self.cfg.steps_per_epoch(self.facts.train_len);
        let position = rewind::skipped((s.epoch, s.step), then.skip, spe);
        let partial = (position.0 == s.epoch).then_some(s.partial_epoch);
        Ok(Restored { position, partial, lr })
    }
}

#[cfg(test)]
mod tests {
    /// The coordinator's fields, as its declaration in this file lists them.
    fn coordinator_fields() -> Vec<String> {
        let source = include_str!("mod.rs");
        let body = source.split("pub struct Coordinator {").nth(1).expect("the declaration");
        let body = &body[..body.find("\n}").expect("its end")];
        body.lines()
            .map(str::trim)
            .filter(|l| !l.starts_with("//"))
            .filter_map(|l| l.split_once(':').map(|(name, _)| name.to_owned()))
            .collect()
    }

    #[test]
    fn the_coordinator_holds_its_parts_and_nothing_of_theirs() {
        let fields = coordinator_fields();
        assert!(fields.contains(&"persist".to_owned()) && fields.contains(&"gate".to_owned()), "{fields:?}");
        // Past a dozen, a part's state has spilled into the loop: fold it into its part.
        assert!(fields.len() <= 12, "{} fields: {fields:?}", fields.len());
    }
}
