//! Where the training loop stands between steps: running, paused (by the user, rank 0 or the
//! NaN policy), or ending at the next step boundary and why. One state instead of separate
//! flags, so a run cannot be "stopped" and "diverged" without one reason winning. Beside it,
//! the viewers' rewind dialogs that hold the loop, and the [`Gate`] that holds both with the
//! policy for a loss that stops being finite, saying each change as whoever watches sees it.

use crate::engine::config::OnNan;
use crate::record::{Change, FinishReason};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Flow {
    #[default]
    Running,
    Paused,
    /// Ends at the next step boundary (an early stop: at the end of its epoch), for this reason.
    Ending(FinishReason),
}

/// How much a reason to end outweighs another: divergence (the weights are bad) over
/// preemption (exit 75 to be requeued) over a stop over an early stop.
fn weight(r: FinishReason) -> u8 {
    match r {
        FinishReason::Diverged => 3,
        FinishReason::Preempted => 2,
        FinishReason::Stopped => 1,
        _ => 0,
    }
}

impl Flow {
    /// Pauses a running loop; whether that changed anything.
    pub fn pause(&mut self) -> bool {
        let was = *self == Flow::Running;
        if was {
            *self = Flow::Paused;
        }
        was
    }

    /// Resumes a paused loop; whether that changed anything.
    pub fn resume(&mut self) -> bool {
        let was = *self == Flow::Paused;
        if was {
            *self = Flow::Running;
        }
        was
    }

    /// Ends the loop for `why`, unless it ends for a weightier reason already; whether `why` is
    /// now the reason.
    pub fn end(&mut self, why: FinishReason) -> bool {
        match *self {
            Flow::Ending(now) if weight(now) >= weight(why) => false,
            _ => {
                *self = Flow::Ending(why);
                true
            }
        }
    }

    pub fn is_paused(self) -> bool {
        self == Flow::Paused
    }

    /// Whether the loop waits at the step boundary: paused, or running and held. A loop that
    /// ends goes on to its end: a stop outranks an open dialog.
    pub fn waits(self, holds: Holds) -> bool {
        match self {
            Flow::Paused => true,
            Flow::Running => holds.any(),
            Flow::Ending(_) => false,
        }
    }

    /// Why the loop ends at the next step boundary, if it does (an early stop ends at its
    /// epoch's end, and is not a step boundary's business).
    pub fn stopping(self) -> Option<FinishReason> {
        match self {
            Flow::Ending(FinishReason::EarlyStopped) => None,
            Flow::Ending(r) => Some(r),
            _ => None,
        }
    }

    pub fn diverged(self) -> bool {
        self == Flow::Ending(FinishReason::Diverged)
    }

    pub fn early_stopped(self) -> bool {
        self == Flow::Ending(FinishReason::EarlyStopped)
    }
}

/// The viewers whose rewind dialog is open, each holding the loop once (the socket's server
/// takes back the hold of a viewer that leaves): counted, so that one dialog closing does not
/// let the loop go under another that is still open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Holds(usize);

impl Holds {
    /// One more viewer holds (`on`), or one lets go.
    pub fn set(&mut self, on: bool) {
        self.0 = if on { self.0 + 1 } else { self.0.saturating_sub(1) };
    }

    pub fn any(self) -> bool {
        self.0 > 0
    }
}

/// The loop's gate at step boundaries: where it stands, the dialogs holding it, and whether
/// `--on-nan ignore` has warned already. Each change returns the record that says `paused` or
/// `resumed` where it changed whether the loop waits: to whoever watches, a hold is a pause,
/// and a pause under a hold changes nothing.
#[derive(Debug, Default)]
pub(super) struct Gate {
    flow: Flow,
    holds: Holds,
    nan_warned: bool,
}

impl Gate {
    /// Where the loop stands.
    pub fn flow(&self) -> Flow {
        self.flow
    }

    /// Whether the loop waits at this boundary: paused, or held by a viewer's rewind dialog.
    pub fn waits(&self) -> bool {
        self.flow.waits(self.holds)
    }

    fn steer(&mut self, global_step: usize, change: impl FnOnce(&mut Gate)) -> Option<Change> {
        let was = self.waits();
        change(self);
        match (was, self.waits()) {
            (false, true) => Some(Change::Paused { global_step }),
            (true, false) => Some(Change::Resumed { global_step }),
            _ => None,
        }
    }

    pub fn pause(&mut self, global_step: usize) -> Option<Change> {
        self.steer(global_step, |g| {
            g.flow.pause();
        })
    }

    /// Resumes a paused loop; another viewer's `p` does not let the run go from under an open
    /// dialog (refused, with the reason).
    pub fn resume(&mut self, global_step: usize) -> Option<Change> {
        if !self.flow.is_paused() && self.waits() {
            return Some(Change::Refused {
                reason: "a rewind dialog is open on the run: it goes on when the dialog closes".to_owned(),
            });
        }
        self.steer(global_step, |g| {
            g.flow.resume();
        })
    }

    /// A pending rewind lets a paused loop go on (a dialog's hold still keeps it until the
    /// dialog lets go).
    pub fn release(&mut self, global_step: usize) -> Option<Change> {
        self.steer(global_step, |g| {
            g.flow.resume();
        })
    }

    /// A viewer's dialog holds the loop (`on`), or lets go.
    pub fn hold(&mut self, on: bool, global_step: usize) -> Option<Change> {
        self.steer(global_step, |g| g.holds.set(on))
    }

    /// Rank 0's pause, followed on another rank.
    pub fn follow(&mut self, paused: bool, global_step: usize) -> Option<Change> {
        self.steer(global_step, |g| {
            if paused {
                g.flow.pause();
            } else {
                g.flow.resume();
            }
        })
    }

    /// Ends the loop for `why` (see [`Flow::end`]); whether `why` is now the reason.
    pub fn end(&mut self, why: FinishReason) -> bool {
        self.flow.end(why)
    }

    /// The NaN policy for a loss found not finite at step `at`: the records it causes.
    pub fn not_finite(&mut self, policy: OnNan, at: usize) -> Vec<Change> {
        match policy {
            OnNan::Ignore if std::mem::replace(&mut self.nan_warned, true) => Vec::new(),
            OnNan::Ignore => vec![Change::NotFinite { global_step: at, then: policy }],
            OnNan::Pause => {
                let mut said = vec![Change::NotFinite { global_step: at, then: policy }];
                said.extend(self.pause(at));
                said
            }
            OnNan::Stop => {
                self.flow.end(FinishReason::Diverged);
                vec![Change::NotFinite { global_step: at, then: policy }]
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_says_paused_and_resumed_only_where_the_loop_changes_whether_it_waits() {
        let mut g = Gate::default();
        assert_eq!(g.pause(3), Some(Change::Paused { global_step: 3 }));
        assert_eq!(g.hold(true, 3), None, "a hold under a pause changes nothing");
        assert_eq!(g.resume(4), None, "still held");
        assert!(g.waits());
        assert!(
            matches!(g.resume(4), Some(Change::Refused { .. })),
            "another viewer's resume under an open dialog is refused"
        );
        assert_eq!(g.hold(false, 5), Some(Change::Resumed { global_step: 5 }));
        assert_eq!(g.follow(true, 6), Some(Change::Paused { global_step: 6 }));
        assert_eq!(g.follow(true, 6), None);
        assert_eq!(g.release(7), Some(Change::Resumed { global_step: 7 }));
    }

    #[test]
    fn the_nan_policy_warns_once_when_ignoring_pauses_or_ends_the_run() {
        let mut g = Gate::default();
        let ignore = g.not_finite(OnNan::Ignore, 5);
        assert_eq!(ignore, vec![Change::NotFinite { global_step: 5, then: OnNan::Ignore }]);
        assert!(g.not_finite(OnNan::Ignore, 6).is_empty(), "said once");
        let pause = g.not_finite(OnNan::Pause, 7);
        assert_eq!(pause.len(), 2, "{pause:?}");
        assert!(g.waits());
        let mut g = Gate::default();
        assert_eq!(g.not_finite(OnNan::Stop, 8).len(), 1);
        assert!(g.flow().diverged());
    }

    #[test]
    fn a_pause_holds_a_running_loop_only() {
        let mut f = Flow::default();
        assert!(f.pause() && f.is_paused());
        assert!(!f.pause(), "already paused");
        assert!(f.resume() && !f.resume());
        assert!(f.end(FinishReason::Stopped));
        assert!(!f.pause() && !f.resume(), "an ending loop neither pauses nor resumes");
        assert_eq!(f.stopping(), Some(FinishReason::Stopped));
    }

    #[test]
    fn a_held_loop_waits_until_every_hold_is_let_go_and_a_pause_outlasts_them() {
        let mut holds = Holds::default();
        assert!(!Flow::Running.waits(holds));
        holds.set(true);
        holds.set(true);
        assert!(Flow::Running.waits(holds), "two dialogs open");
        holds.set(false);
        assert!(Flow::Running.waits(holds), "one still open");
        holds.set(false);
        holds.set(false);
        assert!(!Flow::Running.waits(holds), "a let-go too many takes nothing from a later hold");
        holds.set(true);
        assert!(Flow::Running.waits(holds));
        assert!(Flow::Paused.waits(Holds::default()), "paused by the user");
        assert!(!Flow::Ending(FinishReason::Stopped).waits(holds), "a stop goes past a dialog");
    }

    #[test]
    fn the_weightier_reason_to_end_wins() {
        let mut f = Flow::Paused;
        assert!(f.end(FinishReason::Stopped), "a stop ends a pause");
        assert!(f.end(FinishReason::Preempted), "preemption outweighs a stop");
        assert!(!f.end(FinishReason::Stopped));
        assert!(f.end(FinishReason::Diverged));
        assert!(!f.end(FinishReason::Preempted), "divergence is kept");
        assert!(f.diverged());
        let mut early = Flow::Running;
        assert!(early.end(FinishReason::EarlyStopped) && early.early_stopped());
        assert_eq!(early.stopping(), None, "an early stop waits for its epoch's end");
        assert!(early.end(FinishReason::Stopped));
    }
}
