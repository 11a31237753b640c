//! The answerer that ships with peer, no model needed: `peer ask answer --from-workspace`.
//! It reads the answerer's JSON document (see `answer`) on stdin and answers from the
//! workspace it runs in: the question's terms are searched in the context files the asker
//! named and then in the tree, and the best-matching lines come back as `file:line: excerpt`.
//! Every part of the walk is bounded (files, bytes per file and in all, depth, matches), and
//! `.git`, `target`, `node_modules`, symbolic links and binary files are skipped, as are files
//! that usually hold secrets (`.env*`, keys, `.netrc`…): the walk would otherwise quote them to
//! a friend the owner approved for a question, not for credentials. A context file the asker
//! named was read by the server and is searched whatever its name. Its output is the answer;
//! nothing is written anywhere.

use crate::config::internal::{
    WORKSPACE_ANSWER_CANDIDATES_MAX, WORKSPACE_ANSWER_EXCERPT_CHARS, WORKSPACE_ANSWER_TERMS_MAX,
};
use crate::error::{Code, Error, Result};
use std::path::Path;

/// The bounds of one search.
#[derive(Clone, Debug)]
pub struct Bounds {
    /// Files read at most (context files included).
    pub files: usize,
    /// A file larger than this is skipped.
    pub file_bytes: u64,
    /// Bytes read in all.
    pub total_bytes: u64,
    /// Directory levels below the workspace.
    pub depth: usize,
    /// Excerpts printed at most.
    pub matches: usize,
}

impl Default for Bounds {
    fn default() -> Bounds {
        Bounds {
            files: 5_000,
            file_bytes: 512 * 1024,
            total_bytes: 64 << 20,
            depth: 16,
            matches: 40,
        }
    }
}

/// Directories never searched: history, build output, dependencies.
const SKIPPED_DIRS: [&str; 5] = [".git", "target", "node_modules", ".venv", "__pycache__"];
/// Whether a file name usually holds secrets (never quoted by the tree walk).
fn secret_name(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n.starts_with(".env")
        || n.starts_with("id_rsa")
        || n.starts_with("id_ed25519")
        || n.starts_with("id_ecdsa")
        || [
            ".netrc",
            ".npmrc",
            ".pypirc",
            "credentials",
            "credentials.json",
            "secrets.yml",
        ]
        .contains(&n.as_str())
        || [".pem", ".key", ".p12", ".pfx", ".keystore", ".jks"]
            .iter()
            .any(|ext| n.ends_with(ext))
}

/// Words that say nothing about where to look.
const STOPWORDS: [&str; 40] = [
    "the", "and", "for", "are", "was", "how", "what", "where", "which", "who", "why", "when",
    "does", "did", "this", "that", "these", "those", "with", "from", "into", "about", "there",
    "here", "can", "could", "should", "would", "will", "our", "your", "you", "its", "is", "it",
    "in", "of", "to", "do", "be",
];

/// The part of the answerer's document this answerer reads.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Input {
    question: String,
    #[serde(default)]
    context_files: Vec<InputFile>,
}

#[derive(serde::Deserialize)]
struct InputFile {
    path: String,
    content: String,
}

/// One matching line.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Hit {
    score: usize,
    /// Discovery order: context files first, then the walk's sorted order.
    order: usize,
    path: String,
    line: usize,
    text: String,
}

/// What the search saw, for the answer's first line.
#[derive(Default)]
struct Search {
    hits: Vec<Hit>,
    files: usize,
    bytes: u64,
    cut: bool,
}

/// The question's search terms: lowercase words of three or more characters that are not
/// stopwords, identifiers and paths kept whole, first occurrence order, at most a dozen.
pub fn terms(question: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let words = question.split(|c: char| !(c.is_alphanumeric() || "_-./".contains(c)));
    for w in words {
        let w = w.trim_matches(|c: char| ".-/".contains(c)).to_lowercase();
        if w.chars().count() < 3 || STOPWORDS.contains(&w.as_str()) || out.contains(&w) {
            continue;
        }
        out.push(w);
        if out.len() == WORKSPACE_ANSWER_TERMS_MAX {
            break;
        }
    }
    out
}

/// How many distinct terms `line` contains (case-insensitive).
fn score(line: &str, terms: &[String]) -> usize {
    let lower = line.to_lowercase();
    terms.iter().filter(|t| lower.contains(t.as_str())).count()
}

impl Search {
    fn scan(&mut self, path: &str, text: &str, terms: &[String]) {
        self.files += 1;
        // A file whose name holds a term ranks its lines a little higher.
        let name_bonus = usize::from(score(path, terms) > 0);
        for (i, line) in text.lines().enumerate() {
            let s = score(line, terms);
            if s == 0 {
                continue;
            }
            if self.hits.len() >= WORKSPACE_ANSWER_CANDIDATES_MAX {
                self.cut = true;
                return;
            }
            self.hits.push(Hit {
                score: s * 2 + name_bonus,
                order: self.hits.len(),
                path: path.to_string(),
                line: i + 1,
                text: crate::sanitize::line(line.trim(), WORKSPACE_ANSWER_EXCERPT_CHARS),
            });
        }
    }

    /// Walks `dir` (sorted, bounded), scanning every readable text file not seen yet.
    fn walk(
        &mut self,
        root: &Path,
        rel: &Path,
        depth: usize,
        b: &Bounds,
        t: &[String],
        seen: &[String],
    ) {
        let Ok(entries) = std::fs::read_dir(root.join(rel)) else {
            return;
        };
        let mut names: Vec<_> = entries.flatten().map(|e| e.file_name()).collect();
        names.sort();
        for name in names {
            if self.files >= b.files || self.bytes >= b.total_bytes {
                self.cut = true;
                return;
            }
            let rel = rel.join(&name);
            let Ok(meta) = std::fs::symlink_metadata(root.join(&rel)) else {
                continue;
            };
            let shown = rel.to_string_lossy().into_owned();
            if meta.is_dir() {
                let skip = SKIPPED_DIRS.iter().any(|d| name.to_str() == Some(d));
                if !skip && depth < b.depth {
                    self.walk(root, &rel, depth + 1, b, t, seen);
                }
            } else if meta.is_file()
                && meta.len() <= b.file_bytes
                && !seen.contains(&shown)
                && !secret_name(&name.to_string_lossy())
            {
                self.read_and_scan(&root.join(&rel), &shown, t, b.file_bytes);
            }
        }
    }

    /// Reads at most `max` bytes without following a link (the file may have changed since
    /// it was looked at).
    fn read_and_scan(&mut self, path: &Path, shown: &str, terms: &[String], max: u64) {
        use std::io::Read;
        use std::os::unix::fs::OpenOptionsExt;
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
            .open(path);
        let mut bytes = Vec::new();
        if opened
            .and_then(|f| f.take(max).read_to_end(&mut bytes))
            .is_err()
        {
            return;
        }
        self.bytes += bytes.len() as u64;
        // Binary: a NUL early on, as git and grep decide.
        if bytes.iter().take(8192).any(|b| *b == 0) {
            return;
        }
        self.scan(shown, &String::from_utf8_lossy(&bytes), terms);
    }
}

/// Answers the answerer's document `input` from the workspace at `workspace`.
pub fn answer(input: &[u8], workspace: &Path, b: &Bounds) -> Result<String> {
    let doc: Input = serde_json::from_slice(input).map_err(|e| {
        Error::new(
            Code::Usage,
            format!("stdin is not the answerer's JSON document ({e})"),
        )
    })?;
    let terms = terms(&doc.question);
    if terms.is_empty() {
        return Ok(
            "The question has no word to search the workspace for; ask with names, paths or identifiers.\n"
                .into(),
        );
    }
    let mut s = Search::default();
    let mut seen = Vec::new();
    for f in doc.context_files.iter().take(b.files) {
        let path = crate::sanitize::line(&f.path, 300);
        s.scan(&path, &f.content, &terms);
        seen.push(f.path.clone());
    }
    s.walk(workspace, Path::new(""), 0, b, &terms, &seen);
    Ok(render(s, &terms, b))
}

fn render(mut s: Search, terms: &[String], b: &Bounds) -> String {
    use std::fmt::Write;
    s.hits
        .sort_by(|x, y| y.score.cmp(&x.score).then(x.order.cmp(&y.order)));
    let total = s.hits.len();
    s.hits.truncate(b.matches);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Searched {} file(s) of the workspace for: {}{}.",
        s.files,
        terms.join(", "),
        if s.cut {
            " (search bounds reached)"
        } else {
            ""
        }
    );
    if s.hits.is_empty() {
        out.push_str("No line mentions any of these terms.\n");
        return out;
    }
    let _ = writeln!(
        out,
        "{} matching line(s); the best {}, most terms first:\n",
        total,
        s.hits.len()
    );
    for h in &s.hits {
        let _ = writeln!(out, "{}:{}: {}", h.path, h.line, h.text);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_drop_stopwords_and_keep_identifiers() {
        assert_eq!(
            terms("Where is the DATABASE_URL configured? In docker-compose.yml or src/db.rs?"),
            [
                "database_url",
                "configured",
                "docker-compose.yml",
                "src/db.rs"
            ]
        );
        assert!(terms("is it in of?").is_empty());
    }

    #[test]
    fn answers_with_file_line_excerpts_from_context_and_tree() {
        let dir = crate::fsutil::TempDir::new("wsanswer").unwrap();
        let ws = dir.path();
        std::fs::create_dir_all(ws.join("src")).unwrap();
        std::fs::create_dir_all(ws.join("target")).unwrap();
        std::fs::create_dir_all(ws.join(".git")).unwrap();
        std::fs::write(
            ws.join("src/db.rs"),
            "fn x() {}\nlet url = env(\"DATABASE_URL\");\n",
        )
        .unwrap();
        std::fs::write(ws.join("target/out.txt"), "DATABASE_URL in build output\n").unwrap();
        std::fs::write(ws.join(".git/config"), "DATABASE_URL\n").unwrap();
        std::fs::write(ws.join("blob.bin"), b"DATABASE_URL\0\x01").unwrap();
        std::fs::write(
            ws.join(".env.local"),
            "DATABASE_URL=postgres://u:secret@db\n",
        )
        .unwrap();
        std::fs::write(ws.join("server.key"), "DATABASE_URL key\n").unwrap();
        let input = serde_json::json!({
            "askId": "a", "caller": "ada", "workspace": ws.to_string_lossy(),
            "question": "Where is the DATABASE_URL configured?",
            "contextFiles": [{"path": "compose.yml", "content": "env:\n  DATABASE_URL: postgres://dev\n"}],
            "messages": [],
        });
        let text = answer(input.to_string().as_bytes(), ws, &Bounds::default()).unwrap();
        assert!(
            text.contains("compose.yml:2: DATABASE_URL: postgres://dev"),
            "{text}"
        );
        assert!(text.contains("src/db.rs:2: let url"), "{text}");
        assert!(
            !text.contains("target/") && !text.contains(".git") && !text.contains("blob.bin"),
            "{text}"
        );
        assert!(
            !text.contains("secret") && !text.contains("server.key"),
            "{text}"
        );
        // Bounded: one match at most.
        let one = Bounds {
            matches: 1,
            ..Bounds::default()
        };
        let text = answer(input.to_string().as_bytes(), ws, &one).unwrap();
        assert_eq!(
            text.lines().filter(|l| l.contains(": ")).count(),
            2,
            "{text}"
        );
        assert!(answer(b"not json", ws, &one).is_err());
    }
}
