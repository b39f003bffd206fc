//! The dashboard's screens as snapshots (`tests/snapshots/`), so a layout regression fails: a
//! running, a paused, a finished and a failed run, one whose final save failed and one with its
//! model FLOPs counted, at 80×24 and 120×40; d2l's view with smoothing, a straggler, and the side-by-side curves at 200×50. The fixtures are fixed (clock, timings, samples), so nothing needs filtering.
//! After a deliberate change of the layout, review with `cargo insta review` (or rerun with
//! `INSTA_UPDATE=always`) and commit the new snapshots.

mod common;

use dpt_core::device::DeviceId;
use dpt_core::model::ModelKind;
use dpt_core::record::{Change, Summary};
use dpt_core::record::{FinishReason, Record};
use dpt_dashboard::dashboard::app::App;

use common::screens::{running_app, screen, step};
use dpt_core::flops::PeakFlops;
use dpt_core::model::Precision;
use dpt_core::record::bottleneck::{Bottleneck, Cause};
use dpt_core::record::{ReplicaTiming, StepTiming};
use dpt_dashboard::dashboard::curves::CurveView;

fn paused() -> App {
    let mut app = running_app();
    app.on_event(&Record::Event(Change::Paused { global_step: 570 }));
    app.on_event(&Record::Event(Change::LrChanged { from: 0.2, to: 0.1, global_step: 570 }));
    app
}

/// The running fixture's summary, had it finished after its second epoch.
fn summary() -> Summary {
    Summary {
        val_acc: None,
        model: ModelKind::Lenet,
        devices: vec![DeviceId::Cpu, DeviceId::Cpu],
        test_acc: Some(0.8),
        sec_per_epoch: Some(11.5),
        samples_per_sec: 5100.0,
        epochs_done: 2,
        global_steps: 570,
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
    }
}

fn finished() -> App {
    let mut app = running_app();
    app.on_event(&Record::Summary(Box::new(summary())));
    app
}

fn failed() -> App {
    let mut app = running_app();
    app.on_event(&Record::Event(Change::Failed {
        replica: Some(1),
        device: Some("cpu".into()),
        message: "replica 1 on cpu failed: injected fault".into(),
    }));
    app
}

fn not_saved() -> App {
    let mut app = running_app();
    app.on_event(&Record::Event(Change::SaveFailed {
        path: "/scratch/run/model.safetensors".into(),
        message: "No space left on device (os error 28)".into(),
        advice: "paused with the weights in memory: free some space and press s to retry, or S to save into another folder; q gives up".into(),
    }));
    app.on_event(&Record::Event(Change::Paused { global_step: 570 }));
    app
}

/// d2l's view (train loss, train and test accuracy on one plot), smoothed with weight 0.9.
fn smoothed_d2l() -> App {
    let mut app = running_app();
    app.curves.settings.view = CurveView::D2l;
    app.curves.settings.smoothing = 2;
    app
}

/// Replica 1 takes twice the median: marked slow, and the coordinator's event in the log.
fn straggler() -> App {
    let mut app = running_app();
    let Record::Step(mut s) = step(3, 150, 0.6, 0.7, 0.2) else { unreachable!() };
    s.timing = StepTiming { data: 0.001, compute: 0.090, allreduce: 0.002, update: 0.001 };
    s.replicas =
        vec![ReplicaTiming { data: 0.001, compute: 0.040 }, ReplicaTiming { data: 0.001, compute: 0.090 }];
    app.on_event(&Record::Step(s));
    app.on_event(&Record::Event(Change::Straggler {
        replica: 1,
        device: "cpu".into(),
        step_ms: 91.0,
        median_ms: 66.0,
        global_step: 620,
    }));
    app
}

/// A window judged input-bound: the verdict under the status items, wrapped.
fn input_bound() -> App {
    let mut app = running_app();
    let Record::Step(mut s) = step(3, 150, 0.6, 0.7, 0.2) else { unreachable!() };
    s.bottleneck = Some(Bottleneck {
        cause: Cause::Input,
        share: 0.41,
        finding:
            "replicas wait for data 41% of the step (loader 0.3/2 ready, 1,900 img/s on 2 decode threads)"
                .into(),
        advice: "raise --decode-threads or store the images smaller".into(),
    });
    app.on_event(&Record::Step(s));
    app
}

/// A run on two H100s whose model FLOPs are counted, stopped: the last window's MFU among
/// the status items, and the summary's model FLOP/s, MFU and peak GPU memory in the log.
fn mfu_measured() -> App {
    let mut app = common::screens::gpu_app();
    let Record::Step(mut s) = step(1, 100, 1.2, 0.5, 0.2) else { unreachable!() };
    // 5,000 samples/s of 3 x 26.5 GFLOPs against 2 x 494.5 TFLOP/s.
    (s.model_flops, s.mfu) = (Some(3.98e14), Some(0.402));
    app.on_event(&Record::Step(s));
    app.on_event(&Record::Summary(Box::new(Summary {
        devices: vec![DeviceId::Cuda(0), DeviceId::Cuda(1)],
        test_acc: None,
        sec_per_epoch: None,
        epochs_done: 0,
        global_steps: 100,
        reason: FinishReason::Stopped,
        flops_per_sample: Some(2.65e10),
        model_flops: Some(4.05e14),
        mfu: Some(0.41),
        peak_flops: PeakFlops::of("NVIDIA H100 80GB HBM3", 2, Precision::F32, true),
        peak_device_mib: vec![12_345.0, 11_980.0],
        ..summary()
    })));
    app
}

/// A rewind point at `global_step` of the running fixture (235 steps an epoch), taken
/// `age` seconds before the screen's clock.
fn point(global_step: usize, age: f64) -> Record {
    Record::Event(Change::Snapshot {
        global_step,
        epoch: global_step / 235,
        step: global_step % 235,
        loss: Some(2.3 / (1.0 + global_step as f64 / 235.0)),
        lr: 0.2,
        // The fixture starts at 1,000 s and is 83 s in.
        unix: 1083.0 - age,
    })
}

/// Three rewind points kept, and `r` pressed: the list with step, age, train loss and lr.
fn rewind_listed() -> App {
    let mut app = running_app();
    app.run.info.as_mut().unwrap().started_unix = Some(1000.0);
    for (g, age) in [(300, 61.0), (400, 40.0), (500, 19.5)] {
        app.on_event(&point(g, age));
    }
    app.on_key(common::screens::key('r'));
    app
}

/// Gone back from step 570 to the point at 300, the batches since trained again: the branch
/// after 300 dimmed, the new one on top, the rewind marked.
fn rewound() -> App {
    let mut app = running_app();
    app.on_event(&point(300, 60.0));
    let rewind = Change::Rewound { from: 570, to: 300, epoch: 1, step: 65, lr: 0.1, skipped: 0 };
    app.on_event(&Record::Event(Change::LrChanged { from: 0.2, to: 0.1, global_step: 300 }));
    app.on_event(&Record::Event(rewind));
    for s in [100, 150, 200] {
        app.on_event(&step(2, s, 1.0 - s as f64 / 1000.0, 0.7, 0.1));
    }
    app
}

/// The loss stopped being finite and the run paused: the newest point offered at half the lr.
fn nan_offered() -> App {
    let mut app = running_app();
    app.on_event(&point(500, 20.0));
    app.on_event(&Record::Event(Change::NotFinite {
        global_step: 570,
        then: dpt_core::policies::OnNan::Pause,
    }));
    app.on_event(&Record::Event(Change::Paused { global_step: 570 }));
    app
}

/// Two H100s whose replicas hold a half shard of the optimizer state each (`--zero 1`): what
/// each holds under its device's gauges.
fn zero_state_held() -> App {
    let mut app = common::screens::gpu_app();
    app.devices.state = Some(dpt_core::record::StateBytes {
        weights: 497_903_616,
        gradients: 497_903_616,
        optimizer: 497_903_616,
        optimizer_shards: 2,
        gradient_shards: 1,
        bucket_buffers: 0,
    });
    app
}

/// The same under `--zero 2`: the gradient sums split over the two replicas too.
fn zero_2_state_held() -> App {
    let mut app = common::screens::gpu_app();
    app.devices.state = Some(dpt_core::record::StateBytes {
        weights: 497_903_616,
        gradients: 248_951_808,
        optimizer: 497_903_616,
        optimizer_shards: 2,
        gradient_shards: 2,
        bucket_buffers: 0,
    });
    app
}

macro_rules! screens {
    ($($name:ident: $app:expr),* $(,)?) => {$(
        #[test]
        fn $name() {
            let app = $app;
            insta::assert_snapshot!(concat!(stringify!($name), "_80x24"), screen(&app, 80, 24, false));
            insta::assert_snapshot!(concat!(stringify!($name), "_120x40"), screen(&app, 120, 40, false));
        }
    )*};
}

screens! {
    running: running_app(),
    paused_after_an_lr_change: paused(),
    finished_run: finished(),
    failed_run: failed(),
    final_save_failed: not_saved(),
    smoothed_d2l_view: smoothed_d2l(),
    straggler_marked: straggler(),
    bottleneck_said: input_bound(),
    gpus_with_their_story: common::screens::gpu_app(),
    rewind_points_listed: rewind_listed(),
    rewound_branch_dimmed: rewound(),
    nan_rewind_offered: nan_offered(),
    mfu_measured_on_gpus: mfu_measured(),
    zero_state_held_per_device: zero_state_held(),
    zero_2_state_held_per_device: zero_2_state_held(),
}

#[test]
fn wide_terminals_show_loss_and_accuracy_side_by_side() {
    for (name, app) in
        [("running", running_app()), ("smoothed_d2l_view", smoothed_d2l()), ("straggler_marked", straggler())]
    {
        let shot = screen(&app, 200, 50, false);
        insta::assert_snapshot!(format!("{name}_200x50"), shot);
    }
    let wide = screen(&running_app(), 200, 50, false);
    assert!(wide.contains("loss ·") && wide.contains("accuracy ·"), "both panels:\n{wide}");
}
