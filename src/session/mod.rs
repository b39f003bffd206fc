//! One invocation of `dpt-tui`, by command: training (`job.rs` trains in this process, `front.rs`
//! starts it in the background and opens the dashboard on it; `restart.rs` continues a run
//! started again, `dist.rs` joins a multi-process run), `attach`, `ls`, `show`, `doctor` and
//! `bench`; a sweep of many runs (`sweep/`). The flags become a training configuration in one
//! place, `configure.rs`.

mod attach;
pub mod config_file;
mod ls;
mod script_run;
mod show;
mod sweep;
dpt_tui::training! {
    mod bench;
    mod configure;
    mod data_flags;
    mod dist;
    mod doctor;
    mod front;
    mod job;
    mod model_inputs;
    mod restart;
}

use std::time::Duration;

use anyhow::Context;

use crate::cli::{Args, Command};
use crate::Failure;
use dpt_tui::dashboard::{self, theme::Theme};
use dpt_tui::report::Format;
use dpt_tui::signals::SignalWatch;

/// Messages the headless printer may fall behind by (a blocked stdout) before the hub drops it;
/// the channel's slots are allocated up front, so this stays modest (about 5 MB).
pub(super) const PRINTER_BUFFER: usize = 1 << 16;

/// Bad input: exit 2.
fn input<E: Into<anyhow::Error>>(e: E) -> Failure {
    Failure::Input(e.into())
}

/// The run itself failed: exit 1.
fn failed<E: Into<anyhow::Error>>(context: &'static str) -> impl FnOnce(E) -> Failure {
    move |e| Failure::Run(e.into().context(context))
}

/// Runs one invocation; returns the exit status.
pub fn run(args: Args) -> Result<u8, Failure> {
    match args.command.clone() {
        Some(Command::Attach { run, read_only }) => return attach::run(run.as_deref(), read_only, &args),
        Some(Command::Ls { dir, prune }) => {
            dpt_tui::sys::end_quietly_on_closed_pipe();
            return ls::run(&dir, prune);
        }
        Some(Command::Show { runs, why: true, .. }) => {
            dpt_tui::sys::end_quietly_on_closed_pipe();
            return show::why(&runs);
        }
        Some(Command::Show { runs, tensorboard: true, .. }) => return show::tensorboard(&runs),
        Some(Command::Show { runs, csv, png, svg, .. }) if show::is_sweep(&runs) => {
            dpt_tui::sys::end_quietly_on_closed_pipe();
            return show::sweep(&runs, csv, [(png.as_deref(), Format::Png), (svg.as_deref(), Format::Svg)]);
        }
        Some(Command::Show { csv: true, .. }) => {
            return Err(input(anyhow::anyhow!("--csv writes a sweep's table; name a sweep's folder")))
        }
        Some(Command::Show { runs, png, svg, .. }) => {
            return show::run(&runs, png.as_deref(), svg.as_deref(), &args)
        }
        #[cfg(feature = "train")]
        Some(Command::Doctor { peer: Some(peer) }) => return Ok(doctor::peer(&peer)),
        #[cfg(feature = "train")]
        Some(Command::Doctor { peer: None }) => return Ok(doctor::run()),
        #[cfg(feature = "train")]
        Some(Command::Bench(bench_args)) => return bench::run(&bench_args),
        Some(Command::Run { run_dir, headless, notify, for_pid, endpoint, command }) => {
            return script_run::run(
                &script_run::Options { run_dir, headless, notify, for_pid, endpoint, command },
                &args,
            )
        }
        Some(Command::Reference { dir }) => {
            return crate::cli::reference::write(&dir).map(|()| 0).map_err(failed("writing the reference"))
        }
        #[cfg(not(feature = "train"))]
        Some(Command::Doctor { .. }) => return Err(input(without_training("`dpt-tui doctor`"))),
        #[cfg(not(feature = "train"))]
        Some(Command::Bench(_)) => return Err(input(without_training("`dpt-tui bench`"))),
        None => {}
    }
    train(args)
}

/// A command that needs training, in a binary built without it.
#[cfg(not(feature = "train"))]
fn without_training(what: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "{what} needs libtorch, and this dpt-tui was built without it (the monitor `pip install ./python` installs): \
         it runs `dpt-tui run -- CMD`, attach, ls and show; `cargo build --release` builds the full one (README)"
    )
}

/// Training: a sweep, one rank of several, a job in the foreground or the dashboard's front.
#[cfg(not(feature = "train"))]
fn train(_args: Args) -> Result<u8, Failure> {
    Err(input(without_training("training")))
}

/// Training: a sweep, one rank of several, a job in the foreground or the dashboard's front.
#[cfg(feature = "train")]
fn train(args: Args) -> Result<u8, Failure> {
    if !args.sweeps.sweep.is_empty() {
        let argv: Vec<String> =
            std::env::args_os().map(|a| a.into_string()).collect::<Result<_, _>>().map_err(|a| {
                input(anyhow::anyhow!("a sweep's arguments must be UTF-8 text: {}", a.to_string_lossy()))
            })?;
        return sweep::run(&args, &argv);
    }
    // One process of several (torchrun, srun, by hand): every rank trains in the foreground;
    // rank 0 serves its socket, so `dpt-tui attach` opens the dashboard on the whole run.
    let asked = configure::asked(&args)?;
    let devices = &asked.placement.devices;
    if let Some(launch) = dist::launch(&args)? {
        return job::run(&args, &asked, dpt_tui::device::Machine::detect(devices), Some(launch));
    }
    use std::io::IsTerminal;
    let terminal = std::io::stdout().is_terminal() && std::io::stdin().is_terminal();
    if args.serve || (!args.detach && (args.headless || !terminal)) {
        return job::run(&args, &asked, dpt_tui::device::Machine::detect(devices), None);
    }
    // The front only starts the job: it counts GPUs through NVML and never initializes CUDA.
    front::run(&args, &asked, dpt_tui::device::Machine::survey(devices), terminal)
}

/// The dashboard's theme from `--theme` and `NO_COLOR`.
fn theme(args: &Args) -> Result<Theme, Failure> {
    Theme::select(args.theme.as_deref(), std::env::var("NO_COLOR").ok().as_deref()).map_err(input)
}

fn dashboard_options(args: &Args, theme: Theme) -> dashboard::Options {
    dashboard::Options {
        theme,
        ascii: args.ascii || !dashboard::locale_is_utf8(),
        fps: args.fps,
        sample: Duration::from_millis(args.sample_ms),
        bell: args.bell == crate::cli::OnOff::On,
    }
}

/// What to tell a user whose run ended early: how to resume it, if a checkpoint exists.
fn resume_from_checkpoint(run_dir: &std::path::Path) -> String {
    if run_dir.join(dpt_tui::run_dir::CHECKPOINT_FILE).is_file() {
        format!("resume with: dpt-tui --resume {} (from the last checkpoint)", run_dir.display())
    } else {
        format!("no checkpoint was written in {}; nothing to resume", run_dir.display())
    }
}

/// Signals as messages, for the dashboard or the headless loop.
fn watch_signals(args: &Args) -> Result<SignalWatch, Failure> {
    SignalWatch::start(args.preempt_signal).context("cannot watch signals").map_err(Failure::Run)
}

/// The run's TensorBoard event file for this attempt; without one (a read-only folder) the run
/// trains and says so.
pub(super) fn tensorboard(run_dir: &std::path::Path) -> Option<dpt_tui::record::tensorboard::TensorBoard> {
    match dpt_tui::record::tensorboard::TensorBoard::create(
        run_dir,
        dpt_tui::unix_now(),
        &dpt_tui::hostname(),
    ) {
        Ok(tb) => Some(tb),
        Err(e) => {
            eprintln!(
                "dpt-tui: warning: no TensorBoard event file in {}/tensorboard ({e})",
                run_dir.display()
            );
            None
        }
    }
}
