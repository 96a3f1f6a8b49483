//! One throttle for every repeated log line of the service: each kind of warning is written at
//! most once per [`PERIOD`], with the number of lines it held back since the last one. A Redis
//! outage then logs a line every ten seconds, not one per request.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// How often one kind of line may be written.
pub const PERIOD: Duration = Duration::from_secs(10);

/// Per kind: when it was last written, and how many were held back since.
type Kinds = HashMap<&'static str, (Instant, u64)>;

fn kinds() -> &'static Mutex<Kinds> {
    static KINDS: OnceLock<Mutex<Kinds>> = OnceLock::new();
    KINDS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Whether a line of `kind` may be written now: `Some(held back since the last one)`, or
/// `None` (counted, not written).
pub fn due(kind: &'static str) -> Option<u64> {
    due_at(&mut kinds().lock(), kind, Instant::now())
}

fn due_at(kinds: &mut Kinds, kind: &'static str, now: Instant) -> Option<u64> {
    match kinds.get_mut(kind) {
        Some((last, held)) if now.duration_since(*last) < PERIOD => {
            *held += 1;
            None
        }
        Some((last, held)) => {
            let suppressed = *held;
            *last = now;
            *held = 0;
            Some(suppressed)
        }
        None => {
            kinds.insert(kind, (now, 0));
            Some(0)
        }
    }
}

/// How long [`due_named`] remembers the names it has written.
pub const NAMES_PERIOD: Duration = Duration::from_secs(60);

/// Per kind: when the current minute began, the names written in it, and how many lines
/// were held back since the last one written.
type Named = HashMap<&'static str, (Instant, Vec<String>, u64)>;

fn named() -> &'static Mutex<Named> {
    static NAMED: OnceLock<Mutex<Named>> = OnceLock::new();
    NAMED.get_or_init(|| Mutex::new(HashMap::new()))
}

/// For lines naming something a caller chose (an unknown domain): a line is due for a name
/// not yet written this minute while fewer than `max_names` were; everything else is held
/// back and counted. `Some(held back since the last line)` when due.
pub fn due_named(kind: &'static str, name: &str, max_names: usize) -> Option<u64> {
    due_named_at(&mut named().lock(), kind, name, max_names, Instant::now())
}

/// Names are remembered by their first bytes only (a caller's name may be megabytes long;
/// the line prints fewer characters still, see [`printable`]).
const NAME_BYTES: usize = 256;

fn due_named_at(
    named: &mut Named,
    kind: &'static str,
    name: &str,
    max_names: usize,
    now: Instant,
) -> Option<u64> {
    let (start, names, held) = named.entry(kind).or_insert_with(|| (now, Vec::new(), 0));
    if now.duration_since(*start) >= NAMES_PERIOD {
        *start = now;
        names.clear();
    }
    let mut end = name.len().min(NAME_BYTES);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    let name = &name[..end];
    if names.len() >= max_names || names.iter().any(|n| n == name) {
        *held += 1;
        return None;
    }
    names.push(name.to_string());
    Some(std::mem::take(held))
}

/// A caller-chosen name as it may be logged: at most 64 characters, control characters
/// escaped.
pub fn printable(name: &str) -> String {
    let mut out = String::new();
    push_printable(&mut out, name);
    out
}

/// [`printable`], appended to `out` (no allocation of its own).
pub fn push_printable(out: &mut String, name: &str) {
    let mut chars = name.chars();
    for c in chars.by_ref().take(64) {
        out.extend(c.escape_default());
    }
    if chars.next().is_some() {
        out.push('…');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_lines_name_a_bounded_set_per_minute() {
        let mut named = Named::new();
        let t0 = Instant::now();
        for i in 0..10 {
            assert_eq!(
                due_named_at(&mut named, "u", &format!("d{i}"), 10, t0),
                Some(0)
            );
        }
        // The same name again, and an eleventh name, are held back.
        assert_eq!(due_named_at(&mut named, "u", "d0", 10, t0), None);
        assert_eq!(due_named_at(&mut named, "u", "d10", 10, t0), None);
        // A minute later names may be written again, with the count held back.
        let t1 = t0 + NAMES_PERIOD;
        assert_eq!(due_named_at(&mut named, "u", "d10", 10, t1), Some(2));
        assert_eq!(due_named_at(&mut named, "u", "d10", 10, t1), None);
        // A long name is remembered by its first bytes, never whole.
        let long = format!("{}é{}", "x".repeat(NAME_BYTES - 1), "y".repeat(1 << 20));
        assert_eq!(due_named_at(&mut named, "v", &long, 10, t1), Some(0));
        assert!(named["v"].1.iter().all(|n| n.len() < NAME_BYTES));
        assert_eq!(due_named_at(&mut named, "v", &long, 10, t1), None);
        assert_eq!(printable("a\nb"), "a\\nb");
        assert_eq!(printable(&"x".repeat(100)).chars().count(), 65);
    }

    #[test]
    fn one_line_per_period_per_kind_with_what_was_held_back() {
        let mut kinds = Kinds::new();
        let t0 = Instant::now();
        assert_eq!(due_at(&mut kinds, "a", t0), Some(0));
        assert_eq!(due_at(&mut kinds, "a", t0 + Duration::from_secs(1)), None);
        assert_eq!(due_at(&mut kinds, "a", t0 + Duration::from_secs(2)), None);
        // Another kind has its own period.
        assert_eq!(
            due_at(&mut kinds, "b", t0 + Duration::from_secs(2)),
            Some(0)
        );
        assert_eq!(due_at(&mut kinds, "a", t0 + PERIOD), Some(2));
        assert_eq!(due_at(&mut kinds, "a", t0 + PERIOD), None);
    }
}
