//! Every integration test that can share a process with the others, as one test binary:
//! one compilation and one link instead of one per file (each binary links all of dpt-tui,
//! tch and their dependencies). Each file stays a module of its own. Separate binaries keep
//! what must not share a process: the verdict tests (`bottleneck.rs`, which time runs on
//! otherwise idle cores) and the tests that seed or check libtorch's global generator
//! (`data_parallel.rs`, `models.rs`, `script_eager.rs`).

mod common;

#[path = "alerts.rs"]
mod alerts;
#[path = "array_targets.rs"]
mod array_targets;
#[path = "augment.rs"]
mod augment;
#[path = "c10d.rs"]
mod c10d;
#[path = "cli.rs"]
mod cli;
#[path = "config_file.rs"]
mod config_file;
#[path = "cuda_graphs.rs"]
mod cuda_graphs;
#[path = "dashboard_pty.rs"]
mod dashboard_pty;
#[path = "data_formats.rs"]
mod data_formats;
#[path = "distributed.rs"]
mod distributed;
#[path = "docs.rs"]
mod docs;
#[path = "engine_controls.rs"]
mod engine_controls;
#[path = "gpu_failures.rs"]
mod gpu_failures;
#[path = "idx_reader.rs"]
mod idx_reader;
#[path = "language_models.rs"]
mod language_models;
#[path = "model_choice.rs"]
mod model_choice;
#[path = "optimizers.rs"]
mod optimizers;
#[path = "overlap.rs"]
mod overlap;
#[path = "properties.rs"]
mod properties;
#[path = "python_client.rs"]
mod python_client;
#[path = "reliability.rs"]
mod reliability;
#[path = "remote.rs"]
mod remote;
#[path = "restart.rs"]
mod restart;
#[path = "rewind.rs"]
mod rewind;
#[path = "save_failures.rs"]
mod save_failures;
#[path = "schedules.rs"]
mod schedules;
#[path = "script_models.rs"]
mod script_models;
#[path = "script_runs.rs"]
mod script_runs;
#[path = "setup_env.rs"]
mod setup_env;
#[path = "signals.rs"]
mod signals;
#[path = "step_timing.rs"]
mod step_timing;
#[path = "streaming.rs"]
mod streaming;
#[path = "sweep.rs"]
mod sweep;
#[path = "targets.rs"]
mod targets;
#[path = "tensorboard.rs"]
mod tensorboard;
#[path = "threads.rs"]
mod threads;
#[path = "tokenizers.rs"]
mod tokenizers;
