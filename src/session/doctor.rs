//! `dpt-tui doctor`: one command to check a machine. It says what the machine has (driver,
//! NVML, libtorch, every CUDA device, NCCL) and then checks, for real and in a few seconds,
//! that each model trains a step on each device and that the collectives work: c10d's Gloo
//! between two local ranks, and on GPUs NCCL between the local GPUs. Each problem gets a line
//! with its fix; the exit status is 0 only when all is well.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dpt_core::device::DeviceId;
use dpt_sys::c10d::{nccl_local_allreduce, Backend, Group, ReduceOp, Store};
use dpt_tui::data::{Dataset, Split};
use dpt_tui::device::driver::TORCH_BUILD;
use dpt_tui::device::{Machine, AUTO_CPU_REPLICAS};
use dpt_tui::engine::{Engine, TrainConfig};
use dpt_tui::model::ModelKind;
use dpt_tui::monitor::nvml::Gpus;

/// One line of the report: what was checked, how it went, and the fix when it did not.
struct Check {
    what: String,
    result: Result<String, String>,
    fix: String,
}

/// `CUDA_VISIBLE_DEVICES` empty or -1: the GPUs are hidden on purpose, not lost.
fn hidden_on_purpose() -> bool {
    std::env::var("CUDA_VISIBLE_DEVICES").is_ok_and(|v| v.trim().is_empty() || v.trim().starts_with("-1"))
}

fn print_fact(name: &str, value: &str) {
    println!("  {name:<24} {value}");
}

/// A tiny random data set of `n` 28×28 images, enough for one step.
fn synthetic(n: usize) -> Arc<Dataset> {
    let split = |n: usize, salt: usize| {
        let images = (0..n * 784).map(|i| ((i * 31 + salt) % 251) as u8).collect();
        Split::gray(images, (0..n).map(|i| (i % 10) as i64).collect(), 28, 28)
    };
    Arc::new(Dataset::of(split(n, 0), split(n / 2, 7), "synthetic images".into(), 10))
}

/// One training step of `model` on `device`, through the engine as a run would take it.
fn train_step(model: ModelKind, device: DeviceId) -> Result<String, String> {
    let mut cfg = TrainConfig::new(model, vec![device]);
    (
        cfg.settings.recipe.epochs,
        cfg.settings.recipe.batch_size,
        cfg.settings.placement.max_steps,
        cfg.settings.placement.log_every,
    ) = (1, 16, Some(1), 1);
    cfg.settings.placement.step_timeout = 120.0;
    let t0 = Instant::now();
    let engine = Engine::start(cfg, synthetic(32)).map_err(|e| e.to_string())?;
    for _ in engine.events().iter() {}
    let outcome = engine.join().map_err(|e| dpt_tui::error_chain(&e))?;
    Ok(format!("{} step(s) in {:.2} s", outcome.summary.global_steps, t0.elapsed().as_secs_f64()))
}

/// How long a collective check may take before doctor calls it hung.
const PAIR_DEADLINE: Duration = Duration::from_secs(90);

/// The bytes each rank of the two-process check sums.
const PAIR_FLOATS: i64 = 1 << 20;

/// One rank of the two-process check: joins rank 0's store, sums 4 MB of ones with `backend`
/// (Gloo on the CPU, NCCL on GPU `rank`), checks the result; prints the seconds or the error.
pub fn peer(spec: &str) -> u8 {
    let result = (|| -> Result<f64, String> {
        let bad = || format!("bad --peer '{spec}'; it is internal to 'dpt-tui doctor'");
        let mut parts = spec.split(':');
        let rank: usize = parts.next().and_then(|r| r.parse().ok()).ok_or_else(bad)?;
        let port: u16 = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let (backend, device) = match parts.next() {
            Some("gloo") => (Backend::Gloo, tch::Device::Cpu),
            Some("nccl") => (Backend::Nccl, tch::Device::Cuda(rank)),
            _ => return Err(bad()),
        };
        if let tch::Device::Cuda(i) = device {
            // As a DDP script calls torch.cuda.set_device(local_rank) first.
            dpt_sys::c10d::set_thread_device(i).map_err(|e| e.0)?;
        }
        dpt_sys::c10d::quiet_logs();
        let timeout = Duration::from_secs(30);
        let store = Store::tcp("127.0.0.1", port, 2, rank == 0, timeout).map_err(|e| e.0)?;
        let group = Group::new(backend, &store, rank, 2, timeout).map_err(|e| e.0)?;
        let mut t = [tch::Tensor::ones([PAIR_FLOATS], (tch::Kind::Float, device))];
        // The first collective sets up the connections; the second is the one timed.
        group.allreduce(&mut t, ReduceOp::Sum).map_err(|e| e.0)?.wait(timeout).map_err(|e| e.0)?;
        let _ = t[0].fill_(1.0);
        let t0 = Instant::now();
        group.allreduce(&mut t, ReduceOp::Sum).map_err(|e| e.0)?.wait(timeout).map_err(|e| e.0)?;
        let sum = t[0].double_value(&[PAIR_FLOATS - 1]);
        if sum != 2.0 {
            return Err(format!("1 + 1 came back as {sum}"));
        }
        Ok(t0.elapsed().as_secs_f64())
    })();
    match result {
        Ok(secs) => {
            println!("ok {secs}");
            0
        }
        Err(e) => {
            println!("error {e}");
            1
        }
    }
}

/// A c10d allreduce of 4 MB between two local processes (this binary, started twice), as two
/// ranks of a real run meet: over a TCPStore on loopback.
fn process_pair(backend: &str) -> Result<String, String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut children = Vec::new();
    for rank in 0..2 {
        let child = std::process::Command::new(&exe)
            .args(["doctor", "--peer", &format!("{rank}:{port}:{backend}")])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start a rank: {e}"))?;
        children.push(child);
    }
    // NCCL's set-up can hang with no deadline of its own (PCIe ACS on, some VMs): the ranks get
    // this long, then are killed and the check fails with NCCL's advice.
    let deadline = Instant::now() + PAIR_DEADLINE;
    while !children.iter_mut().all(|c| c.try_wait().is_ok_and(|s| s.is_some())) {
        if Instant::now() >= deadline {
            children.iter_mut().for_each(|c| drop(c.kill()));
            return Err(format!(
                "the two ranks did not finish within {} s; {}",
                PAIR_DEADLINE.as_secs(),
                dpt_tui::device::gpu_wait::NCCL_HANG_ADVICE
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut slowest = 0.0f64;
    for child in children {
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().last().unwrap_or("").trim().to_owned();
        match line.split_once(' ') {
            Some(("ok", secs)) => slowest = slowest.max(secs.parse().map_err(|_| line.clone())?),
            Some(("error", why)) => return Err(why.to_owned()),
            _ => return Err(format!("a rank ended ({}) without a result", out.status)),
        }
    }
    Ok(format!("4 MB summed in {:.1} ms between 2 processes", slowest * 1e3))
}

/// NCCL across the local GPUs: 256 MB per GPU, with its bus bandwidth; on a helper thread, given
/// up after [`PAIR_DEADLINE`] (the machine this check exists for is the one where NCCL hangs).
fn nccl_local(gpus: usize) -> Result<String, String> {
    let (secs, busbw) = nccl_allreduce(&(0..gpus).collect::<Vec<_>>(), PAIR_DEADLINE)?;
    // Kept for the runs on these GPUs, whose communication verdict weighs their own against it.
    let uuids: Option<Vec<String>> =
        (0..gpus).map(|i| dpt_sys::c10d::cuda_identity(i).ok().map(|id| id.nvml_uuid())).collect();
    let bus = dpt_tui::record::bottleneck::MeasuredBus { gbs: busbw, unix: dpt_tui::unix_now() };
    let kept = match (uuids, dpt_tui::data::cache_base()) {
        (Some(uuids), Some(cache)) => dpt_tui::device::bus::save(&cache, &uuids, bus).is_ok(),
        _ => false,
    };
    let note = if kept { "measured now; the runs on these GPUs compare with it" } else { "measured now" };
    Ok(format!("256 MB per GPU in {:.1} ms, bus bandwidth {busbw:.0} GB/s ({note})", secs * 1e3))
}

/// The bus bandwidth, GB/s, of NCCL's allreduce of 256 MB across the CUDA devices `gpus`, given
/// up after `deadline` (`dpt-tui bench`'s allreduce case).
pub fn nccl_bus_bandwidth(gpus: &[usize], deadline: Duration) -> Result<f64, String> {
    nccl_allreduce(gpus, deadline).map(|(_, busbw)| busbw)
}

/// The seconds of one timed NCCL allreduce of 256 MB per GPU across the CUDA devices `gpus`
/// (after one that sets up the connections), and its bus bandwidth.
fn nccl_allreduce(gpus: &[usize], deadline: Duration) -> Result<(f64, f64), String> {
    let on = gpus.to_vec();
    let waiting = dpt_tui::device::gpu_wait::Waiting {
        phase: "NCCL's allreduce across the local GPUs".into(),
        device: gpus.iter().map(|i| format!("cuda:{i}")).collect::<Vec<_>>().join(","),
        timeout: deadline,
    };
    let secs = waiting
        .run("dpt-doctor-nccl", move || -> Result<f64, String> {
            dpt_sys::c10d::set_thread_device(on.first().copied().unwrap_or(0)).map_err(|e| e.0)?;
            let numel: i64 = 64 << 20;
            let mut ts: Vec<tch::Tensor> = on
                .iter()
                .map(|&i| tch::Tensor::ones([numel], (tch::Kind::Float, tch::Device::Cuda(i))))
                .collect();
            nccl_local_allreduce(&mut ts).map_err(|e| e.0)?;
            on.iter().for_each(|&i| tch::Cuda::synchronize(i as i64));
            let t0 = Instant::now();
            nccl_local_allreduce(&mut ts).map_err(|e| e.0)?;
            on.iter().for_each(|&i| tch::Cuda::synchronize(i as i64));
            Ok(t0.elapsed().as_secs_f64())
        })
        .map_err(|e| e.to_string())??;
    let numel: i64 = 64 << 20;
    let bytes = numel as f64 * 4.0;
    Ok((secs, dpt_tui::record::bottleneck::bus_gbs(bytes, gpus.len(), secs)))
}

pub fn run() -> u8 {
    let nvml = Gpus::open();
    // The driver first: on today's fleets the likeliest problem, and it explains the rest.
    let census = nvml.as_ref().ok().map(|g| (g.census().1, g.cuda_driver_version()));
    let verdict = dpt_tui::device::driver::verdict(
        census.as_ref().and_then(|(d, _)| d.as_deref()).or(nvml.is_ok().then_some("of unknown version")),
        census.as_ref().and_then(|(_, c)| *c),
        TORCH_BUILD,
        dpt_tui::device::driver::torch_cuda(),
    );
    println!("{} {}", if verdict.ok { "ok  " } else { "FAIL" }, verdict.line);
    if let Some(fix) = &verdict.fix {
        println!("     fix: {fix}");
    }
    let machine = Machine::detect("auto");
    println!("machine");
    print_fact("dpt-tui", env!("CARGO_PKG_VERSION"));
    print_fact("host", &dpt_tui::hostname());
    print_fact("CPU cores", &machine.cores.to_string());
    let cuda = dpt_tui::device::driver::torch_cuda()
        .map_or("CPU-only build".to_owned(), |c| format!("CUDA {c} build"));
    print_fact("libtorch", &format!("torch {TORCH_BUILD} ({cuda})"));
    match &nvml {
        Ok(g) => {
            let (count, driver) = g.census();
            print_fact("NVIDIA driver", &driver.unwrap_or_else(|| "unknown".into()));
            print_fact("GPUs (NVML)", &count.to_string());
        }
        Err(why) => print_fact("NVIDIA driver", &format!("none ({why})")),
    }
    print_fact("CUDA devices (libtorch)", &machine.cuda_devices.to_string());
    print_fact("cuDNN", if tch::Cuda::cudnn_is_available() { "available" } else { "not available" });
    let nccl = if dpt_sys::c10d::nccl_compiled() {
        "compiled in (libtorch_cuda, the wheel's libnccl)"
    } else {
        "not in this build (CUDA headers were missing at build time)"
    };
    print_fact("NCCL", nccl);
    print_fact("NCCL errors", &dpt_tui::dist::nccl_env::describe());
    print_fact(
        "f32 on GPUs",
        "TF32 matrix products and convolutions on sm80 and later (--tf32 off keeps IEEE float32); \
         --precision bf16|f16 runs every model's forward in that format, f32 weights and update",
    );
    for i in 0..machine.cuda_devices {
        let identity = dpt_sys::c10d::cuda_identity(i).ok();
        let found = nvml.as_ref().map_err(Clone::clone).and_then(|g| {
            g.find(identity.as_ref(), i).map(|(d, how)| {
                let memory =
                    d.memory_info().ok().map(|m| format!(" {:.1} GiB", m.total as f64 / (1u64 << 30) as f64));
                let mig = matches!(&how, dpt_tui::monitor::nvml::Matched::Uuid(u) if u.starts_with("MIG-"));
                let what = format!(
                    "{}{}{}",
                    d.name().unwrap_or_default(),
                    memory.unwrap_or_default(),
                    if mig { " (MIG slice)" } else { "" }
                );
                (what, how)
            })
        });
        let text = match (&identity, found) {
            (Some(id), Ok((what, how))) => format!(
                "{what} sm{}{} bf16 {} TF32 {} NVML match {how:?}",
                id.major,
                id.minor,
                if id.major >= 8 { "yes" } else { "no" },
                if id.major >= 8 { "yes" } else { "no" }
            ),
            (_, Ok((what, how))) => format!("{what} NVML match {how:?}"),
            (_, Err(why)) => format!("no NVML match: {why}"),
        };
        print_fact(&format!("cuda:{i}"), &text);
    }
    let mut checks = Vec::new();
    if !verdict.ok {
        checks.push(Check {
            what: "NVIDIA driver for this libtorch".into(),
            result: Err(verdict.line.clone()),
            fix: verdict.fix.clone().unwrap_or_default(),
        });
    } else if machine.cuda_devices == 0 && machine.driver_gpus > 0 && !hidden_on_purpose() {
        checks.push(Check {
            what: "GPUs usable by libtorch".into(),
            result: Err(format!("the driver shows {} GPU(s), libtorch none", machine.driver_gpus)),
            fix: "check CUDA_VISIBLE_DEVICES and that this user may open /dev/nvidia*; or train with --devices cpu:N".into(),
        });
    }
    let mut devices = vec![DeviceId::Cpu];
    devices.extend((0..machine.cuda_devices).map(DeviceId::Cuda));
    for device in &devices {
        for model in [ModelKind::Lenet, ModelKind::Resnet18, ModelKind::MnistNet] {
            checks.push(Check {
                what: format!("a training step of {model} on {device}"),
                result: train_step(model, *device),
                fix: "run 'bash .ci/setup' again; if it persists, report this output".into(),
            });
        }
    }
    checks.push(Check {
        what: "c10d Gloo allreduce, 2 local processes".into(),
        result: process_pair("gloo"),
        fix: "check that loopback TCP works and GLOO_SOCKET_IFNAME (if set) names an interface".into(),
    });
    if machine.cuda_devices >= 2 {
        checks.push(Check {
            what: "c10d NCCL allreduce, 2 local processes".into(),
            result: process_pair("nccl"),
            fix: "run with NCCL_DEBUG=INFO; check NCCL_SOCKET_IFNAME and the GPUs' peer access (nvidia-smi topo -m)".into(),
        });
    }
    if machine.cuda_devices >= 2 {
        checks.push(Check {
            what: format!("NCCL allreduce over {} local GPUs", machine.cuda_devices),
            result: nccl_local(machine.cuda_devices),
            fix: "check the GPUs' peer access (nvidia-smi topo -m) and NCCL_DEBUG=INFO output".into(),
        });
    }
    println!("checks");
    let mut problems = 0;
    for c in &checks {
        match &c.result {
            Ok(detail) => println!("  ok    {:<42} {detail}", c.what),
            Err(e) => {
                problems += 1;
                println!("  FAIL  {:<42} {e}", c.what);
                println!("        fix: {}", c.fix);
            }
        }
    }
    if machine.cuda_devices == 0 {
        println!(
            "no GPU here: the CPU path is checked (--devices auto takes up to {AUTO_CPU_REPLICAS} CPU replicas; NCCL checks need GPUs)"
        );
    }
    if problems == 0 {
        println!("all is well");
        0
    } else {
        println!("{problems} problem(s)");
        1
    }
}
