//! The documented flags are the binary's: every flag of `tollgate`, `serve`, `query` and
//! `check-config` is in docs/cli.md, and every flag README.md and docs/*.md name outside
//! the `tollgate-bench` section (checked by that crate) exists, or is another tool's. The
//! config excerpts of README.md and docs/configuration.md are in the example files they quote.

use std::collections::BTreeSet;
use std::process::Command;

use crate::support::binary::BIN;

/// Flags README.md and docs/ name that belong to other tools (cargo and its test harness,
/// helm, docker, envoy, redis-cli).
const OTHER_TOOLS: &[&str] = &[
    "--cluster",
    "--release",
    "--workspace",
    "--all-targets",
    "--check",
    "--bench",
    "--path",
    "--set",
    "--mode",
    "--test",
    "--nocapture",
    "--build-arg",
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

fn read(path: &str) -> String {
    std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// docs/cli.md without its `tollgate-bench` section (the last one).
fn cli_without_bench_section() -> String {
    let cli = read("docs/cli.md");
    let start = cli.find("## `tollgate-bench`").expect("bench section");
    let end = cli[start + 3..]
        .find("\n## ")
        .map_or(cli.len(), |e| start + 3 + e);
    format!("{}{}", &cli[..start], &cli[end..])
}

/// README.md and every file of docs/, docs/cli.md without its bench section.
fn every_doc() -> String {
    let mut text = read("README.md");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
    for entry in std::fs::read_dir(&dir).expect("docs/") {
        let path = entry.expect("docs entry").path();
        if path.extension().is_some_and(|e| e == "md") && !path.ends_with("cli.md") {
            text.push_str(&std::fs::read_to_string(&path).expect("a doc"));
        }
    }
    text + &cli_without_bench_section()
}

#[test]
fn every_flag_is_documented_and_every_documented_flag_exists() {
    let in_cli = flags_in(&cli_without_bench_section());
    let documented = flags_in(&every_doc());
    let mut known: BTreeSet<String> = OTHER_TOOLS.iter().map(|s| s.to_string()).collect();
    let mut missing = Vec::new();
    for sub in [
        &["--help"][..],
        &["serve", "--help"],
        &["query", "--help"],
        &["check-config", "--help"],
        &["counters", "--help"],
        &["reset", "--help"],
        &["top", "--help"],
        &["move-home", "--help"],
    ] {
        for flag in flags_in(&help(sub)) {
            if !["--help", "--version"].contains(&flag.as_str()) && !in_cli.contains(&flag) {
                missing.push(format!("{} {flag}", sub[0]));
            }
            known.insert(flag);
        }
    }
    assert!(
        missing.is_empty(),
        "flags docs/cli.md does not mention: {missing:?}"
    );
    let unknown: Vec<&String> = documented.difference(&known).collect();
    assert!(
        unknown.is_empty(),
        "README.md or docs/ name flags no command has: {unknown:?}"
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

/// Every non-blank line of the ```yaml block starting with `first` in `doc` is a line of
/// `example`, in order.
fn excerpt_is_in(doc: &str, first: &str, example: &str) {
    let text = read(doc);
    let start = text
        .find(&format!("```yaml\n{first}"))
        .unwrap_or_else(|| panic!("{doc}: no excerpt starting {first:?}"))
        + 8;
    let end = start + text[start..].find("```").expect("end of excerpt");
    let example_text = read(example);
    let mut file_lines = example_text.lines();
    for line in text[start..end].lines().filter(|l| !l.trim().is_empty()) {
        assert!(
            file_lines.any(|f| f == line),
            "{doc}'s excerpt line {line:?} is not in {example} (in order)"
        );
    }
}

#[test]
fn the_config_excerpts_are_in_the_example_files() {
    excerpt_is_in("README.md", "domain: edge", "examples/ratelimit.yaml");
    excerpt_is_in(
        "README.md",
        "domain: llm-gateway",
        "examples/llm-gateway.yaml",
    );
    excerpt_is_in(
        "docs/configuration.md",
        "domain: llm-gateway",
        "examples/llm-gateway.yaml",
    );
}

/// `package version -> features` as `cargo tree` resolves them for `args`.
fn resolved_features(args: &[&str]) -> std::collections::BTreeMap<String, BTreeSet<String>> {
    let out = Command::new(env!("CARGO"))
        .args(["tree", "--offline", "--prefix", "none", "-f", "{p}|{f}"])
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut map = std::collections::BTreeMap::<String, BTreeSet<String>>::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let line = line.trim_end_matches(" (*)");
        if let Some((package, features)) = line.split_once('|') {
            // Path packages carry their directory; the name and version are enough.
            let package = package.split(" (").next().unwrap_or(package).to_string();
            map.entry(package).or_default().extend(
                features
                    .split(',')
                    .filter(|f| !f.is_empty())
                    .map(str::to_string),
            );
        }
    }
    map
}

/// README's two commands share one build: every crate `cargo run --release` compiles is
/// resolved with the same features by `cargo test --release --workspace`, so the second
/// command compiles only what the tests add (Cargo.toml's "feature unification" list).
#[test]
fn the_test_build_reuses_what_the_run_build_compiled() {
    let run = resolved_features(&["-p", "tollgate", "-e", "normal,build"]);
    let test = resolved_features(&["--workspace", "-e", "normal,build,dev"]);
    let differ: Vec<String> = run
        .iter()
        .filter_map(|(package, features)| {
            let in_test = test.get(package)?;
            (in_test != features).then(|| {
                let extra: Vec<&String> = in_test.difference(features).collect();
                format!("{package}: the test build adds {extra:?}")
            })
        })
        .collect();
    assert!(
        differ.is_empty(),
        "add these features to Cargo.toml's feature-unification list:\n{}",
        differ.join("\n")
    );
}
