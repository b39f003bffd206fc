//! The device panels: NVML figures, the rest of a GPU's story (clocks, throttling, links, ECC,
//! fan, other processes) with unavailable fields said as such, and MIG slices.

mod common;

use dpt_core::device::DeviceId;
use dpt_core::monitor::{DeviceSample, MonitorMsg, SampleSource};
use dpt_core::record::Record;
use dpt_dashboard::dashboard::app::App;

use common::screens::{info, screen};

#[test]
fn a_gpu_panel_tells_the_whole_story_and_who_else_is_on_it() {
    let mut app = common::screens::gpu_app();
    let s = screen(&app, 120, 40, false);
    for needle in [
        "SM 1755 MHz",
        "fan n/a",
        "PCIe ↑1.2 ↓n/a GB/s",
        "ECC 0",
        "throttled: power cap, thermal (HW)",
        "4242* dpt-tui 30.0G",
        "777 python3 1.0G",
    ] {
        assert!(s.contains(needle), "missing {needle:?} in\n{s}");
    }
    assert!(!s.contains("NVLink"), "no NVLink counters, no NVLink figure");
    let warnings: Vec<&str> = s.lines().filter(|l| l.contains("another process is on cuda:1")).collect();
    assert_eq!(warnings.len(), 1, "{s}");
    assert!(warnings[0].contains("pid 777 (python3) holds 1.0 GiB"));
    // The same process again is not news; NVLink counters give a rate from two readings.
    let mut again = common::screens::gpu_sample(1, Some(60.0), None);
    if let Some(g) = again.gpu.as_mut() {
        (g.nvlink_tx_kib, g.nvlink_rx_kib) = (Some(1000), Some(2000));
    }
    app.on_monitor(&MonitorMsg::Samples(vec![again.clone()]));
    if let Some(g) = again.gpu.as_mut() {
        (g.nvlink_tx_kib, g.nvlink_rx_kib) = (Some(5000), Some(2000));
    }
    app.on_monitor(&MonitorMsg::Samples(vec![again]));
    let (tx, rx) = app.devices.panels[1].nvlink_rate.expect("a rate after two readings");
    assert!(tx > 0.0 && rx == 0.0, "{tx} {rx}");
    let s = screen(&app, 120, 40, false);
    assert_eq!(s.matches("another process is on cuda:1").count(), 1, "{s}");
    assert!(s.contains("NVLink ↑"), "{s}");
}

#[test]
fn a_mig_slice_shows_its_memory_and_says_utilization_is_not_reported() {
    let mut app = App::new(&[DeviceId::Cuda(0)]);
    app.on_event(&Record::Start(Box::new(info(&["cuda:0"]))));
    let mut mig =
        common::screens::gpu_sample(0, None, Some("MIG slice: utilization is not reported per slice"));
    mig.gpu = None;
    app.on_monitor(&MonitorMsg::Samples(vec![mig]));
    let s = screen(&app, 120, 40, false);
    assert!(s.contains("31.0/80.0 GiB") && s.contains("n/a"), "{s}");
    assert!(!s.contains("SM "), "no further figures without them:\n{s}");
}

#[test]
fn gpu_panels_show_nvml_figures() {
    let mut app = App::new(&[DeviceId::Cuda(0), DeviceId::Cuda(1)]);
    app.on_event(&Record::Start(Box::new(info(&["cuda:0", "cuda:1"]))));
    let sample = |i: usize, util: f64| DeviceSample {
        device: DeviceId::Cuda(i),
        source: SampleSource::Nvml,
        util_pct: Some(util),
        mem_used: Some(12 << 30),
        mem_total: Some(80 << 30),
        temp_c: Some(61),
        power_w: Some(312.4),
        name: Some("NVIDIA H100".into()),
        rank: None,
        host: None,
        note: None,
        gpu: None,
    };
    app.on_monitor(&MonitorMsg::Samples(vec![sample(0, 97.0), sample(1, 12.0)]));
    let s = screen(&app, 120, 40, false);
    for needle in ["cuda:0 NVIDIA H100 [r0]", "cuda:1", "util", "97%", "12.0/80.0 GiB", "61°C", "312 W"] {
        assert!(s.contains(needle), "missing {needle:?} in\n{s}");
    }
    assert!(!s.contains("process figures"));
}
