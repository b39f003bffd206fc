//! The dashboard of a run without classes measured in steps (a language model on token data):
//! progress in steps, tokens/s, the val loss with its perplexity, perplexity curves where a
//! classifier's accuracy would be, and no accuracy anywhere.

mod common;

use dpt_core::device::DeviceId;
use dpt_core::model::Task;
use dpt_core::record::{Change, EpochStats, Record, RunInfo};
use dpt_dashboard::dashboard::app::App;

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
                test_loss: 3.25,
                epoch_seconds: 10.0,
                eval_seconds: 0.5,
                samples_per_sec: 400.0,
                lr: 1e-3,
                ..EpochStats::default()
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
    // No per-class view is offered; the key says why instead of opening an empty table.
    assert!(!s.contains("by class"), "{s}");
    app.on_key(key('c'));
    let s = screen(&app, 120, 40, false);
    assert!(s.contains("a run without classes has no per-class view"), "{s}");
    assert!(
        app.curves.data.train_acc.is_empty() && app.curves.data.test_acc.is_empty(),
        "no accuracy curves"
    );
}

#[test]
fn the_latest_sample_shows_under_the_curves_and_the_axis_counts_steps() {
    let mut app = language_model_app();
    let s = screen(&app, 120, 40, false);
    assert!(!s.contains("sample at step"), "no panel before a sample:\n{s}");
    // The x axis runs over the 150 steps (3 evaluation periods of 50), labelled in steps.
    let axis = s.lines().find(|l| l.contains(" 75 ") && l.contains("150")).unwrap_or_default();
    assert!(!axis.is_empty(), "x labels 0, 75, 150 in\n{s}");
    for (step, text) in [(50, "th\nthe qat"), (100, " sat on the mat\tand")] {
        app.on_event(&Record::Event(Change::Sampled {
            global_step: step,
            prompt: "the cat".to_owned(),
            text: text.to_owned(),
        }));
    }
    let s = screen(&app, 120, 40, false);
    assert!(s.contains("sample at step 100"), "the latest sample's panel in\n{s}");
    assert!(s.contains("the cat sat on the mat and"), "the prompt and its continuation in\n{s}");
    let panel: String = s.lines().skip_while(|l| !l.contains("sample at step")).take(5).collect();
    assert!(!panel.contains("qat"), "the older sample is replaced:\n{s}");
    // Line breaks show as marks, so a sample keeps its few rows; at 80x24 it still fits.
    let small = screen(&app, 80, 24, false);
    assert!(small.contains("sample at step 100") && small.contains("loss"), "{small}");
    let ascii = screen(&app, 120, 40, true);
    assert!(ascii.contains("the cat sat on the mat and"), "{ascii}");
}

#[test]
fn runs_without_classes_are_compared_by_their_best_val_loss() {
    use dpt_core::record::compare::Baseline;
    use dpt_dashboard::dashboard::app::RunState;
    let mut app = language_model_app();
    let mut other = RunInfo { task: Task::ModelLoss, steps_per_epoch: 50, ..info(&["cpu", "cpu"]) };
    other.settings.optimizer.lr = 3e-3;
    other.settings.recipe.steps = Some(150);
    let evaluations = [3.1, 2.7, 2.9]
        .map(|test_loss| Record::Epoch(Box::new(EpochStats { test_loss, ..Default::default() })));
    let records: Vec<Record> = std::iter::once(Record::Start(Box::new(other))).chain(evaluations).collect();
    app.curves.baselines.push(Baseline::of("higher-lr", &records));
    app.run.state = RunState::Finished;
    let s = screen(&app, 120, 40, false);
    let row =
        s.lines().find(|l| l.contains("best val loss")).unwrap_or_else(|| panic!("no best row in\n{s}"));
    assert!(
        row.contains("3.250") && row.contains("2.700"),
        "this run's 3.25, the baseline's best 2.7: {row}"
    );
    assert!(!s.contains("best test acc"), "{s}");
}
