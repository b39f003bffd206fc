//! Where the training loop stands between steps: running, paused (by the user, rank 0 or the
//! NaN policy), or ending at the next step boundary and why. One state instead of separate
//! flags, so a run cannot be "stopped" and "diverged" without one reason winning. Beside it,
//! the viewers' rewind dialogs that hold the loop.

use crate::record::FinishReason;

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

#[cfg(test)]
mod tests {
    use super::*;

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
