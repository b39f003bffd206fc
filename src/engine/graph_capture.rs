//! What captures a step's work as a CUDA graph and replays it, for a replica's forward and
//! backward passes (`worker/graphed.rs`) and, with one replica in the process, the
//! coordinator's update (`coordinator/update_graph.rs`): the CUDA graph, or the
//! `graph-stand-in` test fault's stand-in, which captures nothing and runs the work at each
//! replay (the graph-ready work, run eagerly, on any device). One capture at a time in the
//! process ([`CAPTURING`]: CUDA's rule for a process whose threads capture), in thread-local
//! mode, so the other threads' streams go on meanwhile.

use std::sync::Mutex;

use dpt_sys::c10d::{C10dError, CudaGraph};

/// Held while a thread of this process captures.
pub static CAPTURING: Mutex<()> = Mutex::new(());

/// The work a graph captures or replays.
pub type Work<'a, E> = dyn FnMut() -> Result<(), E> + 'a;

/// What captures and replays a step's work.
pub trait Capturer<E>: Send {
    /// Captures `work` without running it.
    fn capture(&mut self, work: &mut Work<E>) -> Result<(), E>;
    /// Runs the captured work (`work` itself, for a stand-in).
    fn replay(&mut self, work: &mut Work<E>) -> Result<(), E>;
}

impl<E: From<C10dError>> Capturer<E> for CudaGraph {
    fn capture(&mut self, work: &mut Work<E>) -> Result<(), E> {
        CudaGraph::capture(self, work)
    }
    fn replay(&mut self, _work: &mut Work<E>) -> Result<(), E> {
        Ok(CudaGraph::replay(self)?)
    }
}

/// The `graph-stand-in` test fault's graph; `fails`: its capture fails
/// (`graph-capture-fails`).
pub struct StandIn {
    pub fails: bool,
}

impl<E: From<C10dError>> Capturer<E> for StandIn {
    fn capture(&mut self, _work: &mut Work<E>) -> Result<(), E> {
        match self.fails {
            true => Err(E::from(C10dError("the graph-capture-fails test fault".into()))),
            false => Ok(()),
        }
    }
    fn replay(&mut self, work: &mut Work<E>) -> Result<(), E> {
        work()
    }
}
