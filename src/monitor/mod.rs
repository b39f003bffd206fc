//! Device monitoring on a thread of its own: GPU utilization, memory, temperature and power from
//! NVML (loaded at run time, optional), or this process's CPU and memory use where NVML has
//! nothing to say (no driver, CPU devices).

pub mod nvml;
mod process;
pub mod script;

#[cfg(feature = "train")]
mod native;
#[cfg(feature = "train")]
pub use native::spawn;
