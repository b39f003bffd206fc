//! The one way a run's settings are made, in one order: the model's defaults, under the
//! checkpoint being resumed or continued (less its placement), under a `--config` file's
//! tables, under the command line's flags. Each layer is a partial tree; a later one replaces
//! the values it names. A file naming a key the tree lacks is refused with the key and the file.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::{ModelChoice, Settings, SettingsError};
use crate::engine::optim::OptimizerKind;

/// The tables of a `--config` file: a partial settings tree. (Its top-level `key = value`
/// lines are flags, read with the command line.)
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigFile {
    pub path: PathBuf,
    tree: Value,
}

impl ConfigFile {
    /// Reads `path`'s tables (`[optimizer]`, `[recipe]`, …).
    pub fn read(path: &Path) -> Result<ConfigFile, SettingsError> {
        let (_, tree) = read_parts(path)?;
        Ok(ConfigFile { path: path.to_owned(), tree })
    }
}

/// A configuration file's flat `key = value` lines (flags by their long names) and its tables
/// (the settings tree), apart.
pub fn read_parts(path: &Path) -> Result<(toml::Table, Value), SettingsError> {
    let bad = |message: String| SettingsError::File { path: path.to_owned(), message };
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| bad(e.message().to_owned()))?;
    let (tables, flat): (toml::Table, toml::Table) = table.into_iter().partition(|(_, v)| v.is_table());
    let tree = serde_json::to_value(tables).map_err(|e| bad(e.to_string()))?;
    Ok((flat, tree))
}

/// The layers a run's settings are resolved from.
#[derive(Debug, Default)]
pub struct Layers<'a> {
    /// The settings of the run being resumed or continued.
    pub checkpoint: Option<&'a Settings>,
    pub file: Option<&'a ConfigFile>,
    /// The command line's flags as a partial tree (flags not given are absent or null).
    pub flags: Value,
}

impl Layers<'_> {
    /// The settings these layers give, with what follows from them filled in (absolute data
    /// path; the random-resized crop's streaming and default size).
    pub fn resolve(&self) -> Result<Settings, SettingsError> {
        let mut over = Value::Object(Map::new());
        if let Some(ckpt) = self.checkpoint {
            let mut v = without_nulls(serde_json::to_value(ckpt).expect("settings serialize"));
            if let Some(m) = v.as_object_mut() {
                m.remove("placement");
            }
            merge(&mut over, v);
        }
        let asked = {
            let mut v = Value::Object(Map::new());
            if let Some(f) = self.file {
                merge(&mut v, f.tree.clone());
            }
            merge(&mut v, without_nulls(self.flags.clone()));
            v
        };
        if let (Some(ckpt), Some(kind)) = (self.checkpoint, asked.pointer("/optimizer/kind")) {
            let kind: OptimizerKind = serde_json::from_value(kind.clone()).map_err(|e| SettingsError::Value(e.to_string()))?;
            if kind != ckpt.optimizer.kind {
                return Err(SettingsError::OtherOptimizer { was: ckpt.optimizer.kind, asked: kind });
            }
        }
        merge(&mut over, asked);
        let model: ModelChoice = match over.pointer("/model/name").and_then(Value::as_str) {
            Some(name) => name.parse().map_err(SettingsError::Value)?,
            None => ModelChoice::default(),
        };
        let kind = match over.pointer("/optimizer/kind") {
            Some(k) => serde_json::from_value(k.clone()).map_err(|e| SettingsError::Value(e.to_string()))?,
            None => OptimizerKind::Sgd,
        };
        let mut full = without_nulls(serde_json::to_value(Settings::defaults(model.kind(), kind)).expect("settings serialize"));
        if let Some(f) = self.file {
            // The file alone over the defaults, so what it gets wrong is named as its.
            let mut v = full.clone();
            merge(&mut v, f.tree.clone());
            read_tree(v).map_err(|message| SettingsError::File { path: f.path.clone(), message })?;
        }
        merge(&mut full, over);
        let mut s = read_tree(full).map_err(SettingsError::Value)?;
        s.data.path = std::path::absolute(&s.data.path).unwrap_or(s.data.path);
        fit_to_augmentation(&mut s)?;
        Ok(s)
    }
}

/// The random-resized crop decodes each image at its own size, so it streams: loader `auto`
/// becomes `stream`, `resident` is refused; the crop's size is the image size, else 224.
fn fit_to_augmentation(s: &mut Settings) -> Result<(), SettingsError> {
    use crate::data::Loader;
    if s.recipe.augmentation().resized_crop.is_none() {
        return Ok(());
    }
    match s.placement.loader {
        Loader::Resident => return Err(SettingsError::ResizedCropResident),
        Loader::Auto | Loader::Stream => s.placement.loader = Loader::Stream,
    }
    s.data.image_size = s.data.image_size.or(Some((224, 224)));
    Ok(())
}

/// A whole tree from its JSON form, an error naming the key where it fails.
fn read_tree(v: Value) -> Result<Settings, String> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let at = e.path().to_string();
        if at == "." || at.is_empty() {
            e.inner().to_string()
        } else {
            format!("{at}: {}", e.inner())
        }
    })
}

/// `base` with `top`'s values over it, tables merged key by key.
fn merge(base: &mut Value, top: Value) {
    match (base, top) {
        (Value::Object(b), Value::Object(t)) => {
            for (k, v) in t {
                match b.get_mut(&k) {
                    Some(slot) => merge(slot, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (slot, v) => *slot = v,
    }
}

/// `v` without its null values (absent settings), recursively.
pub(super) fn without_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => {
            Value::Object(m.into_iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k, without_nulls(v))).collect())
        }
        other => other,
    }
}

/// `key = the run's value in the run, this command's in this command` for each setting of
/// what a run computes that differs between `run` and `command`: their placement and
/// checkpoint cadence may differ between attempts, and so may the epochs (a longer run, as a
/// resume may train further).
pub fn differences(run: &Settings, command: &Settings) -> Vec<String> {
    let comparable = |s: &Settings| {
        let mut s = s.clone();
        s.placement = Default::default();
        s.checkpoints = Default::default();
        s.recipe.epochs = 0;
        flat(&without_nulls(serde_json::to_value(&s).expect("settings serialize")))
    };
    let (theirs, ours) = (comparable(run), comparable(command));
    let mut keys: Vec<&String> = theirs.keys().chain(ours.keys()).collect();
    keys.sort();
    keys.dedup();
    let find = |leaves: &Map<String, Value>, k: &str| leaves.get(k).map_or_else(|| "unset".to_owned(), Value::to_string);
    keys.into_iter()
        .filter_map(|k| {
            let (a, b) = (find(&theirs, k), find(&ours, k));
            (a != b).then(|| format!("{k} = {a} in the run, {b} in this command"))
        })
        .collect()
}

/// The leaves of a tree, keyed `section.key`.
pub fn flat(v: &Value) -> Map<String, Value> {
    fn walk(prefix: &str, v: &Value, out: &mut Map<String, Value>) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                    walk(&key, v, out);
                }
            }
            leaf => {
                out.insert(prefix.to_owned(), leaf.clone());
            }
        }
    }
    let mut out = Map::new();
    walk("", v, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelKind;

    fn file(text: &str) -> (tempfile::TempDir, ConfigFile) {
        let dir = tempfile::tempdir().expect("test set-up");
        let path = dir.path().join("run.toml");
        std::fs::write(&path, text).expect("test set-up");
        let f = ConfigFile::read(&path).expect("test set-up");
        (dir, f)
    }

    #[test]
    fn layers_apply_in_order() {
        let mut ckpt = Settings::defaults(ModelKind::Resnet18, OptimizerKind::Sgd);
        ckpt.recipe.seed = 7;
        ckpt.recipe.label_smoothing = 0.1;
        ckpt.placement.devices = "cpu:4".into();
        let (_d, f) = file("[recipe]\nseed = 8\nclip_grad_norm = 2.0\n[optimizer]\nlr = 0.5\n");
        let flags = serde_json::json!({"optimizer": {"lr": 0.25, "momentum": null}});
        let s = Layers { checkpoint: Some(&ckpt), file: Some(&f), flags }.resolve().expect("resolves");
        assert_eq!(s.model_kind(), ModelKind::Resnet18, "the checkpoint's model");
        assert_eq!(s.recipe.label_smoothing, 0.1, "the checkpoint over the defaults");
        assert_eq!((s.recipe.seed, s.recipe.clip_grad_norm), (8, Some(2.0)), "the file over the checkpoint");
        assert_eq!(s.optimizer.lr, 0.25, "the flags over the file");
        assert_eq!(s.optimizer.momentum, ckpt.optimizer.momentum, "a flag not given is no value");
        assert_eq!(s.placement.devices, "auto", "a checkpoint carries no placement");
    }

    #[test]
    fn a_file_naming_an_unknown_key_is_refused_with_the_key_and_the_file() {
        let (_d, f) = file("[optimizer]\nlrr = 0.1\n");
        let e = Layers { file: Some(&f), ..Default::default() }.resolve().expect_err("refused");
        let text = e.to_string();
        assert!(text.contains("run.toml") && text.contains("optimizer") && text.contains("lrr"), "{text}");
        let (_d, f) = file("[optimiser]\nlr = 0.1\n");
        let text = Layers { file: Some(&f), ..Default::default() }.resolve().expect_err("refused").to_string();
        assert!(text.contains("optimiser"), "{text}");
        let (_d, f) = file("[recipe]\nepochs = \"ten\"\n");
        let text = Layers { file: Some(&f), ..Default::default() }.resolve().expect_err("refused").to_string();
        assert!(text.contains("recipe.epochs"), "{text}");
    }

    #[test]
    fn another_optimizer_than_the_checkpoints_is_refused() {
        let ckpt = Settings::defaults(ModelKind::Lenet, OptimizerKind::Sgd);
        let flags = serde_json::json!({"optimizer": {"kind": "adam"}});
        let e = Layers { checkpoint: Some(&ckpt), flags, ..Default::default() }.resolve().expect_err("refused");
        assert!(e.to_string().contains("--optimizer sgd"), "{e}");
    }

    #[test]
    fn choosing_adam_drops_sgds_momentum_from_the_defaults() {
        let flags = serde_json::json!({"model": {"name": "resnet18"}, "optimizer": {"kind": "adamw"}});
        let s = Layers { flags, ..Default::default() }.resolve().expect("resolves");
        assert_eq!((s.optimizer.kind, s.optimizer.momentum), (OptimizerKind::AdamW, 0.0));
        assert_eq!(s.recipe.batch_size, ModelKind::Resnet18.defaults().batch_size);
    }

    #[test]
    fn differences_leave_out_placement_cadence_and_length() {
        let run = Settings::defaults(ModelKind::Lenet, OptimizerKind::Sgd);
        let mut same = run.clone();
        same.placement.devices = "cpu:2".into();
        same.checkpoints.keep = 3;
        same.recipe.epochs += 5;
        assert!(differences(&run, &same).is_empty());
        let mut other = run.clone();
        other.optimizer.lr = 0.3;
        other.recipe.ema = Some(0.9);
        assert_eq!(
            differences(&run, &other),
            ["optimizer.lr = 0.2 in the run, 0.3 in this command", "recipe.ema = unset in the run, 0.9 in this command"]
        );
    }
}
