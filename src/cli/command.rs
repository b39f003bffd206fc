//! The subcommands: everything besides training.

use std::path::PathBuf;

use super::BenchArgs;

/// Commands besides training.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Command {
    /// Reopen the dashboard on a running job, or a sweep's board, from any directory (your most
    /// recently started job by default).
    Attach {
        /// The run directory, or the folder name of one of your running jobs, or a sweep's folder.
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
    /// Measure this machine's training speed against a plain PyTorch loop on the same device.
    ///
    /// Each case (lenet, resnet18 in f32 and bf16, mnist-net, a GPT, two replicas on one
    /// device, and with two GPUs or more data parallel over all of them and NCCL's bus
    /// bandwidth) is trained on synthetic data by dpt-tui and by the PyTorch loop, within a
    /// time budget; a table on stdout, bench.json and bench.md in --out.
    Bench(BenchArgs),
    /// Open the dashboard on a recorded run's metrics.jsonl, or draw its curves as a picture.
    Show {
        /// The run directory; more runs after it are drawn under it as baselines, with a table
        /// of the settings in which they differ. A sweep's folder prints its table of trials.
        #[arg(required = true, num_args = 1..)]
        runs: Vec<PathBuf>,
        /// Write the curves to this PNG file (960x640) instead of opening the dashboard.
        #[arg(long, value_name = "FILE")]
        png: Option<PathBuf>,
        /// Write the curves to this SVG file instead of opening the dashboard.
        #[arg(long, value_name = "FILE")]
        svg: Option<PathBuf>,
        /// Say what limited the run's steps and what to change, instead of opening the
        /// dashboard.
        #[arg(long, conflicts_with_all = ["png", "svg"])]
        why: bool,
        /// Write TensorBoard event files into RUN/tensorboard/ for a run recorded without them.
        #[arg(long, conflicts_with_all = ["png", "svg", "why"])]
        tensorboard: bool,
        /// A sweep's table of trials as CSV on stdout (a sweep's folder prints its table
        /// without it).
        #[arg(long, conflicts_with_all = ["png", "svg", "why", "tensorboard"])]
        csv: bool,
    },
    /// Watch and steer your own training script: start CMD (`python train.py`, `torchrun ...`)
    /// with the backend the `dpt_tui` Python client talks to, and open the dashboard on it.
    ///
    /// The script calls `dpt_tui.init(...)` and `run.step(...)` (python/README.md); its output
    /// goes to output.log in the run directory, its exit status is dpt-tui's.
    Run {
        /// Where the run is recorded [default: runs/<timestamp>-<script>].
        #[arg(long, value_name = "DIR")]
        run_dir: Option<PathBuf>,
        /// Plain progress lines and the script's output instead of the dashboard (automatic
        /// when stdout is not a terminal).
        #[arg(long)]
        headless: bool,
        /// Run this shell command on the run's events (finished, failed, straggler), with
        /// DPT_EVENT, DPT_RUN_DIR and DPT_MESSAGE in its environment, as the training flag does.
        #[arg(long, value_name = "CMD")]
        notify: Option<String>,
        /// Internal: serve the script of this process, which started this backend itself.
        #[arg(long, hide = true, requires = "endpoint", conflicts_with = "command")]
        for_pid: Option<u32>,
        /// Internal: the socket that process connects to.
        #[arg(long, hide = true, value_name = "PATH")]
        endpoint: Option<PathBuf>,
        /// The command and its arguments, after `--`.
        #[arg(last = true, value_name = "CMD")]
        command: Vec<std::ffi::OsString>,
    },
    /// Internal: write the generated reference pages (`docs/reference/`) into DIR.
    #[command(hide = true)]
    Reference { dir: PathBuf },
}
