//! A region's pool as the refill task reads and writes it (the `…|pool` hash in the region's
//! Redis, written by `lua/global.lua`): its fields read as windows on this instance's clock,
//! what an ask reports holding, and how long the pool lives.

use std::time::Duration;

use tokio::time::Instant;

use super::board::PoolWindow;
use crate::algorithm::global::terms::GlobalLimit;

/// The pool's fields (`w:<window>` grants, `s:<window>` safe shares, each `units from until`
/// on the region's Redis clock, read at `now`), as windows on this instance's clock: a start
/// no earlier, a lapse no later, than the Redis clock says.
pub(super) fn windows(
    fields: &[String],
    now: u64,
    before: Instant,
    after: Instant,
) -> Vec<PoolWindow> {
    let mut out: Vec<PoolWindow> = Vec::new();
    let mut backs: Vec<(u64, u64)> = Vec::new();
    let mut owed: Vec<(u64, u64)> = Vec::new();
    for pair in fields.chunks(2) {
        let [name, value] = pair else { continue };
        let (safe, index) = match name.split_once(':') {
            Some(("w", n)) => (false, n),
            Some(("s", n)) => (true, n),
            Some((kind @ ("b" | "x"), n)) => {
                if let (Ok(index), Ok(units)) = (n.parse(), value.parse()) {
                    match kind {
                        "b" => backs.push((index, units)),
                        _ => owed.push((index, units)),
                    }
                }
                continue;
            }
            _ => continue,
        };
        let Ok(index) = index.parse::<u64>() else {
            continue;
        };
        let nums: Vec<u64> = value.split(' ').filter_map(|n| n.parse().ok()).collect();
        let [units, from, until] = nums[..] else {
            continue;
        };
        let from = match from.checked_sub(now) {
            Some(ahead) if ahead > 0 => after + Duration::from_micros(ahead),
            _ => before,
        };
        let Some(left) = until.checked_sub(now) else {
            continue;
        };
        let until = before + Duration::from_micros(left);
        let w = PoolWindow {
            index,
            units,
            safe: if safe { units } else { 0 },
            back: 0,
            owed: 0,
            from,
            until,
        };
        match out.iter_mut().find(|o| o.index == index) {
            Some(o) => {
                o.units += w.units;
                o.safe += w.safe;
                o.from = o.from.min(w.from);
                o.until = o.until.max(w.until);
            }
            None => out.push(w),
        }
    }
    for (index, units) in backs {
        if let Some(o) = out.iter_mut().find(|o| o.index == index) {
            o.back = units;
        }
    }
    for (index, units) in owed {
        if let Some(o) = out.iter_mut().find(|o| o.index == index) {
            o.owed = units;
            o.units += units;
        }
    }
    out.sort_by_key(|w| w.index);
    out
}

/// What the region holds of the two latest windows of its pool, as an ask reports it
/// ([`Ask::held`]): granted, less its safe share and what it gave back.
/// `known`: what this instance's own books say (a grant that came this period is not in the
/// pool it last read); per window the larger.
pub(super) fn held(windows: &[PoolWindow], known: [(u64, u64); 2]) -> [(u64, u64); 2] {
    let mut out = [(0, 0); 2];
    for (slot, w) in out.iter_mut().zip(windows.iter().rev()) {
        let mine = known
            .iter()
            .find(|&&(k, _)| k == w.index)
            .map_or(0, |&(_, u)| u);
        *slot = (w.index, w.units.saturating_sub(w.safe + w.back).max(mine));
    }
    if out[0].1 == 0 && out[1].1 == 0 {
        return known;
    }
    out
}

/// The pool outlives two windows (and a minute).
pub(super) fn pool_ttl_ms(settings: &GlobalLimit) -> u64 {
    match settings.kind {
        crate::algorithm::global::terms::Kind::Window { window_us, .. } => {
            (2 * window_us / 1000).max(60_000)
        }
        crate::algorithm::global::terms::Kind::Bucket { .. } => 60_000,
    }
}
