//! A function reads in one sitting: none in `src/plan/` is over 60 lines (the plan is a
//! sequence of passes, `src/plan/pipeline.rs`), none in the Lua scripts over 80 (the decision
//! script is written in parts, `lua/decide/`), none elsewhere in `src/` over 120. What is a
//! table rather than a function stays whole, and is named here: `Metrics::new` (a table of
//! metric registrations) and the decision script's `build` (the general driver's scope, made
//! only for the calls that need it: its body may only define, which is checked).

use std::path::{Path, PathBuf};

use super::imports::blank_comments_and_strings;

const PLAN_MAX: usize = 60;
const LUA_MAX: usize = 80;
const RUST_MAX: usize = 120;

/// Functions that are tables, not steps: (file under `src/`, function name).
const TABLES: &[(&str, &str)] = &[("telemetry/metrics.rs", "new")];

/// A function: where it starts (file, 1-based line), its name and its length in lines.
#[derive(Debug)]
pub struct Function {
    pub at: String,
    pub name: String,
    pub lines: usize,
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read a source folder") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The `fn`s of Rust source `text` (comments and strings blanked), by brace matching.
pub fn rust_functions(file: &str, text: &str) -> Vec<Function> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(name) = fn_name(line) else { continue };
        let (mut depth, mut started) = (0i64, false);
        for (j, l) in lines.iter().enumerate().skip(i) {
            if !started && l.contains(';') && !l.contains('{') {
                break;
            }
            let opens = l.matches('{').count() as i64;
            depth += opens - l.matches('}').count() as i64;
            started |= opens > 0;
            if started && depth <= 0 {
                out.push(Function {
                    at: format!("{file}:{}", i + 1),
                    name: name.to_string(),
                    lines: j - i + 1,
                });
                break;
            }
        }
    }
    out
}

/// The name a line declares a function by (`pub(crate) async fn name(`), if it does.
fn fn_name(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    loop {
        let before = rest;
        for word in [
            "pub(crate) ",
            "pub(super) ",
            "pub ",
            "async ",
            "const ",
            "unsafe ",
        ] {
            rest = rest.strip_prefix(word).unwrap_or(rest);
        }
        if rest == before {
            break;
        }
    }
    let rest = rest.strip_prefix("fn ")?;
    let end = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    (end > 0).then(|| &rest[..end])
}

/// The functions of Lua source `text`: `[local] function name(` or `name = function(`, to the
/// `end` at the same indent.
pub fn lua_functions(file: &str, text: &str) -> Vec<Function> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let indent = line.len() - line.trim_start().len();
        let t = line.trim_start();
        let t = t.strip_prefix("local ").unwrap_or(t);
        let name = if let Some(rest) = t.strip_prefix("function ") {
            rest.split('(').next().unwrap_or("").trim()
        } else if let Some((name, _)) = t.split_once(" = function(") {
            name.trim()
        } else {
            continue;
        };
        // A one-line function ends on its own line.
        if t.trim_end().ends_with(" end") {
            continue;
        }
        let close = format!("{}end", " ".repeat(indent));
        if let Some(j) = (i + 1..lines.len()).find(|&j| {
            lines[j].starts_with(&close) && lines[j][indent + 3..].trim_start().len() <= 1
        }) {
            out.push(Function {
                at: format!("{file}:{}", i + 1),
                name: name.to_string(),
                lines: j - i + 1,
            });
        }
    }
    out
}

fn too_long(functions: Vec<Function>, max: usize) -> Vec<String> {
    functions
        .into_iter()
        .filter(|f| f.lines > max)
        .map(|f| format!("{} {} ({} lines, at most {max})", f.at, f.name, f.lines))
        .collect()
}

#[test]
fn no_rust_function_is_long() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let mut long = Vec::new();
    for f in files {
        let rel = f
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let text = blank_comments_and_strings(&std::fs::read_to_string(&f).unwrap());
        let max = if rel.starts_with("plan/") {
            PLAN_MAX
        } else {
            RUST_MAX
        };
        let functions = rust_functions(&rel, &text)
            .into_iter()
            .filter(|fun| !TABLES.contains(&(rel.as_str(), fun.name.as_str())))
            .collect();
        long.extend(too_long(functions, max));
    }
    assert!(
        long.is_empty(),
        "split these into named steps:\n{}",
        long.join("\n")
    );
}

/// The decision script as build.rs joins it, with every other Lua script.
fn lua_scripts() -> Vec<(String, String)> {
    let lua = Path::new(env!("CARGO_MANIFEST_DIR")).join("lua");
    let mut out = vec![(
        "the decision script (lua/decide/)".to_string(),
        tollgate::store::redis::scripts::script::Script::tollgate()
            .lua
            .to_string(),
    )];
    for name in ["global.lua", "admin.lua"] {
        out.push((
            format!("lua/{name}"),
            std::fs::read_to_string(lua.join(name)).unwrap(),
        ));
    }
    out
}

#[test]
fn no_lua_function_is_long_and_build_only_defines() {
    let mut long = Vec::new();
    for (file, text) in lua_scripts() {
        let functions = lua_functions(&file, &text)
            .into_iter()
            .filter(|f| f.name != "build")
            .collect();
        long.extend(too_long(functions, LUA_MAX));
    }
    assert!(long.is_empty(), "split these:\n{}", long.join("\n"));

    // `build`'s body: definitions, comments, and its last line, `return general`.
    let lua = tollgate::store::redis::scripts::script::Script::tollgate().lua;
    let start = lua
        .find("\nbuild = function()\n")
        .expect("the script has build()")
        + 1;
    let body = &lua[start..];
    let end = body.find("\nend\n").expect("build() ends");
    let statements: Vec<&str> = body[..end]
        .lines()
        .skip(1)
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .map(str::trim)
        .filter(|l| !(l.starts_with("local ") || l.starts_with("--") || *l == "end"))
        .collect();
    assert_eq!(
        statements,
        ["return general"],
        "build() is a scope of definitions: its steps belong in functions"
    );
}

#[test]
fn the_scanners_find_what_is_long() {
    let rust =
        "fn short() {\n}\n\npub(crate) async fn long() {\n    let a = 1;\n    let b = 2;\n}\n";
    let found = rust_functions("x.rs", rust);
    let lengths: Vec<(&str, usize)> = found.iter().map(|f| (f.name.as_str(), f.lines)).collect();
    assert_eq!(lengths, [("short", 2), ("long", 4)]);
    let lua = "local function a(x)\n  return x\nend\n\nb = function()\n  local function c() return 1 end\n  return c\nend\n";
    let found = lua_functions("x.lua", lua);
    let lengths: Vec<(&str, usize)> = found.iter().map(|f| (f.name.as_str(), f.lines)).collect();
    assert_eq!(lengths, [("a", 3), ("b", 4)]);
}
