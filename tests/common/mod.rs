//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;

use dpt_tui::data::Dataset;

/// The Fashion-MNIST subset shipped in `assets/` (2,000 train, 500 test images).
pub fn subset_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/fashion-mnist-subset")
}

/// The shipped subset, cut to `train` and `test` samples.
pub fn subset(train: usize, test: usize) -> Arc<Dataset> {
    let mut data = Dataset::load(&subset_dir()).expect("the shipped subset loads");
    data.train.truncate(train);
    data.test.truncate(test);
    Arc::new(data)
}

mod launch;
pub mod pty;
pub mod steering;

#[allow(unused_imports)] // each test binary uses its own share
pub use launch::{ok, until, until_record, within, Dpt, Polled, BIN};

/// The weights a run saved (`model.safetensors`), sorted by name.
pub fn weights(run: &std::path::Path) -> Vec<(String, tch::Tensor)> {
    let mut w = tch::Tensor::read_safetensors(run.join("model.safetensors")).unwrap();
    w.sort_by(|a, b| a.0.cmp(&b.0));
    w
}

/// Sends `signal` (e.g. "INT") to process `pid`.
pub fn kill(pid: u32, signal: &str) {
    let status =
        std::process::Command::new("kill").args([format!("-{signal}"), pid.to_string()]).status().unwrap();
    assert!(status.success(), "kill -{signal} {pid}");
}

/// The records of `run`'s metrics.jsonl, every line one.
pub fn records(run: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The records of `run/metrics.jsonl` once its last record is the run's summary (a background
/// job writes it after the test's own process has gone); panics after `timeout`.
pub fn wait_for_summary(run: &std::path::Path, timeout: std::time::Duration) -> Vec<serde_json::Value> {
    until(timeout, &format!("summary in {}", run.display()), || {
        let records: Vec<serde_json::Value> = std::fs::read_to_string(run.join("metrics.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        records.last().is_some_and(|r| r["kind"] == "summary").then_some(records)
    })
}

/// Starts `dpt-tui` training on the shipped subset in a `cols`×`rows` pseudo-terminal, with its
/// run directory at `run` and `flags` added.
pub fn train_in_pty(
    run: &std::path::Path,
    flags: &[&str],
    cols: u16,
    rows: u16,
    env: &[(&str, &str)],
) -> pty::PtyRun {
    let data = subset_dir();
    let mut args = vec!["--data", data.to_str().unwrap(), "--run-dir", run.to_str().unwrap()];
    args.extend_from_slice(flags);
    pty::PtyRun::spawn(&args, cols, rows, env)
}

/// The largest relative difference between two runs' final tensors, by name.
pub fn max_relative_difference(a: &dpt_tui::engine::Outcome, b: &dpt_tui::engine::Outcome) -> f64 {
    a.final_params
        .iter()
        .zip(&b.final_params)
        .map(|((na, ta), (nb, tb))| {
            assert_eq!(na, nb);
            (ta - tb).norm().double_value(&[]) / ta.norm().double_value(&[]).max(1e-12)
        })
        .fold(0.0, f64::max)
}

/// The set-up's Python (the virtualenv with torch), or `$PYTHON`.
pub fn python() -> String {
    std::env::var("PYTHON")
        .or_else(|_| std::env::var("DPT_VENV").map(|v| format!("{v}/bin/python")))
        .unwrap_or_else(|_| "python3".to_owned())
}

/// The GPT's script, which the bench ships (`assets/pytorch/gpt.py`: nanoGPT's architecture, its
/// export and PyTorch's loops for it), named as [`script`] takes a name.
pub const GPT: &str = "../../assets/pytorch/gpt.py";

/// A script of `tests/scripts/` (`client/pure_loop.py`), or one the product ships by its path
/// from there ([`GPT`]).
pub fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/scripts").join(name)
}

/// What `python tests/scripts/NAME ARGS` gives (exit status, stdout, stderr), run by one Python
/// process per test binary (`tests/scripts/serve.py`), so torch is imported once per binary
/// instead of once per script. Tests asking at once take turns.
pub fn run_script<S: AsRef<std::ffi::OsStr>>(name: &str, args: &[S]) -> std::process::Output {
    use std::os::unix::process::ExitStatusExt;
    static SERVER: std::sync::Mutex<Option<ScriptServer>> = std::sync::Mutex::new(None);
    let mut server = SERVER.lock().unwrap_or_else(|e| e.into_inner());
    let args: Vec<String> = args.iter().map(|a| a.as_ref().to_string_lossy().into_owned()).collect();
    let request = serde_json::json!({ "script": script(name), "args": args });
    // A server that died (a script that crashed the interpreter) is started again, once.
    for _ in 0..2 {
        let reply = server.get_or_insert_with(ScriptServer::start).ask(&request);
        match reply {
            Some(r) => {
                let text = |k: &str| r[k].as_str().unwrap_or_default().as_bytes().to_vec();
                let code = r["code"].as_i64().unwrap_or(1) as i32;
                return std::process::Output {
                    status: std::process::ExitStatus::from_raw((code & 0xff) << 8),
                    stdout: text("stdout"),
                    stderr: text("stderr"),
                };
            }
            None => *server = None,
        }
    }
    panic!("tests/scripts/serve.py died running {name} {args:?} (run the script alone to see why)");
}

/// The Python process of [`run_script`].
struct ScriptServer {
    _child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl ScriptServer {
    fn start() -> Self {
        use std::process::Stdio;
        let mut child = std::process::Command::new(python())
            .arg(script("serve.py"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the virtualenv's python runs (bash .ci/setup)");
        let stdin = child.stdin.take().unwrap();
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        ScriptServer { _child: child, stdin, stdout }
    }

    /// The reply to `request`, or `None` when the process is gone.
    fn ask(&mut self, request: &serde_json::Value) -> Option<serde_json::Value> {
        use std::io::{BufRead, Write};
        writeln!(self.stdin, "{request}").ok()?;
        self.stdin.flush().ok()?;
        let mut line = String::new();
        (self.stdout.read_line(&mut line).ok()? > 0).then_some(())?;
        serde_json::from_str(&line).ok()
    }
}

/// Writes TorchScript model `kind` (see tests/scripts/make_model.py) for images of `channels`
/// channels into `dir`, named `<kind><channels>.pt`.
pub fn make_model(kind: &str, channels: usize, dir: &std::path::Path) -> PathBuf {
    let out = dir.join(format!("{kind}{channels}.pt"));
    made_by_python(&out, "make_model.py", &[kind, OUT, &channels.to_string()]);
    out
}

/// Where [`made_by_python`] puts the output file among its arguments.
pub const OUT: &str = "{out}";

/// Writes `out` with `tests/scripts/<name> ARGS` ([`OUT`] in `args` standing for the file),
/// once per test build: the scripts seed what they draw, so the same script and arguments make
/// the same file, and a later test (of this binary or another) copies it from
/// `target/tmp/fixtures` instead of starting Python and torch again (about 2.5 s of CPU each).
pub fn made_by_python(out: &std::path::Path, name: &str, args: &[&str]) {
    let code = std::fs::read(script(name)).expect("the script reads");
    let key = dpt_tui::data::fnv([code.as_slice(), python().as_bytes(), args.join("\0").as_bytes()].concat());
    let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fixtures");
    let kept = cache.join(format!("{key:016x}-{}", out.file_name().unwrap().to_string_lossy()));
    if !kept.exists() {
        std::fs::create_dir_all(&cache).unwrap();
        // Written under a name of this thread's own, then renamed: tests of one binary asking
        // for the same file at once each make it, and the one kept is whole.
        let part =
            cache.join(format!("{key:016x}.{}.{:?}.part", std::process::id(), std::thread::current().id()));
        let args: Vec<&str> =
            args.iter().map(|a| if *a == OUT { part.to_str().unwrap() } else { a }).collect();
        let made = run_script(name, &args);
        assert!(made.status.success(), "{name} {args:?}: {}", String::from_utf8_lossy(&made.stderr));
        std::fs::rename(&part, &kept).unwrap();
    }
    std::fs::copy(&kept, out).unwrap();
}

/// Writes `split` (1x28x28 bytes) as WebDataset shards of `per_shard` samples into `dir`:
/// `<key>.png` and `<key>.cls` per sample.
pub fn write_shards(dir: &std::path::Path, split: &dpt_tui::data::Split, per_shard: usize) {
    let dpt_tui::data::Pixels::Bytes(bytes) = &split.images else { panic!("byte images expected") };
    std::fs::create_dir_all(dir).unwrap();
    for (s, start) in (0..split.len()).step_by(per_shard).enumerate() {
        let file = std::fs::File::create(dir.join(format!("shard-{s:04}.tar"))).unwrap();
        let mut tar = tar::Builder::new(file);
        for i in start..(start + per_shard).min(split.len()) {
            let gray = image::GrayImage::from_raw(28, 28, bytes[i * 784..(i + 1) * 784].to_vec()).unwrap();
            let mut png = Vec::new();
            gray.write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png).unwrap();
            let class = split.labels[i].to_string().into_bytes();
            for (name, data) in [(format!("{i:06}.png"), png), (format!("{i:06}.cls"), class)] {
                let mut header = tar::Header::new_gnu();
                header.set_size(data.len() as u64);
                header.set_mode(0o644);
                header.set_cksum();
                tar.append_data(&mut header, &name, data.as_slice()).unwrap();
            }
        }
        tar.finish().unwrap();
    }
}

/// Writes `train` and `test` as CIFAR-10 binary batches into `dir`: five training batches and a
/// test batch of records, each the label byte then `pixels(split, i)` (3×32×32 planar bytes).
pub fn write_cifar(
    dir: &std::path::Path,
    (train, test): (&dpt_tui::data::Split, &dpt_tui::data::Split),
    pixels: impl Fn(&dpt_tui::data::Split, usize) -> Vec<u8>,
) {
    std::fs::create_dir_all(dir).unwrap();
    let record = |s: &dpt_tui::data::Split, i: usize| [vec![s.labels[i] as u8], pixels(s, i)].concat();
    let per = train.len().div_ceil(5);
    for b in 0..5 {
        let recs: Vec<u8> =
            (b * per..((b + 1) * per).min(train.len())).flat_map(|i| record(train, i)).collect();
        std::fs::write(dir.join(format!("data_batch_{}.bin", b + 1)), recs).unwrap();
    }
    let recs: Vec<u8> = (0..test.len()).flat_map(|i| record(test, i)).collect();
    std::fs::write(dir.join("test_batch.bin"), recs).unwrap();
}

/// A free TCP port on localhost (for a rendezvous).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The binary's flags for a short headless run on 600 images of the shipped subset (batches of
/// 100, momentum 0.9, weight decay 0.001, a report every 2 steps), then `extra`.
pub fn training(extra: &[&str]) -> Vec<String> {
    let data = subset_dir();
    let mut v: Vec<String> =
        ["--data", data.to_str().unwrap(), "--train-limit", "600", "--test-limit", "200"]
            .into_iter()
            .chain([
                "--batch-size",
                "100",
                "--log-every",
                "2",
                "--momentum",
                "0.9",
                "--weight-decay",
                "0.001",
                "--headless",
            ])
            .map(String::from)
            .collect();
    v.extend(extra.iter().map(|s| (*s).to_owned()));
    v
}

/// Largest difference relative to the largest magnitude, over tensors paired by name.
pub fn rel_diff(a: &[(String, tch::Tensor)], b: &[(String, tch::Tensor)]) -> f64 {
    assert_eq!(a.len(), b.len());
    let (mut diff, mut scale) = (0.0f64, 0.0f64);
    for ((na, ta), (nb, tb)) in a.iter().zip(b) {
        assert_eq!(na, nb);
        diff = diff.max((ta - tb).abs().max().double_value(&[]));
        scale = scale.max(ta.abs().max().double_value(&[]));
    }
    diff / scale.max(1e-12)
}

/// The largest difference between dpt-tui's parameters and PyTorch's, relative to the largest
/// parameter change PyTorch made (so a wrong update cannot hide behind the initial weights).
pub fn relative_error(
    ours: &dpt_tui::engine::Outcome,
    theirs: &std::collections::HashMap<String, Vec<f64>>,
    start: &dpt_tui::model::script::ScriptModel,
) -> f64 {
    let mut offset = 0;
    let (mut worst_diff, mut largest_move) = (0.0f64, 0.0f64);
    let initial_params: Vec<f32> = Vec::try_from(&start.initial_values().expect("the model file").0).unwrap();
    for spec in &start.params {
        let n = spec.numel() as usize;
        let initial = &initial_params[offset..offset + n];
        offset += n;
        let (_, t) = ours.final_params.iter().find(|(name, _)| *name == spec.name).expect("trained tensor");
        let ours: Vec<f32> = Vec::try_from(&t.reshape([-1])).unwrap();
        let theirs = &theirs[&spec.name];
        for ((a, b), i) in ours.iter().zip(theirs).zip(initial) {
            worst_diff = worst_diff.max((*a as f64 - b).abs());
            largest_move = largest_move.max((b - *i as f64).abs());
        }
    }
    assert!(largest_move > 1e-4, "PyTorch's steps moved the weights");
    worst_diff / largest_move
}

/// Token data and the small GPT of `assets/pytorch/gpt.py` (vocabulary 64, block 16).
pub mod tokens {
    use std::path::{Path, PathBuf};

    use super::{made_by_python, GPT, OUT};

    pub const VOCAB: usize = 64;
    pub const BLOCK: usize = 16;

    pub fn make_gpt(kind: &str, dir: &Path) -> PathBuf {
        let out = dir.join(format!("gpt-{kind}.pt"));
        made_by_python(&out, GPT, &["make", OUT, &VOCAB.to_string(), &BLOCK.to_string(), kind]);
        out
    }

    pub fn write_tokens(path: &Path, tokens: &[u16]) {
        std::fs::write(path, tokens.iter().flat_map(|t| t.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
    }

    /// A token folder: `train.bin` of `train` tokens, `val.bin` of 200, each from a stream with a
    /// pattern to learn: random tokens below 32, each followed by itself plus 32 (so half the
    /// tokens follow from the one before, and a model that learns it halves its loss).
    pub fn token_dir(dir: &Path, train: usize) -> PathBuf {
        let data = dir.join("tokens");
        std::fs::create_dir_all(&data).unwrap();
        let stream = |n: usize, seed: u64| -> Vec<u16> {
            let mut x = seed;
            let mut draw = move || {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((x >> 33) % (VOCAB as u64 / 2)) as u16
            };
            (0..n.div_ceil(2))
                .flat_map(|_| {
                    let r = draw();
                    [r, r + VOCAB as u16 / 2]
                })
                .take(n)
                .collect()
        };
        write_tokens(&data.join("train.bin"), &stream(train, 1));
        write_tokens(&data.join("val.bin"), &stream(200, 2));
        data
    }
}
