//! One xDS response's resources as a [`Config`]: each `RateLimitConfig` is turned into the
//! shape a YAML file is read into ([`RawFile`]) and compiled by the code that compiles files,
//! so the two sources validate and match one way (envoyproxy/ratelimit does the same: its
//! `ConfigXdsProtoToYaml` feeds its file loader).

use prost::Message;

use super::super::compile::compile_raw;
use super::super::load::add_domain;
use super::super::raw::{CheckedLimit, RawFile, RawLimit, RawReplace, RawRule};
use super::super::Config;
use crate::config::error::ConfigError;
use crate::config::load::LoadOptions;
use crate::limit::unit::Unit;
use crate::pb::rls_conf::{RateLimitConfig, RateLimitDescriptor, RateLimitPolicy};

/// The type URL of the rate limit config resource.
pub const TYPE_URL: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// The most resources (domains) one response may carry. With the message size bound
/// (`--config-xds-max-message-size`, 4 MiB) it bounds what compiling a response can cost: a
/// response of tiny resources could otherwise ask for hundreds of thousands of domains.
pub const MAX_DOMAINS: usize = 10_000;

/// Why a response's resources were refused (the NACK's `error_detail` says this).
#[derive(Debug, Clone, thiserror::Error)]
pub enum ResourceError {
    /// More resources than [`MAX_DOMAINS`].
    #[error("{count} resources, more than the {MAX_DOMAINS} domains one response may carry")]
    TooMany { count: usize },
    /// A resource of another type in a response for ours.
    #[error("resource {index}: type {type_url}, not {TYPE_URL}")]
    WrongType { index: usize, type_url: String },
    /// A resource whose bytes are not a `RateLimitConfig`.
    #[error("resource {index}: not a RateLimitConfig: {error}")]
    Undecodable {
        index: usize,
        error: prost::DecodeError,
    },
    /// A domain that does not compile, named as `xds resource 'NAME'`, with the fault.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// Decodes and compiles every resource of one response into one config (the state of the
/// world: domains missing from it are gone).
pub fn compile_resources(
    resources: &[prost_types::Any],
    opts: &LoadOptions,
) -> Result<Config, ResourceError> {
    if resources.len() > MAX_DOMAINS {
        return Err(ResourceError::TooMany {
            count: resources.len(),
        });
    }
    let mut config = Config::default();
    for (index, any) in resources.iter().enumerate() {
        if any.type_url != TYPE_URL {
            return Err(ResourceError::WrongType {
                index,
                type_url: any.type_url.clone(),
            });
        }
        let resource = RateLimitConfig::decode(any.value.as_slice())
            .map_err(|error| ResourceError::Undecodable { index, error })?;
        let label = label(&resource);
        let mut domain = compile_raw(&label, raw_file(resource), &opts.usage_domains)?;
        if let Some(stats) = &opts.stats {
            crate::config::bind::bind(&mut domain, stats);
        }
        add_domain(&mut config, domain, &label, opts)?;
    }
    Ok(config)
}

/// How errors name a resource: its name, else its domain (Envoy Gateway sets both alike).
fn label(resource: &RateLimitConfig) -> String {
    let name = if resource.name.is_empty() {
        &resource.domain
    } else {
        &resource.name
    };
    format!("xds resource '{name}'")
}

/// A resource as the file shape. Fields the resource does not have (`value_to_metric`,
/// `share_threshold`, and tollgate's algorithms, windows, `shared`, `hierarchical`, `lease`,
/// `overdraft` and domain settings) take their defaults.
fn raw_file(resource: RateLimitConfig) -> RawFile {
    RawFile {
        domain: Some(resource.domain),
        descriptors: Some(resource.descriptors.into_iter().map(raw_rule).collect()),
        ..RawFile::default()
    }
}

fn raw_rule(d: RateLimitDescriptor) -> RawRule {
    RawRule {
        key: Some(d.key),
        value: Some(d.value).filter(|v| !v.is_empty()),
        rate_limit: d.rate_limit.map(|p| CheckedLimit(raw_limit(p))),
        descriptors: Some(d.descriptors.into_iter().map(raw_rule).collect()),
        shadow_mode: d.shadow_mode,
        quota_mode: d.quota_mode,
        detailed_metric: d.detailed_metric,
        metadata: d.metadata.map(mapping),
        ..RawRule::default()
    }
}

fn raw_limit(p: RateLimitPolicy) -> RawLimit {
    RawLimit {
        // The unit as envoyproxy/ratelimit spells it (`MINUTE`); UNKNOWN (0) is no unit, which
        // only an `unlimited` limit may have.
        unit: Unit::from_proto(p.unit).map(|u| u.proto_name().to_string()),
        requests_per_unit: Some(p.requests_per_unit),
        unlimited: p.unlimited,
        name: Some(p.name).filter(|n| !n.is_empty()),
        replaces: Some(
            p.replaces
                .into_iter()
                .map(|r| RawReplace { name: Some(r.name) })
                .collect(),
        )
        .filter(|r: &Vec<RawReplace>| !r.is_empty()),
        ..RawLimit::default()
    }
}

/// A `google.protobuf.Struct` as the YAML mapping a file's `metadata:` is read into.
fn mapping(s: prost_types::Struct) -> serde_yaml::Mapping {
    s.fields
        .into_iter()
        .map(|(k, v)| (serde_yaml::Value::String(k), yaml(v)))
        .collect()
}

fn yaml(v: prost_types::Value) -> serde_yaml::Value {
    use prost_types::value::Kind;
    match v.kind {
        None | Some(Kind::NullValue(_)) => serde_yaml::Value::Null,
        Some(Kind::NumberValue(n)) => serde_yaml::Value::Number(n.into()),
        Some(Kind::StringValue(s)) => serde_yaml::Value::String(s),
        Some(Kind::BoolValue(b)) => serde_yaml::Value::Bool(b),
        Some(Kind::StructValue(s)) => serde_yaml::Value::Mapping(mapping(s)),
        Some(Kind::ListValue(l)) => {
            serde_yaml::Value::Sequence(l.values.into_iter().map(yaml).collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load::compile_sources;
    use crate::pb::rls_conf::{RateLimitReplace, RateLimitUnit};

    fn any(c: &RateLimitConfig) -> prost_types::Any {
        prost_types::Any {
            type_url: TYPE_URL.into(),
            value: c.encode_to_vec(),
        }
    }

    fn limit(unit: RateLimitUnit, n: u32) -> Option<RateLimitPolicy> {
        Some(RateLimitPolicy {
            unit: unit as i32,
            requests_per_unit: n,
            ..RateLimitPolicy::default()
        })
    }

    /// The resource and the YAML file that says the same compile to the same limits.
    #[test]
    fn a_resource_compiles_as_the_file_that_says_the_same() {
        let resource = RateLimitConfig {
            name: "first-listener".into(),
            domain: "first-listener".into(),
            descriptors: vec![RateLimitDescriptor {
                key: "first-route".into(),
                value: "first-route".into(),
                descriptors: vec![
                    RateLimitDescriptor {
                        key: "rule-0-match-0".into(),
                        rate_limit: Some(RateLimitPolicy {
                            name: "per-user".into(),
                            ..limit(RateLimitUnit::Hour, 10).unwrap()
                        }),
                        shadow_mode: true,
                        detailed_metric: true,
                        ..RateLimitDescriptor::default()
                    },
                    RateLimitDescriptor {
                        key: "masked_remote_address".into(),
                        value: "192.168.0.0/16".into(),
                        rate_limit: Some(RateLimitPolicy {
                            unlimited: true,
                            replaces: vec![RateLimitReplace {
                                name: "per-user".into(),
                            }],
                            ..RateLimitPolicy::default()
                        }),
                        quota_mode: true,
                        ..RateLimitDescriptor::default()
                    },
                ],
                ..RateLimitDescriptor::default()
            }],
        };
        let file = "name: first-listener\ndomain: first-listener\ndescriptors:\n\
            - key: first-route\n  value: first-route\n  descriptors:\n\
            \x20 - key: rule-0-match-0\n    rate_limit: {unit: HOUR, requests_per_unit: 10, name: per-user}\n\
            \x20   shadow_mode: true\n    detailed_metric: true\n\
            \x20 - key: masked_remote_address\n    value: 192.168.0.0/16\n\
            \x20   rate_limit: {unlimited: true, replaces: [{name: per-user}]}\n    quota_mode: true\n";
        let opts = LoadOptions::default();
        let from_xds = compile_resources(&[any(&resource)], &opts).unwrap();
        let from_file = compile_sources(&[("f.yaml".into(), file.into())], &opts).unwrap();
        assert_eq!(from_xds.describe(), from_file.describe());
        assert!(from_xds
            .describe()
            .contains("unit=HOUR requests_per_unit=10"));
    }

    #[test]
    fn faults_name_the_resource_and_what_is_wrong() {
        let opts = LoadOptions::default();
        let bad_unit = RateLimitConfig {
            name: "eg/policy".into(),
            domain: "eg/policy".into(),
            descriptors: vec![RateLimitDescriptor {
                key: "k".into(),
                rate_limit: limit(RateLimitUnit::Unknown, 5),
                ..RateLimitDescriptor::default()
            }],
        };
        let e = compile_resources(&[any(&bad_unit)], &opts)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("xds resource 'eg/policy': "), "{e}");
        assert!(e.contains("unit"), "{e}");

        let d = |domain: &str| RateLimitConfig {
            name: domain.into(),
            domain: domain.into(),
            descriptors: vec![],
        };
        let e = compile_resources(&[any(&d("a")), any(&d("a"))], &opts)
            .unwrap_err()
            .to_string();
        assert!(e.contains("duplicate domain 'a'"), "{e}");
        let e = compile_resources(&[any(&d(""))], &opts)
            .unwrap_err()
            .to_string();
        assert!(e.contains("empty domain"), "{e}");

        let wrong = prost_types::Any {
            type_url: "type.googleapis.com/envoy.config.cluster.v3.Cluster".into(),
            value: vec![],
        };
        let e = compile_resources(&[wrong], &opts).unwrap_err().to_string();
        assert!(e.contains("not type.googleapis.com/ratelimit"), "{e}");
        let garbage = prost_types::Any {
            type_url: TYPE_URL.into(),
            value: vec![0xff, 0xff, 0xff],
        };
        let e = compile_resources(&[garbage], &opts)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a RateLimitConfig"), "{e}");
    }

    #[test]
    fn metadata_travels_as_a_files_does() {
        use prost_types::value::Kind;
        let mut fields = std::collections::BTreeMap::new();
        fields.insert(
            "tier".to_string(),
            prost_types::Value {
                kind: Some(Kind::StringValue("gold".into())),
            },
        );
        let resource = RateLimitConfig {
            name: String::new(),
            domain: "d".into(),
            descriptors: vec![RateLimitDescriptor {
                key: "k".into(),
                rate_limit: limit(RateLimitUnit::Second, 1),
                metadata: Some(prost_types::Struct { fields }),
                ..RateLimitDescriptor::default()
            }],
        };
        let config = compile_resources(&[any(&resource)], &LoadOptions::default()).unwrap();
        let rule = &config.domains["d"].root.rules()[0].metadata;
        assert_eq!(
            rule.as_ref().unwrap()["tier"],
            serde_json::Value::String("gold".into())
        );
    }
}
