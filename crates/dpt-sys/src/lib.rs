//! The only crate of dpt-tui allowed `unsafe`: safe Rust handles over our C++ shims into
//! libtorch (`c10d`: stores, process groups, the single-process NCCL allreduce, CUDA devices
//! and events, TorchScript modules, per-thread generators, gradient hooks; every entry point
//! declared in `csrc/dpt_api.h`) and the operating-system calls the standard library does not
//! offer (`os`). Every unsafe block carries its SAFETY line; no C++ exception crosses into Rust.

#![cfg_attr(not(test), deny(clippy::unwrap_used))]

#[cfg(feature = "torch")]
pub mod c10d;
pub mod identity;
pub mod os;

/// A panic's payload as one line of text (the first line of its message).
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
