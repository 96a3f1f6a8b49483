//! The line of a rule named by its composite key (`domain.key_value.key2`), for the errors
//! found once a file is parsed (a spend limit without `prices:`, a global limit this
//! instance's region does not share, a `max_wait` past what its bucket holds, ...). Only run
//! when there is an error to report: the file is read again, the rule's place found among
//! the parsed rules, and the parser walked to it and stopped there, so the line is the
//! parser's own (that of the rule's first key, as for the errors raised while reading).

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, Error, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::error::{ConfigError, ConfigProblem};
use super::raw::{RawFile, RawRule};

/// `error` with the line of the rule at fault in `text` (a rule's problem found once the file
/// was parsed), when it has none yet.
pub fn at_rule_in(mut error: ConfigError, text: &str) -> ConfigError {
    if let (None, ConfigProblem::Rule(rule)) = (error.line, &error.problem) {
        error.line = rule.full_key().and_then(|k| rule_line(text, k));
    }
    error
}

/// The line of the rule whose composite key is `full_key` in YAML `text` (the last one, when
/// two share it: a duplicate is the second); `None` when the text holds no such rule.
pub fn rule_line(text: &str, full_key: &str) -> Option<usize> {
    let raw: RawFile = serde_yaml::from_str(text).ok()?;
    let domain = raw.domain.unwrap_or_default();
    let mut path = Vec::new();
    let found = find(&domain, raw.descriptors.as_deref()?, full_key, &mut path)?;
    let stopped = Walk(&found)
        .deserialize(serde_yaml::Deserializer::from_str(text))
        .err()?;
    stopped.location().map(|l| l.line())
}

/// The place of `full_key` among `rules` (an index into `descriptors:` per level).
fn find(
    parent: &str,
    rules: &[RawRule],
    full_key: &str,
    path: &mut Vec<usize>,
) -> Option<Vec<usize>> {
    let mut found = None;
    for (i, rule) in rules.iter().enumerate() {
        let key = rule.key.as_deref().unwrap_or_default();
        let value = rule.value.as_deref().unwrap_or_default();
        let own = if value.is_empty() {
            format!("{parent}.{key}")
        } else {
            format!("{parent}.{key}_{value}")
        };
        path.push(i);
        if own == full_key {
            found = Some(path.clone());
        } else if full_key
            .strip_prefix(own.as_str())
            .is_some_and(|rest| rest.starts_with('.'))
        {
            if let Some(deeper) = find(
                &own,
                rule.descriptors.as_deref().unwrap_or_default(),
                full_key,
                path,
            ) {
                found = Some(deeper);
            }
        }
        path.pop();
    }
    found
}

/// Walks a file's maps to the rule at `path` (indices into `descriptors:`) and fails there.
struct Walk<'a>(&'a [usize]);

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a map")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Some((&first, rest)) = self.0.split_first() else {
            // Here: the parser's position is this rule's first key.
            return Err(A::Error::custom("the rule"));
        };
        while let Some(key) = map.next_key::<String>()? {
            if key == "descriptors" {
                map.next_value_seed(Items(first, rest))?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

/// A `descriptors:` list: items before `.0` skipped, the one at `.0` walked into.
struct Items<'a>(usize, &'a [usize]);

impl<'de> DeserializeSeed<'de> for Items<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Items<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        for _ in 0..self.0 {
            seq.next_element::<IgnoredAny>()?;
        }
        seq.next_element_seed(Walk(self.1))?;
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::rule_line;

    const TEXT: &str = "domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: k
    value: v

    descriptors:
      - key: x
        rate_limit:
          unit: second
      - {key: y, rate_limit: {unit: second}}
  - key: a
";

    #[test]
    fn a_rule_is_found_at_its_first_key() {
        assert_eq!(rule_line(TEXT, "d.k_v"), Some(5));
        assert_eq!(rule_line(TEXT, "d.k_v.x"), Some(9));
        assert_eq!(rule_line(TEXT, "d.k_v.y"), Some(12));
        // Two rules with one key: the second is the duplicate.
        assert_eq!(rule_line(TEXT, "d.a"), Some(13));
        assert_eq!(rule_line(TEXT, "d.b"), None);
        assert_eq!(rule_line("not: [yaml", "d.a"), None);
    }
}
