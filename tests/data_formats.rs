//! The data formats a `--data` path may hold, written by the tests from the shipped
//! Fashion-MNIST subset (CIFAR-10 bytes, PNG folders made with the image crate, `.npy`, `.npz`,
//! `.safetensors`, WebDataset tar shards made with the tar crate), read back, their corrupt
//! variants refused with a message naming the file, and a TorchScript CNN trained on
//! CIFAR-format data and on an image folder.

use crate::common;
use common::Dpt;

use std::path::Path;

use dpt_tui::data::{DataError, DataFormat, Dataset, LoadOptions, Pixels, Split};
use npyz::WriterBuilder;

fn bytes(split: &Split) -> &[u8] {
    match &split.images {
        Pixels::Bytes(v) => v,
        _ => panic!("byte images expected"),
    }
}

/// Sample `i` of a 28×28 split as a 32×32 RGB image (padded by 2, gray in all three planes).
fn rgb32(split: &Split, i: usize) -> Vec<u8> {
    let src = &bytes(split)[i * 784..(i + 1) * 784];
    let mut plane = vec![0u8; 1024];
    for y in 0..28 {
        plane[(y + 2) * 32 + 2..(y + 2) * 32 + 30].copy_from_slice(&src[y * 28..y * 28 + 28]);
    }
    [plane.clone(), plane.clone(), plane].concat()
}

fn write_cifar(dir: &Path, train: &Split, test: &Split) {
    common::write_cifar(dir, (train, test), rgb32);
}

fn write_png_folder(dir: &Path, train: &Split, test: &Split, rgb: bool) {
    for (name, split) in [("train", train), ("test", test)] {
        for i in 0..split.len() {
            let class = dir.join(name).join(format!("class_{}", split.labels[i]));
            std::fs::create_dir_all(&class).unwrap();
            let path = class.join(format!("{i:05}.png"));
            let gray =
                image::GrayImage::from_raw(28, 28, bytes(split)[i * 784..(i + 1) * 784].to_vec()).unwrap();
            if rgb {
                image::DynamicImage::ImageLuma8(gray).to_rgb8().save(&path).unwrap();
            } else {
                gray.save(&path).unwrap();
            }
        }
    }
}

fn npy<T: npyz::AutoSerialize + Copy>(path: &Path, shape: &[u64], data: &[T]) {
    let file = std::fs::File::create(path).unwrap();
    let mut w = npyz::WriteOptions::new().default_dtype().shape(shape).writer(file).begin_nd().unwrap();
    w.extend(data.iter().copied()).unwrap();
    w.finish().unwrap();
}

fn subset(train: usize, test: usize) -> Dataset {
    std::sync::Arc::try_unwrap(common::subset(train, test)).unwrap()
}

#[test]
fn cifar_batches_read_back_with_their_labels_and_planes() {
    let data = subset(200, 50);
    let dir = tempfile::tempdir().unwrap();
    write_cifar(dir.path(), &data.train, &data.test);
    assert_eq!(dpt_tui::data::format::detect(dir.path()).unwrap(), DataFormat::Cifar10);
    let c = Dataset::load(dir.path()).unwrap();
    assert_eq!((c.train.len(), c.test.len(), c.classes), (200, 50, 10));
    assert_eq!(c.train.sample_shape(), [3, 32, 32]);
    assert_eq!(c.train.labels, data.train.labels);
    assert_eq!(&bytes(&c.train)[3072 * 7..3072 * 8], rgb32(&data.train, 7).as_slice());
    assert!(c.source.starts_with("CIFAR-10 binary batches in"));
    // Unpacked as the archive does, one folder down.
    let outer = tempfile::tempdir().unwrap();
    write_cifar(&outer.path().join("cifar-10-batches-bin"), &data.train, &data.test);
    assert_eq!(Dataset::load(outer.path()).unwrap().train.len(), 200);
}

#[test]
fn corrupt_cifar_batches_are_named() {
    let data = subset(50, 10);
    let dir = tempfile::tempdir().unwrap();
    write_cifar(dir.path(), &data.train, &data.test);
    let batch = dir.path().join("data_batch_3.bin");
    let full = std::fs::read(&batch).unwrap();
    std::fs::write(&batch, &full[..full.len() - 100]).unwrap();
    let e = Dataset::load(dir.path()).unwrap_err();
    assert!(matches!(&e, DataError::CifarSize { path, .. } if *path == batch), "{e}");
    let mut bad = full.clone();
    bad[3073] = 11;
    std::fs::write(&batch, &bad).unwrap();
    let e = Dataset::load(dir.path()).unwrap_err();
    assert!(matches!(e, DataError::LabelOutOfRange { index: 1, label: 11, .. }), "{e}");
    std::fs::write(&batch, &full).unwrap();
    std::fs::remove_file(dir.path().join("test_batch.bin")).unwrap();
    assert!(matches!(Dataset::load(dir.path()).unwrap_err(), DataError::CifarMissing { .. }));
}

#[test]
fn png_folders_read_back_sorted_by_class_gray_or_rgb_and_resized_on_request() {
    let data = subset(40, 20);
    for rgb in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        write_png_folder(dir.path(), &data.train, &data.test, rgb);
        assert_eq!(dpt_tui::data::format::detect(dir.path()).unwrap(), DataFormat::Images);
        let d = Dataset::load(dir.path()).unwrap();
        assert_eq!(d.train.channels, if rgb { 3 } else { 1 });
        assert_eq!((d.train.len(), d.test.len()), (40, 20));
        // Files are read class by class: the labels come out sorted.
        let mut sorted = data.train.labels.clone();
        sorted.sort();
        assert_eq!(d.train.labels, sorted);
        let first = data.train.labels.iter().position(|&l| l == sorted[0]).unwrap();
        assert_eq!(&bytes(&d.train)[..784], &bytes(&data.train)[first * 784..(first + 1) * 784]);
        let resized =
            Dataset::load_with(dir.path(), LoadOptions { image_size: Some((16, 20)), ..Default::default() })
                .unwrap();
        assert_eq!(resized.train.sample_shape()[1..], [16, 20]);
    }
}

#[test]
fn an_image_folders_own_val_split_is_evaluated_each_epoch_and_named_val() {
    let data = subset(200, 60);
    let tmp = tempfile::tempdir().unwrap();
    // train/ + val/ only: val/ is evaluated in the test set's place, named val.
    let only_val = tmp.path().join("only-val");
    write_png_folder(&only_val, &data.train, &data.test, false);
    std::fs::rename(only_val.join("test"), only_val.join("val")).unwrap();
    let d = Dataset::load(&only_val).unwrap();
    assert!(d.test_is_val && d.val.is_none());
    assert_eq!(d.test.len(), 60);
    // train/ + val/ + test/: val/ each epoch, test/ once at the end.
    let both = tmp.path().join("both");
    write_png_folder(&both, &data.train, &data.test, false);
    write_png_folder(&both.join("v"), &data.test, &data.test, false);
    std::fs::rename(both.join("v/test"), both.join("val")).unwrap();
    let d = Dataset::load(&both).unwrap();
    assert_eq!((d.val.as_ref().map(Split::len), d.test_is_val), (Some(60), false));

    for (folder, named) in [(&only_val, "val acc"), (&both, "val acc")] {
        let run = tmp.path().join(format!("run-{}", folder.file_name().unwrap().to_string_lossy()));
        let out = Dpt::new()
            .args(["--headless", "--devices", "cpu:2", "--epochs", "1", "--batch-size", "50"])
            .args(["--data", folder.to_str().unwrap(), "--run-dir", run.to_str().unwrap()])
            .output();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains(named), "{stdout}");
        let records = common::wait_for_summary(&run, std::time::Duration::from_secs(5));
        let tested = records.iter().any(|r| r["event"] == "tested");
        assert_eq!(tested, folder == &both, "test/ is evaluated once at the end only when it exists");
        if folder == &only_val {
            assert_eq!(records[0]["test_split"], "val");
        } else {
            assert_eq!(records[0]["val_samples"], 60);
        }
    }
    let out = Dpt::new()
        .args(["--headless", "--val-fraction", "0.1", "--data", both.to_str().unwrap()])
        .args(["--run-dir", tmp.path().join("refused").to_str().unwrap()])
        .output();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("has its own val/ folder"));
}

#[test]
fn webdataset_shards_read_back_in_order_and_train() {
    let data = subset(250, 60);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wds");
    common::write_shards(&dir.join("train"), &data.train, 100);
    common::write_shards(&dir.join("val"), &data.test, 25);
    assert_eq!(dpt_tui::data::format::detect(&dir).unwrap(), DataFormat::WebDataset);
    let d = Dataset::load(&dir).unwrap();
    assert_eq!((d.train.len(), d.test.len(), d.train.channels), (250, 60, 1));
    assert!(d.test_is_val, "val/ alone is evaluated in the test set's place");
    assert_eq!(bytes(&d.train), bytes(&data.train), "shard order, then sample order");
    assert_eq!(d.train.labels, data.train.labels);
    assert!(d.source.contains("WebDataset shards"), "{}", d.source);
    let run = tmp.path().join("run");
    let out = Dpt::new()
        .args(["--headless", "--devices", "cpu:2", "--epochs", "1", "--batch-size", "50"])
        .args(["--data", dir.to_str().unwrap(), "--run-dir", run.to_str().unwrap()])
        .output();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("WebDataset shards in") && stdout.contains("val acc"), "{stdout}");

    // A sample without its class, and a file that is not a tar archive, are named.
    let broken = tmp.path().join("broken");
    common::write_shards(&broken.join("train"), &data.train, 100);
    common::write_shards(&broken.join("test"), &data.test, 60);
    let shard = broken.join("train/shard-0001.tar");
    let mut tar = tar::Builder::new(std::fs::File::create(&shard).unwrap());
    let mut header = tar::Header::new_gnu();
    header.set_size(3);
    header.set_cksum();
    tar.append_data(&mut header, "lonely.png", &b"png"[..]).unwrap();
    tar.finish().unwrap();
    drop(tar);
    let e = Dataset::load(&broken).unwrap_err().to_string();
    assert!(e.contains("shard-0001.tar") && e.contains("sample 'lonely' has no .cls"), "{e}");
    std::fs::write(&shard, vec![7u8; 1000]).unwrap();
    let e = Dataset::load(&broken).unwrap_err().to_string();
    assert!(e.contains("shard-0001.tar"), "{e}");
}

#[test]
fn a_shard_cut_short_is_named_as_such_with_where_and_whether_the_rest_is_whole() {
    let data = subset(300, 60);
    let tmp = tempfile::tempdir().unwrap();
    common::write_shards(&tmp.path().join("train"), &data.train, 100);
    common::write_shards(&tmp.path().join("test"), &data.test, 60);
    let shard = tmp.path().join("train/shard-0001.tar");
    let whole = std::fs::read(&shard).unwrap();
    // Where the 19th member's bytes end (an image: a few hundred bytes).
    let mut archive = tar::Archive::new(std::io::Cursor::new(whole.clone()));
    let entry = archive.entries().unwrap().nth(18).unwrap().unwrap();
    let end = (entry.raw_file_position() + entry.size()) as usize;
    let name = entry.path().unwrap().to_string_lossy().into_owned();
    assert!(name.ends_with(".png") && entry.size() > 20, "{name}");
    drop(archive);
    // Cut inside that member's bytes, then right after its padded bytes (no archive end).
    for (len, at) in [
        (end - 10, format!("inside member '{name}'")),
        (end.div_ceil(512) * 512, format!("right after member '{name}'")),
    ] {
        std::fs::write(&shard, &whole[..len]).unwrap();
        let e = Dataset::load(tmp.path()).unwrap_err().to_string();
        assert!(e.contains("shard-0001.tar is cut short") && e.contains(&at), "{e}");
        assert!(
            e.contains("the other 2 of 3 shards of its split read whole") && !e.contains("has no .cls"),
            "{e}"
        );
    }
    std::fs::write(&shard, &whole).unwrap();
    assert_eq!(Dataset::load(tmp.path()).unwrap().train.len(), 300, "the whole shard reads again");
}

#[test]
fn bad_image_folders_name_the_file_or_class() {
    let data = subset(20, 10);
    let dir = tempfile::tempdir().unwrap();
    write_png_folder(dir.path(), &data.train, &data.test, false);
    let class = dir.path().join("train").join(format!("class_{}", data.train.labels[0]));
    let broken = class.join("zz-broken.png");
    std::fs::write(&broken, b"\x89PNG not really").unwrap();
    // One in 31 images is more than the default one in a thousand: refused, naming it.
    let e = Dataset::load(dir.path()).unwrap_err();
    assert!(
        matches!(&e, DataError::TooManyUndecodable { count: 1, total: 31, allowed: 0, first, .. } if *first == broken),
        "{e}"
    );
    assert!(e.to_string().contains("--max-bad-images"), "{e}");
    // Allowed a tenth: left out, named and counted.
    let lenient = LoadOptions { max_bad: 0.1, ..Default::default() };
    let d = Dataset::load_with(dir.path(), lenient).unwrap();
    assert_eq!((d.train.len(), d.skipped.len()), (20, 1));
    assert!(d.skipped[0].starts_with(broken.to_str().unwrap()), "{:?}", d.skipped);
    assert!(d.source.contains("1 undecodable image skipped"), "{}", d.source);
    let run = dir.path().join("run");
    let out = Dpt::new()
        .args(["--headless", "--epochs", "1", "--batch-size", "10", "--max-bad-images", "0.1"])
        .args(["--data", dir.path().to_str().unwrap(), "--run-dir", run.to_str().unwrap()])
        .output();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("skipped an image that does not decode") && stderr.contains("zz-broken.png"),
        "{stderr}"
    );
    std::fs::remove_file(&broken).unwrap();
    let small = class.join("zz-small.png");
    image::GrayImage::new(14, 14).save(&small).unwrap();
    let e = Dataset::load(dir.path()).unwrap_err();
    assert!(matches!(&e, DataError::MixedSizes { path, found_h: 14, .. } if *path == small), "{e}");
    assert!(e.to_string().contains("--image-size"), "{e}");
    std::fs::remove_file(&small).unwrap();
    std::fs::create_dir_all(dir.path().join("test/unheard-of")).unwrap();
    assert!(matches!(Dataset::load(dir.path()).unwrap_err(), DataError::UnknownClass { .. }));
}

#[test]
fn npy_npz_and_safetensors_arrays_read_back_in_every_layout() {
    let data = subset(30, 12);
    let (tr, te) = (&data.train, &data.test);
    let labels = |s: &Split| s.labels.clone();
    // A folder of .npy files: [N, H, W] bytes and int64 labels.
    let dir = tempfile::tempdir().unwrap();
    npy(&dir.path().join("x_train.npy"), &[30, 28, 28], bytes(tr));
    npy(&dir.path().join("y_train.npy"), &[30], &labels(tr));
    npy(&dir.path().join("x_test.npy"), &[12, 28, 28], bytes(te));
    npy(&dir.path().join("y_test.npy"), &[12, 1], &te.labels.iter().map(|&l| l as i32).collect::<Vec<_>>());
    let d = Dataset::load(dir.path()).unwrap();
    assert_eq!((d.train.clone(), d.test.labels.clone()), (tr.clone(), te.labels.clone()));
    // An .npz of float images [N, H, W, C] (channels last, as Keras stores them).
    let npz = dir.path().join("set.npz");
    let nhwc =
        |s: &Split| -> Vec<f32> { bytes(s).iter().flat_map(|&b| [f32::from(b) / 255.0, 0.5, 1.0]).collect() };
    {
        let mut w = npyz::npz::NpzWriter::create(&npz).unwrap();
        for (name, split) in [("train", tr), ("test", te)] {
            let n = split.len() as u64;
            let mut a = w
                .array::<f32>(&format!("x_{name}"), Default::default())
                .unwrap()
                .default_dtype()
                .shape(&[n, 28, 28, 3])
                .begin_nd()
                .unwrap();
            a.extend(nhwc(split)).unwrap();
            a.finish().unwrap();
            let mut a = w
                .array::<i64>(&format!("y_{name}"), Default::default())
                .unwrap()
                .default_dtype()
                .shape(&[n])
                .begin_nd()
                .unwrap();
            a.extend(labels(split)).unwrap();
            a.finish().unwrap();
        }
    }
    let d = Dataset::load(&npz).unwrap();
    assert_eq!(d.train.sample_shape(), [3, 28, 28]);
    let Pixels::Floats(v) = &d.train.images else { panic!("floats stay floats") };
    assert_eq!(v[..784], bytes(tr)[..784].iter().map(|&b| f32::from(b) / 255.0).collect::<Vec<_>>()[..]);
    assert!(v[784..2 * 784].iter().all(|&x| x == 0.5) && v[2 * 784..3 * 784].iter().all(|&x| x == 1.0));
    assert_eq!(d.train.images.unit(), 1.0);
    // safetensors: [N, C, H, W] bytes.
    let st = dir.path().join("set.safetensors");
    let t = |v: &[u8], shape: &[i64]| tch::Tensor::from_slice(v).view(shape);
    let l = |s: &Split| tch::Tensor::from_slice(&s.labels);
    let tensors = [
        ("x_train", t(bytes(tr), &[30, 1, 28, 28])),
        ("y_train", l(tr)),
        ("x_test", t(bytes(te), &[12, 1, 28, 28])),
        ("y_test", l(te)),
    ];
    tch::Tensor::write_safetensors(&tensors, &st).unwrap();
    let d = Dataset::load(&st).unwrap();
    assert_eq!(d.train, *tr);
    assert!(d.source.starts_with("safetensors arrays in"));
}

#[test]
fn bad_arrays_say_what_is_wrong() {
    let data = subset(10, 5);
    let dir = tempfile::tempdir().unwrap();
    let (tr, te) = (&data.train, &data.test);
    npy(&dir.path().join("x_train.npy"), &[10, 28, 28], bytes(tr));
    npy(&dir.path().join("y_train.npy"), &[9], &tr.labels[..9]);
    npy(&dir.path().join("x_test.npy"), &[5, 28, 28], bytes(te));
    let e = Dataset::load(dir.path()).unwrap_err();
    assert!(matches!(&e, DataError::ArrayMissing { name, .. } if name == "y_test.npy"), "{e}");
    npy(&dir.path().join("y_test.npy"), &[5], &te.labels);
    let e = Dataset::load(dir.path()).unwrap_err();
    assert!(matches!(e, DataError::ArrayCounts { n_images: 10, n_labels: 9, .. }), "{e}");
    // Float labels are not class ids: targets for a model that computes its own loss (its
    // check refuses a classifier them), both splits kept whole.
    npy(&dir.path().join("y_train.npy"), &[10], &tr.labels.iter().map(|&l| l as f32).collect::<Vec<_>>());
    let e = Dataset::load(dir.path()).unwrap_err();
    assert!(
        e.to_string().contains("y_train holds float targets of shape [] per sample but y_test class ids"),
        "{e}"
    );
    npy(&dir.path().join("y_test.npy"), &[5], &te.labels.iter().map(|&l| l as f32).collect::<Vec<_>>());
    let d = Dataset::load(dir.path()).unwrap();
    let targets = d.train.targets.as_ref().expect("float targets");
    assert_eq!((targets.len(), targets.shape.len(), d.train.len(), d.test.len()), (10, 0, 10, 5));
    assert!(d.source.contains("(float targets of shape [] per sample)"), "{}", d.source);
    npy(&dir.path().join("y_test.npy"), &[5], &te.labels);
    npy(&dir.path().join("y_train.npy"), &[10], &tr.labels.iter().map(|&l| l - 1).collect::<Vec<_>>());
    let e = Dataset::load(dir.path()).unwrap_err();
    assert!(matches!(e, DataError::LabelOutOfRange { label: -1, .. }), "{e}");
    npy(&dir.path().join("x_train.npy"), &[10, 784], bytes(tr));
    let e = Dataset::load(dir.path()).unwrap_err();
    assert!(matches!(e, DataError::ArrayShape { .. }), "{e}");
    let empty = tempfile::tempdir().unwrap();
    assert!(matches!(Dataset::load(empty.path()).unwrap_err(), DataError::Unknown { .. }));
}

fn train(data: &Path, model: &Path, run: &Path) -> (serde_json::Value, f64) {
    let out = Dpt::new()
        .args(["--headless", "--devices", "cpu:2", "--epochs", "3", "--model", model.to_str().unwrap()])
        .args(["--data", data.to_str().unwrap(), "--run-dir", run.to_str().unwrap()])
        .output();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let records = common::wait_for_summary(run, std::time::Duration::from_secs(5));
    let acc = records.iter().rev().find_map(|r| r["test_acc"].as_f64()).unwrap();
    (records[0].clone(), acc)
}

#[test]
fn a_user_cnn_learns_from_cifar_format_data_and_from_an_image_folder() {
    let data = subset(2000, 500);
    let dir = tempfile::tempdir().unwrap();
    let model = common::make_model("cnn", 3, dir.path());
    let cifar = dir.path().join("cifar");
    write_cifar(&cifar, &data.train, &data.test);
    let (start, acc) = train(&cifar, &model, &dir.path().join("run-cifar"));
    let described = start["data"].as_str().unwrap();
    assert!(
        described.contains("CIFAR-10 binary batches") && described.contains("3x32x32, 10 classes"),
        "{described}"
    );
    assert!(acc > 0.3, "well above chance (0.1): {acc}");
    let folder = dir.path().join("folder");
    write_png_folder(&folder, &data.train, &data.test, true);
    let (start, acc) = train(&folder, &model, &dir.path().join("run-folder"));
    assert!(start["data"].as_str().unwrap().contains("image folder"));
    assert!(acc > 0.3, "well above chance (0.1): {acc}");
    // The built-in models take 1x28x28 images only.
    let out = Dpt::new().args(["--headless", "--model", "lenet", "--data", cifar.to_str().unwrap()]).output();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("lenet takes 1x28x28 images") && stderr.contains("--model FILE.pt"), "{stderr}");
}
