//! What the coordinator reports from: the report window and the epoch so far, the finished
//! epochs, the stragglers already named, the phase clock, the gradient norms of the window and
//! whether a non-finite loss was already warned about.

use crate::engine::clock::PhaseClock;
use crate::engine::tally::{Tally, Window};

/// The finished epochs, for the summary and the checkpoint.
#[derive(Default)]
pub(super) struct Done {
    pub(super) epochs: usize,
    /// Training figures of the finished epochs (seconds: training time).
    pub(super) tally: Tally,
    pub(super) last_test_acc: Option<f64>,
}

pub(super) struct Reporter {
    pub(super) window: Window,
    pub(super) epoch: Window,
    pub(super) done: Done,
    /// Replicas already reported as stragglers.
    pub(super) straggled: Vec<bool>,
    /// Times the allreduce and the update, on the first replica's device.
    pub(super) clock: Option<PhaseClock>,
    /// The mean gradient's norm summed over the steps of the report window (on the device).
    pub(super) grad_norms: Option<tch::Tensor>,
    /// `--on-nan ignore` warned once.
    pub(super) nan_warned: bool,
}

impl Reporter {
    /// Before the first step, for `replicas` replicas in all.
    pub(super) fn new(replicas: usize) -> Reporter {
        Reporter {
            window: Window::new(replicas),
            epoch: Window::new(replicas),
            done: Done::default(),
            straggled: Vec::new(),
            clock: None,
            grad_norms: None,
            nan_warned: false,
        }
    }
}
