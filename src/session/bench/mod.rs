//! `dpt-tui bench`: what this machine's devices give, case by case, against a plain PyTorch loop
//! on the same device, within a time budget. Each case trains on synthetic data of the right
//! shapes (or `--data`), dpt-tui first, as a headless run of this binary, then the PyTorch
//! script of the same model, batch, optimizer and precision; each side is a process of its own
//! with its share of the budget as its deadline. The figures are the steady ones (the warm-up
//! steps left out on both sides); the outputs are a table on stdout and `bench.json` and
//! `bench.md` in `--out`.

mod child;
mod data;
mod plan;
mod python;
mod report;
mod runner;
mod synthetic;

use std::path::{Path, PathBuf};
use std::time::Instant;

use plan::Case;
use python::{PytorchSide, Scripts};
use report::{CaseResult, Side, Status};
use runner::{Bench, Data};

use super::input;
use crate::cli::BenchArgs;
use crate::Failure;
use dpt_tui::data::format::{detect, DataFormat};
use dpt_tui::device::driver::TORCH_BUILD;
use dpt_core::device::DeviceId;
use dpt_tui::device::{resolve_devices, Machine};

/// The bench's results in `--out`: the report as JSON, and its table as Markdown.
const REPORT_JSON: &str = "bench.json";
const REPORT_MD: &str = "bench.md";

/// What the flags ask, checked against the machine before anything runs.
struct Asked {
    /// The GPUs, by this process's CUDA index (none: the CPU).
    gpus: Vec<usize>,
    budget: std::time::Duration,
    cases: Vec<Case>,
    data: GivenData,
    pytorch: PytorchSide,
    out: PathBuf,
}

impl Asked {
    /// The flags read and checked; every refusal is one line, before any case runs.
    fn check(args: &BenchArgs) -> Result<Asked, String> {
        let gpus = bench_gpus(&args.devices, Machine::detect(&args.devices))?;
        let cases = plan::select(plan::cases(gpus.len()), &args.cases)?;
        let data = GivenData::read(&args.data)?;
        let pytorch = python::choose(args.python.as_ref())?;
        let out = out_dir(args.out.as_deref())?;
        Ok(Asked { gpus, budget: args.budget.0, cases, data, pytorch, out })
    }
}

/// The devices a bench runs on, as a run resolves `--devices` (the driver check included): GPUs
/// by index, or none (the CPU). A GPU named twice is benched once: the two-replica case puts
/// two replicas on one GPU itself.
fn bench_gpus(spec: &str, machine: Machine) -> Result<Vec<usize>, String> {
    let devices = resolve_devices(spec, machine).map_err(|e| format!("bench --devices: {e}"))?;
    let mut gpus = Vec::new();
    for device in &devices {
        match device {
            DeviceId::Cuda(g) if !gpus.contains(g) => gpus.push(*g),
            DeviceId::Cuda(_) => {}
            DeviceId::Cpu if devices.iter().all(|d| *d == DeviceId::Cpu) => {}
            DeviceId::Cpu => {
                return Err(format!(
                    "bench --devices {spec} mixes the CPU and GPUs: bench one or the other (cpu, or cuda:0,…)"
                ))
            }
        }
    }
    Ok(gpus)
}

/// `--out`: a folder that can be written and holds no bench yet (an earlier bench's results
/// are never written over).
fn out_dir(asked: Option<&Path>) -> Result<PathBuf, String> {
    let dir = match asked {
        Some(d) => d.to_owned(),
        None => PathBuf::from(format!("bench-{}", chrono::Utc::now().format("%Y%m%d-%H%M%S"))),
    };
    if dir.join(REPORT_JSON).exists() {
        return Err(format!(
            "--out {} already holds a bench ({REPORT_JSON}): name another folder",
            dir.display()
        ));
    }
    let cannot = |e: std::io::Error| format!("--out {} cannot be written: {e}", dir.display());
    std::fs::create_dir_all(&dir).map_err(cannot)?;
    let probe = dir.join(".bench-write-check");
    std::fs::write(&probe, b"").map_err(cannot)?;
    let _ = std::fs::remove_file(probe);
    Ok(dir)
}

/// The real data `--data` gives, by kind, each folder's format detected as a run detects it.
#[derive(Debug, Default, PartialEq)]
struct GivenData {
    /// IDX images (MNIST, Fashion-MNIST), for the image cases.
    images: Option<PathBuf>,
    /// `train.bin`/`val.bin` tokens, for the GPT.
    tokens: Option<PathBuf>,
}

impl GivenData {
    fn read(dirs: &[PathBuf]) -> Result<GivenData, String> {
        let mut given = GivenData::default();
        for dir in dirs {
            let shown = dir.display();
            if !dir.is_dir() {
                return Err(format!("bench --data {shown} is not a folder"));
            }
            let slot = match detect(dir) {
                Ok(DataFormat::Idx) => &mut given.images,
                Ok(DataFormat::Tokens) => &mut given.tokens,
                Ok(other) => {
                    return Err(format!(
                        "bench --data {shown} holds {} data; the bench takes IDX images (MNIST, Fashion-MNIST) or train.bin/val.bin tokens",
                        format!("{other:?}").to_lowercase()
                    ))
                }
                Err(_) => {
                    return Err(format!(
                        "bench --data {shown}: no IDX files (train-images-idx3-ubyte…, as MNIST and Fashion-MNIST) and no train.bin/val.bin tokens there"
                    ))
                }
            };
            if let Some(first) = slot.replace(dir.clone()) {
                return Err(format!(
                    "bench --data {shown}: {} holds the same kind of data; give one folder of each kind",
                    first.display()
                ));
            }
        }
        Ok(given)
    }
}

pub fn run(args: &BenchArgs) -> Result<u8, Failure> {
    let asked = Asked::check(args).map_err(|e| input(anyhow::anyhow!(e)))?;
    let stop =
        stop_on_signals().map_err(|e| Failure::Run(anyhow::anyhow!("cannot watch for signals: {e}")))?;
    let t0 = Instant::now();
    let scratch = tempfile::Builder::new()
        .prefix("dpt-bench-")
        .tempdir()
        .map_err(|e| Failure::Run(anyhow::anyhow!("cannot make a scratch folder: {e}")))?;
    let python = match &asked.pytorch {
        PytorchSide::Run(p) => Some(p),
        PytorchSide::Skip(_) => None,
    };
    let machine = describe_machine(&asked.gpus, python);
    println!(
        "dpt-tui bench: {} case(s) on {} within {} s; PyTorch side: {}",
        asked.cases.len(),
        machine.devices.join(", "),
        asked.budget.as_secs(),
        match &asked.pytorch {
            PytorchSide::Run(p) => format!("{} (torch {})", p.path.display(), p.torch),
            PytorchSide::Skip(why) => format!("none ({why})"),
        }
    );
    let data = Data {
        images: asked.data.images.clone().unwrap_or_else(|| scratch.path().join("images")),
        tokens: asked.data.tokens.clone(),
        scratch: scratch.path().to_owned(),
    };
    let scripts = prepare(&asked, &data)
        .map_err(|e| Failure::Run(anyhow::anyhow!("cannot prepare the bench's data: {e}")))?;
    let mut bench = Bench {
        exe: std::env::current_exe().map_err(|e| Failure::Run(e.into()))?,
        gpus: asked.gpus.clone(),
        gpu_name: asked.gpus.first().and_then(|&g| dpt_tui::device::peak::gpu_name(g)),
        cores: machine.cpu_cores,
        python: python.cloned().zip(scripts),
        scratch: scratch.path().to_owned(),
        out: asked.out.clone(),
        made: Vec::new(),
        stop,
    };
    let cases = run_cases(&mut bench, &asked, &data, t0);
    let report = report::Report {
        machine,
        budget_s: asked.budget.as_secs_f64(),
        elapsed_s: t0.elapsed().as_secs_f64(),
        cases,
        interrupted: bench.stopped().map(|s| dpt_tui::signals::name(s).to_owned()),
    };
    write_report(&report, &asked.out)?;
    // The scratch folder (data, scripts, the runs' directories) goes as this returns.
    if let Some(signal) = bench.stopped() {
        return Ok(dpt_tui::signals::exit_code(signal));
    }
    let failed = report.cases.iter().filter(|c| c.failed()).count();
    if failed > 0 {
        println!("{failed} case(s) failed or timed out");
        return Ok(dpt_tui::exit::FAILED);
    }
    Ok(dpt_tui::exit::DONE)
}

/// The synthetic images the cases need (unless `--data` gave some), the runs' folder in
/// `--out`, and the PyTorch side's scripts when there is one.
fn prepare(asked: &Asked, data: &Data) -> std::io::Result<Option<Scripts>> {
    if !data.images.exists() {
        std::fs::create_dir_all(&data.images)?;
        synthetic::images(&data.images, images_needed(&asked.cases))?;
    }
    std::fs::create_dir_all(asked.out.join("runs"))?;
    match asked.pytorch {
        PytorchSide::Run(_) => Scripts::write(&data.scratch).map(Some),
        PytorchSide::Skip(_) => Ok(None),
    }
}

/// Each case in turn, within its share of what is left of the budget, until the cases end or
/// a signal stops the bench; each result said in a line as it ends.
fn run_cases(bench: &mut Bench, asked: &Asked, data: &Data, t0: Instant) -> Vec<CaseResult> {
    // The budget is shared by the cases this machine can measure.
    let runnable: Vec<Case> = asked.cases.iter().filter(|c| bench.cannot_run(c).is_none()).cloned().collect();
    let mut results = Vec::new();
    for case in &asked.cases {
        if bench.stopped().is_some() {
            break;
        }
        let left = asked.budget.saturating_sub(t0.elapsed());
        let at = runnable.iter().position(|c| c.name == case.name);
        let deadline = at.map_or(std::time::Duration::ZERO, |k| plan::deadline(&runnable, k, left));
        let mut result = bench.case(case, deadline, data);
        result.fill_derived_figures();
        println!("  {:<14} {}", case.name, one_line(&result));
        results.push(result);
    }
    results
}

/// The report's table on stdout, and its two files in `out`.
fn write_report(report: &report::Report, out: &Path) -> Result<(), Failure> {
    println!("\n{}", report.table());
    let json = serde_json::to_string_pretty(report).map_err(|e| Failure::Run(e.into()))?;
    let write = |name: &str, text: &str| {
        dpt_tui::atomic::write_with(&out.join(name), |tmp| std::fs::write(tmp, text))
            .map_err(|e| Failure::Run(anyhow::anyhow!("cannot write {}: {e}", out.join(name).display())))
    };
    write(REPORT_JSON, &json)?;
    write(REPORT_MD, &report.markdown())?;
    println!("\nwritten: {} and {}", out.join(REPORT_JSON).display(), out.join(REPORT_MD).display());
    Ok(())
}

/// SIGINT and SIGTERM stop the bench: the number of the one that came, 0 until one does. The
/// running case's process group is then stopped (its processes are in a group of their own, so
/// a terminal's Ctrl-C reaches only the bench), and what was measured is written.
fn stop_on_signals() -> std::io::Result<std::sync::Arc<std::sync::atomic::AtomicUsize>> {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for signal in [libc::SIGINT, libc::SIGTERM] {
        signal_hook::flag::register_usize(signal, std::sync::Arc::clone(&stop), signal as usize)?;
    }
    Ok(stop)
}

/// The training images every case's steps need without an epoch's end (and its evaluation).
fn images_needed(cases: &[Case]) -> usize {
    let most = cases.iter().map(|c| (c.warmup + c.steps) * c.batch).max().unwrap_or(0);
    most.max(synthetic::TRAIN_IMAGES)
}

/// A case's result in a line, as it ends.
fn one_line(r: &CaseResult) -> String {
    let side = |status: &Status, reason: &Option<String>| match reason {
        Some(why) => format!("{}: {why}", status.word()),
        None => status.word().to_owned(),
    };
    let ours = match (&r.dpt_tui.figures, r.bus_gbs) {
        (_, Some(b)) => format!("bus bandwidth {b:.0} GB/s"),
        (Some(f), _) => format!("dpt-tui {:.0} samples/s", f.samples_per_sec),
        (None, _) => format!("dpt-tui {}", side(&r.dpt_tui.status, &r.dpt_tui.reason)),
    };
    let theirs = match &r.pytorch {
        Some(Side { figures: Some(f), .. }) => format!(", PyTorch {:.0} samples/s", f.samples_per_sec),
        Some(p) => format!(", PyTorch {}", side(&p.status, &p.reason)),
        None => String::new(),
    };
    let ratio = r.ratio.map_or(String::new(), |x| format!(" ({x:.2}x)"));
    let script = match &r.pytorch_script {
        Some(Side { figures: Some(f), .. }) => format!(", its TorchScript {:.0} samples/s", f.samples_per_sec),
        Some(p) => format!(", its TorchScript {}", side(&p.status, &p.reason)),
        None => String::new(),
    };
    let script_ratio = r.script_ratio.map_or(String::new(), |x| format!(" ({x:.2}x)"));
    format!("{ours}{theirs}{ratio}{script}{script_ratio}")
}

fn describe_machine(gpus: &[usize], python: Option<&python::Python>) -> report::Machine {
    let nvml = dpt_tui::monitor::nvml::Gpus::open().ok();
    let devices = if gpus.is_empty() {
        vec!["cpu".to_owned()]
    } else {
        gpus.iter()
            .map(|&i| {
                let name = dpt_tui::device::peak::gpu_name(i).unwrap_or_else(|| "unnamed GPU".into());
                format!("cuda:{i} {name}")
            })
            .collect()
    };
    report::Machine {
        dpt_tui: env!("CARGO_PKG_VERSION").to_owned(),
        torch: TORCH_BUILD.to_owned(),
        python_torch: python.map(|p| p.torch.clone()),
        host: dpt_tui::hostname(),
        cpu_cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        nvidia_driver: nvml.and_then(|g| g.census().1),
        devices,
        date: chrono::Utc::now().format("%Y-%m-%d").to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A machine with `cuda` GPUs libtorch can use, and `driver` the driver shows.
    fn machine(cuda: usize, driver: usize) -> Machine {
        Machine {
            cuda_devices: cuda,
            cores: 4,
            driver_gpus: driver,
            visible: dpt_tui::device::Visible::Unset,
            cuda_probed: true,
        }
    }

    #[test]
    fn bench_devices_are_resolved_as_a_run_resolves_them() {
        assert_eq!(bench_gpus("cpu", machine(0, 0)), Ok(Vec::new()));
        assert_eq!(bench_gpus("auto", machine(0, 0)), Ok(Vec::new()), "auto without a GPU: the CPU");
        assert_eq!(bench_gpus("auto", machine(2, 2)), Ok(vec![0, 1]));
        assert_eq!(bench_gpus("cuda:1,cuda:0,cuda:1", machine(2, 2)), Ok(vec![1, 0]));
        let bad = bench_gpus("gpu0", machine(0, 0)).expect_err("refused");
        assert!(bad.starts_with("bench --devices: unknown device 'gpu0'"), "{bad}");
        let absent = bench_gpus("cuda:0", machine(0, 0)).expect_err("refused");
        assert!(absent.contains("cuda:0"), "{absent}");
        let mixed = bench_gpus("cpu,cuda:0", machine(1, 1)).expect_err("refused");
        assert!(mixed.contains("mixes the CPU and GPUs"), "{mixed}");
        // The driver shows a GPU libtorch cannot use: refused as a run refuses it, never a
        // silent CPU bench.
        let driver = bench_gpus("auto", machine(0, 1)).expect_err("refused");
        assert!(driver.contains("driver"), "{driver}");
    }

    #[test]
    fn an_out_folder_is_written_once_and_must_be_writable() {
        let dir = tempfile::tempdir().expect("temp");
        let out = dir.path().join("b");
        assert_eq!(out_dir(Some(&out)), Ok(out.clone()));
        std::fs::write(out.join("bench.json"), "{}").expect("write");
        assert!(out_dir(Some(&out)).expect_err("refused").contains("already holds a bench"));
        let file = dir.path().join("f");
        std::fs::write(&file, "").expect("write");
        assert!(out_dir(Some(&file.join("x"))).expect_err("refused").contains("cannot be written"));
    }

    #[test]
    fn given_data_is_detected_by_kind_and_other_formats_are_refused() {
        let dir = tempfile::tempdir().expect("temp");
        let folder = |name: &str| {
            let d = dir.path().join(name);
            std::fs::create_dir_all(&d).expect("dir");
            d
        };
        let empty = folder("empty");
        assert!(GivenData::read(&[empty]).expect_err("refused").contains("no IDX files"));
        let tokens = folder("tokens");
        synthetic::tokens(&tokens, 50).expect("tokens");
        let images = folder("images");
        synthetic::images(&images, 8).expect("images");
        let both = GivenData::read(&[tokens.clone(), images.clone()]).expect("read");
        assert_eq!(both, GivenData { images: Some(images.clone()), tokens: Some(tokens.clone()) });
        let twice = GivenData::read(&[images.clone(), images.clone()]).expect_err("refused");
        assert!(twice.contains("the same kind of data"), "{twice}");
        let npy = folder("npy");
        std::fs::write(npy.join("x_train.npy"), b"").expect("write");
        let other = GivenData::read(&[npy]).expect_err("refused");
        assert!(other.contains("holds npy data; the bench takes IDX images"), "{other}");
        let missing = GivenData::read(&[dir.path().join("nothing")]).expect_err("refused");
        assert!(missing.contains("is not a folder"), "{missing}");
    }
}
