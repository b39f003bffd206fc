//! Training-time augmentation: the CIFAR preset's crop and flip equal torchvision's own on the
//! same draws (the venv's torchvision), and the draws depend on the sample, not on the replica
//! count or a resume.

use crate::common;

use std::path::Path;
use std::process::Output;

use common::Dpt;
use dpt_tui::input::augment::{self, draws, Preset};
use dpt_tui::input::resized_crop;
use tch::Tensor;

#[test]
fn the_cifar_crop_and_flip_equal_torchvisions_own_on_the_same_draws() {
    const N: usize = 64;
    let data = common::subset(N, 16);
    let augment = Preset::Cifar.augment();
    let ids: Vec<i64> = (0..N as i64).collect();
    let drawn = draws(&augment, 3, 2, &ids);
    assert!(drawn.iter().any(|d| d.flip) && drawn.iter().any(|d| !d.flip));
    let raw = dpt_tui::input::resident::Resident::upload(&data.train, tch::Device::Cpu).images;
    let ours: Vec<u8> =
        Vec::try_from(augment::apply(&augment, &raw, &drawn).contiguous().view([-1])).unwrap();
    let spec: Vec<[i64; 3]> = drawn.iter().map(|d| [d.top, d.left, i64::from(d.flip)]).collect();
    let data = common::subset_dir().to_string_lossy().into_owned();
    let out = common::run_script(
        "augment_reference.py",
        &[data, N.to_string(), "4".to_owned(), serde_json::to_string(&spec).unwrap()],
    );
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
    Dpt::new()
        .headless()
        .data(data)
        .args(["--train-limit", "600", "--test-limit", "100"])
        .args(["--model", "lenet", "--batch-size", "100", "--epochs", "2", "--augment", "cifar"])
        .run_dir(run)
        .args(extra)
        .scratch_runtime()
        .output()
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
    ok(Dpt::new().headless().arg("--resume").arg(&resumed).scratch_runtime().output());
    for ((n, a), (m, b)) in common::weights(&two).iter().zip(&common::weights(&resumed)) {
        assert_eq!(n, m);
        assert!(a.equal(b), "{n} differs after the resume");
    }
}

/// Runs `resized_crop_reference.py` on `cases` (images in `folder`).
fn torchvision_resized_crop(cases: &serde_json::Value, folder: &Path) -> serde_json::Value {
    let out = common::run_script(
        "resized_crop_reference.py",
        &[std::ffi::OsStr::new(&cases.to_string()), folder.as_ref()],
    );
    assert!(out.status.success(), "resized_crop_reference.py: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Mean and largest absolute difference of two images' bytes.
fn byte_difference(ours: &[u8], theirs: &serde_json::Value) -> (f64, u8) {
    let theirs: Vec<u8> = theirs
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p.as_array().unwrap())
        .flat_map(|r| r.as_array().unwrap())
        .map(|v| v.as_u64().unwrap() as u8)
        .collect();
    assert_eq!(ours.len(), theirs.len(), "the same shape");
    let diffs: Vec<u8> = ours.iter().zip(&theirs).map(|(a, b)| a.abs_diff(*b)).collect();
    (
        diffs.iter().map(|&d| f64::from(d)).sum::<f64>() / diffs.len() as f64,
        diffs.into_iter().max().unwrap_or(0),
    )
}

#[test]
fn the_random_resized_crop_draws_torchvisions_regions_and_resizes_as_pil_does() {
    use dpt_tui::data::stream::{fit_into, Fit};
    use dpt_tui::input::resized_crop::ResizedCrop;
    use rand::{Rng, SeedableRng};
    let crop = ResizedCrop::new();
    // Sizes from square to ones so narrow that every try fails and the fallback decides.
    let sizes = [(224u32, 224u32), (375, 500), (500, 333), (32, 32), (10, 400), (400, 10), (60, 61)];
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    let mut cases = Vec::new();
    let mut ours = Vec::new();
    for &(h, w) in &sizes {
        for _ in 0..30 {
            let numbers: Vec<f64> = (0..22).map(|_| rng.random::<f64>()).collect();
            let mut it = numbers.iter().copied();
            ours.push(resized_crop::params(&crop, (h, w), || it.next().unwrap()));
            cases.push(serde_json::json!([h, w, numbers]));
        }
    }
    // Two PNG images (JPEG decoders differ in their last bit, PNG's do not).
    let tmp = tempfile::tempdir().unwrap();
    let data = common::subset(2, 1);
    let dpt_tui::data::Pixels::Bytes(px) = &data.train.images else { panic!("bytes") };
    let gray = image::GrayImage::from_raw(28, 28, px[..784].to_vec()).unwrap();
    let wide = image::imageops::resize(&gray, 300, 200, image::imageops::FilterType::Triangle);
    let color = image::RgbImage::from_fn(300, 200, |x, y| {
        let g = wide.get_pixel(x, y)[0];
        image::Rgb([g, (x % 256) as u8, (y * 2 % 256) as u8])
    });
    color.save(tmp.path().join("a.png")).unwrap();
    let images = serde_json::json!([["a.png", 20, 30, 150, 200, 64], ["a.png", 0, 0, 200, 300, 96]]);
    let theirs =
        torchvision_resized_crop(&serde_json::json!({"params": cases, "images": images}), tmp.path());
    let params: Vec<(u32, u32, u32, u32)> = serde_json::from_value(theirs["params"].clone()).unwrap();
    assert_eq!(ours.len(), params.len());
    for (k, (a, b)) in ours.iter().zip(&params).enumerate() {
        assert_eq!(a, b, "case {k} ({:?}): (top, left, h, w) against get_params' (i, j, h, w)", cases[k]);
    }
    let img = image::DynamicImage::ImageRgb8(color);
    for (k, (top, left, h, w, size)) in
        [(20u32, 30u32, 150u32, 200u32, 64u32), (0, 0, 200, 300, 96)].into_iter().enumerate()
    {
        let mut out = vec![0u8; (3 * size * size) as usize];
        fit_into(img.clone(), (3, size, size), Fit::Region { top, left, height: h, width: w }, &mut out)
            .unwrap();
        let (mean, max) = byte_difference(&out, &theirs["crops"][k]);
        assert!(mean < 1.0 && max <= 8, "crop {k} against F.resized_crop: mean {mean:.3}, max {max}");
        fit_into(img.clone(), (3, size, size), resized_crop::evaluation(size), &mut out).unwrap();
        let (mean, max) = byte_difference(&out, &theirs["evals"][k]);
        assert!(
            mean < 1.0 && max <= 8,
            "evaluation {k} against Resize + CenterCrop: mean {mean:.3}, max {max}"
        );
    }
}
