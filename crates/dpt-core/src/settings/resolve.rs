//! The one way a run's settings are made, in one order: the model's defaults, under the
//! checkpoint being resumed or continued (less its placement), under a `--config` file's
//! tables, under the command line's flags. Each layer is a partial tree (TOML values: they
//! hold NaN and infinities, which are refused as such, and absent values are no values); a
//! later one replaces the values it names. A file naming a key the tree lacks is refused with
//! the key and the file; so is a flags layer (a flag serialized under another name than its key).

use std::path::{Path, PathBuf};

use serde_json::Map;
use toml::Value;

use super::{ModelChoice, Settings, SettingsError};
use crate::optim::OptimizerKind;

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
    Ok((flat, Value::Table(tables)))
}

/// A value's partial tree (its absent values left out); refused where TOML cannot hold a value
/// (an integer above 2^63 - 1, a path that is not UTF-8).
pub fn layer<T: serde::Serialize>(value: &T) -> Result<Value, SettingsError> {
    Value::try_from(value)
        .map_err(|e| SettingsError::Value(format!("a setting a settings file cannot hold: {e}")))
}

/// The layers a run's settings are resolved from.
#[derive(Debug, Default)]
pub struct Layers<'a> {
    /// The settings of the run being resumed or continued.
    pub checkpoint: Option<&'a Settings>,
    pub file: Option<&'a ConfigFile>,
    /// The command line's flags as a partial tree (flags not given are absent), see [`layer`].
    pub flags: Option<Value>,
}

/// `v[section][key]`, if present.
fn at(v: &Value, section: &str, key: &str) -> Option<Value> {
    v.get(section).and_then(|s| s.get(key)).cloned()
}

impl Layers<'_> {
    /// Whether a layer sets `section.key`: the flags, the file, or a resumed run's settings
    /// (which were sized or asked for that run). Otherwise the key is its default.
    pub fn asks(&self, section: &str, key: &str) -> bool {
        self.checkpoint.is_some()
            || self.flags.as_ref().is_some_and(|f| at(f, section, key).is_some())
            || self.file.is_some_and(|f| at(&f.tree, section, key).is_some())
    }

    /// The settings these layers give, with what follows from them filled in (absolute paths;
    /// the random-resized crop's streaming and default size).
    pub fn resolve(&self) -> Result<Settings, SettingsError> {
        if let Some(f) = self.file {
            // The file alone over the defaults first, so what it gets wrong is named as its.
            let mut v = layer(&Settings::default())?;
            merge(&mut v, f.tree.clone());
            read_tree(v, true).map_err(|message| SettingsError::File { path: f.path.clone(), message })?;
        }
        if let Some(flags) = &self.flags {
            // The flags alone over the defaults, as strictly as a file: a flag serialized under
            // a name the tree lacks is a bug of the flags' definitions, never a flag dropped.
            let mut v = layer(&Settings::default())?;
            merge(&mut v, flags.clone());
            read_tree(v, true).map_err(|m| SettingsError::Value(format!("the command line's flags: {m}")))?;
        }
        let asked = {
            let mut v = Value::Table(Default::default());
            if let Some(f) = self.file {
                merge(&mut v, f.tree.clone());
            }
            if let Some(flags) = &self.flags {
                merge(&mut v, flags.clone());
            }
            v
        };
        let mut over = Value::Table(Default::default());
        if let Some(ckpt) = self.checkpoint {
            if let Some(kind) = at(&asked, "optimizer", "kind") {
                let kind: OptimizerKind =
                    kind.try_into().map_err(|e: toml::de::Error| SettingsError::Value(e.to_string()))?;
                if kind != ckpt.optimizer.kind {
                    return Err(SettingsError::OtherOptimizer { was: ckpt.optimizer.kind, asked: kind });
                }
            }
            let mut v = layer(ckpt)?;
            if let Some(m) = v.as_table_mut() {
                m.remove("placement");
            }
            if at(&asked, "recipe", "augment").is_some() {
                // A preset asked for replaces the run's augmentation, refinements included.
                if let Some(r) = v.get_mut("recipe").and_then(Value::as_table_mut) {
                    r.remove("crop_padding");
                    r.remove("hflip");
                }
            }
            merge(&mut over, v);
        }
        merge(&mut over, asked.clone());
        let model: ModelChoice = match at(&over, "model", "name") {
            Some(name) => {
                name.try_into().map_err(|e: toml::de::Error| SettingsError::Value(e.message().to_owned()))?
            }
            None => ModelChoice::default(),
        };
        let kind = match at(&over, "optimizer", "kind") {
            Some(k) => k.try_into().map_err(|e: toml::de::Error| SettingsError::Value(e.to_string()))?,
            None => OptimizerKind::Sgd,
        };
        let mut full = layer(&Settings::defaults(model.kind(), kind))?;
        merge(&mut full, over);
        let mut s = read_tree(full, false).map_err(SettingsError::Value)?;
        let scaling_asked =
            ["loss_scale_init", "loss_scale_interval"].iter().any(|k| at(&asked, "precision", k).is_some());
        if scaling_asked && s.precision.loss_scaling().is_none() {
            return Err(SettingsError::LossScaleOff);
        }
        // Absolute, so a checkpoint resumed from another folder finds its data and weights.
        s.data.path = std::path::absolute(&s.data.path).unwrap_or(s.data.path);
        if let ModelChoice::File(path) = &mut s.model.name {
            *path = std::path::absolute(&*path).unwrap_or_else(|_| path.clone());
        }
        for path in [&mut s.model.init_from, &mut s.data.tokenizer].into_iter().flatten() {
            *path = std::path::absolute(&*path).unwrap_or_else(|_| path.clone());
        }
        fit_to_augmentation(&mut s)?;
        if let Some(steps) = s.recipe.steps {
            if at(&asked, "recipe", "epochs").is_some() && at(&asked, "recipe", "steps").is_some() {
                return Err(SettingsError::StepsAndEpochs);
            }
            // A run measured in steps is cut into evaluation periods, the engine's epochs.
            s.recipe.epochs = s.recipe.eval_periods(steps).1;
        }
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

/// A whole tree from its TOML form, an error naming the key where it fails; `strict`: a key
/// the tree lacks is an error too (a file's), else it is left out (a record or checkpoint of a
/// later version, which may have settings this one does not know).
fn read_tree(v: Value, strict: bool) -> Result<Settings, String> {
    let mut unknown = Vec::new();
    let mut note = |path: serde_ignored::Path| unknown.push(path.to_string());
    let read = serde_path_to_error::deserialize(serde_ignored::Deserializer::new(v, &mut note));
    let tree: Settings = read.map_err(|e: serde_path_to_error::Error<toml::de::Error>| {
        let at = e.path().to_string();
        let message = e.inner().message().trim();
        if at == "." || at.is_empty() {
            message.to_owned()
        } else {
            format!("{at}: {message}")
        }
    })?;
    match unknown.first() {
        Some(key) if strict => Err(format!(
            "unknown key '{key}'; the keys are the settings tree's, as `dpt-tui --help` groups them"
        )),
        _ => Ok(tree),
    }
}

/// `base` with `top`'s values over it, tables merged key by key.
fn merge(base: &mut Value, top: Value) {
    match (base, top) {
        (Value::Table(b), Value::Table(t)) => {
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

/// `key = the run's value in the run, this command's in this command` for each setting of
/// what a run computes that differs between `run` and `command`: their placement and
/// checkpoint cadence may differ between attempts, and so may the epochs (a longer run, as a
/// resume may train further).
pub fn differences(run: &Settings, command: &Settings) -> Vec<String> {
    let comparable = |s: &Settings| {
        let mut s = s.effective();
        s.placement = Default::default();
        s.checkpoints = Default::default();
        s.recipe.epochs = 0;
        flat(&serde_json::to_value(&s).expect("settings serialize"))
    };
    let (theirs, ours) = (comparable(run), comparable(command));
    let mut keys: Vec<&String> = theirs.keys().chain(ours.keys()).collect();
    keys.sort();
    keys.dedup();
    let find = |leaves: &Map<String, serde_json::Value>, k: &str| {
        leaves.get(k).map_or_else(|| "unset".to_owned(), serde_json::Value::to_string)
    };
    keys.into_iter()
        .filter_map(|k| {
            let (a, b) = (find(&theirs, k), find(&ours, k));
            (a != b).then(|| format!("{k} = {a} in the run, {b} in this command"))
        })
        .collect()
}

/// The leaves of a tree, keyed `section.key` (absent values left out).
pub fn flat(v: &serde_json::Value) -> Map<String, serde_json::Value> {
    fn walk(prefix: &str, v: &serde_json::Value, out: &mut Map<String, serde_json::Value>) {
        match v {
            serde_json::Value::Null => {}
            serde_json::Value::Object(m) => {
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
    use crate::augment::Preset;
    use crate::model::ModelKind;

    fn file(text: &str) -> (tempfile::TempDir, ConfigFile) {
        let dir = tempfile::tempdir().expect("test set-up");
        let path = dir.path().join("run.toml");
        std::fs::write(&path, text).expect("test set-up");
        let f = ConfigFile::read(&path).expect("test set-up");
        (dir, f)
    }

    #[test]
    fn a_key_is_asked_by_a_flag_a_file_or_a_resumed_run_else_it_is_the_default() {
        let key = ("checkpoints", "snapshots");
        assert!(!Layers::default().asks(key.0, key.1));
        let flags: Value = toml::from_str("[checkpoints]\nsnapshots = 1").expect("toml");
        assert!(Layers { flags: Some(flags.clone()), ..Layers::default() }.asks(key.0, key.1));
        assert!(!Layers { flags: Some(flags), ..Layers::default() }.asks("checkpoints", "keep"));
        let (_dir, f) = file("[checkpoints]\nsnapshots = 0\n");
        assert!(Layers { file: Some(&f), ..Layers::default() }.asks(key.0, key.1));
        let resumed = Settings::default();
        assert!(Layers { checkpoint: Some(&resumed), ..Layers::default() }.asks(key.0, key.1));
    }

    #[test]
    fn layers_apply_in_order() {
        let mut ckpt = Settings::defaults(ModelKind::Resnet18, OptimizerKind::Sgd);
        ckpt.recipe.seed = 7;
        ckpt.recipe.label_smoothing = 0.1;
        ckpt.placement.devices = "cpu:4".into();
        let (_d, f) = file("[recipe]\nseed = 8\nclip_grad_norm = 2.0\n[optimizer]\nlr = 0.5\n");
        let flags: Value = toml::from_str("[optimizer]\nlr = 0.25\n").expect("test set-up");
        let s = Layers { checkpoint: Some(&ckpt), file: Some(&f), flags: Some(flags) }
            .resolve()
            .expect("resolves");
        assert_eq!(s.model_kind(), ModelKind::Resnet18, "the checkpoint's model");
        assert_eq!(s.recipe.label_smoothing, 0.1, "the checkpoint over the defaults");
        assert_eq!((s.recipe.seed, s.recipe.clip_grad_norm), (8, Some(2.0)), "the file over the checkpoint");
        assert_eq!(s.optimizer.lr, 0.25, "the flags over the file");
        assert_eq!(s.optimizer.momentum, ckpt.optimizer.momentum, "a flag not given is no value");
        let nan = Layers {
            flags: Some(toml::from_str("[optimizer]\nlr = nan\n").expect("test set-up")),
            ..Default::default()
        };
        assert!(
            nan.resolve().expect("resolves").optimizer.lr.is_nan(),
            "NaN stays NaN, for validate to refuse"
        );
        assert_eq!(s.placement.devices, "auto", "a checkpoint carries no placement");
    }

    #[test]
    fn a_file_naming_an_unknown_key_is_refused_with_the_key_and_the_file() {
        let (_d, f) = file("[optimizer]\nlrr = 0.1\n");
        let e = Layers { file: Some(&f), ..Default::default() }.resolve().expect_err("refused");
        let text = e.to_string();
        assert!(text.contains("run.toml") && text.contains("optimizer.lrr"), "{text}");
        let (_d, f) = file("[optimiser]\nlr = 0.1\n");
        let text =
            Layers { file: Some(&f), ..Default::default() }.resolve().expect_err("refused").to_string();
        assert!(text.contains("optimiser"), "{text}");
        let (_d, f) = file("[recipe]\nepochs = \"ten\"\n");
        let text =
            Layers { file: Some(&f), ..Default::default() }.resolve().expect_err("refused").to_string();
        assert!(text.contains("recipe.epochs"), "{text}");
    }

    #[test]
    fn a_flags_layer_naming_a_key_the_tree_lacks_is_refused_not_dropped() {
        let flags = Some(toml::from_str("[optimizer]\nlearning_rate = 0.1\n").expect("test set-up"));
        let e = Layers { flags, ..Default::default() }.resolve().expect_err("refused");
        assert!(e.to_string().contains("optimizer.learning_rate"), "{e}");
    }

    #[test]
    fn another_optimizer_than_the_checkpoints_is_refused() {
        let ckpt = Settings::defaults(ModelKind::Lenet, OptimizerKind::Sgd);
        let flags = toml::from_str("[optimizer]\nkind = \"adam\"\n").expect("test set-up");
        let e = Layers { checkpoint: Some(&ckpt), flags: Some(flags), ..Default::default() }
            .resolve()
            .expect_err("refused");
        assert!(e.to_string().contains("--optimizer sgd"), "{e}");
    }

    #[test]
    fn loss_scaling_settings_without_loss_scaling_are_refused_unless_the_run_scales() {
        let flags = || Some(toml::from_str("[precision]\nloss_scale_init = 4.0\n").expect("test set-up"));
        let e = Layers { flags: flags(), ..Default::default() }.resolve().expect_err("refused");
        assert_eq!(e, SettingsError::LossScaleOff);
        let mut scaled = Settings::default();
        scaled.precision.loss_scale = Some(true);
        let s = Layers { checkpoint: Some(&scaled), flags: flags(), ..Default::default() }
            .resolve()
            .expect("resolves");
        assert_eq!(s.precision.loss_scaling().map(|l| l.init), Some(4.0));
        let mut off = Settings::default();
        (off.precision.loss_scale, off.precision.loss_scale_init) = (Some(true), Some(8.0));
        let flags = Some(toml::from_str("[precision]\nloss_scale = false\n").expect("test set-up"));
        assert!(
            Layers { checkpoint: Some(&off), flags, ..Default::default() }.resolve().is_ok(),
            "the run's own settings are not asked for"
        );
    }

    #[test]
    fn an_augmentation_preset_asked_for_replaces_the_runs_refinements() {
        let mut ckpt = Settings::default();
        (ckpt.recipe.augment, ckpt.recipe.crop_padding, ckpt.recipe.hflip) =
            (Some(Preset::Cifar), Some(2), Some(false));
        let flags = Some(toml::from_str("[recipe]\naugment = \"none\"\n").expect("test set-up"));
        let s = Layers { checkpoint: Some(&ckpt), flags, ..Default::default() }.resolve().expect("resolves");
        assert!(s.recipe.augmentation().is_none(), "{:?}", s.recipe);
        let s = Layers { checkpoint: Some(&ckpt), ..Default::default() }.resolve().expect("resolves");
        assert_eq!(s.recipe.augmentation().crop_padding, Some(2), "kept without a preset asked for");
    }

    #[test]
    fn a_later_versions_setting_is_left_out_of_a_record_but_refused_in_a_file() {
        let mut v = layer(&Settings::default()).expect("test set-up");
        merge(&mut v, toml::from_str("[recipe]\nwarmup_tokens = 5\n").expect("test set-up"));
        assert!(read_tree(v.clone(), false).is_ok());
        assert!(read_tree(v, true).expect_err("refused").contains("recipe.warmup_tokens"));
    }

    #[test]
    fn values_toml_cannot_hold_are_an_error_not_a_panic() {
        let mut s = Settings::default();
        s.recipe.seed = u64::MAX;
        assert!(matches!(layer(&s), Err(SettingsError::Value(_))));
    }

    #[test]
    fn choosing_adam_drops_sgds_momentum_from_the_defaults() {
        let flags = toml::from_str("model = { name = \"resnet18\" }\noptimizer = { kind = \"adamw\" }\n")
            .expect("test set-up");
        let s = Layers { flags: Some(flags), ..Default::default() }.resolve().expect("resolves");
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
        same.recipe.hflip = Some(false);
        same.precision.loss_scale = Some(false);
        assert!(differences(&run, &same).is_empty(), "a default given is the default");
        let mut other = run.clone();
        other.optimizer.lr = 0.3;
        other.recipe.ema = Some(0.9);
        assert_eq!(
            differences(&run, &other),
            [
                "optimizer.lr = 0.2 in the run, 0.3 in this command",
                "recipe.ema = unset in the run, 0.9 in this command"
            ]
        );
    }
}
