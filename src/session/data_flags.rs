//! The data flags: which data a run trains on (from the command line, else the resumed run's
//! checkpoint), and the images left out because they do not decode.

use dpt_tui::data::DataSettings;

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
