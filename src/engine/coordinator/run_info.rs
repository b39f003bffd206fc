//! The run as the start record describes it, from the configuration, the facts of its data and
//! start, and each part's account.

use super::sample;
use crate::record::Change;
use crate::dist::World;
use crate::engine::config::TrainConfig;
use crate::record::RunInfo;

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
    /// What the start says after its line: the weights `--init-from` loaded, the rewind points
    /// sized to the machine.
    pub start_notes: Vec<Change>,
    /// A language model on text: the prompt each evaluation's sample continues, and the
    /// tokens the model sees at once.
    pub sample_prompt: Option<sample::Prompt>,
    /// Host memory the rewind points take when all are kept.
    pub snapshot_bytes: Option<u64>,
    /// The host memory a periodic checkpoint's copy takes (none without periodic checkpoints).
    pub checkpoint_bytes: Option<u64>,
    /// The allreduce bus bandwidth doctor measured across this run's GPUs.
    pub bus_bandwidth: Option<crate::record::bottleneck::MeasuredBus>,
    /// What the run's GPUs can do at most in its precision, for the MFU.
    pub peak_flops: Option<crate::flops::PeakFlops>,
    /// What the products compute in, in words (`Math::describe`).
    pub math: String,
    /// `DPT_SYNC_DEBUG` warns of and counts the GPUs' synchronizing calls.
    pub sync_debug: bool,
    /// Why the replicas run their steps eagerly (`None`: they graph them; `--cuda-graphs`).
    pub cuda_graphs: Option<dpt_core::settings::cuda_graphs::Eager>,
}

/// What the coordinator's parts say of themselves for the start record.
pub(super) struct Accounts<'a> {
    /// The update's.
    pub(super) param_count: i64,
    /// The update's: what one replica holds.
    pub(super) memory: crate::record::run_info::StateBytes,
    /// The step plan's: the lr of the first step and the live key's scale.
    pub(super) lr: (f64, f64),
    /// The exchange's: how gradients are summed, and the other processes.
    pub(super) allreduce: String,
    pub(super) world: Option<&'a World>,
    /// The reporter's: how steps are timed.
    pub(super) timing: String,
}

/// The start record's account of this run: model, devices, the training recipe, the data,
/// where it resumed, how steps are timed and how gradients are reduced.
pub(super) fn run_info(cfg: &TrainConfig, facts: &RunFacts, parts: Accounts) -> RunInfo {
    RunInfo {
        model: cfg.model(),
        task: cfg.task(),
        devices: cfg.devices.clone(),
        param_count: parts.param_count,
        steps_per_epoch: cfg.steps_per_epoch(facts.train_len),
        lr: parts.lr.0,
        lr_scale: Some(parts.lr.1),
        train_samples: facts.train_len,
        test_samples: facts.test_len,
        val_samples: facts.val_len,
        test_split: facts.test_is_val.then(|| "val".to_owned()),
        augment: (!cfg.augment().is_none()).then(|| cfg.augment().describe()),
        cpu_threads_per_replica: cfg.cpu_threads,
        resumed_at: cfg.kit.resume.as_ref().map(|r| r.state.global_step),
        started_unix: Some(crate::unix_now()),
        snapshot_bytes: facts.snapshot_bytes,
        checkpoint_bytes: facts.checkpoint_bytes,
        memory: Some(parts.memory),
        bus_bandwidth: facts.bus_bandwidth,
        allreduce: parts.allreduce,
        restart: cfg.restart.clone(),
        data: Some(facts.data.clone()),
        normalize: Some(cfg.normalization.clone()),
        math: facts.math.clone(),
        cuda_graphs: dpt_core::settings::CudaGraphs::describe(
            facts.cuda_graphs,
            cfg.devices.len() == 1 && parts.world.is_none(),
        ),
        timing: parts.timing,
        world: parts.world.map(|w| crate::record::run_info::WorldInfo {
            rank: w.rank,
            backend: format!("{:?}", w.backend).to_lowercase(),
            hosts: w.hosts.clone(),
            replicas: w.replicas.clone(),
            devices: w.devices.clone(),
        }),
        script: None,
        settings: cfg.settings.clone(),
    }
}
