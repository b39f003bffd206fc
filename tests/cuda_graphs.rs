//! `--cuda-graphs`: the graph-ready step (its inputs copied into the graph's own buffers, the
//! forward and backward passes run through the capture and replay path) trains as the eager
//! step does, bit for bit, on the CPU through the `graph-stand-in` test fault; a capture that
//! fails leaves its replica eager with one warning; the start record says which and why, and
//! `--cuda-graphs on` refuses a run it cannot graph.

use dpt_core::device::DeviceId;
use dpt_tui::engine::{Engine, Outcome, StartError, TrainConfig};
use dpt_tui::model::{ModelKind, Precision};
use dpt_tui::record::{Change, Record};
use dpt_tui::settings::CudaGraphs;

use crate::common;

/// A run of `cfg` on 250 training images (the epoch's last batch partial) with `faults`: its
/// outcome, its start record's `cuda_graphs`, and its warnings.
fn run(mut cfg: TrainConfig, faults: &str) -> (Outcome, String, Vec<String>) {
    cfg.kit.faults = faults.parse().unwrap();
    let engine = Engine::start(cfg, common::subset(250, 40)).unwrap();
    let (mut graphs, mut warnings) = (String::new(), Vec::new());
    for r in engine.events().iter() {
        match r {
            Record::Start(info) => graphs = info.cuda_graphs.clone(),
            Record::Event(Change::Warning { message }) => warnings.push(message),
            _ => {}
        }
    }
    (engine.join().unwrap(), graphs, warnings)
}

fn config(model: ModelKind, replicas: usize, batch: usize) -> TrainConfig {
    let mut cfg = TrainConfig::new(model, vec![DeviceId::Cpu; replicas]);
    cfg.settings.recipe.batch_size = batch;
    cfg.settings.recipe.epochs = 2;
    cfg.settings.placement.log_every = 4;
    cfg.settings.placement.bucket_cap_mb = 0.0;
    cfg
}

fn same_bits(a: &Outcome, b: &Outcome) {
    assert_eq!(a.final_params.len(), b.final_params.len());
    for ((name, x), (_, y)) in a.final_params.iter().zip(&b.final_params) {
        assert!(x.equal(y), "{name} differs");
    }
    assert_eq!(a.summary.test_acc, b.summary.test_acc);
}

/// lenet (f32 and CPU bf16), mnist-net (dropout masks drawn from the step's seed) and two
/// replicas with shards of unequal sizes: 8 steps an epoch, the last of 26 images (eager), the
/// others replayed after the warm-up, over two epochs.
#[test]
fn the_graph_ready_step_trains_as_the_eager_step_bit_for_bit() {
    let bf16 = || {
        let mut c = config(ModelKind::Lenet, 1, 32);
        c.settings.precision.format = Precision::Bf16;
        c
    };
    // The update's own graph: AdamW reading its lr on the device, clipping, a moving average.
    let adamw = || {
        let mut c = config(ModelKind::Lenet, 1, 32);
        c.settings.optimizer.kind = dpt_tui::engine::optim::OptimizerKind::AdamW;
        c.settings.optimizer.weight_decay = 0.05;
        c.settings.recipe.clip_grad_norm = Some(0.5);
        c.settings.recipe.ema = Some(0.9);
        // A rate that changes every step: the graph reads each step's from the device.
        c.settings.schedule.shape = "cosine".parse().unwrap();
        c.settings.schedule.warmup_steps = 2;
        c
    };
    let cases: [(&str, &dyn Fn() -> TrainConfig); 5] = [
        ("lenet", &|| config(ModelKind::Lenet, 1, 32)),
        ("lenet in bf16", &bf16),
        ("mnist-net", &|| config(ModelKind::MnistNet, 1, 32)),
        ("lenet with adamw, clipping and an ema", &adamw),
        ("lenet on two replicas", &|| config(ModelKind::Lenet, 2, 33)),
    ];
    for (what, cfg) in cases {
        let (eager, said, _) = run(cfg(), "");
        assert_eq!(said, "eager: a replica trains on the CPU", "{what}");
        let (graphed, said, warnings) = run(cfg(), "graph-stand-in");
        assert!(said.starts_with("graphed: "), "{what}: {said}");
        // One replica in the run: its update is graphed too, replayed every step.
        let update = said.ends_with("the update is captured too, and replayed every step");
        assert_eq!(update, !what.contains("two replicas"), "{what}: {said}");
        assert!(warnings.is_empty(), "{what}: {warnings:?}");
        same_bits(&eager, &graphed);
    }
}

/// resnet18's BatchNorm statistics are updated in place by the replayed work.
#[test]
fn a_graphed_resnet18_keeps_its_batchnorm_statistics_as_the_eager_one() {
    let cfg = || {
        let mut c = config(ModelKind::Resnet18, 1, 32);
        c.settings.placement.max_steps = Some(6);
        c
    };
    let (eager, _, _) = run(cfg(), "");
    let (graphed, said, _) = run(cfg(), "graph-stand-in");
    assert!(said.starts_with("graphed: "), "{said}");
    assert!(eager.final_params.iter().any(|(n, _)| n.contains("running_mean")));
    same_bits(&eager, &graphed);
}

#[test]
fn a_replica_whose_capture_fails_runs_eagerly_and_says_so_once() {
    let (eager, _, _) = run(config(ModelKind::Lenet, 2, 32), "");
    let (fell_back, _, warnings) =
        run(config(ModelKind::Lenet, 2, 32), "graph-stand-in,graph-capture-fails=1");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].starts_with("replica 1 (cpu) could not capture"), "{}", warnings[0]);
    assert!(warnings[0].contains("graph-capture-fails"), "{}", warnings[0]);
    same_bits(&eager, &fell_back);
    // One replica: its step's capture and its update's fail, each said once.
    let (eager, _, _) = run(config(ModelKind::Lenet, 1, 32), "");
    let (fell_back, _, warnings) =
        run(config(ModelKind::Lenet, 1, 32), "graph-stand-in,graph-capture-fails=0");
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings.iter().any(|w| w.starts_with("replica 0 (cpu) could not capture")), "{warnings:?}");
    assert!(
        warnings.iter().any(|w| w.starts_with("the update could not be captured as a CUDA graph")),
        "{warnings:?}"
    );
    same_bits(&eager, &fell_back);
}

#[test]
fn cuda_graphs_on_refuses_a_run_it_cannot_graph_and_off_says_so() {
    let mut cfg = config(ModelKind::Lenet, 1, 32);
    cfg.settings.placement.cuda_graphs = CudaGraphs::On;
    let refused = match Engine::start(cfg, common::subset(64, 16)) {
        Err(e @ StartError::Config(_)) => e.to_string(),
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(_) => panic!("--cuda-graphs on started a CPU run"),
    };
    assert_eq!(
        refused,
        "--cuda-graphs on cannot graph this run: a replica trains on the CPU; use --cuda-graphs auto to run it eagerly"
    );
    // The test fault's stand-in makes the CPU run graphable; off keeps it eager.
    let mut off = config(ModelKind::Lenet, 1, 32);
    off.settings.placement.cuda_graphs = CudaGraphs::Off;
    off.settings.placement.max_steps = Some(2);
    assert_eq!(run(off, "graph-stand-in").1, "eager: --cuda-graphs off");
    // Buckets that reduce during the backward pass keep two replicas eager.
    let mut buckets = config(ModelKind::Lenet, 2, 32);
    buckets.settings.placement.bucket_cap_mb = 25.0;
    buckets.settings.placement.max_steps = Some(2);
    assert!(run(buckets, "graph-stand-in").1.contains("--bucket-cap-mb 0"));
}

/// The TorchScript GPT (no dropout) through the command line, graphed and not.
#[test]
fn a_graphed_torchscript_gpt_trains_as_the_eager_one() {
    use common::tokens::{make_gpt, token_dir};
    let tmp = tempfile::tempdir().unwrap();
    let data = token_dir(tmp.path(), 3000);
    let gpt = make_gpt("script", tmp.path());
    let args: Vec<String> = ["--model", gpt.to_str().unwrap(), "--data", data.to_str().unwrap()]
        .into_iter()
        .chain(["--block-size", "16", "--steps", "9", "--eval-every", "9", "--batch-size", "8"])
        .chain(["--optimizer", "adamw", "--lr", "3e-3", "--devices", "cpu", "--headless"])
        .map(String::from)
        .collect();
    let (eager, graphed) = (tmp.path().join("eager"), tmp.path().join("graphed"));
    common::Dpt::new().args(&args).run_dir(&eager).ok();
    common::Dpt::new().args(&args).env("DPT_INJECT_FAULT", "graph-stand-in").run_dir(&graphed).ok();
    let start =
        |run: &std::path::Path| common::records(run).into_iter().find(|r| r["kind"] == "start").unwrap();
    assert!(start(&graphed)["cuda_graphs"].as_str().unwrap().starts_with("graphed: "));
    assert_eq!(common::rel_diff(&common::weights(&eager), &common::weights(&graphed)), 0.0);
}
