//! What every part of the Redis store shares: its clients, health, scripts, caches, leases
//! and options. The parts add their own methods to [`Inner`] (deciding a request in
//! `decide.rs`, a leased group in `leased.rs`, batching in `coalesce.rs`, …).

use std::sync::Arc;

use super::connection::client::Clients;
use super::connection::health::Health;
use super::connection::migration::Migrations;
use super::local::lease::Leases;
use super::local::local_cache::LocalCache;
use super::options::{ClockSource, RedisOptions};
use super::scripts::script::Script;
use crate::base::clock::Clock;

/// What every part of the store shares.
pub(super) struct Inner {
    pub(super) clients: Clients,
    pub(super) health: Health,
    pub(super) script: Script,
    /// `lua/admin.lua`: the operator's reads and resets.
    pub(super) admin_script: Script,
    pub(super) opts: RedisOptions,
    /// `key_prefix` + [`KEY_FORMAT`].
    pub(super) prefix: String,
    pub(super) cache: LocalCache,
    /// Units of leased shared limits this instance holds ([`lease`]).
    pub(super) leases: Leases,
    /// Slots seen migrating between primaries, and where each is imported.
    pub(super) migrations: Migrations,
    /// The instance clock, for the local cache.
    pub(super) wall: Arc<dyn Clock>,
    /// This instance's region, when it has one (`--region`): global limits' leases.
    pub(super) regional: std::sync::OnceLock<Arc<super::regional::inner::Regional>>,
}

impl Inner {
    /// The script's `now` argument: `None` when the script reads Redis `TIME`.
    pub(super) fn now_arg(&self) -> Option<i64> {
        match &self.opts.clock {
            ClockSource::Redis => None,
            ClockSource::Local(c) => Some(c.now_us() as i64),
        }
    }
}
