//! A replica's share of an evaluation, batch by batch without gradients.

use tch::{Device, Kind, Tensor};

use super::{FromWorker, Tally, Worker, WorkerError};
use crate::input::batches::Batch;
use crate::model::Forward;

impl Worker {
    /// Evaluates samples `start..start + len` of the test (or, `val`, the validation) split:
    /// the summed loss, top-1 and top-5 hits and the confusion counts, with the samples that
    /// did not decode.
    pub(super) fn evaluate(
        &mut self,
        start: usize,
        len: usize,
        val: bool,
    ) -> Result<FromWorker, WorkerError> {
        let batch = self.batches.start_evaluation(val, start, len)?;
        let (mut bad, mut samples) = (Vec::new(), 0);
        let _guard = tch::no_grad_guard();
        let mut loss = Tensor::zeros([], (Kind::Double, self.device));
        let mut correct = Tensor::zeros([], (Kind::Int64, self.device));
        let mut top5 = Tensor::zeros([], (Kind::Int64, self.device));
        let mut confusion: Option<(i64, Tensor)> = None;
        let mut offset = start;
        while offset < start + len {
            let n = batch.min(start + len - offset);
            let Batch { x, y, bad: left_out, .. } = self.batches.evaluation(offset, n, val)?;
            bad.extend(left_out);
            offset += n;
            samples += x.size()[0] as usize;
            if x.size()[0] == 0 {
                continue;
            }
            let ctx = Forward { train: false, masks: &[], precision: self.precision };
            let scored = self.score(&x, &y, &ctx, 0.0)?;
            let _ = loss.f_add_(&scored.loss)?;
            // Accuracy, top-5 and the confusion counts are for class labels.
            let Some(out) = scored.outputs else { continue };
            let predicted = out.argmax(-1, false);
            let _ = correct.f_add_(&predicted.eq_tensor(&y).sum(Kind::Int64))?;
            let classes = out.size().last().copied().unwrap_or(1);
            let (_, best) = out.f_topk(classes.min(5), -1, true, true)?;
            let _ = top5.f_add_(&best.eq_tensor(&y.unsqueeze(1)).any_dim(1, false).sum(Kind::Int64))?;
            let (c, counts) = confusion.get_or_insert_with(|| {
                (classes, Tensor::zeros([classes * classes], (Kind::Int64, self.device)))
            });
            // Counted in place on the device: `bincount` would read the cells' min and max to the
            // host first, two device syncs per batch on a GPU.
            let cells = (&y * *c + &predicted).clamp(0, *c * *c - 1);
            let _ = counts.f_index_add_(0, &cells, &cells.ones_like())?;
        }
        let confusion = match confusion {
            Some((_, counts)) => {
                Vec::<i64>::try_from(&counts.to_device(Device::Cpu))?.into_iter().map(|v| v as f64).collect()
            }
            None => Vec::new(),
        };
        Ok(FromWorker::Evaluated {
            replica: self.replica,
            sums: Tally {
                loss: loss.double_value(&[]),
                correct: correct.int64_value(&[]) as f64,
                samples: samples as f64,
                seconds: 0.0,
            },
            top5: top5.int64_value(&[]) as f64,
            confusion,
            bad,
        })
    }
}
