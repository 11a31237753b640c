//! The architecture invariant of ARCHITECTURE.md, enforced: every `crate::…` and `super::…`
//! path in `src/` points to the same layer or a lower one, units of one layer import each other
//! without a cycle, units of an independent layer do not import each other at all, and the
//! files of one directory module do not import each other in a cycle.
//!
//! Paths are read from the source text with comments and string literals removed. Test-only
//! files (`tests.rs`, `*_tests.rs`) may reach any layer: they are not part of the structure.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, lowest first: (layer name, units, whether its units must not import each
/// other). A unit is a module path; a file belongs to the unit that is the longest prefix of
/// its module path. Every module of the crate must belong to a unit.
const LAYERS: &[(&str, &[&str], bool)] = &[
    (
        "foundation",
        &[
            "config::internal",
            "error",
            "sanitize",
            "clock",
            "identity",
            "config",
            "fsutil",
            "paths",
            "mention",
            "hardening",
        ],
        false,
    ),
    ("protocol", &["protocol", "tools"], false),
    (
        "pure cores",
        &[
            "messaging",
            "resource::core",
            "resource::model",
            "resource::seal",
        ],
        false,
    ),
    (
        "shells",
        &["store", "transport", "presence", "directory", "resource"],
        false,
    ),
    ("runtime", &["runtime", "ask"], true),
    ("front ends", &["bench", "mcp", "cli", "fuzz_tests"], false),
];

/// One source file: its module path (`a::b`) and its code without comments and strings.
struct File {
    module: Vec<String>,
    is_mod_rs: bool,
    path: PathBuf,
    code: String,
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Removes comments, string literals and character literals, keeping line structure.
fn strip(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    let ch = |j: usize| c.get(j).copied().unwrap_or('\0');
    while i < c.len() {
        let at = |k: usize| ch(i + k);
        if at(0) == '/' && at(1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if at(0) == '/' && at(1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && ch(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && ch(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if at(0) == 'r'
            && (at(1) == '"' || (at(1) == '#' && (at(2) == '"' || at(2) == '#')))
            && !(i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_'))
        {
            // Raw string: r#…"…"#…
            let mut j = i + 1;
            let mut hashes = 0;
            while j < c.len() && c[j] == '#' {
                hashes += 1;
                j += 1;
            }
            j += 1;
            'raw: while j < c.len() {
                if c[j] == '"' && (0..hashes).all(|h| c.get(j + 1 + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break 'raw;
                }
                j += 1;
            }
            i = j;
            out.push_str("\"\"");
        } else if at(0) == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if at(0) == '\'' {
            // A character literal ('x', '\n', '\u{…}') or a lifetime ('a).
            if at(1) == '\\' {
                i += 2;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
                out.push_str("' '");
            } else if at(2) == '\'' {
                i += 3;
                out.push_str("' '");
            } else {
                out.push('\'');
                i += 1;
            }
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

fn load() -> Vec<File> {
    let mut paths = Vec::new();
    rs_files(Path::new("src"), &mut paths);
    let mut files = Vec::new();
    for path in paths {
        let rel = path.strip_prefix("src").unwrap().with_extension("");
        let mut module: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if module == ["lib"] || module == ["main"] {
            continue;
        }
        let is_mod_rs = module.last().is_some_and(|m| m == "mod");
        if is_mod_rs {
            module.pop();
        }
        let mut code = strip(&std::fs::read_to_string(&path).unwrap());
        // An inline test module (by convention at the end of a file) is test-only code.
        if let Some(at) = code.find("#[cfg(test)]\nmod ") {
            code.truncate(at);
        }
        files.push(File {
            module,
            is_mod_rs,
            path,
            code,
        });
    }
    files
}

/// Every path that starts with `crate::`, `super::` or `self::`, as segments relative to the
/// crate root, with `{a, b::c}` groups expanded one level (enough for this crate's imports).
fn paths_of(file: &File) -> Vec<Vec<String>> {
    let code = &file.code;
    let bytes = code.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut out = Vec::new();
    for start in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(k) = code[from..].find(start) {
            let at = from + k;
            from = at + start.len();
            if at > 0 && (ident(bytes[at - 1]) || bytes[at - 1] == b':') {
                continue;
            }
            // Base: the module the path is relative to.
            let mut base: Vec<String> = match start {
                "crate::" => vec![],
                _ => file.module.clone(),
            };
            // `super` in `a/b.rs` (module a::b) is `a`; in `a/mod.rs` (module a) it is the root.
            // `self` in `a/b.rs` is a::b.
            let mut rest = &code[at..];
            rest = &rest[start.len() - 2..];
            if start == "super::" {
                base.pop();
            }
            // Further `super::` segments.
            while let Some(r) = rest.strip_prefix("::super") {
                base.pop();
                rest = r;
            }
            let Some(r) = rest.strip_prefix("::") else {
                continue;
            };
            rest = r;
            let mut tails: Vec<String> = Vec::new();
            if let Some(group) = rest.strip_prefix('{') {
                let end = group.find('}').unwrap_or(group.len());
                for item in group[..end].split(',') {
                    let item: String = item.chars().filter(|c| !c.is_whitespace()).collect();
                    if !item.is_empty() {
                        tails.push(item);
                    }
                }
            } else {
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                    .unwrap_or(rest.len());
                tails.push(rest[..end].to_string());
            }
            for t in tails {
                let mut p = base.clone();
                p.extend(
                    t.split("::")
                        .filter(|s| !s.is_empty() && *s != "self")
                        .map(str::to_string),
                );
                out.push(p);
            }
        }
    }
    out
}

/// The longest known module that is a prefix of `path`.
fn module_of(path: &[String], modules: &BTreeSet<Vec<String>>) -> Option<Vec<String>> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|p| modules.contains(p))
}

/// (layer index, unit) of a module.
fn unit_of(module: &[String]) -> Option<(usize, &'static str)> {
    let name = module.join("::");
    let mut best: Option<(usize, &'static str)> = None;
    for (li, (_, units, _)) in LAYERS.iter().enumerate() {
        for u in units.iter() {
            if (name == *u || name.starts_with(&format!("{u}::")))
                && best.is_none_or(|(_, b)| u.len() > b.len())
            {
                best = Some((li, u));
            }
        }
    }
    best
}

fn is_test_file(f: &File) -> bool {
    let name = f.path.file_stem().unwrap().to_string_lossy();
    name == "tests" || name.ends_with("_tests")
}

/// A cycle in a directed graph, if any, as the list of nodes on it.
fn find_cycle<N: Ord + Clone>(edges: &BTreeMap<N, BTreeSet<N>>) -> Option<Vec<N>> {
    fn visit<N: Ord + Clone>(
        n: &N,
        edges: &BTreeMap<N, BTreeSet<N>>,
        state: &mut BTreeMap<N, u8>,
        stack: &mut Vec<N>,
    ) -> Option<Vec<N>> {
        match state.get(n) {
            Some(2) => return None,
            Some(1) => {
                let at = stack.iter().position(|s| s == n).unwrap();
                return Some(stack[at..].to_vec());
            }
            _ => {}
        }
        state.insert(n.clone(), 1);
        stack.push(n.clone());
        for m in edges.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, edges, state, stack) {
                return Some(c);
            }
        }
        stack.pop();
        state.insert(n.clone(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in edges.keys() {
        if let Some(c) = visit(n, edges, &mut state, &mut Vec::new()) {
            return Some(c);
        }
    }
    None
}

#[test]
fn imports_point_down_the_layers_without_cycles() {
    let files = load();
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| f.module.clone()).collect();
    let mut problems = Vec::new();
    let mut unit_edges: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    let mut file_edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let Some((from_layer, from_unit)) = unit_of(&f.module) else {
            problems.push(format!(
                "{}: module {} is in no layer of the table",
                f.path.display(),
                f.module.join("::")
            ));
            continue;
        };
        let test_only = is_test_file(f);
        for p in paths_of(f) {
            let Some(target) = module_of(&p, &modules) else {
                continue; // an item of the crate root or an external path
            };
            let Some((to_layer, to_unit)) = unit_of(&target) else {
                continue;
            };
            // Sibling files of one directory module, for the file-level cycle check.
            let parent = |m: &[String], is_mod: bool| -> Vec<String> {
                if is_mod {
                    m.to_vec()
                } else {
                    m[..m.len() - 1].to_vec()
                }
            };
            if !f.is_mod_rs
                && !test_only
                && target.len() == f.module.len()
                && target[..target.len() - 1] == parent(&f.module, false)[..]
                && target != f.module
            {
                let t = files.iter().find(|g| g.module == target);
                if t.is_some_and(|g| !g.is_mod_rs && !is_test_file(g)) {
                    file_edges
                        .entry(f.module.join("::"))
                        .or_default()
                        .insert(target.join("::"));
                }
            }
            if test_only || from_unit == to_unit {
                continue;
            }
            let what = format!(
                "{}: {} ({}) imports {} ({})",
                f.path.display(),
                from_unit,
                LAYERS[from_layer].0,
                p.join("::"),
                LAYERS[to_layer].0
            );
            if to_layer > from_layer {
                problems.push(format!("upward import: {what}"));
            } else if to_layer == from_layer {
                if LAYERS[from_layer].2 {
                    problems.push(format!("import between independent units: {what}"));
                }
                unit_edges.entry(from_unit).or_default().insert(to_unit);
            }
        }
    }
    if let Some(c) = find_cycle(&unit_edges) {
        problems.push(format!("cycle between units: {} → {}", c.join(" → "), c[0]));
    }
    if let Some(c) = find_cycle(&file_edges) {
        problems.push(format!("cycle between files: {} → {}", c.join(" → "), c[0]));
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

/// The checker itself sees what it must: a path in a string or a comment is not an import, a
/// group import is, and a cycle is found.
#[test]
fn the_import_scanner_reads_paths_groups_and_cycles() {
    let f = File {
        module: vec!["a".into(), "b".into()],
        is_mod_rs: false,
        path: PathBuf::from("src/a/b.rs"),
        code: strip(
            "use crate::{x::Y, z}; // crate::hidden\nlet s = \"crate::nope\"; let c = '\"'; \
             use super::c::D; fn f<'a>() { crate::q::r(); }",
        ),
    };
    let got: Vec<String> = paths_of(&f).iter().map(|p| p.join("::")).collect();
    assert_eq!(got, ["x::Y", "z", "q::r", "a::c::D"]);
    let mut g: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    g.entry("a").or_default().insert("b");
    assert!(find_cycle(&g).is_none());
    g.entry("b").or_default().insert("a");
    assert!(find_cycle(&g).is_some());
    assert_eq!(
        unit_of(&["resource".into(), "core".into()]).unwrap().1,
        "resource::core"
    );
    assert_eq!(
        unit_of(&["resource".into(), "gate".into()]).unwrap().1,
        "resource"
    );
}

/// ARCHITECTURE.md's code map names every top-level module of `src/` (as `src/NAME.rs` or
/// `src/NAME/`), so the map cannot fall behind the tree.
#[test]
fn the_code_map_names_every_top_level_module() {
    let map = std::fs::read_to_string("ARCHITECTURE.md").unwrap();
    let mut missing = Vec::new();
    for e in std::fs::read_dir("src").unwrap().flatten() {
        let p = e.path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let mention = if p.is_dir() {
            format!("`src/{name}/")
        } else if name.ends_with(".rs") && name != "lib.rs" && name != "main.rs" {
            format!("src/{name}")
        } else {
            continue;
        };
        if !map.contains(&mention) {
            missing.push(mention);
        }
    }
    missing.sort();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md's code map lacks {missing:?}"
    );
}

/// Where JSON values (`serde_json::Value`, `Map`, `json!`) may live: the modules whose job is
/// JSON — the wire codec (`protocol`, `transport`, `error`'s JSON-RPC error objects, the
/// runtime's `wire` adapter), MCP and the tool contract (`mcp`, `tools`), front-end output
/// (`cli`, `bench` reports, the runtime's event stream `runtime::events`), files (`config`,
/// `presence`, `store`), the HTTP bodies of `ask`, and the fuzz harness. ARCHITECTURE.md
/// lists the same modules.
const JSON_EDGES: &[&str] = &[
    "protocol",
    "transport",
    "error",
    "runtime::wire",
    "mcp",
    "tools",
    "cli",
    "bench",
    "runtime::events",
    "config",
    "presence",
    "store",
    "ask",
    "fuzz_tests",
];

/// The JSON-value names one file's code uses (comments, strings and inline test modules are
/// already removed).
fn json_names(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    for name in ["serde_json::Value", "serde_json::Map", "json!"] {
        if code.contains(name) {
            found.push(name.to_string());
        }
    }
    let mut from = 0;
    while let Some(k) = code[from..].find("serde_json::{") {
        let group = &code[from + k + "serde_json::{".len()..];
        let group = &group[..group.find('}').unwrap_or(group.len())];
        for item in group.split(',').filter_map(|i| i.split_whitespace().next()) {
            if ["Value", "Map", "json"].contains(&item) {
                found.push(format!("serde_json::{item}"));
            }
        }
        from += k + 1;
    }
    found
}

fn within(module: &[String], units: &[&str]) -> bool {
    let name = module.join("::");
    units
        .iter()
        .any(|u| name == *u || name.starts_with(&format!("{u}::")))
}

#[test]
fn json_values_stay_at_the_edges() {
    let mut problems = Vec::new();
    for f in load().iter().filter(|f| !is_test_file(f)) {
        if within(&f.module, JSON_EDGES) {
            continue;
        }
        let names = json_names(&f.code);
        if !names.is_empty() {
            problems.push(format!(
                "{}: {} is not a JSON edge but names {}; pass typed structs (edges: {})",
                f.path.display(),
                f.module.join("::"),
                names.join(", "),
                JSON_EDGES.join(", ")
            ));
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

/// The JSON scanner finds a value type however it is named, and not in comments or strings.
#[test]
fn the_json_scanner_finds_values_however_they_are_named() {
    let names = |src: &str| json_names(&strip(src));
    assert_eq!(names("use serde_json::Value;"), ["serde_json::Value"]);
    assert_eq!(
        names("use serde_json::{Map, Value as V, json};"),
        ["serde_json::Map", "serde_json::Value", "serde_json::json"]
    );
    assert_eq!(
        names("fn f() -> serde_json::Map<String, u8> {}"),
        ["serde_json::Map"]
    );
    assert_eq!(names("let v = serde_json::json!({});"), ["json!"]);
    assert!(names("// serde_json::Value\nlet s = \"json!\"; serde_json::to_vec(&x);").is_empty());
    assert!(!within(&["runtime".into(), "send".into()], JSON_EDGES));
    assert!(within(&["runtime".into(), "wire".into()], JSON_EDGES));
}
