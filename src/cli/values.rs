//! The values the flags take: models, losses, switches, backends, sizes and pairs.

use dpt_core::model::Normalization;

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

/// `--hflip`, `--channels-last`, `--loss-scale`: on or off.
pub(super) fn parse_on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("'{s}' is neither on nor off")),
    }
}

/// `--normalize MEAN,STD` (every channel) or `M1,…,MC,S1,…,SC` (C means, then C stds).
pub(super) fn parse_normalize(text: &str) -> Result<Normalization, String> {
    let bad = || {
        format!("--normalize takes MEAN,STD or one mean per channel then one std per channel (such as 0.49,0.48,0.45,0.25,0.24,0.26), got '{text}'")
    };
    let values: Vec<f64> =
        text.split(',').map(|v| v.trim().parse().map_err(|_| bad())).collect::<Result<_, _>>()?;
    if values.len() < 2 || values.len() % 2 != 0 {
        return Err(bad());
    }
    let (mean, std) = values.split_at(values.len() / 2);
    if !(mean.iter().all(|m| m.is_finite()) && std.iter().all(|s| s.is_finite() && *s > 0.0)) {
        return Err(format!("--normalize needs finite means and positive stds, got '{text}'"));
    }
    Ok(Normalization { mean: mean.to_vec(), std: std.to_vec() })
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
