//! Model FLOP utilisation (MFU): the FLOPs a training step of the model needs, over the time it
//! took, against what the devices could do at most in the precision the run uses.
//!
//! A model's FLOPs are counted once, from one forward pass of its own operations (matrix
//! products, convolutions and attention, 2 per multiply-add, as PyTorch's `FlopCounterMode`
//! counts them); a training step is three forward passes' worth (the backward pass computes
//! the gradients of the inputs and of the weights, each as costly as the forward), as in the
//! PaLM paper's MFU (Chowdhery et al. 2022, appendix B) and nanoGPT's `estimate_mfu`.
//!
//! The peaks are NVIDIA's datasheet figures for dense arithmetic (the "with sparsity" figures
//! halved). A run in f32 is measured against the TF32 tensor cores' peak where the GPU has them:
//! that is what PyTorch reaches with `allow_tf32` on, so a run that multiplies in IEEE f32
//! shows the gap.

use serde::{Deserialize, Serialize};

use crate::model::Precision;

/// The dense peak FLOP/s of one GPU model, by number format.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuPeak {
    /// What the name reported by NVML must contain (matched as whole words, longest first).
    pub pattern: &'static str,
    /// The model's name in the tables.
    pub model: &'static str,
    /// IEEE f32 on the CUDA cores.
    pub f32: f64,
    /// TF32 on the tensor cores (absent before Ampere).
    pub tf32: Option<f64>,
    /// bfloat16 on the tensor cores, f32 accumulation (absent before Ampere).
    pub bf16: Option<f64>,
    /// float16 on the tensor cores, f32 accumulation.
    pub f16: f64,
    /// Where the figures come from.
    pub source: &'static str,
}

const T: f64 = 1e12;

/// Known GPUs. More specific patterns (`H100 NVL`, `L40S`) come before the ones they contain
/// (`H100`, `L4`); [`GpuPeak::find`] takes the first that matches.
pub const GPU_PEAKS: &[GpuPeak] = &[
    GpuPeak {
        pattern: "H100 NVL",
        model: "H100 NVL",
        f32: 60.0 * T,
        tf32: Some(417.5 * T),
        bf16: Some(835.5 * T),
        f16: 835.5 * T,
        source: "NVIDIA H100 Tensor Core GPU datasheet (TF32 835, BF16/FP16 1,671 TFLOPS with sparsity)",
    },
    GpuPeak {
        pattern: "H100 PCIe",
        model: "H100 PCIe",
        f32: 51.0 * T,
        tf32: Some(378.0 * T),
        bf16: Some(756.0 * T),
        f16: 756.0 * T,
        source: "NVIDIA H100 Tensor Core GPU datasheet (TF32 756, BF16/FP16 1,513 TFLOPS with sparsity)",
    },
    GpuPeak {
        pattern: "H200 NVL",
        model: "H200 NVL",
        f32: 60.0 * T,
        tf32: Some(417.5 * T),
        bf16: Some(835.5 * T),
        f16: 835.5 * T,
        source: "NVIDIA H200 datasheet (TF32 835, BF16/FP16 1,671 TFLOPS with sparsity)",
    },
    GpuPeak {
        pattern: "H200",
        model: "H200 SXM",
        f32: 67.0 * T,
        tf32: Some(494.5 * T),
        bf16: Some(989.5 * T),
        f16: 989.5 * T,
        source: "NVIDIA H200 datasheet (TF32 989, BF16/FP16 1,979 TFLOPS with sparsity)",
    },
    GpuPeak {
        pattern: "H100",
        model: "H100 SXM",
        f32: 67.0 * T,
        tf32: Some(494.5 * T),
        bf16: Some(989.5 * T),
        f16: 989.5 * T,
        source: "NVIDIA H100 Tensor Core GPU datasheet, SXM (TF32 989, BF16/FP16 1,979 TFLOPS with sparsity)",
    },
    GpuPeak {
        pattern: "A100",
        model: "A100",
        f32: 19.5 * T,
        tf32: Some(156.0 * T),
        bf16: Some(312.0 * T),
        f16: 312.0 * T,
        source: "NVIDIA A100 Tensor Core GPU datasheet (TF32 156, BF16/FP16 312 TFLOPS dense)",
    },
    GpuPeak {
        pattern: "L40S",
        model: "L40S",
        f32: 91.6 * T,
        tf32: Some(183.0 * T),
        bf16: Some(362.05 * T),
        f16: 362.05 * T,
        source: "NVIDIA L40S datasheet (TF32 366, BF16/FP16 733 TFLOPS with sparsity)",
    },
    GpuPeak {
        pattern: "L4",
        model: "L4",
        f32: 30.3 * T,
        tf32: Some(60.0 * T),
        bf16: Some(121.0 * T),
        f16: 121.0 * T,
        source: "NVIDIA L4 datasheet (TF32 120, BF16/FP16 242 TFLOPS with sparsity)",
    },
    GpuPeak {
        pattern: "A10",
        model: "A10",
        f32: 31.2 * T,
        tf32: Some(62.5 * T),
        bf16: Some(125.0 * T),
        f16: 125.0 * T,
        source: "NVIDIA A10 datasheet (TF32 62.5, BF16/FP16 125 TFLOPS dense)",
    },
    GpuPeak {
        pattern: "RTX 4090",
        model: "GeForce RTX 4090",
        f32: 82.6 * T,
        tf32: Some(82.6 * T),
        bf16: Some(165.2 * T),
        f16: 165.2 * T,
        source: "NVIDIA Ada Lovelace architecture whitepaper (TF32 82.6, BF16/FP16 with FP32 accumulate 165.2 TFLOPS dense)",
    },
    GpuPeak {
        pattern: "V100",
        model: "V100 SXM2",
        f32: 15.7 * T,
        tf32: None,
        bf16: None,
        f16: 125.0 * T,
        source: "NVIDIA V100 datasheet, SXM2 (FP32 15.7, tensor FP16 125 TFLOPS)",
    },
    GpuPeak {
        pattern: "T4",
        model: "T4",
        f32: 8.1 * T,
        tf32: None,
        bf16: None,
        f16: 65.0 * T,
        source: "NVIDIA T4 datasheet (FP32 8.1, mixed-precision FP16/FP32 65 TFLOPS)",
    },
];

/// Whether `pattern`'s words appear in `name` as whole words, in order (`L4` is not in
/// `L40S`, `A10` not in `A100-SXM4-80GB`).
fn has_words(name: &str, pattern: &str) -> bool {
    let words: Vec<&str> =
        name.split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| !w.is_empty()).collect();
    let want: Vec<&str> = pattern.split(' ').collect();
    words.windows(want.len()).any(|w| w.iter().zip(&want).all(|(a, b)| a.eq_ignore_ascii_case(b)))
}

impl GpuPeak {
    /// The peak table's entry for a GPU by the name NVML or CUDA reports
    /// (`NVIDIA H100 80GB HBM3`, `NVIDIA A100-SXM4-80GB`).
    pub fn find(name: &str) -> Option<&'static GpuPeak> {
        GPU_PEAKS.iter().find(|p| has_words(name, p.pattern))
    }

    /// The peak for a run in `precision`, and the format it is the peak of. An f32 run is
    /// measured against TF32 where the GPU has it and `tf32` lets it be used; a precision the
    /// GPU lacks has none.
    pub fn for_precision(&self, precision: Precision, tf32: bool) -> Option<(f64, &'static str)> {
        match precision {
            Precision::F32 => Some(self.tf32.filter(|_| tf32).map_or((self.f32, "f32"), |t| (t, "TF32"))),
            Precision::Bf16 => self.bf16.map(|b| (b, "bf16")),
            Precision::F16 => Some((self.f16, "f16")),
        }
    }
}

/// What a run's devices can do at most, all together, in the run's precision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PeakFlops {
    /// FLOP/s, summed over the run's GPUs (each counted once, however many replicas share it).
    pub flops: f64,
    /// In words: `TF32 peak of 2 x H100 SXM`.
    pub basis: String,
}

impl PeakFlops {
    /// The peak of `gpus` GPUs named `name` (all of one kind), or `None` for a GPU not in the
    /// table or a precision it lacks; `tf32`: f32 products may use TF32 (`--tf32`).
    pub fn of(name: &str, gpus: usize, precision: Precision, tf32: bool) -> Option<PeakFlops> {
        let peak = GpuPeak::find(name)?;
        let (flops, format) = peak.for_precision(precision, tf32)?;
        Some(PeakFlops {
            flops: flops * gpus as f64,
            basis: format!("{format} peak of {gpus} x {}", peak.model),
        })
    }
}

/// A model's FLOPs per sample and what a throughput makes of them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelFlops {
    /// FLOPs of one sample's forward pass.
    pub forward_per_sample: f64,
}

impl ModelFlops {
    /// FLOPs of one sample's training: the forward pass and a backward pass of twice its cost.
    pub fn train_per_sample(self) -> f64 {
        3.0 * self.forward_per_sample
    }

    /// The FLOP/s a training throughput of `samples_per_sec` achieves.
    pub fn achieved(self, samples_per_sec: f64) -> f64 {
        self.train_per_sample() * samples_per_sec
    }

    /// The achieved FLOP/s as a share of `peak` (0.41 for 41 %).
    pub fn utilisation(self, samples_per_sec: f64, peak: &PeakFlops) -> Option<f64> {
        (peak.flops > 0.0).then(|| self.achieved(samples_per_sec) / peak.flops)
    }
}

/// A FLOP/s figure in the unit that suits it: `405 TFLOP/s`, `38.2 GFLOP/s`.
pub fn rate_label(flops_per_sec: f64) -> String {
    let (value, unit) = match flops_per_sec {
        f if f >= 1e15 => (f / 1e15, "PFLOP/s"),
        f if f >= 1e12 => (f / 1e12, "TFLOP/s"),
        f if f >= 1e9 => (f / 1e9, "GFLOP/s"),
        f => (f / 1e6, "MFLOP/s"),
    };
    if value >= 100.0 {
        format!("{value:.0} {unit}")
    } else {
        format!("{value:.1} {unit}")
    }
}

/// The model's throughput in FLOPs, with the utilisation where the peak is known:
/// `MFU 41% (405 TFLOP/s)`, or `38.2 GFLOP/s` on a device without a peak.
pub fn mfu_label(model_flops: f64, mfu: Option<f64>) -> String {
    match mfu {
        Some(u) => format!("MFU {:.0}% ({})", u * 100.0, rate_label(model_flops)),
        None => rate_label(model_flops),
    }
}

/// nanoGPT's `estimate_mfu` count of a GPT's training FLOPs per token: 6 per parameter (the
/// position embedding left out) and 12·L·H·Q·T for attention's matrix products. Used to check
/// the counted FLOPs of a GPT.
pub fn gpt_flops_per_token(params_without_positions: f64, layers: f64, width: f64, block: f64) -> f64 {
    6.0 * params_without_positions + 12.0 * layers * width * block
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_as_nvml_reports_them_find_their_gpu() {
        let model = |n: &str| GpuPeak::find(n).map(|p| p.model);
        assert_eq!(model("NVIDIA H100 80GB HBM3"), Some("H100 SXM"));
        assert_eq!(model("NVIDIA H100 PCIe"), Some("H100 PCIe"));
        assert_eq!(model("NVIDIA H100 NVL"), Some("H100 NVL"));
        assert_eq!(model("NVIDIA H200"), Some("H200 SXM"));
        assert_eq!(model("NVIDIA A100-SXM4-80GB"), Some("A100"));
        assert_eq!(model("NVIDIA A100 80GB PCIe"), Some("A100"));
        assert_eq!(model("NVIDIA A10"), Some("A10"));
        assert_eq!(model("NVIDIA L40S"), Some("L40S"));
        assert_eq!(model("NVIDIA L4"), Some("L4"));
        assert_eq!(model("NVIDIA GeForce RTX 4090"), Some("GeForce RTX 4090"));
        assert_eq!(model("Tesla V100-SXM2-32GB"), Some("V100 SXM2"));
        assert_eq!(model("Tesla T4"), Some("T4"));
        assert_eq!(model("NVIDIA GeForce RTX 3060"), None);
        assert_eq!(model("cpu"), None);
    }

    #[test]
    fn a_run_is_measured_against_the_peak_of_its_precision_on_each_gpu_once() {
        let h100 = PeakFlops::of("NVIDIA H100 80GB HBM3", 2, Precision::Bf16, true).expect("known");
        assert_eq!(h100.flops, 2.0 * 989.5e12);
        assert_eq!(h100.basis, "bf16 peak of 2 x H100 SXM");
        let tf32 = PeakFlops::of("NVIDIA H100 80GB HBM3", 1, Precision::F32, true).expect("known");
        assert_eq!((tf32.flops, tf32.basis.as_str()), (494.5e12, "TF32 peak of 1 x H100 SXM"));
        let ieee = PeakFlops::of("NVIDIA H100 80GB HBM3", 1, Precision::F32, false).expect("known");
        assert_eq!(ieee.basis, "f32 peak of 1 x H100 SXM", "--tf32 off: measured against IEEE f32");
        let v100 = PeakFlops::of("Tesla V100-SXM2-16GB", 1, Precision::F32, true).expect("known");
        assert_eq!(v100.flops, 15.7e12, "no TF32 before Ampere: the f32 peak");
        assert_eq!(
            PeakFlops::of("Tesla V100-SXM2-16GB", 1, Precision::Bf16, true),
            None,
            "no bfloat16 there"
        );
    }

    #[test]
    fn utilisation_is_three_forward_passes_per_sample_over_the_peak() {
        let f = ModelFlops { forward_per_sample: 2e9 };
        let peak = PeakFlops { flops: 600e12, basis: String::new() };
        assert_eq!(f.achieved(1000.0), 6e12);
        assert_eq!(f.utilisation(50_000.0, &peak), Some(0.5));
        assert_eq!(mfu_label(3e14, Some(0.5)), "MFU 50% (300 TFLOP/s)");
        assert_eq!(mfu_label(3.82e10, None), "38.2 GFLOP/s");
        assert_eq!(rate_label(1.5e15), "1.5 PFLOP/s");
    }

    #[test]
    fn nanogpt_counts_gpt2_small_at_about_a_gigaflop_per_token() {
        // GPT-2 124M: 124.4 M parameters less 0.79 M of positions, 12 layers of 768, block 1024.
        let per_token = gpt_flops_per_token(123.6e6, 12.0, 768.0, 1024.0);
        assert!((per_token - 855.4e6).abs() < 1e6, "{per_token}");
    }
}
