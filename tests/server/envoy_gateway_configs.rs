//! Envoy Gateway's generated rate limit configs, unchanged from its repository
//! (`tests/fixtures/envoy-gateway`, whose README says where they come from). tollgate compiles
//! each domain, both as YAML and as the xDS resource Envoy Gateway serves, and every
//! descriptor and limit lands where the file puts it.
//!
//! Each fixture file is the output of one Envoy Gateway translator test: one YAML document
//! (`---` between documents) for each `RateLimitConfig` resource it builds. The root `name:` is
//! the resource name. In a cluster, Envoy Gateway serves each domain as its own xDS resource,
//! so here each document is one domain's config.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use prost::Message;
use serde_yaml::Value;
use tollgate::config::load::{compile_sources, load_path, LoadOptions};
use tollgate::config::xds::resource::{compile_resources, TYPE_URL};
use tollgate::config::{Config, Level};
use tollgate::pb::rls_conf::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitReplace, RateLimitUnit,
};

const FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/envoy-gateway/ratelimit-config"
);

const FIRST: &str = "first-listener";
const SECOND: &str = "second-listener";
const POLICY_1: &str = "test-namespace/test-policy-1";
const POLICY_2: &str = "test-namespace/test-policy-2";

/// Each fixture file and its domains, in file order: 26 files, 33 domains.
const EXPECTED: &[(&str, &[&str])] = &[
    ("distinct-match.yaml", &[FIRST]),
    ("distinct-remote-address-match.yaml", &[FIRST]),
    ("empty-header-matches.yaml", &[FIRST]),
    ("global-shadow-mode.yaml", &[FIRST]),
    ("global-shared-distinct-match.yaml", &[POLICY_1]),
    (
        "global-shared-multiple-shared-policies.yaml",
        &[FIRST, POLICY_1, POLICY_2],
    ),
    ("header-and-cidr-matches.yaml", &[FIRST]),
    ("masked-remote-address-match.yaml", &[FIRST]),
    ("method-match.yaml", &[FIRST]),
    ("month-year-rule.yaml", &[FIRST]),
    ("multiple-all-match.yaml", &[FIRST]),
    ("multiple-domains.yaml", &[FIRST, POLICY_1]),
    ("multiple-global-shared-distinct-match.yaml", &[POLICY_1]),
    ("multiple-listeners-distinct-match.yaml", &[FIRST, SECOND]),
    (
        "multiple-listeners-same-shared-distinct-match.yaml",
        &[POLICY_1],
    ),
    (
        "multiple-listeners-shared-distinct-match.yaml",
        &[FIRST, POLICY_2],
    ),
    (
        "multiple-masked-remote-address-match-with-same-cidr.yaml",
        &[FIRST],
    ),
    ("multiple-matches.yaml", &[FIRST]),
    ("multiple-routes.yaml", &[FIRST]),
    ("multiple-rules.yaml", &[FIRST]),
    ("multiple-shared-and-unshared.yaml", &[FIRST, POLICY_1]),
    ("multiple-shared-ratelimit-rules.yaml", &[FIRST, POLICY_1]),
    ("path-match.yaml", &[FIRST]),
    ("query-parameters-match.yaml", &[FIRST]),
    ("ratelimit-sourceip-invert.yaml", &[FIRST]),
    ("value-match.yaml", &[FIRST]),
];

/// Every descriptor of every domain (at any depth), and the ones with a `rate_limit`.
const DESCRIPTORS: usize = 98;
const LIMITS: usize = 44;

/// One fixture file: its name, and its YAML documents as text and as parsed.
struct Fixture {
    name: String,
    documents: Vec<(String, Value)>,
}

impl Fixture {
    fn path(&self) -> PathBuf {
        Path::new(FIXTURES).join(&self.name)
    }

    /// The documents as `compile_sources` sources, each named `file#n`.
    fn sources(&self) -> Vec<(String, String)> {
        self.documents
            .iter()
            .enumerate()
            .map(|(i, (text, _))| (format!("{}#{}", self.name, i + 1), text.clone()))
            .collect()
    }

    /// Compiles the documents through the file loader, as if each were a file of its own.
    fn compile(&self) -> Config {
        compile_sources(&self.sources(), &LoadOptions::default())
            .unwrap_or_else(|e| panic!("{}: refused: {e}", self.name))
    }
}

/// The fixture files in name order, each cut into its documents.
fn fixtures() -> Vec<Fixture> {
    let mut names: Vec<String> = std::fs::read_dir(FIXTURES)
        .expect("the fixture directory")
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let text = std::fs::read_to_string(Path::new(FIXTURES).join(&name)).expect("read");
            let documents = split_documents(&text);
            // The cut agrees with a YAML parser on where documents are.
            let parsed: Vec<Value> = serde_yaml::Deserializer::from_str(&text)
                .map(|d| serde::Deserialize::deserialize(d).expect("a YAML document"))
                .collect();
            assert_eq!(documents.len(), parsed.len(), "{name}: documents");
            Fixture {
                name,
                documents: documents.into_iter().zip(parsed).collect(),
            }
        })
        .collect()
}

/// A file's documents: its text cut at the `---` lines Envoy Gateway puts between them.
fn split_documents(text: &str) -> Vec<String> {
    let mut documents = vec![String::new()];
    for line in text.lines() {
        if line == "---" {
            documents.push(String::new());
        } else {
            let doc = documents.last_mut().expect("one at least");
            doc.push_str(line);
            doc.push('\n');
        }
    }
    documents
}

fn text<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get(field).and_then(Value::as_str).unwrap_or("")
}

fn flag(v: &Value, field: &str) -> bool {
    v.get(field).and_then(Value::as_bool).unwrap_or(false)
}

fn list<'a>(v: &'a Value, field: &str) -> &'a [Value] {
    v.get(field)
        .and_then(Value::as_sequence)
        .map_or(&[], Vec::as_slice)
}

/// A descriptor's `rate_limit` as `(requests_per_unit, UNIT)`, `None` when it is null.
fn limit_of(d: &Value) -> Option<(u32, String)> {
    let rl = d.get("rate_limit").filter(|v| !v.is_null())?;
    let per_unit = rl
        .get("requests_per_unit")
        .and_then(Value::as_u64)
        .expect("requests_per_unit");
    Some((
        u32::try_from(per_unit).expect("a u32"),
        text(rl, "unit").to_string(),
    ))
}

/// Checks that `level` holds exactly the descriptors listed, each with the limit and flags the
/// file gives it, and so on down. `at` is the parent's composite key. Returns how many
/// descriptors and limits it saw; pushes what is wrong to `failures`.
fn check_level(
    at: &str,
    level: &Level,
    descriptors: &[Value],
    failures: &mut Vec<String>,
) -> (usize, usize) {
    if level.rules().len() != descriptors.len() {
        failures.push(format!(
            "{at}: {} rules compiled, the file lists {}",
            level.rules().len(),
            descriptors.len()
        ));
    }
    let (mut seen, mut limits) = (0, 0);
    for d in descriptors {
        let (key, value) = (text(d, "key"), text(d, "value"));
        let full_key = if value.is_empty() {
            format!("{at}.{key}")
        } else {
            format!("{at}.{key}_{value}")
        };
        // A descriptor without a value matches any value.
        let probe = if value.is_empty() { "any value" } else { value };
        let Some(rule) = level.lookup(key, probe) else {
            failures.push(format!("{full_key}: not found for ({key:?}, {probe:?})"));
            continue;
        };
        seen += 1;
        if rule.full_key != full_key {
            failures.push(format!("{full_key}: found {}", rule.full_key));
        }
        let want = limit_of(d);
        limits += usize::from(want.is_some());
        let got: Vec<(u32, String)> = rule
            .limits
            .iter()
            .map(|l| (l.requests_per_unit, l.unit.proto_name().to_string()))
            .collect();
        if got != want.iter().cloned().collect::<Vec<_>>() {
            failures.push(format!(
                "{full_key}: limits {got:?}, the file says {want:?}"
            ));
        }
        let flags = [
            ("unlimited", rule.unlimited, d.get("rate_limit")),
            ("shadow_mode", rule.shadow_mode, Some(d)),
            ("quota_mode", rule.quota_mode, Some(d)),
            ("detailed_metric", rule.detailed_metric, Some(d)),
            ("value_to_metric", rule.value_to_metric, Some(d)),
            ("share_threshold", rule.share_threshold, Some(d)),
        ];
        for (name, got, from) in flags {
            let want = from.is_some_and(|v| flag(v, name));
            if got != want {
                failures.push(format!("{full_key}: {name} is {got}, the file says {want}"));
            }
        }
        let (s, l) = check_level(&full_key, &rule.children, list(d, "descriptors"), failures);
        seen += s;
        limits += l;
    }
    (seen, limits)
}

#[test]
fn every_domain_compiles_with_every_descriptor_where_the_file_puts_it() {
    let fixtures = fixtures();
    let names: Vec<&str> = fixtures.iter().map(|f| f.name.as_str()).collect();
    let want_names: Vec<&str> = EXPECTED.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, want_names, "the fixture files");

    let mut failures = Vec::new();
    let (mut domains, mut descriptors, mut limits) = (0, 0, 0);
    for (fixture, (_, want_domains)) in fixtures.iter().zip(EXPECTED) {
        let config = fixture.compile();
        let file_domains: Vec<&str> = fixture
            .documents
            .iter()
            .map(|(_, doc)| text(doc, "domain"))
            .collect();
        if file_domains != *want_domains {
            failures.push(format!("{}: domains {file_domains:?}", fixture.name));
        }
        let compiled: BTreeSet<&str> = config.domains.keys().map(String::as_str).collect();
        if compiled != want_domains.iter().copied().collect() {
            failures.push(format!("{}: compiled {compiled:?}", fixture.name));
        }
        domains += config.domains.len();
        for (_, doc) in &fixture.documents {
            let domain = text(doc, "domain");
            // Envoy Gateway names each resource after its domain.
            if text(doc, "name") != domain {
                failures.push(format!("{}: name {:?}", fixture.name, text(doc, "name")));
            }
            let Some(compiled) = config.domains.get(domain) else {
                continue;
            };
            let (d, l) = check_level(
                domain,
                &compiled.root,
                list(doc, "descriptors"),
                &mut failures,
            );
            descriptors += d;
            limits += l;
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
    assert_eq!(
        (fixtures.len(), domains, descriptors, limits),
        (26, 33, DESCRIPTORS, LIMITS),
        "files, domains, descriptors, limits"
    );
}

/// A file of one document loads through `load_path` as it is on disk. A file of several is
/// refused as a whole. It is a concatenation of xDS resources, not one config file, and
/// envoyproxy/ratelimit (whose YAML parser reads only a file's first document) would load
/// only its first domain and drop the rest without a word. tollgate refuses rather than
/// dropping domains.
#[test]
fn a_file_loads_as_it_is_on_disk_when_it_holds_one_domain() {
    let mut failures = Vec::new();
    let mut multi = Vec::new();
    for fixture in fixtures() {
        let loaded = load_path(&fixture.path(), &LoadOptions::default());
        match (fixture.documents.len(), loaded) {
            (1, Ok(config)) => {
                if config.describe() != fixture.compile().describe() {
                    failures.push(format!("{}: loads differently", fixture.name));
                }
            }
            (1, Err(e)) => failures.push(format!("{}: refused: {e}", fixture.name)),
            (_, Ok(_)) => failures.push(format!("{}: several domains loaded", fixture.name)),
            (_, Err(e)) => {
                if !e.to_string().contains("YAML documents (`---`) in one file") {
                    failures.push(format!("{}: refused for another reason: {e}", fixture.name));
                }
                multi.push(fixture.name);
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
    assert_eq!(multi.len(), 6, "files of several domains: {multi:?}");
}

/// A YAML document as the `RateLimitConfig` resource it was written from.
fn resource(doc: &Value) -> RateLimitConfig {
    RateLimitConfig {
        name: text(doc, "name").into(),
        domain: text(doc, "domain").into(),
        descriptors: list(doc, "descriptors").iter().map(descriptor).collect(),
    }
}

fn descriptor(d: &Value) -> RateLimitDescriptor {
    // Envoy Gateway writes these two from the YAML shape, which has them; the resource does
    // not, so they must be off.
    assert!(!flag(d, "value_to_metric") && !flag(d, "share_threshold"));
    RateLimitDescriptor {
        key: text(d, "key").into(),
        value: text(d, "value").into(),
        rate_limit: d.get("rate_limit").filter(|v| !v.is_null()).map(policy),
        descriptors: list(d, "descriptors").iter().map(descriptor).collect(),
        shadow_mode: flag(d, "shadow_mode"),
        detailed_metric: flag(d, "detailed_metric"),
        quota_mode: flag(d, "quota_mode"),
        metadata: None,
    }
}

fn policy(p: &Value) -> RateLimitPolicy {
    let unit = text(p, "unit");
    RateLimitPolicy {
        unit: RateLimitUnit::from_str_name(unit).unwrap_or_else(|| panic!("unit {unit:?}")) as i32,
        requests_per_unit: u32::try_from(
            p.get("requests_per_unit")
                .and_then(Value::as_u64)
                .unwrap_or(0),
        )
        .expect("a u32"),
        unlimited: flag(p, "unlimited"),
        name: text(p, "name").into(),
        replaces: list(p, "replaces")
            .iter()
            .map(|r| RateLimitReplace {
                name: text(r, "name").into(),
            })
            .collect(),
    }
}

/// What Envoy Gateway serves: a file's domains as one xDS response, one resource each. They
/// compile to the same limits as the YAML.
#[test]
fn as_xds_resources_they_compile_to_the_limits_of_the_yaml() {
    let mut failures = Vec::new();
    let mut domains = 0;
    for fixture in fixtures() {
        let resources: Vec<prost_types::Any> = fixture
            .documents
            .iter()
            .map(|(_, doc)| prost_types::Any {
                type_url: TYPE_URL.into(),
                value: resource(doc).encode_to_vec(),
            })
            .collect();
        match compile_resources(&resources, &LoadOptions::default()) {
            Err(e) => failures.push(format!("{}: refused: {e}", fixture.name)),
            Ok(config) => {
                domains += config.domains.len();
                let (xds, yaml) = (config.describe(), fixture.compile().describe());
                if xds != yaml {
                    failures.push(format!("{}:\nxds:\n{xds}yaml:\n{yaml}", fixture.name));
                }
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
    assert_eq!(domains, 33);
}
