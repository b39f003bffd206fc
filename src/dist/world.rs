//! The processes of one run as a c10d world: the rendezvous (every rank checks in through the
//! TCPStore, missing ranks are named, settings must agree), then the collectives the
//! coordinator issues, always from its one thread and in the same order on every rank.

use std::time::Duration;

use tch::{Device, Kind, Tensor};

use super::arrival::{self, check_settings, Arrival};
use super::backend_choice::Choice;
pub use super::error::DistError;
use super::launch::Launch;
use crate::settings::DistBackend;
use dpt_core::hostname;
use dpt_sys::c10d::{Backend, C10dError, Group, ReduceOp, Store, Work};

/// Floats per allreduce bucket (25 MB, DDP's default bucket size): a large model's gradients go
/// out as several messages in flight at once instead of one that must finish whole.
pub const BUCKET_ELEMS: i64 = 25 * 1024 * 1024 / 4;

/// The processes of the run, from this process's side.
pub struct World {
    pub rank: usize,
    pub size: usize,
    pub backend: Backend,
    /// Why the backend is not the one GPUs would get (ranks sharing a GPU use Gloo).
    pub backend_note: Option<String>,
    pub timeout: Duration,
    /// Replicas (devices) of each rank, in rank order.
    pub replicas: Vec<usize>,
    /// Host of each rank.
    pub hosts: Vec<String>,
    /// Devices of each rank, one per replica.
    pub devices: Vec<Vec<dpt_core::device::DeviceId>>,
    /// Where small tensors of the collectives live (the GPU for NCCL).
    pub device: Device,
    group: Group,
    /// Beside an NCCL group, a Gloo group for the numbers the hosts exchange (the per-step
    /// agreement, the reports' figures): they stay on the CPU, so reading them never waits for
    /// the GPU's queue (`None`: the main group is the host's already).
    values: Option<Group>,
    store: Store,
    addr: String,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("hosts", &self.hosts)
            .finish()
    }
}

impl World {
    /// Meets the other ranks: connects to (rank 0: hosts) the store, checks in, waits for every
    /// rank up to `timeout`, compares `settings`, chooses the backend for `asked` from every
    /// rank's devices, then forms the process group.
    pub fn join(
        launch: &Launch,
        asked: DistBackend,
        local_devices: &[dpt_core::device::DeviceId],
        settings: serde_json::Value,
        timeout: Duration,
    ) -> Result<World, DistError> {
        dpt_sys::c10d::quiet_logs();
        let (rank, size) = (launch.rank, launch.world_size);
        let addr = format!("{}:{}", launch.master_addr, launch.master_port);
        let server = rank == 0 && !launch.agent_store;
        let root =
            Store::tcp(&launch.master_addr, launch.master_port, size, server, timeout).map_err(|e| {
                DistError::Connect {
                    addr: launch.master_addr.clone(),
                    port: launch.master_port,
                    seconds: timeout.as_secs_f64(),
                    message: e.0,
                }
            })?;
        let store = root.prefixed(&format!("dpt/attempt-{}/", launch.attempt))?;
        let me = Arrival::of(hostname(), local_devices, settings);
        let json = serde_json::to_vec(&me).expect("arrivals serialize");
        store.set(&format!("arrived/{rank}"), &json)?;
        let keys: Vec<String> = (0..size).map(|r| format!("arrived/{r}")).collect();
        let key_refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        if store.wait(&key_refs, timeout).is_err() {
            let missing = (0..size).filter(|r| !store.check(&[key_refs[*r]]).unwrap_or(false)).collect();
            return Err(DistError::Missing { missing, world: size, seconds: timeout.as_secs_f64(), addr });
        }
        let mut arrivals = Vec::with_capacity(size);
        for key in &key_refs {
            let bytes = store.get(key)?;
            let a: Arrival = serde_json::from_slice(&bytes).map_err(|e| {
                DistError::Lost(format!("a rank sent a check-in this version cannot read: {e}"))
            })?;
            arrivals.push(a);
        }
        // Nobody leaves (closing rank 0's store) before everyone has read every check-in, so a
        // mismatch is reported by every rank alike.
        barrier(&store, "read", size, timeout)?;
        let choice = check_settings(&arrivals).and_then(|()| arrival::backend(asked, &arrivals));
        let Choice { backend, note: backend_note } = match choice {
            Ok(choice) => choice,
            Err(e) => {
                leave_store(&store, server, size, timeout);
                return Err(e);
            }
        };
        // Where small tensors of the collectives live: this rank's GPU for NCCL.
        let device = match (backend, local_devices.first()) {
            (Backend::Nccl, Some(d)) => crate::device::tch_device(*d),
            _ => Device::Cpu,
        };
        let group = Group::new(backend, &store.prefixed("pg/")?, rank, size, timeout)?;
        if backend == Backend::Nccl {
            super::backend_choice::connect_nccl(&group, device, size, timeout)?;
        }
        let values = match values_apart(backend) {
            true => Some(Group::new(Backend::Gloo, &store.prefixed("values/")?, rank, size, timeout)?),
            false => None,
        };
        Ok(World {
            rank,
            size,
            backend,
            backend_note,
            timeout,
            replicas: arrivals.iter().map(|a| a.replicas).collect(),
            devices: arrivals.iter().map(|a| a.devices.clone()).collect(),
            hosts: arrivals.into_iter().map(|a| a.host).collect(),
            device,
            group,
            values,
            store,
            addr,
        })
    }

    /// Replicas in the whole run.
    pub fn total_replicas(&self) -> usize {
        self.replicas.iter().sum()
    }

    /// The global index of this rank's first replica.
    pub fn replica_offset(&self) -> usize {
        self.replica_offset_of(self.rank)
    }

    /// Sums `flat` (a contiguous tensor) over all ranks in place, in buckets in flight together.
    pub fn allreduce_flat(&self, flat: &Tensor) -> Result<(), DistError> {
        let pending = self.start_allreduce(flat)?;
        self.finish(pending)
    }

    /// Starts summing `flat` (a contiguous tensor) over all ranks in place, in chunks of at
    /// most [`BUCKET_ELEMS`]; `flat` holds the sum once [`World::finish`] has taken what this
    /// returns (read it only then). Every rank must start the same collectives in the same order.
    pub fn start_allreduce(&self, flat: &Tensor) -> Result<Vec<Work<'static>>, DistError> {
        flat.split(BUCKET_ELEMS, 0)
            .into_iter()
            .map(|c| self.group.allreduce_owned(vec![c], ReduceOp::Sum))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.lost(e))
    }

    /// Starts summing `flat` (a contiguous tensor) over all ranks into rank `root`'s, in place
    /// there, in chunks of at most [`BUCKET_ELEMS`]; `root`'s `flat` holds the sum once
    /// [`World::finish`] has taken what this returns, the others' hold partial sums that nobody
    /// may read.
    pub fn start_reduce(&self, flat: &Tensor, root: usize) -> Result<Vec<Work<'static>>, DistError> {
        flat.split(BUCKET_ELEMS, 0)
            .into_iter()
            .map(|c| self.group.reduce_owned(c, root))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.lost(e))
    }

    /// Reduces `t` (a few values, on the collectives' device or copied there and back) over
    /// all ranks in place by `op`; under NCCL the host does not wait for it.
    pub fn allreduce_in_place(&self, t: &mut Tensor, op: ReduceOp) -> Result<(), DistError> {
        let on = if t.device() == self.device { t.shallow_clone() } else { t.to_device(self.device) };
        let work = self.group.allreduce_owned(vec![on.shallow_clone()], op).map_err(|e| self.lost(e))?;
        self.settle(work)?;
        if t.device() != self.device {
            t.copy_(&on);
        }
        Ok(())
    }

    /// Ends the collectives `pending` started, in order (see [`World::settle`]).
    pub fn finish(&self, pending: Vec<Work<'static>>) -> Result<(), DistError> {
        pending.into_iter().try_for_each(|w| self.settle(w))
    }

    /// Ends a collective whose result the host does not read: under NCCL the device's stream
    /// waits for it and the host goes on (as DDP does; a failure surfaces at the next host
    /// wait, a report's, through NCCL's error handling); Gloo blocks within the timeout.
    fn settle(&self, w: dpt_sys::c10d::Work<'_>) -> Result<(), DistError> {
        let done = if host_waits(self.backend) { w.wait(self.timeout) } else { w.wait_on_stream() };
        done.map_err(|e| self.lost(e))
    }

    /// The group host numbers travel through, and where its tensors live.
    fn values_group(&self) -> (&Group, Device) {
        match &self.values {
            Some(g) => (g, Device::Cpu),
            None => (&self.group, self.device),
        }
    }

    /// Reduces a few numbers over all ranks (on the CPU beside NCCL: no wait for the GPU).
    pub fn allreduce_values(&self, values: &mut [f64], op: ReduceOp) -> Result<(), DistError> {
        let (group, device) = self.values_group();
        let mut t = [Tensor::from_slice(values).to_device(device)];
        group
            .allreduce(&mut t, op)
            .map_err(|e| self.lost(e))?
            .wait(self.timeout)
            .map_err(|e| self.lost(e))?;
        let back: Vec<f64> = Vec::try_from(&t[0].to_device(Device::Cpu).to_kind(Kind::Double))
            .map_err(|e: tch::TchError| DistError::Lost(e.to_string()))?;
        values.copy_from_slice(&back);
        Ok(())
    }

    /// Copies rank 0's `t` to every rank, in place (through the collectives' device).
    pub fn broadcast(&self, t: &mut Tensor) -> Result<(), DistError> {
        self.broadcast_from(t, 0)
    }

    /// Copies rank `root`'s `t` (a contiguous tensor) to every rank, in place, through the
    /// collectives' device (a copy there and back where `t` lives elsewhere).
    pub fn broadcast_from(&self, t: &mut Tensor, root: usize) -> Result<(), DistError> {
        if t.device() == self.device {
            let mut one = [t.shallow_clone()];
            let work = self.group.broadcast(&mut one, root).map_err(|e| self.lost(e))?;
            return self.settle(work);
        }
        let mut one = [t.to_device(self.device)];
        let work = self.group.broadcast(&mut one, root).map_err(|e| self.lost(e))?;
        self.settle(work)?;
        t.copy_(&one[0]);
        Ok(())
    }

    /// The global index of rank `r`'s first replica.
    pub fn replica_offset_of(&self, r: usize) -> usize {
        self.replicas[..r].iter().sum()
    }

    /// Copies rank 0's `values` to every rank (as `allreduce_values`, on the CPU beside NCCL).
    pub fn broadcast_values(&self, values: &mut [f64]) -> Result<(), DistError> {
        let (group, device) = self.values_group();
        let mut t = [Tensor::from_slice(values).to_device(device)];
        group.broadcast(&mut t, 0).map_err(|e| self.lost(e))?.wait(self.timeout).map_err(|e| self.lost(e))?;
        let back: Vec<f64> = Vec::try_from(&t[0].to_device(Device::Cpu).to_kind(Kind::Double))
            .map_err(|e: tch::TchError| DistError::Lost(e.to_string()))?;
        values.copy_from_slice(&back);
        Ok(())
    }

    /// Rank 0 publishes `bytes` under `key`; every other rank reads them (waiting up to the
    /// timeout). For what is not a tensor (a checkpoint's state).
    pub fn share_bytes(&self, key: &str, bytes: Option<&[u8]>) -> Result<Vec<u8>, DistError> {
        let key = format!("share/{key}");
        if self.rank == 0 {
            let b = bytes.unwrap_or_default();
            self.store.set(&key, b).map_err(|e| self.lost(e))?;
            return Ok(b.to_vec());
        }
        self.store.get(&key).map_err(|e| self.lost(e))
    }

    /// A view of the store for what travels beside the collectives (device figures), usable
    /// from another thread.
    pub fn side_store(&self) -> Result<Store, DistError> {
        Ok(self.store.prefixed("side/")?)
    }

    /// Tells the others how far this rank got (read back to name a rank that stopped).
    pub fn mark_progress(&self, global_step: usize) {
        let _ = self.store.set(&format!("progress/{}", self.rank), global_step.to_string().as_bytes());
    }

    /// Turns a failed collective into a message naming the rank(s) that stopped. Every rank
    /// that sees the failure says so in the store; a rank that has not said so within a few
    /// seconds is the one that died or hangs. Rank 0 hosts the store: if it does not answer,
    /// rank 0 is gone.
    fn lost(&self, e: C10dError) -> DistError {
        const OBSERVE: Duration = Duration::from_secs(3);
        if self.store.set(&format!("failed/{}", self.rank), b"").is_err() {
            return DistError::Lost(format!(
                "rank 0 ({}) is gone: its store at {} does not answer ({})",
                self.hosts[0], self.addr, e.0
            ));
        }
        let others: Vec<usize> = (0..self.size).filter(|r| *r != self.rank).collect();
        let keys: Vec<String> = others.iter().map(|r| format!("failed/{r}")).collect();
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        // Waiting for evidence, not for a peer: a timeout here is the answer.
        let _ = self.store.wait(&refs, OBSERVE);
        let last_step = |r: usize| {
            self.store
                .get(&format!("progress/{r}"))
                .ok()
                .and_then(|b| String::from_utf8(b).ok()?.parse::<usize>().ok())
        };
        let silent: Vec<String> = others
            .iter()
            .zip(&refs)
            .filter(|(_, k)| !self.store.check(&[k]).unwrap_or(true))
            .map(|(&r, _)| match self.store.check(&[&format!("progress/{r}")]) {
                Ok(true) => match last_step(r) {
                    Some(step) => format!("rank {r} ({}, last seen at step {step})", self.hosts[r]),
                    None => format!("rank {r} ({})", self.hosts[r]),
                },
                _ => format!("rank {r} ({})", self.hosts[r]),
            })
            .collect();
        // The store lives in rank 0's process: it stays until every rank that saw the failure
        // has read what it needs, so all of them name the silent rank alike.
        let _ = self.store.set(&format!("named/{}", self.rank), b"");
        if self.rank == 0 {
            let seen: Vec<String> = others
                .iter()
                .zip(&refs)
                .filter(|(_, k)| self.store.check(&[k]).unwrap_or(false))
                .map(|(r, _)| format!("named/{r}"))
                .collect();
            let _ = self.store.wait(&seen.iter().map(String::as_str).collect::<Vec<_>>(), OBSERVE);
        }
        if silent.is_empty() {
            DistError::Lost(format!("a collective with the other ranks failed: {}", e.0))
        } else {
            DistError::Lost(format!("{} stopped answering: {}", silent.join(", "), e.0))
        }
    }
}

/// Leaves the store together: every rank checks out, and the one whose process serves the store
/// (rank 0's) waits until all have, so no rank loses the store in the middle of a call (a
/// barrier alone cannot promise that: someone leaves it first). Best effort: the run is ending.
fn leave_store(store: &Store, server: bool, size: usize, timeout: Duration) {
    let all = "left/all";
    if store.add("left", 1).is_ok_and(|n| n == size as i64) {
        let _ = store.set(all, b"");
    }
    if server {
        let _ = store.wait(&[all], timeout);
    }
}

/// Waits until all `size` ranks have reached the barrier `name`.
fn barrier(store: &Store, name: &str, size: usize, timeout: Duration) -> Result<(), DistError> {
    let count = format!("barrier/{name}");
    let done = format!("barrier/{name}/done");
    if store.add(&count, 1)? == size as i64 {
        store.set(&done, b"")?;
    }
    store.wait(&[done.as_str()], timeout)?;
    Ok(())
}

/// Whether the host waits for a collective it does not read: with Gloo (the work is the
/// host's), not with NCCL (the stream waits).
fn host_waits(backend: Backend) -> bool {
    backend == Backend::Gloo
}

/// Whether the hosts' numbers need a group of their own: beside NCCL, whose tensors live on the
/// GPU, where reading a result back waits for everything queued before it.
fn values_apart(backend: Backend) -> bool {
    backend == Backend::Nccl
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_gloo_blocks_the_host_on_a_collective_it_does_not_read() {
        assert!(host_waits(Backend::Gloo));
        assert!(!host_waits(Backend::Nccl), "NCCL: the stream waits, as DDP's");
    }

    #[test]
    fn the_hosts_numbers_stay_on_the_cpu_beside_nccl() {
        assert!(values_apart(Backend::Nccl), "a Gloo group of their own");
        assert!(!values_apart(Backend::Gloo), "Gloo's group is the host's already");
    }
}
