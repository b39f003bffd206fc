//! The data set resident on a replica's device, as stored (uint8 stays uint8), and its
//! normalization into the network's input on the device, batch by batch.

use tch::{Device, Kind, Tensor};

use crate::data::{Pixels, Split};
use crate::model::Normalization;

/// One split on the device: images `[n, C, H, W]` and int64 labels (or the split's targets,
/// `[n, …]`).
pub struct Resident {
    pub images: Tensor,
    pub labels: Tensor,
}

impl Resident {
    /// Copies `split` to `device` (streamed samples decoded first: for the few samples a
    /// check needs; the workers stream a streamed split instead).
    pub fn upload(split: &Split, device: Device) -> Resident {
        let decoded;
        let split = if split.images.is_streamed() {
            decoded = split.materialized();
            &decoded
        } else {
            split
        };
        let n = split.len() as i64;
        let [c, h, w] = split.sample_shape();
        let images = match &split.images {
            Pixels::Bytes(v) => Tensor::from_slice(v),
            Pixels::Floats(v) => Tensor::from_slice(v),
            Pixels::Streamed(_) | Pixels::Tokens(_) => Tensor::zeros([0], (tch::Kind::Uint8, Device::Cpu)),
        };
        Resident {
            images: images.view([n, c, h, w]).to_device(device),
            labels: match &split.targets {
                Some(t) => t.tensor().to_device(device),
                None => Tensor::from_slice(&split.labels).to_device(device),
            },
        }
    }
}

/// `(x · unit − mean) / std` per channel, where `unit` brings the stored values to `[0, 1]`
/// (1/255 for bytes); one fused multiply-add in place on the batch's fresh f32 copy.
pub enum Normalizer {
    /// Every channel alike: two scalar kernels (or one, without a shift).
    Scalar { scale: f64, shift: f64 },
    /// Per channel: `[1, C, 1, 1]` factors on the device.
    Channels { scale: Tensor, shift: Tensor },
}

impl Normalizer {
    /// The normalizer of `norm` (one value, or one per channel) for values stored in `unit`s.
    pub fn new(norm: &Normalization, unit: f64, channels: usize, device: Device) -> Normalizer {
        let at = |v: &[f64], c: usize| v.get(c).or(v.first()).copied().unwrap_or(0.0);
        let scale: Vec<f64> = (0..channels).map(|c| unit / at(&norm.std, c)).collect();
        let shift: Vec<f64> = (0..channels).map(|c| -at(&norm.mean, c) / at(&norm.std, c)).collect();
        if scale.windows(2).all(|w| w[0] == w[1]) && shift.windows(2).all(|w| w[0] == w[1]) {
            return Normalizer::Scalar { scale: scale[0], shift: shift[0] };
        }
        let column = |v: &[f64]| {
            Tensor::from_slice(&v.iter().map(|&x| x as f32).collect::<Vec<_>>())
                .view([1, channels as i64, 1, 1])
                .to_device(device)
        };
        Normalizer::Channels { scale: column(&scale), shift: column(&shift) }
    }

    /// The network's input for `raw` stored values, a new tensor: `raw` is left as it is
    /// (float data would otherwise be normalized in place, `to_kind` returning the tensor
    /// itself, and an evaluated view of a resident split normalized again at every evaluation).
    pub fn apply(&self, raw: &Tensor) -> Tensor {
        let mut x = raw.to_dtype(Kind::Float, false, true);
        match self {
            Normalizer::Scalar { scale, shift } => {
                let _ = x.g_mul_scalar_(*scale);
                if *shift != 0.0 {
                    let _ = x.g_add_scalar_(*shift);
                }
            }
            Normalizer::Channels { scale, shift } => {
                let _ = x.g_mul_(scale);
                let _ = x.g_add_(shift);
            }
        }
        x
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_and_floats_normalize_per_channel_as_written() {
        let norm = Normalization { mean: vec![0.5, 0.25], std: vec![0.5, 0.25] };
        let raw = Tensor::from_slice(&[255u8, 0, 51, 102]).view([1, 2, 1, 2]);
        let x = Normalizer::new(&norm, 1.0 / 255.0, 2, Device::Cpu).apply(&raw);
        let got = Vec::<f32>::try_from(x.reshape([-1])).unwrap();
        // Channel 0: (1 - 0.5) / 0.5, (0 - 0.5) / 0.5; channel 1: (0.2 - 0.25) / 0.25, (0.4 - 0.25) / 0.25.
        for (g, want) in got.iter().zip([1.0, -1.0, -0.2, 0.6]) {
            assert!((g - want).abs() < 1e-6, "{got:?}");
        }
        let one = Normalization { mean: vec![1.0], std: vec![2.0] };
        let raw = Tensor::from_slice(&[3.0f32, 5.0]).view([1, 1, 1, 2]);
        let normalizer = Normalizer::new(&one, 1.0, 1, Device::Cpu);
        let x = normalizer.apply(&raw);
        assert_eq!(Vec::<f32>::try_from(x.reshape([-1])).unwrap(), vec![1.0, 2.0]);
        // Float data stays as stored: a second evaluation of the same view gets the same input.
        let again = normalizer.apply(&raw.narrow(0, 0, 1));
        assert_eq!(Vec::<f32>::try_from(again.reshape([-1])).unwrap(), vec![1.0, 2.0]);
        assert_eq!(Vec::<f32>::try_from(raw.reshape([-1])).unwrap(), vec![3.0, 5.0]);
        assert!(matches!(Normalizer::new(&one, 1.0, 3, Device::Cpu), Normalizer::Scalar { .. }));
    }
}
