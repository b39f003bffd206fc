//! What identifies the engine's threads and their panics: the worker threads' names, whether a
//! panic happened on an engine thread (caught and reported there), and a panic's first line.

/// The first line of a panic payload. libtorch errors surface as panics whose text continues
/// with a C++ backtrace; the first line names the problem.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    let text = if let Some(s) = panic.downcast_ref::<String>() {
        s.as_str()
    } else if let Some(s) = panic.downcast_ref::<&str>() {
        s
    } else {
        "panic with a non-text payload"
    };
    let first = text.lines().next().unwrap_or(text);
    first.replace("called `Result::unwrap()` on an `Err` value: ", "").trim().to_owned()
}

/// Whether the current thread is an engine worker, the coordinator or a decode thread, whose
/// panics are caught and reported (a failed run naming the replica; an image that failed to
/// decode), so a panic hook may stay silent for them.
pub fn in_worker_thread() -> bool {
    std::thread::current().name().is_some_and(|n| {
        n.starts_with(WORKER_THREAD_PREFIX) || n == "dpt-coordinator" || n.starts_with(DECODE_THREAD_PREFIX)
    })
}

/// The streaming loader's decode threads are named `dpt-decode-<n>`.
pub const DECODE_THREAD_PREFIX: &str = "dpt-decode-";

/// Worker threads are named `dpt-worker-<replica>`.
pub const WORKER_THREAD_PREFIX: &str = "dpt-worker-";
