//! Data parallel across processes and nodes, on libtorch's own distributed engine (c10d).
//! `c10d` is the safe face of our C++ shims (in `crates/dpt-sys`, with `sys`, the only
//! code allowed `unsafe`); `launch.rs` reads torchrun's, Slurm's or the flags' description of the world;
//! `world.rs` meets the other ranks (their check-ins in `arrival.rs`, the backend chosen from
//! them in `backend_choice.rs`) and runs the collectives.
//!
//! The design card's shape holds at every scale: inside a process, one worker thread per local
//! device and the coordinator thread; across processes, the coordinators allreduce their
//! locally reduced flat gradient bucket through c10d, then every replica applies the same
//! optimizer step.

/// The safe face of our C++ shims, from the one crate allowed `unsafe` (`crates/dpt-sys`).
mod arrival;
pub mod backend_choice;
pub use dpt_sys::c10d;
pub mod figures;
pub use dpt_sys::identity;
pub mod launch;
pub mod nccl_env;
pub mod world;

pub use world::{DistError, World};
