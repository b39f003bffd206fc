//! How a run computes: the number format of its products, whether float32 products on GPUs use
//! TF32, and how the low formats are reached (the built-in models cast at their convolutions
//! and matrix products; a TorchScript model runs its forward under libtorch's autocast). One
//! place decides, sets libtorch's process-wide switch, and says it in the start record.

use dpt_core::settings::PrecisionSettings;

use crate::model::Precision;
use dpt_core::device::DeviceId;
use dpt_core::config_error::ConfigError;
use dpt_sys::c10d::{amp, C10dError};

/// The first device of `devices` that cannot run `--precision bf16`, by its compute capability
/// (`capability(i)` for `cuda:i`; unknown capabilities pass).
pub fn bf16_problem(
    precision: Precision,
    devices: &[DeviceId],
    capability: impl Fn(usize) -> Option<(i32, i32)>,
) -> Option<ConfigError> {
    if precision != Precision::Bf16 {
        return None;
    }
    devices.iter().find_map(|d| match d {
        DeviceId::Cuda(i) => capability(*i)
            .filter(|(major, _)| *major < 8)
            .map(|(major, minor)| ConfigError::Bf16Unsupported { device: d.to_string(), major, minor }),
        DeviceId::Cpu => None,
    })
}

/// The run's arithmetic, decided once at start.
#[derive(Debug, Clone, PartialEq)]
pub struct Math {
    format: Precision,
    /// `--tf32` as set.
    tf32: bool,
    /// The run has GPUs: the TF32 switch is set.
    gpus: bool,
    /// Some GPU of the run has TF32 (compute capability 8.0 or later; unknown counts as not).
    tf32_capable: bool,
    /// The forward runs under autocast (a TorchScript model) rather than the built-in casts.
    autocast: bool,
    loss_scaled: bool,
}

impl Math {
    /// The arithmetic of `precision` on `devices`, for a TorchScript model when `script`;
    /// `capability(i)` is `cuda:i`'s compute capability.
    pub fn of(
        precision: &PrecisionSettings,
        devices: &[DeviceId],
        script: bool,
        capability: impl Fn(usize) -> Option<(i32, i32)>,
    ) -> Math {
        let gpus: Vec<usize> = devices
            .iter()
            .filter_map(|d| match d {
                DeviceId::Cuda(i) => Some(*i),
                DeviceId::Cpu => None,
            })
            .collect();
        Math {
            format: precision.format,
            tf32: precision.tf32,
            gpus: !gpus.is_empty(),
            tf32_capable: gpus.iter().any(|i| capability(*i).is_some_and(|(major, _)| major >= 8)),
            autocast: script && precision.format != Precision::F32,
            loss_scaled: precision.loss_scaling().is_some(),
        }
    }

    /// Sets libtorch's TF32 switch for a run on GPUs (process-wide, before any replica starts);
    /// a CPU run leaves libtorch's defaults alone.
    pub fn apply(&self) -> Result<(), C10dError> {
        match self.gpus {
            true => amp::set_tf32(self.tf32),
            false => Ok(()),
        }
    }

    /// Whether float32 matrix products and convolutions run in TF32.
    pub fn uses_tf32(&self) -> bool {
        self.format == Precision::F32 && self.tf32 && self.tf32_capable
    }

    /// The start record's words for it.
    pub fn describe(&self) -> String {
        let low = |name: &str| {
            let how = match self.autocast {
                true => format!("{name} autocast"),
                false => format!("{name} convolutions and matrix products"),
            };
            let scaled = if self.loss_scaled { ", dynamic loss scale" } else { "" };
            format!("{how}, f32 weights and update{scaled}")
        };
        match self.format {
            Precision::F32 if self.uses_tf32() => "f32, TF32 matrix products and convolutions".to_owned(),
            Precision::F32 if self.gpus && self.tf32_capable => "f32 (IEEE, --tf32 off)".to_owned(),
            Precision::F32 => "f32".to_owned(),
            Precision::Bf16 => low("bf16"),
            Precision::F16 => low("f16"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn math(format: Precision, tf32: bool, devices: &[DeviceId], script: bool) -> Math {
        let settings = PrecisionSettings { format, tf32, ..PrecisionSettings::default() };
        // cuda:0 an H100 (sm90), cuda:1 a T4 (sm75), cuda:2 unknown.
        let capability = |i: usize| [Some((9, 0)), Some((7, 5)), None][i];
        Math::of(&settings, devices, script, capability)
    }

    #[test]
    fn tf32_is_used_for_f32_on_ampere_and_later_unless_turned_off() {
        let h100 = [DeviceId::Cuda(0)];
        assert!(math(Precision::F32, true, &h100, false).uses_tf32());
        assert_eq!(
            math(Precision::F32, true, &h100, false).describe(),
            "f32, TF32 matrix products and convolutions"
        );
        assert!(!math(Precision::F32, false, &h100, false).uses_tf32());
        assert_eq!(math(Precision::F32, false, &h100, false).describe(), "f32 (IEEE, --tf32 off)");
        assert!(!math(Precision::F32, true, &[DeviceId::Cuda(1)], false).uses_tf32(), "a T4 has none");
        assert!(!math(Precision::F32, true, &[DeviceId::Cuda(2)], false).uses_tf32(), "unknown: not said");
        assert!(!math(Precision::F32, true, &[DeviceId::Cpu], false).uses_tf32());
        assert_eq!(math(Precision::F32, true, &[DeviceId::Cpu], false).describe(), "f32");
        assert!(!math(Precision::Bf16, true, &h100, false).uses_tf32(), "bf16 products are not f32 ones");
    }

    #[test]
    fn a_torchscript_model_computes_low_formats_under_autocast() {
        assert_eq!(
            math(Precision::Bf16, true, &[DeviceId::Cpu], true).describe(),
            "bf16 autocast, f32 weights and update"
        );
        assert_eq!(
            math(Precision::F16, true, &[DeviceId::Cuda(0)], false).describe(),
            "f16 convolutions and matrix products, f32 weights and update, dynamic loss scale"
        );
    }

    #[test]
    fn bf16_needs_ampere_or_newer() {
        let caps = |i: usize| Some(if i == 0 { (9, 0) } else { (7, 5) });
        let gpus = [DeviceId::Cuda(0), DeviceId::Cuda(1)];
        let e = bf16_problem(Precision::Bf16, &gpus, caps).expect("a T4 (sm75) is refused");
        assert_eq!(e, ConfigError::Bf16Unsupported { device: "cuda:1".into(), major: 7, minor: 5 });
        assert!(e.to_string().contains("--precision f32"));
        assert!(bf16_problem(Precision::Bf16, &gpus[..1], caps).is_none(), "an H100 (sm90) runs bf16");
        assert!(bf16_problem(Precision::F32, &gpus, caps).is_none());
        assert!(bf16_problem(Precision::Bf16, &[DeviceId::Cpu], caps).is_none(), "the CPU has no such limit");
    }
}
