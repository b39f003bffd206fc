//! The streaming loader (`--loader stream`) on JPEG folders, WebDataset shards, uint8 arrays,
//! CIFAR-10 batches and raw IDX files written from the shipped subset: it trains to the weights the resident path reaches (folders and shards),
//! on one process and on two, resumes mid-epoch exactly, crops ImageNet-style, keeps the process's memory bounded while streaming more
//! than its budget, and names (and counts) images that fail to decode while training.

use crate::common;
use common::Dpt;

use std::path::Path;

use dpt_tui::data::idx::encode_idx;
use dpt_tui::data::{Pixels, Split};

/// The subset's sample `i` as an RGB image of `side`×`side`: scaled up, tinted by its class so
/// the three channels differ.
fn tinted(split: &Split, i: usize, side: u32) -> image::RgbImage {
    tinted_to(split, i, (side, side))
}

/// `tinted` at `width`×`height`.
fn tinted_to(split: &Split, i: usize, (width, height): (u32, u32)) -> image::RgbImage {
    let Pixels::Bytes(v) = &split.images else { panic!("bytes") };
    let gray = image::GrayImage::from_raw(28, 28, v[i * 784..(i + 1) * 784].to_vec()).unwrap();
    let big = image::imageops::resize(&gray, width, height, image::imageops::FilterType::Triangle);
    let class = split.labels[i] as u8;
    image::RgbImage::from_fn(width, height, |x, y| {
        let g = big.get_pixel(x, y)[0];
        image::Rgb([g, g / 2 + class * 12, 255 - g / 2])
    })
}

/// Writes `train` and `test` images of the subset as a JPEG folder of `side`-pixel images,
/// tinted, or gray as they are.
fn write_jpeg_folder(dir: &Path, (train, test): (usize, usize), side: u32, color: bool) {
    let data = common::subset(train, test);
    for (name, split) in [("train", &data.train), ("test", &data.test)] {
        for i in 0..split.len() {
            let class = dir.join(name).join(format!("class_{}", split.labels[i]));
            std::fs::create_dir_all(&class).unwrap();
            let img = tinted(split, i, side);
            let path = class.join(format!("{i:05}.jpg"));
            if color {
                img.save(path).unwrap();
            } else {
                image::DynamicImage::ImageRgb8(img).to_luma8().save(path).unwrap();
            }
        }
    }
}

fn dpt(data: &Path, run: &Path, extra: &[&str]) -> Dpt {
    let mut c = Dpt::new();
    c.headless().data(data).run_dir(run).args(extra).scratch_runtime();
    c
}

fn largest_difference(a: &[(String, tch::Tensor)], b: &[(String, tch::Tensor)]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|((_, x), (_, y))| (x - y).abs().max().double_value(&[])).fold(0.0, f64::max)
}

/// Trains on `data` with `flags` twice, resident and streamed; asserts the two runs end with
/// the same weights, bit for bit; returns what the streamed run said and its folder.
fn resident_and_streamed(
    data: &Path,
    root: &Path,
    flags: &[&str],
    stream: &[&str],
) -> (String, std::path::PathBuf) {
    let resident = root.join("resident");
    dpt(data, &resident, flags).args(["--loader", "resident"]).ok();
    let streamed = root.join("streamed");
    let said = dpt(data, &streamed, flags).args(["--loader", "stream"]).args(stream).ok();
    assert!(said.contains("streamed"), "the data's description says it streams: {said}");
    same_weights(&resident, &streamed);
    (said, streamed)
}

/// The two runs' saved weights are equal, bit for bit.
fn same_weights(a: &Path, b: &Path) {
    for ((n, x), (m, y)) in common::weights(a).iter().zip(&common::weights(b)) {
        assert_eq!(n, m);
        assert!(x.equal(y), "{n} differs between {} and {}", a.display(), b.display());
    }
}

fn summary(run: &Path) -> serde_json::Value {
    let records = common::wait_for_summary(run, std::time::Duration::from_secs(5));
    records.last().unwrap().clone()
}

#[test]
fn a_streamed_folder_trains_to_the_weights_of_the_resident_one_bit_for_bit() {
    let tmp = tempfile::tempdir().unwrap();
    let folder = tmp.path().join("jpeg");
    write_jpeg_folder(&folder, (1200, 200), 32, true);
    let model = common::make_model("cnn", 3, tmp.path());
    let m = model.to_str().unwrap();
    // The normalization given: measured, it would come from every image resident and from 256
    // of them streamed.
    let flags = [
        "--model",
        m,
        "--devices",
        "cpu:2",
        "--epochs",
        "2",
        "--batch-size",
        "100",
        "--augment",
        "cifar",
        "--normalize",
        "0.4,0.3,0.6,0.3,0.2,0.2",
    ];
    // The same batches in the same order: the same weights.
    let (said, streamed) = resident_and_streamed(&folder, tmp.path(), &flags, &["--prefetch", "3"]);
    // Each report says how the loader kept up: batches ready of the queue's depth, decode rate.
    assert!(said.contains("loader ") && said.contains("/3 ready, "), "{said}");
    let records = common::wait_for_summary(&streamed, std::time::Duration::from_secs(5));
    let loader: Vec<&serde_json::Value> = records.iter().filter_map(|r| r.get("loader")).collect();
    assert!(!loader.is_empty() && loader.iter().all(|l| l["depth"] == 3), "{loader:?}");
    assert!(loader
        .iter()
        .all(|l| l["images_per_sec"].as_f64().unwrap() > 0.0 && l["ready"].as_f64().unwrap() <= 3.0));
}

#[test]
fn a_streamed_run_stopped_mid_epoch_continues_to_the_weights_of_a_straight_one() {
    let tmp = tempfile::tempdir().unwrap();
    let folder = tmp.path().join("gray");
    write_jpeg_folder(&folder, (1200, 200), 28, false);
    // lenet: no TorchScript executor whose first runs' numerics would differ after the restart.
    let flags = ["--model", "lenet", "--devices", "cpu:2", "--epochs", "2", "--batch-size", "100"];
    let flags = [&flags[..], &["--augment", "cifar", "--loader", "stream"]].concat();
    let straight = tmp.path().join("straight");
    dpt(&folder, &straight, &flags).ok();
    // Stopped at step 7 of 12 in the first epoch, then the same command finishes the run.
    let stopped = tmp.path().join("stopped");
    dpt(&folder, &stopped, &flags).args(["--max-steps", "7"]).ok();
    let again = dpt(&folder, &stopped, &flags).ok();
    assert!(again.contains("continuing the run"), "{again}");
    same_weights(&straight, &stopped);
}

#[test]
fn streaming_keeps_the_process_within_its_budget_where_resident_data_does_not() {
    let tmp = tempfile::tempdir().unwrap();
    let folder = tmp.path().join("big");
    // 2,300 images of 3x160x160: 177 MB decoded, held three times resident (the host's copy
    // and one per CPU replica).
    write_jpeg_folder(&folder, (2000, 300), 160, true);
    let model = common::make_model("pooled", 3, tmp.path());
    let flags =
        ["--model", model.to_str().unwrap(), "--devices", "cpu:2", "--epochs", "1", "--batch-size", "100"];
    let peak = |loader: &[&str], run: &str| {
        let run = tmp.path().join(run);
        dpt(&folder, &run, &flags).args(loader).ok();
        summary(&run)["peak_rss_mib"].as_f64().expect("the summary records the peak memory")
    };
    let resident = peak(&["--loader", "resident"], "resident");
    let streamed = peak(&["--loader", "stream", "--data-memory", "24M"], "streamed");
    // Resident data is held decoded at least once more than streaming ever holds it (the host's
    // copy and one per replica: three copies at most, one at least).
    let decoded_mib = 2300.0 * 3.0 * 160.0 * 160.0 / f64::from(1 << 20);
    assert!(
        streamed + decoded_mib < resident,
        "streamed {streamed:.0} MiB, resident {resident:.0} MiB, decoded {decoded_mib:.0} MiB"
    );
    assert!(streamed < 1200.0, "the whole process under 1.2 GB while streaming: {streamed:.0} MiB");
    // The same data under --loader auto and a budget it does not fit in streams.
    let run = tmp.path().join("auto");
    let said = dpt(&folder, &run, &flags).args(["--data-memory", "64M"]).ok();
    assert!(said.contains("streamed"), "{said}");
    // A budget that cannot hold three batches per replica is refused, saying what to change.
    let tiny = tmp.path().join("tiny");
    let out = dpt(&folder, &tiny, &flags).args(["--loader", "stream", "--data-memory", "8M"]).output();
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("--data-memory 8.0 MiB holds 1 batches") && said.contains("raise --data-memory"),
        "{said}"
    );
}

#[test]
fn two_processes_stream_their_own_shards_to_the_weights_of_one_process() {
    let tmp = tempfile::tempdir().unwrap();
    let folder = tmp.path().join("gray");
    write_jpeg_folder(&folder, (600, 100), 28, false);
    // 549 KB decoded, streamed within 256 KiB: three batches of 50 images per replica fit.
    let flags = ["--model", "lenet", "--epochs", "2", "--batch-size", "100", "--augment", "cifar"];
    let flags = [&flags[..], &["--loader", "stream", "--data-memory", "256K"]].concat();
    let one = tmp.path().join("one");
    dpt(&folder, &one, &flags).args(["--devices", "cpu:2"]).ok();
    let port = common::free_port();
    let two = tmp.path().join("two");
    let ranks: Vec<_> = (0..2)
        .map(|r| dpt(&folder, &two, &flags).args(["--devices", "cpu:1"]).rank(r, 2, port).piped().spawn())
        .collect();
    for r in ranks {
        common::ok(&r.wait_with_output().unwrap());
    }
    let d = largest_difference(&common::weights(&one), &common::weights(&two));
    assert!(d < 1e-5, "every sample once per epoch, split over the ranks as over the replicas ({d})");
}

#[test]
fn images_that_fail_to_decode_while_streaming_are_named_counted_and_bounded() {
    let tmp = tempfile::tempdir().unwrap();
    let folder = tmp.path().join("gray");
    write_jpeg_folder(&folder, (600, 100), 28, false);
    // Three training images cut short: the index lists them, their decoding fails mid-run.
    let class = folder.join("train/class_0");
    let mut cut: Vec<_> = std::fs::read_dir(&class).unwrap().map(|e| e.unwrap().path()).collect();
    cut.sort();
    for path in &cut[1..4] {
        let bytes = std::fs::read(path).unwrap();
        std::fs::write(path, &bytes[..bytes.len() / 3]).unwrap();
    }
    let flags = [
        "--model",
        "lenet",
        "--devices",
        "cpu:2",
        "--epochs",
        "2",
        "--batch-size",
        "100",
        "--loader",
        "stream",
    ];
    let run = tmp.path().join("lenient");
    // 0.005 of 700 images: 3 may fail, each counted once however many epochs meet it.
    let said = dpt(&folder, &run, &flags).args(["--max-bad-images", "0.005"]).ok();
    assert!(said.contains(&format!("skipped an image that does not decode: {}", cut[1].display())), "{said}");
    let records = common::wait_for_summary(&run, std::time::Duration::from_secs(5));
    let skipped = |r: &&serde_json::Value| {
        r["message"].as_str().is_some_and(|m| m.starts_with("skipped an image that does not decode"))
    };
    // Each epoch meets the three again.
    assert_eq!(records.iter().filter(skipped).count(), 6, "named in the record, every time");
    // More than the share allowed (0.001 of 700 images: none) fails the run, naming one.
    let out = dpt(&folder, &tmp.path().join("strict"), &flags).output();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("different images failed to decode while training, more than the 0 allowed"),
        "{said}"
    );
}

#[test]
fn the_imagenet_recipe_streams_images_of_any_size_and_needs_a_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let folder = tmp.path().join("sizes");
    let data = common::subset(400, 100);
    // Sizes as photos come: each image its own, wider or taller.
    for (name, split) in [("train", &data.train), ("val", &data.test)] {
        for i in 0..split.len() {
            let class = folder.join(name).join(format!("class_{}", split.labels[i]));
            std::fs::create_dir_all(&class).unwrap();
            let size = (40 + (i as u32 * 7) % 30, 36 + (i as u32 * 11) % 40);
            tinted_to(split, i, size).save(class.join(format!("{i:05}.jpg"))).unwrap();
        }
    }
    let model = common::make_model("cnn", 3, tmp.path());
    let flags =
        ["--model", model.to_str().unwrap(), "--devices", "cpu:2", "--epochs", "2", "--batch-size", "50"];
    let flags = [&flags[..], &["--augment", "imagenet", "--image-size", "32,32"]].concat();
    let run = tmp.path().join("run");
    let said = dpt(&folder, &run, &flags).ok();
    assert!(
        said.contains("random-resized crop (scale 0.08-1, ratio 0.750-1.333) + horizontal flip"),
        "{said}"
    );
    assert!(said.contains("streamed") && said.contains("val acc"), "{said}");
    let last = summary(&run);
    assert_eq!(last["epochs_done"], 2, "{last}");
    // Asked to keep the data resident, or given data that is read whole, it says why not.
    let out = dpt(&folder, &tmp.path().join("resident"), &flags).args(["--loader", "resident"]).output();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("drop --loader resident"));
    let idx = common::subset_dir();
    let out = dpt(&idx, &tmp.path().join("idx"), &["--model", "lenet", "--augment", "imagenet"]).output();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs an image folder or WebDataset shards"));
}

#[test]
fn webdataset_shards_stream_to_the_weights_of_resident_shards() {
    let tmp = tempfile::tempdir().unwrap();
    let data = common::subset(600, 100);
    let shards = tmp.path().join("wds");
    common::write_shards(&shards.join("train"), &data.train, 128);
    common::write_shards(&shards.join("test"), &data.test, 50);
    let flags = [
        "--model",
        "lenet",
        "--devices",
        "cpu:2",
        "--epochs",
        "2",
        "--batch-size",
        "100",
        "--augment",
        "cifar",
    ];
    // Members read at their offsets train as the resident shards do.
    let (said, _) = resident_and_streamed(&shards, tmp.path(), &flags, &[]);
    assert!(said.contains("WebDataset shards in"), "{said}");
}

#[test]
fn a_large_folders_index_is_cached_for_the_next_run_until_the_folder_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let folder = tmp.path().join("many");
    // 20,010 files (20,000 is the fewest whose listing is cached): 100 real training images
    // and empty files, which one step of 8 is very unlikely to meet (--max-bad-images 1 allows
    // those it does).
    write_jpeg_folder(&folder, (100, 10), 28, false);
    let real = |class: usize| folder.join(format!("train/class_{class}"));
    for i in 0..19_900 {
        std::fs::write(real(i % 10).join(format!("z{i:05}.jpg")), b"").unwrap();
    }
    let cache = tmp.path().join("cache");
    let run = |name: &str| {
        dpt(&folder, &tmp.path().join(name), &["--model", "lenet", "--devices", "cpu:1"])
            .args(["--loader", "stream", "--max-steps", "1", "--batch-size", "8", "--max-bad-images", "1"])
            .env("XDG_CACHE_HOME", &cache)
            .ok()
    };
    let first = run("first");
    assert!(first.contains("20000 train"), "{first}");
    assert!(!first.contains("index from the cache"), "{first}");
    let second = run("second");
    assert!(second.contains("streamed, index from the cache"), "{second}");
    // An image added: its class folder changed, the folder is listed again.
    std::fs::write(real(3).join("new.jpg"), b"").unwrap();
    let third = run("third");
    assert!(!third.contains("index from the cache") && third.contains("20001 train"), "{third}");
}

/// Writes `data` (`[n, ...shape]` bytes or integers) as `path`.
fn npy<T: npyz::AutoSerialize + Copy>(path: &Path, shape: &[u64], data: &[T]) {
    use npyz::WriterBuilder;
    let file = std::fs::File::create(path).unwrap();
    let mut w = npyz::WriteOptions::new().default_dtype().shape(shape).writer(file).begin_nd().unwrap();
    w.extend(data.iter().copied()).unwrap();
    w.finish().unwrap();
}

#[test]
fn uint8_npy_arrays_stream_from_their_rows_to_the_resident_weights() {
    let tmp = tempfile::tempdir().unwrap();
    let data = common::subset(600, 100);
    let arrays = tmp.path().join("npy");
    std::fs::create_dir_all(&arrays).unwrap();
    // Channels-last [N, 32, 32, 3], as NumPy and Keras data sets store them.
    for (x, y, split) in [("x_train", "y_train", &data.train), ("x_test", "y_test", &data.test)] {
        let rows: Vec<u8> = (0..split.len()).flat_map(|i| tinted(split, i, 32).into_raw()).collect();
        npy(&arrays.join(format!("{x}.npy")), &[split.len() as u64, 32, 32, 3], &rows);
        npy(&arrays.join(format!("{y}.npy")), &[split.len() as u64], &split.labels);
    }
    let model = common::make_model("cnn", 3, tmp.path());
    let flags =
        ["--model", model.to_str().unwrap(), "--devices", "cpu:2", "--epochs", "2", "--batch-size", "100"];
    let flags = [&flags[..], &["--augment", "cifar", "--normalize", "0.4,0.3,0.6,0.3,0.2,0.2"]].concat();
    let (said, _) = resident_and_streamed(&arrays, tmp.path(), &flags, &[]);
    assert!(said.contains("NumPy arrays in"), "{said}");
    // Arrays hold no image to crop at its own size.
    let out = dpt(&arrays, &tmp.path().join("rrc"), &flags).args(["--augment", "imagenet"]).output();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs an image folder or WebDataset shards"));
}

#[test]
fn cifar_batches_and_raw_idx_files_stream_from_their_rows_to_the_resident_weights() {
    let tmp = tempfile::tempdir().unwrap();
    // 200 training images: the normalization measured on 256 streamed images is then measured
    // on all of them, as resident, so the two runs see the same inputs without --normalize.
    let data = common::subset(200, 60);
    let cifar = tmp.path().join("cifar");
    // CIFAR-10 records of the subset's tinted images, planar.
    common::write_cifar(&cifar, (&data.train, &data.test), |s, i| {
        let img = tinted(s, i, 32);
        (0..3).flat_map(|c| img.pixels().map(move |p| p[c])).collect()
    });
    let model = common::make_model("cnn", 3, tmp.path());
    let flags =
        ["--model", model.to_str().unwrap(), "--devices", "cpu:2", "--epochs", "2", "--batch-size", "50"];
    let (said, _) = resident_and_streamed(
        &cifar,
        &tmp.path().join("cifar-runs"),
        &[&flags[..], &["--augment", "cifar"]].concat(),
        &[],
    );
    assert!(said.contains("CIFAR-10 binary batches in"), "{said}");

    // The subset's IDX files uncompressed: streamed from their rows; gzip ones are read whole.
    let idx = tmp.path().join("idx");
    std::fs::create_dir_all(&idx).unwrap();
    for (prefix, split) in [("train", &data.train), ("t10k", &data.test)] {
        let Pixels::Bytes(images) = &split.images else { panic!("bytes") };
        let n = split.len() as u32;
        std::fs::write(idx.join(format!("{prefix}-images-idx3-ubyte")), encode_idx(&[n, 28, 28], images))
            .unwrap();
        let labels: Vec<u8> = split.labels.iter().map(|&l| l as u8).collect();
        std::fs::write(idx.join(format!("{prefix}-labels-idx1-ubyte")), encode_idx(&[n], &labels)).unwrap();
    }
    let lenet = ["--model", "lenet", "--devices", "cpu:2", "--epochs", "2", "--batch-size", "50"];
    let (said, _) = resident_and_streamed(&idx, &tmp.path().join("idx-runs"), &lenet, &[]);
    assert!(said.contains("IDX files in"), "{said}");
    let gz = common::subset_dir();
    let out = dpt(&gz, &tmp.path().join("gz"), &lenet).args(["--loader", "stream"]).output();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("gunzip the IDX files"), "{out:?}");
    // A truncated raw file is named before anything trains.
    let images = idx.join("train-images-idx3-ubyte");
    let bytes = std::fs::read(&images).unwrap();
    std::fs::write(&images, &bytes[..bytes.len() - 10]).unwrap();
    let out = dpt(&idx, &tmp.path().join("cut"), &lenet).args(["--loader", "stream"]).output();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is truncated"), "{out:?}");
}

#[test]
fn a_gray_first_image_does_not_make_a_colour_folder_gray_when_streamed() {
    let tmp = tempfile::tempdir().unwrap();
    let folder = tmp.path().join("mostly-colour");
    write_jpeg_folder(&folder, (200, 20), 32, true);
    let class = folder.join("train/class_0");
    let mut files: Vec<_> = std::fs::read_dir(&class).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let first = image::open(&files[0]).unwrap().to_luma8();
    first.save(&files[0]).unwrap();
    let model = common::make_model("pooled", 3, tmp.path());
    let flags = ["--model", model.to_str().unwrap(), "--devices", "cpu:1", "--loader", "stream"];
    let said = dpt(&folder, &tmp.path().join("run"), &flags).args(["--max-steps", "1"]).ok();
    assert!(said.contains("3x32x32"), "RGB, as all but one image: {said}");
}
