//! The data a bench's cases train on: the folders `--data` gave, or synthetic data written
//! once into the scratch folder.

use std::path::{Path, PathBuf};

use super::synthetic;

/// Where each kind of data is: given (`--data`) or written into the scratch folder.
pub struct Data {
    pub images: PathBuf,
    /// The token folder `--data` gave.
    pub tokens: Option<PathBuf>,
    pub scratch: PathBuf,
}

impl Data {
    /// A token folder for a GPT of `vocab` ids: the given one when its ids fit the vocabulary,
    /// else random ids written once; the second value says why the given one was not taken.
    pub(super) fn tokens_for(&self, vocab: usize) -> std::io::Result<(PathBuf, Option<String>)> {
        let mut note = None;
        if let Some(t) = &self.tokens {
            match largest_id(t) {
                Ok(id) if (id as usize) < vocab => return Ok((t.clone(), None)),
                Ok(id) => {
                    note = Some(format!(
                        "synthetic tokens: the data's ids reach {id}, beyond this GPT's {vocab}"
                    ))
                }
                Err(e) => note = Some(format!("synthetic tokens: the data's train.bin does not read ({e})")),
            }
        }
        let dir = self.scratch.join(format!("tokens-{vocab}"));
        if !dir.is_dir() {
            std::fs::create_dir_all(&dir)?;
            synthetic::tokens(&dir, vocab)?;
        }
        Ok((dir, note))
    }
}

/// The largest id of a folder's `train.bin` and `val.bin` (u16), as dpt-tui's own check finds it.
fn largest_id(dir: &Path) -> Result<u32, String> {
    use dpt_tui::data::tokens::{TokenDtype, TokenFile};
    let mut most = 0;
    for name in ["train.bin", "val.bin"] {
        let file = TokenFile::open(&dir.join(name), TokenDtype::U16).map_err(|e| e.to_string())?;
        most = most.max(dpt_tui::data::token_scan::largest(&file).map_err(|e| e.to_string())?.id);
    }
    Ok(most)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_tokens_beyond_a_gpt_vocabulary_give_way_to_synthetic_ones() {
        let dir = tempfile::tempdir().expect("temp");
        let given = dir.path().join("given");
        std::fs::create_dir_all(&given).expect("dir");
        synthetic::tokens(&given, 1000).expect("tokens");
        let data = Data {
            images: dir.path().join("i"),
            tokens: Some(given.clone()),
            scratch: dir.path().to_owned(),
        };
        let (wide, note) = data.tokens_for(1000).expect("tokens");
        assert_eq!((wide, note), (given, None));
        let (narrow, note) = data.tokens_for(256).expect("tokens");
        assert_eq!(narrow, dir.path().join("tokens-256"));
        assert!(note.expect("said").starts_with("synthetic tokens: the data's ids reach 99"));
    }
}
