//! A generator of the thread's own (`rng_shim.cpp`): while an [`OwnRng`] lives, the random
//! numbers libtorch draws on this thread without an explicit generator (dropout, stochastic
//! depth, `bernoulli_`, `rand`…) come from a stream seeded for it, as `torch.manual_seed(seed)`
//! would seed the global one, and other threads' draws neither see nor disturb it. Replicas in
//! one process then run their forward passes side by side instead of taking turns.

use std::ffi::c_char;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::{Mutex, MutexGuard};

use tch::Device;

use super::{call, non_null, C10dError};

#[repr(C)]
struct RawScope {
    _private: [u8; 0],
}

extern "C" {
    fn dpt_rng_open(seed: u64, cuda_index: i32, err: *mut *mut c_char) -> *mut RawScope;
    fn dpt_rng_close(scope: *mut RawScope);
}

/// One lock per CUDA device (its default generator is shared by every thread using the device);
/// devices past the last share a lock, which only costs them waiting.
static CUDA_GENERATORS: [Mutex<()>; 16] = [const { Mutex::new(()) }; 16];

/// This thread's own generator, open until dropped (on the thread that opened it: the type is
/// neither `Send` nor `Sync`).
pub struct OwnRng {
    scope: NonNull<RawScope>,
    /// On a CUDA device, held while its default generator is this thread's.
    _device: Option<MutexGuard<'static, ()>>,
    _thread_bound: PhantomData<*const ()>,
}

impl OwnRng {
    /// Seeds this thread's own stream with `seed`. On `Device::Cuda(i)` the device's default
    /// generator (from which CUDA's fused dropout draws) is seeded too and held until the drop;
    /// another replica on the same device waits for it, one on another device does not.
    pub fn open(seed: i64, device: Device) -> Result<OwnRng, C10dError> {
        let (cuda, guard) = match device {
            Device::Cuda(i) => {
                let lock = &CUDA_GENERATORS[i % CUDA_GENERATORS.len()];
                (i32::try_from(i).unwrap_or(i32::MAX), Some(lock.lock().unwrap_or_else(|p| p.into_inner())))
            }
            _ => (-1, None),
        };
        // SAFETY: plain value arguments; the shim returns an owned scope or an error. The seed's
        // bits are libtorch's (`manual_seed` takes an int64 and keeps it as uint64).
        let raw = call(|err| unsafe { dpt_rng_open(seed as u64, cuda, err) })?;
        Ok(OwnRng {
            scope: non_null(raw, "opening a generator")?,
            _device: guard,
            _thread_bound: PhantomData,
        })
    }
}

impl Drop for OwnRng {
    fn drop(&mut self) {
        // SAFETY: the scope opened on this thread (the type cannot leave it), closed once.
        unsafe { dpt_rng_close(self.scope.as_ptr()) }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Barrier, Mutex};

    use tch::{Device, Kind, Tensor};

    use super::OwnRng;

    /// This module's tests' turns on libtorch's global generator (nothing else in the library
    /// draws from it: the engine's draws all go through an `OwnRng`).
    static GLOBAL_RNG: Mutex<()> = Mutex::new(());

    /// What a forward pass with dropout draws: several kinds of random numbers, each through
    /// another operator (`bernoulli_`, `uniform_`, `normal_`, `randperm`, dropout itself).
    fn draws() -> Vec<f32> {
        let x = Tensor::ones([64], (Kind::Float, Device::Cpu));
        let parts = [
            x.dropout(0.5, true),
            Tensor::rand([16], (Kind::Float, Device::Cpu)),
            Tensor::randn([16], (Kind::Float, Device::Cpu)),
            Tensor::empty([16], (Kind::Float, Device::Cpu)).bernoulli_float_(0.3),
            Tensor::randperm(16, (Kind::Int64, Device::Cpu)).to_kind(Kind::Float),
        ];
        let all = Tensor::cat(&parts, 0);
        Vec::<f32>::try_from(&all).unwrap()
    }

    /// The numbers `torch.manual_seed(seed)` gives the global generator.
    fn seeded_globally(seed: i64) -> Vec<f32> {
        let _lock = GLOBAL_RNG.lock().unwrap_or_else(|p| p.into_inner());
        tch::manual_seed(seed);
        draws()
    }

    #[test]
    fn a_thread_s_own_stream_is_the_one_manual_seed_gives_while_threads_draw_side_by_side() {
        let seeds = [7_i64, 8, -3];
        let expected: Vec<Vec<f32>> = seeds.iter().map(|&s| seeded_globally(s)).collect();
        assert_ne!(expected[0], expected[1]);
        let barrier = Barrier::new(seeds.len() + 1);
        let got: Vec<Vec<Vec<f32>>> = std::thread::scope(|scope| {
            let threads: Vec<_> = seeds
                .iter()
                .map(|&seed| {
                    let barrier = &barrier;
                    scope.spawn(move || {
                        barrier.wait();
                        // Many rounds, all threads at once: a shared stream would mix them.
                        (0..50)
                            .map(|_| {
                                let _own = OwnRng::open(seed, Device::Cpu).unwrap();
                                draws()
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            barrier.wait();
            // The global generator is drawn from meanwhile too, without disturbing them.
            for _ in 0..50 {
                let _ = Tensor::rand([256], (Kind::Float, Device::Cpu));
            }
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        for (rounds, want) in got.iter().zip(&expected) {
            assert!(rounds.iter().all(|r| r == want), "every round draws manual_seed's numbers");
        }
    }

    #[test]
    fn closing_the_scope_gives_the_thread_back_the_global_generator() {
        let before = {
            let _own = OwnRng::open(5, Device::Cpu).unwrap();
            draws()
        };
        let _lock = GLOBAL_RNG.lock().unwrap_or_else(|p| p.into_inner());
        tch::manual_seed(11);
        let global = draws();
        tch::manual_seed(11);
        assert_eq!(global, draws(), "after the scope, draws follow manual_seed again");
        assert_ne!(global, before);
    }

    #[test]
    fn operators_without_random_numbers_run_as_usual_under_the_scope() {
        let _own = OwnRng::open(1, Device::Cpu).unwrap();
        let a = Tensor::arange(10, (Kind::Int64, Device::Cpu));
        assert_eq!(i64::try_from(a.sum(Kind::Int64)).unwrap(), 45);
        let m = Tensor::ones([3, 4], (Kind::Float, Device::Cpu))
            .matmul(&Tensor::ones([4, 2], (Kind::Float, Device::Cpu)));
        assert_eq!(f64::try_from(m.sum(Kind::Float)).unwrap(), 24.0);
    }
}
