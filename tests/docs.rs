//! The documentation: `docs/reference/` is what the code generates today (`dpt-tui reference`),
//! every `DPT_` variable the code reads is on its environment page, and every relative link of
//! README.md and docs/ reaches a file and, with an `#anchor`, a heading in it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

const REGENERATE: &str =
    "regenerate with `DPT_BLESS_DOCS=1 cargo test --test suite -- docs::` (or `dpt-tui reference docs/reference`) and commit";

fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> =
        std::fs::read_dir(dir).expect("docs/ reads").map(|e| e.expect("docs/ reads").path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            markdown_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
}

#[test]
fn the_reference_is_what_the_code_generates() {
    let fresh = tempfile::tempdir().expect("test set-up");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_dpt-tui"))
        .arg("reference")
        .arg(fresh.path())
        .status()
        .expect("dpt-tui runs");
    assert!(status.success(), "dpt-tui reference failed: {status}");
    let committed = root().join("docs/reference");
    let names = |dir: &Path| -> BTreeSet<String> {
        std::fs::read_dir(dir)
            .map(|d| d.map(|e| e.expect("reads").file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default()
    };
    if std::env::var_os("DPT_BLESS_DOCS").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(&committed).expect("docs/reference is writable");
        for stale in names(&committed).difference(&names(fresh.path())) {
            std::fs::remove_file(committed.join(stale)).expect("docs/reference is writable");
        }
        for name in names(fresh.path()) {
            std::fs::copy(fresh.path().join(&name), committed.join(&name))
                .expect("docs/reference is writable");
        }
        return;
    }
    assert_eq!(
        names(&committed),
        names(fresh.path()),
        "docs/reference/ holds other pages than generated: {REGENERATE}"
    );
    for name in names(fresh.path()) {
        let want = std::fs::read_to_string(fresh.path().join(&name)).expect("generated page reads");
        let have = std::fs::read_to_string(committed.join(&name)).expect("committed page reads");
        if want != have {
            let line = want
                .lines()
                .zip(have.lines())
                .position(|(a, b)| a != b)
                .map_or_else(|| want.lines().count().min(have.lines().count()) + 1, |i| i + 1);
            panic!("docs/reference/{name} is stale (first difference at line {line}): {REGENERATE}");
        }
    }
}

/// Every `DPT_…` name in the code, the build scripts and the set-up scripts.
fn dpt_names_in_code() -> BTreeSet<String> {
    let mut files = Vec::new();
    fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for e in entries {
            let path = e.expect("reads").path();
            if path.is_dir() {
                walk(&path, files);
            } else {
                files.push(path);
            }
        }
    }
    let root = root();
    for dir in ["src", "crates", ".ci", "python/dpt_tui"] {
        walk(&root.join(dir), &mut files);
    }
    files.push(root.join("build.rs"));
    let mut names = BTreeSet::new();
    for file in files {
        // The reference's own table is what is checked, not a place that reads a variable; the
        // C++ shims' `DPT_` names are macros.
        let cpp = file.extension().is_some_and(|e| ["cpp", "h", "cc", "hpp"].iter().any(|x| e == *x));
        if cpp
            || file.ends_with("src/cli/reference.rs")
            || file.components().any(|c| c.as_os_str() == "target")
        {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&file) else { continue };
        let mut rest = text.as_str();
        while let Some(i) = rest.find("DPT_") {
            let tail = &rest[i..];
            let len = tail
                .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
                .unwrap_or(tail.len());
            let name = &tail[..len];
            if name.len() > 4 && !name.ends_with('_') {
                names.insert(name.to_owned());
            }
            rest = &tail[len..];
        }
    }
    names
}

#[test]
fn every_dpt_variable_is_on_the_environment_page() {
    let page = std::fs::read_to_string(root().join("docs/reference/environment.md")).expect("the page reads");
    let listed: BTreeSet<String> = page
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`').map(|(name, _)| name.to_owned()))
        .filter(|name| name.starts_with("DPT_"))
        .collect();
    let mut used = dpt_names_in_code();
    used.insert("DPT_BLESS_DOCS".to_owned()); // read by this test
    let missing: Vec<_> = used.difference(&listed).collect();
    let gone: Vec<_> = listed.difference(&used).collect();
    assert!(missing.is_empty(), "read by the code, missing from ENVIRONMENT in src/cli/reference.rs: {missing:?}; add them, then {REGENERATE}");
    assert!(gone.is_empty(), "on the environment page, read nowhere: {gone:?}; drop them from ENVIRONMENT in src/cli/reference.rs, then {REGENERATE}");
}

/// GitHub's anchor for a heading: lowercase, punctuation dropped, spaces as hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The text of `markdown` outside fenced code blocks.
fn outside_code_blocks(markdown: &str) -> Vec<&str> {
    let mut fenced = false;
    markdown
        .lines()
        .filter(|l| {
            if l.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// The anchors of a Markdown file's headings, numbered as GitHub numbers repeats.
fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in outside_code_blocks(markdown) {
        let Some(text) = line.strip_prefix('#') else { continue };
        let text = text.trim_start_matches('#');
        if !text.starts_with(' ') {
            continue;
        }
        // A link in a heading counts by its text.
        let plain = text.replace("](", "]\u{0}(");
        let plain: String = plain
            .split('\u{0}')
            .enumerate()
            .map(|(i, part)| {
                if i == 0 {
                    part.to_owned()
                } else {
                    part.split_once(')').map_or(part, |(_, r)| r).to_owned()
                }
            })
            .collect();
        let base = slug(&plain);
        let mut anchor = base.clone();
        let mut n = 0;
        while out.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        out.insert(anchor);
    }
    out
}

/// The targets of the inline links and images in `markdown` (code spans and blocks left out).
fn links(markdown: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in outside_code_blocks(markdown) {
        let text: String = line.split('`').enumerate().filter(|(i, _)| i % 2 == 0).map(|(_, s)| s).collect();
        let mut rest = text.as_str();
        while let Some(i) = rest.find("](") {
            let tail = &rest[i + 2..];
            let end = tail.find(')').unwrap_or(tail.len());
            out.push(tail[..end].trim().to_owned());
            rest = &tail[end..];
        }
    }
    out
}

#[test]
fn every_link_of_the_readme_and_docs_resolves() {
    let root = root();
    let mut files = vec![root.join("README.md")];
    markdown_files(&root.join("docs"), &mut files);
    assert!(files.len() > 10, "docs/ holds the documentation: {files:?}");
    let mut broken = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("a page reads");
        let shown = file.strip_prefix(&root).unwrap_or(file).display().to_string();
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = link.split_once('#').map_or((link.as_str(), None), |(p, a)| (p, Some(a)));
            let target =
                if path.is_empty() { file.clone() } else { file.parent().expect("a folder").join(path) };
            if !target.exists() {
                broken.push(format!("{shown}: {link}: no such file"));
                continue;
            }
            if let Some(anchor) = anchor {
                let Ok(target_text) = std::fs::read_to_string(&target) else {
                    broken.push(format!("{shown}: {link}: not a page with headings"));
                    continue;
                };
                if !anchors(&target_text).contains(anchor) {
                    broken.push(format!("{shown}: {link}: no heading with that anchor"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn anchors_follow_github() {
    assert_eq!(
        slug("Cluster jobs: requeue, restarts, preemption"),
        "cluster-jobs-requeue-restarts-preemption"
    );
    assert_eq!(slug("Measure a machine: `dpt-tui bench`"), "measure-a-machine-dpt-tui-bench");
    assert_eq!(slug("`[recipe]`: Recipe"), "recipe-recipe");
    let page = "# A\n\n## Two\n\n```sh\n# not a heading\n```\n\n## Two\n";
    assert_eq!(anchors(page), ["a", "two", "two-1"].map(String::from).into());
    assert_eq!(links("see [x](a.md#b) and `[y](not-a-link)` ![p](img.png)"), ["a.md#b", "img.png"]);
}
