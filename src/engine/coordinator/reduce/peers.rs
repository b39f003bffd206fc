//! Who sums with whom: this process's replicas (by tensor copies or one NCCL call over its
//! GPUs) and the other processes of the run. Both ways of reducing (`all_reduce.rs`,
//! `to_owners.rs`) sum through these.

use std::time::Duration;

use tch::Tensor;

use crate::dist::World;
use crate::engine::allreduce::{sum_into_first, LocalReduce};
use crate::engine::clock;
use crate::engine::EngineError;
use dpt_core::device::DeviceId;
use dpt_sys::c10d::{nccl_local_allreduce, set_thread_device, SideStream, Work};

/// This process's replicas, how they are summed, and the other processes.
pub(super) struct Peers {
    pub(super) world: Option<Box<World>>,
    /// This process's replicas' devices.
    pub(super) devices: Vec<DeviceId>,
    /// How the local replicas' gradients are summed.
    pub(super) local: LocalReduce,
}

/// Side stream guards of several GPUs, left in the reverse order they were entered (each
/// restores the device and stream that were current when it was entered).
pub(super) struct SideStreams(Vec<SideStream>);

impl Drop for SideStreams {
    fn drop(&mut self) {
        while self.0.pop().is_some() {}
    }
}

impl Peers {
    pub(super) fn new(world: Option<Box<World>>, devices: &[DeviceId]) -> Peers {
        let local = LocalReduce::plan(devices, dpt_sys::c10d::nccl_compiled());
        Peers { world, devices: devices.to_vec(), local }
    }

    /// This process's replicas as (global index of the first, replicas in the whole run).
    pub(super) fn span(&self) -> (usize, usize) {
        match &self.world {
            Some(w) => (w.replica_offset(), w.total_replicas()),
            None => (0, self.devices.len()),
        }
    }

    /// The device of global replica `replica`, with its rank in a multi-process run.
    pub(super) fn replica_device(&self, replica: usize) -> String {
        match &self.world {
            Some(w) => w
                .devices
                .iter()
                .enumerate()
                .flat_map(|(rank, ds)| ds.iter().map(move |d| format!("rank {rank} {d}")))
                .nth(replica)
                .unwrap_or_else(|| format!("replica {replica}")),
            None => self.devices.get(replica).map_or_else(String::new, ToString::to_string),
        }
    }

    /// For the screen and the record: `copies through cpu + gloo across 2 ranks`.
    pub(super) fn describe(&self) -> String {
        let local = self.local.describe(&self.devices);
        let across = self.world.as_deref().map_or(String::new(), |w| {
            let why = w.backend_note.as_ref().map_or(String::new(), |n| format!(" ({n})"));
            format!(" + {} across {} ranks{why}", format!("{:?}", w.backend).to_lowercase(), w.size)
        });
        format!("{local}{across}")
    }

    /// Sums `grads` (one per local replica) over the local replicas; returns the tensor that
    /// holds the sum and that the ranks then sum (the first replica's, the first GPU's).
    pub(super) fn sum_local(&self, grads: &mut [Tensor]) -> Result<Tensor, EngineError> {
        match &self.local {
            LocalReduce::Copies => {
                sum_into_first(grads);
                Ok(grads[0].shallow_clone())
            }
            LocalReduce::Nccl { groups } => {
                let _guard = tch::no_grad_guard();
                for g in groups {
                    for &m in &g[1..] {
                        let other = grads[m].shallow_clone();
                        let _ = grads[g[0]].g_add_(&other);
                    }
                }
                let mut firsts: Vec<Tensor> = groups.iter().map(|g| grads[g[0]].shallow_clone()).collect();
                nccl_local_allreduce(&mut firsts)?;
                Ok(firsts.swap_remove(0))
            }
        }
    }

    /// Each GPU's sum of a `sum_local` over NCCL (whose side streams are joined before the
    /// sums are read or their buffers reused); none through copies.
    pub(super) fn gpu_sums(&self, grads: &[Tensor]) -> Vec<Tensor> {
        match &self.local {
            LocalReduce::Nccl { groups } => groups.iter().map(|g| grads[g[0]].shallow_clone()).collect(),
            LocalReduce::Copies => Vec::new(),
        }
    }

    /// Per local replica, which of `grads` holds its sum after `sum_local` within one process
    /// (its GPU's first replica's under NCCL, the first replica's through copies).
    pub(super) fn holder_of(&self, replica: usize) -> usize {
        match &self.local {
            LocalReduce::Nccl { groups } => groups.iter().find(|g| g.contains(&replica)).map_or(0, |g| g[0]),
            LocalReduce::Copies => 0,
        }
    }

    /// The side stream of every GPU of this process made current, when their sums run there
    /// (NCCL within the process); none otherwise.
    pub(super) fn side_streams(&self) -> Result<SideStreams, EngineError> {
        let mut guards = SideStreams(Vec::new());
        let LocalReduce::Nccl { groups } = &self.local else { return Ok(guards) };
        for g in groups {
            if let Some(DeviceId::Cuda(i)) = self.devices.get(g[0]) {
                guards.0.push(SideStream::enter(*i)?);
            }
        }
        Ok(guards)
    }

    /// The side stream a collective across the ranks of `first` (a local NCCL sum) is launched
    /// from, so that c10d's wait for the current stream waits for that sum; none otherwise.
    pub(super) fn launch_stream(&self, first: &Tensor) -> Result<Option<SideStream>, EngineError> {
        Ok(match (&self.local, first.device()) {
            (LocalReduce::Nccl { .. }, tch::Device::Cuda(i)) => Some(SideStream::enter(i)?),
            _ => None,
        })
    }

    /// Waits for collectives across the ranks (none in a one-process run).
    pub(super) fn finish_world(&self, in_flight: Vec<Work<'static>>) -> Result<(), EngineError> {
        match &self.world {
            Some(w) => Ok(w.finish(in_flight)?),
            None => Ok(()),
        }
    }

    /// Makes NCCL's communicators between `devices` (what the first allreduce would do, and
    /// where a machine whose peer-to-peer set-up hangs hangs) on a helper thread, within the
    /// step `timeout` (`hang`: a test's set-up that never returns).
    pub(super) fn set_up_nccl(&self, devices: Vec<tch::Device>, hang: bool, timeout: Duration) -> Result<(), EngineError> {
        let names: Vec<String> = self.devices.iter().map(ToString::to_string).collect();
        let waiting = clock::waiting("NCCL's communicator set-up", names.join(","), timeout);
        let result = waiting.run("dpt-nccl-setup", move || {
            if hang {
                // Never returns: park wakes spuriously at most.
                loop {
                    std::thread::park();
                }
            }
            if let Some(tch::Device::Cuda(i)) = devices.first() {
                set_thread_device(*i)?;
            }
            let mut ones: Vec<Tensor> =
                devices.iter().map(|d| Tensor::ones([1], (tch::Kind::Float, *d))).collect();
            // torch::cuda::nccl keeps the communicators of a device list for the run's calls.
            nccl_local_allreduce(&mut ones)?;
            devices.iter().for_each(|d| {
                if let tch::Device::Cuda(i) = d {
                    tch::Cuda::synchronize(*i as i64);
                }
            });
            Ok::<(), dpt_sys::c10d::C10dError>(())
        })?;
        result.map_err(EngineError::from)
    }
}
