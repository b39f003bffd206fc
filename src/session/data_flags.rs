//! The data flags: which data a run trains on (from the command line, else the resumed run's
//! checkpoint), how it is loaded (resident or streamed), and the images left out because they
//! do not decode.

use anyhow::anyhow;
use dpt_tui::data::{DataSettings, Dataset, Loader};
use dpt_tui::engine::augment::Augment;
use dpt_tui::engine::loader::LoaderConfig;
use dpt_tui::engine::TrainConfig;

use crate::cli::Args;

/// The data flags, each from the command line, else the resumed run's checkpoint, else the
/// default.
pub fn data_settings(args: &Args, saved: Option<DataSettings>) -> DataSettings {
    let saved = saved.unwrap_or_default();
    DataSettings {
        // Absolute, so a checkpoint resumed from another folder finds its data.
        path: args.data.clone().map_or(saved.path, |p| std::path::absolute(&p).unwrap_or(p)),
        format: args.data_format.or(saved.format),
        image_size: args.image_size.or(saved.image_size),
        train_limit: args.train_limit.or(saved.train_limit),
        test_limit: args.test_limit.or(saved.test_limit),
        val_fraction: args.val_fraction.or(saved.val_fraction),
        max_bad: args.max_bad_images.unwrap_or(saved.max_bad),
        loader: args.loader.loader.unwrap_or(saved.loader),
        memory: args.loader.data_memory.unwrap_or(saved.memory),
    }
}

/// The random-resized crop decodes each image at its own size, so it streams: `--loader auto`
/// becomes stream, `--loader resident` is refused; the crop's size is `--image-size`, else 224.
pub fn fit_to_augmentation(data: &mut DataSettings, augment: &Augment) -> anyhow::Result<()> {
    if augment.resized_crop.is_none() {
        return Ok(());
    }
    match data.loader {
        Loader::Resident => {
            return Err(anyhow!(
                "--augment imagenet crops every image at its own size while training, which the streaming loader does; drop --loader resident"
            ))
        }
        Loader::Auto | Loader::Stream => data.loader = Loader::Stream,
    }
    data.image_size = data.image_size.or(Some((224, 224)));
    Ok(())
}

/// `bytes` in binary units: `160.0 KiB`, `8.0 MiB`, `2.0 GiB`.
fn binary_size(bytes: u64) -> String {
    let units = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let step = ((bytes.max(1).ilog2() / 10) as usize).min(units.len() - 1);
    match step {
        0 => format!("{bytes} bytes"),
        _ => format!("{:.1} {}", bytes as f64 / (1u64 << (10 * step)) as f64, units[step]),
    }
}

/// Only image folders, shards, folders of uint8 `.npy` arrays, CIFAR-10 batches and
/// uncompressed IDX files stream (the other formats are read whole), and the random-resized crop needs images of their own size: a folder or
/// shards, streamed.
pub fn streams_as_asked(cfg: &TrainConfig, data: &Dataset) -> anyhow::Result<()> {
    let images = match &data.train.images {
        dpt_tui::data::Pixels::Streamed(s) => s.raw.is_none(),
        _ => false,
    };
    if images || (data.train.images.is_streamed() && cfg.augment.resized_crop.is_none()) {
        return Ok(());
    }
    if cfg.augment.resized_crop.is_some() {
        return Err(anyhow!(
            "--augment imagenet crops images of any size while streaming them, which needs an image folder or WebDataset shards; {} is read whole (use --augment cifar)",
            data.source
        ));
    }
    if cfg.data.loader == Loader::Stream {
        return Err(anyhow!(
            "--loader stream reads image folders, WebDataset shards, folders of uint8 .npy arrays, CIFAR-10 batches and uncompressed IDX files; {} is read whole: drop --loader stream (or gunzip the IDX files)",
            data.source
        ));
    }
    Ok(())
}

/// The streaming loader's queue depth, decode threads and evaluation batch: `(prefetch + 2)`
/// batches per replica of the process (the queue, the one being decoded, the one training)
/// must fit in `--data-memory`, the depth lowered to fit and refused below one.
pub fn loader_config(
    args: &Args,
    cfg: &TrainConfig,
    data: &Dataset,
    (total_replicas, cores): (usize, usize),
) -> anyhow::Result<LoaderConfig> {
    let per_replica = cfg.batch_size.div_ceil(total_replicas.max(1));
    let batch_bytes = (per_replica * data.train.sample_len()) as u64;
    let local = cfg.devices.len() as u64;
    let fits = cfg.data.memory / (batch_bytes * local).max(1);
    let wanted = args.loader.prefetch.unwrap_or(LoaderConfig::default().prefetch);
    if wanted == 0 {
        return Err(anyhow!("--prefetch must be at least 1"));
    }
    if data.train.images.is_streamed() && fits < 3 {
        let [c, h, w] = data.train.sample_shape();
        return Err(anyhow!(
            "--data-memory {} holds {fits} batches of {per_replica} images of {c}x{h}x{w} for each of {local} replicas, and streaming needs 3 (one queued, one decoding, one training); raise --data-memory or lower --batch-size",
            binary_size(cfg.data.memory)
        ));
    }
    let decode_threads = match args.loader.decode_threads {
        Some(0) => return Err(anyhow!("--decode-threads must be at least 1")),
        Some(n) => n,
        None => cores.max(1),
    };
    Ok(LoaderConfig {
        prefetch: wanted.min(fits.saturating_sub(2).max(1) as usize),
        decode_threads,
        eval_batch: per_replica.max(1),
    })
}

/// Says which images were left out because they do not decode (the first ten, then a count).
pub fn warn_skipped(skipped: &[String]) {
    const SHOWN: usize = 10;
    for s in skipped.iter().take(SHOWN) {
        eprintln!("dpt-tui: warning: skipped an image that does not decode: {s}");
    }
    if skipped.len() > SHOWN {
        eprintln!("dpt-tui: warning: {} more images that do not decode were skipped", skipped.len() - SHOWN);
    }
}
