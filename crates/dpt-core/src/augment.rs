//! Which augmentations training applies (`--augment`, `--crop-padding`, `--hflip`), by name
//! and by part; the engine draws and applies them (`input::augment`, `input::resized_crop`).

use serde::{Deserialize, Serialize};

/// Which augmentations training applies (`--augment`, `--crop-padding`, `--hflip`).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Augment {
    /// `RandomCrop` with this zero padding (absent: no crop).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crop_padding: Option<u32>,
    /// `RandomHorizontalFlip(p=0.5)`.
    #[serde(default)]
    pub hflip: bool,
    /// `RandomResizedCrop` to the image size, in the streaming loader's threads (evaluation:
    /// resize + centre crop).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resized_crop: Option<ResizedCrop>,
}

/// A named set of augmentations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Preset {
    /// None: today's results stay.
    None,
    /// The CIFAR recipe: pad 4, random crop, horizontal flip.
    Cifar,
    /// The ImageNet recipe: random-resized crop + flip; evaluation resize + centre crop.
    Imagenet,
}

impl Preset {
    pub fn augment(self) -> Augment {
        match self {
            Preset::None => Augment::default(),
            Preset::Cifar => Augment { crop_padding: Some(4), hflip: true, resized_crop: None },
            Preset::Imagenet => {
                Augment { crop_padding: None, hflip: true, resized_crop: Some(Default::default()) }
            }
        }
    }
}

impl Augment {
    pub fn is_none(&self) -> bool {
        self.crop_padding.is_none() && !self.hflip && self.resized_crop.is_none()
    }

    /// Whether the device applies anything (the random-resized crop is the loader's).
    pub fn on_device(&self) -> bool {
        self.crop_padding.is_some() || self.hflip
    }

    /// The augmentations in words (`random crop (padding 4) + horizontal flip`).
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(c) = self.resized_crop {
            parts.push(format!(
                "random-resized crop (scale {}-{}, ratio {:.3}-{:.3})",
                c.scale.0, c.scale.1, c.ratio.0, c.ratio.1
            ));
        }
        if let Some(p) = self.crop_padding {
            parts.push(format!("random crop (padding {p})"));
        }
        if self.hflip {
            parts.push("horizontal flip".to_owned());
        }
        if parts.is_empty() {
            "none".to_owned()
        } else {
            parts.join(" + ")
        }
    }
}

/// The crop's parameters (torchvision's defaults: scale (0.08, 1), ratio (3/4, 4/3)).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ResizedCrop {
    /// The share of the image's area the region covers, drawn uniformly in this range.
    pub scale: (f64, f64),
    /// The region's width / height, drawn log-uniformly in this range.
    pub ratio: (f64, f64),
}

/// The share of the resized image the evaluation's centre crop keeps (224 of 256, as the
/// ImageNet references do).
pub const CROP_SHARE: f64 = 0.875;

impl Default for ResizedCrop {
    fn default() -> Self {
        ResizedCrop::new()
    }
}

impl ResizedCrop {
    /// torchvision's defaults.
    pub fn new() -> ResizedCrop {
        ResizedCrop { scale: (0.08, 1.0), ratio: (3.0 / 4.0, 4.0 / 3.0) }
    }
}

crate::names!(Preset, "augmentation", { None => "none", Cifar => "cifar", Imagenet => "imagenet" });
