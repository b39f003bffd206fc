//! Under `--zero 2`, the bucket buffers a replica's backward pass writes its gradients into, and
//! how many exist at once. A bucket's buffer is taken when the step's first gradient of it
//! arrives and given back once the coordinator has reduced it and kept the replica's shard of
//! the sum. At most [`BUCKETS_IN_FLIGHT`] buckets wait for their reduces; a buffer given back
//! is kept for the step's next bucket only while fewer than that many are kept, and at the end
//! of the step every kept buffer is freed, so the next forward pass (the activations' peak)
//! has that memory. A replica holds at most [`BUFFERS_PER_REPLICA`] at once.

use std::collections::VecDeque;

use dpt_sys::c10d::CudaEvent;
use tch::Tensor;

/// The most buckets whose reduces wait in flight: as a newer one starts, the oldest is waited
/// for and kept (double buffering, as DeepSpeed's stage 2 does).
pub const BUCKETS_IN_FLIGHT: usize = 2;

/// The most bucket buffers a replica holds at once: those of the reduces in flight, the bucket
/// just reported, and the one the backward pass fills meanwhile. (A replica that
/// runs ahead of the others of its process, or `--accumulate`, which keeps every bucket over
/// the micro-batches, holds more; the memory estimate counts a whole gradient for the latter.)
pub const BUFFERS_PER_REPLICA: usize = BUCKETS_IN_FLIGHT + 2;

/// A replica's bucket buffers not in use: kept for the step's next bucket, freed at its end.
///
/// On a GPU the coordinator gives a buffer back from its own stream, where it read the sum,
/// and the backward pass takes it on the replica's: a kept buffer comes with an event recorded
/// there, which the taker's stream waits for before writing it, and one freed is marked as
/// used on the giver's stream, so the allocator hands its memory to no one before that read.
#[derive(Default)]
pub struct BucketPool {
    free: Vec<(Tensor, Option<CudaEvent>)>,
    /// Events of buffers taken again, for the next ones given back.
    spare: Vec<CudaEvent>,
    /// Buffers made since the run began (each step's first ones are made anew).
    made: usize,
}

impl BucketPool {
    /// A buffer of at least `len` floats on `device`, not zeroed: the smallest kept one that
    /// holds it (the calling thread's stream then waits for its last reader), else a new one.
    pub fn take(&mut self, len: i64, device: tch::Device) -> Result<Tensor, tch::TchError> {
        let fit = (0..self.free.len())
            .filter(|&i| self.free[i].0.numel() as i64 >= len)
            .min_by_key(|&i| self.free[i].0.numel());
        match fit {
            Some(i) => {
                let (buffer, read) = self.free.swap_remove(i);
                if let Some(event) = read {
                    event.block().map_err(|e| tch::TchError::Torch(e.0))?;
                    self.spare.push(event);
                }
                Ok(buffer)
            }
            None => {
                self.made += 1;
                Tensor::f_empty([len], (tch::Kind::Float, device))
            }
        }
    }

    /// A buffer whose bucket is done with, after the work queued on the calling thread's
    /// stream: kept for the step's next bucket while fewer than [`BUCKETS_IN_FLIGHT`] are
    /// kept, else freed.
    pub fn give_back(&mut self, buffer: Tensor) -> Result<(), dpt_sys::c10d::C10dError> {
        let tch::Device::Cuda(i) = buffer.device() else {
            if self.free.len() < BUCKETS_IN_FLIGHT {
                self.free.push((buffer, None));
            }
            return Ok(());
        };
        if self.free.len() < BUCKETS_IN_FLIGHT {
            let mut event = match self.spare.pop() {
                Some(e) => e,
                None => CudaEvent::ordering(i)?,
            };
            event.record()?;
            self.free.push((buffer, Some(event)));
        } else {
            dpt_sys::c10d::record_stream(&buffer)?;
        }
        Ok(())
    }

    /// The step's reduction is over: no buffer is needed until the next backward pass (which
    /// on a GPU is queued after the coordinator's work, `engine::handoff`, so the buffers'
    /// memory is free for it).
    pub fn end_step(&mut self) {
        let events = self.free.drain(..).filter_map(|(_, read)| read);
        self.spare.extend(events);
    }

    /// Buffers made since the run began.
    pub fn made(&self) -> usize {
        self.made
    }

    /// Buffers kept for the next bucket.
    pub fn kept(&self) -> usize {
        self.free.len()
    }
}

/// The buckets whose reduces are in flight, oldest first.
pub struct Flights<T> {
    queue: VecDeque<T>,
}

impl<T> Default for Flights<T> {
    fn default() -> Self {
        Flights { queue: VecDeque::new() }
    }
}

impl<T> Flights<T> {
    /// A bucket's reduce started: the oldest to wait for and keep now, when more than
    /// [`BUCKETS_IN_FLIGHT`] are in flight.
    pub fn started(&mut self, bucket: T) -> Option<T> {
        self.queue.push_back(bucket);
        (self.queue.len() > BUCKETS_IN_FLIGHT).then(|| self.queue.pop_front()).flatten()
    }

    /// Every bucket still in flight, oldest first (the step's end waits for them).
    pub fn drain(&mut self) -> impl Iterator<Item = T> + '_ {
        self.queue.drain(..)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One replica's step of `buckets` buckets of `len` floats as the coordinator runs it:
    /// the backward pass takes bucket b + 1's buffer before the coordinator starts bucket b
    /// (the interleaving that holds the most), each bucket's reduce started once reported, the
    /// oldest kept to make room, the rest at the step's end. The most buffers held at once.
    fn step(pool: &mut BucketPool, buckets: usize, len: i64) -> usize {
        let mut flights = Flights::default();
        let mut held = vec![pool.take(len, tch::Device::Cpu).unwrap()];
        let mut most = held.len();
        for b in 0..buckets {
            if b + 1 < buckets {
                held.push(pool.take(len, tch::Device::Cpu).unwrap());
                most = most.max(held.len() + flights.queue.len());
            }
            // Bucket b is reported: the first buffer held is its.
            let buffer = held.remove(0);
            if let Some(oldest) = flights.started(buffer) {
                pool.give_back(oldest).unwrap();
            }
            assert!(flights.queue.len() <= BUCKETS_IN_FLIGHT);
        }
        for kept in flights.drain().collect::<Vec<_>>() {
            pool.give_back(kept).unwrap();
        }
        pool.end_step();
        most
    }

    #[test]
    fn a_replica_holds_the_buffers_of_the_reduces_in_flight_and_keeps_none_between_steps() {
        let mut pool = BucketPool::default();
        // Eight buckets, as a 50 M-parameter model has of 25 MiB each.
        let most = step(&mut pool, 8, 16);
        assert_eq!(most, BUFFERS_PER_REPLICA, "two in flight, one about to start, one filling");
        assert_eq!(pool.kept(), 0, "nothing kept between steps");
        let made = pool.made();
        assert!(made <= BUFFERS_PER_REPLICA, "{made} made for a step");
        // The next step makes its buffers anew, as many.
        step(&mut pool, 8, 16);
        assert_eq!(pool.made(), 2 * made);
        // One bucket: one buffer.
        let mut one = BucketPool::default();
        assert_eq!(step(&mut one, 1, 16), 1);
    }

    #[test]
    fn a_kept_buffer_serves_a_bucket_it_holds_and_a_larger_one_is_made() {
        let mut pool = BucketPool::default();
        let small = pool.take(4, tch::Device::Cpu).unwrap();
        let large = pool.take(16, tch::Device::Cpu).unwrap();
        pool.give_back(small).unwrap();
        pool.give_back(large).unwrap();
        pool.give_back(Tensor::zeros([8], (tch::Kind::Float, tch::Device::Cpu))).unwrap();
        assert_eq!(pool.kept(), BUCKETS_IN_FLIGHT, "a third given back is freed");
        assert_eq!(pool.take(3, tch::Device::Cpu).unwrap().numel(), 4, "the smallest that holds it");
        assert_eq!(pool.take(32, tch::Device::Cpu).unwrap().numel(), 32, "none holds it: made");
        assert_eq!(pool.made(), 3);
    }
}
