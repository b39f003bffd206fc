//! The data a run loaded against its settings: whether it streams as asked, the streaming
//! loader's depth and threads, and the images left out because they do not decode.

use anyhow::anyhow;
use dpt_tui::data::tokens::TokenLayout;
use dpt_tui::data::{Dataset, Loader};
use dpt_tui::engine::TrainConfig;
use dpt_tui::input::loader::LoaderConfig;

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
    if matches!(data.train.images, dpt_tui::data::Pixels::Tokens(_)) {
        // Windows are read where they lie, whatever the loader.
        return Ok(());
    }
    let images = match &data.train.images {
        dpt_tui::data::Pixels::Streamed(s) => s.raw.is_none(),
        _ => false,
    };
    let resized_crop = cfg.augment().resized_crop.is_some();
    if images || (data.train.images.is_streamed() && !resized_crop) {
        return Ok(());
    }
    if resized_crop {
        return Err(anyhow!(
            "--augment imagenet crops images of any size while streaming them, which needs an image folder or WebDataset shards; {} is read whole (use --augment cifar)",
            data.source
        ));
    }
    if cfg.settings.placement.loader == Loader::Stream {
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
    cfg: &TrainConfig,
    data: &Dataset,
    (total_replicas, cores): (usize, usize),
) -> anyhow::Result<LoaderConfig> {
    let p = &cfg.settings.placement;
    let per_replica = cfg.settings.replica_batch(total_replicas);
    let batch_bytes = (per_replica * data.train.sample_len()) as u64;
    let local = cfg.devices.len() as u64;
    let fits = p.data_memory / (batch_bytes * local).max(1);
    let wanted = p.prefetch;
    if data.train.images.is_streamed() && fits < 3 {
        let [c, h, w] = data.train.sample_shape();
        return Err(anyhow!(
            "--data-memory {} holds {fits} batches of {per_replica} images of {c}x{h}x{w} for each of {local} replicas, and streaming needs 3 (one queued, one decoding, one training); raise --data-memory or lower --batch-size",
            binary_size(p.data_memory)
        ));
    }
    let decode_threads = p.decode_threads.unwrap_or(cores.max(1));
    Ok(LoaderConfig {
        prefetch: wanted.min(fits.saturating_sub(2).max(1) as usize),
        decode_threads,
        eval_batch: cfg.settings.eval_batch(total_replicas),
    })
}

/// How token data is cut for this run (`None` without `--block-size`, which token data then
/// asks for): a training period's windows (`--eval-every` steps of `--batch-size`), the
/// evaluated windows (`--eval-batches` evaluation batches), and the seed.
pub fn token_layout(cfg: &TrainConfig) -> Option<TokenLayout> {
    let (d, r) = (&cfg.settings.data, &cfg.settings.recipe);
    let (every, _) = r.eval_periods(r.steps.unwrap_or(0));
    let eval_batch = cfg.settings.placement.eval_batch_size.map_or(r.batch_size, std::num::NonZeroUsize::get);
    d.block_size.map(|block| TokenLayout {
        dtype: d.token_dtype,
        block,
        train_windows: every * r.batch_size,
        val_windows: r.eval_batches * eval_batch,
        seed: r.seed,
    })
}

/// Token data is measured in steps and image data in epochs; the recipe's image settings do
/// not apply to tokens.
pub fn fits_token_data(cfg: &TrainConfig, data: &Dataset) -> anyhow::Result<()> {
    let tokens = matches!(data.train.images, dpt_tui::data::Pixels::Tokens(_));
    let r = &cfg.settings.recipe;
    let d = &cfg.settings.data;
    match tokens {
        false if r.steps.is_some() || r.eval_every.is_some() => Err(anyhow!(
            "--steps and --eval-every measure token-data runs; {} is image data, which runs --epochs",
            data.source
        )),
        _ if d.tokenizer.is_some() && data.text.is_none() => Err(anyhow!(
            "--tokenizer turns a folder of .txt files into tokens; {} is not text: drop it",
            data.source
        )),
        false if d.block_size.is_some() => {
            Err(anyhow!("--block-size cuts token data into windows; {} is image data: drop it", data.source))
        }
        true if r.steps.is_none() => Err(anyhow!(
            "token data has no epochs: give the run's length in optimizer steps with --steps N (and --eval-every M)"
        )),
        true if !cfg.augment().is_none() => Err(anyhow!("--augment, --crop-padding and --hflip are for images; drop them for token data")),
        true if d.val_fraction.is_some() || d.train_limit.is_some() || d.test_limit.is_some() => Err(anyhow!(
            "token data draws its windows from train.bin and evaluates windows of val.bin: drop --val-fraction, --train-limit and --test-limit (--eval-batches sets the evaluated windows)"
        )),
        _ => Ok(()),
    }
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
