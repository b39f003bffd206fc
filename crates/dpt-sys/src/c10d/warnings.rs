//! c10's warnings on the calling thread (`warn_shim.cpp`): the CUDA sync debug mode's warnings
//! counted and printed on every thread that asks ([`count_syncs_here`]), whichever thread's
//! work made the sync. c10 keeps one warning handler per thread, so each of dpt-tui's threads
//! that runs CUDA work (the workers, the coordinator) asks for itself; autograd's device
//! threads replay a backward pass's warnings on the thread that ran it.

use std::ffi::{c_char, CString};

use super::{call, C10dError};

extern "C" {
    fn dpt_count_syncs_here(err: *mut *mut c_char) -> i32;
    fn dpt_cuda_sync_count(out: *mut i64, err: *mut *mut c_char) -> i32;
    fn dpt_warn(msg: *const c_char, err: *mut *mut c_char) -> i32;
}

/// The calling thread's synchronizing CUDA calls counted (and printed, also where c10's logs
/// are quiet) from now on; every other warning goes where it went before. Idempotent.
pub fn count_syncs_here() -> Result<(), C10dError> {
    // SAFETY: no arguments besides the error slot.
    call(|err| unsafe { dpt_count_syncs_here(err) }).map(drop)
}

/// The synchronizing CUDA calls warned of so far on the threads that count.
pub fn cuda_sync_count() -> Result<u64, C10dError> {
    let mut n = 0i64;
    // SAFETY: `n` is valid for one write.
    call(|err| unsafe { dpt_cuda_sync_count(&mut n, err) })?;
    Ok(n.max(0) as u64)
}

/// Raises a c10 warning saying `msg` on the calling thread, as libtorch's code raises one.
pub fn warn(msg: &str) -> Result<(), C10dError> {
    let msg = CString::new(msg).map_err(|_| C10dError("a warning with a NUL byte".into()))?;
    // SAFETY: `msg` is a valid C string for the call.
    call(|err| unsafe { dpt_warn(msg.as_ptr(), err) }).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sync debug mode's text, as c10's `warn_or_error_on_sync` raises it.
    const SYNC: &str = "called a synchronizing CUDA operation";

    #[test]
    fn a_sync_warning_is_counted_on_each_thread_that_counts_and_only_there() {
        let before = cuda_sync_count().unwrap();
        // A thread that does not count: its warning goes to c10's own handler.
        std::thread::spawn(|| warn(SYNC).unwrap()).join().unwrap();
        assert_eq!(cuda_sync_count().unwrap(), before, "not counted without the counter");
        // Two threads that count, each with its own handler (c10's is per thread).
        let counting = || {
            count_syncs_here().unwrap();
            count_syncs_here().unwrap();
            warn(SYNC).unwrap();
            warn("something else").unwrap();
        };
        let (a, b) = (std::thread::spawn(counting), std::thread::spawn(counting));
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(cuda_sync_count().unwrap(), before + 2, "one per thread, other warnings not");
    }
}
