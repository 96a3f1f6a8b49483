//! The README's flags are the binary's: every flag of `tollgate`, `serve`, `query` and
//! `check-config` is in README.md, and every flag README.md names outside the
//! `tollgate-bench` section (checked by that crate) exists, or is another tool's.

use std::collections::BTreeSet;
use std::process::Command;

use crate::support::binary::BIN;

/// Flags README.md names that belong to other tools (cargo, helm, docker, envoy).
const OTHER_TOOLS: &[&str] = &[
    "--release",
    "--workspace",
    "--all-targets",
    "--check",
    "--bench",
    "--path",
    "--set",
    "--mode",
];

fn flags_in(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("--") {
        let start = i + at;
        let boundary =
            start == 0 || !bytes[start - 1].is_ascii_alphanumeric() && bytes[start - 1] != b'-';
        let end = start
            + 2
            + text[start + 2..]
                .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'))
                .unwrap_or(text.len() - start - 2);
        let flag = text[start..end].trim_end_matches('-');
        if boundary && flag.len() > 2 && bytes[start + 2].is_ascii_lowercase() {
            out.insert(flag.to_string());
        }
        i = end.max(start + 2);
    }
    out
}

fn help(args: &[&str]) -> String {
    let out = Command::new(BIN)
        .args(args)
        .output()
        .expect("run tollgate --help");
    assert!(out.status.success(), "{args:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn readme_without_bench_section() -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let start = readme.find("### `tollgate-bench`").expect("bench section");
    let end = start + 3 + readme[start + 3..].find("\n##").expect("section end");
    format!("{}{}", &readme[..start], &readme[end..])
}

#[test]
fn every_flag_is_documented_and_every_documented_flag_exists() {
    let readme = readme_without_bench_section();
    let documented = flags_in(&readme);
    let mut known: BTreeSet<String> = OTHER_TOOLS.iter().map(|s| s.to_string()).collect();
    let mut missing = Vec::new();
    for sub in [
        &["--help"][..],
        &["serve", "--help"],
        &["query", "--help"],
        &["check-config", "--help"],
    ] {
        for flag in flags_in(&help(sub)) {
            if !["--help", "--version"].contains(&flag.as_str()) && !documented.contains(&flag) {
                missing.push(format!("{} {flag}", sub[0]));
            }
            known.insert(flag);
        }
    }
    assert!(
        missing.is_empty(),
        "flags README.md does not mention: {missing:?}"
    );
    let unknown: Vec<&String> = documented.difference(&known).collect();
    assert!(
        unknown.is_empty(),
        "README.md names flags no command has: {unknown:?}"
    );
}

#[test]
fn flags_are_found_in_text() {
    let found =
        flags_in("run `tollgate serve --grpc-addr [::]:8081 --admin-json` (not a--b, x --) --x-y-");
    let want: BTreeSet<String> = ["--grpc-addr", "--admin-json", "--x-y"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(found, want);
}
