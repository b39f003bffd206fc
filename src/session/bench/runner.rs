//! Runs one case of the bench: its data, its dpt-tui side (a headless run of this binary) and
//! its PyTorch side (the script of the same model), each a process with its share of the case's
//! deadline, and the case's result from both.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::child::{self, Ended};
use super::plan::{Arch, Case, GptShape, Kind, Placement, GPT_RECIPE};
use super::python::{Python, Scripts};
use super::report::{CaseResult, Side, Status};
pub use super::data::Data;
use dpt_tui::exit::BAD_INPUT;
use dpt_tui::flops::PeakFlops;
use dpt_tui::record::file::METRICS_FILE;
use dpt_tui::model::Precision;

/// What the bench runs with.
pub struct Bench {
    pub exe: PathBuf,
    /// The GPUs of the bench, by this process's CUDA index (none: the CPU).
    pub gpus: Vec<usize>,
    /// The name of the first GPU, for its peak.
    pub gpu_name: Option<String>,
    pub cores: usize,
    /// The Python of the PyTorch side and its scripts.
    pub python: Option<(Python, Scripts)>,
    pub scratch: PathBuf,
    pub out: PathBuf,
    /// The GPT TorchScript files made so far, by shape.
    pub made: Vec<(GptShape, PathBuf)>,
    /// The number of the signal that asked the bench to stop (SIGINT, SIGTERM); 0 while none
    /// has. The running side is stopped with its process group, and no other starts.
    pub stop: Arc<AtomicUsize>,
}

/// Whether this CPU computes bf16 in hardware (x86's AVX-512 BF16 or AMX-BF16, Arm's BF16).
/// Without it PyTorch emulates bf16, tens of times slower than f32: a ResNet-18 step of batch 32
/// took 9.7 s against 0.26 s in f32 on this project's AVX2 machine.
fn cpu_has_bf16() -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else { return true };
    info.lines()
        .filter(|l| l.starts_with("flags") || l.starts_with("Features"))
        .any(|l| l.split_whitespace().any(|f| matches!(f, "avx512_bf16" | "amx_bf16" | "bf16")))
}

/// A side the bench's stop ended, or kept from starting.
fn interrupted(signal: i32) -> (Status, String) {
    (Status::Interrupted, format!("stopped by {}", dpt_tui::signals::name(signal)))
}

impl Bench {
    /// Why this machine cannot measure `case` (a bf16 case on a CPU without bf16 instructions);
    /// none when it can.
    pub fn cannot_run(&self, case: &Case) -> Option<String> {
        let Kind::Train { precision: Precision::Bf16, .. } = case.kind else { return None };
        (self.gpus.is_empty() && !cpu_has_bf16()).then(|| {
            "this CPU has no bf16 instructions (AVX-512 BF16, AMX, Arm BF16): bf16 would be emulated, tens of times slower than f32".to_owned()
        })
    }

    /// The signal that asked the bench to stop, once one has.
    pub fn stopped(&self) -> Option<i32> {
        Some(self.stop.load(Ordering::SeqCst) as i32).filter(|&s| s != 0)
    }

    /// The GPUs a placement trains on (none on the CPU).
    fn gpus_of(&self, placement: Placement) -> &[usize] {
        match placement {
            Placement::EveryGpu => &self.gpus,
            _ => &self.gpus[..self.gpus.len().min(1)],
        }
    }

    /// dpt-tui's `--devices` for a placement.
    fn devices(&self, placement: Placement) -> String {
        let cuda = |g: &usize| format!("cuda:{g}");
        match (placement, self.gpus.first()) {
            (Placement::One, None) => "cpu".into(),
            (Placement::TwoOnOne, None) => "cpu:2".into(),
            (Placement::One, Some(g)) => cuda(g),
            (Placement::TwoOnOne, Some(g)) => format!("{},{}", cuda(g), cuda(g)),
            (Placement::EveryGpu, _) => self.gpus.iter().map(cuda).collect::<Vec<_>>().join(","),
        }
    }

    /// Runs `case` within `deadline`.
    pub fn case(&mut self, case: &Case, deadline: Duration, data: &Data) -> CaseResult {
        let t0 = Instant::now();
        let Kind::Train { net, precision, placement } = case.kind else {
            return self.allreduce(case, deadline);
        };
        let model = match case.gpt() {
            Some(g) => format!("gpt {}x{}, vocab {}, block {}", g.layers, g.width, g.vocab, g.block),
            None => net.name().to_owned(),
        };
        let mut result = CaseResult::new(case, model, self.devices(placement), precision.to_string());
        if let Some(why) = self.cannot_run(case) {
            result.dpt_tui = Side::unmeasured(Status::Unsupported, why.clone());
            result.pytorch = self.python.as_ref().map(|_| Side::unmeasured(Status::Unsupported, why.clone()));
            if case.gpt().is_some() {
                result.pytorch_script = self.python.as_ref().map(|_| Side::unmeasured(Status::Unsupported, why));
            }
            return result;
        }
        let gpus = self.gpus_of(placement).len();
        result.peak = self.gpu_name.as_deref().and_then(|n| PeakFlops::of(n, gpus, precision, true));
        let ours = if self.python.is_some() { deadline / 2 } else { deadline };
        let tokens = match case.gpt() {
            Some(shape) => match self.gpt_inputs(shape, data, ours) {
                Ok((model, tokens, note)) => {
                    result.note = note;
                    Some((model, tokens))
                }
                Err((status, why)) => {
                    result.dpt_tui = Side::unmeasured(status, why);
                    return result;
                }
            },
            None => None,
        };
        result.dpt_tui = self.dpt_side(case, net, tokens.as_ref(), data, ours.saturating_sub(t0.elapsed()));
        let gpt = tokens.as_ref().map(|(model, tokens)| (tokens.as_path(), model.as_path()));
        // A GPT has two PyTorch loops, the eager module's and the TorchScript file's: half each.
        let left = deadline.saturating_sub(t0.elapsed());
        let share = if gpt.is_some() { left / 2 } else { left };
        result.pytorch = self.pytorch_side(case, gpt.map(|(t, _)| (t, None)), data, share);
        if let Some((t, model)) = gpt {
            let left = deadline.saturating_sub(t0.elapsed());
            result.pytorch_script = self.pytorch_side(case, Some((t, Some(model))), data, left);
        }
        result
    }

    /// A GPT case's model (scripted by the Python once per shape) and token folder.
    fn gpt_inputs(
        &mut self,
        shape: GptShape,
        data: &Data,
        deadline: Duration,
    ) -> Result<(PathBuf, PathBuf, Option<String>), (Status, String)> {
        let (tokens, note) = data
            .tokens_for(shape.vocab)
            .map_err(|e| (Status::Failed, format!("cannot write the token files: {e}")))?;
        if let Some((_, path)) = self.made.iter().find(|(s, _)| *s == shape) {
            return Ok((path.clone(), tokens, note));
        }
        let Some((py, scripts)) = &self.python else {
            return Err((
                Status::Unsupported,
                "the GPT is scripted by a Python with torch: name one with --python PY".into(),
            ));
        };
        let path = self.scratch.join(format!("gpt-{}x{}-{}.pt", shape.layers, shape.width, shape.vocab));
        let mut cmd = Command::new(&py.path);
        cmd.arg(&scripts.gpt).arg("make").arg(&path);
        cmd.args([shape.vocab, shape.block].map(|v| v.to_string())).arg("script");
        cmd.args([shape.width, shape.layers, shape.heads].map(|v| v.to_string()));
        match child::run(cmd, deadline, &self.stop, &self.scratch.join("gpt-make")) {
            Ended::Done { .. } => {
                self.made.push((shape, path.clone()));
                Ok((path, tokens, note))
            }
            Ended::Failed { reason, .. } => {
                Err((Status::Failed, format!("scripting the GPT failed: {reason}")))
            }
            Ended::TimedOut { after_s } => {
                Err((Status::TimedOut, format!("scripting the GPT took over {after_s:.0} s")))
            }
            Ended::Interrupted { signal } => Err(interrupted(signal)),
        }
    }

    /// The case as a headless dpt-tui run; `gpt`: the GPT's model file and token folder.
    fn dpt_side(
        &self,
        case: &Case,
        net: Arch,
        gpt: Option<&(PathBuf, PathBuf)>,
        data: &Data,
        deadline: Duration,
    ) -> Side<child::RunFigures> {
        let Kind::Train { precision, placement, .. } = case.kind else {
            return Side::unmeasured(Status::Unsupported, "not a training case");
        };
        let run_dir = self.scratch.join("runs").join(case.name);
        let mut cmd = Command::new(&self.exe);
        cmd.args([
            "--headless",
            "--devices",
            &self.devices(placement),
            "--batch-size",
            &case.batch.to_string(),
        ]);
        cmd.args(["--precision", precision.name(), "--log-every", &case.warmup.to_string()]);
        cmd.args(["--checkpoint-every", "0", "--snapshots", "0", "--seed", "0"]);
        cmd.arg("--run-dir").arg(&run_dir);
        let total = (case.warmup + case.steps).to_string();
        match (gpt, case.gpt()) {
            (Some((model, tokens)), Some(g)) => {
                cmd.arg("--model").arg(model).arg("--data").arg(tokens);
                cmd.args(["--block-size", &g.block.to_string(), "--steps", &total, "--eval-every", &total]);
                cmd.args(["--eval-batches", "1", "--eval-batch-size", "4", "--sample-tokens", "0"]);
                cmd.args(GPT_RECIPE.flags());
            }
            _ => {
                cmd.args(["--model", net.name()]).arg("--data").arg(&data.images);
                cmd.args(["--max-steps", &total, "--epochs", "100"]);
            }
        }
        let log = self.out.join("runs").join(format!("{}-dpt-tui", case.name));
        let side = match child::run(cmd, deadline, &self.stop, &log) {
            Ended::Done { .. } => {
                // The record stays with the bench's outputs, for `dpt-tui show`.
                let kept = self.out.join("runs").join(case.name);
                let _ = std::fs::create_dir_all(&kept)
                    .and_then(|_| std::fs::copy(run_dir.join(METRICS_FILE), kept.join(METRICS_FILE)));
                match child::records(&run_dir).map(|r| child::run_figures(&r, case.batch)) {
                    Ok(Some(f)) => Side::ok(f),
                    Ok(None) => Side::unmeasured(Status::Failed, "its record has no timed steps"),
                    Err(e) => Side::unmeasured(Status::Failed, e),
                }
            }
            // Bad input: dpt-tui refused the case's settings before training (it does not
            // support them here); any other failure is the run's.
            Ended::Failed { reason, code: Some(c) } if c == i32::from(BAD_INPUT) => {
                Side::unmeasured(Status::Unsupported, reason)
            }
            Ended::Failed { reason, .. } => Side::unmeasured(Status::Failed, reason),
            Ended::TimedOut { after_s } => {
                Side::unmeasured(Status::TimedOut, format!("stopped after {after_s:.0} s, its share of the budget"))
            }
            Ended::Interrupted { signal } => {
                let (status, why) = interrupted(signal);
                Side::unmeasured(status, why)
            }
        };
        let _ = std::fs::remove_dir_all(&run_dir);
        side
    }

    /// The plain PyTorch loop of the case, if there is a Python; `gpt`: a GPT's token folder,
    /// and its TorchScript file for the loop over that file (none: over the eager module).
    fn pytorch_side(
        &self,
        case: &Case,
        gpt: Option<(&Path, Option<&Path>)>,
        data: &Data,
        deadline: Duration,
    ) -> Option<Side<child::TorchFigures>> {
        let (py, scripts) = self.python.as_ref()?;
        let Kind::Train { net, precision, placement } = case.kind else { return None };
        if let Some(signal) = self.stopped() {
            let (status, why) = interrupted(signal);
            return Some(Side::unmeasured(status, why));
        }
        if precision == Precision::F16 {
            return Some(Side::unmeasured(Status::Unsupported, "the PyTorch scripts train in f32 or bf16"));
        }
        // The script's `cuda` is the first GPU CUDA_VISIBLE_DEVICES leaves it: dpt-tui's.
        let device = if self.gpus.is_empty() { "cpu" } else { "cuda" };
        let threads = self.cores.to_string();
        let mut cmd = Command::new(&py.path);
        let mut log = format!("{}-pytorch", case.name);
        match (case.gpt(), gpt) {
            (Some(g), Some((t, module))) => {
                cmd.arg(&scripts.gpt).arg("bench").arg(t);
                let shape =
                    [g.vocab, g.block, g.width, g.layers, g.heads, case.batch, case.warmup, case.steps];
                cmd.args(shape.map(|v| v.to_string()));
                cmd.args([device, precision.name()]).arg(GPT_RECIPE.json()).arg(&threads);
                if let Some(m) = module {
                    cmd.arg(m);
                    log.push_str("-script");
                }
            }
            _ => {
                let ranks = self.gpus_of(placement).len();
                if placement == Placement::EveryGpu {
                    let n = ranks.to_string();
                    cmd.args(["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", &n]);
                }
                cmd.arg(&scripts.seed_models);
                if placement == Placement::EveryGpu {
                    cmd.arg("--ddp");
                }
                cmd.args(["--model", net.name(), "--device", device]).arg("--data").arg(&data.images);
                cmd.args(["--steps", &case.steps.to_string(), "--warmup", &case.warmup.to_string()]);
                cmd.args(["--batch-size", &case.batch.to_string(), "--precision", precision.name()]);
                if self.gpus.is_empty() {
                    cmd.args(["--threads", &threads]);
                }
            }
        }
        if !self.gpus.is_empty() {
            cmd.env("CUDA_VISIBLE_DEVICES", visible(self.gpus_of(placement)));
        }
        let log = self.out.join("runs").join(log);
        Some(match child::run(cmd, deadline, &self.stop, &log) {
            Ended::Done { stdout } => match child::torch_figures(&stdout) {
                Ok(f) => Side::ok(f),
                Err(e) => Side::unmeasured(Status::Failed, e),
            },
            Ended::Failed { reason, .. } => Side::unmeasured(Status::Failed, reason),
            Ended::TimedOut { after_s } => {
                Side::unmeasured(Status::TimedOut, format!("stopped after {after_s:.0} s, its share of the budget"))
            }
            Ended::Interrupted { signal } => {
                let (status, why) = interrupted(signal);
                Side::unmeasured(status, why)
            }
        })
    }

    /// NCCL's allreduce of 256 MB per GPU across every GPU of the bench, in this process.
    fn allreduce(&self, case: &Case, deadline: Duration) -> CaseResult {
        let mut result = CaseResult::new(
            case,
            "NCCL allreduce, 256 MB per GPU".into(),
            self.devices(Placement::EveryGpu),
            "f32".into(),
        );
        match super::super::doctor::nccl_bus_bandwidth(&self.gpus, deadline) {
            Ok(gbs) => {
                result.dpt_tui = Side { status: Status::Ok, reason: None, figures: None };
                result.bus_gbs = Some(gbs);
            }
            Err(e) => result.dpt_tui = Side::unmeasured(Status::Failed, e),
        }
        result
    }
}

/// `CUDA_VISIBLE_DEVICES` for a child that is to see `gpus` (this process's CUDA indices) as
/// its own 0, 1, …: the same GPUs, as the variable this process was started with names them.
fn visible(gpus: &[usize]) -> String {
    let ours = std::env::var("CUDA_VISIBLE_DEVICES").ok().filter(|v| !v.trim().is_empty());
    let name = |g: usize| match &ours {
        Some(v) => v.split(',').nth(g).map_or_else(|| g.to_string(), |s| s.trim().to_owned()),
        None => g.to_string(),
    };
    gpus.iter().map(|&g| name(g)).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_sees_the_bench_gpus_as_this_process_names_them() {
        if std::env::var_os("CUDA_VISIBLE_DEVICES").is_none() {
            assert_eq!(visible(&[2, 3]), "2,3");
            assert_eq!(visible(&[1]), "1");
        }
    }
}
