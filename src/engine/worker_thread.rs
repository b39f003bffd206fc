//! What identifies the engine's threads and their panics: the worker threads' names, whether a
//! panic happened on an engine thread (caught and reported there), and a panic's first line.

pub use dpt_sys::panic_message;

use crate::input::loader::DECODE_THREAD_PREFIX;

/// Whether the current thread is an engine worker, the coordinator or a decode thread, whose
/// panics are caught and reported (a failed run naming the replica; an image that failed to
/// decode), so a panic hook may stay silent for them.
pub fn in_worker_thread() -> bool {
    std::thread::current().name().is_some_and(|n| {
        n.starts_with(WORKER_THREAD_PREFIX) || n == "dpt-coordinator" || n.starts_with(DECODE_THREAD_PREFIX)
    })
}

/// Worker threads are named `dpt-worker-<replica>`.
pub const WORKER_THREAD_PREFIX: &str = "dpt-worker-";
