//! One release number everywhere (docs/operations.md, "Versions and upgrades"): `tollgate
//! --version` prints Cargo.toml's version and the commit, and every file that names the
//! release (the chart, the Dockerfile, the Istio and Envoy Gateway manifests, the README, the
//! Python client, the chart check, the changelog) names this one.

use std::path::Path;
use std::process::Command;

use crate::support::binary::BIN;

const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The files that name the release, and how each names it (the text before the version;
/// every occurrence must be followed by this version, and each file has at least one).
const NAMED: &[(&str, &[&str])] = &[
    ("helm/tollgate/Chart.yaml", &["appVersion: \""]),
    ("helm/tollgate/values.yaml", &["tollgate:"]),
    ("helm/tollgate/README.md", &["tollgate:", "image.tag="]),
    ("helm/tollgate/ci/redis-values.yaml", &["tag: \""]),
    ("helm/tollgate/ci/tls-values.yaml", &["tag: \""]),
    ("Dockerfile", &["ARG VERSION=", "tollgate:"]),
    ("deploy/istio/kustomization.yaml", &["newTag: "]),
    ("deploy/istio/README.md", &["tollgate:"]),
    ("deploy/envoy-gateway/values.yaml", &["tollgate:"]),
    (
        "deploy/envoy-gateway/envoy-gateway-config.yaml",
        &["tollgate:"],
    ),
    ("deploy/envoy-gateway/README.md", &["tollgate:"]),
    ("README.md", &["tollgate:"]),
    ("docs/operations.md", &["tollgate:"]),
    ("clients/python/pyproject.toml", &["\nversion = \""]),
    (
        "clients/python/tollgate_client/__init__.py",
        &["__version__ = \""],
    ),
    (
        "scripts/check_chart.py",
        &["tollgate:", "image.tag=", "== \""],
    ),
    ("tollgate-bench/Cargo.toml", &["\nversion = \""]),
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(file: &str) -> String {
    std::fs::read_to_string(root().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// The word at the start of `text` a version could be (`1.2.3`, optionally `-pre`).
fn version_at(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '-'))
        .unwrap_or(text.len());
    &text[..end]
}

/// Every version `file` names after one of `before`; a name followed by something that is no
/// version (`tollgate:latest`, `tollgate:<appVersion>`, `"0.0.0.0"`) is not one.
fn named_versions(file: &str, text: &str, before: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for b in before {
        for (at, _) in text.match_indices(b) {
            let word = version_at(&text[at + b.len()..]);
            let core = word.split('-').next().unwrap_or_default();
            let parts: Vec<&str> = core.split('.').collect();
            let semver = parts.len() == 3
                && parts
                    .iter()
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
            if semver {
                found.push(format!("{file}: {b}{word}"));
            }
        }
    }
    found
}

#[test]
fn every_file_that_names_the_release_names_cargo_toml_s_version() {
    let mut wrong = Vec::new();
    for (file, before) in NAMED {
        let text = read(file);
        let found = named_versions(file, &text, before);
        assert!(
            !found.is_empty(),
            "{file} names no release after any of {before:?}: this test's table is out of date"
        );
        wrong.extend(found.into_iter().filter(|f| !f.ends_with(VERSION)));
    }
    assert!(
        wrong.is_empty(),
        "these name another release than Cargo.toml's {VERSION}:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_changelog_opens_with_this_release_and_the_chart_version_it_shipped() {
    let changelog = read("CHANGELOG.md");
    // Keep a Changelog: what has landed since the release may sit above it, under
    // `## [Unreleased]`; the first release heading is this one.
    let first = changelog
        .lines()
        .find(|l| l.starts_with("## [") && !l.starts_with("## [Unreleased]"))
        .expect("CHANGELOG.md has a `## [version]` heading");
    assert!(
        first.starts_with(&format!("## [{VERSION}]")),
        "CHANGELOG.md's newest release is {first:?}, Cargo.toml says {VERSION}"
    );
    let chart = read("helm/tollgate/Chart.yaml");
    let chart_version = chart
        .lines()
        .find_map(|l| l.strip_prefix("version: "))
        .expect("Chart.yaml has a version")
        .trim();
    let section = changelog
        .split("\n## [")
        .find(|s| s.starts_with(VERSION))
        .expect("the newest release's section");
    assert!(
        section.contains(&format!("chart {chart_version}")),
        "CHANGELOG.md's {VERSION} section must name the chart version it ships (chart {chart_version})"
    );
    // The baseline the upgrade check runs against is a release the changelog names.
    let previous = read(".ci/previous-release");
    let hash = previous
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .expect(".ci/previous-release names a commit");
    assert!(
        hash.len() == 40 && hash.bytes().all(|b| b.is_ascii_hexdigit()),
        ".ci/previous-release: {hash:?} is not a full commit hash"
    );
    assert!(
        changelog.contains(&hash[..12]),
        "CHANGELOG.md must name the previous release's commit {}",
        &hash[..12]
    );
}

#[test]
fn version_prints_the_release_and_the_commit() {
    let out = Command::new(BIN).arg("--version").output().unwrap();
    assert!(out.status.success());
    let printed = String::from_utf8(out.stdout).unwrap();
    let commit = env!("TOLLGATE_COMMIT");
    assert_eq!(
        printed.trim(),
        format!("tollgate {VERSION} (commit {commit})")
    );
    // Built from a checkout without TOLLGATE_COMMIT given: the checkout's own commit.
    let given = std::env::var("TOLLGATE_COMMIT").is_ok_and(|c| !c.is_empty());
    if !given && root().join(".git").exists() {
        let head = Command::new("git")
            .args(["rev-parse", "--short=12", "HEAD"])
            .current_dir(root())
            .output()
            .unwrap();
        assert_eq!(commit, String::from_utf8_lossy(&head.stdout).trim());
    } else if !given {
        assert_eq!(commit, "unknown");
    }
}
