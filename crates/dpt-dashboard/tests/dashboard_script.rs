//! The dashboard of a script run (`dpt-tui run -- CMD`): only what the script reported (no
//! optimizer, batch or allreduce of dpt-tui's), its evaluations and named figures, its output in
//! the log, and the keys of the controls it cannot take hidden, and refused with the reason.

mod common;

use dpt_core::device::DeviceId;
use dpt_core::model::Task;
use dpt_core::monitor::MonitorMsg;
use dpt_core::record::script::{Capability, EvalStats, ScriptInfo};
use dpt_core::record::{Record, RunInfo};
use dpt_dashboard::dashboard::app::App;

use common::screens::{key, screen, step};

/// A loop that gave `dpt_tui.init` no optimizer and no save function, 40 of 100 steps in.
fn script_app() -> App {
    let mut app = App::new(&[DeviceId::Cpu]);
    app.clock = || "12:00:00".to_owned();
    let mut start = RunInfo {
        task: Task::ModelLoss,
        devices: vec![DeviceId::Cpu],
        script: Some(ScriptInfo {
            label: "train.py".into(),
            framework: "plain".into(),
            command: vec!["python".into(), "train.py".into()],
            can: vec![Capability::Pause, Capability::Stop],
            world_size: 1,
            devices: Vec::new(),
            total_steps: Some(100),
            config: Default::default(),
        }),
        ..RunInfo::default()
    };
    start.settings.recipe.steps = Some(100);
    app.on_event(&Record::Start(Box::new(start)));
    for g in (5..=40).step_by(5) {
        let Record::Step(mut s) = step(1, g, 2.0 - g as f64 / 40.0, f64::NAN, 0.01) else { unreachable!() };
        (s.global_step, s.steps_per_epoch, s.samples_per_sec) = (g, 100, 640.0);
        s.timing = dpt_core::record::StepTiming { compute: 0.02, ..Default::default() };
        s.scalars = [("grad_scale".to_owned(), g as f64), ("tokens".to_owned(), 2.0 * g as f64)].into();
        app.on_event(&Record::Step(s));
    }
    app.on_event(&Record::Eval(Box::new(EvalStats {
        global_step: 40,
        metrics: [("val_loss".to_owned(), 1.5)].into(),
    })));
    app.on_monitor(&MonitorMsg::Output { lines: vec!["epoch 0 done, 40 iterations".into()] });
    app.tick(3.0);
    app
}

#[test]
fn a_script_run_shows_what_it_reported_and_hides_what_it_cannot_do() {
    let mut app = script_app();
    let s = screen(&app, 120, 40, false);
    for needle in [
        "train.py on [cpu]",
        "step 40/100",
        "eval val_loss 1.5000",
        "step 20.0 ms",
        "│ epoch 0 done, 40 iterations",
        "step 40 evaluation: val_loss 1.5",
    ] {
        assert!(s.contains(needle), "missing {needle:?} in\n{s}");
    }
    for absent in [
        "momentum",
        "batch",
        "allreduce",
        "sec/epoch",
        "rewind",
        "lr x2",
        "set lr",
        "save",
        "by class",
        "bottleneck",
    ] {
        assert!(!s.contains(absent), "{absent:?} shown in\n{s}");
    }
    // A key of a control the script cannot take says why, and asks nothing.
    assert!(app.on_key(key('l')).is_empty());
    assert!(app.on_key(key('s')).is_empty());
    let s = screen(&app, 120, 40, false);
    assert!(s.contains("train.py gave dpt_tui.init no optimizer: its lr cannot be changed"), "{s}");
    assert!(s.contains("train.py gave dpt_tui.init no save function"), "{s}");
    // Pause is the script's to take.
    assert_eq!(app.on_key(key(' ')), vec![dpt_core::Control::Pause]);
    // Stopping asks about the script, not about saving weights dpt-tui does not hold.
    app.on_key(key('q'));
    let s = screen(&app, 120, 40, false);
    assert!(s.contains("Stop the script after its current step?") && !s.contains("save the weights"), "{s}");
    app.on_key(key('n'));
    // The named figures: `n` shows each in turn.
    app.on_key(key('n'));
    let s = screen(&app, 120, 40, false);
    assert!(s.contains("tokens (2 of 3, n: next)"), "{s}");
    app.on_key(key('n'));
    let s = screen(&app, 120, 40, false);
    assert!(s.contains("val_loss (3 of 3, n: next)"), "{s}");
}
