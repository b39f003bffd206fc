//! Training-time augmentation: the CIFAR preset's crop and flip equal torchvision's own on the
//! same draws (the venv's torchvision), and the draws depend on the sample, not on the replica
//! count or a resume.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use dpt_tui::engine::augment::{draws, Preset};
use tch::Tensor;

#[test]
fn the_cifar_crop_and_flip_equal_torchvisions_own_on_the_same_draws() {
    const N: usize = 64;
    let data = common::subset(N, 16);
    let augment = Preset::Cifar.augment();
    let ids: Vec<i64> = (0..N as i64).collect();
    let drawn = draws(&augment, 3, 2, &ids);
    assert!(drawn.iter().any(|d| d.flip) && drawn.iter().any(|d| !d.flip));
    let raw = dpt_tui::engine::resident::Resident::upload(&data.train, tch::Device::Cpu).images;
    let ours: Vec<u8> = Vec::try_from(augment.apply(&raw, &drawn).contiguous().view([-1])).unwrap();
    let spec: Vec<[i64; 3]> = drawn.iter().map(|d| [d.top, d.left, i64::from(d.flip)]).collect();
    let out = Command::new(common::python())
        .arg(common::script("augment_reference.py"))
        .arg(common::subset_dir())
        .args([N.to_string(), "4".to_owned(), serde_json::to_string(&spec).unwrap()])
        .output()
        .expect("the virtualenv's python runs (bash .ci/setup)");
    assert!(out.status.success(), "augment_reference.py: {}", String::from_utf8_lossy(&out.stderr));
    let theirs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let theirs: Vec<u8> = serde_json::from_value(theirs["bytes"].clone()).unwrap();
    assert_eq!(ours.len(), theirs.len());
    assert!(ours == theirs, "the augmented bytes differ from torchvision's");
    let reference: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // RandomCrop.get_params draws corners in 0..=2P, as our draws do (unit test).
    assert_eq!((reference["min"].as_i64(), reference["max"].as_i64()), (Some(0), Some(8)));
}

fn dpt(run: &Path, extra: &[&str]) -> Output {
    let data = common::subset_dir();
    Command::new(env!("CARGO_BIN_EXE_dpt-tui"))
        .args(["--headless", "--data", data.to_str().unwrap(), "--train-limit", "600", "--test-limit", "100"])
        .args(["--model", "lenet", "--batch-size", "100", "--epochs", "2", "--augment", "cifar"])
        .arg("--run-dir")
        .arg(run)
        .args(extra)
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .output()
        .unwrap()
}

fn largest_difference(a: &[(String, Tensor)], b: &[(String, Tensor)]) -> f64 {
    a.iter().zip(b).map(|((_, x), (_, y))| (x - y).abs().max().double_value(&[])).fold(0.0, f64::max)
}

#[test]
fn augmentation_draws_per_sample_whatever_the_replicas_and_a_resume_continues_it() {
    let tmp = tempfile::tempdir().unwrap();
    let ok = |out: Output| {
        let text =
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{text}");
        text
    };
    let two = tmp.path().join("two");
    let said = ok(dpt(&two, &["--devices", "cpu:2"]));
    assert!(said.contains("augmented: random crop (padding 4) + horizontal flip"), "{said}");
    let one = tmp.path().join("one");
    ok(dpt(&one, &["--devices", "cpu:1"]));
    // lenet has no dropout, whose masks are drawn per replica: only the sums' order differs.
    let d = largest_difference(&common::weights(&two), &common::weights(&one));
    assert!(d < 1e-5, "1 and 2 replicas draw the same augmentations: {d}");
    let plain = tmp.path().join("plain");
    ok(dpt(&plain, &["--devices", "cpu:2", "--augment", "none"]));
    assert!(
        largest_difference(&common::weights(&two), &common::weights(&plain)) > 1e-3,
        "augmentation changes training"
    );
    // Stopped mid-epoch and resumed (the augmentation from the checkpoint): the same weights.
    let resumed = tmp.path().join("resumed");
    ok(dpt(&resumed, &["--devices", "cpu:2", "--max-steps", "4"]));
    let out = Command::new(env!("CARGO_BIN_EXE_dpt-tui"))
        .args(["--headless", "--resume"])
        .arg(&resumed)
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .output()
        .unwrap();
    ok(out);
    for ((n, a), (m, b)) in common::weights(&two).iter().zip(&common::weights(&resumed)) {
        assert_eq!(n, m);
        assert!(a.equal(b), "{n} differs after the resume");
    }
}
