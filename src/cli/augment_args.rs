//! The augmentation flags: a preset, and the parts of it a user may change.

use super::values::{parse, OnOff};

#[derive(Debug, Clone, Default, clap::Args)]
pub struct AugmentArgs {
    /// Training-time augmentation: none; cifar (zero padding 4, random crop, horizontal flip, as
    /// torchvision's RandomCrop(padding=4) and RandomHorizontalFlip); or imagenet (torchvision's
    /// RandomResizedCrop to --image-size, 224 by default, and the flip; evaluation resizes and
    /// crops the centre; streams an image folder or WebDataset shards) [default: none, or a
    /// resumed run's own].
    #[arg(long, value_name = "none|cifar|imagenet", value_parser = parse::<dpt_tui::engine::augment::Preset>)]
    pub augment: Option<dpt_tui::engine::augment::Preset>,

    /// Random crop with this zero padding (0: none), over --augment's choice.
    #[arg(long, value_name = "P")]
    pub crop_padding: Option<u32>,

    /// Random horizontal flip (p = 0.5), over --augment's choice.
    #[arg(long, value_name = "on|off")]
    pub hflip: Option<OnOff>,
}
