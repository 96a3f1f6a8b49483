//! One placement group of a request on the memory store, under the request's shard locks: a
//! decision (a reservation's too, which records what landed), a settle, a refund. The steps
//! the decision protocol asks for, as the Redis script takes them.

use super::shards::{Locked, Stored};
use crate::algorithm::batch::{self, BatchCharge, Counter};
use crate::algorithm::reservation::{self, Reserved};
use crate::algorithm::rule::Mode;
use crate::algorithm::{refresh, refund, Landing, State};
use crate::limit::Algorithm;
use crate::store::placement::{record_life_us, Placed};
use crate::store::protocol::{GroupAnswer, Refund};
use crate::telemetry::metrics::Metrics;

/// The group's distinct keys (as indexes into the placed charges) and its charges as a batch over them.
pub(super) fn group_batch<'p>(
    placed: &'p Placed<'_>,
    gi: usize,
) -> (&'p [usize], Vec<BatchCharge>) {
    let g = &placed.groups[gi];
    let charges = g
        .charges
        .iter()
        .zip(&g.key_of)
        .map(|(&ci, &k)| {
            let s = &placed.charges[ci];
            BatchCharge {
                counter: k,
                params: s.params,
                cost: s.cost,
                role: s.role,
                slot: placed.slot,
                pool: g.pool_of(&placed.charges, s).unwrap_or(usize::MAX),
            }
        })
        .collect();
    (&g.keys, charges)
}

/// What a group run needs besides its counters: the time, each shard's budget, the metrics,
/// and a reservation's record keys (one per group; none outside a reservation or settle).
pub(super) struct Run<'m> {
    pub(super) now: u64,
    pub(super) budget: usize,
    pub(super) metrics: &'m Metrics,
    pub(super) records: &'m [String],
}

/// Decides one placement group and writes back what it commits.
pub(super) fn run_group(
    locked: &mut Locked<'_>,
    placed: &Placed<'_>,
    gi: usize,
    mode: Mode,
    run: &Run<'_>,
) -> GroupAnswer {
    let (now, budget, metrics) = (run.now, run.budget, run.metrics);
    let (keys, charges) = group_batch(placed, gi);
    let mut counters: Vec<Counter> = keys
        .iter()
        .map(|&s| {
            let spec = &placed.charges[s];
            Counter::new(locked.load(s, &spec.key, now), &spec.params, now)
        })
        .collect();
    let quota = placed.quota_descriptors;
    let (evaluated, outcomes) =
        batch::evaluate_and_report(&mut counters, &charges, now, mode, quota);
    for (counter, &s) in counters.into_iter().zip(keys) {
        if counter.commit {
            let spec = &placed.charges[s];
            let evicted = locked.store(s, &spec.key, counter.after, &spec.params, budget, now);
            metrics.memory_evictions.inc_by(evicted);
        }
    }
    if mode == Mode::Reserve {
        // What landed, by key: the record a settle finds (none when nothing landed).
        let g = &placed.groups[gi];
        let entries: Vec<(String, Reserved)> = g
            .charges
            .iter()
            .zip(&charges)
            .zip(&evaluated.landings)
            .filter(|((_, c), l)| l.added > 0 && c.params.algorithm != Algorithm::Concurrency)
            .map(|((&ci, c), &landing)| {
                let reserved = Reserved {
                    cost: c.cost,
                    landing,
                };
                (placed.charges[ci].key.to_string(), reserved)
            })
            .collect();
        if !entries.is_empty() {
            let spec = placed.charges.len() + gi;
            let key = &run.records[gi];
            let expires = now + record_life_us(g, &placed.charges);
            let evicted = locked.put(spec, key, Stored::Record(entries), expires, budget, now);
            metrics.memory_evictions.inc_by(evicted);
        }
    }
    outcomes.into_iter().zip(evaluated.landings).collect()
}

/// Settles the reservation the request's id names in one group: its record is taken (so a
/// second settle finds nothing), each charge on a counter the reservation charged settles with
/// its cost as the actual use, and the group answers as things stand.
pub(super) fn settle_group(
    locked: &mut Locked<'_>,
    placed: &Placed<'_>,
    gi: usize,
    run: &Run<'_>,
) -> GroupAnswer {
    let (now, budget, metrics) = (run.now, run.budget, run.metrics);
    let (keys, charges) = group_batch(placed, gi);
    let mut record = locked
        .take_record(placed.charges.len() + gi, &run.records[gi], now)
        .unwrap_or_default();
    let g = &placed.groups[gi];
    let reserved: Vec<Option<Reserved>> = g
        .charges
        .iter()
        .map(|&ci| {
            let at = record
                .iter()
                .position(|(k, _)| *k == placed.charges[ci].key)?;
            Some(record.swap_remove(at).1)
        })
        .collect();
    let mut counters: Vec<Counter> = keys
        .iter()
        .map(|&s| {
            let spec = &placed.charges[s];
            Counter::new(locked.load(s, &spec.key, now), &spec.params, now)
        })
        .collect();
    let evaluated = reservation::settle_group(&mut counters, &charges, &reserved, now);
    for (counter, &s) in counters.iter().zip(keys) {
        if counter.commit {
            let spec = &placed.charges[s];
            let evicted = locked.store(
                s,
                &spec.key,
                counter.after.clone(),
                &spec.params,
                budget,
                now,
            );
            metrics.memory_evictions.inc_by(evicted);
        }
    }
    let finals: Vec<&Option<State>> = counters.iter().map(Counter::final_state).collect();
    let outcomes = batch::report(
        &finals,
        &charges,
        &evaluated.allowed,
        &evaluated.landings,
        now,
        false,
    );
    outcomes.into_iter().zip(evaluated.landings).collect()
}

/// Refunds what `refunds` says in one group, writes the counters back and answers as things
/// stand.
pub(super) fn refund_group(
    locked: &mut Locked<'_>,
    placed: &Placed<'_>,
    gi: usize,
    refunds: &[Refund],
    run: &Run<'_>,
    mode: Mode,
) -> GroupAnswer {
    let (now, budget, metrics) = (run.now, run.budget, run.metrics);
    let (keys, charges) = group_batch(placed, gi);
    let mut states: Vec<Option<State>> = keys
        .iter()
        .map(|&s| {
            let spec = &placed.charges[s];
            let mut state = locked.load(s, &spec.key, now);
            refresh(&mut state, &spec.params, now);
            state
        })
        .collect();
    for (c, u) in charges.iter().zip(refunds) {
        if u.refund {
            let s = keys[c.counter];
            let state = &mut states[c.counter];
            refund(state, &c.params, u.landing, now);
            let spec = &placed.charges[s];
            let evicted = locked.store(s, &spec.key, state.clone(), &spec.params, budget, now);
            metrics.memory_evictions.inc_by(evicted);
        }
    }
    if mode == Mode::Reserve {
        // The reservation did not happen here: its record goes with its charges.
        locked.take_record(placed.charges.len() + gi, &run.records[gi], now);
    }
    let allowed: Vec<bool> = refunds.iter().map(|u| u.allowed).collect();
    let landings: Vec<Landing> = refunds.iter().map(Refund::kept).collect();
    let finals: Vec<&Option<State>> = states.iter().collect();
    let outcomes = batch::report(
        &finals,
        &charges,
        &allowed,
        &landings,
        now,
        mode == Mode::CountRejected,
    );
    outcomes.into_iter().zip(landings).collect()
}
