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
    // The bounds table imports nothing of the crate, so every module may read it. As a layer
    // of its own it is no part of `config`'s unit: `identity` reads it while `config` imports
    // `identity`, and that is no cycle.
    ("bounds", &["config::internal"], false),
    (
        "foundation",
        &[
            "error",
            "sanitize",
            "clock",
            "identity",
            "config",
            "fsutil",
            "paths",
            "mention",
            "hardening",
            "process",
        ],
        false,
    ),
    ("protocol", &["protocol", "toolspec"], false),
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

/// Removes comments, string literals and character literals, keeping line structure (every
/// newline inside a removed comment or string stays, so line numbers do not move).
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
                    if c[i] == '\n' {
                        out.push('\n');
                    }
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
            out.extend(c[i..j.min(c.len())].iter().filter(|&&x| x == '\n'));
            i = j;
            out.push_str("\"\"");
        } else if at(0) == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    i += 1;
                }
                if ch(i) == '\n' {
                    out.push('\n');
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

/// Functions longer than this many lines (signature to closing brace, as rustfmt lays them
/// out) need a written reason in [`LONG_FUNCTIONS`].
const FUNCTION_LINES_MAX: usize = 70;

/// The functions allowed to be longer than [`FUNCTION_LINES_MAX`], as `path/in/src.rs::name`,
/// each with why splitting it would not help a reader.
const LONG_FUNCTIONS: &[(&str, &str)] = &[
    (
        "messaging/state.rs::apply",
        "one match arm per journal record kind, each applying that record: the arms are the \
         record table, and splitting it would scatter how each record changes the state",
    ),
    (
        "messaging/inbound.rs::accept",
        "the acceptance checks in the order the protocol defines them (dedup first, then \
         identity, liveness, size, expiry, reply, rate, capacity) ending in one record; one \
         straight sequence is what gets audited against peer-protocol(7)",
    ),
];

/// Every function with a body in the non-test code of `src/`: (`file::name`, lines).
fn function_lengths() -> Vec<(String, usize)> {
    let mut out = Vec::new();
    for f in load() {
        if !is_test_file(&f) {
            let rel = f.path.strip_prefix("src").unwrap().to_string_lossy();
            out.extend(lengths_in(&rel, &f.code));
        }
    }
    out
}

/// The functions with a body in `code` (stripped source) and their lines.
fn lengths_in(rel: &str, stripped: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    {
        let code = stripped.as_bytes();
        let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
        let mut from = 0;
        while let Some(k) = stripped[from..].find("fn ") {
            let at = from + k;
            from = at + 3;
            if at > 0 && ident(code[at - 1]) {
                continue;
            }
            let name: String = stripped[at + 3..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if name.is_empty() {
                continue; // `fn(` types
            }
            // The body starts at the first `{` outside parentheses and angle brackets; a `;`
            // first means a declaration without a body.
            let mut depth = 0i32;
            let mut body = None;
            for (j, &b) in code.iter().enumerate().skip(at) {
                match b {
                    b'(' | b'[' => depth += 1,
                    b')' | b']' => depth -= 1,
                    b';' if depth == 0 => break,
                    b'{' if depth == 0 => {
                        body = Some(j);
                        break;
                    }
                    _ => {}
                }
            }
            let Some(open) = body else { continue };
            let mut braces = 0;
            let mut end = code.len();
            for (j, &b) in code.iter().enumerate().skip(open) {
                match b {
                    b'{' => braces += 1,
                    b'}' => {
                        braces -= 1;
                        if braces == 0 {
                            end = j;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let lines = code[at..end].iter().filter(|&&b| b == b'\n').count() + 1;
            out.push((format!("{rel}::{name}"), lines));
        }
    }
    out
}

/// No function is longer than [`FUNCTION_LINES_MAX`] lines unless [`LONG_FUNCTIONS`] says
/// why; an entry whose function is gone or short again must be removed, so the list stays
/// honest.
#[test]
fn long_functions_have_a_written_reason() {
    let lengths = function_lengths();
    let allowed: BTreeMap<&str, &str> = LONG_FUNCTIONS.iter().copied().collect();
    let mut unexplained: Vec<String> = lengths
        .iter()
        .filter(|(name, n)| *n > FUNCTION_LINES_MAX && !allowed.contains_key(name.as_str()))
        .map(|(name, n)| format!("{name} ({n} lines)"))
        .collect();
    unexplained.sort();
    let stale: Vec<&str> = allowed
        .keys()
        .copied()
        .filter(|a| {
            !lengths
                .iter()
                .any(|(n, l)| n == a && *l > FUNCTION_LINES_MAX)
        })
        .collect();
    assert!(
        unexplained.is_empty(),
        "functions over {FUNCTION_LINES_MAX} lines without a reason in LONG_FUNCTIONS: {unexplained:#?}"
    );
    assert!(
        stale.is_empty(),
        "LONG_FUNCTIONS lists functions that are gone or no longer long: {stale:?}"
    );
    assert!(
        allowed.values().all(|why| why.len() >= 20),
        "every reason says something"
    );
}

#[test]
fn the_function_scanner_measures_bodies() {
    let src = "fn a() {\n    let s = \"}\n\";\n}\ntrait T { fn d(&self); }\nfn b<T: Fn(u8) -> u8>(x: [u8; 2]) -> u8 {\n    1\n}\n";
    let code = strip(src);
    assert_eq!(code.lines().count(), src.lines().count(), "{code}");
    assert_eq!(
        lengths_in("x.rs", &code),
        vec![("x.rs::a".to_string(), 4), ("x.rs::b".to_string(), 3)]
    );
}

/// The bullets of ARCHITECTURE.md: each starts at a line `- …` and runs over its indented
/// continuation lines.
fn map_bullets(map: &str) -> Vec<String> {
    let mut bullets: Vec<String> = Vec::new();
    for line in map.lines() {
        if line.starts_with("- ") {
            bullets.push(line.to_string());
        } else if line.starts_with("  ") && !line.trim().is_empty() {
            if let Some(b) = bullets.last_mut() {
                b.push('\n');
                b.push_str(line);
            }
        } else if let Some(b) = bullets.last_mut().filter(|b| !b.ends_with('\u{0}')) {
            b.push('\u{0}'); // closed
        }
    }
    bullets
}

/// `a/{b,c}.rs` → `a/b.rs`, `a/c.rs` (one group).
fn expand_braces(path: &str) -> Vec<String> {
    match (path.find('{'), path.find('}')) {
        (Some(open), Some(close)) if open < close => path[open + 1..close]
            .split(',')
            .map(|alt| format!("{}{}{}", &path[..open], alt.trim(), &path[close + 1..]))
            .collect(),
        _ => vec![path.to_string()],
    }
}

/// Every `src/…`, `tests/…`, `benches/…` or `fuzz/…` path ARCHITECTURE.md names, braces
/// expanded, trailing punctuation removed.
fn map_paths(map: &str) -> Vec<String> {
    let mut out = Vec::new();
    let path_char = |c: char| c.is_ascii_alphanumeric() || "_/.{},-".contains(c);
    for start in ["src/", "tests/", "benches/", "fuzz/"] {
        let mut from = 0;
        while let Some(k) = map[from..].find(start) {
            let at = from + k;
            from = at + start.len();
            let before = map[..at].chars().next_back();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '/' || c == '_') {
                continue;
            }
            let token: String = map[at..].chars().take_while(|&c| path_char(c)).collect();
            let token = token.trim_end_matches(['.', ',', '-']);
            out.extend(expand_braces(token));
        }
    }
    out
}

/// True when the code map names `rel` (a file under `src/`, e.g. `ask/discovery/tools.rs`):
/// by its full path, or inside the bullet of a directory or module file above it by its path
/// relative to that directory or to its parent (`frame` under `src/protocol/`,
/// `discovery/tools.rs` under `src/ask/discovery.rs`).
fn map_names(map: &str, bullets: &[String], rel: &str) -> bool {
    let named = map_paths(map);
    if named.iter().any(|p| p == &format!("src/{rel}")) {
        return true;
    }
    let parts: Vec<&str> = rel.trim_end_matches(".rs").split('/').collect();
    if parts.last() == Some(&"mod") {
        let dir = parts[..parts.len() - 1].join("/");
        return named.iter().any(|p| p == &format!("src/{dir}/"));
    }
    (1..parts.len()).any(|depth| {
        let dir = parts[..depth].join("/");
        let anchors = [format!("src/{dir}/"), format!("src/{dir}.rs")];
        let owners: Vec<&String> = bullets
            .iter()
            .filter(|b| anchors.iter().any(|a| b.contains(&format!("`{a}"))))
            .collect();
        // Relative to the directory, and to its parent (`dir/rest`).
        let rest = parts[depth..].join("/");
        let with_dir = parts[depth - 1..].join("/");
        owners.iter().any(|b| {
            [&rest, &with_dir].iter().any(|r| {
                b.contains(&format!("`{r}`"))
                    || b.contains(&format!("`{r}.rs`"))
                    || b.contains(&format!("`{r} "))
            })
        })
    })
}

/// ARCHITECTURE.md's code map and the tree agree: every module file under `src/` (test-only
/// files aside) is named in it, and every path it names exists.
#[test]
fn the_code_map_matches_the_tree() {
    let map = std::fs::read_to_string("ARCHITECTURE.md").unwrap();
    let bullets = map_bullets(&map);
    let mut files = Vec::new();
    rs_files(Path::new("src"), &mut files);
    let mut unnamed: Vec<String> = files
        .iter()
        .map(|p| {
            p.strip_prefix("src")
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|rel| {
            let stem = rel.rsplit('/').next().unwrap().trim_end_matches(".rs");
            !(rel == "lib.rs" || rel == "main.rs" || stem == "tests" || stem.ends_with("_tests"))
        })
        .filter(|rel| !map_names(&map, &bullets, rel))
        .collect();
    unnamed.sort();
    let mut missing: Vec<String> = map_paths(&map)
        .into_iter()
        .filter(|p| !Path::new(p).exists())
        .collect();
    missing.sort();
    missing.dedup();
    assert!(
        unnamed.is_empty(),
        "module files ARCHITECTURE.md's code map does not name: {unnamed:#?}"
    );
    assert!(
        missing.is_empty(),
        "paths ARCHITECTURE.md names that do not exist: {missing:#?}"
    );
}

/// The most ARCHITECTURE.md may hold: a map a newcomer reads in one sitting. History (dated
/// measurements, designs not kept) belongs in `docs/performance-log.md`, byte layouts in
/// `docs/store-format.md`.
const ARCHITECTURE_MD_BYTES_MAX: usize = 30 * 1024;

/// ARCHITECTURE.md stays a map, not a diary: at most `ARCHITECTURE_MD_BYTES_MAX` bytes, and the
/// documents it hands history and byte formats to exist.
#[test]
fn architecture_md_stays_short() {
    let map = std::fs::read_to_string("ARCHITECTURE.md").unwrap();
    assert!(
        map.len() <= ARCHITECTURE_MD_BYTES_MAX,
        "ARCHITECTURE.md is {} bytes, more than {ARCHITECTURE_MD_BYTES_MAX}: move measurements \
         and history to docs/performance-log.md, byte formats to docs/store-format.md",
        map.len()
    );
    for doc in ["docs/performance-log.md", "docs/store-format.md"] {
        assert!(map.contains(doc), "ARCHITECTURE.md points at {doc}");
        assert!(Path::new(doc).is_file(), "{doc} exists");
    }
}

#[test]
fn the_code_map_reader_finds_paths_and_bullets() {
    let map = "- `src/a/` — `b` (x), `c/d.rs`\n  and `e`.\n- `src/f.rs`, `src/g/{h,i}.rs`.\n\ntext src/j/\n";
    assert_eq!(
        map_paths(map),
        ["src/a/", "src/f.rs", "src/g/h.rs", "src/g/i.rs", "src/j/"]
    );
    let bullets = map_bullets(map);
    assert_eq!(bullets.len(), 2);
    for named in ["a/b.rs", "a/c/d.rs", "a/e.rs", "a/mod.rs", "f.rs", "g/h.rs"] {
        assert!(map_names(map, &bullets, named), "{named}");
    }
    for unnamed in ["a/x.rs", "g/x.rs", "k.rs", "j/mod.rs2"] {
        assert!(!map_names(map, &bullets, unnamed), "{unnamed}");
    }
}

/// Words that only mean something to whoever wrote a change, not to a reader of the code.
fn jargon_in(comment: &str) -> Option<&'static str> {
    let c = comment.to_lowercase();
    let issue_number = c.match_indices("issue").any(|(at, w)| {
        let rest = c[at + w.len()..].trim_start_matches([' ', '#']);
        rest.starts_with(|ch: char| ch.is_ascii_digit())
    });
    if issue_number {
        return Some("issue N");
    }
    ["the seed", "seed floor", "the brief"]
        .into_iter()
        .find(|j| c.contains(j))
}

/// Comments in `src/` say what a thing is, not which issue, seed document or brief asked for
/// it.
#[test]
fn comments_carry_no_process_jargon() {
    let mut paths = Vec::new();
    rs_files(Path::new("src"), &mut paths);
    let mut found = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(&path).unwrap();
        for (n, line) in text.lines().enumerate() {
            if let Some(at) = line.find("//")
                && let Some(j) = jargon_in(&line[at..])
            {
                found.push(format!("{}:{}: {j}", path.display(), n + 1));
            }
        }
    }
    assert!(found.is_empty(), "jargon in comments: {found:#?}");
    assert_eq!(jargon_in("// see issue 4 for why"), Some("issue N"));
    assert_eq!(jargon_in("/// as the seed says"), Some("the seed"));
    assert_eq!(jargon_in("// issued tokens; a seed of 32 bytes"), None);
}

/// Where JSON values (`serde_json::Value`, `Map`, `json!`) may live: the modules whose job is
/// JSON — the wire codec (`protocol`, `transport`, `error`'s JSON-RPC error objects, the
/// runtime's `dispatch` adapter), MCP and the tool contract (`mcp`, `toolspec`), front-end output
/// (`cli`, `bench` reports, the runtime's event stream `runtime::events`), files (`config`,
/// `presence`, `store`), the HTTP bodies of `ask`, and the fuzz harness. ARCHITECTURE.md
/// lists the same modules.
const JSON_EDGES: &[&str] = &[
    "protocol",
    "transport",
    "error",
    "runtime::dispatch",
    "mcp",
    "toolspec",
    "cli",
    "bench",
    "runtime::events",
    "config",
    "presence",
    "store",
    // The ask unit's JSON edges; everything else in `ask` passes typed structs. HTTP server and
    // client, dsh's canonical JSON, the config file (read, and edited by a friend add keeping
    // unknown members), the A2A JSON-RPC unit, the owner's browser page and control socket,
    // the ask tools' results for a model.
    "ask::http",
    "ask::client",
    "ask::canon",
    "ask::config",
    "ask::discovery::friends",
    "ask::a2a",
    "ask::owner_page",
    "ask::approval::control",
    "ask::discovery::model_tools",
    // Credentials are checked over the JSON object a friend sent, unknown members included.
    "ask::auth",
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
    assert!(within(&["runtime".into(), "dispatch".into()], JSON_EDGES));
}

/// The `key = value` lines of one `[section]` of a TOML file (no nesting, comments dropped).
fn toml_section(text: &str, section: &str) -> BTreeMap<String, String> {
    let header = format!("[{section}]");
    let mut inside = false;
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
    {
        if line.starts_with('[') {
            inside = line == header;
        } else if inside && let Some((k, v)) = line.split_once('=') {
            out.insert(k.trim().to_string(), v.trim().trim_matches('"').to_string());
        }
    }
    out
}

/// Release builds are optimised as one program (docs/performance-log.md, "Where a send's time
/// goes": about a tenth fewer instructions per send and sends 3-6 % faster) and keep
/// unwinding: the MCP server and the outbound pool catch a panicking handler, which
/// `panic = "abort"` would turn into the death of the root.
#[test]
fn release_builds_optimise_the_whole_program_and_keep_unwinding() {
    let manifest =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
            .expect("Cargo.toml");
    let release = toml_section(&manifest, "profile.release");
    assert_eq!(
        release.get("lto").map(String::as_str),
        Some("fat"),
        "{release:?}"
    );
    assert_eq!(
        release.get("codegen-units").map(String::as_str),
        Some("1"),
        "{release:?}"
    );
    assert!(
        release.get("panic").is_none_or(|p| p == "unwind"),
        "the transport and the MCP server rely on catching panics: {release:?}"
    );
    let parsed = toml_section(
        "[a]\nx = 1\n[profile.release]\nlto = \"fat\" # why\n[b]\ny = 2\n",
        "profile.release",
    );
    assert_eq!(
        parsed.into_iter().collect::<Vec<_>>(),
        [("lto".to_string(), "fat".to_string())]
    );
}

/// The numbered layer list of ARCHITECTURE.md's code map: (layer name, units), read from the
/// lines `N. name — … `unit` …` (continuation lines indented) that follow the "Architecture
/// invariant" line. Every backticked module path of an item is one of its units.
fn documented_layers(map: &str) -> Vec<(String, BTreeSet<String>)> {
    let from = map
        .find("**Architecture invariant")
        .expect("ARCHITECTURE.md states the architecture invariant");
    let mut items: Vec<String> = Vec::new();
    for line in map[from..].lines().skip(1) {
        let numbered = line
            .split_once(". ")
            .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        if numbered {
            items.push(line.split_once(". ").unwrap().1.to_string());
        } else if line.starts_with("   ") && !items.is_empty() {
            items.last_mut().unwrap().push_str(line);
        } else if !items.is_empty() {
            break;
        }
    }
    items
        .iter()
        .map(|item| {
            let (name, rest) = item.split_once(" — ").unwrap_or((item, ""));
            let units = rest
                .split('`')
                .skip(1)
                .step_by(2)
                .filter(|u| {
                    !u.is_empty()
                        && u.chars()
                            .all(|c| c.is_ascii_lowercase() || "_:".contains(c))
                })
                .map(str::to_string)
                .collect();
            (name.trim().to_string(), units)
        })
        .collect()
}

/// ARCHITECTURE.md's numbered layer list and [`LAYERS`] are one list: the same layers in the
/// same order, each with the same units, so neither can drift from the other.
#[test]
fn the_layer_list_is_the_layer_table() {
    let map = std::fs::read_to_string("ARCHITECTURE.md").unwrap();
    let documented = documented_layers(&map);
    let table: Vec<(String, BTreeSet<String>)> = LAYERS
        .iter()
        .map(|(name, units, _)| {
            let units = units.iter().map(|u| u.to_string()).collect();
            (name.to_string(), units)
        })
        .collect();
    assert_eq!(
        documented, table,
        "ARCHITECTURE.md's numbered layer list (left) differs from tests/architecture.rs's \
         LAYERS (right)"
    );
    let sample = "**Architecture invariant: down.** Lowest first:\n\n1. low — `a`, `b::c` (with \
                  `d`);\n   more `e`\n2. high — `f`; `g` dispatches.\n\nText `h`.\n";
    let read = documented_layers(sample);
    assert_eq!(read.len(), 2, "{read:?}");
    assert_eq!(read[0].0, "low");
    assert_eq!(
        read[0].1.iter().map(String::as_str).collect::<Vec<_>>(),
        ["a", "b::c", "d", "e"]
    );
    assert_eq!(read[1].1.len(), 2);
}

/// Constants that look like bounds by name but are not: each fixes a format, a protocol
/// number, a unit, an allocation hint (a buffer sized so it rarely grows, never bounded by
/// it) or what a benchmark measures, and so stays beside the code it describes.
#[rustfmt::skip]
const NOT_BOUNDS: &[(&str, &str, &str)] = &[
    ("src/protocol/handshake.rs", "NONCE_BYTES", "protocol: nonce length"),
    ("src/protocol/message.rs", "RECEIPT_JSON_BYTES", "allocation hint"),
    ("src/toolspec/answer.rs", "ANSWER_JSON_BYTES", "allocation hint"),
    ("src/toolspec/args.rs", "JSON_SAFE_INTEGER_MAX", "format: JSON's exact integers"),
    ("src/ask/canon.rs", "SAFE_INTEGER_MAX", "format: JSON's exact integers"),
    ("src/ask/card.rs", "SAFE_MAX", "format: JSON's exact integers"),
    ("src/mcp/session.rs", "SENT_LINE_BYTES", "allocation hint"),
    ("src/store/journal.rs", "HEADER_BYTES", "format: journal header"),
    ("src/store/journal.rs", "FRAME_HEADER_BYTES", "format: frame header"),
    ("src/store/journal.rs", "MARK_BYTES", "format: end mark"),
    ("src/store/journal.rs", "SECTOR_BYTES", "device: the untorn write unit"),
    ("src/config.rs", "DAY_MS", "unit: a day in milliseconds"),
    ("src/config.rs", "JSON_ESCAPE_FACTOR", "format: JSON's worst escape growth"),
    ("src/bench/e2e.rs", "BODY_BYTES", "benchmark workload"),
    ("src/bench/floors.rs", "TRIP_BYTES", "benchmark workload"),
    ("src/bench/floors.rs", "RECORD_BYTES", "benchmark workload"),
    ("src/bench/floors.rs", "SIGNED_BYTES", "benchmark workload"),
    ("src/bench/report.rs", "P99_SAMPLES_MIN", "statistics: samples a p99 needs"),
    ("src/bench/targets.rs", "LATENCY_SAMPLES_MIN", "benchmark judgement"),
    ("src/bench/targets.rs", "RUN_MESSAGES_MIN", "benchmark judgement"),
    ("src/bench/targets.rs", "HISTORY_SENT_MIN", "benchmark judgement"),
    ("src/bench/targets.rs", "SYNC_PROBES_MIN", "benchmark judgement"),
    ("src/bench/targets.rs", "IDLE_SECONDS_MIN", "benchmark judgement"),
];

/// The constants of one file's code that look like fixed bounds: an integer or a `Duration`
/// whose name says it bounds a size, a count, a wait or a rate (`_MAX`, `_BYTES`, `_MS`, …),
/// and every `Duration`.
fn bound_like_constants(code: &str) -> Vec<String> {
    const SUFFIXES: &[&str] = &[
        "_MAX",
        "_MIN",
        "_MS",
        "_SECS",
        "_BYTES",
        "_CHARS",
        "_KEPT",
        "_PER_PASS",
        "_TRIES",
        "_BATCH",
        "_QUEUE",
        "_FACTOR",
        "_LIMIT",
        "_TIMEOUT",
        "_TTL",
        "_CAP",
    ];
    let ints = [
        "usize", "u64", "u32", "u16", "u8", "u128", "i64", "i32", "isize",
    ];
    let mut found = Vec::new();
    for line in code.lines() {
        let Some(at) = line.find("const ") else {
            continue;
        };
        let Some((name, rest)) = line[at + 6..].split_once(':') else {
            continue;
        };
        let name = name.trim();
        let ty = rest.split('=').next().unwrap_or("").trim();
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        {
            continue;
        }
        let duration = ty.ends_with("Duration");
        let sized = ints.contains(&ty) && SUFFIXES.iter().any(|s| name.ends_with(s));
        if duration || sized {
            found.push(name.to_string());
        }
    }
    found
}

/// Every fixed bound lives in `config::internal`, the one table peer-config(5) lists: a
/// bound-like constant anywhere else in `src/` must be named in [`NOT_BOUNDS`] with why it is
/// not a bound (test-only code aside).
#[test]
fn fixed_bounds_live_in_the_bounds_table() {
    let mut stray = Vec::new();
    for f in load().iter().filter(|f| !is_test_file(f)) {
        let path = f.path.to_string_lossy().replace('\\', "/");
        if f.module == ["config", "internal"] {
            continue;
        }
        for name in bound_like_constants(&f.code) {
            if !NOT_BOUNDS.iter().any(|(p, n, _)| *p == path && *n == name) {
                stray.push(format!("{path}: {name}"));
            }
        }
    }
    let stale: Vec<_> = NOT_BOUNDS
        .iter()
        .filter(|(p, n, _)| {
            let code = strip(&std::fs::read_to_string(p).unwrap_or_default());
            !bound_like_constants(&code).iter().any(|c| c == n)
        })
        .collect();
    assert!(
        stray.is_empty(),
        "fixed bounds outside src/config/internal.rs (move them there, or say in NOT_BOUNDS \
         why one is not a bound): {stray:#?}"
    );
    assert!(
        stale.is_empty(),
        "NOT_BOUNDS names constants that are gone: {stale:?}"
    );
    assert_eq!(
        bound_like_constants(&strip(
            "const A_MAX: usize = 1;\n    const WAIT: Duration = x;\nconst VERSION: u32 = 1;\n\
             // const C_MS: u64 = 1;\nfn f<const N_MAX: usize>() {}\nconst B_MS: u64 = 2;"
        )),
        ["A_MAX", "WAIT", "B_MS"]
    );
}

/// The names of the structs `code` declares whose fields include all of `fields`.
fn structs_with_fields(code: &str, fields: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(k) = code[from..].find("struct ") {
        let at = from + k + "struct ".len();
        from = at;
        let name: String = code[at..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let body = &code[at..];
        let Some(open) = body.find(['{', ';', '(']) else {
            continue;
        };
        if !body[open..].starts_with('{') {
            continue;
        }
        let end = body[open..].find('}').map_or(body.len(), |e| open + e);
        let body = &body[open..end];
        if fields.iter().all(|f| body.contains(&format!("{f}:"))) {
            found.push(name);
        }
    }
    found
}

/// A receipt has one type from the wire to the journal: one `struct Receipt`, and no other
/// struct repeating its fields (a store copy, a sorted-order mirror) that would need
/// conversions kept in step. The CLI's display lines (`cli::lines`) are not on that path:
/// one line renders a receipt, a send's answer or a sent message's view alike.
#[test]
fn one_receipt_type_from_the_wire_to_the_journal() {
    let fields = ["from_peer_id", "to_peer_id", "correlation_id", "sequence"];
    let mut receipts = Vec::new();
    let mut mirrors = Vec::new();
    for f in load().into_iter().filter(|f| f.module != ["cli", "lines"]) {
        for name in structs_with_fields(&f.code, &fields) {
            let at = format!("{}: struct {name}", f.path.display());
            if name == "Receipt" {
                receipts.push(at);
            } else {
                mirrors.push(at);
            }
        }
    }
    assert_eq!(receipts.len(), 1, "one struct Receipt: {receipts:?}");
    assert!(
        mirrors.is_empty(),
        "structs repeating the receipt's fields (use protocol::message::Receipt, and \
         WithFields for the wire's key order): {mirrors:?}"
    );
}

#[test]
fn the_struct_scanner_finds_field_mirrors() {
    let code = "pub struct A<'a> { x: u64, pub y: &'a str }\nstruct B(u64);\nstruct C { x: u8 }";
    assert_eq!(structs_with_fields(code, &["x", "y"]), ["A"]);
    assert_eq!(structs_with_fields(code, &["x"]), ["A", "C"]);
}

/// One decoder from a frame to a request: no second "hot" decoding path beside it, kept
/// equal to the first by property tests.
#[test]
fn no_second_decoding_path() {
    let hot: Vec<String> = load()
        .iter()
        .filter(|f| f.module.iter().any(|m| m == "hot" || m.starts_with("hot_")))
        .map(|f| f.path.display().to_string())
        .collect();
    assert!(hot.is_empty(), "a second decoding path: {hot:?}");
}

/// An answer crosses the transport as one thing, its JSON text: no `Value` variant beside it
/// for a second encoding path.
#[test]
fn answers_have_one_form() {
    let mut found = Vec::new();
    for f in load() {
        for name in [
            "Answer::Value",
            "Reply::Value",
            "Answer::Json",
            "Reply::Text",
        ] {
            if f.code.contains(name) {
                found.push(format!("{}: {name}", f.path.display()));
            }
        }
    }
    assert!(found.is_empty(), "{found:?}");
}

/// Wire key order comes from a type's own `Serialize` (field order, or a hand-written impl
/// such as `protocol::message::WithFields`), never from a `Sorted*` copy of its fields.
#[test]
fn no_sorted_mirror_structs() {
    let mirrors: Vec<String> = load()
        .iter()
        .filter(|f| f.code.contains("struct Sorted"))
        .map(|f| f.path.display().to_string())
        .collect();
    assert!(mirrors.is_empty(), "Sorted* mirror structs in {mirrors:?}");
}

/// The seam between transport and runtime is typed: the transport decodes a frame's params
/// into `PeerRequest`/`LocalRequest` before its `Handler` sees them, so no method of the trait
/// takes a JSON object (or any JSON value).
#[test]
fn the_handler_takes_typed_requests_only() {
    // Read whole: `load` cuts a file at its `#[cfg(test)] mod`, which this one declares early.
    let code = strip(&std::fs::read_to_string("src/transport/mod.rs").unwrap());
    let trait_body = handler_trait(&code).expect("pub trait Handler in transport");
    for name in ["Map<", "Value", "serde_json"] {
        assert!(
            !trait_body.contains(name),
            "a Handler method names {name}: pass PeerRequest/LocalRequest\n{trait_body}"
        );
    }
    assert!(trait_body.contains("req: PeerRequest") && trait_body.contains("req: LocalRequest"));
    assert!(
        handler_trait("pub trait Handler { fn f(&self, p: Map<String, Value>); }")
            .is_some_and(|b| b.contains("Map<"))
    );
}

#[test]
fn the_notification_sink_takes_a_typed_push_only() {
    let code = strip(&std::fs::read_to_string("src/transport/pool.rs").unwrap());
    let sink = sink_type(&code).expect("pub type NotificationSink in transport::pool");
    for name in ["Map<", "Value", "serde_json", "&str"] {
        assert!(
            !sink.contains(name),
            "NotificationSink names {name}: pass the decoded ReceiptPush\n{sink}"
        );
    }
    assert!(sink.contains("ReceiptPush"), "{sink}");
    assert!(
        sink_type("pub type NotificationSink = Arc<dyn Fn(&str, Map<String, Value>)>;")
            .is_some_and(|t| t.contains("Map<"))
    );
}

/// The text of `pub type NotificationSink = …;`.
fn sink_type(code: &str) -> Option<&str> {
    let start = code.find("pub type NotificationSink")?;
    let len = code[start..].find(';')?;
    Some(&code[start..=start + len])
}

/// The text of `pub trait Handler { … }`, braces balanced.
fn handler_trait(code: &str) -> Option<&str> {
    let start = code.find("pub trait Handler")?;
    let mut depth = 0usize;
    for (i, c) in code[start..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(&code[start..=start + i]);
                }
            }
            _ => {}
        }
    }
    None
}
