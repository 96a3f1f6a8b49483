//! The code keeps one idea per file: no source file under `src/` is over 600 lines (the Redis
//! store grew to 944 in one file before it was split; this keeps later work from regrowing it).
//! The folders are layers and imports only run down: [`MAY_IMPORT`] lists them bottom-up, the
//! import graph (`imports.rs`) may hold no edge back up and no loop between files, and every
//! item has one path (no re-exports). One vocabulary: no two types in `src/` share a name. And
//! errors are types: no `Result<_, String>` under `src/`, and no error that only carries a
//! message (an enum per concern, its variants holding what the message needs, as
//! `src/config/error.rs` does).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const MAX_LINES: usize = 600;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src/") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn src(under: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    rust_files(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src")
            .join(under),
        &mut files,
    );
    files
}

/// The file's lines that are code, not comments, with their numbers (from 1), trimmed.
fn code_lines(f: &Path) -> Vec<(usize, String)> {
    std::fs::read_to_string(f)
        .expect("a source file")
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim().to_string()))
        .filter(|(_, l)| !l.starts_with("//"))
        .collect()
}

#[test]
fn no_source_file_is_over_600_lines() {
    let files = src("");
    assert!(files.len() > 10, "found only {files:?}");
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let lines = std::fs::read_to_string(f)
                .expect("a source file")
                .lines()
                .count();
            (lines > MAX_LINES).then(|| format!("{} ({lines} lines)", f.display()))
        })
        .collect();
    assert!(
        long.is_empty(),
        "over {MAX_LINES} lines, split by idea: {long:?}"
    );
}

/// The name a line declares as a `struct` or `enum`, if it does (any visibility).
fn declared_type(line: &str) -> Option<&str> {
    let mut rest = line;
    if let Some(r) = rest.strip_prefix("pub") {
        rest = match r.strip_prefix('(') {
            Some(r) => r.split_once(')')?.1,
            None => r,
        };
    }
    let rest = rest.trim_start();
    let rest = rest
        .strip_prefix("struct ")
        .or_else(|| rest.strip_prefix("enum "))?;
    let end = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    (end > 0).then(|| &rest[..end])
}

#[test]
fn declared_type_reads_every_visibility() {
    assert_eq!(declared_type("pub struct Plan<'c> {"), Some("Plan"));
    assert_eq!(
        declared_type("pub(super) struct RedisDecision<'a> {"),
        Some("RedisDecision")
    );
    assert_eq!(declared_type("enum Phase {"), Some("Phase"));
    assert_eq!(declared_type("pub(crate) enum Mode;"), Some("Mode"));
    assert_eq!(declared_type("let structure = 1;"), None);
    assert_eq!(declared_type("pub fn start("), None);
}

#[test]
fn no_two_types_share_a_name() {
    let mut by_name: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let files = src("");
    for f in &files {
        for (n, l) in code_lines(f) {
            if let Some(name) = declared_type(&l) {
                by_name
                    .entry(name.to_string())
                    .or_default()
                    .push(format!("{}:{n}", f.display()));
            }
        }
    }
    assert!(by_name.len() > 50, "found only {by_name:?}");
    let shared: Vec<_> = by_name.iter().filter(|(_, at)| at.len() > 1).collect();
    assert!(
        shared.is_empty(),
        "one name per type: rename one of each {shared:?}"
    );
}

#[test]
fn no_error_is_a_string() {
    // `Result<.*, *String>`, as `git grep -nE` reads it.
    let string_error = regex::Regex::new(r"Result<.*, *String>").expect("a regex");
    let found: Vec<String> = src("")
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).expect("a source file");
            text.lines()
                .enumerate()
                .filter(|(_, line)| string_error.is_match(line))
                .map(|(i, line)| format!("{}:{}: {}", f.display(), i + 1, line.trim()))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        found.is_empty(),
        "Result<_, String> in src/: give the error a type (thiserror), as src/config/error.rs \
         does:\n{}",
        found.join("\n")
    );
}

/// The folders of `src/`, bottom-up, each with the folders it may import besides itself: a
/// folder imports only folders listed before it (`pb.rs` is below all of them). `cli/` is
/// imported by `main.rs` alone, which may import anything.
const MAY_IMPORT: &[(&str, &[&str])] = &[
    ("pb", &[]),
    ("base", &[]),
    ("telemetry", &["pb", "base"]),
    ("limit", &["base"]),
    ("algorithm", &["limit", "base"]),
    ("config", &["pb", "base", "telemetry", "limit", "algorithm"]),
    (
        "plan",
        &["pb", "base", "telemetry", "limit", "algorithm", "config"],
    ),
    (
        "store",
        &["base", "telemetry", "limit", "algorithm", "config", "plan"],
    ),
    (
        "service",
        &[
            "pb",
            "base",
            "telemetry",
            "limit",
            "algorithm",
            "config",
            "plan",
            "store",
        ],
    ),
    (
        "admin",
        &[
            "pb",
            "base",
            "telemetry",
            "limit",
            "algorithm",
            "config",
            "plan",
            "store",
            "service",
        ],
    ),
    (
        "serve",
        &[
            "pb",
            "base",
            "telemetry",
            "algorithm",
            "config",
            "store",
            "service",
            "admin",
        ],
    ),
    (
        "cli",
        &[
            "pb",
            "base",
            "telemetry",
            "limit",
            "config",
            "store",
            "service",
            "admin",
            "serve",
        ],
    ),
];

/// The folder (or, for `lib.rs`, `pb.rs`, `main.rs`, the file) a file of `src/` lives in.
fn folder(rel: &str) -> &str {
    match rel.split_once('/') {
        Some((dir, _)) => dir,
        None => rel.strip_suffix(".rs").unwrap_or(rel),
    }
}

fn graph() -> super::imports::Graph {
    super::imports::read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

#[test]
fn the_table_of_folders_is_bottom_up() {
    for (i, (name, may)) in MAY_IMPORT.iter().enumerate() {
        for m in *may {
            let below = MAY_IMPORT[..i].iter().any(|(n, _)| n == m);
            assert!(below, "{name} may import {m}, which is not listed below it");
        }
    }
}

#[test]
fn src_holds_only_main_lib_pb_and_folders() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut stray = Vec::new();
    for entry in std::fs::read_dir(&root).expect("read src/") {
        let path = entry.expect("an entry").path();
        let name = path
            .file_name()
            .expect("a name")
            .to_string_lossy()
            .to_string();
        if path.is_dir() {
            if !MAY_IMPORT.iter().any(|(f, _)| *f == name) {
                stray.push(format!("{name}/ (a folder missing from MAY_IMPORT)"));
            }
        } else if !["main.rs", "lib.rs", "pb.rs"].contains(&name.as_str()) {
            stray.push(name);
        }
    }
    assert!(
        stray.is_empty(),
        "src/ holds main.rs, lib.rs, pb.rs and folders; move {stray:?}"
    );
}

#[test]
fn imports_only_run_down() {
    let g = graph();
    assert!(g.modules.len() > 40, "read only {:?}", g.modules.keys());
    assert!(g.edges.len() > 100, "found only {} imports", g.edges.len());
    let mut up = Vec::new();
    for e in &g.edges {
        let (from, to) = (folder(&e.from), folder(&e.to));
        if from == to {
            continue;
        }
        let allowed = MAY_IMPORT
            .iter()
            .find(|(f, _)| *f == from)
            .is_some_and(|(_, may)| may.contains(&to));
        if !allowed {
            up.push(format!(
                "src/{}:{}: {} ({from} may not import {to})",
                e.from, e.line, e.path
            ));
        }
    }
    assert!(
        up.is_empty(),
        "imports that run back up (move the item down, or pass it in from above):\n{}",
        up.join("\n")
    );
}

#[test]
fn no_files_import_each_other_in_a_loop() {
    let g = graph();
    let loops = super::imports::loops(&g.edges);
    let shown: Vec<String> = loops
        .iter()
        .map(|files| {
            let ties: Vec<String> = g
                .edges
                .iter()
                .filter(|e| files.contains(&e.from) && files.contains(&e.to))
                .map(|e| format!("  src/{}:{} -> src/{}: {}", e.from, e.line, e.to, e.path))
                .collect();
            format!("{}:\n{}", files.join(", "), ties.join("\n"))
        })
        .collect();
    assert!(
        loops.is_empty(),
        "files that import each other in a loop:\n{}",
        shown.join("\n\n")
    );
}

#[test]
fn every_item_has_one_path() {
    // No re-exports: an item is imported from the file that defines it, and only there.
    // `pb.rs` names the generated packages it holds (`pb::rls` for Envoy's
    // `envoy.service.ratelimit.v3`): the only path to each of them.
    let found: Vec<String> = src("")
        .iter()
        .filter(|f| !f.ends_with("pb.rs"))
        .flat_map(|f| {
            let text =
                super::imports::blank_test_items(&super::imports::blank_comments_and_strings(
                    &std::fs::read_to_string(f).expect("a source file"),
                ));
            text.lines()
                .enumerate()
                .filter(|(_, l)| {
                    let l = l.trim_start();
                    l.starts_with("pub use ") || (l.starts_with("pub(") && l.contains(") use "))
                })
                .map(|(i, l)| format!("{}:{}: {}", f.display(), i + 1, l.trim()))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        found.is_empty(),
        "re-exports give an item a second path:\n{}",
        found.join("\n")
    );
}

/// The errors that carry nothing but a message: a struct `…Error(String)`, or a variant that
/// is a `String` shown as the whole message (`#[error("{0}")] Variant(String)`).
fn message_only_errors(text: &str) -> Vec<(usize, String)> {
    let wraps = regex::Regex::new(r"^(pub(\([^)]*\))? )?struct \w*Error\s*\(\s*(pub )?String\s*\)")
        .expect("a regex");
    let variant = regex::Regex::new(r"^\w+\s*\(\s*String\s*\),?$").expect("a regex");
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if wraps.is_match(line) {
            found.push((i + 1, line.to_string()));
        }
        if line.replace(' ', "") == "#[error(\"{0}\")]" {
            let next = lines[i + 1..]
                .iter()
                .enumerate()
                .find(|(_, l)| !l.starts_with("#[") && !l.starts_with("//"));
            if let Some((j, l)) = next.filter(|(_, l)| variant.is_match(l)) {
                found.push((i + 2 + j, l.to_string()));
            }
        }
    }
    found
}

#[test]
fn message_only_errors_are_found() {
    let text = "#[error(\"{0}\")]\npub struct PlanError(pub String);\n\
                pub enum CallError {\n    #[error(\"{0}\")]\n    Invalid(String),\n\
                #[error(\"bad unit '{0}'\")]\n    Unit(String),\n}\n";
    let found: Vec<usize> = message_only_errors(text)
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(found, [2, 5]);
}

#[test]
fn no_error_only_carries_a_message() {
    let found: Vec<String> = src("")
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).expect("a source file");
            message_only_errors(&text)
                .into_iter()
                .map(|(n, l)| format!("{}:{n}: {l}", f.display()))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        found.is_empty(),
        "an error that carries only a message: give it a cause (an enum of what went wrong, \
         each variant holding what its message needs):\n{}",
        found.join("\n")
    );
}
