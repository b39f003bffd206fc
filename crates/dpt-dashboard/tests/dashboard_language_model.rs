//! The dashboard of a run without classes measured in steps (a language model on token data):
//! progress in steps, tokens/s, the val loss with its perplexity, perplexity curves where a
//! classifier's accuracy would be, and no accuracy anywhere.

mod common;

use dpt_dashboard::dashboard::app::App;
use dpt_protocol::model::Task;
use dpt_protocol::record::{EpochStats, Record, RunInfo};
use dpt_protocol::DeviceId;

use common::screens::{info, key, screen, step};

/// 150 steps with an evaluation every 50, batch 16 windows of 64 tokens; 75 steps in.
fn language_model_app() -> App {
    let mut app = App::new(&[DeviceId::Cpu, DeviceId::Cpu]);
    app.clock = || "12:00:00".to_owned();
    let mut start = RunInfo {
        task: Task::ModelLoss,
        steps_per_epoch: 50,
        train_samples: 800,
        test_samples: 320,
        ..info(&["cpu", "cpu"])
    };
    let r = &mut start.settings.recipe;
    (r.steps, r.eval_every, r.epochs, r.batch_size) = (Some(150), Some(50), 3, 16);
    start.settings.data.block_size = Some(64);
    app.on_event(&Record::Start(Box::new(start)));
    for g in (10..=75).step_by(5) {
        let Record::Step(mut s) = step(1 + (g - 1) / 50, (g - 1) % 50 + 1, 5.0 - g as f64 / 30.0, 0.0, 1e-3)
        else {
            unreachable!()
        };
        (s.global_step, s.steps_per_epoch, s.samples_per_sec) = (g, 50, 400.0);
        app.on_event(&Record::Step(s));
        if g == 50 {
            app.on_event(&Record::Epoch(Box::new(EpochStats {
                epoch: 1,
                train_loss: 3.4,
                train_acc: 0.0,
                test_loss: 3.25,
                test_acc: 0.0,
                epoch_seconds: 10.0,
                eval_seconds: 0.5,
                samples_per_sec: 400.0,
                lr: 1e-3,
                ema_test_acc: None,
                ema_test_loss: None,
                top5_acc: None,
                per_class_acc: None,
                confusion: None,
            })));
        }
    }
    app.tick(20.0);
    app
}

#[test]
fn a_language_model_shows_steps_tokens_and_perplexity_and_no_accuracy() {
    let mut app = language_model_app();
    let s = screen(&app, 120, 40, false);
    for needle in ["step 75/150", "tokens/s 25600", "val loss 3.250 (ppl 25.8)", "step 50/150 done"] {
        assert!(s.contains(needle), "missing {needle:?} in\n{s}");
    }
    for absent in ["test acc", "epoch 2/3", "sec/epoch"] {
        assert!(!s.contains(absent), "{absent:?} shown in\n{s}");
    }
    // The accuracy view is the perplexity of a run without classes.
    app.on_key(key('v'));
    let s = screen(&app, 120, 40, false);
    for needle in ["perplexity", "train ppl", "test ppl"] {
        assert!(s.contains(needle), "missing {needle:?} in\n{s}");
    }
    assert!(!s.contains("train acc"), "{s}");
    assert!(
        app.curves.data.train_acc.is_empty() && app.curves.data.test_acc.is_empty(),
        "no accuracy curves"
    );
}
