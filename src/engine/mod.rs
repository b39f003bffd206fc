//! The data-parallel training engine: one worker thread per replica, one coordinator thread,
//! crossbeam channels between them, events out and controls in.

pub mod allreduce;
pub(crate) mod bucket_events;
pub mod bucket_pool;
pub(crate) mod buckets;
pub mod clock;
pub(crate) mod config;
pub(crate) mod coordinator;
pub mod device_memory;
pub(crate) mod evaluation;
pub mod faults;
pub mod flat;
mod grad_sink;
pub(crate) mod graph_capture;
pub(crate) mod handoff;
pub(crate) mod loss;
pub mod math;
pub mod optim;
pub(crate) mod tally;
pub mod worker;
pub(crate) mod worker_messages;
pub(crate) mod worker_thread;

pub use dpt_core::control as events;
pub use dpt_core::{checkpoint_every, config_error, policies};

use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{unbounded, Receiver, Sender};
use tch::Tensor;
use thiserror::Error;

use crate::persist::checkpoint::CheckpointError;
pub use crate::persist::resume::{Continuation, Resume};
pub use crate::record::{FinishReason, Record, Summary};
pub use config::{ConfigError, OnNan, RunKit, SavePolicy, TrainConfig};
pub use events::Control;

use crate::data::Dataset;
use coordinator::{Coordinator, CoordinatorParts, ModelLayout, RunFacts, WorkerPool};
use dpt_sys::c10d::OwnRng;

/// A failure of a running engine.
#[derive(Debug, Error)]
pub enum EngineError {
    #[error("replica {replica} on {device} failed: {error}")]
    Worker {
        replica: usize,
        device: String,
        #[source]
        error: worker::WorkerError,
    },
    #[error("a worker thread ended without reporting")]
    WorkersGone,
    #[error("replica(s) {replicas:?} on {devices:?} did not finish a step within {seconds:.0} s (stuck?); raise --step-timeout if the steps are that slow")]
    Stalled { replicas: Vec<usize>, devices: Vec<String>, seconds: f64 },
    #[error("replica {replica} differs from replica 0 after step {step}")]
    ReplicasDiverged { replica: usize, step: usize },
    #[error("cannot write {path}")]
    Save {
        path: PathBuf,
        #[source]
        cause: std::io::Error,
    },
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error("cannot start a thread: {0}")]
    Spawn(std::io::Error),
    #[error("the coordinator thread panicked: {0}")]
    CoordinatorPanic(String),
    #[error("{}", coordinator_failure(*.replica, device.as_deref(), message))]
    Coordinator { replica: Option<usize>, device: Option<String>, message: String },
    #[error(transparent)]
    Dist(#[from] crate::dist::DistError),
    #[error("the NCCL allreduce between this process's GPUs failed: {0}; rerun with NCCL_DEBUG=INFO, or run 'dpt-tui doctor'")]
    Nccl(String),
    #[error(transparent)]
    GpuWait(#[from] crate::device::gpu_wait::WaitError),
    #[error(transparent)]
    LateRead(#[from] crate::device::late_read::LateReadError),
    #[error(transparent)]
    Landing(#[from] crate::device::landing::LandingError),
    /// A GPU ran out of memory (the line says what ran out and the way out).
    #[error("{0}")]
    OutOfMemory(String),
    /// Something the engine's own parts promise each other did not hold: a bug, said as one.
    #[error("internal error: {0} (a bug in dpt-tui; please report it with the command line)")]
    Invariant(&'static str),
}

impl From<dpt_sys::c10d::C10dError> for EngineError {
    fn from(e: dpt_sys::c10d::C10dError) -> Self {
        EngineError::Nccl(e.0)
    }
}

fn coordinator_failure(replica: Option<usize>, device: Option<&str>, message: &str) -> String {
    let place = match (replica, device) {
        (Some(r), Some(d)) => format!(" on replica {r} ({d})"),
        (None, Some(d)) => format!(" on {d}"),
        _ => String::new(),
    };
    let hint = if device.is_some_and(|d| d.starts_with("cuda")) {
        "; a CUDA fault is reported late: rerun with CUDA_LAUNCH_BLOCKING=1 to name the failing kernel"
    } else {
        ""
    };
    format!("the coordinator failed{place}: {message}{hint}")
}

/// What a finished run leaves: the summary and replica 0's final tensors (CPU copies).
pub struct Outcome {
    pub summary: Summary,
    pub final_params: Vec<(String, Tensor)>,
}

/// A running engine: read [`Engine::events`], send controls, then [`Engine::join`].
pub struct Engine {
    events: Receiver<Record>,
    controls: Sender<Control>,
    thread: JoinHandle<Result<Outcome, EngineError>>,
}

impl Engine {
    /// Checks `cfg` against `data`, starts the workers and the coordinator.
    pub fn start(mut cfg: TrainConfig, data: Arc<Dataset>) -> Result<Engine, StartError> {
        let replicas = cfg.kit.world.as_ref().map_or(cfg.devices.len(), |w| w.total_replicas());
        cfg.validate((data.train.len(), data.test.len()), replicas)?;
        cfg.validate_devices()?;
        cfg.check_device_memory(&data, replicas, crate::device::peak::gpu_facts)
            .map_err(|e| StartError::Memory(Box::new(e)))?;
        let world = cfg.kit.world.take();
        if cfg.has_gpu() {
            // cuDNN picks the fastest convolution algorithm for the (fixed) batch shapes.
            tch::Cuda::cudnn_set_benchmark(true);
        }
        let math = cfg.math();
        math.apply().map_err(StartError::Math)?;
        let sync_debug = match crate::device::sync_debug::mode(
            std::env::var(crate::device::sync_debug::VAR).ok().as_deref(),
        )
        .map_err(StartError::SyncDebug)?
        {
            Some(mode) if cfg.has_gpu() => {
                dpt_sys::c10d::set_cuda_sync_debug(mode).map_err(|e| StartError::SyncDebug(e.0))?;
                mode == dpt_sys::c10d::SyncDebug::Warn
            }
            _ => false,
        };
        let builder = cfg.specs();
        // A flat buffer's length, its tensors aligned.
        let numel = |specs: &[crate::model::TensorSpec]| {
            flat::aligned_offsets(specs.iter().map(crate::model::TensorSpec::numel)).1
        };
        let each = coordinator::point_bytes(
            numel(&builder.params),
            numel(&builder.buffers),
            cfg.settings.optimizer.kind.slots().len(),
            cfg.settings.recipe.ema.is_some(),
            cfg.has_gpu(),
        );
        let ranks_here =
            world.as_ref().map_or(1, |w| w.hosts.iter().filter(|h| **h == w.hosts[w.rank]).count());
        let available = crate::sys::available_memory_bytes();
        let mut start_notes = Vec::new();
        let asked = cfg.settings.checkpoints.snapshots;
        if cfg.points_sized && world.is_none() {
            let keep = coordinator::points_that_fit(asked, each, available);
            if keep < asked {
                let size = crate::device::oom::human;
                start_notes.push(crate::record::Change::Warning {
                    message: format!(
                        "keeping {keep} rewind point(s) in host memory, not {asked}: each takes {}, and {} is available; --snapshots K sets the count",
                        size(each),
                        available.map_or_else(|| "?".to_owned(), size)
                    ),
                });
                cfg.settings.checkpoints.snapshots = keep;
            }
        }
        // A periodic checkpoint holds what a rewind point holds, copied for its writer thread.
        let checkpoint_bytes =
            (cfg.run_dir.is_some() && cfg.settings.checkpoints.every.is_on()).then_some(each);
        let snapshot_bytes =
            coordinator::check_point_memory(cfg.settings.checkpoints.snapshots, each, ranks_here, available)?;
        let (mut initial_params, mut initial_buffers) = match (&cfg.kit.resume, &cfg.kit.script) {
            (Some(r), _) => (r.params.shallow_clone(), r.buffers.shallow_clone()),
            (None, Some(s)) => s.initial_values().map_err(StartError::ScriptWeights)?,
            (None, None) => {
                let _own = OwnRng::open(cfg.settings.recipe.seed as i64, tch::Device::Cpu)?;
                (flat::initial_flat(&builder.params), flat::initial_flat(&builder.buffers))
            }
        };
        if let (Some(init), None) = (cfg.kit.init_from.take(), &cfg.kit.resume) {
            let r = init.apply(&builder.params, &builder.buffers, &mut initial_params, &mut initial_buffers);
            start_notes.insert(
                0,
                crate::record::Change::InitFrom {
                    path: init.path.display().to_string(),
                    loaded: r.loaded,
                    missing: r.missing,
                    unused: r.unused,
                },
            );
        }
        if let Some(w) = &world {
            // Every replica of every rank starts from global replica 0's weights and buffers.
            w.broadcast(&mut initial_params).map_err(EngineError::from)?;
            if initial_buffers.numel() > 0 {
                w.broadcast(&mut initial_buffers).map_err(EngineError::from)?;
            }
        }
        // The evaluation's class count: the data's, or the model's outputs where more.
        let classes = match cfg.task().has_classes() {
            true => data.classes.max(cfg.kit.script.as_ref().map_or(10, |s| s.classes as usize)),
            false => 0,
        };
        let (event_tx, event_rx) = unbounded();
        let (control_tx, control_rx) = unbounded();
        let buckets = cfg.bucket_bytes(world.is_some());
        let graph_facts = cfg.graph_facts(buckets.is_some(), data.train.images.is_streamed());
        let cuda_graphs = cfg.settings.placement.cuda_graphs.plan(&graph_facts).map_err(ConfigError::CudaGraphs)?;
        let first = world.as_ref().map_or(0, |w| w.replica_offset());
        let params_layout = flat::Layout::new(&builder.params, cfg.uses_channels_last());
        let grid = crate::engine::optim::ShardGrid::new(params_layout.total(), replicas);
        let pool = WorkerPool::spawn(&cfg, &data, (&initial_params, &initial_buffers), buckets, (first, grid))?;
        let facts = RunFacts {
            train_len: data.train.len(),
            test_len: data.test.len(),
            val_len: data.val.as_ref().map(|v| v.len()),
            test_is_val: data.test_is_val,
            data: match &data.train.images {
                crate::data::Pixels::Tokens(_) => data.source.clone(),
                // Targets that are not class ids are described by the source; no classes to count.
                _ if data.train.targets.is_some() => {
                    let [c, h, w] = data.train.sample_shape();
                    format!("{}, {c}x{h}x{w}", data.source)
                }
                _ => {
                    let [c, h, w] = data.train.sample_shape();
                    format!("{}, {c}x{h}x{w}, {} classes", data.source, data.classes)
                }
            },
            classes,
            start_notes,
            sample_prompt: sample_prompt(&cfg, &data)?,
            snapshot_bytes,
            checkpoint_bytes,
            bus_bandwidth: crate::device::bus::measured_for(&cfg.devices),
            peak_flops: crate::device::peak::peak_flops(
                &cfg.devices,
                cfg.settings.precision.format,
                cfg.settings.precision.tf32,
                world.as_ref().map_or(1, |w| w.size),
            ),
            math: math.describe(),
            sync_debug,
            cuda_graphs,
        };
        let coordinator = Coordinator::new(CoordinatorParts {
            world,
            facts,
            layout: ModelLayout {
                params: params_layout,
                buffers: flat::Layout::new(&builder.buffers, false),
                param_specs: builder.params,
                buffer_specs: builder.buffers,
            },
            cfg,
            events: event_tx,
            controls: control_rx,
            pool,
        });
        let thread = std::thread::Builder::new()
            .name("dpt-coordinator".into())
            .spawn(move || coordinator.run())
            .map_err(|e| StartError::Engine(EngineError::Spawn(e)))?;
        Ok(Engine { events: event_rx, controls: control_tx, thread })
    }

    /// The event stream; it ends (disconnects) when the run is over.
    pub fn events(&self) -> &Receiver<Record> {
        &self.events
    }

    /// A sender for controls; clone it freely.
    pub fn controls(&self) -> Sender<Control> {
        self.controls.clone()
    }

    /// Waits for the coordinator and returns the run's outcome.
    pub fn join(self) -> Result<Outcome, EngineError> {
        drop(self.controls);
        match self.thread.join() {
            Ok(result) => result,
            Err(panic) => Err(EngineError::CoordinatorPanic(worker::panic_message(panic.as_ref()))),
        }
    }
}

/// Tokens of the validation text the samples continue.
const PROMPT_TOKENS: usize = 16;

/// The prompt of a language model trained on text (`None` for any other run): the first
/// [`PROMPT_TOKENS`] tokens of the validation text, and the block the model sees at once.
fn sample_prompt(
    cfg: &TrainConfig,
    data: &Dataset,
) -> Result<Option<coordinator::sample::Prompt>, StartError> {
    let crate::data::Pixels::Tokens(val) = &data.test.images else { return Ok(None) };
    let Some(codec) = data.text.as_ref() else { return Ok(None) };
    if cfg.task().has_classes() || cfg.settings.recipe.sample_tokens == 0 {
        return Ok(None);
    }
    let n = PROMPT_TOKENS.min(val.block);
    let prompt = val.file.read(0, n).map_err(|e| StartError::Data(Box::new(e)))?;
    Ok(Some(coordinator::sample::Prompt {
        tokens: Arc::new(prompt),
        context: val.block,
        codec: Arc::clone(codec),
    }))
}

/// Why an engine did not start.
#[derive(Debug, Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error("cannot seed the initial weights: {0}")]
    Seed(#[from] dpt_sys::c10d::C10dError),
    #[error(transparent)]
    Data(Box<crate::data::DataError>),
    #[error(transparent)]
    Memory(Box<device_memory::MemoryRefusal>),
    #[error("{0}")]
    SyncDebug(String),
    #[error("cannot read the model's initial weights: {0}")]
    ScriptWeights(dpt_sys::c10d::C10dError),
    #[error("cannot set the GPUs' float32 math (TF32): {0}")]
    Math(dpt_sys::c10d::C10dError),
}
