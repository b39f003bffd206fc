//! A checkpoint's view of the replicas: replica 0's tensors, optimizer state and moving average
//! by name. With the optimizer state split over the ranks (`--zero 1`), reading it is a
//! collective: every shard is broadcast from its owner, one in flight, and only the rank that
//! writes keeps what it receives.

use tch::{Device, Tensor};

use super::{Held, ModelLayout, ReplicaTensors};
use crate::dist::World;
use crate::engine::optim::ema::Ema;
use crate::engine::optim::{OptimizerState, ShardGrid};
use crate::engine::EngineError;
use crate::persist::checkpoint::NamedTensors;

/// The replicas' state as a checkpoint reads it by name ([`super::Replicas::by_name`]).
pub struct StateByName<'a> {
    pub(super) layout: &'a ModelLayout,
    /// Replica 0's flat parameters and buffers.
    pub(super) params: &'a Tensor,
    pub(super) buffers: &'a Tensor,
    /// Every replica's optimizer state in this process (shards under `--zero 1`).
    pub(super) optim: &'a [OptimizerState],
    pub(super) ema: Option<&'a Ema>,
    /// Whether the replicas hold shards of the state rather than the whole of it.
    pub(super) sharded: bool,
    /// The global index of this process's first replica.
    pub(super) first: usize,
    /// The run's grid, whose parts the shards are.
    pub(super) grid: ShardGrid,
    /// The ranks the shards are split over, where they are (`--zero 1` across processes).
    pub(super) split: Option<&'a World>,
}

impl StateByName<'_> {
    /// Replica 0's tensors, optimizer state and moving average by name, held as `held` says.
    /// With the state split over the ranks this is a collective: every rank calls it, or
    /// [`StateByName::lend_shards`], at the same point.
    pub fn tensors(&self, held: Held) -> Result<ReplicaTensors, EngineError> {
        let l = self.layout;
        Ok(ReplicaTensors {
            params: ModelLayout::split(self.params, &l.params, &l.param_specs, held)?,
            optimizer: self.optimizer_by_name(held)?,
            buffers: ModelLayout::split(self.buffers, &l.buffers, &l.buffer_specs, held.in_order())?,
            ema: self.ema_by_name(held)?,
        })
    }

    /// A rank that writes nothing takes its part in the collective of another's
    /// [`StateByName::tensors`]: it sends its shards and lets the others' pass.
    pub fn lend_shards(&self) -> Result<(), EngineError> {
        for k in 0..self.optim.first().map_or(0, |o| o.slots().count()) {
            self.slot_parts(k, false)?;
        }
        Ok(())
    }

    /// The optimizer state, each slot's tensors by name: replica 0's, or under `--zero 1` read
    /// from every replica's shard, tensor by tensor (a tensor a shard holds whole is a view of
    /// it; one split between shards is gathered alone), so that no whole copy of the state is
    /// made beside the shards; another rank's shards come to the host.
    fn optimizer_by_name(&self, held: Held) -> Result<Vec<(String, NamedTensors)>, EngineError> {
        let l = self.layout;
        let mut slots = Vec::new();
        for (k, (slot, flat)) in self.optim[0].slots().enumerate() {
            let named = if self.sharded {
                let parts = self.slot_parts(k, true)?;
                let mut tensors = Vec::new();
                for v in l.params.views_of_parts(&parts) {
                    tensors.push(match held {
                        Held::Views => v,
                        Held::Landed(landing) | Held::LandedInOrder(landing) => landing.land(&v)?,
                    });
                }
                l.param_specs.iter().map(|s| s.name.clone()).zip(tensors).collect()
            } else {
                ModelLayout::split(flat, &l.params, &l.param_specs, held)?
            };
            slots.push((slot.to_owned(), named));
        }
        Ok(slots)
    }

    /// Slot `k`'s shards with their offsets in the flat buffer: this process's (handles on its
    /// replicas' state), and with the state split over the ranks every other's, which
    /// each rank broadcasts in turn, one shard in flight, copied to the host where `keep`
    /// (else dropped at once).
    fn slot_parts(&self, k: usize, keep: bool) -> Result<Vec<(i64, Tensor)>, EngineError> {
        let own = |o: &OptimizerState| o.slots().nth(k).map(|(_, t)| (o.shard().start, t.shallow_clone()));
        let Some(w) = self.split else {
            return Ok(self.optim.iter().filter_map(own).collect());
        };
        let (first, grid) = (self.first, self.grid);
        let mut parts = Vec::new();
        for r in 0..w.size {
            let from = w.replica_offset_of(r);
            for g in from..from + w.replicas[r] {
                let part = grid.part(g);
                if r == w.rank {
                    let Some((at, t)) = own(&self.optim[g - first]) else { continue };
                    if !part.is_empty() {
                        w.broadcast_from(&mut t.shallow_clone(), r)?;
                    }
                    parts.push((at, t));
                } else {
                    let mut t = Tensor::empty([part.len], (tch::Kind::Float, w.device));
                    if !part.is_empty() {
                        w.broadcast_from(&mut t, r)?;
                    }
                    if keep {
                        parts.push((part.start, t.to_device(Device::Cpu)));
                    }
                }
            }
        }
        Ok(parts)
    }

    /// The moving average's parameters and buffers by name.
    fn ema_by_name(&self, held: Held) -> Result<Option<(NamedTensors, NamedTensors)>, EngineError> {
        let Some(ema) = self.ema else { return Ok(None) };
        let l = self.layout;
        Ok(Some((
            ModelLayout::split(&ema.params, &l.params, &l.param_specs, held)?,
            ModelLayout::split(&ema.buffers, &l.buffers, &l.buffer_specs, held)?,
        )))
    }
}
