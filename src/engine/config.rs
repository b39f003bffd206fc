//! What one training run is asked to do, and the checks that reject a bad request up front.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::faults::Faults;
use super::optim::schedule::LrPlan;
use super::optim::Zero;
use crate::model::script::ScriptModel;
use crate::model::{Builder, ModelKind, Normalization, Task};
use crate::persist::resume::Resume;
use crate::settings::Settings;
use dpt_core::device::DeviceId;

pub use super::policies::{OnNan, SavePolicy};
pub use dpt_core::config_error::{check_lr, ConfigError};

/// Everything a run needs besides the data: its settings, what the run derives from them, and
/// the live resources it runs with.
#[derive(Debug)]
pub struct TrainConfig {
    /// The run's settings, as resolved: the one home of every setting.
    pub settings: Settings,
    /// This process's replicas' devices (`settings.placement.devices` on this machine).
    pub devices: Vec<DeviceId>,
    /// Input normalization: `(x / 255 - mean) / std`, asked for, the model's, or measured.
    pub normalization: Normalization,
    /// Intra-op threads of each CPU replica.
    pub cpu_threads: usize,
    /// The streaming loader's queue depth and decode threads (streamed data only).
    pub loader: crate::input::loader::LoaderConfig,
    /// What a non-finite loss does (the setting, else by whether a dashboard may watch).
    pub on_nan: OnNan,
    pub save_policy: SavePolicy,
    /// Where weights are saved; `None` saves nothing.
    pub run_dir: Option<PathBuf>,
    /// `checkpoints.snapshots` is the default, not asked for: a one-process run keeps as many
    /// of those rewind points as fit half the host memory available at start.
    pub points_sized: bool,
    /// Set when this attempt continues the run in its directory (the same command again).
    pub restart: Option<crate::record::run_info::Restart>,
    pub kit: RunKit,
}

/// The live resources a run trains with, apart from its settings.
#[derive(Debug, Default)]
pub struct RunKit {
    /// The other processes of a multi-process run (`None`: this process alone).
    pub world: Option<Box<crate::dist::World>>,
    /// The user's TorchScript model, when the settings name a file.
    pub script: Option<Arc<ScriptModel>>,
    /// Continue from a checkpoint.
    pub resume: Option<Box<Resume>>,
    /// Weights to start from (`model.init_from`), loaded by name.
    pub init_from: Option<Box<crate::persist::init_from::InitFrom>>,
    /// Test-only fault injection.
    pub faults: Faults,
}

impl TrainConfig {
    /// The reference programs' settings for `model` on `devices`, with RNG seed 0.
    pub fn new(model: ModelKind, devices: Vec<DeviceId>) -> Self {
        TrainConfig::with_settings(Settings::defaults(model, Default::default()), devices)
    }

    /// A run of `settings` on `devices`, with the model's own normalization.
    pub fn with_settings(settings: Settings, devices: Vec<DeviceId>) -> Self {
        TrainConfig {
            normalization: settings.model_kind().normalization(),
            settings,
            devices,
            cpu_threads: 1,
            loader: Default::default(),
            on_nan: OnNan::Stop,
            save_policy: SavePolicy::Retry { tries: 0, every: Duration::ZERO },
            run_dir: None,
            points_sized: false,
            restart: None,
            kit: RunKit::default(),
        }
    }

    /// A run of the user's TorchScript `script` (loss and normalization from the caller).
    pub fn for_script(script: Arc<ScriptModel>, devices: Vec<DeviceId>) -> Self {
        let mut cfg = TrainConfig::new(ModelKind::Script, devices);
        cfg.settings.model.name = crate::settings::ModelChoice::File(script.path.clone());
        cfg.kit.script = Some(script);
        cfg
    }

    /// The model the settings name.
    pub fn model(&self) -> ModelKind {
        self.settings.model_kind()
    }

    /// What the model is trained to do: a TorchScript model's, found by its check; the
    /// built-in models classify.
    pub fn task(&self) -> Task {
        self.kit.script.as_ref().map_or(Task::Classify, |s| s.task)
    }

    /// What the streaming loader's decoding is made from, in the loader's terms.
    pub fn decoding(&self) -> crate::input::loader::DecodingSpec<'_> {
        crate::input::loader::DecodingSpec {
            loader: &self.loader,
            augment: self.augment(),
            seed: self.settings.recipe.seed,
            max_bad: self.settings.data.max_bad,
            cpu_teams: self.cpu_threads > 1 && self.devices.contains(&dpt_core::device::DeviceId::Cpu),
        }
    }

    /// The training augmentation.
    pub fn augment(&self) -> crate::input::augment::Augment {
        self.settings.recipe.augmentation()
    }

    /// How long a replica's step may take before it is reported stuck.
    pub fn step_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.settings.placement.step_timeout)
    }

    /// The tensors the model trains and keeps, by name and shape, in the engine's order.
    pub fn specs(&self) -> Builder {
        crate::model::specs(self.model(), self.kit.script.as_deref())
    }

    /// How the run computes on its devices (asks CUDA for their compute capability).
    pub fn math(&self) -> super::math::Math {
        let capability = |i: usize| dpt_sys::c10d::cuda_identity(i).ok().map(|id| (id.major, id.minor));
        super::math::Math::of(&self.settings.precision, &self.devices, self.kit.script.is_some(), capability)
    }

    /// Refuses a run whose replicas cannot fit their GPU by [`ReplicaMemory`]'s estimate, on
    /// `replicas` replicas in all; `gpu(i)`: `cuda:i`'s name and bytes (unknown GPUs pass).
    ///
    /// [`ReplicaMemory`]: super::device_memory::ReplicaMemory
    pub fn check_device_memory(
        &self,
        data: &crate::data::Dataset,
        replicas: usize,
        gpu: impl Fn(usize) -> Option<(String, u64)>,
    ) -> Result<(), super::device_memory::MemoryRefusal> {
        use super::device_memory::{MemoryInputs, ReplicaMemory};
        let s = &self.settings;
        let outputs_per_sample = match (self.task(), &self.kit.script) {
            (Task::Tokens | Task::ModelLoss, script) => {
                let vocab = script.as_ref().and_then(|m| m.vocab).unwrap_or(0);
                let block = match &data.train.images {
                    crate::data::Pixels::Tokens(w) => w.block,
                    _ => 0,
                };
                block as u64 * vocab.max(0) as u64
            }
            (Task::Classify, Some(m)) => m.classes.max(0) as u64,
            (Task::Classify, None) => data.classes as u64,
        };
        let all = replicas as u64;
        // Under --zero 2 with --accumulate, the bucket buffers are held over a step's
        // micro-batches: a whole gradient beside the shard, counted as a whole one.
        let accumulates = s.recipe.accumulate > 1;
        let params = self.specs().param_count().max(0) as u64;
        // Under --zero 2 (without --accumulate) a step's bucket buffers, at most a few buckets.
        let cap = (s.placement.bucket_cap_mb * f64::from(1u32 << 20)) as u64;
        let per_replica = super::bucket_pool::BUFFERS_PER_REPLICA as u64;
        let buckets = (per_replica * cap).min(4 * params);
        let estimate = |zero: Zero| {
            let shards = |split: bool| if split { all } else { 1 };
            ReplicaMemory::of(&MemoryInputs {
                params,
                bucket_buffers: if zero.shards_gradients() && !accumulates { buckets } else { 0 },
                optimizer_buffers: s.optimizer.kind.slots().len() as u64,
                optimizer_shards: shards(zero.shards_states()),
                gradient_shards: shards(zero.shards_gradients() && !accumulates),
                ema: s.recipe.ema.is_some(),
                precision: s.precision.format,
                micro_batch: s.micro_batch(replicas) as u64,
                eval_batch: s.eval_batch(replicas) as u64,
                outputs_per_sample,
            })
        };
        let memory = estimate(s.optimizer.zero);
        // The stages that would split more, where this run's replicas could: the first that
        // fits is named.
        let further: Vec<(Zero, ReplicaMemory)> = [Zero::States, Zero::Gradients]
            .into_iter()
            .filter(|&z| all > 1 && z > s.optimizer.zero && self.stage_problem(z).is_none())
            .map(|z| (z, estimate(z)))
            .collect();
        let mut gpus: Vec<usize> = self
            .devices
            .iter()
            .filter_map(|d| if let DeviceId::Cuda(i) = d { Some(*i) } else { None })
            .collect();
        gpus.sort_unstable();
        gpus.dedup();
        for i in gpus {
            let Some((name, total)) = gpu(i) else { continue };
            let sharing = self.devices.iter().filter(|d| **d == DeviceId::Cuda(i)).count();
            let device = format!("cuda:{i} ({name})");
            memory.check(&device, total, sharing).map_err(|mut refusal| {
                if let Some((z, m)) = further.iter().find(|(_, m)| m.check(&device, total, sharing).is_ok()) {
                    let what = if z.shards_gradients() {
                        "the gradients and the optimizer state"
                    } else {
                        "the optimizer state"
                    };
                    refusal.fix = format!(
                        "--zero {z} fits: {what} split over the {all} replicas, {:.1} GiB each in all",
                        m.peak() as f64 / f64::from(1u32 << 30)
                    );
                }
                refusal
            })?;
        }
        Ok(())
    }

    /// Rejects settings the GPUs cannot run (asks CUDA for their compute capability).
    pub fn validate_devices(&self) -> Result<(), ConfigError> {
        let capability = |i: usize| dpt_sys::c10d::cuda_identity(i).ok().map(|id| (id.major, id.minor));
        match super::math::bf16_problem(self.settings.precision.format, &self.devices, capability) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The schedule's base rate: `--lr`, scaled with the global batch when asked.
    pub fn base_lr(&self) -> f64 {
        self.settings.base_lr()
    }

    /// The learning rate over the run's steps, on `train_len` samples.
    pub fn lr_plan(&self, train_len: usize) -> LrPlan {
        let steps_per_epoch = self.steps_per_epoch(train_len);
        LrPlan {
            base: self.base_lr(),
            schedule: self.settings.schedule.clone(),
            total: self.settings.recipe.steps.unwrap_or(steps_per_epoch * self.settings.recipe.epochs),
            steps_per_epoch,
            scale: 1.0,
        }
    }

    /// Rejects settings that cannot train, given the data's size and the run's replicas in
    /// all (without touching CUDA).
    pub fn validate(
        &self,
        (train_len, test_len): (usize, usize),
        replicas: usize,
    ) -> Result<(), ConfigError> {
        self.validate_settings(replicas)?;
        let plan = self.lr_plan(train_len);
        self.settings.schedule.check(plan.base, plan.total)?;
        if train_len == 0 {
            return Err(ConfigError::EmptyTrainSet);
        }
        if test_len == 0 {
            return Err(ConfigError::EmptyTestSet);
        }
        if let Some(r) = &self.kit.resume {
            if r.state.train_samples != train_len {
                return Err(ConfigError::ResumeSamples {
                    checkpoint: r.state.train_samples,
                    found: train_len,
                });
            }
        }
        Ok(())
    }

    /// Rejects settings that cannot train on these devices, in a run of `replicas` in all,
    /// with this model and checkpoint (the settings' own checks are `Settings::validate`'s).
    pub fn validate_settings(&self, replicas: usize) -> Result<(), ConfigError> {
        self.settings.validate_numbers()?;
        let batch = self.settings.recipe.batch_size;
        if batch < self.devices.len() {
            return Err(ConfigError::BatchSmallerThanReplicas { batch, replicas: self.devices.len() });
        }
        let accumulate = self.settings.recipe.accumulate;
        let per_replica = batch / self.devices.len().max(1);
        if accumulate > per_replica {
            return Err(ConfigError::AccumulateTooFine { accumulate, per_replica });
        }
        self.settings.optimizer.zero.check(replicas).map_err(ConfigError::Zero)?;
        if let Some(why) = self.stage_problem(self.settings.optimizer.zero) {
            return Err(ConfigError::Zero(why));
        }
        if self.model() == ModelKind::Script && self.kit.script.is_none() {
            return Err(ConfigError::ScriptMissing);
        }
        if let Some(r) = &self.kit.resume {
            if r.state.settings.recipe.batch_size != batch {
                return Err(ConfigError::ResumeBatch {
                    checkpoint: r.state.settings.recipe.batch_size,
                    asked: batch,
                });
            }
            if r.state.epoch >= self.settings.recipe.epochs {
                return Err(ConfigError::ResumeDone {
                    done: r.state.epoch,
                    epochs: self.settings.recipe.epochs,
                });
            }
        }
        Ok(())
    }

    /// Why ZeRO stage `zero` cannot run this model with these settings, in one line (stage 2
    /// only: it needs gradient buckets, and cannot cut apart parameters that overlap).
    fn stage_problem(&self, zero: Zero) -> Option<String> {
        if !zero.shards_gradients() {
            return None;
        }
        if let Some((a, b)) = self.kit.script.as_ref().and_then(|s| s.shared.clone()) {
            return Some(format!("--zero 2 cuts the flat gradient at the shards' boundaries and cannot keep {a} and {b} together: the model's parameters share storage; hold them as one parameter (the same tensor under both names, as a tied embedding is) or use --zero 1"));
        }
        if (self.settings.placement.bucket_cap_mb * (1u64 << 20) as f64) < 1.0 {
            return Some("--zero 2 reduces the gradients bucket by bucket as the backward pass makes them, and --bucket-cap-mb 0 turns the buckets off; give the buckets a size (25 MiB is the default) or use --zero 1".into());
        }
        None
    }

    /// Whether convolution weights are laid out channels-last in this run.
    /// The flat buffers share one layout across replicas (the allreduce sums them element by
    /// element), so the model's preference must hold on every device, not just the first.
    pub fn uses_channels_last(&self) -> bool {
        self.settings.placement.channels_last.unwrap_or_else(|| {
            self.devices.iter().all(|d| self.model().prefers_channels_last(matches!(d, DeviceId::Cuda(_))))
        })
    }

    /// The gradient buckets' byte limits (the first, the others) when the allreduce overlaps
    /// the backward pass: with a cap, and gradients to reduce (two replicas or more, or other
    /// processes); the first bucket is DDP's 1 MiB unless the cap is smaller.
    pub fn bucket_bytes(&self, other_processes: bool) -> Option<(i64, i64)> {
        let cap = (self.settings.placement.bucket_cap_mb * (1u64 << 20) as f64) as i64;
        let reduces = self.devices.len() > 1 || other_processes;
        (cap > 0 && reduces).then(|| (super::buckets::FIRST_BUCKET_BYTES.min(cap), cap))
    }

    /// What decides whether the replicas graph their steps (`--cuda-graphs`); `buckets`: the
    /// gradients are reduced by buckets during the backward pass; `streamed`: the training
    /// batches are. The `graph-stand-in` test fault takes CPU replicas for graphable ones.
    pub fn graph_facts(&self, buckets: bool, streamed: bool) -> dpt_core::settings::cuda_graphs::GraphFacts {
        let stand_in = self.kit.faults.graph_stand_in;
        dpt_core::settings::cuda_graphs::GraphFacts {
            cuda_build: stand_in || dpt_sys::c10d::nccl_compiled(),
            cpu_replica: !stand_in && self.devices.contains(&DeviceId::Cpu),
            zero_2: self.settings.optimizer.zero.shards_gradients(),
            accumulate: self.settings.recipe.accumulate.max(1),
            buckets,
            draws_inside: self.kit.script.as_ref().is_some_and(|s| s.random),
            streamed,
            faults: self.kit.faults.change_steps(),
        }
    }

    /// Whether any replica runs on a GPU.
    pub fn has_gpu(&self) -> bool {
        self.devices.iter().any(|d| matches!(d, DeviceId::Cuda(_)))
    }

    /// Steps in one epoch (the last partial batch is kept).
    pub fn steps_per_epoch(&self, train_len: usize) -> usize {
        train_len.div_ceil(self.settings.recipe.batch_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_last_must_suit_every_device() {
        let cfg = |devices: Vec<DeviceId>| TrainConfig::new(ModelKind::Resnet18, devices);
        assert!(cfg(vec![DeviceId::Cuda(0), DeviceId::Cuda(1)]).uses_channels_last());
        assert!(
            !cfg(vec![DeviceId::Cuda(0), DeviceId::Cpu]).uses_channels_last(),
            "not from the first device alone"
        );
        assert!(!cfg(vec![DeviceId::Cpu, DeviceId::Cuda(0)]).uses_channels_last());
        let mut forced = cfg(vec![DeviceId::Cpu]);
        forced.settings.placement.channels_last = Some(true);
        assert!(forced.uses_channels_last(), "--channels-last on wins");
    }
}
