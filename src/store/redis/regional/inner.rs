//! What a region's parts share: the [`Regional`] state (its leases, the home regions it can
//! reach, its own Redis), the service's constants, and how a global limit is run.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::*;

use super::board::Board;
use super::home::HomeLink;
use crate::algorithm::global::terms::{GlobalLimit, Kind, OnPartition};
use crate::limit::regions::AcrossRegions;
use crate::limit::Limit;
use crate::store::redis::connection::client::Clients;
use crate::store::redis::connection::migration::Migrations;
use crate::store::redis::scripts::script::Script;
use crate::telemetry::metrics::Metrics;

/// How often every refill task runs (and a region with nothing to ask sends a heartbeat).
pub const PERIOD: Duration = Duration::from_millis(100);

/// A region not heard from for this long is cut off (both sides count it alike): two round
/// trips of up to 350 ms and three periods.
pub const SILENT_AFTER: Duration = Duration::from_secs(1);

/// How long a new authority grants nothing.
const CAUTION: Duration = Duration::from_secs(1);

/// This instance's part in global limits.
pub struct Regional {
    pub region: String,
    pub board: Board,
    /// Names this instance in its region's locks.
    pub(crate) me: String,
    pub(crate) homes: HashMap<String, HomeLink>,
    /// Other regions' clients, kept open.
    pub(crate) _clients: Vec<Clients>,
    /// The region's own Redis (the store's).
    pub(crate) local: Client,
    pub(crate) migrations: Migrations,
    pub(crate) script: Script,
    pub(crate) key_prefix: String,
    pub(crate) metrics: Arc<Metrics>,
}

/// How a global limit is run: its window and limit, what a region does cut off, and the
/// service's constants.
pub fn settings_of(limit: &Limit, g: &AcrossRegions) -> GlobalLimit {
    GlobalLimit {
        kind: Kind::Window {
            limit: limit.params.limit,
            window_us: limit.params.window_us,
            calendar: limit.params.calendar,
        },
        on_partition: match g.safe_share {
            Some(s) => OnPartition::SafeShare(s),
            None => OnPartition::Refuse,
        },
        period_us: PERIOD.as_micros() as u64,
        silent_after_us: SILENT_AFTER.as_micros() as u64,
        lifetime_us: (2 * SILENT_AFTER).as_micros() as u64,
        caution_us: CAUTION.as_micros() as u64,
    }
}
