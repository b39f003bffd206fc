//! Data parallel across processes and nodes, on libtorch's own distributed engine (c10d):
//! `c10d.rs` is the safe face of our C++ shim.

pub mod c10d;
