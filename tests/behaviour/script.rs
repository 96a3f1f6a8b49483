//! The script against the Rust algorithms, call by call, with no service in between: generated
//! calls go to `EVALSHA` of the decision script (`lua/decide/`) on a redis-server of this test and to
//! `algorithm::batch` directly (what the memory store runs), and every answer must be equal —
//! allowed, remaining, wait, what landed and where — and so must the state each key is left
//! in: the script's bytes decoded by `script::decode_state`, field by field, against the Rust
//! state (both refreshed at the call's time).
//!
//! A case is 1 to 3 keys, each with one or two limits (any algorithm, overdraft or not,
//! windows and bursts small enough to fill; two limits on a key as a request's override makes;
//! calendar windows in several zones; concurrency caps with short leases), and up to 12 calls
//! of 1 to 4 charges on them in every mode: decide, count rejected, dry run, a refund of the
//! call before (some of its landings, at its time or later), and a release or renew of a slot
//! id (calls take ids from a small set, so one id takes twice and a release may name an id
//! that holds nothing). Costs run from 0 past the usage cap, roles mix enforced,
//! shadow and quota charges, and the clock steps forwards by every interesting amount, onto
//! window ends and expiries exactly (and sometimes back). The calls' shapes send the script
//! down each of its drivers (one charge, one charge per key, every call), so a mismatch names
//! the call that took it.
//!
//! Reservations too: a call in reserve mode records what landed under its id (a record the
//! Rust side keeps beside the states), a later settle of that id (or of another, or twice)
//! settles it with new costs as the actual use (`algorithm::reservation`), an unreserve takes a
//! reservation back with its record; whether the id's record is there is compared after every
//! call, as is every state.
//!
//! An operator's reset of a key (`lua/admin.lua` against `algorithm::inspect::reset`) comes
//! between calls now and then, so refunds of what landed before a reset are compared too, and
//! so are settles racing a reset.
//!
//! 2,000 cases by default (`TOLLGATE_SCRIPT_CASES`), seeded from the clock; a failure prints
//! the seed (`TOLLGATE_SCRIPT_SEED` replays it), the case's calls so far and both answers.
//! `TOLLGATE_SCRIPT_LUA=<file>` runs another script (a mutation run plants a fault in a copy).

use std::collections::HashMap;
use std::fmt::Write as _;

use fred::prelude::*;
use tollgate::algorithm::batch::{self, BatchCharge, Counter};
use tollgate::algorithm::concurrency::SlotId;
use tollgate::algorithm::reservation::{self, Reserved};
use tollgate::algorithm::rule::ChargeOutcome;
use tollgate::algorithm::rule::Mode;
use tollgate::algorithm::rule::Role;
use tollgate::algorithm::{inspect, refresh, refund, Landing, State};
use tollgate::limit::calendar::{zone, Calendar, Period};
use tollgate::limit::{Algorithm, LimitParams};
use tollgate::store::placement::{record_key_of, record_life_us, Group, PlacedCharge};
use tollgate::store::protocol::Refund;
use tollgate::store::redis::scripts::script::{self, decode_state, CallHead, Script};

use crate::support::redis::RedisServer;

const S: u64 = 1_000_000;
const T0: u64 = 1_800_000_000_000_000;

/// splitmix64: small, seedable, and the same on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.below(from.len() as u64) as usize]
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// A key's limits: one, or two that count in the same key (a configured limit and a request's
/// override of it): one algorithm and window, their own limit (a token bucket's is shared:
/// its state is kept in units of it), burst and overdraft.
fn limits(rng: &mut Rng) -> Vec<LimitParams> {
    let algorithm = rng.pick(&[
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::TokenBucket,
        Algorithm::Concurrency,
    ]);
    // A fixed window is sometimes a calendar period (its window then only steers the clock).
    let calendar = (algorithm == Algorithm::FixedWindow && rng.chance(35)).then(|| {
        let (period, name) = rng.pick(&[
            (Period::Day, "Europe/Berlin"),
            (Period::Day, "America/New_York"),
            (Period::Week, "UTC"),
            (Period::Month, "Pacific/Kiritimati"),
            (Period::Day, "Asia/Kolkata"),
        ]);
        Calendar {
            period,
            zone: zone(name).expect("a zone of the database"),
            week_starts: jiff::civil::Weekday::Monday,
        }
    });
    let window_us = match calendar {
        Some(c) if c.period == Period::Day => 86_400 * S,
        Some(_) => 7 * 86_400 * S,
        None => rng.pick(&[S, 3 * S / 2, 10 * S, 60 * S]),
    };
    let first = rng.pick(&[1, 2, 3, 5, 10, 100]);
    (0..1 + rng.below(2))
        .map(|_| {
            let limit = match algorithm {
                Algorithm::TokenBucket => first,
                _ => rng.pick(&[first, 1, 2, 3, 5, 10, 100]),
            };
            let burst = match algorithm {
                Algorithm::TokenBucket => rng.pick(&[limit, 2 * limit, 1, 7]),
                _ => limit,
            };
            let overdraft = algorithm != Algorithm::Concurrency && rng.chance(20);
            // A token bucket's max_wait: from a µs to several units' refill.
            let waits = algorithm == Algorithm::TokenBucket && !overdraft && rng.chance(40);
            let unit_us = window_us / limit.max(1);
            LimitParams {
                algorithm,
                limit,
                window_us,
                burst,
                overdraft,
                calendar,
                max_wait_us: if waits {
                    rng.pick(&[1, unit_us / 2 + 1, unit_us, 3 * unit_us + 7])
                } else {
                    0
                },
                borrow_until: 0,
                fair_floor: 0,
                fair_cap: 0,
                ends_at_us: 0,
            }
        })
        .collect()
}

/// One charge of a call: its key (an index into the case's keys) and which of its limits, cost
/// and role.
#[derive(Debug, Clone, Copy)]
struct Charge {
    key: usize,
    limit: usize,
    cost: u64,
    role: Role,
}

fn charges_of(rng: &mut Rng, keys: &[Vec<LimitParams>]) -> (Vec<Charge>, usize) {
    let n = 1 + rng.below(4) as usize;
    // Often one charge per key, the script's own path for it.
    let distinct = rng.chance(50);
    let mut out: Vec<Charge> = Vec::new();
    for _ in 0..n {
        let key = rng.below(keys.len() as u64) as usize;
        if distinct && out.iter().any(|c| c.key == key) {
            continue;
        }
        let limit = rng.below(keys[key].len() as u64) as usize;
        let p = keys[key][limit];
        let cap = p.usage_cap();
        let cost = rng.pick(&[
            0,
            1,
            1,
            1,
            2,
            3,
            p.capacity(),
            p.capacity() + 1,
            cap,
            cap + 5,
        ]);
        let role = match rng.below(10) {
            0..=6 => Role::Enforced,
            7 => Role::Shadow,
            _ => Role::Quota {
                descriptor: rng.below(2) as u32,
            },
        };
        out.push(Charge {
            key,
            limit,
            cost,
            role,
        });
    }
    let quota = out
        .iter()
        .filter_map(|c| match c.role {
            Role::Quota { descriptor } => Some(descriptor as usize + 1),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    // The request may have quota descriptors in other groups too.
    let quota_descriptors = quota + rng.below(2) as usize * usize::from(quota > 0);
    (out, quota_descriptors)
}

/// Case key `k`'s name: `k0`, and the others named as classes of k0 (`k0|c=k1`), so that a
/// fixed window with `borrow_until` finds k0 as its pool whenever the call charges it. In a
/// fair share's case (`fair`), k1 is k0's count of active tenants (`k0|t`) and the others its
/// tenants (`k0|t=k2`).
fn key_name(prefix: &str, k: usize, fair: bool) -> String {
    match k {
        0 => format!("{prefix}k0"),
        1 if fair => format!("{prefix}k0|t"),
        _ if fair => format!("{prefix}k0|t=k{k}"),
        _ => format!("{prefix}k0|c=k{k}"),
    }
}

/// Whether the case is a fair share's: k1 counts k0's active tenants.
fn is_fair(keys: &[Vec<LimitParams>]) -> bool {
    keys.get(1).is_some_and(|k| k[0].fair_cap > 0)
}

/// A fair share's charges as the plan makes them: a tenant's charge is followed by one on the
/// count of active tenants (cost 0, shadow), which is charged nowhere else.
fn fair_charges(keys: &[Vec<LimitParams>], charges: Vec<Charge>) -> Vec<Charge> {
    if !is_fair(keys) {
        return charges;
    }
    let mut out = Vec::with_capacity(charges.len() * 2);
    for c in charges {
        match c.key {
            1 => {}
            0 => out.push(c),
            _ => {
                out.push(c);
                out.push(Charge {
                    key: 1,
                    limit: 0,
                    cost: 0,
                    role: Role::Shadow,
                });
            }
        }
    }
    if out.is_empty() {
        out.push(Charge {
            key: 0,
            limit: 0,
            cost: 1,
            role: Role::Enforced,
        });
    }
    out
}

/// A call's group as the Redis store builds it: a spec per charge, the distinct keys in order
/// of first use.
fn group(
    prefix: &str,
    keys: &[Vec<LimitParams>],
    charges: &[Charge],
) -> (Group, Vec<PlacedCharge<'static>>) {
    let specs: Vec<PlacedCharge<'static>> = charges
        .iter()
        .map(|c| PlacedCharge {
            key: key_name(prefix, c.key, is_fair(keys)).into(),
            params: keys[c.key][c.limit],
            cost: c.cost,
            role: c.role,
            lease: 0,
        })
        .collect();
    let mut group = Group {
        keys: Vec::new(),
        charges: (0..charges.len()).collect(),
        key_of: Vec::new(),
        shared: false,
    };
    for (i, c) in charges.iter().enumerate() {
        let at = group.keys.iter().position(|&s| charges[s].key == c.key);
        let at = at.unwrap_or_else(|| {
            group.keys.push(i);
            group.keys.len() - 1
        });
        group.key_of.push(at);
    }
    (group, specs)
}

type Answer = Vec<(ChargeOutcome, Landing)>;

/// One call as both sides are asked it.
#[derive(Clone, Copy)]
struct Asked<'a> {
    charges: &'a [Charge],
    g: &'a Group,
    mode: Mode,
    quota_descriptors: usize,
    refunds: &'a [Refund],
    now: u64,
    slot: SlotId,
}

/// Reservation records the Rust side keeps, by id: when each expires, and per case key the
/// reservation charged, what it left there.
type Records = HashMap<SlotId, (u64, Vec<(usize, Reserved)>)>;

/// What the memory store does for the call: `batch::evaluate_and_report`, a refund as its
/// take-back runs it, or a settle; `states` (per case key) takes what the call commits, and
/// `records` what a reservation records.
fn rust_call(
    states: &mut [Option<State>],
    records: &mut Records,
    keys: &[Vec<LimitParams>],
    specs: &[PlacedCharge<'_>],
    call: &Asked<'_>,
) -> Answer {
    let Asked {
        charges,
        g,
        mode,
        quota_descriptors,
        refunds,
        now,
        slot,
    } = *call;
    let key_of_counter: Vec<usize> = g.keys.iter().map(|&s| charges[s].key).collect();
    // A counter takes the limit of the first charge on it, as the stores do.
    let counter_params: Vec<LimitParams> = g
        .keys
        .iter()
        .map(|&s| keys[charges[s].key][charges[s].limit])
        .collect();
    let batch_charges: Vec<BatchCharge> = charges
        .iter()
        .zip(&g.key_of)
        .zip(specs)
        .map(|((c, &counter), spec)| BatchCharge {
            counter,
            params: keys[c.key][c.limit],
            cost: c.cost,
            role: c.role,
            slot,
            pool: g.pool_of(specs, spec).unwrap_or(usize::MAX),
        })
        .collect();
    if mode == Mode::Unreserve {
        records.remove(&slot);
    }
    if matches!(mode, Mode::Refund | Mode::Unreserve) {
        let mut finals: Vec<Option<State>> = key_of_counter
            .iter()
            .zip(&counter_params)
            .map(|(&k, p)| {
                let mut s = states[k].clone();
                refresh(&mut s, p, now);
                s
            })
            .collect();
        for (c, u) in batch_charges.iter().zip(refunds) {
            if u.refund {
                refund(&mut finals[c.counter], &c.params, u.landing, now);
                states[key_of_counter[c.counter]] = finals[c.counter].clone();
            }
        }
        let allowed: Vec<bool> = refunds.iter().map(|u| u.allowed).collect();
        let landings: Vec<Landing> = refunds.iter().map(Refund::kept).collect();
        let refs: Vec<&Option<State>> = finals.iter().collect();
        let outcomes = batch::report(&refs, &batch_charges, &allowed, &landings, now, false);
        return outcomes.into_iter().zip(landings).collect();
    }
    let mut counters: Vec<Counter> = key_of_counter
        .iter()
        .zip(&counter_params)
        .map(|(&k, p)| Counter::new(states[k].clone(), p, now))
        .collect();
    if mode == Mode::Settle {
        let mut record = match records.remove(&slot) {
            Some((expires, entries)) if expires > now => entries,
            _ => Vec::new(),
        };
        let reserved: Vec<Option<Reserved>> = charges
            .iter()
            .map(|c| {
                let at = record.iter().position(|(k, _)| *k == c.key)?;
                Some(record.remove(at).1)
            })
            .collect();
        let evaluated = reservation::settle_group(&mut counters, &batch_charges, &reserved, now);
        let finals: Vec<&Option<State>> = counters.iter().map(Counter::final_state).collect();
        let outcomes = batch::report(
            &finals,
            &batch_charges,
            &evaluated.allowed,
            &evaluated.landings,
            now,
            false,
        );
        for (&k, counter) in key_of_counter.iter().zip(&counters) {
            if counter.commit {
                states[k] = counter.after.clone();
            }
        }
        return outcomes.into_iter().zip(evaluated.landings).collect();
    }
    let (evaluated, outcomes) =
        batch::evaluate_and_report(&mut counters, &batch_charges, now, mode, quota_descriptors);
    for (&k, counter) in key_of_counter.iter().zip(counters) {
        if counter.commit {
            states[k] = counter.after;
        }
    }
    if mode == Mode::Reserve {
        let entries: Vec<(usize, Reserved)> = charges
            .iter()
            .zip(&evaluated.landings)
            .filter(|(c, l)| {
                l.added > 0 && keys[c.key][c.limit].algorithm != Algorithm::Concurrency
            })
            .map(|(c, &landing)| {
                let reserved = Reserved {
                    cost: c.cost,
                    landing,
                };
                (c.key, reserved)
            })
            .collect();
        if !entries.is_empty() {
            records.insert(slot, (now + record_life_us(g, specs), entries));
        }
    }
    outcomes.into_iter().zip(evaluated.landings).collect()
}

/// Equal answers; a landing's marks only matter when it added something.
fn same(lua: &Answer, rust: &Answer) -> bool {
    lua.len() == rust.len()
        && lua.iter().zip(rust).all(|((lo, ll), (ro, rl))| {
            lo == ro && ll.added == rl.added && (ll.added == 0 || ll.mark == rl.mark)
        })
}

struct Runner {
    client: Client,
    script: Script,
    /// `lua/admin.lua`, whose resets are held to `algorithm::inspect::reset`.
    admin: Script,
    seed: u64,
}

impl Runner {
    async fn lua_call(
        &self,
        specs: &[PlacedCharge<'_>],
        asked: &Asked<'_>,
    ) -> Result<Answer, String> {
        let (g, now) = (asked.g, asked.now);
        let head = CallHead {
            now: Some(now as i64),
            mode: asked.mode,
            quota_descriptors: asked.quota_descriptors,
            slot: asked.slot,
        };
        let record = asked.mode.has_record().then(|| {
            let key = record_key_of(&specs[g.keys[0]].key, asked.slot);
            (key, record_life_us(g, specs) / 1000)
        });
        let record = record.as_ref().map(|(k, ms)| (k.as_str(), *ms));
        let (keys, arg) = script::args(g, specs, head, asked.refunds, record);
        let reply: Value = self
            .client
            .evalsha(&self.script.sha, keys, vec![arg])
            .await
            .map_err(|e| e.to_string())?;
        let numbers = script::unpack(&reply).map_err(|e| e.to_string())?;
        let reply = script::parse_reply(g, &numbers).map_err(|e| e.to_string())?;
        if reply.now != now as i64 {
            return Err(format!("answered at {} for a call at {now}", reply.now));
        }
        Ok(reply.answer)
    }

    /// An operator's reset of `key` by `lua/admin.lua`: the state it found there.
    async fn lua_reset(
        &self,
        key: &str,
        p: &LimitParams,
        now: u64,
    ) -> Result<Option<State>, String> {
        let code = match p.algorithm {
            Algorithm::FixedWindow => script::layout::FIXED_WINDOW,
            Algorithm::SlidingWindow => script::layout::SLIDING_WINDOW,
            Algorithm::TokenBucket => script::layout::TOKEN_BUCKET,
            Algorithm::Concurrency => script::layout::CONCURRENCY,
        };
        let args = vec![
            "reset".to_string(),
            now.to_string(),
            format!("{code}:{}", p.window_us),
        ];
        let reply: (i64, Option<Vec<u8>>) = self
            .client
            .evalsha(&self.admin.sha, vec![key], args)
            .await
            .map_err(|e| e.to_string())?;
        if reply.0 != now as i64 {
            return Err(format!("the reset answered at {} for {now}", reply.0));
        }
        let mut found = reply.1.and_then(|raw| decode_state(p, &raw));
        refresh(&mut found, p, now);
        Ok(found)
    }

    /// Whether the script holds a live record for `id` (its first 8 bytes: when it expires).
    async fn lua_record(&self, prefix: &str, id: SlotId, now: u64) -> bool {
        let key = record_key_of(&format!("{prefix}k0"), id);
        let raw: Option<Vec<u8>> = self.client.get(key).await.expect("GET");
        raw.is_some_and(|r| {
            r.len() >= 8 && f64::from_le_bytes(r[..8].try_into().expect("8 bytes")) > now as f64
        })
    }

    async fn lua_state(&self, key: &str, p: &LimitParams, now: u64) -> Option<State> {
        let raw: Option<Vec<u8>> = self.client.get(key).await.expect("GET");
        let mut state = raw.and_then(|raw| {
            let decoded = decode_state(p, &raw);
            assert!(decoded.is_some(), "{key} holds no {p:?} state: {raw:?}");
            decoded
        });
        refresh(&mut state, p, now);
        state
    }

    /// One case: Err(the story of the case up to the mismatch).
    async fn case(&self, case: u64) -> Result<(), String> {
        let mut rng = Rng(self.seed ^ case.wrapping_mul(0x2545_f491_4f6c_dd1d));
        let prefix = format!("{{c{case}}}:");
        let mut keys: Vec<Vec<LimitParams>> =
            (0..1 + rng.below(3)).map(|_| limits(&mut rng)).collect();
        // Classes of a pool (`shares:`): a fixed window k0 is the pool of the other fixed
        // windows, which then borrow past their limit while k0 stays within borrow_until.
        let pool0 = keys[0][0];
        if pool0.algorithm == Algorithm::FixedWindow && rng.chance(35) {
            // A fair share (`fair_share:`): k1 counts k0's active tenants (up to a cap),
            // k2 and on are tenants, free while k0 stays within `above`, then held to
            // max(floor, k0's limit ÷ the active tenants).
            let above = rng.pick(&[1, pool0.limit / 2 + 1, pool0.limit, pool0.limit + 3]);
            let floor = rng.pick(&[1, 2, pool0.limit / 3 + 1]);
            let cap = rng.pick(&[1, 2, 3, 100]);
            let part = |limit: u64, borrow_until: u64, fair_floor: u64, fair_cap: u64| {
                vec![LimitParams {
                    limit,
                    burst: limit,
                    overdraft: false,
                    borrow_until,
                    fair_floor,
                    fair_cap,
                    ..pool0
                }]
            };
            keys.truncate(1);
            keys.push(part(cap, 0, 0, cap));
            for _ in 0..1 + rng.below(3) {
                keys.push(part(pool0.limit, above, floor, 0));
            }
        } else if pool0.algorithm == Algorithm::FixedWindow {
            let pool = keys[0][0].limit;
            for key in keys.iter_mut().skip(1) {
                if key[0].algorithm == Algorithm::FixedWindow && rng.chance(60) {
                    let until = rng.pick(&[1, pool / 2 + 1, pool, pool + 3]);
                    for p in key {
                        p.borrow_until = until;
                    }
                }
            }
        }
        let mut story = format!("keys: {keys:?}\n");
        let mut states: Vec<Option<State>> = vec![None; keys.len()];
        let mut records = Records::new();
        // The last reservation: its charges, to settle with other costs.
        let mut reserved: Option<(Vec<Charge>, SlotId)> = None;
        let mut now = T0 + rng.below(60 * S);
        // The last call that may have landed something: its charges, quota and answers.
        let mut last: Option<(Vec<Charge>, usize, Answer, SlotId, Mode)> = None;
        for step in 0..1 + rng.below(12) {
            let window = keys[rng.below(keys.len() as u64) as usize][0].window_us;
            let forward = rng.pick(&[0, 1, 999, 1_000, 61_000, 250_000, window / 2, window]);
            // Boundaries too: the end of the current fixed window, and the moment what a
            // sliding window lands now leaves it (its granule's stamp plus the window).
            let g = (window / 1_000).max(1_000);
            now = match rng.below(20) {
                0 => now - rng.pick(&[1, 1_000, 500_000]),
                1 => now + window + 1,
                2 => now + 2 * window,
                3 => now - now % window + window,
                4 => now / g * g + g - 1 + window,
                _ => now + forward,
            };
            if rng.chance(8) {
                // An operator resets a key: later refunds of what landed before it must find
                // nothing, in the script as in Rust.
                let k = rng.below(keys.len() as u64) as usize;
                let p = &keys[k][0];
                let _ = writeln!(story, "reset k{k} at T0+{}", now as i64 - T0 as i64);
                let lua = self
                    .lua_reset(&key_name(&prefix, k, is_fair(&keys)), p, now)
                    .await;
                let mut rust = states[k].clone();
                refresh(&mut rust, p, now);
                states[k] = inspect::reset(&states[k], p, now);
                if lua.as_ref() != Ok(&rust) {
                    return Err(format!(
                        "{story}the resets found: lua {lua:?}, rust {rust:?}"
                    ));
                }
            }
            let refunding = last.is_some() && rng.chance(30);
            let settling = !refunding && reserved.is_some() && rng.chance(35);
            // Ids from a small set: the same id takes again, and releases what another took.
            let mut slot = (rng.pick(&[1, 2, 3]), rng.pick(&[7, (1 << 52) - 1]));
            let (charges, quota, mode, refunds) = if refunding {
                let (charges, quota, answer, id, last_mode) =
                    last.take().expect("a call to refund");
                slot = id;
                let refunds: Vec<Refund> = answer
                    .iter()
                    .map(|(outcome, landing)| Refund {
                        allowed: outcome.allowed,
                        landing: *landing,
                        // As the protocol asks: only what landed is taken back.
                        refund: landing.added > 0 && rng.chance(70),
                    })
                    .collect();
                let mode = match last_mode {
                    Mode::Reserve => Mode::Unreserve,
                    _ => Mode::Refund,
                };
                (charges, quota, mode, refunds)
            } else if settling {
                // The actual use: the estimate's costs changed, on the same keys (and now and
                // then another key, which the reservation did not charge).
                let (mut charges, id) = reserved.clone().expect("a reservation to settle");
                slot = if rng.chance(85) { id } else { (9, 9) };
                for c in &mut charges {
                    let p = keys[c.key][c.limit];
                    c.cost = rng.pick(&[
                        0,
                        1,
                        c.cost / 2,
                        c.cost,
                        c.cost + 1,
                        2 * c.cost + 3,
                        p.usage_cap(),
                    ]);
                    c.role = Role::Enforced;
                }
                if rng.chance(20) {
                    let (more, _) = charges_of(&mut rng, &keys);
                    let mut more = fair_charges(&keys, more);
                    charges.append(&mut more);
                }
                (charges, 0, Mode::Settle, Vec::new())
            } else {
                let (charges, mut quota) = charges_of(&mut rng, &keys);
                let mut charges = fair_charges(&keys, charges);
                let mode = match rng.below(24) {
                    0..=7 => Mode::Decide,
                    8..=11 => Mode::Reserve,
                    12..=14 => Mode::CountRejected,
                    15..=19 => Mode::DryRun,
                    20 | 21 => Mode::Release,
                    _ => Mode::Renew,
                };
                if mode == Mode::Reserve && rng.chance(60) {
                    // Mostly a reservation as Envoy's token budgets make them: every charge
                    // enforced (the script's own path when they are windows, one per key).
                    for c in &mut charges {
                        c.role = Role::Enforced;
                    }
                    quota = 0;
                }
                (charges, quota, mode, Vec::new())
            };
            let (g, specs) = group(&prefix, &keys, &charges);
            let _ = writeln!(
                story,
                "call {step} at T0+{}: {mode:?}, slot {slot:?}, quota descriptors {quota}, {charges:?}, refunds {refunds:?}",
                now as i64 - T0 as i64
            );
            let asked = Asked {
                charges: &charges,
                g: &g,
                mode,
                quota_descriptors: quota,
                refunds: &refunds,
                now,
                slot,
            };
            let lua = self.lua_call(&specs, &asked).await;
            let rust = rust_call(&mut states, &mut records, &keys, &specs, &asked);
            let lua = match lua {
                Ok(lua) if same(&lua, &rust) => lua,
                other => {
                    return Err(format!(
                        "{story}the answers differ:\n  lua:  {other:?}\n  rust: {rust:?}"
                    ))
                }
            };
            for (k, p) in keys.iter().map(|l| &l[0]).enumerate() {
                let key = key_name(&prefix, k, is_fair(&keys));
                let in_lua = self.lua_state(&key, p, now).await;
                let mut in_rust = states[k].clone();
                refresh(&mut in_rust, p, now);
                if in_lua != in_rust {
                    return Err(format!(
                        "{story}key k{k} is left in another state:\n  lua:  {in_lua:?}\n  rust: {in_rust:?}"
                    ));
                }
            }
            let in_lua = self.lua_record(&prefix, slot, now).await;
            let in_rust = records
                .get(&slot)
                .is_some_and(|(expires, _)| *expires > now);
            if in_lua != in_rust {
                return Err(format!(
                    "{story}the record of {slot:?}: lua has it {in_lua}, rust {in_rust}"
                ));
            }
            if mode == Mode::Reserve {
                reserved = Some((charges.clone(), slot));
            }
            if matches!(
                mode,
                Mode::Decide | Mode::CountRejected | Mode::DryRun | Mode::Reserve
            ) {
                last = Some((charges, quota, lua, slot, mode));
            }
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_script_answers_and_stores_what_the_rust_algorithms_do() {
    let server = tokio::task::block_in_place(RedisServer::start);
    let config = Config::from_url(&server.url()).expect("fred config");
    let client = Client::new(config, None, None, None);
    client.init().await.expect("connect");
    let script = match std::env::var("TOLLGATE_SCRIPT_LUA") {
        Ok(path) => {
            let lua = std::fs::read_to_string(&path).expect("TOLLGATE_SCRIPT_LUA is readable");
            Script {
                sha: fred::util::sha1_hash(&lua),
                lua: Box::leak(lua.into_boxed_str()),
            }
        }
        Err(_) => Script::tollgate(),
    };
    let _: String = client.script_load(script.lua).await.expect("SCRIPT LOAD");
    let admin = Script::admin();
    let _: String = client.script_load(admin.lua).await.expect("SCRIPT LOAD");
    let seed = std::env::var("TOLLGATE_SCRIPT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock after 1970")
                .as_nanos() as u64
        });
    let cases: u64 = std::env::var("TOLLGATE_SCRIPT_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000);
    let runner = Runner {
        client,
        script,
        admin,
        seed,
    };
    for case in 0..cases {
        if let Err(story) = runner.case(case).await {
            panic!("case {case} of seed {seed} (TOLLGATE_SCRIPT_SEED={seed} replays it):\n{story}");
        }
    }
}
