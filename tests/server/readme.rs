//! The README's flags are the binary's: every flag of `tollgate`, `serve`, `query` and
//! `check-config` is in README.md, and every flag README.md names outside the
//! `tollgate-bench` section (checked by that crate) exists, or is another tool's.

use std::collections::BTreeSet;
use std::process::Command;

use crate::support::binary::BIN;

/// Flags README.md names that belong to other tools (cargo, helm, docker, envoy, redis-cli).
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

#[test]
fn the_llm_gateway_excerpt_is_in_the_example_file() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/llm-gateway.yaml"
    ))
    .expect("example");
    let start = readme
        .find("```yaml\ndomain: llm-gateway")
        .expect("excerpt")
        + 8;
    let end = start + readme[start..].find("```").expect("end of excerpt");
    let mut file_lines = example.lines();
    for line in readme[start..end].lines().filter(|l| !l.trim().is_empty()) {
        assert!(
            file_lines.any(|f| f == line),
            "README's excerpt line {line:?} is not in examples/llm-gateway.yaml (in order)"
        );
    }
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
