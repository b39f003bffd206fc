//! The run directory: where it is, and that a new run never lands on an old one. What goes in
//! it: `metrics.jsonl` (`crate::record::file`), the weights and checkpoints (`engine`),
//! `server.json` (`remote::server`).

use std::path::{Path, PathBuf};

use thiserror::Error;

/// A run directory that cannot be used.
#[derive(Debug, Error)]
pub enum RunDirError {
    #[error("run directory {path} already holds a run ({file}); choose another --run-dir so nothing saved is overwritten")]
    Occupied { path: PathBuf, file: &'static str },
    #[error("cannot create run directory {path} (choose a writable --run-dir)")]
    Create {
        path: PathBuf,
        #[source]
        cause: std::io::Error,
    },
}

/// The checkpoint's file name inside a run directory.
pub const CHECKPOINT_FILE: &str = "checkpoint.safetensors";

/// Names the default run directory `runs/<timestamp>-<model>`, adding `-2`, `-3`… if taken.
pub fn default_run_dir(model: &str) -> PathBuf {
    let stamp = chrono::Local::now().format("%Y%m%d-%H%M%S");
    let base = PathBuf::from("runs").join(format!("{stamp}-{model}"));
    let mut candidate = base.clone();
    let mut n = 2;
    while candidate.exists() {
        candidate = PathBuf::from(format!("{}-{n}", base.display()));
        n += 1;
    }
    candidate
}

/// Creates `path` (and its parents); refuses a folder that already holds a run.
pub fn create_run_dir(path: &Path) -> Result<(), RunDirError> {
    for file in ["metrics.jsonl", "model.safetensors"] {
        if path.join(file).exists() {
            return Err(RunDirError::Occupied { path: path.to_owned(), file });
        }
    }
    std::fs::create_dir_all(path).map_err(|cause| RunDirError::Create { path: path.to_owned(), cause })
}
