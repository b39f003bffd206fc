//! The operating-system calls the standard library does not offer, each behind a safe function:
//! with the C++ shim's module (`dist::c10d`), the only place in dpt-tui where `unsafe` is allowed.

use std::os::unix::process::CommandExt;

/// The most resident memory this process has held so far, in bytes (Linux's `VmHWM`).
pub fn peak_resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The host memory available to new allocations without swapping (`MemAvailable`), in bytes.
pub fn available_memory_bytes() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Lets a closed pipe end this process quietly, as it ends `ls` or `cat` (`dpt-tui ls | head`):
/// the default action of SIGPIPE. Rust's runtime sets SIGPIPE to be ignored, and a write to the
/// closed pipe would then fail and `println!` panic; the commands that only print ask for the
/// default here rather than rely on a library loaded with libtorch restoring it.
pub fn end_quietly_on_closed_pipe() {
    // SAFETY: setting a signal's disposition to its default has no preconditions; no handler
    // of this process's is replaced (SIGPIPE has none).
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Makes the child `cmd` starts leave this terminal's session (setsid), so closing the terminal
/// or losing the SSH connection does not signal it.
pub fn in_new_session(cmd: &mut std::process::Command) {
    // SAFETY: setsid is async-signal-safe, as code between fork and exec must be.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
}

/// Makes the child `cmd` starts receive SIGTERM when the thread that started it ends (the
/// process killed, even by SIGKILL): a sweep's trials then checkpoint and stop rather than run
/// on unwatched.
pub fn terminate_with_parent(cmd: &mut std::process::Command) {
    let parent = std::process::id();
    // SAFETY: prctl and getppid are async-signal-safe, as code between fork and exec must be;
    // prctl changes only the child's own death signal.
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            // The parent may have died before the signal was asked for: then nothing runs.
            if u32::try_from(libc::getppid()).ok() != Some(parent) {
                return Err(std::io::Error::other("the process that started this one has ended"));
            }
            Ok(())
        });
    }
}

/// Ends the process at once with `code`, as `_exit` does: no atexit handlers, no static
/// destructors (libtorch's and NCCL's would block on a thread still inside NCCL). Write and
/// flush what must be said first.
pub fn exit_at_once(code: u8) -> ! {
    // SAFETY: _exit takes any status and does not return; it touches no Rust state.
    unsafe { libc::_exit(i32::from(code)) }
}

/// Asks every process of process group `group` (a child started with
/// `CommandExt::process_group(0)`, whose group is its pid) to end, with SIGTERM: torchrun passes
/// it on to its workers, which run in sessions of their own. A group already gone is not an
/// error.
pub fn terminate_process_group(group: u32) -> std::io::Result<()> {
    signal_group(group, libc::SIGTERM)
}

/// Kills every process of process group `group` with SIGKILL (see
/// [`terminate_process_group`]).
pub fn kill_process_group(group: u32) -> std::io::Result<()> {
    signal_group(group, libc::SIGKILL)
}

/// Takes an exclusive lock on `file` (`flock`), held until the file is closed; `false` when
/// another process holds it. The lock goes with the process: a killed holder frees it.
pub fn try_lock_exclusive(file: &std::fs::File) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock takes any descriptor; this one is open for as long as `file` is borrowed.
    let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r == 0 {
        return Ok(true);
    }
    match std::io::Error::last_os_error() {
        e if e.raw_os_error() == Some(libc::EWOULDBLOCK) => Ok(false),
        e => Err(e),
    }
}

/// Asks process `pid` (a child this process started) to end, with SIGTERM; one already gone is
/// not an error.
pub fn terminate_process(pid: u32) -> std::io::Result<()> {
    signal_process(pid, libc::SIGTERM)
}

/// Sends `signal` to process `pid` (a child this process started); one already gone is not an
/// error.
pub fn signal_process(pid: u32, signal: i32) -> std::io::Result<()> {
    let Ok(id) = i32::try_from(pid) else {
        return Err(std::io::Error::other(format!("process {pid} is out of range")));
    };
    send(id, signal)
}

/// Sends `signal` to every process of process group `group` (see [`terminate_process_group`]);
/// one already gone is not an error.
pub fn signal_process_group(group: u32, signal: i32) -> std::io::Result<()> {
    signal_group(group, signal)
}

fn signal_group(group: u32, signal: libc::c_int) -> std::io::Result<()> {
    let Ok(id) = i32::try_from(group) else {
        return Err(std::io::Error::other(format!("process group {group} is out of range")));
    };
    send(-id, signal)
}

/// `kill(target, signal)`: a positive target names a process, a negative one a process group;
/// one already gone is not an error.
fn send(target: i32, signal: libc::c_int) -> std::io::Result<()> {
    // SAFETY: kill takes any pid and signal, and touches no memory.
    let done = unsafe { libc::kill(target, signal) };
    match done {
        0 => Ok(()),
        _ => match std::io::Error::last_os_error() {
            e if e.raw_os_error() == Some(libc::ESRCH) => Ok(()),
            e => Err(e),
        },
    }
}

/// Hands the C allocator's free memory back to the system (glibc's `malloc_trim`): the pages
/// a training step's activations took stay in the process after they are freed, counted in
/// its resident memory, until trimmed. Returns whether any memory was released; a no-op
/// outside glibc.
pub fn release_free_memory() -> bool {
    #[cfg(target_env = "gnu")]
    {
        // SAFETY: malloc_trim takes a byte count to keep and touches only the allocator's state,
        // which is thread-safe.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(target_env = "gnu"))]
    {
        false
    }
}
