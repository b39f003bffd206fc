//! Where and when the coordinator writes: the save folder, the periodic checkpoints' writer
//! thread and cadence clock, and the best evaluations kept (`best.keep`, `best.early_stop`).
//! The writing itself is `persist.rs`.

use std::path::PathBuf;
use std::time::Instant;

use super::writer::CheckpointWriter;
use crate::engine::best::BestKeeper;

pub(super) struct Persistence {
    /// Where weights and checkpoints go (the run directory, unless a save moved it).
    pub(super) save_dir: Option<PathBuf>,
    /// Writes periodic checkpoints off the coordinator's thread (started with the first).
    pub(super) writer: Option<CheckpointWriter>,
    /// When the last periodic checkpoint was written (or the run started).
    pub(super) last_checkpoint: Instant,
    pub(super) best: BestKeeper,
}
