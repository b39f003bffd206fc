//! A sweep under way: its trials started as child processes, as many at once as there are
//! places, the next as one ends; each end recorded in `sweep.json` (finished, interrupted,
//! pruned, failed) and said in a line; a stop signal passed on to the running trials; and an
//! earlier sweep process's trials settled before anything starts.

use std::collections::VecDeque;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};

use crate::Failure;
use dpt_core::best::BestMetric;
use dpt_tui::record::run::RunFold;
use dpt_tui::record::tensorboard::SessionStatus;
use dpt_tui::signals::SignalMsg;
use dpt_tui::sweep::prune::Prune;
use dpt_tui::sweep::TrialState;

use super::plan::Plan;
use super::start::{last_error, process_in, runs_in, say};
use super::outcome::{self, Outcome};
use super::{hparams, input, pruning, table};

/// How long the sweep waits for an earlier sweep's trial process (its sweep killed) to stop.
const EARLIER_STOP: Duration = Duration::from_secs(120);
/// How often a pruning sweep reads its running trials' new records.
const PRUNE_POLL: Duration = Duration::from_millis(500);

/// A sweep under way.
pub struct Sweep {
    pub plan: Plan,
    started: Instant,
    pruning: pruning::Pruning,
    /// A signal asked the sweep to stop: the trials ending now were stopped by it.
    stopping: bool,
}

/// A trial's process ended.
struct Ended {
    trial: usize,
    slot: usize,
    status: std::io::Result<ExitStatus>,
    seconds: f64,
}

impl Sweep {
    /// The sweep of `plan`, its state kept in its folder's `sweep.json`: an earlier sweep
    /// process's trials settled first ([`Sweep::settle_earlier`]), then the pruner (`rule`, on
    /// `metric` until the trials' runs say theirs) set up from what they left, and the state
    /// written.
    pub fn open(plan: Plan, rule: Prune, metric: BestMetric) -> Result<Sweep, Failure> {
        // Nothing is judged while the earlier trials settle.
        let settling = pruning::Pruning::new(Prune::None, metric, &plan.folder, &plan.file.trials);
        let mut sweep = Sweep { plan, started: Instant::now(), pruning: settling, stopping: false };
        sweep.settle_earlier()?;
        sweep.pruning = pruning::Pruning::new(rule, metric, &sweep.plan.folder, &sweep.plan.file.trials);
        sweep.save()?;
        Ok(sweep)
    }

    pub fn count(&self, state: TrialState) -> usize {
        self.plan.file.trials.iter().filter(|t| t.state == state).count()
    }

    pub fn save(&self) -> Result<(), Failure> {
        self.plan.file.write(&self.plan.folder).map_err(|e| Failure::Run(e.into()))
    }

    /// An earlier sweep process's trials: any process still running in a trial's directory
    /// (a killed sweep's trial, stopping at its next step with a checkpoint) is waited for;
    /// those left running are then continued, or counted finished where their records say so;
    /// a failed trial runs again, its run directory kept beside when it holds no checkpoint to
    /// continue, and so does an interrupted one without a checkpoint.
    fn settle_earlier(&mut self) -> Result<(), Failure> {
        for i in 0..self.plan.file.trials.len() {
            let dir = self.plan.trial_dir(i);
            let t = &mut self.plan.file.trials[i];
            if t.state.is_settled() {
                continue;
            }
            if let Some(pid) = process_in(&dir) {
                say(&format!("sweep: waiting for {}'s earlier process (pid {pid}) to stop", t.dir));
                let deadline = Instant::now() + EARLIER_STOP;
                while runs_in(pid, &dir) {
                    if Instant::now() > deadline {
                        return Err(input(anyhow!(
                            "{} still runs in process {pid} from an earlier sweep; stop it (kill {pid}) and run the command again",
                            t.dir
                        )));
                    }
                    // Not our child: nothing to wait on but its entry in /proc.
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
            if t.state == TrialState::Running {
                // Its end was not seen: its records tell whether it completed.
                t.state = match RunFold::read(&dir).unwrap_or_default().completed() {
                    true => TrialState::Finished,
                    false => TrialState::Interrupted,
                };
                t.pid = None;
            }
            // An attempt that failed, or stopped before its first checkpoint, leaves a run
            // directory the trial cannot continue: it is kept aside and the trial starts anew.
            let no_checkpoint = !dpt_tui::persist::checkpoint::checkpoint_path(&dir).is_file();
            let again = matches!(t.state, TrialState::Failed | TrialState::Interrupted);
            if again && no_checkpoint && dir.exists() {
                let label = t.state.label();
                let kept = (1..).map(|n| dir.with_extension(format!("{label}-{n}"))).find(|p| !p.exists());
                if let Some(kept) = kept {
                    std::fs::rename(&dir, &kept).map_err(|e| {
                        Failure::Run(anyhow!("cannot move the {label} {} aside: {e}", dir.display()))
                    })?;
                    // The new attempt starts at its first epoch: no rung is behind it.
                    t.rungs.clear();
                    say(&format!(
                        "sweep: {} {label} before without a checkpoint; its attempt is kept as {}",
                        t.dir,
                        kept.display()
                    ));
                }
            }
        }
        Ok(())
    }

    /// Runs every trial not finished, as many at once as there are slots. A stop signal
    /// (SIGINT, SIGTERM) or the preemption signal is passed on to the running trials, which
    /// checkpoint and stop, and no trial starts after it; returns then the sweep's exit status.
    pub fn run_all(
        &mut self,
        signals: &crossbeam_channel::Receiver<SignalMsg>,
    ) -> Result<Option<u8>, Failure> {
        let mut queue: VecDeque<usize> = (0..self.plan.file.trials.len())
            .filter(|&i| !self.plan.file.trials[i].state.is_settled())
            .collect();
        let mut free: Vec<usize> = (0..self.plan.slots.len()).rev().collect();
        let (tx, rx) = crossbeam_channel::unbounded::<Ended>();
        let mut running: Vec<usize> = Vec::new();
        let mut stopped = None;
        let mut signals = signals.clone();
        // The trials' records are read for the pruner this often; nothing is read without one.
        let ticks = match self.pruning.active() {
            true => crossbeam_channel::tick(PRUNE_POLL),
            false => crossbeam_channel::never(),
        };
        loop {
            while let (Some(&trial), Some(slot)) = (queue.front(), free.pop()) {
                queue.pop_front();
                match self.start(trial, slot, tx.clone()) {
                    Ok(()) => running.push(trial),
                    Err(e) => {
                        free.push(slot);
                        self.mark_failed(trial, format!("{e:#}"))?;
                    }
                }
            }
            if running.is_empty() {
                return Ok(stopped);
            }
            crossbeam_channel::select! {
                recv(rx) -> ended => {
                    let ended = ended.map_err(|e| Failure::Run(e.into()))?;
                    running.retain(|&t| t != ended.trial);
                    free.push(ended.slot);
                    self.ended(ended)?;
                }
                recv(ticks) -> _ => self.prune()?,
                recv(signals) -> msg => {
                    let (signal, code) = match msg {
                        Ok(SignalMsg::Stop(n)) => (n, dpt_tui::signals::exit_code(n)),
                        Ok(SignalMsg::Preempt(n)) => (n, dpt_tui::signals::EX_TEMPFAIL),
                        // The terminal is gone: the sweep goes on, its lines unseen.
                        Ok(SignalMsg::Hangup) => continue,
                        Err(_) => {
                            signals = crossbeam_channel::never();
                            continue;
                        }
                    };
                    stopped.get_or_insert(code);
                    self.stopping = true;
                    queue.clear();
                    say(&format!(
                        "[{}] sweep: {}: the running trials checkpoint and stop; no other trial starts",
                        self.clock(),
                        dpt_tui::signals::name(signal)
                    ));
                    for &t in &running {
                        if let Some(pid) = self.plan.file.trials[t].pid {
                            // A trial already gone has nothing to stop.
                            let _ = dpt_tui::sys::signal_process(pid, signal);
                        }
                    }
                }
            }
        }
    }

    /// Starts trial `i` in slot `slot`; its end is sent on `tx`.
    fn start(&mut self, i: usize, slot: usize, tx: crossbeam_channel::Sender<Ended>) -> anyhow::Result<()> {
        let place = self.plan.slots[slot].clone();
        let argv = self.plan.trial_argv(i, &place);
        let log_path = self.log_path(i);
        let log = File::options()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("cannot open {}", log_path.display()))?;
        let exe = std::env::current_exe().context("cannot find dpt-tui's own executable")?;
        // This process's own executable, also when its file was replaced since it started (an
        // upgrade during a long sweep): every trial then runs the sweep's version, named as
        // its file is.
        let own = Path::new("/proc/self/exe");
        let mut cmd = Command::new(if own.exists() { own } else { exe.as_path() });
        let name = exe.to_string_lossy();
        std::os::unix::process::CommandExt::arg0(&mut cmd, name.trim_end_matches(" (deleted)"));
        cmd.args(&argv).stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log);
        if let Some(gpus) = &place.visible {
            cmd.env("CUDA_VISIBLE_DEVICES", gpus);
        }
        dpt_tui::sys::terminate_with_parent(&mut cmd);
        let mut child = cmd.spawn().context("cannot start the trial")?;
        let t = &mut self.plan.file.trials[i];
        t.state = TrialState::Running;
        t.pid = Some(child.id());
        t.devices = place.describe();
        t.reason = None;
        let continues = dpt_tui::persist::checkpoint::checkpoint_path(&self.plan.trial_dir(i)).is_file();
        self.pruning.started(i, &self.plan.trial_dir(i));
        say(&format!(
            "[{}] {} {} on {}: {}",
            self.clock(),
            self.name(i),
            if continues { "continues" } else { "started" },
            place.describe(),
            self.plan.describe(i)
        ));
        let started = Instant::now();
        let pid = child.id();
        let waiter = std::thread::Builder::new().name(format!("dpt-trial-{i}")).spawn(move || {
            let status = child.wait();
            let _ = tx.send(Ended { trial: i, slot, status, seconds: started.elapsed().as_secs_f64() });
        });
        if let Err(e) = waiter {
            // Nothing would see it end: it is asked to stop (it checkpoints), and counted
            // interrupted by the next sweep, which waits for it first.
            let _ = dpt_tui::sys::terminate_process(pid);
            say(&format!("sweep: cannot watch {} (a thread: {e}); it is stopped", self.name(i)));
            return Err(anyhow!("cannot start a thread to wait for the trial: {e}"));
        }
        // The trial runs: a state that cannot be written is said, and written at its next change.
        if let Err(Failure::Input(e) | Failure::Run(e)) = self.save() {
            say(&format!("sweep: {e:#}"));
        }
        Ok(())
    }

    /// Records how a trial's process ended, and says so.
    fn ended(&mut self, e: Ended) -> Result<(), Failure> {
        let i = e.trial;
        let status = match e.status {
            Ok(s) => s,
            Err(err) => return self.mark_failed(i, format!("cannot wait for its process: {err}")),
        };
        let dir = self.plan.trial_dir(i);
        let run = RunFold::read(&dir).unwrap_or_default();
        // A trial its user stopped did not finish: the pruner does not compare others with it.
        let asked_to_stop = self.pruning.ended(i, status.success() && !run.stopped());
        let t = &mut self.plan.file.trials[i];
        t.pid = None;
        t.rungs = self.pruning.rungs(i).to_vec();
        let exit = outcome::Exit { success: status.success(), code: status.code() };
        let (name, clock) = (self.name(i), self.clock());
        match outcome::decide(exit, &run, asked_to_stop, self.stopping) {
            Outcome::Finished { diverged } => {
                let status = if diverged { SessionStatus::Failure } else { SessionStatus::Success };
                self.session_end(i, status);
                self.plan.file.trials[i].state = TrialState::Finished;
                let result = table::TrialResult::of(&run);
                say(&format!("[{clock}] {name} finished in {:.1} s: {}", e.seconds, result.line()));
            }
            Outcome::StoppedByUser => {
                self.session_end(i, SessionStatus::Success);
                let t = &mut self.plan.file.trials[i];
                t.state = TrialState::Stopped;
                t.reason = Some("stopped by its user".to_owned());
                say(&format!(
                    "[{clock}] {name} was stopped by its user after {} epochs; its place goes to the next trial",
                    run.epochs.len()
                ));
            }
            Outcome::Pruned(why) => {
                let t = &mut self.plan.file.trials[i];
                t.state = TrialState::Pruned;
                t.reason = Some(why);
                say(&format!("[{clock}] {name} stopped early; its place goes to the next trial"));
            }
            Outcome::Interrupted(code) => {
                self.plan.file.trials[i].state = TrialState::Interrupted;
                let how = code.map_or_else(|| "by a signal".to_owned(), |c| format!("with status {c}"));
                say(&format!("[{clock}] {name} was interrupted ({how}); the same sweep command continues it"));
            }
            Outcome::Failed(code) => {
                let reason = last_error(&self.log_path(i))
                    .unwrap_or_else(|| format!("exit status {}", code.unwrap_or(-1)));
                return self.mark_failed(i, reason);
            }
        }
        self.save()
    }

    /// Writes how trial `i` ended for TensorBoard's HParams view; a failure is said, not fatal.
    fn session_end(&self, i: usize, status: SessionStatus) {
        if let Err(e) = hparams::session_end(&self.plan.trial_dir(i), status) {
            say(&format!("sweep: cannot write {}'s end for TensorBoard: {e}", self.plan.file.trials[i].dir));
        }
    }

    /// Judges the running trials' new epochs; asks those that fell behind to stop (SIGTERM:
    /// they checkpoint and end, and their place goes to the next trial).
    fn prune(&mut self) -> Result<(), Failure> {
        for (t, why) in self.pruning.poll() {
            say(&format!("[{}] {} pruned: {why}", self.clock(), self.name(t)));
            if let Some(pid) = self.plan.file.trials[t].pid {
                // A trial already gone is recorded as it ended.
                let _ = dpt_tui::sys::terminate_process(pid);
            }
        }
        Ok(())
    }

    fn mark_failed(&mut self, i: usize, reason: String) -> Result<(), Failure> {
        self.session_end(i, SessionStatus::Failure);
        let t = &mut self.plan.file.trials[i];
        t.state = TrialState::Failed;
        t.pid = None;
        t.reason = Some(reason.clone());
        say(&format!(
            "[{}] {} failed: {reason} (its output: {})",
            self.clock(),
            self.name(i),
            self.log_path(i).display()
        ));
        self.save()
    }

    /// `trial-002 (3/4)`.
    fn name(&self, i: usize) -> String {
        format!("{} ({}/{})", self.plan.file.trials[i].dir, i + 1, self.plan.file.trials.len())
    }

    fn log_path(&self, i: usize) -> PathBuf {
        self.plan.folder.join(format!("{}.log", self.plan.file.trials[i].dir))
    }

    /// The time since the sweep process started, as `mm:ss`.
    fn clock(&self) -> String {
        let s = self.started.elapsed().as_secs();
        format!("{:02}:{:02}", s / 60, s % 60)
    }
}
