//! Fixtures for the dashboard's screen tests: a run two and a half epochs in, drawn on
//! ratatui's `TestBackend`.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::backend::TestBackend;
use ratatui::Terminal;

use dpt_core::device::DeviceId;
use dpt_core::monitor::{DeviceSample, MonitorMsg, SampleSource};
use dpt_core::record::Record;
use dpt_core::record::{EpochStats, ReplicaTiming, RunInfo, StepStats, StepTiming};
use dpt_dashboard::dashboard::app::App;
use dpt_dashboard::dashboard::theme::Theme;
use dpt_dashboard::dashboard::view::{self, Look};

pub fn key(c: char) -> KeyEvent {
    KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE)
}

pub fn code(c: KeyCode) -> KeyEvent {
    KeyEvent::new(c, KeyModifiers::NONE)
}

pub fn info(devices: &[&str]) -> RunInfo {
    RunInfo {
        devices: devices.iter().map(|d| d.parse().unwrap()).collect(),
        param_count: 129_068,
        steps_per_epoch: 235,
        train_samples: 60_000,
        test_samples: 10_000,
        allreduce: "copies through cpu".into(),
        timing: "host clock, every step".into(),
        ..Default::default()
    }
}

pub fn step(epoch: usize, step: usize, loss: f64, acc: f64, lr: f64) -> Record {
    Record::Step(Box::new(StepStats {
        epoch,
        step,
        steps_per_epoch: 235,
        global_step: (epoch - 1) * 235 + step,
        loss,
        acc,
        lr,
        samples_per_sec: 5000.0,
        timing: StepTiming { data: 0.001, compute: 0.040, allreduce: 0.002, update: 0.001 },
        replicas: vec![
            ReplicaTiming { data: 0.001, compute: 0.040 },
            ReplicaTiming { data: 0.001, compute: 0.052 },
        ],
        grad_norm: None,
        loss_scale: None,
        skipped_steps: None,
        timed_steps: None,
        loader: None,
        overlapped: None,
        bottleneck: None,
        model_flops: None,
        mfu: None,
        cuda_syncs: None,
        scalars: Default::default(),
    }))
}

pub fn epoch(e: usize, test_acc: f64) -> Record {
    Record::Epoch(Box::new(EpochStats {
        epoch: e,
        train_loss: 2.0 / e as f64,
        train_acc: 0.5 + 0.03 * e as f64,
        test_loss: 1.9 / e as f64,
        test_acc,
        epoch_seconds: 11.5,
        eval_seconds: 1.0,
        samples_per_sec: 5200.0,
        lr: 0.2,
        ema_test_acc: None,
        ema_test_loss: None,
        top5_acc: None,
        per_class_acc: None,
        confusion: None,
    }))
}

/// A run two and a half epochs in, on two CPU replicas, with process figures (no NVML).
pub fn running_app() -> App {
    let mut app = App::new(&[DeviceId::Cpu, DeviceId::Cpu]);
    app.clock = || "12:00:00".to_owned();
    app.on_event(&Record::Start(Box::new(info(&["cpu", "cpu"]))));
    app.on_monitor(&MonitorMsg::NvmlUnavailable { reason: "NVML not available (library not found)".into() });
    for e in 1..=3 {
        for s in (50..=235).step_by(50).chain([235]) {
            if e == 3 && s > 100 {
                break;
            }
            app.on_event(&step(e, s, 2.3 / (e as f64 + s as f64 / 235.0), 0.1 + 0.2 * e as f64, 0.2));
        }
        if e < 3 {
            app.on_event(&epoch(e, 0.6 + 0.1 * e as f64));
        }
    }
    app.on_monitor(&MonitorMsg::Samples(vec![DeviceSample {
        device: DeviceId::Cpu,
        source: SampleSource::Process,
        util_pct: Some(187.0),
        mem_used: Some(700 << 20),
        mem_total: Some(24 << 30),
        temp_c: None,
        power_w: None,
        name: None,
        rank: None,
        host: None,
        note: None,
        gpu: None,
    }]));
    app.tick(83.0);
    app
}

pub fn screen(app: &App, width: u16, height: u16, ascii: bool) -> String {
    let theme = Theme::load("dark").unwrap();
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal.draw(|f| view::draw(f, app, &Look { theme: &theme, ascii })).unwrap();
    let buf = terminal.backend().buffer().clone();
    (0..height)
        .map(|y| (0..width).map(|x| buf[(x, y)].symbol().to_owned()).collect::<String>())
        .collect::<Vec<_>>()
        .join("\n")
}

/// A sample of GPU `i` as NVML would give it, with every further figure.
pub fn gpu_sample(i: usize, util: Option<f64>, note: Option<&str>) -> DeviceSample {
    use dpt_core::monitor::gpu::{GpuDetail, GpuProcess};
    DeviceSample {
        device: DeviceId::Cuda(i),
        source: SampleSource::Nvml,
        util_pct: util,
        mem_used: Some(31 << 30),
        mem_total: Some(80 << 30),
        temp_c: Some(71),
        power_w: Some(655.0),
        name: Some("NVIDIA H100 80GB HBM3".into()),
        rank: None,
        host: None,
        note: note.map(str::to_owned),
        gpu: Some(Box::new(GpuDetail {
            sm_clock_mhz: Some(1755),
            throttle: Some(if i == 1 { vec!["power cap".into(), "thermal (HW)".into()] } else { vec![] }),
            pcie_tx_kbs: Some(1_200_000),
            pcie_rx_kbs: None,
            nvlink_tx_kib: None,
            nvlink_rx_kib: None,
            ecc_uncorrected: Some(0),
            fan_pct: None,
            processes: Some(if i == 1 {
                vec![
                    GpuProcess { pid: 4242, name: Some("dpt-tui".into()), mem: Some(30 << 30), ours: true },
                    GpuProcess { pid: 777, name: Some("python3".into()), mem: Some(1 << 30), ours: false },
                ]
            } else {
                vec![GpuProcess { pid: 4242, name: Some("dpt-tui".into()), mem: Some(30 << 30), ours: true }]
            }),
            pids: Default::default(),
        })),
    }
}

/// A run on two GPUs: one busy and clean, one throttled with someone else's process on it.
pub fn gpu_app() -> App {
    let mut app = App::new(&[DeviceId::Cuda(0), DeviceId::Cuda(1)]);
    app.clock = || "12:00:00".to_owned();
    app.on_event(&Record::Start(Box::new(info(&["cuda:0", "cuda:1"]))));
    app.on_event(&step(1, 50, 1.5, 0.4, 0.2));
    app.on_monitor(&MonitorMsg::Samples(vec![
        gpu_sample(0, Some(97.0), None),
        gpu_sample(1, Some(64.0), None),
    ]));
    app.tick(12.0);
    app
}
