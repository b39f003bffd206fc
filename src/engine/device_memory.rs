//! What a replica needs of its GPU's memory at least, estimated at start from what the run
//! holds for certain: the flat parameters, their gradient sums, the optimizer's state, the EMA, the autocast copies of the weights, and the largest output of a forward
//! pass (a GPT's logits: a micro-batch's windows × block × vocabulary) with what the loss and its
//! backward make of it. Activations inside the model are not counted: a run this refuses cannot
//! fit whatever its model does, one it passes may still run out.

use crate::model::Precision;

/// Bytes of one replica, by what holds them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReplicaMemory {
    /// Parameters, gradient sums, the optimizer's state, EMA, for the whole run.
    pub state: u64,
    /// A training micro-batch's output: the low-format output, its f32 log-probabilities and
    /// their gradient.
    pub step_outputs: u64,
    /// An evaluation batch's output and its f32 log-probabilities (no backward).
    pub eval_outputs: u64,
}

/// What the estimate needs to know of a run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemoryInputs {
    /// Scalars of the flat parameter buffer.
    pub params: u64,
    /// Optimizer slots the size of the parameters (Adam's two moments, SGD's momentum; the
    /// fused kernels need no scratch beside them).
    pub optimizer_buffers: u64,
    /// The replicas the optimizer state is split over (`--zero 1` and `2`; 1: each holds all of it).
    pub optimizer_shards: u64,
    /// The replicas the gradient sums are split over (`--zero 2`; 1: each holds all of them).
    pub gradient_shards: u64,
    /// Under `--zero 2`, the bytes of the bucket buffers a step holds at once (see
    /// `engine::bucket_pool`).
    pub bucket_buffers: u64,
    pub ema: bool,
    pub precision: Precision,
    pub micro_batch: u64,
    pub eval_batch: u64,
    /// Values a forward pass outputs per sample: a GPT's block × vocabulary, a classifier's
    /// classes.
    pub outputs_per_sample: u64,
}

const F32: u64 = 4;

impl ReplicaMemory {
    pub fn of(i: &MemoryInputs) -> ReplicaMemory {
        let low = match i.precision {
            Precision::F32 => 0,
            Precision::Bf16 | Precision::F16 => 2,
        };
        // Weights and gradient sums in f32; the autocast (or built-in) casts of the weights in
        // the low format, held for the forward.
        let shard = i.params.div_ceil(i.optimizer_shards.max(1));
        let gradients = i.params.div_ceil(i.gradient_shards.max(1)) * F32;
        let state = i.params * (F32 + u64::from(i.ema) * F32 + low)
            + gradients
            + i.bucket_buffers
            + shard * i.optimizer_buffers * F32;
        let output = if low == 0 { F32 } else { low };
        ReplicaMemory {
            state,
            step_outputs: i.micro_batch * i.outputs_per_sample * (output + 2 * F32),
            eval_outputs: i.eval_batch * i.outputs_per_sample * (output + F32),
        }
    }

    /// The most it holds at once: the state with a training step's or an evaluation's outputs.
    pub fn peak(&self) -> u64 {
        self.state + self.step_outputs.max(self.eval_outputs)
    }

    /// Refuses `replicas` such replicas on a device of `total` bytes (`device`: its name in
    /// the error), naming the figures and the flag that lowers the larger part.
    pub fn check(&self, device: &str, total: u64, replicas: usize) -> Result<(), MemoryRefusal> {
        let need = self.peak() * replicas as u64;
        if need <= total {
            return Ok(());
        }
        let fix = if self.eval_outputs > self.step_outputs && self.eval_outputs > self.state {
            "lower --eval-batch-size"
        } else if self.step_outputs > self.state {
            "lower --batch-size or raise --accumulate (a micro-batch is the batch's share over --accumulate)"
        } else {
            "use a smaller model, more GPUs for fewer replicas each, or --precision bf16"
        };
        Err(MemoryRefusal {
            device: device.to_owned(),
            total,
            need,
            replicas,
            memory: *self,
            fix: fix.to_owned(),
        })
    }
}

/// A run that cannot fit its GPU, with the figures.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "{device} has {} of memory and this run needs at least {} there ({replicas} replica(s), each: weights, gradients and optimizer state {}, a training micro-batch's outputs {}, an evaluation batch's {}); {fix}",
    gib(*total), gib(*need), gib(memory.state), gib(memory.step_outputs), gib(memory.eval_outputs)
)]
pub struct MemoryRefusal {
    pub device: String,
    pub total: u64,
    pub need: u64,
    pub replicas: usize,
    pub memory: ReplicaMemory,
    pub fix: String,
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / f64::from(1u32 << 30))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GPT-2 124M (vocabulary 50,304, block 1,024) with AdamW and its two moments, in bf16.
    fn gpt2(micro_batch: u64, eval_batch: u64) -> ReplicaMemory {
        ReplicaMemory::of(&MemoryInputs {
            params: 124_475_904,
            optimizer_buffers: 2,
            optimizer_shards: 1,
            gradient_shards: 1,
            bucket_buffers: 0,
            ema: false,
            precision: Precision::Bf16,
            micro_batch,
            eval_batch,
            outputs_per_sample: 1024 * 50_304,
        })
    }

    const H100: u64 = 80 * (1 << 30);

    #[test]
    fn the_readmes_gpt2_command_fits_an_80_gb_gpu_and_a_1000_window_evaluation_does_not() {
        // --batch-size 480 --accumulate 5 on 8 GPUs: micro-batches of 12, evaluated 12 at a time.
        let readme = gpt2(12, 12);
        // f32 weights and gradient sums, two f32 moments, the bf16 copies: 18 bytes a parameter.
        assert_eq!(readme.state, 124_475_904 * (8 + 8 + 2));
        // 12 x 1024 x 50304 logits: bf16, then f32 log-probabilities and their gradient.
        assert_eq!(readme.step_outputs, 12 * 1024 * 50_304 * 10);
        assert!(readme.peak() < 10 * (1 << 30), "{}", readme.peak());
        assert_eq!(readme.check("cuda:0", H100, 1), Ok(()));
        // The evaluation batch dpt-tui took before: 1,000 windows, about 288 GiB of logits.
        let e = gpt2(12, 1000).check("cuda:0 (NVIDIA H100 80GB HBM3)", H100, 1).expect_err("refused");
        assert_eq!(e.fix, "lower --eval-batch-size");
        let line = e.to_string();
        assert!(
            line.starts_with(
                "cuda:0 (NVIDIA H100 80GB HBM3) has 80.0 GiB of memory and this run needs at least"
            ),
            "{line}"
        );
        assert!(line.contains("an evaluation batch's 287.8 GiB"), "{line}");
    }

    #[test]
    fn replicas_sharing_a_gpu_add_up_and_the_fix_names_the_larger_part() {
        let one = gpt2(12, 12);
        let n = (H100 / one.peak()) as usize;
        assert_eq!(one.check("cuda:0", H100, n), Ok(()));
        assert!(one.check("cuda:0", H100, n + 1).is_err());
        assert_eq!(
            gpt2(200, 12).check("cuda:0", H100, 1).expect_err("refused").fix.split(' ').nth(1),
            Some("--batch-size")
        );
        let small_gpu = 2 * (1 << 30);
        let e = gpt2(1, 1).check("cuda:0", small_gpu, 1).expect_err("the state alone is 2.1 GiB");
        assert!(e.fix.contains("smaller model"), "{}", e.fix);
    }

    #[test]
    fn f32_outputs_are_four_bytes_and_a_classifier_is_small() {
        let lenet = ReplicaMemory::of(&MemoryInputs {
            params: 61_706,
            optimizer_buffers: 1,
            optimizer_shards: 1,
            gradient_shards: 1,
            bucket_buffers: 0,
            ema: true,
            precision: Precision::F32,
            micro_batch: 256,
            eval_batch: 256,
            outputs_per_sample: 10,
        });
        assert_eq!(lenet.state, 61_706 * 16);
        assert_eq!(lenet.step_outputs, 256 * 10 * 12);
        assert_eq!(lenet.eval_outputs, 256 * 10 * 8);
    }

    #[test]
    fn zero_1_keeps_a_shard_of_the_optimizer_state_and_zero_2_of_the_gradients_too() {
        let of = |(shards, gradient_shards)| {
            ReplicaMemory::of(&MemoryInputs {
                params: 124_475_904,
                optimizer_buffers: 2,
                optimizer_shards: shards,
                gradient_shards,
                bucket_buffers: 0,
                ema: false,
                precision: Precision::F32,
                micro_batch: 1,
                eval_batch: 1,
                outputs_per_sample: 1,
            })
        };
        // f32 weights and gradients whole, AdamW's two moments over 8 replicas.
        assert_eq!(of((1, 1)).state, 124_475_904 * 16);
        assert_eq!(of((8, 1)).state, 124_475_904 * 8 + 124_475_904 / 8 * 8);
        // Stage 2: the f32 gradient sums split too, a 1/8 shard of 4 bytes a parameter.
        assert_eq!(of((8, 8)).state, 124_475_904 * 4 + 124_475_904 / 8 * 4 + 124_475_904 / 8 * 8);
    }

    #[test]
    fn the_readmes_table_of_gpt2_on_8_gpus_is_this_estimate() {
        // README "Memory and --zero" and docs/guides/memory.md: bf16, AdamW, 8 replicas.
        let table = [
            (124_439_808, ["2.1", "1.3", "1.0"]),
            (354_823_168, ["5.9", "3.6", "2.6"]),
            (774_030_080, ["13.0", "7.9", "5.5"]),
            (1_557_611_200, ["26.1", "16.0", "11.0"]),
        ];
        for (params, columns) in table {
            for ((optimizer_shards, gradient_shards), want) in
                [(1, 1), (8, 1), (8, 8)].into_iter().zip(columns)
            {
                let state = ReplicaMemory::of(&MemoryInputs {
                    params,
                    optimizer_buffers: 2,
                    optimizer_shards,
                    gradient_shards,
                    // Stage 2's bucket buffers: four of the default 25 MiB.
                    bucket_buffers: if gradient_shards > 1 { 4 * (25 << 20) } else { 0 },
                    ema: false,
                    precision: Precision::Bf16,
                    micro_batch: 0,
                    eval_batch: 0,
                    outputs_per_sample: 0,
                })
                .state;
                assert_eq!(format!("{:.1}", state as f64 / f64::from(1u32 << 30)), want, "{params}");
            }
        }
    }
}
