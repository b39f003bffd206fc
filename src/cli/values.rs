//! The values the flags take: models, losses, switches, backends, sizes and pairs.

use std::path::PathBuf;

use dpt_tui::model::ModelKind;

/// A value the library knows how to read (the names live beside the types, not here).
pub(super) fn parse<T: std::str::FromStr<Err = String>>(s: &str) -> Result<T, String> {
    s.parse()
}

/// `--betas B1,B2`.
pub(super) fn parse_betas(s: &str) -> Result<(f64, f64), String> {
    let bad = || format!("'{s}' is not two numbers B1,B2 such as 0.9,0.999");
    let (a, b) = s.split_once(',').ok_or_else(bad)?;
    Ok((a.trim().parse().map_err(|_| bad())?, b.trim().parse().map_err(|_| bad())?))
}

/// `--model`: a built-in model's name, or a TorchScript file.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelArg {
    Builtin(ModelKind),
    File(PathBuf),
}

impl std::str::FromStr for ModelArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if let Ok(kind) = s.parse::<ModelKind>() {
            return Ok(ModelArg::Builtin(kind));
        }
        let looks_like_file = s.contains('/')
            || [".pt", ".pth", ".ts", ".torchscript"].iter().any(|ext| s.ends_with(ext))
            || std::path::Path::new(s).is_file();
        if looks_like_file {
            Ok(ModelArg::File(PathBuf::from(s)))
        } else {
            Err(format!(
                "unknown model '{s}'; use lenet, resnet18, mnist-net or the path of a TorchScript file"
            ))
        }
    }
}

impl ModelArg {
    /// The name every rank of a run must agree on.
    pub fn name(&self) -> String {
        match self {
            ModelArg::Builtin(kind) => kind.name().to_owned(),
            ModelArg::File(path) => path.display().to_string(),
        }
    }
}

/// `--loss`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossArg(pub dpt_tui::model::LossKind);

impl std::str::FromStr for LossArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cross-entropy" => Ok(LossArg(dpt_tui::model::LossKind::CrossEntropy)),
            "nll" => Ok(LossArg(dpt_tui::model::LossKind::Nll)),
            _ => Err(format!("unknown loss '{s}'; use cross-entropy or nll")),
        }
    }
}

/// `--image-size H,W`.
pub(super) fn parse_size(s: &str) -> Result<(u32, u32), String> {
    let bad = || format!("--image-size takes H,W in pixels (such as 32,32), got '{s}'");
    let (h, w) = s.split_once(',').ok_or_else(bad)?;
    let (h, w): (u32, u32) = (h.trim().parse().map_err(|_| bad())?, w.trim().parse().map_err(|_| bad())?);
    if h == 0 || w == 0 || h > 4096 || w > 4096 {
        return Err(bad());
    }
    Ok((h, w))
}

/// `--data-memory`: bytes, with an optional K, M, G or T (binary: 2G is 2 GiB).
pub(super) fn parse_bytes(s: &str) -> Result<u64, String> {
    let bad = || format!("'{s}' is not a size such as 512M or 8G");
    let t = s.trim().trim_end_matches(['B', 'b']).trim_end_matches(['i']);
    let (digits, shift) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 10),
        Some('M') => (&t[..t.len() - 1], 20),
        Some('G') => (&t[..t.len() - 1], 30),
        Some('T') => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    let n: f64 = digits.trim().parse().map_err(|_| bad())?;
    if !(n.is_finite() && n > 0.0) {
        return Err(bad());
    }
    Ok((n * (1u64 << shift) as f64) as u64)
}

/// A yes/no flag value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

/// The collective backend across processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DistBackend {
    Auto,
    Gloo,
    Nccl,
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn sizes_read_with_binary_suffixes() {
        assert_eq!(parse_bytes("512M"), Ok(512 << 20));
        assert_eq!(parse_bytes("2G"), Ok(2 << 30));
        assert_eq!(parse_bytes("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert!(parse_bytes("lots").is_err() && parse_bytes("0").is_err());
    }
}
