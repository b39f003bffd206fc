//! The dashboard without a terminal: state and key handling as plain unit tests, and screens
//! drawn on ratatui's `TestBackend` at 80×24 and 120×40.

mod common;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use dpt_core::device::DeviceId;
use dpt_core::monitor::{DeviceSample, MonitorMsg, SampleSource};
use dpt_core::record::Change;
use dpt_core::record::Summary;
use dpt_core::record::{FinishReason, Record};
use dpt_core::Control;
use dpt_dashboard::dashboard::app::{App, Overlay, PromptKind, RunState};
use dpt_dashboard::dashboard::curves::CurveView;

use common::screens::{code, info, key, running_app, screen, step};

#[test]
fn pause_toggles_and_follows_the_engine() {
    let mut app = running_app();
    assert_eq!(app.on_key(key(' ')), vec![Control::Pause]);
    // The state changes when the engine confirms, not on the key press.
    assert_eq!(app.run.state, RunState::Running);
    app.on_event(&Record::Event(Change::Paused { global_step: 570 }));
    assert_eq!(app.run.state, RunState::Paused);
    assert_eq!(app.on_key(key('p')), vec![Control::Resume]);
    app.on_event(&Record::Event(Change::Resumed { global_step: 570 }));
    assert_eq!(app.run.state, RunState::Running);
    assert!(app.log.tail(2).any(|l| l.text == "paused at step 570"));
}

#[test]
fn lr_keys_and_prompt() {
    let mut app = running_app();
    assert_eq!(app.on_key(key('+')), vec![Control::SetLr { lr: 0.4 }]);
    assert_eq!(app.on_key(key('-')), vec![Control::SetLr { lr: 0.1 }]);
    assert!(app.on_key(key('l')).is_empty());
    for c in "abc".chars() {
        app.on_key(key(c));
    }
    assert!(app.on_key(code(KeyCode::Enter)).is_empty(), "a bad lr is refused");
    match &app.overlay {
        Some(Overlay::Prompt { kind: PromptKind::Lr, error: Some(e), .. }) => {
            assert!(e.contains("not a positive finite number"))
        }
        other => panic!("prompt stays open with an error: {other:?}"),
    }
    for bad in ["-1", "0", "nan", "inf", "1e400"] {
        app.overlay = Some(Overlay::Prompt { kind: PromptKind::Lr, input: bad.into(), error: None });
        assert!(app.on_key(code(KeyCode::Enter)).is_empty(), "{bad} refused");
    }
    app.overlay = Some(Overlay::Prompt { kind: PromptKind::Lr, input: "0.09".into(), error: None });
    app.on_key(code(KeyCode::Backspace));
    app.on_key(key('5'));
    assert_eq!(app.on_key(code(KeyCode::Enter)), vec![Control::SetLr { lr: 0.05 }]);
    assert!(app.overlay.is_none());
    app.on_key(key('l'));
    app.on_key(key('3'));
    assert!(app.on_key(code(KeyCode::Esc)).is_empty(), "Esc cancels");
    assert!(app.overlay.is_none());
    app.on_event(&Record::Event(Change::LrChanged { from: 0.2, to: 0.05, global_step: 571 }));
    assert_eq!(app.run.lr, Some(0.05));
    assert_eq!(app.on_key(key('+')), vec![Control::SetLr { lr: 0.1 }]);
    // A schedule lowers the rate step by step: the status line and the keys follow it, so `+`
    // doubles the rate the run trains at, not the base rate it started from.
    app.on_event(&step(3, 150, 0.5, 0.7, 0.0125));
    assert!(screen(&app, 120, 40, false).contains("lr 0.0125"), "the scheduled rate is shown");
    assert_eq!(app.on_key(key('+')), vec![Control::SetLr { lr: 0.025 }]);
}

#[test]
fn help_overlay_save_views_and_quit() {
    let mut app = running_app();
    app.on_key(key('?'));
    assert_eq!(app.overlay, Some(Overlay::Help));
    assert!(app.on_key(key('s')).is_empty(), "keys go to the overlay while it is open");
    app.on_key(code(KeyCode::Esc));
    assert!(app.overlay.is_none());
    assert_eq!(app.on_key(key('s')), vec![Control::SaveNow]);
    app.on_key(key('v'));
    assert_eq!(app.curves.settings.view, CurveView::Accuracy);
    app.on_key(key('w'));
    assert!(app.curves.settings.recent.is_some());
    app.on_key(key('g'));
    assert!(app.curves.settings.log_loss);
    // q asks first; n keeps training; y stops, and the dashboard leaves once the run finished.
    assert!(app.on_key(key('q')).is_empty());
    assert_eq!(app.overlay, Some(Overlay::ConfirmQuit));
    assert!(app.on_key(key('n')).is_empty());
    assert!(!app.viewer.quit);
    app.on_key(key('q'));
    assert_eq!(app.on_key(key('y')), vec![Control::Stop]);
    assert!(!app.viewer.quit);
    app.on_event(&Record::Event(Change::StopRequested { global_step: 600 }));
    assert_eq!(app.run.state, RunState::Stopping);
    app.on_event(&Record::Summary(Box::new(Summary {
        val_acc: None,
        model: dpt_core::model::ModelKind::Lenet,
        devices: vec![DeviceId::Cpu, DeviceId::Cpu],
        test_acc: Some(0.8),
        sec_per_epoch: Some(11.5),
        samples_per_sec: 5100.0,
        epochs_done: 2,
        global_steps: 600,
        reason: FinishReason::Stopped,
        peak_rss_mib: None,
        val_loss: None,
        perplexity: None,
        tokens_per_sec: None,
        bottleneck: None,
        flops_per_sample: None,
        model_flops: None,
        mfu: None,
        peak_flops: None,
        peak_device_mib: Vec::new(),
    })));
    assert!(app.viewer.quit);
}

#[test]
fn ctrl_c_stops_and_a_lost_connection_is_said_plainly() {
    let mut app = running_app();
    assert_eq!(app.on_key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)), vec![Control::Stop]);
    let mut app = running_app();
    app.on_disconnected();
    assert_eq!(app.run.state, RunState::Disconnected);
    assert!(app.run.failure.is_none(), "a lost connection is not a failed run");
    assert!(app.log.tail(1).any(|l| l.text.contains("lost the connection")));
    assert!(app.on_key(key(' ')).is_empty(), "no controls once the run is over");
    app.on_key(key('q'));
    assert!(app.viewer.quit, "q leaves at once after the run ended");
}

#[test]
fn running_at_120x40() {
    let s = screen(&running_app(), 120, 40, false);
    for needle in [
        "RUNNING",
        "lenet on [cpu, cpu]",
        "epoch 3/10",
        "step 100/235",
        "lr 0.2",
        "momentum 0",
        "batch 256",
        "samples/s 5000",
        "sec/epoch 11.5",
        "elapsed 0:01:23",
        "test acc 0.800",
        "train loss",
        "devices · process figures (no NVML)",
        "cpu [r0,r1]",
        "187%",
        "0.7/24.0 GiB",
        "r0 41.0 ms wait 21% r1 53.0 ms",
        "allreduce 5%",
        "epoch 2/10 done: train loss 1.0000",
        "space  pause",
    ] {
        assert!(s.contains(needle), "missing {needle:?} in\n{s}");
    }
    assert!(s.chars().any(|c| ('\u{2801}'..='\u{28ff}').contains(&c)), "braille curve drawn\n{s}");
}

#[test]
fn running_at_80x24_is_compact_and_complete() {
    let s = screen(&running_app(), 80, 24, false);
    for needle in [
        "RUNNING",
        "epoch 3/10",
        "lr 0.2",
        "mom 0",
        "batch 256",
        "ETA",
        "devices (process)",
        "187%",
        "?  help",
    ] {
        assert!(s.contains(needle), "missing {needle:?} in\n{s}");
    }
    // The key bar is the bottom line: nothing below the panels was cut off.
    assert!(s.lines().last().is_some_and(|l| l.contains("help")), "{s}");
}

#[test]
fn paused_with_marks_and_the_accuracy_view() {
    let mut app = running_app();
    app.on_event(&Record::Event(Change::Paused { global_step: 570 }));
    app.on_event(&Record::Event(Change::LrChanged { from: 0.2, to: 0.1, global_step: 570 }));
    app.on_key(key('v'));
    let s = screen(&app, 120, 40, false);
    for needle in [
        "PAUSED",
        "accuracy · whole run",
        "train acc",
        "test acc",
        "lr 0.2 -> 0.1 at step 570",
        "paused at step 570",
    ] {
        assert!(s.contains(needle), "missing {needle:?} in\n{s}");
    }
    assert!(s.contains('┊'), "pause and lr marks drawn\n{s}");
}

#[test]
fn help_overlay_lists_every_key() {
    let mut app = running_app();
    app.on_key(key('?'));
    let s = screen(&app, 120, 40, false);
    for (keys, _) in dpt_dashboard::dashboard::help() {
        assert!(s.contains(keys), "help lacks {keys}\n{s}");
    }
    let s = screen(&app, 80, 24, false);
    assert!(s.contains("pause or resume training") && s.contains("log scale for the loss"), "{s}");
}

#[test]
fn ascii_rendering_uses_no_other_characters() {
    let mut app = running_app();
    app.on_event(&Record::Event(Change::Paused { global_step: 570 }));
    for (w, h) in [(80, 24), (120, 40)] {
        let s = screen(&app, w, h, true);
        assert!(s.is_ascii(), "non-ASCII in\n{s}");
        assert!(s.contains('*') && s.contains("PAUSED"), "{s}");
    }
}

#[test]
fn too_small_asks_for_a_larger_terminal() {
    let s = screen(&running_app(), 50, 12, false);
    assert!(s.contains("Terminal too small (50x12)"), "{s}");
    assert!(s.contains("at least 60x18"), "{s}");
}

#[test]
fn before_the_first_report() {
    let mut app = App::new(&[DeviceId::Cpu]);
    let s = screen(&app, 80, 24, false);
    assert!(s.contains("STARTING") && s.contains("waiting for the workers"), "{s}");
    app.on_event(&Record::Start(Box::new(info(&["cpu"]))));
    let s = screen(&app, 80, 24, false);
    assert!(s.contains("no data yet"), "{s}");
}

#[test]
fn capital_s_asks_for_a_folder_to_save_into() {
    let mut app = running_app();
    assert!(app.on_key(key('S')).is_empty());
    assert!(app.on_key(code(KeyCode::Enter)).is_empty(), "an empty folder is refused");
    assert!(matches!(&app.overlay, Some(Overlay::Prompt { kind: PromptKind::SaveDir, error: Some(_), .. })));
    for c in "/scratch/run 2".chars() {
        app.on_key(key(c));
    }
    assert_eq!(app.on_key(code(KeyCode::Enter)), vec![Control::SaveTo { dir: "/scratch/run 2".into() }]);
    assert!(app.overlay.is_none());
    // The engine's answer shows on the status line until a save succeeds.
    app.on_event(&Record::Event(Change::SaveFailed {
        path: "/r/model.safetensors".into(),
        message: "No space left on device (os error 28)".into(),
        advice: String::new(),
    }));
    assert_eq!(
        app.run.save_problem.as_deref(),
        Some("NOT SAVED (No space left on device): s retries, S saves elsewhere")
    );
    app.on_event(&Record::Event(Change::Saved { path: "/s/model.safetensors".into(), global_step: 600 }));
    assert!(app.run.save_problem.is_none());
}

#[test]
fn a_multi_process_run_shows_every_ranks_devices() {
    let mut app = App::new(&[]);
    let mut i = info(&["cpu"]);
    i.world = Some(dpt_core::record::run_info::WorldInfo {
        rank: 0,
        backend: "gloo".into(),
        hosts: vec!["node-a".into(), "node-b".into()],
        replicas: vec![1, 2],
        devices: vec![vec![DeviceId::Cpu], vec![DeviceId::Cpu, DeviceId::Cpu]],
    });
    app.on_event(&Record::Start(Box::new(i)));
    assert_eq!(app.devices.panels.len(), 2, "a panel per rank's device");
    assert_eq!(app.devices.panels[1].replicas, vec![1, 2], "global replica numbers");
    let sample = |rank: Option<usize>, util: f64| DeviceSample {
        device: DeviceId::Cpu,
        source: SampleSource::Process,
        util_pct: Some(util),
        mem_used: Some(1 << 30),
        mem_total: Some(8 << 30),
        temp_c: None,
        power_w: None,
        name: None,
        rank,
        host: rank.map(|_| "node-b".to_owned()),
        note: None,
        gpu: None,
    };
    app.on_monitor(&MonitorMsg::Samples(vec![sample(None, 55.0), sample(Some(1), 77.0)]));
    assert_eq!(
        app.devices.panels[0].latest.as_ref().and_then(|s| s.util_pct),
        Some(55.0),
        "rank 0's own sample"
    );
    assert_eq!(
        app.devices.panels[1].latest.as_ref().and_then(|s| s.util_pct),
        Some(77.0),
        "rank 1's, by rank"
    );
    let s = screen(&app, 120, 40, false);
    for needle in
        ["lenet on 2 ranks, 3 replicas", "node-a rank 0 cpu [r0]", "node-b rank 1 cpu [r1,r2]", "77%"]
    {
        assert!(s.contains(needle), "missing {needle:?} in\n{s}");
    }
}

#[test]
fn a_gpu_without_nvml_figures_says_why_and_never_shows_cpu_figures() {
    let mut app = App::new(&[DeviceId::Cuda(0)]);
    app.on_event(&Record::Start(Box::new(info(&["cuda:0"]))));
    app.on_monitor(&MonitorMsg::NvmlUnavailable { reason: "NVML not available (library not found)".into() });
    app.on_monitor(&MonitorMsg::Samples(vec![DeviceSample::unavailable(
        DeviceId::Cuda(0),
        "NVML not available (library not found)".into(),
    )]));
    let s = screen(&app, 120, 40, false);
    assert!(s.contains("GPU figures unavailable: NVML not available"), "{s}");
    assert!(!s.contains("rss") && !s.contains("process figures"), "no CPU figures on a GPU panel\n{s}");
    assert!(app.devices.nvml_note.as_deref().is_some_and(|n| n.ends_with("GPU figures unavailable")));
}

/// Writes `records` as the run directory `dir`'s metrics.jsonl.
fn recorded(dir: &std::path::Path, records: &[Record]) {
    std::fs::create_dir_all(dir).unwrap();
    let mut w = dpt_core::record::file::MetricsWriter::create(dir).unwrap();
    for r in records {
        w.write(r).unwrap();
    }
}

#[test]
fn b_overlays_a_finished_neighbour_as_a_baseline_and_the_table_names_what_differs() {
    let root = tempfile::tempdir().unwrap();
    let mut other = info(&["cpu", "cpu"]);
    (other.lr, other.settings.optimizer.lr) = (0.05, 0.05);
    let summary = Summary {
        val_acc: None,
        model: dpt_core::model::ModelKind::Lenet,
        devices: vec![DeviceId::Cpu, DeviceId::Cpu],
        test_acc: Some(0.7),
        sec_per_epoch: Some(11.5),
        samples_per_sec: 5100.0,
        epochs_done: 1,
        global_steps: 235,
        reason: FinishReason::Completed,
        peak_rss_mib: None,
        val_loss: None,
        perplexity: None,
        tokens_per_sec: None,
        bottleneck: None,
        flops_per_sample: None,
        model_flops: None,
        mfu: None,
        peak_flops: None,
        peak_device_mib: Vec::new(),
    };
    recorded(
        &root.path().join("slow-lr"),
        &[
            Record::Start(Box::new(other)),
            common::screens::step(1, 235, 1.5, 0.5, 0.05),
            common::screens::epoch(1, 0.7),
            Record::Summary(Box::new(summary)),
        ],
    );
    recorded(&root.path().join("this"), &[Record::Start(Box::new(info(&["cpu", "cpu"])))]);
    let mut app = running_app();
    app.curves.run_dir = Some(root.path().join("this"));
    app.on_key(key('b'));
    let Some(Overlay::Baselines { entries, cursor: 0 }) = &app.overlay else { panic!("{:?}", app.overlay) };
    assert_eq!(entries.len(), 1, "the run itself is not offered: {entries:?}");
    app.on_key(code(KeyCode::Enter));
    assert_eq!(app.curves.baselines.len(), 1);
    assert_eq!(app.curves.baselines[0].name, "slow-lr");
    assert_eq!(
        app.curves.baselines[0].best,
        Some(dpt_core::record::compare::Best { metric: dpt_core::best::BestMetric::ValAcc, value: 0.7 })
    );
    let shot = screen(&app, 120, 40, false);
    assert!(shot.contains("[x] slow-lr"), "{shot}");
    assert!(shot.contains("lr") && shot.contains("0.05"), "the differing lr is in the table:\n{shot}");
    app.on_key(code(KeyCode::Esc));
    assert!(app.overlay.is_none());
    assert!(screen(&app, 120, 40, false).contains("━ slow-lr"), "the legend names the baseline");
    // Enter again takes it off.
    app.on_key(key('b'));
    app.on_key(key(' '));
    assert!(app.curves.baselines.is_empty());
}

#[test]
fn c_shows_the_last_evaluation_by_class() {
    let mut app = running_app();
    let s = {
        app.on_key(key('c'));
        screen(&app, 120, 40, false)
    };
    assert!(s.contains("this run's record has no breakdown by class"), "{s}");
    app.on_key(code(KeyCode::Esc));
    let mut stats = match common::screens::epoch(4, 0.81) {
        Record::Epoch(e) => *e,
        _ => unreachable!(),
    };
    stats.top5_acc = Some(0.97);
    stats.per_class_acc = Some(vec![Some(0.9), Some(0.6), None]);
    stats.confusion = Some(vec![vec![90, 10, 0], vec![40, 60, 0], vec![0, 0, 0]]);
    app.on_event(&Record::Epoch(Box::new(stats)));
    app.on_key(key('c'));
    assert_eq!(app.overlay, Some(Overlay::Classes));
    for (w, h) in [(120, 40), (80, 24)] {
        let s = screen(&app, w, h, false);
        for needle in
            ["by class", "epoch 4: test acc 0.810, top-5 0.970", "0 0.900", "1 0.600", "2   -", "90", "40"]
        {
            assert!(s.contains(needle), "{needle} at {w}x{h}\n{s}");
        }
    }
    app.on_key(key('c'));
    assert_eq!(app.overlay, None, "c closes it again");
}

#[test]
fn a_starved_streaming_loader_is_flagged_in_the_status() {
    let mut app = running_app();
    let Record::Step(mut s) = common::screens::step(1, 100, 0.5, 0.8, 0.1) else { unreachable!() };
    s.loader =
        Some(dpt_core::record::LoaderStats { ready: 0.1, depth: 2, images_per_sec: 812.0, threads: None });
    app.on_event(&Record::Step(s.clone()));
    let text = screen(&app, 140, 40, false);
    assert!(text.contains("loader 0.1/2 ready, 812 img/s decoding (replicas wait for data)"), "{text}");
    s.loader =
        Some(dpt_core::record::LoaderStats { ready: 1.9, depth: 2, images_per_sec: 3100.0, threads: None });
    app.on_event(&Record::Step(s));
    let text = screen(&app, 140, 40, false);
    assert!(text.contains("loader 1.9/2 ready, 3100 img/s decoding") && !text.contains("wait for data"));
}

/// A rewind point taken before `global_step` of the running fixture (235 steps an epoch).
fn point(global_step: usize) -> Record {
    let (epoch, step) = (global_step / 235, global_step % 235);
    Record::Event(Change::Snapshot { global_step, epoch, step, loss: Some(0.5), lr: 0.2, unix: 1000.0 })
}

#[test]
fn the_rewind_dialog_holds_the_run_from_opening_to_the_choice_sent() {
    let mut app = running_app();
    for g in [540, 560, 580] {
        app.on_event(&point(g));
    }
    assert_eq!(app.run.global_step, 580, "a point says where the run is, ahead of the step records");
    assert!(app.on_key(key('r')).is_empty());
    assert_eq!(app.hold(), Some(Control::Hold { on: true }));
    assert_eq!(app.hold(), None, "held once while open");
    // The engine holds the run at its next boundary and says where that is.
    app.on_event(&Record::Event(Change::Paused { global_step: 583 }));
    let s = screen(&app, 120, 40, false);
    assert!(s.contains("paused at step 583, lr 0.2; go back to:"), "{s}");
    for k in [code(KeyCode::Up), code(KeyCode::Enter), code(KeyCode::Enter)] {
        assert!(app.on_key(k).is_empty());
        assert_eq!(app.hold(), None, "still held on every page of the dialog");
    }
    let sent = app.on_key(key('y'));
    assert_eq!(sent, vec![Control::Rewind { global_step: 560, lr: Some(0.1), skip: true }]);
    // The event loop sends the key's controls first: the choice reaches the held run.
    assert_eq!(app.hold(), Some(Control::Hold { on: false }));

    // Closed without a choice, it lets go too.
    app.on_key(key('r'));
    assert_eq!(app.hold(), Some(Control::Hold { on: true }));
    app.on_key(code(KeyCode::Esc));
    assert_eq!(app.hold(), Some(Control::Hold { on: false }));

    // The offer after a loss that is not finite holds the paused run as well.
    app.on_event(&Record::Event(Change::NotFinite {
        global_step: 583,
        then: dpt_core::policies::OnNan::Pause,
    }));
    assert!(matches!(app.overlay, Some(Overlay::Rewind(_))));
    assert_eq!(app.hold(), Some(Control::Hold { on: true }));
    // Ctrl-C closes it with the stop.
    assert_eq!(app.on_key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)), vec![Control::Stop]);
    assert_eq!(app.hold(), Some(Control::Hold { on: false }));

    let mut read_only = running_app();
    read_only.viewer.steerable = false;
    read_only.on_event(&point(540));
    read_only.on_key(key('r'));
    assert_eq!(read_only.hold(), None, "a viewer that may not steer holds nothing");
}

#[test]
fn esc_in_a_trial_opened_from_the_sweep_board_goes_back_and_the_run_goes_on() {
    let mut app = running_app();
    app.viewer.attached = true;
    app.viewer.returns = true;
    let s = screen(&app, 120, 30, false);
    assert!(s.contains("Esc  back to the sweep"), "{s}");
    assert!(app.on_key(code(KeyCode::Esc)).is_empty(), "no stop is sent");
    assert!(app.viewer.quit && app.viewer.detached, "the board comes back; the run goes on");
    // Ctrl-C too: stopping a trial for good takes the board's own key.
    let mut app = running_app();
    app.viewer.returns = true;
    let ctrl_c = KeyEvent::new(KeyCode::Char('c'), crossterm::event::KeyModifiers::CONTROL);
    assert!(app.on_key(ctrl_c).is_empty(), "no stop is sent");
    assert!(app.viewer.quit && app.viewer.detached);
    // Without the board behind it, Esc asks to stop the run, as q does.
    let mut app = running_app();
    app.viewer.attached = true;
    app.on_key(code(KeyCode::Esc));
    assert!(!app.viewer.detached);
}
