//! Starting a sweep: its folder claimed (or continued) and locked, then the trials run in the
//! foreground or in a detached process of its own.

use std::fs::File;
use std::io::IsTerminal;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::anyhow;

use super::place::Slot;
use super::plan::{self, Plan};
use super::{hparams, read_state, runner, table, watch};
use crate::cli::Args;
use crate::Failure;
use dpt_tui::sweep::{TrialState, SWEEP_LOG};

use super::super::{configure, input, theme, watch_signals};

/// Runs the sweep `args` asks for; `argv` is the command line as typed.
pub fn run(args: &Args, argv: &[String]) -> Result<u8, Failure> {
    let (mut plan, lock) = claim(args, argv)?;
    let terminal = std::io::stdout().is_terminal() && std::io::stdin().is_terminal();
    let board = !args.detach && !args.headless && terminal;
    if board {
        // What the board needs is checked before the sweep starts without it.
        theme(args)?;
    }
    if args.detach || board {
        // The background process takes the folder's lock over.
        drop(lock);
        detach(&plan, argv)?;
        if args.detach {
            return Ok(0);
        }
        // With a terminal, the board on it, as a run's dashboard on its background job.
        return watch::watch(&plan.folder, &plan.shown.display().to_string(), watch::Opening::Started, args);
    }
    plan.file.pid = Some(std::process::id());
    let metric = configure::asked(args)?.best.metric;
    let mut sweep = runner::Sweep::open(plan, args.sweeps.prune, metric)?;
    let total = sweep.plan.file.trials.len();
    let kept = sweep.plan.file.trials.iter().filter(|t| t.state.is_settled()).count();
    let places: Vec<String> = sweep.plan.slots.iter().map(Slot::describe).collect();
    say(&format!(
        "sweep: {total} trials ({kept} done before), {} at once on {} → {}",
        places.len(),
        places.first().map_or("", String::as_str),
        sweep.plan.shown.display()
    ));
    let signals = watch_signals(args)?;
    let stopped = sweep.run_all(&signals.messages)?;
    say("");
    say(&table::text(&sweep.plan.folder, &sweep.plan.file));
    sweep.plan.file.pid = None;
    sweep.save()?;
    if let Err(e) = hparams::experiment(&sweep.plan.folder, &sweep.plan.file) {
        say(&format!("sweep: cannot write the TensorBoard experiment (the HParams view): {e}"));
    }
    let failed = sweep.count(TrialState::Failed);
    let interrupted = sweep.count(TrialState::Interrupted);
    if let Some(code) = stopped {
        say(&format!(
            "sweep: stopped; the same command continues it ({interrupted} interrupted, {failed} failed)"
        ));
        return Ok(code);
    }
    if failed + interrupted == 0 {
        return Ok(0);
    }
    Err(Failure::Run(anyhow!(
        "{failed} failed and {interrupted} interrupted of {total} trials; the same command runs them again (finished trials are kept)"
    )))
}

/// The file a sweep process holds locked in its folder while it runs it.
const LOCK_FILE: &str = ".sweep.lock";

/// The sweep `args` asks for, checked, with the states its folder holds of an earlier run of
/// the same command; the folder created and locked for this process (the lock held as long as
/// the returned file is).
fn claim(args: &Args, argv: &[String]) -> Result<(Plan, File), Failure> {
    let mut plan = plan::plan(args, argv)?;
    let (folder, shown) = (plan.folder.clone(), plan.shown.display().to_string());
    let earlier = read_state(&folder)?;
    let busy = |pid: Option<u32>| {
        let who = pid.map_or_else(
            || "another sweep process".to_owned(),
            |p| format!("another sweep process (pid {p})"),
        );
        let stop = pid.map_or_else(String::new, |p| format!(" (kill {p})"));
        input(anyhow!("{shown} is being run by {who}; wait for it or stop it{stop}"))
    };
    match &earlier {
        Some(e) if !e.same_plan(&plan.file) => {
            return Err(input(anyhow!(
                "{shown} holds another sweep (its command, swept values or trials differ); name another --run-dir, or run its own command again to continue it"
            )))
        }
        Some(_) => {}
        None => {
            let own = |name: &std::ffi::OsStr| name == LOCK_FILE || name == SWEEP_LOG;
            let entries = std::fs::read_dir(&folder).map(|d| d.flatten().any(|e| !own(&e.file_name())));
            if entries.unwrap_or(false) {
                return Err(input(anyhow!(
                    "{shown} is not empty and holds no sweep; name a new or empty folder with --run-dir"
                )));
            }
        }
    }
    std::fs::create_dir_all(&folder)
        .map_err(|e| input(anyhow!("cannot create the sweep's folder {shown}: {e}")))?;
    let lock_path = folder.join(LOCK_FILE);
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| input(anyhow!("cannot open {}: {e}", lock_path.display())))?;
    match dpt_tui::sys::try_lock_exclusive(&lock) {
        Ok(true) => {}
        Ok(false) => return Err(busy(earlier.as_ref().and_then(|e| e.pid))),
        Err(e) => return Err(input(anyhow!("cannot lock {}: {e}", lock_path.display()))),
    }
    if let Some(e) = earlier {
        plan.file.trials = e.trials;
    }
    Ok((plan, lock))
}

/// `--detach`: the checked sweep's state written, the same command (less `--detach`) started
/// in a session of its own, its lines going to `sweep.log` in the sweep's folder; says how to
/// follow and stop it.
fn detach(plan: &Plan, argv: &[String]) -> Result<u8, Failure> {
    plan.file.write(&plan.folder).map_err(input)?;
    let log_path = plan.folder.join(SWEEP_LOG);
    let shown_log = plan.shown.join(SWEEP_LOG);
    let log = File::options()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| input(anyhow!("cannot open {}: {e}", log_path.display())))?;
    let exe = std::env::current_exe()
        .map_err(|e| Failure::Run(anyhow!("cannot find dpt-tui's own executable: {e}")))?;
    let mut cmd = Command::new(exe);
    let clone = |f: &File| f.try_clone().map_err(|e| Failure::Run(e.into()));
    // The folder named as this process resolved it (a default one is named once, here).
    cmd.args(argv.iter().skip(1).filter(|a| a.as_str() != "--detach"))
        .arg(format!("--run-dir={}", plan.folder.display()))
        .stdin(Stdio::null())
        .stdout(clone(&log)?)
        .stderr(log);
    dpt_tui::sys::in_new_session(&mut cmd);
    let child =
        cmd.spawn().map_err(|e| Failure::Run(anyhow!("cannot start the sweep in the background: {e}")))?;
    let folder = plan.shown.display();
    say(&format!(
        "sweep: {} trials started in the background (pid {}) → {folder}",
        plan.file.trials.len(),
        child.id()
    ));
    say(&format!("follow it:  tail -f {}", shown_log.display()));
    say(&format!("its table:  dpt-tui show {folder}"));
    say(&format!("stop it:    kill {} (its trials checkpoint; the same command continues it)", child.id()));
    Ok(0)
}

/// A process running in `dir` (its command line has `--run-dir=DIR`, as a trial's has), if any.
pub(super) fn process_in(dir: &Path) -> Option<u32> {
    let procs = std::fs::read_dir("/proc").ok()?;
    procs
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .find(|&pid| pid != std::process::id() && runs_in(pid, dir))
}

/// Whether process `pid` is a trial running in `dir` (its command line names the folder).
pub(super) fn runs_in(pid: u32, dir: &Path) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { return false };
    let needle = format!("--run-dir={}", dir.display());
    cmdline.split(|&b| b == 0).any(|arg| arg == needle.as_bytes())
}

/// A trial's own error: the last `dpt-tui: …` line of its output.
pub(super) fn last_error(log: &Path) -> Option<String> {
    dpt_tui::said_error(&std::fs::read_to_string(log).ok()?).map(str::to_owned)
}

/// Prints a line of the sweep's; a terminal gone (SIGHUP, a dropped connection) does not stop
/// the sweep.
pub(super) fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout(), "{line}");
}
