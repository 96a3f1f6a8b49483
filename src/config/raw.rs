//! The YAML file format, exactly as written by users: envoyproxy/ratelimit's keys plus
//! tollgate's extensions. Unknown keys are rejected here (serde reports them with a line).
//! Validation and compilation happen in [`super::compile`].

use serde::de::{Error, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::compile::window_us;
use crate::limit::{Algorithm, Unit, ALGORITHM_NAMES, UNIT_NAMES};

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
    #[serde(default, deserialize_with = "unit")]
    pub unit: Option<String>,
    #[serde(default)]
    pub unlimited: bool,
    #[serde(default, deserialize_with = "scalar")]
    pub name: Option<String>,
    #[serde(default)]
    pub replaces: Option<Vec<RawReplace>>,
    #[serde(default, deserialize_with = "algorithm")]
    pub algorithm: Option<String>,
    #[serde(default, deserialize_with = "window")]
    pub window: Option<String>,
    #[serde(default)]
    pub burst: Option<u64>,
    #[serde(default)]
    pub shared: bool,
    #[serde(default)]
    pub overdraft: bool,
    /// tollgate: on a `shared` limit, each instance takes this many units at a time from Redis.
    #[serde(default)]
    pub lease: Option<u64>,
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
    d.deserialize_any(Scalar(Ok))
}

/// A limit's `unit`, checked here so that an error names its line.
fn unit<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    d.deserialize_any(Scalar(|s: String| match Unit::parse(&s) {
        Some(_) => Ok(s),
        None => Err(format!(
            "invalid rate limit unit '{s}'; expected {UNIT_NAMES}"
        )),
    }))
}

/// A limit's `algorithm`, checked here so that an error names its line.
fn algorithm<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    d.deserialize_any(Scalar(|s: String| match Algorithm::parse(&s) {
        Some(_) => Ok(s),
        None => Err(format!(
            "invalid algorithm '{s}'; expected {ALGORITHM_NAMES}"
        )),
    }))
}

/// A limit's `window`, checked here so that an error names its line.
fn window<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    d.deserialize_any(Scalar(|s: String| window_us(&s).map(|_| s)))
}

/// Reads one YAML scalar as its text and checks it with the function. Errors are raised
/// while the scalar is being read, so the YAML parser gives them that scalar's line.
struct Scalar<F>(F);

impl<'de, F: FnOnce(String) -> Result<String, String>> Visitor<'de> for Scalar<F> {
    type Value = Option<String>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: Error>(self, v: &str) -> Result<Self::Value, E> {
        (self.0)(v.to_string()).map(Some).map_err(E::custom)
    }

    fn visit_string<E: Error>(self, v: String) -> Result<Self::Value, E> {
        (self.0)(v).map(Some).map_err(E::custom)
    }

    fn visit_bool<E: Error>(self, v: bool) -> Result<Self::Value, E> {
        self.visit_string(v.to_string())
    }

    fn visit_i64<E: Error>(self, v: i64) -> Result<Self::Value, E> {
        self.visit_string(v.to_string())
    }

    fn visit_u64<E: Error>(self, v: u64) -> Result<Self::Value, E> {
        self.visit_string(v.to_string())
    }

    // An integer reads back as written; a float may not (`1.10` parses as 1.1), and a
    // silently respelled value would never match what Envoy sends.
    fn visit_f64<E: Error>(self, v: f64) -> Result<Self::Value, E> {
        Err(E::custom(format!(
            "{v} is a YAML number, which may not keep its spelling (1.10 reads as 1.1): quote it"
        )))
    }

    fn visit_unit<E: Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_none<E: Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    // A list or map is read to its end first, so a YAML syntax error inside it is what gets
    // reported.
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Err(A::Error::custom("expected a string, found a list"))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Err(A::Error::custom("expected a string, found a map"))
    }
}
