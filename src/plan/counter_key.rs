//! Counter keys: `{tag}rest`, built from the domain, the descriptor's entries up to the rule
//! that owns the limit, and the limit's shape.
//!
//! The hash tag (between the braces) is the domain plus the entries down to the descriptor's
//! tag depth (`super::keys`'s `tag_depth`: the first per-value level, or the shallowest counter if that is
//! higher), so one tenant's keys share a Redis Cluster hash slot while a constant first entry
//! (`tier=free`) does not gather every tenant on one; a `shared` limit gets a tag of its own.
//! Keys and values are
//! percent-escaped, so no value can move a key to another hash slot or make two descriptors share a
//! counter (`a`+`b_c` and `a_b`+`c` stay apart).

use crate::config::{Pattern, Rule};
use crate::limit::Limit;
use crate::pb::common::RateLimitDescriptor;

/// The hash tag of a planned key.
pub fn tag_of(key: &str) -> &str {
    key.strip_prefix('{')
        .and_then(|k| k.split_once('}'))
        .map_or("", |(tag, _)| tag)
}

/// `{D|k0=v0|...|kt=vt}|...|kd=vd|suffix` (`t` the tag depth, `d` the depth of the rule that
/// owns the limit, `t <= d`), or for a shared limit `{D|k0=p0|...|kd=pd|*}|suffix`, where `p`
/// is the rule's pattern. A `share_threshold` level uses its pattern too.
pub(super) fn counter_key(
    domain: &str,
    d: &RateLimitDescriptor,
    path: &[&Rule],
    depth: usize,
    tag_depth: usize,
    limit: &Limit,
) -> String {
    let mut key = String::with_capacity(64);
    key.push('{');
    escape_into(&mut key, domain);
    for (j, e) in d.entries.iter().take(depth + 1).enumerate() {
        if j == tag_depth + 1 && !limit.shared {
            key.push('}');
        }
        key.push('|');
        escape_into(&mut key, &e.key);
        key.push('=');
        match path.get(j) {
            Some(rule) if limit.shared || rule.share_threshold => {
                pattern_into(&mut key, &rule.pattern)
            }
            _ => escape_into(&mut key, &e.value),
        }
    }
    if limit.shared {
        key.push_str("|*}");
    } else if depth <= tag_depth || d.entries.is_empty() {
        key.push('}');
    }
    key.push('|');
    key.push_str(&limit.key_suffix);
    key
}

fn pattern_into(out: &mut String, p: &Pattern) {
    match p {
        Pattern::Exact(v) => escape_into(out, v),
        Pattern::Wildcard(parts) => {
            for (i, part) in parts.iter().enumerate() {
                if i > 0 {
                    out.push('*');
                }
                escape_into(out, part);
            }
        }
        Pattern::Any => out.push('*'),
    }
}

/// Percent-escapes the characters keys use as structure: `%{}|=*` and ASCII controls.
fn escape_into(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for ch in s.chars() {
        if matches!(ch, '%' | '{' | '}' | '|' | '=' | '*') || ch.is_ascii_control() {
            let b = ch as u8;
            out.push('%');
            out.push(HEX[(b >> 4) as usize] as char);
            out.push(HEX[(b & 15) as usize] as char);
        } else {
            out.push(ch);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_keeps_structure_characters_out_of_keys() {
        let mut out = String::new();
        escape_into(&mut out, "a}b{c|d=e*f%g\nh");
        assert_eq!(out, "a%7Db%7Bc%7Cd%3De%2Af%25g%0Ah");
        assert_eq!(tag_of("{d|k=v}|f60"), "d|k=v");
        assert_eq!(tag_of("{d|k=*|*}|f60"), "d|k=*|*");
    }
}
