//! One flag group per part of the settings tree (see `settings_args.rs`).

use std::path::PathBuf;

use serde::Serialize;

use super::settings_args::not_set;
use super::values::{parse, parse_betas, parse_bytes, parse_normalize, parse_on_off, parse_size};
use dpt_core::augment::Preset;
use dpt_core::best::BestMetric;
use dpt_core::checkpoint_every::CheckpointEvery;
use dpt_core::data::{DataFormat, Loader, TokenDtype};
use dpt_core::model::{LossKind, Normalization, Precision};
use dpt_core::optim::schedule::Shape;
use dpt_core::optim::{OptimizerKind, Zero};
use dpt_core::policies::OnNan;
use dpt_tui::settings::{CudaGraphs, DistBackend, ModelChoice};

#[derive(Debug, Clone, Default, clap::Args, Serialize)]
pub struct ModelArgs {
    /// Model to train: lenet, resnet18 or mnist-net (d2l's reference programs: architectures
    /// and defaults), or the path of a TorchScript file of your own [default: lenet, or the
    /// resumed checkpoint's].
    #[arg(id = "model.name", long = "model", value_name = "NAME|FILE", value_parser = parse::<ModelChoice>)]
    pub name: Option<ModelChoice>,
    /// The training loss of a TorchScript model: cross-entropy on logits, or nll on
    /// log-probabilities [default: cross-entropy; the built-in models use their reference program's].
    #[arg(id = "model.loss", value_name = "LOSS", long = "loss", value_parser = parse::<LossKind>)]
    pub loss: Option<LossKind>,
    /// Input normalization `MEAN,STD`: the network sees `(x / 255 - MEAN) / STD` [default:
    /// 0,1 (x / 255), the MNIST net 0.1307,0.3081; a TorchScript model the training set's own].
    #[arg(id = "model.normalize", long = "normalize", value_name = "MEAN,STD", value_parser = parse_normalize)]
    pub normalize: Option<Normalization>,
    /// Start from these weights (a .safetensors file, or a run directory's model.safetensors),
    /// loaded by name and shape; the others keep their initial values, and the run names them.
    #[arg(id = "model.init_from", long = "init-from", value_name = "FILE|DIR")]
    pub init_from: Option<PathBuf>,
}

#[derive(Debug, Clone, Default, clap::Args, Serialize)]
pub struct DataArgs {
    /// The data set: a folder of Fashion-MNIST/MNIST IDX files (.gz or raw), of CIFAR-10
    /// binary batches, an image folder (train/<class>/*, test/<class>/*), WebDataset shards
    /// (train/*.tar, val/*.tar or test/*.tar), a .npz or .safetensors file, or a folder of .npy
    /// files (x_train, y_train, x_test, y_test).
    /// [default: /usr/share/datasets/fashion-mnist, or a resumed run's own]
    #[arg(id = "data.path", value_name = "PATH", long = "data", env = "DPT_DATA")]
    pub path: Option<PathBuf>,
    /// The format of --data when it cannot be told from the files: idx, cifar10, images, npz,
    /// safetensors, webdataset, tokens (train.bin and val.bin, nanoGPT's layout), text (a
    /// folder of .txt files, tokenized as bytes once and cached).
    #[arg(id = "data.format", value_name = "FORMAT", long = "data-format", value_parser = parse::<DataFormat>)]
    pub format: Option<DataFormat>,
    /// Resize every image of an image folder to H,W pixels (otherwise they must all have one
    /// size).
    #[arg(id = "data.image_size", long = "image-size", value_name = "H,W", value_parser = parse_size)]
    pub image_size: Option<(u32, u32)>,
    /// Use only N training samples, spread evenly over the set (every class of a folder kept).
    #[arg(id = "data.train_limit", long = "train-limit", value_name = "N")]
    pub train_limit: Option<usize>,
    /// Use only N test samples, spread evenly over the set.
    #[arg(id = "data.test_limit", long = "test-limit", value_name = "N")]
    pub test_limit: Option<usize>,
    /// Carve this fraction of the training set (chosen by --seed) into a validation split,
    /// evaluated every epoch; the test set is then evaluated once, at the end.
    #[arg(id = "data.val_fraction", long = "val-fraction", value_name = "F")]
    pub val_fraction: Option<f64>,
    /// Image folders and shards: the share of all images that may fail to decode; those are
    /// left out (named on stderr, counted in the data's description) and more than it is an
    /// error naming the first.
    #[arg(id = "data.max_bad", long = "max-bad-images", value_name = "F")]
    pub max_bad: Option<f64>,
    /// Token data: the width of a token in train.bin and val.bin, u16 (nanoGPT's, vocabularies
    /// up to 65,536) or u32.
    #[arg(id = "data.token_dtype", long = "token-dtype", value_name = "u16|u32", value_parser = parse::<TokenDtype>)]
    pub token_dtype: Option<TokenDtype>,
    /// Token data: the tokens the model sees at once (at most its context length); each sample
    /// is a window of T + 1 tokens at a random offset, its targets the inputs one token later.
    #[arg(id = "data.block_size", long = "block-size", value_name = "T")]
    pub block_size: Option<usize>,
    /// Text: a Hugging Face tokenizer.json that turns the .txt files into tokens, once (cached);
    /// without it, the folder's own tokenizer.json, else the text's bytes (a vocabulary of 256).
    #[arg(id = "data.tokenizer", long = "tokenizer", value_name = "FILE")]
    pub tokenizer: Option<PathBuf>,
}

#[derive(Debug, Clone, Default, clap::Args, Serialize)]
pub struct OptimizerArgs {
    /// The optimizer: sgd (torch.optim.SGD), adam (torch.optim.Adam) or adamw
    /// (torch.optim.AdamW).
    #[arg(id = "optimizer.kind", long = "optimizer", value_name = "NAME", value_parser = parse::<OptimizerKind>)]
    pub kind: Option<OptimizerKind>,
    /// Learning rate [default: the model's].
    #[arg(id = "optimizer.lr", value_name = "LR", long = "lr", allow_hyphen_values = true)]
    pub lr: Option<f64>,
    /// SGD momentum [default: the model's].
    #[arg(id = "optimizer.momentum", value_name = "MOMENTUM", long = "momentum", allow_hyphen_values = true)]
    pub momentum: Option<f64>,
    /// Nesterov momentum (SGD with --momentum above 0).
    #[arg(id = "optimizer.nesterov", long = "nesterov")]
    #[serde(skip_serializing_if = "not_set")]
    pub nesterov: bool,
    /// Weight decay: L2 for sgd and adam, decoupled for adamw; adam and adamw decay only
    /// tensors of two or more dimensions unless --decay-all.
    #[arg(
        id = "optimizer.weight_decay",
        value_name = "WEIGHT_DECAY",
        long = "weight-decay",
        allow_hyphen_values = true
    )]
    pub weight_decay: Option<f64>,
    /// Adam's and AdamW's moment decay rates.
    #[arg(id = "optimizer.betas", long = "betas", value_name = "B1,B2", value_parser = parse_betas, allow_hyphen_values = true)]
    pub betas: Option<(f64, f64)>,
    /// Adam's and AdamW's denominator term.
    #[arg(id = "optimizer.eps", value_name = "EPS", long = "eps", allow_hyphen_values = true)]
    pub eps: Option<f64>,
    /// Weight decay on every parameter with adam and adamw, biases and normalization scales too.
    #[arg(id = "optimizer.decay_all", long = "decay-all")]
    #[serde(skip_serializing_if = "not_set")]
    pub decay_all: bool,
    /// ZeRO stage: 1 splits the optimizer state (moments, momentum) over every replica of the
    /// run, in all its processes, each updating its shard of the weights, then gathering them;
    /// 2 splits the gradient sums too, each bucket reduced to the replicas that own its parts as
    /// the backward pass goes; the same weights as 0 (every replica holds all of it) in less
    /// memory [default: 0].
    #[arg(id = "optimizer.zero", long = "zero", value_name = "0|1|2", value_parser = parse::<Zero>)]
    pub zero: Option<Zero>,
}

#[derive(Debug, Clone, Default, clap::Args, Serialize)]
pub struct ScheduleArgs {
    /// The learning-rate schedule, stepped once per optimizer step: constant, cosine, linear,
    /// onecycle, or step:E1,E2,… (× --lr-gamma at each epoch Ei) [default: constant].
    #[arg(id = "schedule.shape", long = "lr-schedule", value_name = "SHAPE", value_parser = parse::<Shape>)]
    pub shape: Option<Shape>,
    /// Linear warm-up over the first W optimizer steps: lr·(t+1)/W.
    #[arg(id = "schedule.warmup_steps", long = "warmup-steps", value_name = "W")]
    pub warmup_steps: Option<usize>,
    /// The rate cosine and linear schedules end at.
    #[arg(id = "schedule.min_lr", value_name = "MIN_LR", long = "min-lr", allow_hyphen_values = true)]
    pub min_lr: Option<f64>,
    /// The factor of each step: milestone.
    #[arg(id = "schedule.gamma", value_name = "GAMMA", long = "lr-gamma", allow_hyphen_values = true)]
    pub gamma: Option<f64>,
}

#[derive(Debug, Clone, Default, clap::Args, Serialize)]
pub struct RecipeArgs {
    /// Epochs to train [default: the model's, 10].
    #[arg(id = "recipe.epochs", value_name = "EPOCHS", long = "epochs")]
    pub epochs: Option<usize>,
    /// Token data: the run's length in optimizer steps (token data has no epochs; schedules,
    /// checkpoints and progress count steps).
    #[arg(id = "recipe.steps", long = "steps", value_name = "N")]
    pub steps: Option<usize>,
    /// Token data: evaluate the validation windows every M steps [default: a tenth of --steps].
    #[arg(id = "recipe.eval_every", long = "eval-every", value_name = "M")]
    pub eval_every: Option<usize>,
    /// Token data: batches of validation windows (of --eval-batch-size, else --batch-size) each
    /// evaluation reads, the same windows every time.
    #[arg(id = "recipe.eval_batches", long = "eval-batches", value_name = "K")]
    pub eval_batches: Option<usize>,
    /// Byte-tokenized text: after each evaluation, sample this many tokens continuing a fixed
    /// prompt (the first 16 bytes of the validation text; temperature 0.8, top-k 40), shown in
    /// the log and the record; 0 turns it off.
    #[arg(id = "recipe.sample_tokens", long = "sample-tokens", value_name = "N")]
    pub sample_tokens: Option<usize>,
    /// Global batch size, split over the replicas [default: the model's].
    #[arg(id = "recipe.batch_size", value_name = "BATCH_SIZE", long = "batch-size")]
    pub batch_size: Option<usize>,
    /// Seed of the initialization, the shuffles and the dropout streams.
    #[arg(id = "recipe.seed", value_name = "SEED", long = "seed")]
    pub seed: Option<u64>,
    /// Linear scaling rule: the lr is --lr × batch / REF (REF: the batch --lr was tuned for).
    #[arg(id = "recipe.lr_batch_ref", long = "lr-batch-ref", value_name = "REF")]
    pub lr_batch_ref: Option<usize>,
    /// Label smoothing of the training loss, as F.cross_entropy(label_smoothing=EPS).
    #[arg(
        id = "recipe.label_smoothing",
        long = "label-smoothing",
        value_name = "EPS",
        allow_hyphen_values = true
    )]
    pub label_smoothing: Option<f64>,
    /// Clip the global L2 norm of the mean gradient to MAX each step (clip_grad_norm_); the
    /// norm before clipping is reported with every window either way.
    #[arg(
        id = "recipe.clip_grad_norm",
        long = "clip-grad-norm",
        value_name = "MAX",
        allow_hyphen_values = true
    )]
    pub clip_grad_norm: Option<f64>,
    /// Gradient accumulation: each replica trains its share of a step in N micro-batches (the
    /// batch stays the global batch of one optimizer step; one allreduce per step).
    #[arg(id = "recipe.accumulate", long = "accumulate", value_name = "N")]
    pub accumulate: Option<usize>,
    /// Keep an exponential moving average of the weights with this decay (timm's ModelEmaV2:
    /// ema = decay·ema + (1 − decay)·model after every step), evaluated each epoch and saved as
    /// model_ema.safetensors.
    #[arg(id = "recipe.ema", long = "ema", value_name = "DECAY")]
    pub ema: Option<f64>,
    /// Training-time augmentation: none; cifar (zero padding 4, random crop, horizontal flip, as
    /// torchvision's RandomCrop(padding=4) and RandomHorizontalFlip); or imagenet (torchvision's
    /// RandomResizedCrop to --image-size, 224 by default, and the flip; evaluation resizes and
    /// crops the centre; streams an image folder or WebDataset shards) [default: none, or a
    /// resumed run's own].
    #[arg(id = "recipe.augment", long = "augment", value_name = "none|cifar|imagenet", value_parser = parse::<Preset>)]
    pub augment: Option<Preset>,
    /// Random crop with this zero padding (0: none), over --augment's choice.
    #[arg(id = "recipe.crop_padding", long = "crop-padding", value_name = "P")]
    pub crop_padding: Option<u32>,
    /// Random horizontal flip (p = 0.5), over --augment's choice.
    #[arg(id = "recipe.hflip", long = "hflip", value_name = "on|off", value_parser = parse_on_off)]
    pub hflip: Option<bool>,
}

#[derive(Debug, Clone, Default, clap::Args, Serialize)]
pub struct BestArgs {
    /// Keep the K best evaluations (by --best-metric) as weights and checkpoints in the run
    /// directory's best/epoch-E/.
    #[arg(id = "best.keep", long = "keep-best", value_name = "K")]
    pub keep: Option<usize>,
    /// What best means: val_acc (the evaluated set's accuracy) or val_loss.
    #[arg(id = "best.metric", long = "best-metric", value_name = "METRIC", value_parser = parse::<BestMetric>)]
    pub metric: Option<BestMetric>,
    /// Stop when --best-metric has not improved for N evaluations (one per epoch).
    #[arg(id = "best.early_stop", long = "early-stop", value_name = "N")]
    pub early_stop: Option<usize>,
}

#[derive(Debug, Clone, Default, clap::Args, Serialize)]
pub struct PrecisionArgs {
    /// Number format: f32, bf16 (mixed precision: bfloat16 convolutions and matrix products,
    /// f32 master weights, loss and update; for GPUs with bfloat16 tensor cores) or f16 (the
    /// same in float16, for GPUs without bfloat16 such as V100 and T4; with dynamic loss
    /// scaling).
    #[arg(id = "precision.format", long = "precision", value_name = "f32|bf16|f16", value_parser = parse::<Precision>)]
    pub format: Option<Precision>,
    /// Float32 matrix products and convolutions on GPUs (sm80 and later) in TF32, as
    /// `torch.backends.cuda.matmul.allow_tf32 = True` and cuDNN's default: about 7x the f32 rate
    /// of an H100 with a 10-bit mantissa in the products, f32 sums; off keeps IEEE float32
    /// [default: on].
    #[arg(id = "precision.tf32", long = "tf32", value_name = "on|off", value_parser = parse_on_off)]
    pub tf32: Option<bool>,
    /// Dynamic loss scaling by torch.amp.GradScaler's rules: the loss multiplied by the scale
    /// before the backward pass; a step whose gradient overflows is skipped and the scale
    /// halved; doubled after --loss-scale-interval clean steps [default: on with --precision
    /// f16, or when the resumed run had it].
    #[arg(id = "precision.loss_scale", long = "loss-scale", value_name = "on|off", value_parser = parse_on_off)]
    pub loss_scale: Option<bool>,
    /// The first loss scale.
    #[arg(
        id = "precision.loss_scale_init",
        long = "loss-scale-init",
        value_name = "SCALE",
        allow_hyphen_values = true
    )]
    pub loss_scale_init: Option<f32>,
    /// Clean steps in a row before the loss scale doubles.
    #[arg(id = "precision.loss_scale_interval", long = "loss-scale-interval", value_name = "N")]
    pub loss_scale_interval: Option<u32>,
}

#[derive(Debug, Clone, Default, clap::Args, Serialize)]
pub struct CheckpointArgs {
    /// Write a checkpoint every N epochs, or every N steps (`500steps`), or every so much time
    /// (`20m`, `90s`, `2h`), off the training thread (0: only when stopping and at the end)
    ///.
    #[arg(id = "checkpoints.every", long = "checkpoint-every", value_name = "N|Nsteps|20m", value_parser = parse::<CheckpointEvery>)]
    pub every: Option<CheckpointEvery>,
    /// Keep the K newest checkpoints under checkpoints/ in the run directory, beside
    /// checkpoint.safetensors (the newest; 1: that one only).
    #[arg(id = "checkpoints.keep", long = "keep-checkpoints", value_name = "K")]
    pub keep: Option<usize>,
    /// When the loss is NaN or infinite [default: pause in the dashboard, stop headless].
    #[arg(id = "checkpoints.on_nan", long = "on-nan", value_name = "pause|stop|ignore", value_parser = parse::<OnNan>)]
    pub on_nan: Option<OnNan>,
    /// Headless: when the final save fails (a full disk), try again this many times before
    /// exiting 1 (the dashboard instead pauses and lets you retry with `s`).
    #[arg(id = "checkpoints.save_retries", long = "save-retries", value_name = "N")]
    pub save_retries: Option<u32>,
    /// Headless: seconds between two tries of a failed final save.
    #[arg(id = "checkpoints.save_retry_secs", long = "save-retry-secs", value_name = "SECS")]
    pub save_retry_secs: Option<f64>,
    /// Take a rewind point (the state a checkpoint holds, copied to host memory) every N
    /// steps (`200steps`), epochs or so much time (`10m`) [default: 200steps].
    #[arg(id = "checkpoints.snapshot_every", long = "snapshot-every", value_name = "Nsteps|10m", value_parser = parse::<CheckpointEvery>)]
    pub snapshot_every: Option<CheckpointEvery>,
    /// Keep the K newest rewind points in host memory (`r` in the dashboard goes back to
    /// one; 0: none) [default: 3, fewer where they would take more than half the host memory
    /// available at start].
    #[arg(id = "checkpoints.snapshots", long = "snapshots", value_name = "K")]
    pub snapshots: Option<usize>,
}

#[derive(Debug, Clone, Default, clap::Args, Serialize)]
pub struct PlacementArgs {
    /// Devices, one replica each: auto, cpu, cpu:N (N replicas on the CPU), or a list such as
    /// cuda:0,cuda:1 (a device may repeat).
    #[arg(id = "placement.devices", value_name = "DEVICES", long = "devices")]
    pub devices: Option<String>,
    /// Intra-op threads per CPU replica [default: the cores shared among the CPU replicas].
    #[arg(id = "placement.cpu_threads", long = "cpu-threads", value_name = "N")]
    pub cpu_threads: Option<usize>,
    /// How the data reaches the replicas: resident (decoded once into memory and every
    /// replica's device), stream (read and decoded batch by batch while training, within
    /// --data-memory; image folders, WebDataset shards, uint8 .npy arrays, CIFAR-10 batches and
    /// uncompressed IDX files), or auto (resident when the decoded images fit in --data-memory)
    ///.
    #[arg(id = "placement.loader", long = "loader", value_name = "auto|resident|stream", value_parser = parse::<Loader>)]
    pub loader: Option<Loader>,
    /// The host memory the data may take, such as 512M or 8G: auto's threshold, and the
    /// streaming loader's bound on its decoded batches [default: 2G].
    #[arg(id = "placement.data_memory", long = "data-memory", value_name = "BYTES", value_parser = parse_bytes)]
    pub data_memory: Option<u64>,
    /// Streaming: batches decoded ahead of each replica, at most (fewer when --data-memory
    /// holds fewer).
    #[arg(id = "placement.prefetch", long = "prefetch", value_name = "N")]
    pub prefetch: Option<usize>,
    /// Streaming: threads decoding images, shared by the process's replicas [default: the
    /// process's cores].
    #[arg(id = "placement.decode_threads", long = "decode-threads", value_name = "N")]
    pub decode_threads: Option<usize>,
    /// Samples (token windows) per evaluation batch on each replica [default: a training
    /// micro-batch: the batch's share of each replica, over --accumulate].
    #[arg(id = "placement.eval_batch_size", long = "eval-batch-size", value_name = "N")]
    pub eval_batch_size: Option<std::num::NonZeroUsize>,
    /// Gradient buckets' cap in MiB: each bucket's allreduce starts while the backward pass is
    /// still running, as DDP's bucket_cap_mb (the first bucket 1 MiB); 0 reduces the gradients
    /// after the backward pass.
    #[arg(id = "placement.bucket_cap_mb", long = "bucket-cap-mb", value_name = "MIB")]
    pub bucket_cap_mb: Option<f64>,
    /// Channels-last convolution weights and activations [default: the model's measured
    /// preference: on for lenet, for resnet18 on GPUs].
    #[arg(id = "placement.channels_last", long = "channels-last", value_name = "on|off", value_parser = parse_on_off)]
    pub channels_last: Option<bool>,
    /// Report a replica as stuck when a step takes longer than this many seconds.
    #[arg(id = "placement.step_timeout", long = "step-timeout", value_name = "SECS")]
    pub step_timeout: Option<f64>,
    /// Collective backend across processes: auto (nccl when this process's devices are GPUs,
    /// else gloo), gloo or nccl.
    #[arg(id = "placement.dist_backend", long = "dist-backend", value_name = "auto|gloo|nccl", value_parser = parse::<DistBackend>)]
    pub dist_backend: Option<DistBackend>,
    /// Seconds a rank waits for the others (at the rendezvous and in every collective) before
    /// the run stops with the missing ranks named.
    #[arg(id = "placement.dist_timeout", long = "dist-timeout", value_name = "SECS")]
    pub dist_timeout: Option<f64>,
    /// Report training statistics every N steps (and at each epoch end).
    #[arg(id = "placement.log_every", long = "log-every", value_name = "N")]
    pub log_every: Option<usize>,
    /// Stop after N steps in all (a quick check of a set-up).
    #[arg(id = "placement.max_steps", long = "max-steps", value_name = "N")]
    pub max_steps: Option<usize>,
    /// Capture each GPU replica's forward and backward passes as a CUDA graph after a few
    /// eager steps and replay it, one launch a step (auto: where the run allows it, else eagerly,
    /// the start record saying why; on: refuse a run that cannot; off: never).
    #[arg(id = "placement.cuda_graphs", long = "cuda-graphs", value_name = "auto|on|off", value_parser = parse::<CudaGraphs>)]
    pub cuda_graphs: Option<CudaGraphs>,
    /// Verify after every step that all replicas hold identical parameters (slow).
    #[arg(id = "placement.check_replicas", long = "check-replicas")]
    #[serde(skip_serializing_if = "not_set")]
    pub check_replicas: bool,
}
