//! `dpt-tui bench` end to end on the CPU: every case at its CPU size against the PyTorch loop of
//! the set-up's Python, within its budget, its three outputs, dpt-tui's FLOP count equal to
//! FlopCounterMode's on every model both sides ran; and its refusals of bad input. A binary of
//! its own: the bench measures speed, so it must not share the cores with other tests.

mod common;

use std::path::Path;
use std::process::Output;

use common::Dpt;
use serde_json::Value;

fn bench(args: &[&str]) -> Output {
    Dpt::new().arg("bench").args(args).scratch_runtime().output()
}

fn refused(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(stderr.starts_with("dpt-tui: "), "{stderr}");
    stderr
}

#[test]
fn bad_input_is_refused_in_one_line_before_any_case_runs() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = out.to_str().unwrap();
    let run = |args: &[&str]| bench(args);
    let e = refused(&run(&["--devices", "cpu", "--cases", "lenet,vgg", "--out", o]));
    assert!(e.contains("unknown bench case 'vgg'; use lenet, resnet18"), "{e}");
    let e = refused(&run(&["--devices", "cpu", "--budget", "30s", "--out", o]));
    assert!(e.contains("under a minute"), "{e}");
    let e = refused(&run(&["--devices", "cpu", "--cases", "allreduce", "--out", o]));
    assert!(e.contains("needs two GPUs"), "{e}");
    let blocker = dir.path().join("a-file");
    std::fs::write(&blocker, "").unwrap();
    let e = refused(&run(&["--devices", "cpu", "--out", blocker.join("x").to_str().unwrap()]));
    assert!(e.contains("cannot be written"), "{e}");
    let no_torch = dir.path().join("python-without-torch");
    std::fs::write(&no_torch, "#!/bin/sh\necho 'No module named torch' >&2\nexit 1\n").unwrap();
    std::process::Command::new("chmod").arg("+x").arg(&no_torch).status().unwrap();
    let e = refused(&run(&["--devices", "cpu", "--python", no_torch.to_str().unwrap(), "--out", o]));
    assert!(e.contains("has no torch"), "{e}");
    let other = dir.path().join("python-2.9");
    std::fs::write(&other, "#!/bin/sh\necho 2.9.1+cu128\n").unwrap();
    std::process::Command::new("chmod").arg("+x").arg(&other).status().unwrap();
    let e = refused(&run(&["--devices", "cpu", "--python", other.to_str().unwrap(), "--out", o]));
    assert!(e.contains("torch 2.9.1+cu128") && e.contains("same release"), "{e}");
    assert!(!out.join("bench.json").exists(), "nothing written for bad input");
    let e = refused(&run(&["--devices", "gpu", "--out", o]));
    assert!(e.contains("bench --devices: unknown device 'gpu'"), "{e}");
    // clap's own refusals are one line too.
    let e = refused(&run(&["--devices", "cpu", "--budget", "soon", "--out", o]));
    assert!(e.contains("invalid value 'soon' for '--budget <TIME>'") && e.contains("8m or 1h"), "{e}");
    let e = refused(&run(&["--devices", "cpu", "--python", "", "--out", o]));
    assert!(e.contains("--python is empty"), "{e}");
    let e = refused(&run(&["--devices", "cpu", "--data", dir.path().to_str().unwrap(), "--out", o]));
    assert!(e.contains("no IDX files"), "{e}");
}

fn case<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["cases"].as_array().unwrap().iter().find(|c| c["case"] == name).unwrap_or_else(|| panic!("{name}"))
}

#[test]
fn a_cpu_bench_runs_every_case_against_pytorch_within_its_budget() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bench");
    let python = common::python();
    let t0 = std::time::Instant::now();
    let result = bench(&["--devices", "cpu", "--python", &python, "--out", out.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&result.stdout).into_owned();
    let text = format!("{stdout}{}", String::from_utf8_lossy(&result.stderr));
    assert!(result.status.success(), "{text}");
    // The default budget, 5 minutes: the cases take about one on an idle 2-core machine.
    assert!(t0.elapsed().as_secs() < 330, "within the budget and its ending: {:?}", t0.elapsed());
    assert!(stdout.contains("ms/step = data + fwd/bwd + allreduce + update"), "{text}");
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("bench.json")).unwrap()).unwrap();
    let names: Vec<&str> =
        report["cases"].as_array().unwrap().iter().map(|c| c["case"].as_str().unwrap()).collect();
    assert_eq!(names, ["lenet", "resnet18", "resnet18-bf16", "mnist-net", "gpt", "gpt-bf16", "two-replicas"]);
    assert_eq!(report["machine"]["devices"], serde_json::json!(["cpu"]));
    assert!(report["machine"]["torch"].as_str().unwrap().starts_with("2.11"));
    for name in ["lenet", "resnet18", "mnist-net", "gpt", "two-replicas"] {
        let c = case(&report, name);
        assert_eq!(c["dpt_tui"]["status"], "ok", "{name}: {c}");
        assert_eq!(c["pytorch"]["status"], "ok", "{name}: {c}");
        let ratio = c["ratio"].as_f64().unwrap();
        assert!(ratio > 0.1 && ratio < 10.0, "{name}: {ratio}");
        let f = &c["dpt_tui"]["figures"];
        assert!(f["samples_per_sec"].as_f64().unwrap() > 0.0);
        let split: f64 = ["data_ms", "compute_ms", "allreduce_ms", "update_ms"]
            .iter()
            .map(|k| f[k].as_f64().unwrap())
            .sum();
        assert!(split > 0.0 && split <= 1.5 * f["ms_per_step"].as_f64().unwrap(), "{name}: {f}");
        assert!(f["peak_mib"].as_f64().unwrap() > 0.0, "peak memory: {f}");
        assert!(c["model_flops"].as_f64().unwrap() > 0.0, "{name}: model FLOP/s");
        assert!(c.get("mfu").is_none(), "a CPU has no peak in the table");
        // One model's FLOPs, counted by dpt-tui from its own operations and by PyTorch's
        // FlopCounterMode on the same model and sample.
        let check = c["flops_vs_flop_counter"].as_f64().unwrap();
        assert!((check - 1.0).abs() < 1e-9, "{name}: dpt-tui's count / FlopCounterMode's = {check}");
    }
    let gpt = case(&report, "gpt");
    assert_eq!(gpt["tokens_per_sample"], 128);
    // The GPT's second reference: PyTorch's loop over the TorchScript file dpt-tui trains.
    assert_eq!(gpt["pytorch_script"]["status"], "ok", "{gpt}");
    let script_ratio = gpt["script_ratio"].as_f64().unwrap();
    assert!(script_ratio > 0.1 && script_ratio < 10.0, "{script_ratio}");
    assert!(case(&report, "lenet").get("pytorch_script").is_none(), "a GPT's reference only");
    assert!(Path::new(&out.join("runs/gpt-pytorch-script.out")).is_file(), "its log kept");
    assert!(stdout.contains("tokens/s"), "{stdout}");
    // A CPU without bf16 instructions emulates bf16 tens of times slower than f32: the bench
    // leaves those cases out, saying why, and gives their time to the others.
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let native_bf16 = cpuinfo
        .lines()
        .filter(|l| l.starts_with("flags") || l.starts_with("Features"))
        .any(|l| l.split_whitespace().any(|f| ["avx512_bf16", "amx_bf16", "bf16"].contains(&f)));
    for name in ["resnet18-bf16", "gpt-bf16"] {
        let c = case(&report, name);
        if native_bf16 {
            // A TorchScript GPT trains in bf16 under autocast as the built-in models do.
            assert_eq!(c["dpt_tui"]["status"], "ok", "{name}: {c}");
        } else {
            for side in ["dpt_tui", "pytorch"] {
                assert_eq!(c[side]["status"], "unsupported", "{name}: {c}");
                assert!(c[side]["reason"].as_str().unwrap().contains("no bf16 instructions"), "{c}");
            }
        }
    }
    let md = std::fs::read_to_string(out.join("bench.md")).unwrap();
    assert!(md.contains("| case | devices | precision | batch | dpt-tui |"), "{md}");
    assert!(md.contains("| lenet | cpu | f32 | 256 |"), "{md}");
    assert!(Path::new(&out.join("runs/lenet/metrics.jsonl")).is_file(), "each run's record kept for `show`");
    let again = bench(&["--devices", "cpu", "--cases", "lenet", "--out", out.to_str().unwrap()]);
    assert!(refused(&again).contains("already holds a bench"), "an earlier bench is never written over");
}

/// The processes whose command line names `needle` (a path), this test's own left out.
fn processes_naming(needle: &str) -> Vec<String> {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|pid| pid.chars().all(|c| c.is_ascii_digit()) && *pid != me)
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let alive = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|stat| !stat.contains(") Z") && !stat.contains(") X"));
            alive && String::from_utf8_lossy(&cmdline).contains(needle)
        })
        .collect()
}

/// Waits up to a minute for `done`.
fn wait_until(what: &str, done: impl Fn() -> bool) {
    let t0 = std::time::Instant::now();
    while !done() {
        assert!(t0.elapsed().as_secs() < 60, "waited a minute for {what}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn sigint_and_sigterm_stop_the_running_case_and_keep_what_was_measured() {
    let python = common::python();
    for (signal, name, code) in [(libc::SIGINT, "SIGINT", 130), (libc::SIGTERM, "SIGTERM", 143)] {
        let dir = tempfile::tempdir().unwrap();
        // The bench's scratch folder is made under TMPDIR: here, where the test can look.
        let tmp = dir.path().join("tmp");
        std::fs::create_dir_all(&tmp).unwrap();
        let out = dir.path().join("out");
        let args = ["--devices", "cpu", "--cases", "lenet,mnist-net", "--python", &python];
        let child = Dpt::new()
            .arg("bench")
            .args(args)
            .arg("--out")
            .arg(&out)
            .env("TMPDIR", &tmp)
            .scratch_runtime()
            .piped()
            .spawn();
        let tmp_text = tmp.to_str().unwrap().to_owned();
        // A case's side is running: its log is open and a process of it names the scratch.
        wait_until("the first case to run", || {
            out.join("runs/lenet-dpt-tui.out").exists() && !processes_naming(&tmp_text).is_empty()
        });
        // SAFETY: a signal to the bench's own process, which this test started and has not reaped.
        assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
        let ended = child.wait_with_output().unwrap();
        let text =
            format!("{}{}", String::from_utf8_lossy(&ended.stdout), String::from_utf8_lossy(&ended.stderr));
        assert_eq!(ended.status.code(), Some(code), "{name}: {text}");
        // What was measured is kept, marked; the second case never began.
        let report: Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("bench.json")).unwrap()).unwrap();
        assert_eq!(report["interrupted"], name, "{report}");
        let cases = report["cases"].as_array().unwrap();
        assert_eq!(cases.len(), 1, "{report}");
        let sides = [&cases[0]["dpt_tui"]["status"], &cases[0]["pytorch"]["status"]];
        assert!(sides.iter().any(|s| **s == "interrupted"), "{sides:?}");
        let md = std::fs::read_to_string(out.join("bench.md")).unwrap();
        assert!(md.contains(&format!("interrupted by {name} after 1 case(s)")), "{md}");
        // Nothing of the case is left running, and the scratch folder is gone.
        wait_until("the case's processes to end", || processes_naming(&tmp_text).is_empty());
        let left: Vec<_> = std::fs::read_dir(&tmp)
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with("dpt-bench-"))
            .map(|e| e.path())
            .collect();
        assert!(left.is_empty(), "{name}: the scratch folder is left: {left:?}");
    }
}
