//! The C++ shims' one header, `csrc/dpt_api.h`, against the Rust side: every `extern "C"`
//! declaration of a `dpt_*` function under `src/c10d/` has the header's parameters and
//! return type (C types mapped to Rust's, pointer by pointer, constness included), every
//! function the header declares is declared in Rust, and every `dpt_*` function the C++ files
//! define is in the header. (The C++ compiler checks the definitions against the header: each
//! file includes it.)

use std::collections::BTreeMap;
use std::path::Path;

/// A function's parameter types and return type, in Rust's spelling.
type Signature = (Vec<String>, String);

/// A C type in Rust's spelling: `const char* const*` is `*const *const c_char`.
fn rust_type(c: &str) -> String {
    let spaced = c.replace('*', " * ");
    let tokens: Vec<&str> = spaced.split_whitespace().collect();
    let mut base_const = false;
    let mut base = String::new();
    let mut pointee_const = Vec::new();
    let mut i = 0;
    while i < tokens.len() && tokens[i] != "*" {
        match tokens[i] {
            "const" => base_const = true,
            t => base = t.to_owned(),
        }
        i += 1;
    }
    pointee_const.push(base_const);
    while i < tokens.len() {
        assert_eq!(tokens[i], "*", "C type '{c}'");
        let constant = tokens.get(i + 1) == Some(&"const");
        pointee_const.push(constant);
        i += if constant { 2 } else { 1 };
    }
    let base = match base.as_str() {
        "int" => "i32",
        "int64_t" => "i64",
        "uint64_t" => "u64",
        "uint16_t" => "u16",
        "uint8_t" => "u8",
        "size_t" => "usize",
        "float" => "f32",
        "double" => "f64",
        "char" => "c_char",
        "void" if pointee_const.len() > 1 => "c_void",
        "void" => "()",
        "dpt_tensor" => "CTensor",
        "dpt_store" => "RawStore",
        "dpt_group" => "RawGroup",
        "dpt_work" => "RawWork",
        "dpt_event" => "RawEvent",
        "dpt_stream_guard" => "RawStreamGuard",
        "dpt_own_stream" => "RawOwnStream",
        "dpt_graph" => "RawGraph",
        "dpt_module" => "RawModule",
        "dpt_rng_scope" => "RawScope",
        "dpt_flops" => "RawFlops",
        "dpt_autocast" => "RawAutocast",
        "dpt_grad_fn" => "GradFn",
        "dpt_drop_fn" => "DropFn",
        other => panic!("no Rust spelling for C type '{other}' in '{c}'"),
    };
    let stars = pointee_const.len() - 1;
    let mut out = String::new();
    for level in (0..stars).rev() {
        out += if pointee_const[level] { "*const " } else { "*mut " };
    }
    out + base
}

/// `a, b(c, d), e` split at the top-level commas.
fn split_top(s: &str) -> Vec<String> {
    let (mut parts, mut depth, mut cur) = (Vec::new(), 0, String::new());
    for ch in s.chars() {
        match ch {
            '(' | '<' => depth += 1,
            ')' | '>' if !cur.ends_with('-') => depth -= 1,
            ',' if depth == 0 => {
                parts.push(cur.trim().to_owned());
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(ch);
    }
    if !cur.trim().is_empty() {
        parts.push(cur.trim().to_owned());
    }
    parts
}

/// The header's prototypes: `ret dpt_name(type name, ...);`.
fn header(text: &str) -> BTreeMap<String, Signature> {
    let mut out = BTreeMap::new();
    let code: String =
        text.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join(" ");
    for proto in code.split(';') {
        let proto = proto.trim();
        if proto.contains("typedef") || !proto.contains("dpt_") {
            continue;
        }
        let Some(name_end) = proto.find('(') else { continue };
        let head = &proto[..name_end];
        let open = head.rfind([' ', '*']).map_or(0, |i| i + 1);
        let ret = head[..open].rsplit("#endif").next().unwrap().trim();
        let name = head[open..].trim().to_owned();
        if !name.starts_with("dpt_") {
            continue;
        }
        let params = &proto[name_end + 1..proto.rfind(')').unwrap()];
        let types = split_top(params)
            .iter()
            .map(|p| {
                // The parameter's name is its last word.
                let cut = p.rfind(['*', ' ']).expect("a named parameter");
                rust_type(&p[..=cut])
            })
            .collect();
        out.insert(name, (types, rust_type(ret)));
    }
    out
}

/// The Rust `extern "C"` declarations of `dpt_*` functions in `text`.
fn rust_decls(text: &str) -> Vec<(String, Signature)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("    fn dpt_") {
        let decl_start = at + 7;
        let end = decl_start + rest[decl_start..].find(';').unwrap();
        let decl = rest[decl_start..end].split_whitespace().collect::<Vec<_>>().join(" ");
        rest = &rest[end..];
        let open = decl.find('(').unwrap();
        let close = decl.rfind(')').unwrap();
        let name = decl[..open].trim().to_owned();
        let types = split_top(&decl[open + 1..close])
            .iter()
            .map(|p| p.split_once(':').expect("name: type").1.trim().to_owned())
            .collect();
        let ret =
            decl[close + 1..].trim().strip_prefix("->").map_or("()".to_owned(), |r| r.trim().to_owned());
        out.push((name, (types, ret)));
    }
    out
}

#[test]
fn the_rust_declarations_and_the_cpp_definitions_match_the_header() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let declared = header(&std::fs::read_to_string(root.join("csrc/dpt_api.h")).unwrap());
    assert!(declared.len() >= 37, "{} functions in the header", declared.len());
    let mut seen = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(root.join("src/c10d")).unwrap() {
        let path = entry.unwrap().path();
        for (name, sig) in rust_decls(&std::fs::read_to_string(&path).unwrap()) {
            let theirs = declared
                .get(&name)
                .unwrap_or_else(|| panic!("{name} ({}) is not in dpt_api.h", path.display()));
            assert_eq!(&sig, theirs, "{name}: {} against dpt_api.h", path.display());
            seen.insert(name);
        }
    }
    let undeclared: Vec<&String> = declared.keys().filter(|n| !seen.contains(*n)).collect();
    assert!(undeclared.is_empty(), "declared in dpt_api.h but not in Rust: {undeclared:?}");
    for entry in std::fs::read_dir(root.join("csrc")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "cpp") {
            let text = std::fs::read_to_string(&path).unwrap();
            let mut offset = 0;
            for line in text.split_inclusive('\n') {
                let starts_definition = !line.starts_with([' ', '/', '#', '}'])
                    && !line.starts_with("struct")
                    && !line.starts_with("inline");
                if let Some(at) = line.find("dpt_").filter(|_| starts_definition) {
                    let name: String =
                        line[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                    let after = &text[offset + at..];
                    let body = after.find('{').is_some_and(|b| after.find(';').is_none_or(|s| b < s));
                    if line[at + name.len()..].starts_with('(') && body {
                        assert!(
                            declared.contains_key(&name),
                            "{} defines {name}, which dpt_api.h does not declare",
                            path.display()
                        );
                    }
                }
                offset += line.len();
            }
        }
    }
}

#[test]
fn c_types_read_as_rust_spells_them() {
    assert_eq!(rust_type("const char* const*"), "*const *const c_char");
    assert_eq!(rust_type("const char**"), "*mut *const c_char");
    assert_eq!(rust_type("dpt_tensor***"), "*mut *mut *mut CTensor");
    assert_eq!(rust_type("void*"), "*mut c_void");
    assert_eq!(rust_type("void"), "()");
}
