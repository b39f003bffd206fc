//! dpt-tui: data-parallel training over several devices with libtorch, reported as events for a
//! terminal dashboard or a headless log.

pub mod dashboard;
pub mod data;
pub mod engine;
pub mod headless;
pub mod model;
pub mod monitor;
pub mod remote;
pub mod report;
pub mod run_dir;
pub mod signals;
