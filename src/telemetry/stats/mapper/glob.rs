//! Glob matches (`ratelimit.service.rate_limit.*.*.over_limit`), the order statsd_exporter tries
//! them in, and the `$n` templates of names and label values.

use std::collections::{HashMap, HashSet};

use super::kind::StatKind;

/// A glob as tried for one kind: its pattern and the mapping a match selects.
#[derive(Debug)]
pub(super) struct GlobCandidate {
    pub(super) pattern: GlobPattern,
    pub(super) mapping: usize,
}

/// A glob, split at `.`: each component is text (`Some`) or `*` (`None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct GlobPattern {
    fields: Vec<Option<String>>,
}

impl GlobPattern {
    /// A glob statsd_exporter accepts: components separated by `.`, each `*` or a run of
    /// ASCII letters, digits, `_` and `-` (the first component not starting with a digit or
    /// `-`, the others not with `-`). `None` for anything else (`foo*`, `a..b`, `a/b`).
    pub(super) fn parse(text: &str) -> Option<GlobPattern> {
        let mut fields = Vec::new();
        for (i, field) in text.split('.').enumerate() {
            if field == "*" {
                fields.push(None);
                continue;
            }
            let mut chars = field.chars();
            let first_ok = match chars.next() {
                Some(c) if i == 0 => c.is_ascii_alphabetic() || c == '_',
                Some(c) => c.is_ascii_alphanumeric() || c == '_',
                None => false,
            };
            if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                return None;
            }
            fields.push(Some(field.to_string()));
        }
        Some(GlobPattern { fields })
    }

    /// How many `*`s: the groups `$n` can name.
    pub(super) fn stars(&self) -> usize {
        self.fields.iter().filter(|f| f.is_none()).count()
    }

    pub(super) fn matches(&self, name: &[&str]) -> bool {
        self.fields.len() == name.len()
            && self
                .fields
                .iter()
                .zip(name)
                .all(|(f, n)| f.as_deref().is_none_or(|f| f == *n))
    }

    /// The name's components under the `*`s (the glob matches).
    pub(super) fn captures<'n>(&self, name: &[&'n str]) -> Vec<&'n str> {
        self.fields
            .iter()
            .zip(name)
            .filter(|(f, _)| f.is_none())
            .map(|(_, n)| *n)
            .collect()
    }

    /// Which components are `*`: the order of `glob_disable_ordering` (text before `*`).
    fn star_key(&self) -> impl Iterator<Item = bool> + '_ {
        self.fields.iter().map(Option::is_none)
    }

    /// The components as statsd_exporter's state machine keys them (`*` for a star).
    fn path(&self) -> Vec<&str> {
        self.fields
            .iter()
            .map(|f| f.as_deref().unwrap_or("*"))
            .collect()
    }
}

/// With `glob_disable_ordering`: of the globs that match, the one statsd_exporter's state
/// machine reaches first (it takes a component's text before `*`, from the left).
pub(super) fn most_literal<'p>(
    patterns: impl Iterator<Item = &'p GlobPattern>,
    name: &[&str],
) -> Option<usize> {
    let mut best: Option<(usize, &GlobPattern)> = None;
    for (i, p) in patterns.enumerate() {
        if p.matches(name) && best.is_none_or(|(_, b)| p.star_key().lt(b.star_key())) {
            best = Some((i, p));
        }
    }
    best.map(|(i, _)| i)
}

/// One glob mapping as the file gives it: its index among all mappings, its glob, its
/// `match_metric_type`.
pub(super) struct GlobSource {
    pub(super) mapping: usize,
    pub(super) pattern: GlobPattern,
    pub(super) kind: Option<StatKind>,
}

/// For each kind, the globs that can match a statistic of that kind, in the order
/// statsd_exporter tries them (with ordering on, the first that matches wins).
///
/// statsd_exporter builds one state machine per kind, a state per glob prefix. A glob's
/// mapping is only recorded in its last state when that state is new; its place in the order
/// is recorded every time. So a glob repeating an earlier one (for that kind) keeps the earlier
/// mapping at the later place, and a glob ending where an earlier, longer one passes through
/// (`a.b` after `a.b.c`) has no mapping and never matches. Both are kept here.
pub(super) fn order_globs(sources: &[GlobSource]) -> [Vec<GlobCandidate>; 3] {
    StatKind::ALL.map(|kind| {
        let mut states: HashSet<Vec<&str>> = HashSet::new();
        // Final state -> (the mapping recorded there, its place in the order).
        let mut finals: HashMap<Vec<&str>, (Option<usize>, usize)> = HashMap::new();
        for (place, source) in sources.iter().enumerate() {
            if source.kind.is_some_and(|k| k != kind) {
                continue;
            }
            let path = source.pattern.path();
            let new = !states.contains(&path);
            for end in 1..=path.len() {
                states.insert(path[..end].to_vec());
            }
            let entry = finals.entry(path).or_insert((None, place));
            if new {
                entry.0 = Some(source.mapping);
            }
            entry.1 = place;
        }
        let mut ordered: Vec<(usize, usize, GlobPattern)> = finals
            .into_iter()
            .filter_map(|(_, (mapping, place))| {
                let mapping = mapping?;
                let pattern = sources
                    .iter()
                    .find(|s| s.mapping == mapping)
                    .map(|s| s.pattern.clone())?;
                Some((place, mapping, pattern))
            })
            .collect();
        ordered.sort_by_key(|(place, _, _)| *place);
        ordered
            .into_iter()
            .map(|(_, mapping, pattern)| GlobCandidate { pattern, mapping })
            .collect()
    })
}

/// A `name` or label value with its `$n` references.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Template {
    /// A glob mapping's template, split into text and `*` captures.
    Glob(Vec<Piece>),
    /// A regex mapping's template, expanded by the regex's own rules.
    Regex(String),
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Piece {
    Text(String),
    /// The n-th `*` (from 0).
    Star(usize),
}

impl Template {
    /// A glob mapping's template; `stars` is how many `*`s the glob has. A reference is `$`,
    /// an optional `{`, the longest run of ASCII letters, digits, `_` and `$`, an optional `}`;
    /// a run that is not a number from 1 to `stars` stands for nothing.
    pub(super) fn glob(text: &str, stars: usize) -> Template {
        let is_run = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '$';
        let mut pieces = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(at) = rest.find('$') {
            literal.push_str(&rest[..at]);
            let after = &rest[at + 1..];
            let braced = after.strip_prefix('{');
            let (body, run_len) = [braced, Some(after)]
                .into_iter()
                .flatten()
                .map(|b| (b, b.find(|c: char| !is_run(c)).unwrap_or(b.len())))
                .find(|(_, len)| *len > 0)
                .unwrap_or((after, 0));
            if run_len == 0 {
                literal.push('$');
                rest = after;
                continue;
            }
            let run = &body[..run_len];
            rest = body[run_len..]
                .strip_prefix('}')
                .unwrap_or(&body[run_len..]);
            if let Some(n) = run
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=stars).contains(n))
            {
                if !literal.is_empty() {
                    pieces.push(Piece::Text(std::mem::take(&mut literal)));
                }
                pieces.push(Piece::Star(n - 1));
            }
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            pieces.push(Piece::Text(literal));
        }
        Template::Glob(pieces)
    }

    pub(super) fn expand_glob(&self, captures: &[&str]) -> String {
        match self {
            Template::Glob(pieces) => pieces
                .iter()
                .map(|p| match p {
                    Piece::Text(t) => t.as_str(),
                    Piece::Star(n) => captures.get(*n).copied().unwrap_or(""),
                })
                .collect(),
            Template::Regex(text) => text.clone(),
        }
    }

    pub(super) fn expand_regex(&self, captures: &regex::Captures<'_>) -> String {
        match self {
            Template::Regex(text) => {
                let mut out = String::new();
                captures.expand(text, &mut out);
                out
            }
            Template::Glob(_) => self.expand_glob(&[]),
        }
    }
}
