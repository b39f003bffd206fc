//! The gradient allreduce overlapped with the backward pass, bucket by bucket
//! (`--bucket-cap-mb`): the same weights as the reduction after the backward pass, bit for bit
//! within a process and across two, to float tolerance across three; the buckets really start
//! during the backward passes (the step records' `overlapped`).

use crate::common;
use common::Dpt;

use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::Arc;

use common::{free_port, ok, rel_diff};
use dpt_core::device::DeviceId;
use dpt_tui::engine::{Engine, Outcome, TrainConfig};
use dpt_tui::model::script::ScriptModel;
use dpt_tui::model::ModelKind;
use dpt_tui::record::{Change, Record};

/// A cap of 0.01 MiB: lenet's 129,068 parameters fall into several buckets (the first of
/// 10,485 bytes: fc3 and fc2's bias; one per larger tensor).
const SMALL: f64 = 0.01;

/// Trains `cfg` for a few steps; the outcome and the share of buckets each window overlapped.
fn train(cfg: TrainConfig, cap: f64) -> (Outcome, Vec<f64>) {
    let (outcome, records) = train_records(cfg, cap);
    let overlapped = records
        .iter()
        .filter_map(|r| match r {
            Record::Step(s) => Some(s.overlapped.unwrap_or(-1.0)),
            _ => None,
        })
        .collect();
    (outcome, overlapped)
}

/// Trains `cfg` for a few steps; the outcome and the run's records.
fn train_records(mut cfg: TrainConfig, cap: f64) -> (Outcome, Vec<Record>) {
    cfg.settings.placement.bucket_cap_mb = cap;
    cfg.settings.recipe.batch_size = 96;
    cfg.settings.recipe.seed = 5;
    cfg.settings.placement.max_steps.get_or_insert(7);
    cfg.settings.placement.log_every = 1;
    cfg.settings.placement.check_replicas = true;
    // 300 samples in batches of 96: the 4th step of each epoch is a partial batch of 12.
    let engine = Engine::start(cfg, common::subset(300, 100)).expect("engine starts");
    let records = engine.events().iter().collect();
    (engine.join().expect("training succeeds"), records)
}

/// The re-plans of a run's buckets: (step, buckets before, after).
fn rebucketed(records: &[Record]) -> Vec<(usize, usize, usize)> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::Event(Change::Rebucketed { global_step, before, after }) => {
                Some((*global_step, *before, *after))
            }
            _ => None,
        })
        .collect()
}

fn same_bits(a: &Outcome, b: &Outcome) -> bool {
    a.final_params.len() == b.final_params.len()
        && a.final_params.iter().zip(&b.final_params).all(|((na, ta), (nb, tb))| na == nb && ta.equal(tb))
}

#[test]
fn bucketed_and_after_backward_reductions_train_to_the_same_bits_in_one_process() {
    // resnet18 (BatchNorm buffers, many more tensors) for 2 steps: its buckets differ from lenet's, its
    // steps do not need to cross an epoch's partial batch as lenet's do.
    for (model, replicas, accumulate, steps) in
        [(ModelKind::Lenet, 2, 1, 7), (ModelKind::Lenet, 3, 2, 7), (ModelKind::Resnet18, 2, 1, 2)]
    {
        let cfg = || {
            let mut c = TrainConfig::new(model, vec![DeviceId::Cpu; replicas]);
            c.settings.recipe.accumulate = accumulate;
            c.settings.placement.max_steps = Some(steps);
            c
        };
        let (after, none) = train(cfg(), 0.0);
        assert!(none.iter().all(|&o| o < 0.0), "no buckets, no overlap figure: {none:?}");
        let (bucketed, overlapped) = train(cfg(), SMALL);
        let what = format!("{model:?} on {replicas} replicas, {accumulate} micro-batch(es)");
        assert!(same_bits(&after, &bucketed), "{what}: the buckets changed the weights");
        // Every window but those whose steps no replica reported early started buckets during
        // a backward pass (the hooks fired); none is outside 0..=1.
        assert!(overlapped.iter().all(|o| (0.0..=1.0).contains(o)), "{what}: {overlapped:?}");
        assert!(overlapped.iter().any(|&o| o > 0.0), "{what}: no bucket started early: {overlapped:?}");
    }
}

#[test]
fn a_model_with_a_frozen_backbone_trains_as_after_backward() {
    let dir = tempfile::tempdir().unwrap();
    let model = Arc::new(ScriptModel::read(&common::make_model("frozen-mlp", 1, dir.path())).unwrap());
    let cfg = || TrainConfig::for_script(Arc::clone(&model), vec![DeviceId::Cpu; 2]);
    let (after, _) = train(cfg(), 0.0);
    // 10 bytes: every tensor a bucket of its own (fc2's bias, then its weight).
    let (bucketed, overlapped) = train(cfg(), 1e-5);
    assert!(same_bits(&after, &bucketed));
    assert!(overlapped.iter().any(|&o| o > 0.0), "{overlapped:?}");
}

#[test]
fn buckets_are_planned_again_in_the_order_the_first_step_made_the_gradients() {
    let dir = tempfile::tempdir().unwrap();
    // The head is declared before the body that feeds it, so its gradients, which the backward
    // pass makes first, are the last in the declared plan's reverse order.
    let model = Arc::new(ScriptModel::read(&common::make_model("head-first", 1, dir.path())).unwrap());
    let cfg = || TrainConfig::for_script(Arc::clone(&model), vec![DeviceId::Cpu; 2]);
    let (after, _) = train(cfg(), 0.0);
    // 10 bytes: every tensor a bucket of its own. The declared plan (reverse order) starts
    // with the body's bias, whose gradient the backward pass makes third; the re-plan follows
    // the order the gradients came in, the head's first.
    let (bucketed, records) = train_records(cfg(), 1e-5);
    assert!(same_bits(&after, &bucketed), "the re-planned buckets changed the weights");
    assert_eq!(rebucketed(&records), vec![(1, 4, 4)], "re-planned once, after the first step");
    // lenet's second convolution makes its weight's gradient before its bias's, so at 0.01 MiB
    // the arrival order would close a bucket on the weight (100,000 bytes) and strand the bias
    // (64 bytes) in a bucket of its own: 4 buckets for 3, a collective more for nothing, and
    // the plan is kept; at DDP's default 25 MiB everything is one bucket whatever the order,
    // and the plan is left alone too, without a word.
    let lenet = || TrainConfig::new(ModelKind::Lenet, vec![DeviceId::Cpu; 2]);
    let (_, records) = train_records(lenet(), SMALL);
    assert_eq!(rebucketed(&records), vec![]);
    let (_, records) = train_records(lenet(), 25.0);
    assert_eq!(rebucketed(&records), vec![]);
}

fn flags(cap: f64) -> Vec<String> {
    let data = common::subset_dir();
    let flags = ["--train-limit", "600", "--test-limit", "100", "--batch-size", "120", "--epochs", "2"];
    ["--data", data.to_str().unwrap(), "--headless", "--momentum", "0.9", "--log-every", "1"]
        .into_iter()
        .chain(flags)
        .map(String::from)
        .chain(["--bucket-cap-mb".to_owned(), cap.to_string()])
        .collect()
}

/// `world` ranks of `cpu:1` on localhost; rank 0's run directory.
fn ranks(tmp: &Path, name: &str, world: usize, cap: f64) -> PathBuf {
    let (port, run) = (free_port(), tmp.join(name));
    let children: Vec<Child> = (0..world)
        .map(|r| {
            let mut c = Dpt::new();
            c.args(flags(cap)).args(["--devices", "cpu:1"]).rank(r, world, port);
            if r == 0 {
                c.arg("--run-dir").arg(&run);
            }
            c.piped().spawn()
        })
        .collect();
    for c in children {
        ok(&c.wait_with_output().unwrap());
    }
    run
}

#[test]
fn across_processes_the_buckets_sum_as_the_whole_buffer_does() {
    let tmp = tempfile::tempdir().unwrap();
    // Two ranks: each element is a + b whichever bucket carries it.
    let after = ranks(tmp.path(), "after", 2, 0.0);
    let bucketed = ranks(tmp.path(), "bucketed", 2, SMALL);
    assert_eq!(rel_diff(&common::weights(&after), &common::weights(&bucketed)), 0.0);
    let records = common::wait_for_summary(&bucketed, std::time::Duration::from_secs(5));
    let start = records.iter().find(|r| r["kind"] == "start").unwrap();
    let allreduce = start["allreduce"].as_str().unwrap();
    assert!(
        allreduce.contains("gloo across 2 ranks") && allreduce.contains("buckets overlapping backward"),
        "{allreduce}"
    );
    let early: Vec<f64> = records.iter().filter_map(|r| r["overlapped"].as_f64()).collect();
    assert!(early.iter().any(|&o| o > 0.0), "{early:?}");
    // Three ranks: Gloo's ring sums chunks in an order of its own, so float32 noise only.
    let after = ranks(tmp.path(), "after3", 3, 0.0);
    let bucketed = ranks(tmp.path(), "bucketed3", 3, SMALL);
    let d = rel_diff(&common::weights(&after), &common::weights(&bucketed));
    assert!(d < 1e-5, "relative difference {d}");
}
