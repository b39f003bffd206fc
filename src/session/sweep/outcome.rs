//! How a trial ended, decided from its process's exit, its run's records and the pruner's
//! verdict: plain data in, one outcome out, tested without processes. The runner records it
//! in `sweep.json` and says it.

use dpt_tui::record::run::RunFold;
use dpt_tui::signals::{exit_code, EX_TEMPFAIL};

/// How a trial's process exited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    pub success: bool,
    /// Its exit status (none: a signal ended it).
    pub code: Option<i32>,
}

/// How a trial ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Its run ended as runs end (every epoch, its early stop, its step limit, or `--on-nan
    /// stop` on a loss that diverged).
    Finished { diverged: bool },
    /// Its user stopped it from its dashboard or the board: not run again.
    StoppedByUser,
    /// The pruner asked it to stop, and why.
    Pruned(String),
    /// A signal stopped it (the sweep's stop, a preemption, a kill) with a checkpoint to
    /// continue from: the same sweep command continues it.
    Interrupted(Option<i32>),
    /// Anything else: its log's last error line says why.
    Failed(Option<i32>),
}

/// The outcome of a trial whose process exited as `exit`, whose records fold into `run`, that
/// the pruner asked to stop for `pruned` (if it did), while the sweep itself is `stopping` (or
/// not).
pub fn decide(exit: Exit, run: &RunFold, pruned: Option<String>, stopping: bool) -> Outcome {
    if exit.success {
        // Its user's stop took effect (it ends as a stopped run does, with status 0), also
        // when the sweep was asked to stop meanwhile.
        if run.stopped() {
            return Outcome::StoppedByUser;
        }
        return Outcome::Finished { diverged: run.diverged() };
    }
    // Asked to stop by the pruner, it ends as SIGTERM has it end (143, or 75 when SIGTERM is
    // the run's preemption signal): pruned, unless the sweep itself is stopping.
    if let Some(why) = pruned.filter(|_| !stopping) {
        return Outcome::Pruned(why);
    }
    let by_signal = [EX_TEMPFAIL, exit_code(libc::SIGINT), exit_code(libc::SIGTERM)].map(i32::from);
    match exit.code {
        None => Outcome::Interrupted(None),
        Some(code) if by_signal.contains(&code) => Outcome::Interrupted(Some(code)),
        code => Outcome::Failed(code),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dpt_tui::record::stats::FinishReason;

    fn ended(reason: Option<FinishReason>) -> RunFold {
        RunFold { finish: reason, ..RunFold::default() }
    }

    const OK: Exit = Exit { success: true, code: Some(0) };

    fn code(code: i32) -> Exit {
        Exit { success: false, code: Some(code) }
    }

    #[test]
    fn a_run_that_exits_0_finished_or_was_stopped_by_its_user() {
        let done = ended(Some(FinishReason::Completed));
        assert_eq!(decide(OK, &done, None, false), Outcome::Finished { diverged: false });
        let diverged = ended(Some(FinishReason::Diverged));
        assert_eq!(decide(OK, &diverged, None, false), Outcome::Finished { diverged: true });
        let stopped = ended(Some(FinishReason::Stopped));
        assert_eq!(decide(OK, &stopped, None, true), Outcome::StoppedByUser, "whatever the sweep does");
        // A pruner's stop that came too late: the run finished first.
        assert_eq!(decide(OK, &done, Some("behind".into()), false), Outcome::Finished { diverged: false });
    }

    #[test]
    fn a_pruned_trial_is_pruned_unless_the_sweep_is_stopping() {
        let run = ended(Some(FinishReason::Stopped));
        assert_eq!(decide(code(143), &run, Some("behind".into()), false), Outcome::Pruned("behind".into()));
        assert_eq!(decide(code(143), &run, Some("behind".into()), true), Outcome::Interrupted(Some(143)));
    }

    #[test]
    fn a_signals_exit_is_interrupted_and_any_other_failed() {
        let run = ended(None);
        for c in [75, 130, 143] {
            assert_eq!(decide(code(c), &run, None, false), Outcome::Interrupted(Some(c)), "{c}");
        }
        let killed = Exit { success: false, code: None };
        assert_eq!(decide(killed, &run, None, false), Outcome::Interrupted(None));
        assert_eq!(decide(code(1), &run, None, false), Outcome::Failed(Some(1)));
        assert_eq!(decide(code(2), &run, None, false), Outcome::Failed(Some(2)));
    }
}
