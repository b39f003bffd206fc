//! The finished epochs: their counts, their records, and the run's summary made from them.

use super::Rates;
use crate::engine::config::TrainConfig;
use crate::engine::evaluation::Evaluation;
use crate::record::{EpochStats, FinishReason, Summary};
use dpt_core::tally::Tally;

/// The finished epochs, for the summary and the checkpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(in crate::engine::coordinator) struct Done {
    pub(in crate::engine::coordinator) epochs: usize,
    /// Training figures of the finished epochs (seconds: training time).
    pub(in crate::engine::coordinator) tally: Tally,
    pub(in crate::engine::coordinator) last_test_acc: Option<f64>,
    /// The last evaluated loss (of this attempt: a continued run evaluates again at its end).
    pub(in crate::engine::coordinator) last_test_loss: Option<f64>,
}

impl Done {
    /// Ends epoch `epoch` (0-based) with its training figures `train` and its evaluation (and
    /// the moving average's, `ema`), which took `eval_seconds`: counted, its record made.
    /// `classes`: 0 for a run judged by its loss alone.
    pub(super) fn end_epoch(
        &mut self,
        (epoch, lr, eval_seconds): (usize, f64, f64),
        train: Tally,
        (evaluation, ema): (&Evaluation, Option<Tally>),
        classes: usize,
    ) -> EpochStats {
        let test = evaluation.sums;
        let stats = EpochStats {
            epoch: epoch + 1,
            train_loss: train.mean_loss(),
            train_acc: train.accuracy(),
            test_loss: test.mean_loss(),
            test_acc: test.accuracy(),
            epoch_seconds: train.seconds,
            eval_seconds,
            samples_per_sec: train.throughput(),
            lr,
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
        self.last_test_acc = (classes > 0).then_some(stats.test_acc);
        self.last_test_loss = Some(stats.test_loss);
        self.epochs += 1;
        self.tally.add(train);
        stats
    }

    /// The final test's accuracy becomes the last one; the validation accuracy it replaces.
    pub(super) fn tested(&mut self, acc: f64) -> Option<f64> {
        self.last_test_acc.replace(acc)
    }

    /// The run's summary: it ended for `reason` at `global_steps` steps, in the middle of an
    /// epoch whose figures so far are `unfinished` (which count for throughput).
    pub(super) fn summary(
        &self,
        cfg: &TrainConfig,
        (reason, unfinished, global_steps): (FinishReason, Option<Tally>, usize),
        classes: usize,
        rates: &Rates,
    ) -> Summary {
        let mut all = self.tally;
        if let Some(u) = unfinished {
            all.add(u);
        }
        let (model_flops, mfu) = rates.model_flops(all.throughput());
        let settings = &cfg.settings;
        let by_loss = self.last_test_loss.filter(|_| classes == 0);
        Summary {
            val_acc: None,
            model: cfg.model(),
            devices: cfg.devices.clone(),
            test_acc: self.last_test_acc,
            sec_per_epoch: (self.epochs > 0).then(|| self.tally.seconds / self.epochs as f64),
            samples_per_sec: all.throughput(),
            epochs_done: self.epochs,
            global_steps,
            reason,
            peak_rss_mib: crate::sys::peak_resident_bytes().map(|b| b as f64 / f64::from(1 << 20)),
            val_loss: by_loss,
            perplexity: by_loss.filter(|_| settings.data.block_size.is_some()).map(f64::exp),
            tokens_per_sec: match (settings.recipe.steps, settings.data.block_size) {
                (Some(_), Some(t)) => Some(all.throughput() * t as f64),
                _ => None,
            },
            bottleneck: None,
            flops_per_sample: rates.forward_per_sample(),
            model_flops,
            mfu,
            peak_flops: rates.peak.clone(),
            peak_device_mib: crate::device::peak::device_peak_mib(&cfg.devices),
        }
    }
}
