//! The code keeps one idea per file: no source file under `src/` is over 600 lines (the Redis
//! store grew to 944 in one file before it was split; this keeps later work from regrowing it).
//! And errors are types: no `Result<_, String>` under `src/` (an enum per concern, its
//! variants holding what the message needs, as `src/config/error.rs` does).

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

fn source_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    rust_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    assert!(files.len() > 10, "found only {files:?}");
    files
}

#[test]
fn no_source_file_is_over_600_lines() {
    let files = source_files();
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

#[test]
fn no_error_is_a_string() {
    // `Result<.*, *String>`, as `git grep -nE` reads it.
    let string_error = regex::Regex::new(r"Result<.*, *String>").expect("a regex");
    let found: Vec<String> = source_files()
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
