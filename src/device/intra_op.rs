//! How many intra-op threads each of the process's threads runs torch operations with.
//!
//! ATen's CPU kernels and MKL's GEMM run on OpenMP, and libgomp keeps one thread team per
//! thread that starts a parallel region. When the helper threads of all teams together
//! outnumber the cores, libgomp stops spinning at its barriers (`gomp_managed_threads >
//! gomp_available_cpus` selects the throttled spin count) and every parallel region sleeps
//! and wakes its helpers through futexes: measured here, a CPU replica's forward and backward
//! took 25 % longer with the main thread's and the coordinator's teams alive beside the
//! replica's (BENCHMARKS.md, "A language model against a plain PyTorch loop"). So on CPU
//! devices the replicas' teams get the cores (`--cpu-threads` each) and every other thread that
//! runs torch operations keeps to one thread, which starts no team at all.
//!
//! A streamed run is the exception: its decode threads work on the same cores while a replica
//! computes, and a barrier spinning for a helper the decoders preempted burns the core they
//! need (an input-bound JPEG run lost about a quarter of its samples/s). There [`ShortSpin`]
//! keeps libgomp's short spin on purpose.
//!
//! These are libgomp's rules, the OpenMP runtime PyTorch's Linux wheels ship; a libtorch built
//! on another runtime (Intel's, with `KMP_BLOCKTIME`) spins by its own, and the thread counts
//! above are still the right ones for it.

/// Sets the calling thread's intra-op threads to `n`, for good.
///
/// ATen gives a thread its count lazily, at its first parallel operation, from the count any
/// thread set last (`at::init_num_threads`); a thread that set its own count before that
/// first operation could have it replaced by another thread's. Asking for the count first
/// (`at::get_num_threads` runs that one-time initialisation) and then setting it makes the
/// count this thread's own. The count set is also the one threads that initialise later take.
pub fn set_for_this_thread(n: usize) {
    let _ = tch::get_num_threads();
    tch::set_num_threads(n.max(1) as i32);
}

/// The intra-op threads of a thread that is not a CPU replica's: one.
pub fn keep_to_one_thread() {
    set_for_this_thread(1);
}

/// While it lives, libgomp's barriers spin only briefly before they sleep: a parked team of
/// one thread more than the machine has cores (its own thread and a helper per core, named
/// `dpt-short-spin`, asleep in libgomp's pool) makes libgomp's managed threads (the helpers,
/// plus one for the process's first thread) outnumber the cores, the case for which libgomp
/// shortens its spin. Dropping it ends the thread, and libgomp releases the team.
pub struct ShortSpin {
    stop: Option<crossbeam_channel::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ShortSpin {
    /// `cores`: the cores libgomp counts (the threads this process may run on).
    pub fn start(cores: usize) -> std::io::Result<ShortSpin> {
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let (started, up) = crossbeam_channel::bounded::<()>(0);
        let thread = std::thread::Builder::new().name("dpt-short-spin".into()).spawn(move || {
            let threads = cores + 1;
            set_for_this_thread(threads);
            // A parallel fill with a grain's worth of elements (ATen's 32,768) for every thread.
            drop(tch::Tensor::ones([threads as i64 * 32_768], (tch::Kind::Float, tch::Device::Cpu)));
            // The team stays parked in libgomp's pool; the count threads started later take is
            // one again.
            keep_to_one_thread();
            drop(started);
            let _ = stopped.recv();
        })?;
        // The team exists once the fill is done.
        let _ = up.recv();
        Ok(ShortSpin { stop: Some(stop), thread: Some(thread) })
    }
}

impl Drop for ShortSpin {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::bounded;

    /// The threads of this process whose name is `name` (libgomp's helper threads take the
    /// name of the thread whose team they join).
    fn threads_named(name: &str) -> usize {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .filter(|comm| comm.trim_end() == name)
            .count()
    }

    /// A parallel ATen operation (far above its grain size), then the threads named `name`.
    fn team_of(name: &'static str, threads: usize) -> usize {
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                set_for_this_thread(threads);
                let sum =
                    tch::Tensor::ones([1 << 22], (tch::Kind::Float, tch::Device::Cpu)).sum(tch::Kind::Float);
                assert_eq!(sum.double_value(&[]), (1 << 22) as f64);
                threads_named(name)
            })
            .unwrap()
            .join()
            .unwrap()
    }

    #[test]
    fn a_thread_kept_to_one_thread_starts_no_openmp_team() {
        assert_eq!(team_of("dpt-omp-one", 1), 1);
        // The count above can see a team: two threads make one helper.
        assert_eq!(team_of("dpt-omp-two", 2), 2);
    }

    #[test]
    fn a_short_spin_parks_one_more_helper_than_the_cores() {
        let spin = ShortSpin::start(3).unwrap();
        // Its thread and a team of 3 helpers, asleep in libgomp's pool. (`at::set_num_threads`
        // also resizes ATen's process-wide pthreadpool where one exists, whose threads take the
        // name of the thread that resized it: they are not OpenMP's, so the count is a floor.)
        let parked = threads_named("dpt-short-spin");
        assert!(parked >= 4, "{parked}");
        // Dropping it ends its thread (libgomp then lets the helpers go, in their own time).
        drop(spin);
    }

    #[test]
    fn a_threads_count_stays_when_another_thread_sets_its_own_later() {
        let (set_tx, set_rx) = bounded(0);
        let (other_tx, other_rx) = bounded(0);
        let replica = std::thread::spawn(move || {
            set_for_this_thread(3);
            set_tx.send(()).unwrap();
            other_rx.recv().unwrap();
            tch::get_num_threads()
        });
        set_rx.recv().unwrap();
        std::thread::spawn(keep_to_one_thread).join().unwrap();
        other_tx.send(()).unwrap();
        assert_eq!(replica.join().unwrap(), 3);
    }
}
