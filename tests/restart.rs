//! The same command run again, as a cluster runs a job again: after `kill -9` it continues
//! from the checkpoint, after the preemption signal (which checkpoints and exits 75) too, and
//! the run ends with the weights of a straight run; a command with other settings is refused
//! and changes nothing; each restart is in the record.

use crate::common;
use common::Dpt;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdout, Output};

use serde_json::Value;

const EPOCHS: &str = "8";

fn command(run: &Path, extra: &[&str]) -> Dpt {
    let data = common::subset_dir();
    let mut c = Dpt::new();
    c.data(data)
        .args(["--train-limit", "600", "--test-limit", "100"])
        .args(["--batch-size", "100", "--epochs", EPOCHS, "--devices", "cpu:2", "--headless"])
        .run_dir(run)
        .args(extra)
        .scratch_runtime()
        .env_remove("SLURM_RESTART_COUNT")
        .env_remove("TORCHELASTIC_RESTART_COUNT");
    c
}

type Lines = std::io::Lines<BufReader<ChildStdout>>;

/// Starts `c` slowed down (every step 60 ms longer, which changes no number), and reads its
/// lines until one starts with `line`; the rest of its lines are the caller's to read.
fn start_until(mut c: Dpt, line: &str) -> (Child, Lines) {
    let mut child = c.env("DPT_INJECT_FAULT", "slow-replica=0@60").piped().spawn();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let found = lines.any(|l| l.unwrap().starts_with(line));
    if !found {
        let out = child.wait_with_output().unwrap();
        panic!("the run ended before printing '{line}': {}", text(&out));
    }
    (child, lines)
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn records(run: &Path) -> Vec<Value> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn the_same_command_continues_after_a_kill_and_a_preemption_and_ends_as_a_straight_run() {
    let tmp = tempfile::tempdir().unwrap();
    let straight = tmp.path().join("straight");
    let out = command(&straight, &[]).output();
    assert!(out.status.success(), "{}", text(&out));

    let run = tmp.path().join("run");
    // kill -9 once the checkpoint of epoch 2 exists.
    let (mut first, mut lines) = start_until(command(&run, &[]), "epoch 2/8 done");
    assert!(lines.any(|l| l.unwrap().starts_with("checkpoint written")));
    common::kill(first.id(), "KILL");
    let _ = first.wait();

    // Other settings: refused, naming them, and nothing saved is touched.
    let checkpoint = std::fs::read(run.join("checkpoint.safetensors")).unwrap();
    let out = command(&run, &["--seed", "5", "--lr", "0.3"]).output();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("lr = 0.2 in the run, 0.3 in this command") && err.contains("seed = 0 in the run, 5"),
        "{err}"
    );
    assert_eq!(std::fs::read(run.join("checkpoint.safetensors")).unwrap(), checkpoint);

    // A Slurm requeue: continues; the preemption signal checkpoints and exits 75.
    let mut requeued = command(&run, &[]);
    requeued.env("SLURM_RESTART_COUNT", "1");
    let (second, lines) = start_until(requeued, "epoch 4/8 done");
    common::kill(second.id(), "USR1");
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    let out = second.wait_with_output().unwrap();
    let said = format!("{}{}", rest.join("\n"), text(&out));
    assert_eq!(out.status.code(), Some(75), "{said}");
    assert!(said.contains("run the same command again to continue"), "{said}");

    // torchrun's restart: finishes the run.
    let mut restarted = command(&run, &[]);
    restarted.env("TORCHELASTIC_RESTART_COUNT", "2");
    let out = restarted.output();
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("continuing the run (torchrun restart 2) from step"), "{}", text(&out));

    let (a, b) = (common::weights(&straight), common::weights(&run));
    for ((n, x), (m, y)) in a.iter().zip(&b) {
        assert_eq!(n, m);
        assert!(x.equal(y), "{n} differs from the straight run's");
    }
    let recs = records(&run);
    let starts: Vec<&Value> = recs.iter().filter(|r| r["kind"] == "start").collect();
    assert_eq!(starts.len(), 3, "three attempts");
    assert!(starts[0].get("restart").is_none());
    assert_eq!(starts[1]["restart"], serde_json::json!({"by": "slurm", "count": 1}));
    assert_eq!(starts[2]["restart"], serde_json::json!({"by": "torchrun", "count": 2}));
    let reasons: Vec<&Value> = recs.iter().filter(|r| r["kind"] == "summary").map(|r| &r["reason"]).collect();
    assert_eq!(reasons, ["preempted", "completed"]);
    assert!(recs.iter().any(|r| r["kind"] == "event" && r["event"] == "preempted"));
}

#[test]
fn checkpoints_by_steps_keep_the_newest_and_each_continues_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    // 6 steps an epoch, 12 in all: checkpoints after steps 4 and 8 (mid-epoch), and the final one.
    let every = ["--epochs", "2", "--checkpoint-every", "4steps", "--keep-checkpoints", "3"];
    let mut c = command(&run, &every);
    c.args(["--model", "mnist-net"]);
    let out = c.output();
    assert!(out.status.success(), "{}", text(&out));
    let steps: Vec<u64> = records(&run)
        .iter()
        .filter(|r| r["event"] == "checkpointed")
        .map(|r| r["global_step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, [4, 8, 12]);
    let mut kept: Vec<String> = std::fs::read_dir(run.join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    kept.sort();
    assert_eq!(
        kept,
        ["step-000000004.safetensors", "step-000000008.safetensors", "step-000000012.safetensors"]
    );
    // The mid-epoch checkpoint of step 4, resumed elsewhere, ends with the same weights.
    let resumed = tmp.path().join("resumed");
    let out = Dpt::new()
        .args(["--headless", "--resume"])
        .arg(run.join("checkpoints/step-000000004.safetensors"))
        .args([
            "--data",
            common::subset_dir().to_str().unwrap(),
            "--train-limit",
            "600",
            "--test-limit",
            "100",
        ])
        .args(["--devices", "cpu:2"])
        .arg("--run-dir")
        .arg(&resumed)
        .output();
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("resumed from the checkpoint at epoch 1 step 4"), "{}", text(&out));
    for ((n, a), (m, b)) in common::weights(&run).iter().zip(&common::weights(&resumed)) {
        assert_eq!(n, m);
        assert!(a.equal(b), "{n} differs after resuming the step-4 checkpoint");
    }
    // A bad cadence is one line, exit 2.
    let out = command(&tmp.path().join("bad"), &["--checkpoint-every", "5 fortnights"]).output();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a cadence"));
}

#[test]
fn a_resume_takes_the_data_and_its_limits_from_the_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let straight = tmp.path().join("straight");
    let out = command(&straight, &["--epochs", "2", "--val-fraction", "0.2"]).output();
    assert!(out.status.success(), "{}", text(&out));
    let run = tmp.path().join("run");
    let out = command(&run, &["--epochs", "2", "--val-fraction", "0.2", "--max-steps", "5"]).output();
    assert!(out.status.success(), "{}", text(&out));
    // No data flag at all, from another folder: the checkpoint says which data and how much.
    let out = Dpt::new()
        .args(["--headless", "--resume"])
        .arg(&run)
        .dir(tmp.path())
        .env_remove("DPT_DATA")
        .scratch_runtime()
        .output();
    assert!(out.status.success(), "{}", text(&out));
    let said = text(&out);
    assert!(said.contains("480 train / 120 val / 100 test samples"), "{said}");
    for ((n, a), (m, b)) in common::weights(&straight).iter().zip(&common::weights(&run)) {
        assert_eq!(n, m);
        assert!(a.equal(b), "{n} differs from the straight run's");
    }
}

/// The shipped subset's first `n` images of `split` as 32×32 RGB PNGs in `dir/<class>/`, tinted
/// by class so each channel has a mean and std of its own.
fn write_rgb_folder(dir: &Path, split: &dpt_tui::data::Split, n: usize) {
    let dpt_tui::data::Pixels::Bytes(v) = &split.images else { panic!("the subset is bytes") };
    for i in 0..n {
        let class = dir.join(format!("class_{}", split.labels[i]));
        std::fs::create_dir_all(&class).unwrap();
        let gray = image::GrayImage::from_raw(28, 28, v[i * 784..(i + 1) * 784].to_vec()).unwrap();
        let tint = split.labels[i] as u8 * 20;
        let img = image::RgbImage::from_fn(32, 32, |x, y| {
            let g = if (2..30).contains(&x) && (2..30).contains(&y) {
                gray.get_pixel(x - 2, y - 2)[0]
            } else {
                0
            };
            image::Rgb([g, (g / 2).wrapping_add(tint), 255 - g / 3])
        });
        img.save(class.join(format!("{i:05}.png"))).unwrap();
    }
}

#[test]
fn an_image_folder_without_normalize_continues_by_the_same_command_as_a_straight_run() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("images");
    let subset = common::subset(300, 60);
    write_rgb_folder(&data.join("train"), &subset.train, 300);
    write_rgb_folder(&data.join("test"), &subset.test, 60);
    let model = common::make_model("mlp", 3, tmp.path());
    let command = |run: &Path, extra: &[&str]| {
        let mut c = Dpt::new();
        c.args(["--headless", "--model", model.to_str().unwrap(), "--data", data.to_str().unwrap()])
            .args(["--batch-size", "50", "--epochs", "2", "--devices", "cpu:2", "--lr", "0.05"])
            .run_dir(run)
            .args(extra)
            .scratch_runtime()
            .env_remove("SLURM_RESTART_COUNT")
            .env_remove("TORCHELASTIC_RESTART_COUNT");
        c.output()
    };
    let straight = tmp.path().join("straight");
    let out = command(&straight, &[]);
    assert!(out.status.success(), "{}", text(&out));
    // Stopped after 4 of its 12 steps (mid-epoch), then the same command continues it.
    let run = tmp.path().join("run");
    let out = command(&run, &["--max-steps", "4"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = command(&run, &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("continuing the run"), "{}", text(&out));
    // The normalization as each start record writes it, to the last digit (compared as text:
    // a parser that rounds would hide a value one bit off).
    let measured = |run: &Path| -> Vec<String> {
        let text = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
        text.lines()
            .filter(|l| l.contains("\"kind\":\"start\""))
            .map(|l| {
                let at = l.find("\"normalize\":").expect("the start record says its normalization");
                l[at..at + l[at..].find('}').unwrap()].to_owned()
            })
            .collect()
    };
    let (first, continued) = (measured(&straight), measured(&run));
    assert_eq!(continued.len(), 2, "two attempts");
    assert!(
        continued.iter().all(|n| *n == first[0]),
        "the continued run keeps the measured normalization: {continued:?} vs {first:?}"
    );
    let (a, b) = (common::weights(&straight), common::weights(&run));
    for ((n, x), (m, y)) in a.iter().zip(&b) {
        assert_eq!(n, m);
        assert!(x.equal(y), "{n} differs from the straight run's");
    }
}
