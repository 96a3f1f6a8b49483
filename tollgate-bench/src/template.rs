//! Descriptor templates, and the request each call sends.
//!
//! `--descriptor tenant=t{key},model=gpt` is parsed once into a [`DescriptorTemplate`]: its
//! keys and values split at `{key}`. A call picks a key number (see [`crate::keys`]) and
//! [`RequestTemplate::request`] writes that number between the pieces as the request is
//! built. Nothing is kept per key, so `--keys 4000000000` costs no more memory than `--keys 1`.

use std::fmt::Write as _;

use tollgate::pb::common::rate_limit_descriptor::Entry;
use tollgate::pb::common::RateLimitDescriptor;
use tollgate::pb::rls::RateLimitRequest;

/// What `{key}` in a descriptor template is replaced with: the chosen key's number.
pub const KEY_PLACEHOLDER: &str = "{key}";

/// A descriptor key or value from a template: literal pieces, with the key number written
/// between each two (`t{key}` is `["t", ""]`; a text without `{key}` is one piece).
#[derive(Debug, Clone, PartialEq, Eq)]
struct KeyedText {
    pieces: Vec<String>,
}

impl KeyedText {
    fn parse(s: &str) -> KeyedText {
        KeyedText {
            pieces: s.split(KEY_PLACEHOLDER).map(str::to_string).collect(),
        }
    }

    fn uses_key(&self) -> bool {
        self.pieces.len() > 1
    }

    /// The text for key number `key`, in one allocation of the exact size.
    fn render(&self, key: u32) -> String {
        let literal: usize = self.pieces.iter().map(String::len).sum();
        let keys = self.pieces.len() - 1;
        let mut out = String::with_capacity(literal + keys * decimal_len(key));
        let mut pieces = self.pieces.iter();
        if let Some(first) = pieces.next() {
            out.push_str(first);
        }
        for piece in pieces {
            // Writing to a `String` cannot fail.
            let _ = write!(out, "{key}");
            out.push_str(piece);
        }
        out
    }
}

/// How many decimal digits `n` has.
fn decimal_len(n: u32) -> usize {
    n.checked_ilog10().map_or(1, |log| log as usize + 1)
}

/// A descriptor given as `key=value,key2=value2` whose keys and values may hold `{key}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorTemplate {
    entries: Vec<(KeyedText, KeyedText)>,
}

impl DescriptorTemplate {
    pub fn parse(s: &str) -> Result<DescriptorTemplate, String> {
        let entries = s
            .split(',')
            .map(|part| {
                part.split_once('=')
                    .map(|(k, v)| (KeyedText::parse(k), KeyedText::parse(v)))
                    .ok_or_else(|| format!("--descriptor '{s}': '{part}' is not key=value"))
            })
            .collect::<Result<_, _>>()?;
        Ok(DescriptorTemplate { entries })
    }

    pub fn uses_key(&self) -> bool {
        self.entries
            .iter()
            .any(|(k, v)| k.uses_key() || v.uses_key())
    }

    /// The descriptor for key number `key`.
    pub fn expand(&self, key: u32) -> RateLimitDescriptor {
        RateLimitDescriptor {
            entries: self
                .entries
                .iter()
                .map(|(k, v)| Entry {
                    key: k.render(key),
                    value: v.render(key),
                })
                .collect(),
            ..Default::default()
        }
    }
}

/// Everything a request carries but the key number: built once, expanded per call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestTemplate {
    domain: String,
    descriptors: Vec<DescriptorTemplate>,
    hits_addend: u32,
}

impl RequestTemplate {
    /// The requests of a run over `keys` keys; more than one key needs a `{key}` somewhere,
    /// or every key would send the same request.
    pub fn new(
        domain: &str,
        descriptors: Vec<DescriptorTemplate>,
        hits_addend: u32,
        keys: u32,
    ) -> Result<RequestTemplate, String> {
        if keys > 1 && !descriptors.iter().any(DescriptorTemplate::uses_key) {
            return Err(format!(
                "--keys {keys}: no --descriptor contains {KEY_PLACEHOLDER}, so every key would \
                 send the same request"
            ));
        }
        Ok(RequestTemplate {
            domain: domain.to_string(),
            descriptors,
            hits_addend,
        })
    }

    /// The request for key number `key`.
    pub fn request(&self, key: u32) -> RateLimitRequest {
        RateLimitRequest {
            domain: self.domain.clone(),
            descriptors: self.descriptors.iter().map(|d| d.expand(key)).collect(),
            hits_addend: self.hits_addend,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
    fn keyed_text_renders_each_placeholder() {
        for (text, key, want) in [
            ("", 5, ""),
            ("{key}", 0, "0"),
            ("{key}", u32::MAX, "4294967295"),
            ("t{key}", 42, "t42"),
            ("{key}{key}", 12, "1212"),
            ("a{key}b{key}c", 3_999_999_999, "a3999999999b3999999999c"),
            ("{ke{key}y}", 7, "{ke7y}"),
            ("{KEY}", 7, "{KEY}"),
        ] {
            let rendered = KeyedText::parse(text).render(key);
            assert_eq!(rendered, want, "{text} with {key}");
            assert_eq!(rendered.capacity(), want.len(), "{text} with {key}");
        }
    }

    #[test]
    fn decimal_len_counts_digits() {
        for (n, len) in [
            (0, 1),
            (9, 1),
            (10, 2),
            (99, 2),
            (100, 3),
            (999_999_999, 9),
            (1_000_000_000, 10),
            (u32::MAX, 10),
        ] {
            assert_eq!(decimal_len(n), len, "{n}");
        }
    }

    #[test]
    fn a_request_is_the_template_with_the_key_written_in() {
        let ts = vec![
            DescriptorTemplate::parse("tenant={key}").unwrap(),
            DescriptorTemplate::parse("model=gpt").unwrap(),
        ];
        let requests = RequestTemplate::new("edge", ts.clone(), 5, 3).unwrap();
        let r = requests.request(2);
        assert_eq!((r.domain.as_str(), r.hits_addend), ("edge", 5));
        assert_eq!(entries(&r.descriptors[0]), vec![("tenant", "2")]);
        assert_eq!(entries(&r.descriptors[1]), vec![("model", "gpt")]);
        let far = requests.request(3_999_999_999);
        assert_eq!(entries(&far.descriptors[0]), vec![("tenant", "3999999999")]);

        assert!(RequestTemplate::new("edge", ts[1..].to_vec(), 0, 1).is_ok());
        let e = RequestTemplate::new("edge", ts[1..].to_vec(), 0, 10).unwrap_err();
        assert!(e.contains("--keys 10"), "{e}");
        // Four billion keys are accepted: nothing is built per key.
        assert!(RequestTemplate::new("edge", ts, 0, 4_000_000_000).is_ok());
    }

    proptest! {
        /// Rendering at send time gives exactly what replacing `{key}` in the flag's text
        /// with the number would.
        #[test]
        fn rendering_equals_substitution(
            parts in proptest::collection::vec("[a-z0-9_.{}]{0,6}|\\{key\\}", 1..6),
            key: u32,
        ) {
            let text = parts.concat();
            let want = text.replace(KEY_PLACEHOLDER, &key.to_string());
            prop_assert_eq!(KeyedText::parse(&text).render(key), want);
        }

        #[test]
        fn requests_equal_substituted_flags(
            values in proptest::collection::vec("[a-z0-9]{0,4}(\\{key\\})?[a-z0-9]{0,4}", 1..4),
            key: u32,
        ) {
            let flag = values
                .iter()
                .enumerate()
                .map(|(i, v)| format!("k{i}={v}"))
                .collect::<Vec<_>>()
                .join(",");
            let template = DescriptorTemplate::parse(&flag).unwrap();
            let requests = RequestTemplate::new("d", vec![template], 0, 1).unwrap();
            let substituted = flag.replace(KEY_PLACEHOLDER, &key.to_string());
            let want: Vec<(String, String)> = substituted
                .split(',')
                .filter_map(|p| p.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let got: Vec<(String, String)> = requests.request(key).descriptors[0]
                .entries
                .iter()
                .map(|e| (e.key.clone(), e.value.clone()))
                .collect();
            prop_assert_eq!(got, want);
        }
    }
}
