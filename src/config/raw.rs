//! The YAML file format, exactly as written by users: envoyproxy/ratelimit's keys plus
//! tollgate's extensions. Unknown keys are rejected here (serde reports them with a line).
//! Validation and compilation happen in [`super::compile`].

use serde::{Deserialize, Deserializer};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFile {
    #[serde(default, deserialize_with = "scalar")]
    pub domain: Option<String>,
    #[serde(default)]
    pub descriptors: Option<Vec<RawRule>>,
    /// tollgate: every request of the domain is answered OK without touching the store.
    #[serde(default)]
    pub disabled: bool,
    /// tollgate: `false` ignores the limit overrides callers put in descriptors.
    #[serde(default)]
    pub allow_overrides: Option<bool>,
    /// tollgate: the largest cost one descriptor of this domain may carry.
    #[serde(default)]
    pub max_hits: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRule {
    #[serde(default, deserialize_with = "scalar")]
    pub key: Option<String>,
    #[serde(default, deserialize_with = "scalar")]
    pub value: Option<String>,
    #[serde(default)]
    pub rate_limit: Option<RawLimit>,
    #[serde(default)]
    pub rate_limits: Option<Vec<RawLimit>>,
    #[serde(default)]
    pub descriptors: Option<Vec<RawRule>>,
    #[serde(default)]
    pub shadow_mode: bool,
    #[serde(default)]
    pub quota_mode: bool,
    #[serde(default)]
    pub detailed_metric: bool,
    #[serde(default)]
    pub value_to_metric: bool,
    #[serde(default)]
    pub share_threshold: bool,
    #[serde(default)]
    pub hierarchical: bool,
    #[serde(default)]
    pub metadata: Option<serde_yaml::Mapping>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimit {
    #[serde(default)]
    pub requests_per_unit: Option<u32>,
    #[serde(default, deserialize_with = "scalar")]
    pub unit: Option<String>,
    #[serde(default)]
    pub unlimited: bool,
    #[serde(default, deserialize_with = "scalar")]
    pub name: Option<String>,
    #[serde(default)]
    pub replaces: Option<Vec<RawReplace>>,
    #[serde(default, deserialize_with = "scalar")]
    pub algorithm: Option<String>,
    #[serde(default, deserialize_with = "scalar")]
    pub window: Option<String>,
    #[serde(default)]
    pub burst: Option<u64>,
    #[serde(default)]
    pub shared: bool,
    #[serde(default)]
    pub overdraft: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawReplace {
    #[serde(default, deserialize_with = "scalar")]
    pub name: Option<String>,
}

/// Accepts any YAML scalar as a string (`value: 200` is common in envoyproxy/ratelimit
/// configs, whose Go parser reads it as "200").
fn scalar<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    use serde::de::Error;
    Ok(match serde_yaml::Value::deserialize(d)? {
        serde_yaml::Value::Null => None,
        serde_yaml::Value::String(s) => Some(s),
        serde_yaml::Value::Bool(b) => Some(b.to_string()),
        // An integer reads back as written; a float may not (`1.10` parses as 1.1), and a
        // silently respelled value would never match what Envoy sends.
        serde_yaml::Value::Number(n) if !n.is_f64() => Some(n.to_string()),
        serde_yaml::Value::Number(n) => {
            return Err(D::Error::custom(format!(
            "{n} is a YAML number, which may not keep its spelling (1.10 reads as 1.1): quote it"
        )))
        }
        other => {
            return Err(D::Error::custom(format!(
                "expected a string, found {}",
                match other {
                    serde_yaml::Value::Sequence(_) => "a list",
                    serde_yaml::Value::Mapping(_) => "a map",
                    _ => "a tagged value",
                }
            )))
        }
    })
}
