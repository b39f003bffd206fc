//! Command-line flags, parsed (`session::configure` resolves them into a training configuration);
//! the values they take are read in `values.rs`.

mod augment_args;
mod choice_args;
mod loader_args;
mod loss_scale_args;
mod values;

use std::path::PathBuf;

use clap::Parser;

pub use augment_args::AugmentArgs;
pub use choice_args::ChoiceArgs;
pub use loader_args::LoaderArgs;
pub use loss_scale_args::LossScaleArgs;
use values::{parse, parse_betas, parse_size};
pub use values::{DistBackend, LossArg, ModelArg, OnOff};

/// Commands besides training.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Command {
    /// Reopen the dashboard on a running job, from any directory (your most recently started
    /// one by default).
    Attach {
        /// The run directory, or the folder name of one of your running jobs.
        run: Option<PathBuf>,
        /// Watch without the right to pause, change the lr, save or stop.
        #[arg(long)]
        read_only: bool,
    },
    /// List your running jobs (started from any directory) and the runs in a folder.
    Ls {
        /// The folder of runs to list besides the running jobs.
        #[arg(default_value = "runs")]
        dir: PathBuf,
        /// First remove the sockets and entries that jobs which died left behind.
        #[arg(long)]
        prune: bool,
    },
    /// Check this machine: driver, NVML, libtorch, every CUDA device, NCCL, then a training
    /// step of each model on each device and the collectives (exit 0 when all is well).
    Doctor {
        /// Internal: one rank of the doctor's two-process collective check
        /// (`RANK:PORT:BACKEND`).
        #[arg(long, hide = true)]
        peer: Option<String>,
    },
    /// Open the dashboard on a recorded run's metrics.jsonl, or draw its curves as a picture.
    Show {
        /// The run directory; more runs after it are drawn under it as baselines, with a table
        /// of the settings in which they differ.
        #[arg(required = true, num_args = 1..)]
        runs: Vec<PathBuf>,
        /// Write the curves to this PNG file (960x640) instead of opening the dashboard.
        #[arg(long, value_name = "FILE")]
        png: Option<PathBuf>,
        /// Write the curves to this SVG file instead of opening the dashboard.
        #[arg(long, value_name = "FILE")]
        svg: Option<PathBuf>,
    },
}

/// Train neural networks data-parallel over several devices with libtorch, watched live.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "dpt-tui",
    version,
    about,
    args_conflicts_with_subcommands = true,
    args_override_self = true
)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Read training flags from a TOML file (keys: the flags' long names, e.g. `batch_size = 64`);
    /// flags on the command line override it. Every run directory holds its run's as config.toml.
    #[arg(long, value_name = "FILE.toml")]
    pub config: Option<PathBuf>,

    /// Start the training in the background and print how to attach to it.
    #[arg(long)]
    pub detach: bool,

    /// Internal: run as the background job of a dashboard (output to the run directory).
    #[arg(long, hide = true)]
    pub serve: bool,

    /// Model to train: lenet, resnet18 or mnist-net (d2l's reference programs: architectures and defaults),
    /// or the path of a TorchScript file of your own [default: lenet, or the resumed
    /// checkpoint's].
    #[arg(long, value_name = "NAME|FILE", value_parser = parse::<ModelArg>)]
    pub model: Option<ModelArg>,

    /// The training loss of a TorchScript model: cross-entropy on logits, or nll on
    /// log-probabilities [default: cross-entropy; the built-in models use their reference program's].
    #[arg(long, value_parser = parse::<LossArg>)]
    pub loss: Option<LossArg>,

    /// Input normalization `MEAN,STD`: the network sees `(x / 255 - MEAN) / STD` [default:
    /// 0,1 (x / 255), the MNIST net 0.1307,0.3081].
    #[arg(long, value_name = "MEAN,STD")]
    pub normalize: Option<String>,

    /// The data set: a folder of Fashion-MNIST/MNIST IDX files (.gz or raw), of CIFAR-10
    /// binary batches, an image folder (train/<class>/*, test/<class>/*), WebDataset shards
    /// (train/*.tar, val/*.tar or test/*.tar), a .npz or .safetensors file, or a folder of .npy
    /// files (x_train, y_train, x_test, y_test).
    /// [default: /usr/share/datasets/fashion-mnist, or a resumed run's own]
    #[arg(long, env = "DPT_DATA")]
    pub data: Option<PathBuf>,

    /// The format of --data when it cannot be told from the files: idx, cifar10, images, npz,
    /// safetensors, webdataset.
    #[arg(long, value_parser = parse::<dpt_tui::data::DataFormat>)]
    pub data_format: Option<dpt_tui::data::DataFormat>,

    /// Resize every image of an image folder to H,W pixels (otherwise they must all have one
    /// size).
    #[arg(long, value_name = "H,W", value_parser = parse_size)]
    pub image_size: Option<(u32, u32)>,

    /// Devices, one replica each: auto, cpu, cpu:N (N replicas on the CPU), or a list such as
    /// cuda:0,cuda:1 (a device may repeat).
    #[arg(long, default_value = "auto")]
    pub devices: String,

    /// Epochs to train [default: the model's, 10].
    #[arg(long)]
    pub epochs: Option<usize>,

    /// Global batch size, split over the replicas [default: the model's].
    #[arg(long)]
    pub batch_size: Option<usize>,

    /// Learning rate [default: the model's].
    #[arg(long, allow_hyphen_values = true)]
    pub lr: Option<f64>,

    /// The optimizer: sgd (torch.optim.SGD), adam (torch.optim.Adam) or adamw
    /// (torch.optim.AdamW) [default: sgd].
    #[arg(long, value_name = "NAME", value_parser = parse::<dpt_tui::engine::optim::OptimizerKind>)]
    pub optimizer: Option<dpt_tui::engine::optim::OptimizerKind>,

    /// SGD momentum [default: the model's].
    #[arg(long, allow_hyphen_values = true)]
    pub momentum: Option<f64>,

    /// Nesterov momentum (SGD with --momentum above 0).
    #[arg(long)]
    pub nesterov: bool,

    /// Weight decay: L2 for sgd and adam, decoupled for adamw; adam and adamw decay only
    /// tensors of two or more dimensions unless --decay-all [default: 0].
    #[arg(long, allow_hyphen_values = true)]
    pub weight_decay: Option<f64>,

    /// Adam's and AdamW's moment decay rates [default: 0.9,0.999].
    #[arg(long, value_name = "B1,B2", value_parser = parse_betas, allow_hyphen_values = true)]
    pub betas: Option<(f64, f64)>,

    /// Adam's and AdamW's denominator term [default: 1e-8].
    #[arg(long, allow_hyphen_values = true)]
    pub eps: Option<f64>,

    /// Weight decay on every parameter with adam and adamw, biases and normalization scales too.
    #[arg(long)]
    pub decay_all: bool,

    /// The learning-rate schedule, stepped once per optimizer step: constant, cosine, linear,
    /// onecycle, or step:E1,E2,… (× --lr-gamma at each epoch Ei) [default: constant].
    #[arg(long, value_name = "SHAPE", value_parser = parse::<dpt_tui::engine::optim::schedule::Shape>)]
    pub lr_schedule: Option<dpt_tui::engine::optim::schedule::Shape>,

    /// Linear warm-up over the first W optimizer steps: lr·(t+1)/W [default: 0].
    #[arg(long, value_name = "W")]
    pub warmup_steps: Option<usize>,

    /// The rate cosine and linear schedules end at [default: 0].
    #[arg(long, allow_hyphen_values = true)]
    pub min_lr: Option<f64>,

    /// The factor of each step: milestone [default: 0.1].
    #[arg(long, allow_hyphen_values = true)]
    pub lr_gamma: Option<f64>,

    /// Clip the global L2 norm of the mean gradient to MAX each step (clip_grad_norm_); the
    /// norm before clipping is reported with every window either way.
    #[arg(long, value_name = "MAX", allow_hyphen_values = true)]
    pub clip_grad_norm: Option<f64>,

    /// Gradient accumulation: each replica trains its share of a step in N micro-batches (the
    /// batch stays the global batch of one optimizer step; one allreduce per step) [default: 1].
    #[arg(long, value_name = "N")]
    pub accumulate: Option<usize>,

    /// Image folders and shards: the share of all images that may fail to decode; those are
    /// left out (named on stderr, counted in the data's description) and more than it is an
    /// error naming the first [default: 0.001].
    #[arg(long, value_name = "F")]
    pub max_bad_images: Option<f64>,

    #[command(flatten)]
    pub augmentation: AugmentArgs,

    #[command(flatten)]
    pub loader: LoaderArgs,

    /// Carve this fraction of the training set (chosen by --seed) into a validation split,
    /// evaluated every epoch; the test set is then evaluated once, at the end.
    #[arg(long, value_name = "F")]
    pub val_fraction: Option<f64>,

    #[command(flatten)]
    pub choice: ChoiceArgs,

    /// Start from these weights (a .safetensors file, or a run directory's model.safetensors),
    /// loaded by name and shape; the others keep their initial values, and the run names them.
    #[arg(long, value_name = "FILE|DIR")]
    pub init_from: Option<PathBuf>,

    /// Keep an exponential moving average of the weights with this decay (timm's ModelEmaV2:
    /// ema = decay·ema + (1 − decay)·model after every step), evaluated each epoch and saved as
    /// model_ema.safetensors.
    #[arg(long, value_name = "DECAY")]
    pub ema: Option<f64>,

    /// Label smoothing of the training loss, as F.cross_entropy(label_smoothing=EPS) [default: 0].
    #[arg(long, value_name = "EPS", allow_hyphen_values = true)]
    pub label_smoothing: Option<f64>,

    /// Linear scaling rule: the lr is --lr × batch / REF (REF: the batch --lr was tuned for).
    #[arg(long, value_name = "REF")]
    pub lr_batch_ref: Option<usize>,

    /// Seed of the initialization, the shuffles and the dropout streams [default: 0].
    #[arg(long)]
    pub seed: Option<u64>,

    /// Use only the first N training samples.
    #[arg(long, value_name = "N")]
    pub train_limit: Option<usize>,

    /// Use only the first N test samples.
    #[arg(long, value_name = "N")]
    pub test_limit: Option<usize>,

    /// Plain progress lines instead of the dashboard (automatic when stdout is not a terminal).
    #[arg(long)]
    pub headless: bool,

    /// Report training statistics every N steps (and at each epoch end).
    #[arg(long, value_name = "N", default_value_t = 50)]
    pub log_every: usize,

    /// Run directory for metrics.jsonl and the weights [default: runs/<timestamp>-<model>].
    #[arg(long, value_name = "DIR")]
    pub run_dir: Option<PathBuf>,

    /// Stop after N steps in all (a quick check of a set-up).
    #[arg(long, value_name = "N")]
    pub max_steps: Option<usize>,

    /// Intra-op threads per CPU replica [default: the cores shared among the CPU replicas].
    #[arg(long, value_name = "N")]
    pub cpu_threads: Option<usize>,

    /// Verify after every step that all replicas hold identical parameters (slow).
    #[arg(long)]
    pub check_replicas: bool,

    /// Continue a run from a checkpoint file or a run directory (its checkpoint.safetensors);
    /// the run continues in that directory unless --run-dir names another.
    #[arg(long, value_name = "PATH")]
    pub resume: Option<PathBuf>,

    /// The signal a scheduler sends before preempting the job (Slurm: `--signal=USR1@120`):
    /// every rank checkpoints at the next step boundary and exits with status 75; the same
    /// command then continues the run. USR1, USR2, TERM or INT.
    #[arg(long, value_name = "SIGNAL", default_value = "USR1", value_parser = dpt_tui::signals::parse_preempt_signal)]
    pub preempt_signal: i32,

    /// Set when `--run-dir` named a run to continue (the same command run again).
    #[arg(skip)]
    pub continuing: bool,

    /// Write a checkpoint every N epochs, or every N steps (`500steps`), or every so much time
    /// (`20m`, `90s`, `2h`), off the training thread (0: only when stopping and at the end).
    #[arg(long, value_name = "N|Nsteps|20m", default_value = "1", value_parser = parse::<dpt_tui::engine::checkpoint_every::CheckpointEvery>)]
    pub checkpoint_every: dpt_tui::engine::checkpoint_every::CheckpointEvery,

    /// Keep the K newest checkpoints under checkpoints/ in the run directory, beside
    /// checkpoint.safetensors (the newest) [default: 1, that one only].
    #[arg(long, value_name = "K", default_value_t = 1)]
    pub keep_checkpoints: usize,

    /// When the loss is NaN or infinite [default: pause in the dashboard, stop headless].
    #[arg(long, value_name = "pause|stop|ignore", value_parser = parse::<dpt_tui::engine::OnNan>)]
    pub on_nan: Option<dpt_tui::engine::OnNan>,

    /// Headless: when the final save fails (a full disk), try again this many times before
    /// exiting 1 (the dashboard instead pauses and lets you retry with `s`).
    #[arg(long, value_name = "N", default_value_t = 6)]
    pub save_retries: u32,

    /// Headless: seconds between two tries of a failed final save.
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    pub save_retry_secs: f64,

    /// Report a replica as stuck when a step takes longer than this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 600.0)]
    pub step_timeout: f64,

    /// Number format: f32, bf16 (mixed precision: bfloat16 convolutions and matrix products,
    /// f32 master weights, loss and update; for GPUs with bfloat16 tensor cores) or f16 (the
    /// same in float16, for GPUs without bfloat16 such as V100 and T4; with dynamic loss
    /// scaling).
    #[arg(long, value_name = "f32|bf16|f16", default_value = "f32", value_parser = parse::<dpt_tui::model::Precision>)]
    pub precision: dpt_tui::model::Precision,

    #[command(flatten)]
    pub scaling: LossScaleArgs,

    /// Channels-last convolution weights and activations [default: the model's measured
    /// preference: on for lenet, for resnet18 on GPUs].
    #[arg(long, value_name = "on|off")]
    pub channels_last: Option<OnOff>,

    /// Collective backend across processes: auto (nccl when this process's devices are GPUs,
    /// else gloo), gloo or nccl.
    #[arg(long, value_enum, default_value = "auto")]
    pub dist_backend: DistBackend,

    /// Gradient buckets' cap in MiB: each bucket's allreduce starts while the backward pass is
    /// still running, as DDP's bucket_cap_mb (the first bucket 1 MiB); 0 reduces the gradients
    /// after the backward pass.
    #[arg(long, value_name = "MIB", default_value_t = 25.0)]
    pub bucket_cap_mb: f64,

    /// Seconds a rank waits for the others (at the rendezvous and in every collective) before
    /// the run stops with the missing ranks named.
    #[arg(long, value_name = "SECS", default_value_t = 300.0)]
    pub dist_timeout: f64,

    /// This process's rank in a multi-process run [default: $RANK, or Slurm's $SLURM_PROCID].
    #[arg(long, value_name = "N")]
    pub rank: Option<usize>,

    /// Processes in the run [default: $WORLD_SIZE, or Slurm's $SLURM_NTASKS; 1].
    #[arg(long, value_name = "N")]
    pub world_size: Option<usize>,

    /// This process's index on its node [default: $LOCAL_RANK, or $SLURM_LOCALID; 0].
    #[arg(long, value_name = "N")]
    pub local_rank: Option<usize>,

    /// Rank 0's host, where the rendezvous store listens [default: $MASTER_ADDR, or Slurm's
    /// first node].
    #[arg(long, value_name = "HOST")]
    pub master_addr: Option<String>,

    /// The rendezvous store's port [default: $MASTER_PORT, else 29500].
    #[arg(long, value_name = "PORT")]
    pub master_port: Option<u16>,

    /// Dashboard colours: dark, light, high-contrast, monochrome, or a .toml file [default:
    /// dark, or monochrome when NO_COLOR is set].
    #[arg(long, value_name = "NAME|PATH")]
    pub theme: Option<String>,

    /// Draw the dashboard with ASCII only (automatic when the locale is not UTF-8).
    #[arg(long)]
    pub ascii: bool,

    /// Most dashboard frames per second.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=60))]
    pub fps: u32,

    /// Ring the terminal bell in the dashboard when the run finishes or fails, the loss stops
    /// being finite, or a replica straggles.
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub bell: OnOff,

    /// Run this shell command on the same events (in the background job, dashboard or not),
    /// with DPT_EVENT (finished, failed, nan, straggler), DPT_RUN_DIR, DPT_EPOCH, DPT_TEST_ACC
    /// and DPT_MESSAGE in its environment; it never holds up training (killed after 60 s).
    #[arg(long, value_name = "CMD")]
    pub notify: Option<String>,

    /// Device sampling period in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(100..=60_000))]
    pub sample_ms: u64,
}
