//! The memory store's shards: maps of entries (a counter, or a reservation's record) under
//! mutexes, what each entry is accounted as (`--max-store-bytes`), how a shard over its share
//! makes room, and the shards one request holds ([`Locked`]).

use std::collections::HashMap;

use parking_lot::MutexGuard;

use crate::algorithm::reservation::Reserved;
use crate::algorithm::{expires_at, State};
use crate::limit::LimitParams;

/// What a map entry costs beyond its key's bytes and its state's heap: its bucket in the
/// table, twice (the table is between 7/16 and 7/8 full, and never shrinks), a control byte,
/// and the key's allocation (its header and the allocator's rounding up, 24 bytes at most).
/// Measured: 1,000,000 distinct keys under `--max-store-bytes 32MiB` peaked at 2.2× the bound
/// in RSS with 64 here (`cargo test --test server a_million`), which is what this corrects.
pub(super) const ENTRY_OVERHEAD: usize = 2 * std::mem::size_of::<(String, Entry)>() + 1 + 24;

pub(super) struct Entry {
    pub(super) held: Stored,
    pub(super) expires_at: u64,
}

/// What a key holds: a counter, or a reservation's record (per counter it charged, its key
/// and what the estimate left there).
pub(super) enum Stored {
    Counter(State),
    Record(Vec<(String, Reserved)>),
}

/// The bytes an entry holds, as the store accounts for them.
pub(super) fn entry_bytes(key: &str, held: &Stored) -> usize {
    let held = match held {
        Stored::Counter(State::Window(_)) => 16,
        Stored::Counter(State::Log(l)) => 32 + 24 * l.entries.len(),
        Stored::Counter(State::Tat(t)) => 48 + 24 * t.history.len(),
        Stored::Counter(State::Slots(s)) => 24 + 32 * s.held.len(),
        Stored::Record(entries) => entries.iter().map(|(k, _)| k.len() + 56).sum(),
    };
    key.len() + held + ENTRY_OVERHEAD
}

#[derive(Default)]
pub(super) struct MemoryShard {
    pub(super) map: HashMap<String, Entry>,
    /// What the entries hold, by [`entry_bytes`].
    pub(super) bytes: usize,
}

impl MemoryShard {
    /// Drops expired entries, then the live ones closest to expiry (never `keep`), until the
    /// shard holds at most 90% of `budget`. Returns how many live entries were evicted.
    pub(super) fn shrink(&mut self, budget: usize, now: u64, keep: &str) -> u64 {
        let bytes = &mut self.bytes;
        self.map.retain(|k, e| {
            let live = e.expires_at > now;
            if !live {
                *bytes -= entry_bytes(k, &e.held);
            }
            live
        });
        let target = budget / 10 * 9;
        if self.bytes <= target {
            return 0;
        }
        let mut by_expiry: Vec<(u64, usize, String)> = self
            .map
            .iter()
            .filter(|(k, _)| k.as_str() != keep)
            .map(|(k, e)| (e.expires_at, entry_bytes(k, &e.held), k.clone()))
            .collect();
        by_expiry.sort_unstable_by_key(|(at, _, _)| *at);
        let mut evicted = 0;
        for (_, size, key) in by_expiry {
            if self.bytes <= target {
                break;
            }
            self.map.remove(&key);
            self.bytes -= size;
            evicted += 1;
        }
        evicted
    }
}

/// The shards one request holds, and where its keys live.
pub(super) struct Locked<'s> {
    /// MemoryShard indexes, ascending, each once.
    pub(super) order: Vec<usize>,
    pub(super) guards: Vec<MutexGuard<'s, MemoryShard>>,
    /// Per placed charge, its shard.
    pub(super) shard_of: Vec<usize>,
}

impl Locked<'_> {
    pub(super) fn shard(&mut self, spec: usize) -> &mut MemoryShard {
        let shard = self.shard_of[spec];
        let i = self.order.binary_search(&shard).unwrap_or_default();
        &mut self.guards[i]
    }

    /// Takes a reservation's record out of the store (`spec`: the record's index in `shard_of`).
    pub(super) fn take_record(
        &mut self,
        spec: usize,
        key: &str,
        now: u64,
    ) -> Option<Vec<(String, Reserved)>> {
        let shard = self.shard(spec);
        let entry = shard.map.remove(key)?;
        shard.bytes -= entry_bytes(key, &entry.held);
        match entry.held {
            Stored::Record(r) if entry.expires_at > now => Some(r),
            _ => None,
        }
    }

    pub(super) fn load(&mut self, spec: usize, key: &str, now: u64) -> Option<State> {
        self.shard(spec)
            .map
            .get(key)
            .filter(|e| e.expires_at > now)
            .and_then(|e| match &e.held {
                Stored::Counter(state) => Some(state.clone()),
                Stored::Record(_) => None,
            })
    }

    /// Writes (or removes) a counter; shrinks its shard when over `budget`. Returns how many
    /// live entries that evicted.
    pub(super) fn store(
        &mut self,
        spec: usize,
        key: &str,
        state: Option<State>,
        p: &LimitParams,
        budget: usize,
        now: u64,
    ) -> u64 {
        let shard = self.shard(spec);
        let Some(state) = state else {
            if let Some(old) = shard.map.remove(key) {
                shard.bytes -= entry_bytes(key, &old.held);
            }
            return 0;
        };
        let expires = expires_at(&state, p);
        self.put(spec, key, Stored::Counter(state), expires, budget, now)
    }

    /// Writes an entry; shrinks its shard when over `budget`. Returns how many live entries
    /// that evicted.
    pub(super) fn put(
        &mut self,
        spec: usize,
        key: &str,
        held: Stored,
        expires_at: u64,
        budget: usize,
        now: u64,
    ) -> u64 {
        let shard = self.shard(spec);
        let size = entry_bytes(key, &held);
        let entry = Entry { expires_at, held };
        // In place when the key is there: no new allocation for the key on the hot path.
        match shard.map.get_mut(key) {
            Some(old) => {
                shard.bytes = shard.bytes - entry_bytes(key, &old.held) + size;
                *old = entry;
            }
            None => {
                shard.bytes += size;
                shard.map.insert(key.to_string(), entry);
            }
        }
        if shard.bytes > budget {
            shard.shrink(budget, now, key)
        } else {
            0
        }
    }
}
