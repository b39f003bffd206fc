//! Property tests: the IDX reader and the theme loader take any input without panicking, and
//! accept exactly what is well formed.

use std::path::Path;

use dpt_tui::dashboard::theme::Theme;
use dpt_tui::data::idx::{encode_idx, parse_idx};
use proptest::prelude::*;

const KEYS: &[&str] = &[
    "text",
    "dim",
    "border",
    "title",
    "accent",
    "train_loss",
    "train_acc",
    "test_acc",
    "test_loss",
    "lr",
    "lr_mark",
    "pause_mark",
    "util",
    "memory",
    "running",
    "paused",
    "finished",
    "failed",
    "warning",
    "error",
    "highlight_fg",
    "highlight_bg",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn idx_never_panics_and_ok_means_consistent(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        if let Ok(a) = parse_idx(&bytes, Path::new("fuzz")) {
            let n: u64 = a.dims.iter().map(|&d| u64::from(d)).product();
            prop_assert_eq!(a.data.len() as u64, n);
            prop_assert_eq!(bytes.len(), 4 + 4 * a.dims.len() + a.data.len());
        }
    }

    #[test]
    fn idx_round_trips(dims in proptest::collection::vec(1u32..6, 1..4), seed in any::<u8>()) {
        let n: u32 = dims.iter().product();
        let data: Vec<u8> = (0..n).map(|i| (i as u8).wrapping_mul(seed)).collect();
        let bytes = encode_idx(&dims, &data);
        let a = parse_idx(&bytes, Path::new("p")).unwrap();
        prop_assert_eq!(&a.dims, &dims);
        prop_assert_eq!(&a.data, &data);
        // Any truncation is refused.
        let cut = bytes.len() - 1;
        prop_assert!(parse_idx(&bytes[..cut], Path::new("p")).is_err());
    }

    #[test]
    fn theme_loader_never_panics(text in "\\PC{0,200}") {
        let _ = Theme::from_toml("fuzz", &text);
    }

    #[test]
    fn theme_lines_never_panic(lines in proptest::collection::vec((0..KEYS.len(), "[a-z#0-9 \"=\\[\\]]{0,12}"), 0..8)) {
        let text: String = lines.iter().map(|(k, v)| format!("{} = {v}\n", KEYS[*k])).collect();
        let _ = Theme::from_toml("fuzz", &text);
    }

    #[test]
    fn partial_valid_themes_load(picks in proptest::collection::vec((0..KEYS.len(), 0u8..=255, any::<bool>()), 0..10)) {
        let mut seen = std::collections::HashSet::new();
        let mut text = String::new();
        for (k, v, hex) in picks {
            if seen.insert(k) {
                let value = if hex { format!("\"#{v:02x}{v:02x}{v:02x}\"") } else { format!("\"{v}\"") };
                text.push_str(&format!("{} = {value}\n", KEYS[k]));
            }
        }
        prop_assert!(Theme::from_toml("mine", &text).is_ok(), "{}", text);
    }
}
