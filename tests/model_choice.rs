//! Model choice over a run: the best evaluations kept as checkpoints and the early stop, as the
//! records and the run directory show them.

use crate::common;
use common::Dpt;

use dpt_core::best::BestMetric;
use dpt_core::device::DeviceId;
use dpt_tui::engine::optim::OptimConfig;
use dpt_tui::engine::{Engine, FinishReason, TrainConfig};
use dpt_tui::model::ModelKind;
use dpt_tui::persist::checkpoint::Checkpoint;
use dpt_tui::record::{Change, Record};

#[test]
fn a_run_that_stops_improving_keeps_its_best_and_stops_early() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = TrainConfig::new(ModelKind::Lenet, vec![DeviceId::Cpu; 2]);
    // A learning rate too small to change the predictions: the accuracy stays where it starts.
    (cfg.settings.recipe.batch_size, cfg.settings.recipe.epochs, cfg.settings.optimizer) =
        (64, 8, OptimConfig::sgd(1e-12, 0.0, 0.0));
    (cfg.settings.best.keep, cfg.settings.best.metric, cfg.settings.best.early_stop) =
        (2, BestMetric::ValAcc, Some(2));
    cfg.run_dir = Some(dir.path().to_owned());
    let engine = Engine::start(cfg, common::subset(128, 64)).unwrap();
    let (mut kept, mut stopped, mut reason) = (Vec::new(), None, None);
    for r in engine.events().iter() {
        match r {
            Record::Event(Change::BestKept { epoch, path, .. }) => kept.push((epoch, path)),
            Record::Event(Change::EarlyStopped { epoch, best_epoch, patience, .. }) => {
                stopped = Some((epoch, best_epoch, patience))
            }
            Record::Summary(s) => reason = Some(s.reason),
            _ => {}
        }
    }
    engine.join().unwrap();
    assert_eq!(kept.iter().map(|(e, _)| *e).collect::<Vec<_>>(), [1, 2], "a tie is kept while there is room");
    assert_eq!(stopped, Some((3, 1, 2)), "two evaluations after the best at epoch 1");
    assert_eq!(reason, Some(FinishReason::EarlyStopped));
    for (epoch, path) in &kept {
        let ckpt = Checkpoint::read(std::path::Path::new(path)).unwrap();
        assert_eq!(ckpt.state.epochs_done, *epoch);
        assert!(std::path::Path::new(path).join("model.safetensors").is_file());
    }
    let last = Checkpoint::read(dir.path()).unwrap();
    assert_eq!(last.state.best.as_ref().map(|b| b.since_best), Some(2), "the count survives a resume");
}

#[test]
fn a_validation_split_is_evaluated_each_epoch_and_the_test_set_once_at_the_end() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let out = Dpt::new()
        .args(["--headless", "--devices", "cpu:2", "--epochs", "2", "--batch-size", "100"])
        .args([
            "--data",
            common::subset_dir().to_str().unwrap(),
            "--train-limit",
            "500",
            "--test-limit",
            "120",
        ])
        .args(["--val-fraction", "0.2", "--keep-best", "1", "--run-dir", run.to_str().unwrap()])
        .output();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("400 train / 100 val / 120 test samples"), "{stdout}");
    assert!(stdout.contains("val acc") && stdout.contains("test set (120 samples"), "{stdout}");
    let records = common::wait_for_summary(&run, std::time::Duration::from_secs(5));
    let epochs: Vec<&serde_json::Value> = records.iter().filter(|r| r["kind"] == "epoch").collect();
    assert_eq!(epochs.len(), 2);
    for e in &epochs {
        let counted: u64 = e["confusion"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r.as_array().unwrap())
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(counted, 100, "each epoch evaluates the 100 validation samples");
    }
    let tested = records.iter().find(|r| r["event"] == "tested").expect("the test set at the end");
    assert_eq!(tested["samples"], 120);
    let summary = records.last().unwrap();
    assert_eq!(summary["test_acc"], tested["acc"], "the summary's test accuracy is the test set's");
    assert_eq!(summary["val_acc"], epochs[1]["test_acc"], "and the last validation accuracy beside it");
}
