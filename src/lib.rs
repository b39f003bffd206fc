//! dpt-tui: data-parallel training over several devices with libtorch, reported as events for a
//! terminal dashboard or a headless log.
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

/// Items that exist only with training (the default feature `train`): a build without it is the
/// monitor (`cargo build --no-default-features`), with no libtorch.
#[macro_export]
macro_rules! training {
    ($($item:item)*) => { $( #[cfg(feature = "train")] $item )* };
}

training! {
    pub mod data;
    pub mod device;
    pub mod dist;
    pub mod engine;
    pub mod input;
    pub mod model;
    pub mod persist;
}
pub mod monitor;
pub use dpt_core::{
    atomic, error_chain, exit, flops, hostname, record, root_cause, run_dir, said_error, settings,
    string_form, sweep, unix_now,
};
pub use dpt_dashboard::{alert, dashboard, headless, remote, report, script, signals, sweep_board};
/// The OS calls the standard library lacks, from the one crate allowed `unsafe`.
pub use dpt_sys::os as sys;
