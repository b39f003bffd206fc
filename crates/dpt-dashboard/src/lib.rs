//! dpt-tui's front ends, built on the protocol package only (no libtorch): the terminal
//! dashboard, the headless log, alerts, the PNG/SVG report of a run, the signals a job and its
//! viewers answer, and the socket a job serves its viewers on (both ends).
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod alert;
pub mod dashboard;
pub mod headless;
pub mod remote;
pub mod report;
pub mod script;
pub mod signals;
pub mod sweep_board;

use dpt_core::{
    atomic, config_error, device, flops, model, monitor, optim, record, run_dir, settings, unix_now, Control,
};
