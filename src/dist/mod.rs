//! Data parallel across processes and nodes, on libtorch's own distributed engine (c10d),
//! reached through `dpt_sys::c10d`, the safe face of our C++ shims. `launch.rs` reads
//! torchrun's, Slurm's or the flags' description of the world; `world.rs` meets the other ranks
//! (their check-ins in `arrival.rs`, the backend chosen from them in `backend_choice.rs`) and
//! runs the collectives; `figures.rs` brings every rank's device readings to rank 0's
//! dashboard; `nccl_env.rs` sets the environment NCCL reads.
//!
//! The design card's shape holds at every scale: inside a process, one worker thread per local
//! device and the coordinator thread; across processes, the coordinators allreduce their
//! locally reduced flat gradient bucket through c10d, then every replica applies the same
//! optimizer step.

mod arrival;
mod error;
pub mod backend_choice;
pub mod figures;
pub mod launch;
pub mod nccl_env;
pub mod world;

pub use world::{DistError, World};
