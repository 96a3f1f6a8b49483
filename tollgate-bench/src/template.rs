//! Descriptor templates, and the requests they expand to.
//!
//! `--descriptor tenant=t{key},model=gpt` is parsed once into a [`DescriptorTemplate`];
//! [`build_requests`] expands it for every key number up front, and a call clones the
//! request of the key it picked (see [`crate::keys`]).

use tollgate::pb::common::rate_limit_descriptor::Entry;
use tollgate::pb::common::RateLimitDescriptor;
use tollgate::pb::rls::RateLimitRequest;

/// What `{key}` in a descriptor template is replaced with: the chosen key's number.
pub const KEY_PLACEHOLDER: &str = "{key}";

/// A descriptor given as `key=value,key2=value2` whose keys and values may hold `{key}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorTemplate {
    entries: Vec<(String, String)>,
}

impl DescriptorTemplate {
    pub fn parse(s: &str) -> Result<DescriptorTemplate, String> {
        let entries = s
            .split(',')
            .map(|part| {
                part.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .ok_or_else(|| format!("--descriptor '{s}': '{part}' is not key=value"))
            })
            .collect::<Result<_, _>>()?;
        Ok(DescriptorTemplate { entries })
    }

    pub fn uses_key(&self) -> bool {
        self.entries
            .iter()
            .any(|(k, v)| k.contains(KEY_PLACEHOLDER) || v.contains(KEY_PLACEHOLDER))
    }

    /// The descriptor for key number `key`.
    pub fn expand(&self, key: usize) -> RateLimitDescriptor {
        let key = key.to_string();
        RateLimitDescriptor {
            entries: self
                .entries
                .iter()
                .map(|(k, v)| Entry {
                    key: k.replace(KEY_PLACEHOLDER, &key),
                    value: v.replace(KEY_PLACEHOLDER, &key),
                })
                .collect(),
            ..Default::default()
        }
    }
}

/// One request per key, built once up front; a call clones the one it sends.
pub fn build_requests(
    domain: &str,
    templates: &[DescriptorTemplate],
    keys: usize,
    hits: u32,
) -> Result<Vec<RateLimitRequest>, String> {
    if keys > 1 && !templates.iter().any(DescriptorTemplate::uses_key) {
        return Err(format!(
            "--keys {keys}: no --descriptor contains {KEY_PLACEHOLDER}, so every key would send \
             the same request"
        ));
    }
    Ok((0..keys.max(1))
        .map(|key| RateLimitRequest {
            domain: domain.to_string(),
            descriptors: templates.iter().map(|t| t.expand(key)).collect(),
            hits_addend: hits,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(d: &RateLimitDescriptor) -> Vec<(&str, &str)> {
        d.entries
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str()))
            .collect()
    }

    #[test]
    fn template_expands_key_everywhere_it_appears() {
        let t = DescriptorTemplate::parse("tenant=t{key},model=gpt,{key}=x").unwrap();
        assert!(t.uses_key());
        assert_eq!(
            entries(&t.expand(42)),
            vec![("tenant", "t42"), ("model", "gpt"), ("42", "x")]
        );
        let fixed = DescriptorTemplate::parse("remote_address=10.0.0.1").unwrap();
        assert!(!fixed.uses_key());
        assert_eq!(
            entries(&fixed.expand(7)),
            vec![("remote_address", "10.0.0.1")]
        );
    }

    #[test]
    fn template_errors_name_the_bad_part() {
        let e = DescriptorTemplate::parse("tenant={key},model").unwrap_err();
        assert!(e.contains("'model' is not key=value"), "{e}");
    }

    #[test]
    fn requests_are_built_once_per_key() {
        let ts = [
            DescriptorTemplate::parse("tenant={key}").unwrap(),
            DescriptorTemplate::parse("model=gpt").unwrap(),
        ];
        let reqs = build_requests("edge", &ts, 3, 5).unwrap();
        assert_eq!(reqs.len(), 3);
        assert_eq!(entries(&reqs[2].descriptors[0]), vec![("tenant", "2")]);
        assert_eq!(entries(&reqs[2].descriptors[1]), vec![("model", "gpt")]);
        assert!(reqs
            .iter()
            .all(|r| r.domain == "edge" && r.hits_addend == 5));

        assert_eq!(build_requests("edge", &ts[1..], 1, 0).unwrap().len(), 1);
        let e = build_requests("edge", &ts[1..], 10, 0).unwrap_err();
        assert!(e.contains("--keys 10"), "{e}");
    }
}
