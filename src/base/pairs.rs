//! `k1:v1,k2:v2` lists, as flags and environment variables carry them (xDS node metadata and
//! headers, statsd tags).

/// `k1:v1,k2:v2` (or `k1=v1`, as envoyproxy/ratelimit reads node metadata): pairs split at
/// the first `:` or `=`; an entry with neither is an error.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pairs(pub Vec<(String, String)>);

/// Reads [`Pairs`].
pub fn parse_pairs(text: &str) -> Result<Pairs, PairError> {
    text.split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|entry| {
            let at = match entry.find([':', '=']) {
                None => return Err(PairError::NoSeparator(entry.to_string())),
                Some(0) => return Err(PairError::NoKey(entry.to_string())),
                Some(at) => at,
            };
            Ok((
                entry[..at].trim().to_string(),
                entry[at + 1..].trim().to_string(),
            ))
        })
        .collect::<Result<_, _>>()
        .map(Pairs)
}

/// A `key:value` list entry that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PairError {
    #[error("'{0}' is not key:value (no ':' or '=')")]
    NoSeparator(String),
    #[error("'{0}' is not key:value (nothing before the separator)")]
    NoKey(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_split_at_the_first_colon_or_equals() {
        let p = |s: &str| parse_pairs(s).unwrap().0;
        assert_eq!(
            p("k1:v1, k2=v2,url:http://x:1"),
            [
                ("k1".into(), "v1".into()),
                ("k2".into(), "v2".into()),
                ("url".into(), "http://x:1".into())
            ]
        );
        assert!(p("").is_empty());
        assert_eq!(
            parse_pairs("novalue"),
            Err(PairError::NoSeparator("novalue".into()))
        );
        assert_eq!(parse_pairs(":v"), Err(PairError::NoKey(":v".into())));
    }
}
