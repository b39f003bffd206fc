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
mod synthetic;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use child::Ended;
use plan::{Arch, Case, GptShape, Kind, Placement};
use report::{CaseResult, Side, Status};

use super::input;
use crate::Failure;
use dpt_tui::device::driver::TORCH_BUILD;
use dpt_tui::model::Precision;

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

/// Where each kind of data is, given or written into the scratch folder.
struct Data {
    images: PathBuf,
    /// Token folders by vocabulary.
    tokens: Option<PathBuf>,
    scratch: PathBuf,
}

impl Data {
    fn tokens_for(&mut self, vocab: usize) -> std::io::Result<PathBuf> {
        if let Some(t) = &self.tokens {
            return Ok(t.clone());
        }
        let dir = self.scratch.join(format!("tokens-{vocab}"));
        if !dir.is_dir() {
            std::fs::create_dir_all(&dir)?;
            synthetic::tokens(&dir, vocab)?;
        }
        Ok(dir)
    }
}

pub fn run(opts: Options<'_>) -> Result<u8, Failure> {
    let budget: plan::Budget = opts.budget.parse().map_err(|e: String| input(anyhow::anyhow!(e)))?;
    let gpus = bench_gpus(opts.devices).map_err(|e| input(anyhow::anyhow!(e)))?;
    let cases = plan::select(plan::cases(gpus.len()), opts.cases).map_err(|e| input(anyhow::anyhow!(e)))?;
    let given = opts.data.map(given_data).transpose().map_err(|e| input(anyhow::anyhow!(e)))?;
    let python = python::choose(opts.python).map_err(|e| input(anyhow::anyhow!(e)))?;
    let out = out_dir(opts.out).map_err(|e| input(anyhow::anyhow!(e)))?;
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
    let mut data = Data {
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
        cores: machine.cpu_cores,
        python: python.ok().zip(scripts),
        scratch: scratch.path().to_owned(),
        out: out.clone(),
        made: Vec::new(),
    };
    let mut results = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let left = budget.0.saturating_sub(t0.elapsed());
        let deadline = plan::deadline(&cases, i, left);
        let mut result = bench.case(case, deadline, &mut data);
        result.derive();
        println!("  {:<14} {}", case.name, one_line(&result));
        results.push(result);
    }
    let report = report::Report {
        machine,
        budget_s: budget.0.as_secs_f64(),
        elapsed_s: t0.elapsed().as_secs_f64(),
        cases: results,
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
    let failed = report.cases.iter().filter(|c| c.failed()).count();
    if failed > 0 {
        println!("{failed} case(s) failed or timed out");
        return Ok(1);
    }
    Ok(0)
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
        host: dpt_tui::dist::world::hostname(),
        cpu_cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        nvidia_driver: nvml.and_then(|g| g.census().1),
        devices,
        date: chrono::Utc::now().format("%Y-%m-%d").to_string(),
    }
}

/// What the bench runs with.
struct Bench {
    exe: PathBuf,
    gpus: Vec<usize>,
    cores: usize,
    /// The Python and the two scripts (the seeds', the GPT's).
    python: Option<(python::Python, (PathBuf, PathBuf))>,
    scratch: PathBuf,
    out: PathBuf,
    /// The GPT TorchScript files made so far, by shape.
    made: Vec<(GptShape, PathBuf)>,
}

impl Bench {
    fn first_device(&self) -> String {
        self.gpus.first().map_or_else(|| "cpu".to_owned(), |g| format!("cuda:{g}"))
    }

    fn devices(&self, placement: Placement) -> String {
        let first = self.first_device();
        match placement {
            Placement::One => first,
            Placement::TwoOnOne if self.gpus.is_empty() => "cpu:2".to_owned(),
            Placement::TwoOnOne => format!("{first},{first}"),
            Placement::EveryGpu => {
                self.gpus.iter().map(|g| format!("cuda:{g}")).collect::<Vec<_>>().join(",")
            }
        }
    }

    fn case(&mut self, case: &Case, deadline: Duration, data: &mut Data) -> CaseResult {
        let Kind::Train { net, precision, placement } = case.kind else {
            return self.allreduce(case, deadline);
        };
        let devices = self.devices(placement);
        let mut result = CaseResult {
            case: case.name.to_owned(),
            model: match case.gpt {
                Some(g) => format!("gpt {}x{}, vocab {}, block {}", g.layers, g.width, g.vocab, g.block),
                None => net.name().to_owned(),
            },
            devices: devices.clone(),
            precision: precision.to_string(),
            batch: case.batch,
            steps: case.steps,
            tokens_per_sample: case.gpt.map_or(1, |g| g.block),
            dpt_tui: Side::not(Status::Unsupported, "not run"),
            pytorch: None,
            ratio: None,
            model_flops: None,
            pytorch_model_flops: None,
            mfu: None,
            pytorch_mfu: None,
            flops_vs_flop_counter: None,
            bus_gbs: None,
        };
        let t0 = Instant::now();
        let ours_share = if self.python.is_some() { deadline / 2 } else { deadline };
        let model = match case.gpt {
            Some(shape) => match self.gpt_model(shape, ours_share) {
                Ok(path) => Some(path),
                Err((status, why)) => {
                    result.dpt_tui = Side::not(status, why);
                    return result;
                }
            },
            None => None,
        };
        let token_dir = match case.gpt {
            Some(shape) => match data.tokens_for(shape.vocab) {
                Ok(d) => Some(d),
                Err(e) => {
                    result.dpt_tui = Side::not(Status::Failed, format!("cannot write the token files: {e}"));
                    return result;
                }
            },
            None => None,
        };
        let run_dir = self.scratch.join("runs").join(case.name);
        let mut cmd = Command::new(&self.exe);
        cmd.args(["--headless", "--devices", &devices, "--batch-size", &case.batch.to_string()]);
        cmd.args(["--precision", precision.name(), "--log-every", &case.warmup.to_string()]);
        cmd.args(["--checkpoint-every", "0", "--snapshots", "0", "--seed", "0"]);
        cmd.arg("--run-dir").arg(&run_dir);
        let total = (case.warmup + case.steps).to_string();
        match (&model, &token_dir, case.gpt) {
            (Some(m), Some(t), Some(g)) => {
                cmd.arg("--model").arg(m).arg("--data").arg(t);
                cmd.args(["--block-size", &g.block.to_string(), "--steps", &total, "--eval-every", &total]);
                cmd.args(["--eval-batches", "1", "--eval-batch-size", "4", "--sample-tokens", "0"]);
                cmd.args([
                    "--optimizer",
                    "adamw",
                    "--lr",
                    "6e-4",
                    "--betas",
                    "0.9,0.95",
                    "--weight-decay",
                    "0.1",
                ]);
                cmd.args(["--clip-grad-norm", "1"]);
            }
            _ => {
                cmd.args(["--model", net.name()]).arg("--data").arg(&data.images);
                cmd.args(["--max-steps", &total, "--epochs", "100"]);
            }
        }
        let log = self.out.join("runs").join(format!("{}-dpt-tui", case.name));
        result.dpt_tui = match child::run(cmd, ours_share, &log) {
            Ended::Done { .. } => {
                let records = child::records(&run_dir);
                // The record stays with the bench's outputs, for `dpt-tui show`.
                let kept = self.out.join("runs").join(case.name);
                let _ = std::fs::create_dir_all(&kept)
                    .and_then(|_| std::fs::copy(run_dir.join("metrics.jsonl"), kept.join("metrics.jsonl")));
                match records.map(|r| child::run_figures(&r, case.batch)) {
                    Ok(Some(f)) => Side::ok(f),
                    Ok(None) => Side::not(Status::Failed, "its record has no timed steps"),
                    Err(e) => Side::not(Status::Failed, e),
                }
            }
            // dpt-tui refuses what it does not support with exit 2 and one line, before training.
            Ended::Failed { reason } if !run_dir.join("metrics.jsonl").exists() && refused(&log) => {
                Side::not(Status::Unsupported, reason)
            }
            Ended::Failed { reason } => Side::not(Status::Failed, reason),
            Ended::TimedOut { after_s } => {
                Side::not(Status::TimedOut, format!("stopped after {after_s:.0} s, its share of the budget"))
            }
        };
        let _ = std::fs::remove_dir_all(&run_dir);
        result.pytorch = self.pytorch_side(
            case,
            net,
            precision,
            placement,
            data,
            token_dir.as_deref(),
            deadline.saturating_sub(t0.elapsed()),
        );
        result
    }

    /// The GPT of `shape` as TorchScript, made by the Python once per shape.
    fn gpt_model(&mut self, shape: GptShape, deadline: Duration) -> Result<PathBuf, (Status, String)> {
        if let Some((_, path)) = self.made.iter().find(|(s, _)| *s == shape) {
            return Ok(path.clone());
        }
        let Some((py, (_, gpt))) = &self.python else {
            return Err((
                Status::Unsupported,
                "the GPT is scripted by a Python with torch: name one with --python PY".into(),
            ));
        };
        let path = self.scratch.join(format!("gpt-{}x{}-{}.pt", shape.layers, shape.width, shape.vocab));
        let mut cmd = Command::new(&py.path);
        cmd.arg(gpt).args(["make"]).arg(&path);
        cmd.args([shape.vocab, shape.block].map(|v| v.to_string()));
        cmd.arg("script");
        cmd.args([shape.width, shape.layers, shape.heads].map(|v| v.to_string()));
        match child::run(cmd, deadline, &self.scratch.join("gpt-make")) {
            Ended::Done { .. } => {
                self.made.push((shape, path.clone()));
                Ok(path)
            }
            Ended::Failed { reason } => Err((Status::Failed, format!("scripting the GPT failed: {reason}"))),
            Ended::TimedOut { after_s } => {
                Err((Status::TimedOut, format!("scripting the GPT took over {after_s:.0} s")))
            }
        }
    }

    /// The plain PyTorch loop of the case, if there is a Python.
    #[allow(clippy::too_many_arguments)]
    fn pytorch_side(
        &self,
        case: &Case,
        net: Arch,
        precision: Precision,
        placement: Placement,
        data: &Data,
        tokens: Option<&Path>,
        deadline: Duration,
    ) -> Option<Side<child::TorchFigures>> {
        let (py, (seed, gpt)) = self.python.as_ref()?;
        if precision == Precision::F16 {
            return Some(Side::not(Status::Unsupported, "the PyTorch scripts train in f32 or bf16"));
        }
        let device = if self.gpus.is_empty() { "cpu".to_owned() } else { "cuda".to_owned() };
        let mut cmd = Command::new(&py.path);
        let threads = self.cores.to_string();
        match (case.gpt, tokens) {
            (Some(g), Some(t)) => {
                let dev = self.first_device();
                cmd.arg(gpt).arg("bench").arg(t);
                cmd.args(
                    [g.vocab, g.block, g.width, g.layers, g.heads, case.batch, case.warmup, case.steps]
                        .map(|v| v.to_string()),
                );
                cmd.args([dev.as_str(), precision.name(), threads.as_str()]);
            }
            _ => {
                if placement == Placement::EveryGpu {
                    let n = self.gpus.len().to_string();
                    cmd.args(["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", &n]);
                }
                cmd.arg(seed);
                if placement == Placement::EveryGpu {
                    cmd.arg("--ddp");
                }
                cmd.args(["--model", net.name(), "--device", &device]).arg("--data").arg(&data.images);
                cmd.args(["--steps", &case.steps.to_string(), "--warmup", &case.warmup.to_string()]);
                cmd.args(["--batch-size", &case.batch.to_string(), "--precision", precision.name()]);
                if self.gpus.is_empty() {
                    cmd.args(["--threads", &threads]);
                }
            }
        }
        if let Some(&g) = self.gpus.first().filter(|_| placement != Placement::EveryGpu) {
            // The same GPU as dpt-tui's (the script's "cuda" is the first visible one).
            cmd.env("CUDA_VISIBLE_DEVICES", visible_index(g));
        }
        let log = self.out.join("runs").join(format!("{}-pytorch", case.name));
        Some(match child::run(cmd, deadline, &log) {
            Ended::Done { stdout } => match child::torch_figures(&stdout) {
                Ok(f) => Side::ok(f),
                Err(e) => Side::not(Status::Failed, e),
            },
            Ended::Failed { reason } => Side::not(Status::Failed, reason),
            Ended::TimedOut { after_s } => {
                Side::not(Status::TimedOut, format!("stopped after {after_s:.0} s, its share of the budget"))
            }
        })
    }

    /// NCCL's allreduce of 256 MB per GPU across every GPU of the bench, in this process.
    fn allreduce(&self, case: &Case, deadline: Duration) -> CaseResult {
        let devices = self.devices(Placement::EveryGpu);
        let side = match super::doctor::nccl_bus_bandwidth(self.gpus.len(), deadline) {
            Ok(gbs) => (Side::not(Status::Ok, format!("{gbs:.0} GB/s")), Some(gbs)),
            Err(e) => (Side::not(Status::Failed, e), None),
        };
        let mut result = CaseResult {
            case: case.name.to_owned(),
            model: "NCCL allreduce, 256 MB per GPU".into(),
            devices,
            precision: "f32".into(),
            batch: 0,
            steps: 1,
            tokens_per_sample: 1,
            dpt_tui: side.0,
            pytorch: None,
            ratio: None,
            model_flops: None,
            pytorch_model_flops: None,
            mfu: None,
            pytorch_mfu: None,
            flops_vs_flop_counter: None,
            bus_gbs: side.1,
        };
        if result.bus_gbs.is_some() {
            result.dpt_tui.reason = None;
        }
        result
    }
}

/// Whether a dpt-tui side that failed refused its input (exit 2, said in its error output
/// before training): the case is then unsupported here rather than failed.
fn refused(log_stem: &Path) -> bool {
    let err = std::fs::read_to_string(log_stem.with_extension("err")).unwrap_or_default();
    err.lines().any(|l| l.starts_with("dpt-tui: ")) && !err.contains("panicked")
}

/// The index `CUDA_VISIBLE_DEVICES` takes for this process's CUDA device `g`: the same GPU, as
/// the variable this process was started with numbers them.
fn visible_index(g: usize) -> String {
    match std::env::var("CUDA_VISIBLE_DEVICES") {
        Ok(v) if !v.trim().is_empty() => {
            v.split(',').nth(g).map_or_else(|| g.to_string(), |s| s.trim().to_owned())
        }
        _ => g.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_devices_are_read_and_a_bad_one_is_refused() {
        assert_eq!(bench_gpus(Some("cpu")), Ok(Vec::new()));
        let bad = bench_gpus(Some("gpu0")).unwrap_err();
        assert!(bad.starts_with("bad bench --devices 'gpu0'"), "{bad}");
        if tch::Cuda::device_count() == 0 {
            assert!(bench_gpus(Some("cuda:0")).unwrap_err().contains("finds 0 CUDA device"));
            assert_eq!(bench_gpus(None), Ok(Vec::new()), "auto: the CPU");
        }
    }

    #[test]
    fn an_out_folder_is_written_once_and_must_be_writable() {
        let dir = tempfile::tempdir().expect("temp");
        let out = dir.path().join("b");
        assert_eq!(out_dir(Some(&out)), Ok(out.clone()));
        std::fs::write(out.join("bench.json"), "{}").expect("write");
        assert!(out_dir(Some(&out)).unwrap_err().contains("already holds a bench"));
        let file = dir.path().join("f");
        std::fs::write(&file, "").expect("write");
        assert!(out_dir(Some(&file.join("x"))).unwrap_err().contains("cannot be written"));
    }

    #[test]
    fn data_without_images_or_tokens_is_refused() {
        let dir = tempfile::tempdir().expect("temp");
        assert!(given_data(dir.path()).map(|_| ()).unwrap_err().contains("no IDX files"));
        synthetic::tokens(dir.path(), 50).expect("tokens");
        let d = given_data(dir.path()).expect("tokens");
        assert!(d.tokens && !d.images);
    }

    #[test]
    fn a_gpu_is_named_to_the_python_as_this_process_sees_it() {
        if std::env::var_os("CUDA_VISIBLE_DEVICES").is_none() {
            assert_eq!(visible_index(1), "1");
        }
    }
}
