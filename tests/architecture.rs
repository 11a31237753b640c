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
