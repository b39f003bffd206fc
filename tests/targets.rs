//! With `autotests = false` Cargo compiles only the `[[test]]` targets Cargo.toml lists: a file
//! of tests/ that is neither one of them nor a module reached from one is silently never run.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The files that `root`, a crate root or a `mod.rs`, declares as modules (`mod x;`,
/// `#[path = "…"] mod x;`, found beside it as rustc finds them), and those a `mod.rs` among
/// them declares in turn.
fn modules(root: &Path, found: &mut BTreeSet<PathBuf>) {
    let text = std::fs::read_to_string(root).unwrap_or_else(|e| panic!("{}: {e}", root.display()));
    let dir = root.parent().unwrap();
    let mut path_attr: Option<String> = None;
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("#[path = \"") {
            let (path, after) = rest.split_once("\"]").expect("a #[path] attribute");
            path_attr = Some(path.to_owned());
            if after.trim().is_empty() {
                continue;
            }
        }
        let decl = line.rsplit("] ").next().unwrap_or(line);
        let name =
            decl.strip_prefix("pub ").unwrap_or(decl).strip_prefix("mod ").and_then(|m| m.strip_suffix(';'));
        if let Some(name) = name {
            let file = match path_attr.take() {
                Some(p) => dir.join(p),
                None if dir.join(name).join("mod.rs").exists() => dir.join(name).join("mod.rs"),
                None => dir.join(format!("{name}.rs")),
            };
            if found.insert(file.clone()) && file.ends_with("mod.rs") {
                modules(&file, found);
            }
        } else if !line.starts_with("#[") {
            path_attr = None;
        }
    }
}

#[test]
fn every_file_of_tests_is_a_test_target_or_a_module_of_one() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cargo: toml::Table = std::fs::read_to_string(manifest.join("Cargo.toml")).unwrap().parse().unwrap();
    let targets: Vec<PathBuf> = cargo["test"]
        .as_array()
        .expect("[[test]] targets")
        .iter()
        .map(|t| manifest.join(t["path"].as_str().expect("each [[test]] names its path")))
        .collect();
    let mut reached = BTreeSet::new();
    for t in &targets {
        reached.insert(t.clone());
        modules(t, &mut reached);
    }
    assert!(reached.contains(&manifest.join("tests/targets.rs")), "this file is reached: {reached:#?}");
    let forgotten: Vec<String> = std::fs::read_dir(manifest.join("tests"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs") && !reached.contains(p))
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(
        forgotten.is_empty(),
        "never compiled (Cargo.toml has autotests = false): {}; add each to tests/suite.rs as \
         `#[path = \"NAME.rs\"] mod NAME;`, or as a [[test]] of Cargo.toml if it must have a process \
         of its own",
        forgotten.iter().map(|f| format!("tests/{f}")).collect::<Vec<_>>().join(", ")
    );
}
