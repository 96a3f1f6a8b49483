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

#[cfg(test)]
mod tests {
    use super::*;

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
