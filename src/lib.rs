//! dpt-tui: data-parallel training over several devices with libtorch, reported as events for a
//! terminal dashboard or a headless log.
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

#[cfg(feature = "train")]
pub mod data;
#[cfg(feature = "train")]
pub mod device;
#[cfg(feature = "train")]
pub mod dist;
#[cfg(feature = "train")]
pub mod engine;
#[cfg(feature = "train")]
pub mod input;
#[cfg(feature = "train")]
pub mod model;
pub mod monitor;
#[cfg(feature = "train")]
pub mod persist;
pub use dpt_core::{
    atomic, error_chain, flops, hostname, record, root_cause, run_dir, settings, string_form, sweep, unix_now,
};
pub use dpt_dashboard::{alert, dashboard, headless, remote, report, script, signals, sweep_board};
/// The OS calls the standard library lacks, from the one crate allowed `unsafe`.
pub use dpt_sys::os as sys;
