//! Why a multi-process run cannot start or cannot go on.

use dpt_sys::c10d::C10dError;
use thiserror::Error;

/// A multi-process run that cannot start or cannot go on.
#[derive(Debug, Error)]
pub enum DistError {
    #[error("cannot reach rank 0's store at {addr}:{port} within {seconds:.0} s (is rank 0 running, and MASTER_ADDR/MASTER_PORT right?): {message}")]
    Connect { addr: String, port: u16, seconds: f64, message: String },
    #[error("rank(s) {missing:?} of {world} never arrived within {seconds:.0} s (--dist-timeout); start every rank with the same MASTER_ADDR:MASTER_PORT ({addr})")]
    Missing { missing: Vec<usize>, world: usize, seconds: f64, addr: String },
    #[error("rank {rank} ({host}) was started with other settings: {field} is {theirs} there, {ours} on rank 0; start every rank with the same flags and data")]
    Mismatch { rank: usize, host: String, field: String, theirs: String, ours: String },
    #[error("{ranks} share {gpu}, and NCCL needs a GPU per rank: use --dist-backend auto (Gloo there) or start one rank per GPU")]
    SharedGpu { ranks: String, gpu: String },
    #[error("{0}")]
    Lost(String),
    #[error(transparent)]
    C10d(#[from] C10dError),
}

impl DistError {
    /// Whether this is bad input (exit 2) rather than a failure during the run (exit 1).
    pub fn is_input(&self) -> bool {
        matches!(
            self,
            DistError::Connect { .. }
                | DistError::Missing { .. }
                | DistError::Mismatch { .. }
                | DistError::SharedGpu { .. }
        )
    }
}
