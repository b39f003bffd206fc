//! Each rule on constructed measurements: the cause it names, the share, and the line.

use super::*;
use crate::monitor::gpu::GpuDetail;
use crate::record::run_info::WorldInfo;
use crate::record::{LoaderStats, Record, ReplicaTiming, StepTiming};

fn split(data: f64, compute: f64, allreduce: f64, update: f64) -> StepTiming {
    StepTiming { data, compute, allreduce, update }
}

/// A step of `timing` on replicas of `(data, compute)` each.
fn step(timing: StepTiming, replicas: &[(f64, f64)]) -> StepStats {
    StepStats {
        timing,
        replicas: replicas.iter().map(|&(data, compute)| ReplicaTiming { data, compute }).collect(),
        timed_steps: Some(10),
        ..StepStats::default()
    }
}

fn on(devices: &[DeviceId]) -> RunInfo {
    RunInfo { devices: devices.to_vec(), ..RunInfo::default() }
}

fn gpu(i: usize, util: f64, detail: GpuDetail) -> DeviceSample {
    DeviceSample {
        util_pct: Some(util),
        mem_used: Some(10 << 30),
        mem_total: Some(80 << 30),
        source: SampleSource::Nvml,
        gpu: Some(Box::new(detail)),
        ..DeviceSample::unavailable(DeviceId::Cuda(i), String::new())
    }
}

fn judge(info: &RunInfo, step: &StepStats, devices: &[DeviceSample]) -> Bottleneck {
    verdict(&Evidence { info, step, devices }).expect("a verdict")
}

const CPU2: [DeviceId; 2] = [DeviceId::Cpu, DeviceId::Cpu];
const GPU2: [DeviceId; 2] = [DeviceId::Cuda(0), DeviceId::Cuda(1)];

#[test]
fn the_table_is_ordered_by_tier() {
    assert!(RULES.windows(2).all(|w| w[0].tier <= w[1].tier));
    assert_eq!(
        RULES.last().map(|r| r.cause),
        Some(Cause::Compute),
        "compute is the verdict when nothing else shows"
    );
}

#[test]
fn a_window_of_warm_up_steps_has_no_verdict() {
    let s = StepStats { timed_steps: Some(0), ..step(split(0.1, 0.1, 0.0, 0.0), &[(0.1, 0.1)]) };
    assert_eq!(verdict(&Evidence { info: &on(&CPU2), step: &s, devices: &[] }), None);
}

#[test]
fn a_starved_loader_is_input_bound() {
    let mut s = step(split(0.041, 0.05, 0.004, 0.005), &[(0.041, 0.05), (0.040, 0.05)]);
    s.loader = Some(LoaderStats { ready: 0.3, depth: 2, images_per_sec: 1900.0, threads: Some(2) });
    let b = judge(&on(&CPU2), &s, &[]);
    assert_eq!((b.cause, (b.share * 100.0).round()), (Cause::Input, 41.0));
    assert_eq!(
        b.line(),
        "input-bound: replicas wait for data 41% of the step (loader 0.3/2 ready, 1,900 img/s on 2 decode threads): raise --decode-threads or store the images smaller"
    );
}

#[test]
fn a_large_allreduce_over_gloo_on_gpus_asks_for_nccl() {
    let mut info = on(&GPU2);
    info.world = Some(WorldInfo {
        rank: 0,
        backend: "gloo".into(),
        hosts: vec!["a".into(), "b".into()],
        replicas: vec![1, 1],
        devices: vec![vec![DeviceId::Cuda(0)], vec![DeviceId::Cuda(0)]],
    });
    let s = step(split(0.002, 0.058, 0.038, 0.002), &[(0.002, 0.058), (0.002, 0.057)]);
    let b = judge(&info, &s, &[]);
    assert_eq!(b.cause, Cause::Communication);
    assert_eq!(
        b.line(),
        "communication-bound: the allreduce takes 38% of the step over Gloo across 2 ranks: use NCCL (--dist-backend nccl): Gloo copies every gradient through the host"
    );
    // On CPUs, two processes on one host: fewer processes per host.
    info.world.as_mut().unwrap().hosts = vec!["a".into(), "a".into()];
    info.world.as_mut().unwrap().devices = vec![vec![DeviceId::Cpu], vec![DeviceId::Cpu]];
    let b = judge(&info, &s, &[]);
    assert!(b.advice.starts_with("2 processes per host"), "{}", b.advice);
}

#[test]
fn an_allreduce_on_gpus_is_weighed_against_doctors_bus_bandwidth_and_its_pcie_named() {
    // 25 M parameters (100 MB of fp32 gradients) over 2 GPUs in 10 ms: 10 GB/s of bus bandwidth.
    let mut info = RunInfo { param_count: 25_000_000, ..on(&GPU2) };
    info.bus_bandwidth = Some(MeasuredBus { gbs: 100.0, unix: 0.0 });
    let s = step(split(0.001, 0.02, 0.01, 0.001), &[(0.001, 0.02), (0.001, 0.02)]);
    let pcie =
        GpuDetail { pcie_tx_kbs: Some(9_000_000), pcie_rx_kbs: Some(8_500_000), ..GpuDetail::default() };
    let devices = [gpu(0, 90.0, pcie), gpu(1, 90.0, GpuDetail::default())];
    let b = judge(&info, &s, &devices);
    assert_eq!(b.cause, Cause::Communication);
    assert!((bus_gbs(100e6, 2, 0.01) - 10.0).abs() < 1e-9);
    assert!(
        b.finding.contains("at 10 GB/s bus bandwidth, against 100 GB/s doctor measured on these GPUs")
            && b.finding.contains("PCIe 9.0 GB/s out, 8.5 GB/s in on cuda:0"),
        "{}",
        b.finding
    );
    assert!(!b.advice.contains("link is the limit"), "far below the link: the way it is sent: {}", b.advice);
    // At 80 % of what doctor measured, the link itself is the limit.
    info.bus_bandwidth = Some(MeasuredBus { gbs: 12.5, unix: 0.0 });
    let b = judge(&info, &s, &devices);
    assert!(b.advice.contains("the GPUs' link is the limit"), "{}", b.advice);
    // Without doctor's figure, the verdict stands on its own.
    info.bus_bandwidth = None;
    assert!(!judge(&info, &s, &devices).finding.contains("doctor"));
}

#[test]
fn a_slow_replica_is_a_straggler_named_with_its_throttling() {
    let s = step(
        split(0.001, 0.069, 0.02, 0.001),
        &[(0.001, 0.049), (0.001, 0.05), (0.001, 0.049), (0.001, 0.069)],
    );
    let info = on(&[DeviceId::Cuda(0), DeviceId::Cuda(1), DeviceId::Cuda(2), DeviceId::Cuda(3)]);
    let brake = GpuDetail { throttle: Some(vec!["power brake (HW)".into()]), ..GpuDetail::default() };
    let devices: Vec<_> =
        (0..4).map(|i| gpu(i, 99.0, if i == 3 { brake.clone() } else { GpuDetail::default() })).collect();
    let b = judge(&info, &s, &devices);
    assert_eq!(
        b.cause,
        Cause::Straggler,
        "the straggler comes before the allreduce it inflates: {}",
        b.line()
    );
    assert_eq!(
        b.finding,
        "cuda:3 is 41% slower than the others' median, throttled (power brake (HW)); the other replicas wait for it 22% of the step"
    );
    // Within the margin, nobody straggles.
    let even = step(split(0.001, 0.05, 0.002, 0.001), &[(0.001, 0.049), (0.001, 0.05)]);
    assert_eq!(judge(&on(&GPU2), &even, &[]).cause, Cause::Compute);
}

#[test]
fn a_slow_rank_is_named_with_its_host() {
    let mut info = on(&[DeviceId::Cpu]);
    info.world = Some(WorldInfo {
        rank: 0,
        backend: "gloo".into(),
        hosts: vec!["a1".into(), "b7".into()],
        replicas: vec![1, 1],
        devices: vec![vec![DeviceId::Cpu], vec![DeviceId::Cpu]],
    });
    // Rank 0 waits for rank 1 in its allreduce.
    let s = step(split(0.001, 0.105, 0.06, 0.002), &[(0.001, 0.049), (0.001, 0.105)]);
    let b = judge(&info, &s, &[]);
    assert_eq!(
        b.line(),
        "straggler: rank 1 (host b7) computes 2.1x longer than rank 0; the other ranks wait for it 33% of the step: see what else runs on b7 (its cores or GPU are shared: dpt-tui doctor there), or leave rank 1 out"
    );
}

#[test]
fn a_replica_fed_last_by_one_decode_thread_is_input_bound_not_a_straggler() {
    // Issue 40's run: 256x256 JPEGs streamed by one decode thread to two CPU replicas. Replica 1
    // takes the batch decoded after replica 0's, so it waits 47.5 ms against 20.3 ms; both
    // compute for 15 ms. Step 62.7 ms = data 47.5 + fwd/bwd 15.0 + 0.2 ms for the rest.
    let mut s = step(split(0.0475, 0.015, 0.0001, 0.0001), &[(0.0203, 0.015), (0.0475, 0.015)]);
    s.loader = Some(LoaderStats { ready: 0.0, depth: 2, images_per_sec: 1650.0, threads: Some(1) });
    let b = judge(&on(&CPU2), &s, &[]);
    assert_eq!(
        b.line(),
        "input-bound: replicas wait for data 76% of the step (loader 0.0/2 ready, 1,650 img/s on 1 decode thread): raise --decode-threads or store the images smaller"
    );
}

#[test]
fn a_cpu_replica_slower_in_compute_is_a_straggler_even_when_the_other_waits_longer_for_data() {
    // Replica 1 computes 35 ms against 20; replica 0, done first, waits 9 ms more for its
    // batch. Their whole steps (30 and 36 ms) differ by less than the margin; their compute
    // does not.
    let s = step(split(0.010, 0.035, 0.002, 0.001), &[(0.010, 0.020), (0.001, 0.035)]);
    let b = judge(&on(&CPU2), &s, &[]);
    assert_eq!(
        b.line(),
        "straggler: replica 1 (cpu) is 75% slower than replica 0 (cpu); the other replicas wait for it 31% of the step: the replicas share the cores unevenly: set --cpu-threads so they divide the cores, or run fewer replicas"
    );
}

#[test]
fn a_rank_that_waits_longer_for_data_is_input_bound_not_a_straggler() {
    let mut info = on(&[DeviceId::Cpu]);
    info.world = Some(WorldInfo {
        rank: 0,
        backend: "gloo".into(),
        hosts: vec!["a1".into(), "b7".into()],
        replicas: vec![1, 1],
        devices: vec![vec![DeviceId::Cpu], vec![DeviceId::Cpu]],
    });
    // Rank 1's loader is slow (40 ms per batch); both ranks compute for about 50 ms. The
    // window's data wait is the slowest rank's.
    let mut s = step(split(0.040, 0.050, 0.01, 0.002), &[(0.001, 0.049), (0.040, 0.050)]);
    s.loader = Some(LoaderStats { ready: 0.1, depth: 2, images_per_sec: 800.0, threads: Some(1) });
    let b = judge(&info, &s, &[]);
    assert_eq!(
        (b.cause, b.finding.as_str()),
        (
            Cause::Input,
            "replicas wait for data 39% of the step (loader 0.1/2 ready, 800 img/s on 1 decode thread)"
        )
    );
}

#[test]
fn held_clocks_are_throttled_and_a_full_device_is_memory() {
    let s = step(split(0.001, 0.09, 0.005, 0.004), &[(0.001, 0.09), (0.001, 0.09)]);
    let hot = GpuDetail {
        throttle: Some(vec!["thermal (HW)".into()]),
        sm_clock_mhz: Some(1230),
        ..GpuDetail::default()
    };
    let b = judge(&on(&GPU2), &s, &[gpu(0, 99.0, hot), gpu(1, 99.0, GpuDetail::default())]);
    assert_eq!(b.cause, Cause::Throttled);
    assert_eq!(
        b.finding,
        "cuda:0 held down (thermal (HW)) at 1230 MHz while forward and backward take 90% of the step"
    );
    // The power cap alone is a loaded GPU's normal state.
    let capped = GpuDetail { throttle: Some(vec!["power cap".into()]), ..GpuDetail::default() };
    let mut full = gpu(1, 99.0, GpuDetail::default());
    full.mem_used = Some(79 << 30);
    let b = judge(&on(&GPU2), &s, &[gpu(0, 99.0, capped), full]);
    assert_eq!(b.cause, Cause::Memory);
    assert_eq!(b.finding, "cuda:1 holds 79.0 of 80.0 GiB (99%)");
}

#[test]
fn a_long_update_is_host_bound_and_an_idle_gpu_too() {
    let s = step(split(0.001, 0.02, 0.001, 0.012), &[(0.001, 0.02), (0.001, 0.02)]);
    let b = judge(&on(&CPU2), &s, &[]);
    assert_eq!((b.cause, b.finding.as_str()), (Cause::Host, "the update takes 35% of the step"));
    assert!(b.advice.contains("2 replicas in turn"), "{}", b.advice);
    let s = step(split(0.001, 0.09, 0.005, 0.004), &[(0.001, 0.09), (0.001, 0.09)]);
    let b = judge(&on(&GPU2), &s, &[gpu(0, 30.0, GpuDetail::default()), gpu(1, 40.0, GpuDetail::default())]);
    assert_eq!(b.cause, Cause::Host);
    assert_eq!(b.finding, "GPUs 35% busy while forward and backward take 90% of the step");
}

#[test]
fn a_busy_step_is_compute_bound_said_as_the_good_case() {
    let s = step(split(0.001, 0.096, 0.002, 0.001), &[(0.001, 0.096), (0.001, 0.095)]);
    let b = judge(&on(&GPU2), &s, &[gpu(0, 99.0, GpuDetail::default()), gpu(1, 99.0, GpuDetail::default())]);
    assert_eq!(b.line(), "compute-bound: 96% of the step in forward and backward, GPUs 99% busy: the good case; --precision bf16 does more per second on GPUs that have it");
    let b = judge(&on(&CPU2), &s, &[]);
    assert_eq!(
        b.line(),
        "compute-bound: 96% of the step in forward and backward: the good case: the devices are the limit"
    );
}

#[test]
fn the_run_split_weighs_windows_by_their_timed_steps() {
    let mut run = RunSplit::default();
    assert!(run.stats().is_none());
    let mut a = step(split(0.3, 0.1, 0.0, 0.0), &[(0.3, 0.1)]);
    a.timed_steps = Some(30);
    let mut b = step(split(0.1, 0.1, 0.0, 0.0), &[(0.1, 0.1)]);
    b.timed_steps = Some(10);
    b.loader = Some(LoaderStats { ready: 1.0, depth: 2, images_per_sec: 100.0, threads: Some(1) });
    run.add(&a);
    run.add(&b);
    run.add(&StepStats { timed_steps: Some(0), ..step(split(9.0, 9.0, 9.0, 9.0), &[(9.0, 9.0)]) });
    let s = run.stats().unwrap();
    assert!((s.timing.data - 0.25).abs() < 1e-12 && (s.replicas[0].data - 0.25).abs() < 1e-12, "{s:?}");
    assert_eq!((s.timed_steps, s.loader.map(|l| l.ready)), (Some(40), Some(1.0)));
}

#[test]
fn an_account_keeps_recorded_verdicts_and_judges_an_older_record_from_its_split() {
    let input = step(split(0.05, 0.05, 0.0, 0.0), &[(0.05, 0.05)]);
    let busy = step(split(0.001, 0.09, 0.0, 0.0), &[(0.001, 0.09)]);
    let recorded =
        Bottleneck { cause: Cause::Throttled, share: 0.9, finding: "f".into(), advice: "a".into() };
    let held = StepStats { global_step: 30, bottleneck: Some(recorded.clone()), ..busy.clone() };
    let records = [
        Record::Step(Box::new(busy.clone())), // before the last start: another attempt's
        Record::Start(Box::new(on(&[DeviceId::Cpu]))),
        Record::Step(Box::new(StepStats { global_step: 10, ..input.clone() })),
        Record::Step(Box::new(StepStats { global_step: 20, ..input })),
        Record::Step(Box::new(held)),
    ];
    let a = Account::of(&records);
    assert_eq!(a.windows, vec![(Cause::Input, 2), (Cause::Throttled, 1)]);
    assert_eq!(a.last, Some((30, recorded)), "a recorded verdict saw the devices: kept");
    assert_eq!(a.timed_steps, 30);
    // No summary: the run is judged from its split so far (2 of 3 windows half waiting).
    assert_eq!(a.run.map(|b| b.cause), Some(Cause::Input));
    assert_eq!(Account::of(&[]).run, None);
}
