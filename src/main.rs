//! The `dpt-tui` binary: parses flags, loads the data, starts the engine and shows the run in
//! the dashboard (a terminal) or as plain lines (anything else, or `--headless`).
//! Exit status: 0 done, 2 bad input or usage, 1 failure during the run, 128 + N after signal N.

#![deny(clippy::unwrap_used)]
#![forbid(unsafe_code)]

mod cli;
mod session;

use std::process::ExitCode;

use dpt_tui::{dashboard, exit};

/// How the program failed, which decides the exit status.
pub enum Failure {
    /// Bad flags or input files: exit 2.
    Input(anyhow::Error),
    /// The run itself failed: exit 1.
    Run(anyhow::Error),
}

fn main() -> ExitCode {
    #[cfg(feature = "train")]
    {
        if let Err(line) = dpt_tui::device::libtorch::check_this_process() {
            eprintln!("dpt-tui: {line}");
            return ExitCode::from(exit::BAD_INPUT);
        }
        // The main thread prepares and watches; the cores are the CPU replicas' (device::intra_op).
        dpt_tui::device::intra_op::keep_to_one_thread();
        // Before any thread exists: the environment NCCL's process groups read.
        dpt_tui::dist::nccl_env::apply();
    }
    let argv = match session::config_file::expand(std::env::args_os().collect()) {
        Ok(argv) => argv,
        Err(e) => {
            eprintln!("dpt-tui: {e}");
            return ExitCode::from(exit::BAD_INPUT);
        }
    };
    let parsed = cli::command()
        .try_get_matches_from(argv)
        .and_then(|matches| <cli::Args as clap::FromArgMatches>::from_arg_matches(&matches));
    let args = match parsed {
        Ok(args) => args,
        Err(e) if !e.use_stderr() => e.exit(), // --help and --version
        Err(e) => {
            eprintln!("dpt-tui: {}", cli::one_line(&e));
            return ExitCode::from(exit::BAD_INPUT);
        }
    };
    install_panic_hook();
    let code = match session::run(args) {
        Ok(code) => code,
        Err(Failure::Input(e)) => {
            eprintln!("dpt-tui: {e:#}");
            exit::BAD_INPUT
        }
        Err(Failure::Run(e)) => {
            eprintln!("dpt-tui: {e:#}");
            exit::FAILED
        }
    };
    #[cfg(feature = "train")]
    if dpt_tui::device::gpu_wait::abandoned() {
        // A helper thread is still inside NCCL's set-up: leave without the destructors that
        // would wait for it, once everything said is out.
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        dpt_tui::sys::exit_at_once(code);
    }
    ExitCode::from(code)
}

/// A worker's panic is caught at its thread boundary and reported once, as a failed run, so the
/// hook stays silent for workers. Any other panic first restores the terminal, so the message
/// is readable and the shell usable.
fn install_panic_hook() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        #[cfg(feature = "train")]
        if dpt_tui::engine::worker::in_worker_thread() {
            return;
        }
        dashboard::terminal::on_panic();
        default_hook(info);
    }));
}
