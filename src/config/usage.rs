//! Usage domains (`--usage-domains`): domains whose charges record usage after the fact.
//!
//! Envoy limits LLM tokens in two calls on one descriptor: a check when the request arrives
//! (`hits_addend: {number: 0}`), and the response's tokens charged when the stream ends
//! (`apply_on_stream_done: true`; Envoy ignores that call's answer). The second call is an
//! ordinary `ShouldRateLimit` that tollgate cannot tell from a request-time charge, and by
//! tollgate's rule a charge that does not fit charges nothing: 60 tokens against 40 left would
//! be refused and lost, and the tenant never stopped. In a usage domain every limit is an
//! `overdraft` limit (a limit override too): every charge of 1 or more lands even past the
//! limit, and a check of cost 0 is OVER_LIMIT once nothing is left. The setting lives outside
//! the config file, so a config a control plane generates (envoyproxy/ratelimit's keys only)
//! gets it too.

use std::fmt;
use std::sync::Arc;

use super::Pattern;

/// A `--usage-domains` list that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsageDomainsError {
    /// The list as given: an empty pattern in it (a stray comma).
    #[error("'{0}' has an empty domain pattern; expected GLOB,GLOB,… like llm-tokens,usage-*")]
    EmptyPattern(String),
}

/// The domains named by `--usage-domains`: patterns with `*` standing for any run of
/// characters, as in a rule's `value`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct UsageDomains {
    patterns: Arc<[Pattern]>,
    text: Arc<str>,
}

impl UsageDomains {
    /// `GLOB,GLOB,…` (spaces around a pattern ignored). An empty pattern is an error, so a
    /// stray comma never silently means nothing (and `*` has to be written to mean every
    /// domain).
    pub fn parse(text: &str) -> Result<UsageDomains, UsageDomainsError> {
        let mut patterns = Vec::new();
        for part in text.split(',') {
            let glob = part.trim();
            if glob.is_empty() {
                return Err(UsageDomainsError::EmptyPattern(text.to_string()));
            }
            patterns.push(Pattern::parse(glob));
        }
        Ok(UsageDomains {
            patterns: patterns.into(),
            text: text.trim().into(),
        })
    }

    /// Whether `domain` is a usage domain.
    pub fn matches(&self, domain: &str) -> bool {
        self.patterns.iter().any(|p| p.matches(domain))
    }
}

impl fmt::Debug for UsageDomains {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UsageDomains({:?})", &*self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_domains_like_rule_values() {
        let usage = UsageDomains::parse("llm-tokens, usage-*,*-spend").expect("parses");
        for (domain, want) in [
            ("llm-tokens", true),
            ("llm-tokens-2", false),
            ("usage-", true),
            ("usage-monthly", true),
            ("team-spend", true),
            ("edge", false),
        ] {
            assert_eq!(usage.matches(domain), want, "{domain}");
        }
        assert!(!UsageDomains::default().matches("anything"));
        assert!(UsageDomains::parse("*").expect("parses").matches("edge"));
    }

    #[test]
    fn an_empty_pattern_is_an_error() {
        for bad in ["", " ", "a,,b", "a,", ",a"] {
            let err = UsageDomains::parse(bad).expect_err(bad).to_string();
            assert!(err.contains("empty domain pattern"), "{bad}: {err}");
        }
    }
}
