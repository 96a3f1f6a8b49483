//! The import graph of `src/`, read from the text, for `layout.rs`: every `crate::`, `super::`
//! and `self::` path in non-test code (in a `use` or inline: `crate::x::f()` in an expression
//! counts), and in a `use` a path that starts at a child module, resolved to the file that
//! defines its module. `mod` declarations are not edges; comments, string literals and items
//! under `#[cfg(test)]` are not read. A path that names an item stops at the file of the
//! deepest module it walks through, so `crate::store::redis::scripts::script::eval` is an edge to
//! `src/store/redis/scripts/script.rs`, and `crate::pb::rls::RateLimitRequest` (an inline module of
//! generated code) to `src/pb.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One import: `from` names an item of `to` (both paths relative to `src/`) at `line`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Edge {
    pub from: String,
    pub to: String,
    pub line: usize,
    pub path: String,
}

/// The files of `src/` (test-only files left out) and the imports between them.
pub struct Graph {
    /// Module path (`store::redis::scripts::script`) → file, relative to `src/`.
    pub modules: BTreeMap<String, String>,
    pub edges: Vec<Edge>,
}

/// `text` with comments, string and char literals blanked out (newlines kept, so line numbers
/// hold).
pub fn blank_comments_and_strings(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
        } else if (c == 'r' || (c == 'b' && next == Some('r')))
            && !b[..i]
                .last()
                .is_some_and(|p| p.is_alphanumeric() || *p == '_')
            && raw_string_start(&b, i).is_some()
        {
            let (hashes, body) = raw_string_start(&b, i).unwrap_or((0, i));
            out.extend(std::iter::repeat_n(' ', body - i));
            i = body;
            let close: Vec<char> = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            while i < b.len() && !b[i..].starts_with(&close) {
                out.push(blank(b[i]));
                i += 1;
            }
            out.extend(std::iter::repeat_n(' ', close.len().min(b.len() - i)));
            i += close.len();
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < b.len() {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' && is_char_literal(&b, i) {
            out.push(' ');
            i += 1;
            while i < b.len() && b[i] != '\'' {
                if b[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                out.push(' ');
                i += 1;
            }
            out.push(' ');
            i += 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// At `r"`, `r#"`, `br##"`…: the number of `#` and where the body starts.
fn raw_string_start(b: &[char], i: usize) -> Option<(usize, usize)> {
    let mut j = i + if b[i] == 'b' { 2 } else { 1 };
    let mut hashes = 0;
    while b.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    (b.get(j) == Some(&'"')).then_some((hashes, j + 1))
}

/// A `'` that opens a char literal (`'a'`, `'\n'`, `'\u{1F600}'`), not a lifetime.
fn is_char_literal(b: &[char], i: usize) -> bool {
    match b.get(i + 1) {
        Some('\\') => true,
        Some(_) => b.get(i + 2) == Some(&'\''),
        None => false,
    }
}

/// `text` (already blanked) without the items under `#[cfg(test)]`.
pub fn blank_test_items(text: &str) -> String {
    let mark: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut b: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i + mark.len() <= b.len() {
        if b[i..i + mark.len()] != mark[..] {
            i += 1;
            continue;
        }
        // The item ends at a `;` outside braces, or at the brace that closes its first `{`.
        let start = i;
        let mut j = i + mark.len();
        let mut depth = 0usize;
        while j < b.len() {
            match b[j] {
                '{' => depth += 1,
                '}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        j += 1;
                        break;
                    }
                }
                ';' if depth == 0 => {
                    j += 1;
                    break;
                }
                _ => {}
            }
            j += 1;
        }
        let end = j.min(b.len());
        for c in &mut b[start..end] {
            if *c != '\n' {
                *c = ' ';
            }
        }
        i = j;
    }
    b.into_iter().collect()
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The names of the modules `text` declares with `mod name;` (its child files).
fn declared_children(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for stmt in text.split([';', '{', '}']) {
        let words: Vec<&str> = stmt.split_whitespace().collect();
        if let Some(pos) = words.iter().position(|w| *w == "mod") {
            if pos + 2 == words.len() || words.len() == pos + 2 {
                if let Some(name) = words.get(pos + 1) {
                    if name.chars().all(is_ident) {
                        out.insert(name.to_string());
                    }
                }
            }
        }
    }
    out
}

/// Expands a `use` tree (`crate::a::{b, c::{d, self}}`) into whole paths.
fn expand_use(tree: &str) -> Vec<Vec<String>> {
    fn skip_ws(s: &[char], i: &mut usize) {
        while *i < s.len() && s[*i].is_whitespace() {
            *i += 1;
        }
    }
    fn parse(s: &[char], i: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
        let mut path: Vec<String> = prefix.to_vec();
        loop {
            skip_ws(s, i);
            if s.get(*i) == Some(&'{') {
                *i += 1;
                loop {
                    skip_ws(s, i);
                    match s.get(*i) {
                        None => return,
                        Some('}') => {
                            *i += 1;
                            return;
                        }
                        Some(',') => *i += 1,
                        Some(_) => parse(s, i, &path, out),
                    }
                }
            }
            let start = *i;
            while *i < s.len() && (is_ident(s[*i]) || s[*i] == '*') {
                *i += 1;
            }
            let seg: String = s[start..*i].iter().collect();
            if seg.is_empty() {
                break;
            }
            // `a::{self}` names `a` itself.
            if !(seg == "self" && !prefix.is_empty() && path.len() == prefix.len()) {
                path.push(seg);
            }
            skip_ws(s, i);
            if s[*i..].starts_with(&[':', ':']) {
                *i += 2;
                continue;
            }
            if s[*i..].starts_with(&['a', 's']) && s.get(*i + 2).is_some_and(|c| c.is_whitespace())
            {
                *i += 2;
                skip_ws(s, i);
                while *i < s.len() && is_ident(s[*i]) {
                    *i += 1;
                }
            }
            break;
        }
        out.push(path);
    }
    let chars: Vec<char> = tree.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    parse(&chars, &mut i, &[], &mut out);
    out
}

/// Every path (its segments and line) that may name a module of the crate in `text`.
fn paths(text: &str, children: &BTreeSet<String>) -> Vec<(Vec<String>, usize)> {
    let chars: Vec<char> = text.chars().collect();
    let line_at = |i: usize| 1 + chars[..i].iter().filter(|c| **c == '\n').count();
    let word_at = |i: usize, w: &str| {
        chars[i..].starts_with(&w.chars().collect::<Vec<_>>())
            && !chars.get(i + w.len()).is_some_and(|c| is_ident(*c))
            && (i == 0 || !is_ident(chars[i - 1]))
    };
    let mut out = Vec::new();
    let mut in_use = vec![false; chars.len()];
    // `use` statements.
    let mut i = 0;
    while i < chars.len() {
        if word_at(i, "use") && (i == 0 || chars[i - 1] != ':') {
            let end = (i..chars.len())
                .find(|&j| chars[j] == ';')
                .unwrap_or(chars.len());
            let tree: String = chars[i + 3..end].iter().collect();
            for p in expand_use(&tree) {
                let first = p.first().map(String::as_str).unwrap_or("");
                if matches!(first, "crate" | "super" | "self") || children.contains(first) {
                    out.push((p, line_at(i)));
                }
            }
            for flag in &mut in_use[i..end] {
                *flag = true;
            }
            i = end;
        }
        i += 1;
    }
    // Inline paths.
    let mut i = 0;
    while i < chars.len() {
        let preceded_by_path = i >= 2 && chars[i - 1] == ':' && chars[i - 2] == ':';
        if in_use[i] || preceded_by_path || (i > 0 && is_ident(chars[i - 1])) {
            i += 1;
            continue;
        }
        let start = i;
        let mut segs = Vec::new();
        let mut j = i;
        loop {
            let s = j;
            while j < chars.len() && is_ident(chars[j]) {
                j += 1;
            }
            if s == j {
                break;
            }
            segs.push(chars[s..j].iter().collect::<String>());
            if chars[j..].starts_with(&[':', ':']) && chars.get(j + 2).is_some_and(|c| is_ident(*c))
            {
                j += 2;
            } else {
                break;
            }
        }
        let first = segs.first().map(String::as_str).unwrap_or("");
        let rooted = matches!(first, "crate" | "super" | "self") || children.contains(first);
        if segs.len() > 1 && rooted {
            out.push((segs, line_at(start)));
        }
        i = j.max(i + 1);
    }
    out
}

fn parent(module: &str) -> String {
    module
        .rsplit_once("::")
        .map_or(String::new(), |(p, _)| p.into())
}

fn join(module: &str, seg: &str) -> String {
    if module.is_empty() {
        seg.to_string()
    } else {
        format!("{module}::{seg}")
    }
}

/// Reads `src_dir` (`src/`): every file the library compiles outside tests (not `main.rs`:
/// the binary, which may import anything), and its imports.
pub fn read(src_dir: &Path) -> Graph {
    let mut texts: BTreeMap<String, String> = BTreeMap::new();
    let mut stack = vec![src_dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src/") {
            let path: PathBuf = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path
                    .strip_prefix(src_dir)
                    .expect("under src/")
                    .to_string_lossy()
                    .replace('\\', "/");
                let text = std::fs::read_to_string(&path).expect("a source file");
                texts.insert(rel, blank_test_items(&blank_comments_and_strings(&text)));
            }
        }
    }
    // The module tree from `lib.rs` down, through the `mod` declarations tests do not hide.
    let mut modules: BTreeMap<String, String> = BTreeMap::new();
    let mut children_of: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut todo = vec![("lib.rs".to_string(), String::new())];
    while let Some((file, module)) = todo.pop() {
        let Some(text) = texts.get(&file) else {
            continue;
        };
        let children = declared_children(text);
        let dir = match file.strip_suffix("mod.rs") {
            Some(d) => d.to_string(),
            None if file == "lib.rs" => String::new(),
            None => format!("{}/", file.strip_suffix(".rs").unwrap_or(&file)),
        };
        for child in &children {
            for candidate in [format!("{dir}{child}.rs"), format!("{dir}{child}/mod.rs")] {
                if texts.contains_key(&candidate) {
                    todo.push((candidate, join(&module, child)));
                }
            }
        }
        children_of.insert(module.clone(), children);
        modules.insert(module, file);
    }
    let mut edges = Vec::new();
    for (module, file) in &modules {
        let children = &children_of[module];
        for (segs, line) in paths(&texts[file], children) {
            let mut at = match segs[0].as_str() {
                "crate" => String::new(),
                "self" => module.clone(),
                "super" => parent(module),
                child => join(module, child),
            };
            if !modules.contains_key(&at) {
                // A child module written inline in this file.
                continue;
            }
            for seg in &segs[1..] {
                let next = match seg.as_str() {
                    "super" => parent(&at),
                    "self" => at.clone(),
                    s => join(&at, s),
                };
                if modules.contains_key(&next) {
                    at = next;
                } else {
                    break;
                }
            }
            let to = &modules[&at];
            if to != file && !at.is_empty() {
                edges.push(Edge {
                    from: file.clone(),
                    to: to.clone(),
                    line,
                    path: segs.join("::"),
                });
            }
        }
    }
    edges.sort();
    edges.dedup_by(|a, b| a.from == b.from && a.to == b.to && a.path == b.path);
    Graph { modules, edges }
}

/// The files that import each other in a loop: the strongly connected components of the
/// file graph with more than one file (Tarjan's algorithm), each sorted.
pub fn loops(edges: &[Edge]) -> Vec<Vec<String>> {
    let mut next: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for e in edges {
        next.entry(&e.from).or_default().insert(&e.to);
        next.entry(&e.to).or_default();
    }
    struct Walk<'a> {
        next: &'a BTreeMap<&'a str, BTreeSet<&'a str>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(w: &mut Walk<'a>, v: &'a str) {
        let i = w.index.len();
        w.index.insert(v, i);
        w.low.insert(v, i);
        w.stack.push(v);
        w.on_stack.insert(v);
        let next = w.next;
        for &n in &next[v] {
            if !w.index.contains_key(n) {
                visit(w, n);
                let low = w.low[v].min(w.low[n]);
                w.low.insert(v, low);
            } else if w.on_stack.contains(n) {
                let low = w.low[v].min(w.index[n]);
                w.low.insert(v, low);
            }
        }
        if w.low[v] == w.index[v] {
            let mut component = Vec::new();
            while let Some(n) = w.stack.pop() {
                w.on_stack.remove(n);
                component.push(n.to_string());
                if n == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                w.found.push(component);
            }
        }
    }
    let mut w = Walk {
        next: &next,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for &v in next.keys() {
        if !w.index.contains_key(v) {
            visit(&mut w, v);
        }
    }
    w.found.sort();
    w.found
}

#[test]
fn reads_use_trees_inline_paths_and_skips_tests_comments_and_strings() {
    let text = r##"
//! A doc naming crate::nowhere::Thing.
use crate::a::{b::{self, C}, d as e};
use super::sibling::*;
use child::Item;
mod child;
fn f() {
    let s = "crate::in_a_string::X";
    let r = r#"crate::raw::Y"#;
    let c = '"';
    crate::inline::call();
    let _: Vec<super::up::T> = Vec::new();
}
#[cfg(test)]
mod tests {
    use crate::only_in_tests::Z;
}
"##;
    let blank = blank_test_items(&blank_comments_and_strings(text));
    let children: BTreeSet<String> = declared_children(&blank);
    assert_eq!(children, BTreeSet::from(["child".to_string()]));
    let found: Vec<String> = paths(&blank, &children)
        .into_iter()
        .map(|(p, line)| format!("{}@{line}", p.join("::")))
        .collect();
    assert_eq!(
        found,
        [
            "crate::a::b@3",
            "crate::a::b::C@3",
            "crate::a::d@3",
            "super::sibling::*@4",
            "child::Item@5",
            "crate::inline::call@11",
            "super::up::T@12",
        ]
    );
}
