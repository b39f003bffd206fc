//! Model choice over a run: the best evaluations kept as checkpoints and the early stop, as the
//! records and the run directory show them.

mod common;

use dpt_tui::engine::best::BestMetric;
use dpt_tui::engine::checkpoint::Checkpoint;
use dpt_tui::engine::optim::OptimConfig;
use dpt_tui::engine::{DeviceId, Engine, FinishReason, TrainConfig};
use dpt_tui::model::ModelKind;
use dpt_tui::record::{Change, Record};

#[test]
fn a_run_that_stops_improving_keeps_its_best_and_stops_early() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = TrainConfig::new(ModelKind::Lenet, vec![DeviceId::Cpu; 2]);
    // A learning rate too small to change the predictions: the accuracy stays where it starts.
    (cfg.batch_size, cfg.epochs, cfg.optim) = (64, 8, OptimConfig::sgd(1e-12, 0.0, 0.0));
    (cfg.keep_best, cfg.best_metric, cfg.early_stop) = (2, BestMetric::ValAcc, Some(2));
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
