//! `dpt-tui bench`: what this machine's devices give, case by case, against a plain PyTorch loop
//! on the same device, within a time budget. Each case trains on synthetic data of the right
//! shapes (or `--data`), dpt-tui first, as a headless run of this binary, then the PyTorch
//! script of the same model, batch, optimizer and precision; each side is a process of its own
//! with its share of the budget as its deadline. The figures are the steady ones (the warm-up
//! steps left out on both sides); the outputs are a table on stdout and `bench.json` and
//! `bench.md` in `--out`.

mod child;
mod plan;
mod python;
mod report;
mod runner;
mod synthetic;

use std::path::{Path, PathBuf};
use std::time::Instant;

use plan::Case;
use report::{CaseResult, Side, Status};
use runner::{Bench, Data};

use super::input;
use crate::Failure;
use dpt_tui::device::driver::TORCH_BUILD;

/// The bench's flags.
pub struct Options<'a> {
    pub devices: Option<&'a str>,
    pub budget: &'a str,
    pub cases: Option<&'a str>,
    pub data: Option<&'a Path>,
    pub python: Option<&'a str>,
    pub out: Option<&'a Path>,
}

/// The devices a bench runs on: GPUs by index, or none (the CPU).
fn bench_gpus(spec: Option<&str>) -> Result<Vec<usize>, String> {
    let spec = spec.unwrap_or("auto").trim().to_ascii_lowercase();
    let found = || usize::try_from(tch::Cuda::device_count()).unwrap_or(0);
    match spec.as_str() {
        "auto" => Ok((0..found()).collect()),
        "cpu" => Ok(Vec::new()),
        "cuda" => match found() {
            0 => Err("--devices cuda: libtorch finds no CUDA device here; run 'dpt-tui doctor'".into()),
            n => Ok((0..n).collect()),
        },
        list => {
            let mut gpus = Vec::new();
            for d in list.split(',').map(str::trim) {
                let index =
                    d.strip_prefix("cuda:").and_then(|i| i.parse::<usize>().ok()).ok_or_else(|| {
                        format!(
                            "bad bench --devices '{d}': use auto, cpu, cuda, or GPUs such as cuda:0,cuda:1"
                        )
                    })?;
                if index >= found() {
                    return Err(format!("--devices {d}: libtorch finds {} CUDA device(s) here", found()));
                }
                if !gpus.contains(&index) {
                    gpus.push(index);
                }
            }
            Ok(gpus)
        }
    }
}

/// `--out`: a folder that can be written and holds no bench yet (an earlier bench's results
/// are never written over).
fn out_dir(asked: Option<&Path>) -> Result<PathBuf, String> {
    let dir = match asked {
        Some(d) => d.to_owned(),
        None => PathBuf::from(format!("bench-{}", chrono::Utc::now().format("%Y%m%d-%H%M%S"))),
    };
    if dir.join("bench.json").exists() {
        return Err(format!(
            "--out {} already holds a bench (bench.json): name another folder",
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

/// What `--data` holds for the bench: IDX images, token files, or both.
struct GivenData {
    images: bool,
    tokens: bool,
}

fn given_data(dir: &Path) -> Result<GivenData, String> {
    let has = |f: &str| dir.join(f).is_file() || dir.join(format!("{f}.gz")).is_file();
    let d = GivenData {
        images: has("train-images-idx3-ubyte") && has("t10k-images-idx3-ubyte"),
        tokens: dir.join("train.bin").is_file() && dir.join("val.bin").is_file(),
    };
    if !d.images && !d.tokens {
        return Err(format!(
            "bench --data {}: no IDX files (train-images-idx3-ubyte…, as MNIST and Fashion-MNIST) and no train.bin/val.bin tokens there",
            dir.display()
        ));
    }
    Ok(d)
}

pub fn run(opts: Options<'_>) -> Result<u8, Failure> {
    let budget: plan::Budget = opts.budget.parse().map_err(|e: String| input(anyhow::anyhow!(e)))?;
    let gpus = bench_gpus(opts.devices).map_err(|e| input(anyhow::anyhow!(e)))?;
    let cases = plan::select(plan::cases(gpus.len()), opts.cases).map_err(|e| input(anyhow::anyhow!(e)))?;
    let given = opts.data.map(given_data).transpose().map_err(|e| input(anyhow::anyhow!(e)))?;
    let python = python::choose(opts.python).map_err(|e| input(anyhow::anyhow!(e)))?;
    let out = out_dir(opts.out).map_err(|e| input(anyhow::anyhow!(e)))?;
    let stop =
        stop_on_signals().map_err(|e| Failure::Run(anyhow::anyhow!("cannot watch for signals: {e}")))?;
    let t0 = Instant::now();
    let scratch = tempfile::Builder::new()
        .prefix("dpt-bench-")
        .tempdir()
        .map_err(|e| Failure::Run(anyhow::anyhow!("cannot make a scratch folder: {e}")))?;
    let machine = describe_machine(&gpus, python.as_ref().ok());
    println!(
        "dpt-tui bench: {} case(s) on {} within {} s; PyTorch side: {}",
        cases.len(),
        machine.devices.join(", "),
        budget.0.as_secs(),
        match &python {
            Ok(p) => format!("{} (torch {})", p.path.display(), p.torch),
            Err(why) => format!("none ({why})"),
        }
    );
    let data = Data {
        images: match (opts.data, &given) {
            (Some(d), Some(g)) if g.images => d.to_owned(),
            _ => scratch.path().join("images"),
        },
        tokens: match (opts.data, &given) {
            (Some(d), Some(g)) if g.tokens => Some(d.to_owned()),
            _ => None,
        },
        scratch: scratch.path().to_owned(),
    };
    let prepare = || -> std::io::Result<Option<(PathBuf, PathBuf)>> {
        if !data.images.exists() {
            std::fs::create_dir_all(&data.images)?;
            synthetic::images(&data.images, images_needed(&cases))?;
        }
        std::fs::create_dir_all(out.join("runs"))?;
        python.as_ref().ok().map(|_| python::write_scripts(scratch.path())).transpose()
    };
    let scripts =
        prepare().map_err(|e| Failure::Run(anyhow::anyhow!("cannot prepare the bench's data: {e}")))?;
    let mut bench = Bench {
        exe: std::env::current_exe().map_err(|e| Failure::Run(e.into()))?,
        gpus: gpus.clone(),
        gpu_name: gpus.first().and_then(|&g| dpt_tui::device::peak::gpu_name(g)),
        cores: machine.cpu_cores,
        python: python.ok().zip(scripts),
        scratch: scratch.path().to_owned(),
        out: out.clone(),
        made: Vec::new(),
        stop,
    };
    // The budget is shared by the cases this machine can measure.
    let runnable: Vec<Case> = cases.iter().filter(|c| bench.cannot_run(c).is_none()).cloned().collect();
    let mut results = Vec::new();
    for case in &cases {
        if bench.stopped().is_some() {
            break;
        }
        let left = budget.0.saturating_sub(t0.elapsed());
        let at = runnable.iter().position(|c| c.name == case.name);
        let deadline = at.map_or(std::time::Duration::ZERO, |k| plan::deadline(&runnable, k, left));
        let mut result = bench.case(case, deadline, &data);
        result.derive();
        println!("  {:<14} {}", case.name, one_line(&result));
        results.push(result);
    }
    let report = report::Report {
        machine,
        budget_s: budget.0.as_secs_f64(),
        elapsed_s: t0.elapsed().as_secs_f64(),
        cases: results,
        interrupted: bench.stopped().map(|s| dpt_tui::signals::name(s).to_owned()),
    };
    println!("\n{}", report.table());
    let json = serde_json::to_string_pretty(&report).map_err(|e| Failure::Run(e.into()))?;
    let write = |name: &str, text: &str| {
        dpt_tui::atomic::write_with(&out.join(name), |tmp| std::fs::write(tmp, text))
            .map_err(|e| Failure::Run(anyhow::anyhow!("cannot write {}: {e}", out.join(name).display())))
    };
    write("bench.json", &json)?;
    write("bench.md", &report.markdown())?;
    println!("\nwritten: {} and {}", out.join("bench.json").display(), out.join("bench.md").display());
    // The scratch folder (data, scripts, the runs' directories) goes as this returns.
    if let Some(signal) = bench.stopped() {
        return Ok(dpt_tui::signals::exit_code(signal));
    }
    let failed = report.cases.iter().filter(|c| c.failed()).count();
    if failed > 0 {
        println!("{failed} case(s) failed or timed out");
        return Ok(1);
    }
    Ok(0)
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
    format!("{ours}{theirs}{}", r.ratio.map_or(String::new(), |x| format!(" ({x:.2}x)")))
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

    #[test]
    fn bench_devices_are_read_and_a_bad_one_is_refused() {
        assert_eq!(bench_gpus(Some("cpu")), Ok(Vec::new()));
        let bad = bench_gpus(Some("gpu0")).expect_err("refused");
        assert!(bad.starts_with("bad bench --devices 'gpu0'"), "{bad}");
        if tch::Cuda::device_count() == 0 {
            assert!(bench_gpus(Some("cuda:0")).expect_err("refused").contains("finds 0 CUDA device"));
            assert_eq!(bench_gpus(None), Ok(Vec::new()), "auto: the CPU");
        }
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
    fn data_without_images_or_tokens_is_refused() {
        let dir = tempfile::tempdir().expect("temp");
        assert!(given_data(dir.path()).map(|_| ()).expect_err("refused").contains("no IDX files"));
        synthetic::tokens(dir.path(), 50).expect("tokens");
        let d = given_data(dir.path()).expect("tokens");
        assert!(d.tokens && !d.images);
    }
}
