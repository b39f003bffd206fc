//! The clock of the coordinator's phases of a step (the allreduce the backward passes did not
//! hide, the update), on the first replica's device, which a failure names.

use crate::engine::clock::{PhaseClock, Phases};
use crate::engine::EngineError;
use dpt_core::device::DeviceId;

/// The phase clock, once the replicas are in.
pub(super) struct StepClock {
    clock: Option<PhaseClock>,
    device: DeviceId,
}

impl StepClock {
    /// Not started yet: the first replica is on `device`.
    pub(super) fn new(device: DeviceId) -> StepClock {
        StepClock { clock: None, device }
    }

    /// Times the steps' phases on `device` from now on.
    pub(super) fn start(&mut self, device: tch::Device) {
        self.clock = Some(PhaseClock::new(device, 2));
    }

    /// How steps are timed, as the start record says it.
    pub(super) fn describe(&self) -> String {
        self.clock.as_ref().map(PhaseClock::describe).unwrap_or_default()
    }

    /// Step `step` begins (`timed`: one whose phases are measured).
    pub(super) fn begin(&mut self, timed: bool, step: usize) -> Result<(), EngineError> {
        let device = self.device;
        self.running()?.start(timed, step).map_err(|e| failure(device, e))
    }

    /// Ends a phase.
    pub(super) fn mark(&mut self) -> Result<(), EngineError> {
        let device = self.device;
        self.running()?.mark().map_err(|e| failure(device, e))
    }

    /// Ends the step: the phases of a timed step whose times are read now (this one or an
    /// earlier one).
    pub(super) fn finish(&mut self) -> Result<Option<Phases>, EngineError> {
        let device = self.device;
        self.running()?.finish().map_err(|e| failure(device, e))
    }

    fn running(&mut self) -> Result<&mut PhaseClock, EngineError> {
        self.clock.as_mut().ok_or(EngineError::WorkersGone)
    }
}

fn failure(device: DeviceId, e: dpt_sys::c10d::C10dError) -> EngineError {
    EngineError::Coordinator { replica: Some(0), device: Some(device.to_string()), message: e.0 }
}
