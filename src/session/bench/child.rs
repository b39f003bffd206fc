//! One side of a case as a process of its own: this binary training headless, or the Python's
//! plain loop. A process of its own gives each case its own deadline (the process group is
//! killed when it passes, and the case is `timed out`), its own CUDA context and peak memory,
//! and keeps a failure (out of memory, a NCCL error) from reaching the other cases.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use dpt_tui::record::{Record, StepStats, Summary};

/// How a side of a case ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Ended {
    /// It finished, with what it printed on stdout.
    Done {
        #[serde(skip)]
        stdout: String,
    },
    /// It failed: its last line of error output, or the exit status; `code`: its exit code
    /// (none when a signal ended it).
    Failed { reason: String, code: Option<i32> },
    /// It ran past its deadline and was killed.
    TimedOut { after_s: f64 },
    /// The bench was asked to stop (`signal`): the side was stopped with its process group.
    Interrupted { signal: i32 },
}

/// How often a running side is looked at; a case's deadline is seconds to minutes.
const POLL: Duration = Duration::from_millis(100);

/// How long a side past its deadline has to end after SIGTERM (torchrun stops its workers, a
/// dpt-tui run stops after its step) before its process group is killed.
const GRACE: Duration = Duration::from_secs(10);

/// Runs `cmd` until it ends, `deadline` passes, or `stop` holds a signal's number (the bench
/// was asked to stop), its output in `log_stem`.out and .err.
pub fn run(mut cmd: Command, deadline: Duration, stop: &AtomicUsize, log_stem: &Path) -> Ended {
    let open = |ext: &str| std::fs::File::create(log_stem.with_extension(ext));
    let (out, err) = match (open("out"), open("err")) {
        (Ok(o), Ok(e)) => (o, e),
        (Err(e), _) | (_, Err(e)) => {
            return Ended::Failed { reason: format!("cannot write its log: {e}"), code: None }
        }
    };
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let t0 = Instant::now();
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return Ended::Failed { reason: format!("cannot start {:?}: {e}", cmd.get_program()), code: None }
        }
    };
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if t0.elapsed() >= deadline => {
                let after_s = t0.elapsed().as_secs_f64();
                end(&mut child);
                return Ended::TimedOut { after_s };
            }
            Ok(None) if stop.load(Ordering::SeqCst) != 0 => {
                end(&mut child);
                return Ended::Interrupted { signal: stop.load(Ordering::SeqCst) as i32 };
            }
            Ok(None) => std::thread::sleep(POLL),
            Err(e) => return Ended::Failed { reason: format!("lost the process: {e}"), code: None },
        }
    };
    let stdout = std::fs::read_to_string(log_stem.with_extension("out")).unwrap_or_default();
    if status.success() {
        return Ended::Done { stdout };
    }
    let stderr = std::fs::read_to_string(log_stem.with_extension("err")).unwrap_or_default();
    Ended::Failed {
        reason: last_error_line(&stderr).unwrap_or_else(|| format!("exited with {status}")),
        code: status.code(),
    }
}

/// Ends a side past its deadline or a stopped bench's: SIGTERM to its process group, then
/// SIGKILL after [`GRACE`].
fn end(child: &mut std::process::Child) {
    let _ = dpt_tui::sys::terminate_process_group(child.id());
    let t0 = Instant::now();
    while t0.elapsed() < GRACE {
        if matches!(child.try_wait(), Ok(Some(_)) | Err(_)) {
            break;
        }
        std::thread::sleep(POLL);
    }
    // Whatever of the group is left (the child itself, or what it started and left behind).
    let _ = dpt_tui::sys::kill_process_group(child.id());
    let _ = child.wait();
}

/// The line of a failed process's error output that says why: dpt-tui's own failure line,
/// else the last one that names an error (PyTorch's), else the last one.
fn last_error_line(stderr: &str) -> Option<String> {
    let lines: Vec<&str> = stderr.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let named = || {
        lines.iter().rev().find(|l| l.contains("Error") || l.contains("error") || l.contains("out of memory"))
    };
    let line = dpt_tui::said_error(stderr).or_else(|| named().or(lines.last()).copied())?;
    Some(line.chars().take(300).collect())
}

/// The figures of a dpt-tui run, from its record.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunFigures {
    pub samples_per_sec: f64,
    pub ms_per_step: f64,
    /// Where a timed step's time went, in ms (slowest replica for data and compute).
    pub data_ms: f64,
    pub compute_ms: f64,
    pub allreduce_ms: f64,
    pub update_ms: f64,
    /// The GPUs' peak allocated memory, or the process's peak resident memory on the CPU.
    pub peak_mib: Option<f64>,
    /// One sample's forward FLOPs, as the run counted them.
    pub flops_per_sample: Option<f64>,
}

/// The steady figures of a run: its report windows after the first (the warm-up: cuDNN's
/// algorithm search, the allocator's growth), weighted by their steps.
pub fn run_figures(records: &[Record], batch: usize) -> Option<RunFigures> {
    let mut windows: Vec<&StepStats> = records
        .iter()
        .filter_map(|r| if let Record::Step(s) = r { Some(s.as_ref()) } else { None })
        .collect();
    let summary: Option<&Summary> =
        records.iter().rev().find_map(|r| if let Record::Summary(s) = r { Some(s.as_ref()) } else { None });
    let mut before = windows.first()?.global_step;
    if windows.len() > 1 {
        windows.remove(0);
    } else {
        before = 0;
    }
    let (mut samples, mut seconds, mut timed) = (0.0, 0.0, 0.0);
    let mut split = [0.0f64; 4];
    for w in &windows {
        let steps = w.global_step.saturating_sub(before) as f64;
        before = w.global_step;
        if w.samples_per_sec > 0.0 {
            samples += steps * batch as f64;
            seconds += steps * batch as f64 / w.samples_per_sec;
        }
        let n = w.timed_steps.unwrap_or(0) as f64;
        timed += n;
        let t = &w.timing;
        for (s, v) in split.iter_mut().zip([t.data, t.compute, t.allreduce, t.update]) {
            *s += v * n;
        }
    }
    if seconds <= 0.0 {
        return None;
    }
    let per = |x: f64| if timed > 0.0 { 1e3 * x / timed } else { 0.0 };
    let peak_mib = summary.and_then(|s| match s.peak_device_mib.as_slice() {
        [] => s.peak_rss_mib,
        gpus => gpus.iter().copied().reduce(f64::max),
    });
    Some(RunFigures {
        samples_per_sec: samples / seconds,
        ms_per_step: 1e3 * seconds / (samples / batch as f64),
        data_ms: per(split[0]),
        compute_ms: per(split[1]),
        allreduce_ms: per(split[2]),
        update_ms: per(split[3]),
        peak_mib,
        flops_per_sample: summary.and_then(|s| s.flops_per_sample),
    })
}

/// The figures the PyTorch side prints as its last JSON line.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct TorchFigures {
    pub samples_per_sec: f64,
    pub ms_per_step: f64,
    #[serde(default)]
    pub peak_mib: Option<f64>,
    /// One sample's forward FLOPs as FlopCounterMode counts them.
    #[serde(default)]
    pub flops_per_sample: Option<f64>,
}

/// The PyTorch side's figures from its output.
pub fn torch_figures(stdout: &str) -> Result<TorchFigures, String> {
    let line = stdout.lines().rev().find(|l| l.trim_start().starts_with('{'));
    let line = line.ok_or("the PyTorch loop printed no figures")?;
    serde_json::from_str(line).map_err(|e| format!("the PyTorch loop's figures do not read: {e}"))
}

/// A dpt-tui run's record, read back from its run directory.
pub fn records(run_dir: &Path) -> Result<Vec<Record>, String> {
    dpt_tui::record::file::read_records(run_dir).map_err(|e| format!("its record does not read: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use dpt_tui::record::StepTiming;

    fn window(global_step: usize, samples_per_sec: f64, timed: usize, compute: f64) -> Record {
        Record::Step(Box::new(StepStats {
            global_step,
            samples_per_sec,
            timed_steps: Some(timed),
            timing: StepTiming { data: 0.001, compute, allreduce: 0.0, update: 0.002 },
            ..StepStats::default()
        }))
    }

    #[test]
    fn the_first_window_is_warm_up_and_the_rest_are_weighted_by_their_steps() {
        // Window 1 (steps 1-10) is slow; then 10 steps at 1000/s and 20 at 2000/s, batch 100.
        let records = [window(10, 10.0, 5, 1.0), window(20, 1000.0, 5, 0.08), window(40, 2000.0, 10, 0.04)];
        let f = run_figures(&records, 100).expect("figures");
        // 3000 samples in 1 + 1 seconds.
        assert!((f.samples_per_sec - 1500.0).abs() < 1e-9, "{}", f.samples_per_sec);
        assert!((f.ms_per_step - 1e3 * 2.0 / 30.0).abs() < 1e-9);
        // Compute: (0.08 * 5 + 0.04 * 10) / 15 steps.
        assert!((f.compute_ms - 1e3 * 0.8 / 15.0).abs() < 1e-9, "{}", f.compute_ms);
        assert_eq!(f.peak_mib, None, "no summary");
    }

    #[test]
    fn a_failed_side_is_said_by_its_error_line() {
        let stderr = "loading\nTraceback (most recent call last):\n  File x\ntorch.OutOfMemoryError: CUDA out of memory. Tried\n";
        assert_eq!(
            last_error_line(stderr).as_deref(),
            Some("torch.OutOfMemoryError: CUDA out of memory. Tried")
        );
        assert_eq!(
            last_error_line("dpt-tui: --precision bf16 needs a GPU\n").as_deref(),
            Some("--precision bf16 needs a GPU")
        );
        assert_eq!(last_error_line(""), None);
    }

    /// Whether process `pid` is gone (or a zombie) within a few seconds: SIGKILL is delivered,
    /// not awaited, and the process is reaped by whoever adopted it.
    fn gone_soon(pid: &str) -> bool {
        let alive = || {
            std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()))
                .is_ok_and(|stat| !stat.contains(") Z") && !stat.contains(") X"))
        };
        let t0 = Instant::now();
        while alive() && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
        }
        !alive()
    }

    #[test]
    fn a_side_past_its_deadline_is_killed_with_what_it_started() {
        let dir = tempfile::tempdir().expect("temp");
        let mut cmd = Command::new("sh");
        // A side that ignores SIGTERM, with a child of its own that ignores it too: the group
        // is killed after the grace.
        cmd.args(["-c", "trap '' TERM; sh -c \"trap '' TERM; sleep 60\" & echo $! > kid; wait"]);
        cmd.current_dir(dir.path());
        let t0 = Instant::now();
        let go = AtomicUsize::new(0);
        let ended = run(cmd, Duration::from_millis(300), &go, &dir.path().join("side"));
        assert!(matches!(ended, Ended::TimedOut { after_s } if after_s < 5.0), "{ended:?}");
        assert!(t0.elapsed() >= GRACE, "SIGTERM first, then the grace");
        let kid = std::fs::read_to_string(dir.path().join("kid")).expect("the child's pid");
        assert!(gone_soon(&kid), "what the side started is gone too");
        let mut ok = Command::new("sh");
        ok.args(["-c", "echo '{\"samples_per_sec\": 5, \"ms_per_step\": 2}'"]);
        let Ended::Done { stdout } = run(ok, Duration::from_secs(20), &go, &dir.path().join("ok")) else {
            panic!("it ends")
        };
        assert_eq!(torch_figures(&stdout).map(|f| f.samples_per_sec), Ok(5.0));
        let mut bad = Command::new("sh");
        bad.args(["-c", "echo 'RuntimeError: NCCL error' >&2; exit 3"]);
        let ended = run(bad, Duration::from_secs(20), &go, &dir.path().join("bad"));
        assert_eq!(ended, Ended::Failed { reason: "RuntimeError: NCCL error".into(), code: Some(3) });
    }

    #[test]
    fn a_stopped_bench_ends_the_running_side_with_its_process_group() {
        let dir = tempfile::tempdir().expect("temp");
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "sleep 60 & echo $! > kid; wait"]);
        cmd.current_dir(dir.path());
        // The bench's SIGINT, as its handler stores it, once the side has started its child.
        let stop = AtomicUsize::new(0);
        let t0 = Instant::now();
        let ended = std::thread::scope(|s| {
            s.spawn(|| {
                while std::fs::read_to_string(dir.path().join("kid")).unwrap_or_default().trim().is_empty() {
                    std::thread::sleep(Duration::from_millis(10));
                }
                stop.store(libc::SIGINT as usize, Ordering::SeqCst);
            });
            run(cmd, Duration::from_secs(60), &stop, &dir.path().join("side"))
        });
        assert_eq!(ended, Ended::Interrupted { signal: libc::SIGINT });
        assert!(t0.elapsed() < Duration::from_secs(20), "not run to its deadline");
        let kid = std::fs::read_to_string(dir.path().join("kid")).unwrap_or_default();
        assert!(!kid.trim().is_empty() && gone_soon(&kid), "what the side started is gone too");
    }
}
