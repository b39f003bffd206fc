//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;

use dpt_tui::data::Dataset;

/// The Fashion-MNIST subset shipped in `assets/` (2,000 train, 500 test images).
pub fn subset_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/fashion-mnist-subset")
}

/// The shipped subset, cut to `train` and `test` samples.
pub fn subset(train: usize, test: usize) -> Arc<Dataset> {
    let mut data = Dataset::load(&subset_dir()).expect("the shipped subset loads");
    data.train.truncate(train);
    data.test.truncate(test);
    Arc::new(data)
}

pub mod pty;

/// Sends `signal` (e.g. "INT") to process `pid`.
pub fn kill(pid: u32, signal: &str) {
    let status =
        std::process::Command::new("kill").args([format!("-{signal}"), pid.to_string()]).status().unwrap();
    assert!(status.success(), "kill -{signal} {pid}");
}
