//! The Redis side of a decision: the decision script (`lua/decide/`), its argument and reply formats, and the
//! `EVALSHA` call that survives `NOSCRIPT` and resharding.
//!
//! The layouts are documented at the top of the script; this file is the only Rust code that
//! knows them: [`layout`] holds their counts and codes (a test reads the script's own and
//! fails when the two drift), [`args`] and [`parse_reply`] the call and its reply, and
//! [`decode_state`] the state the script stores per key (for the script-level differential
//! test, which compares it with the Rust algorithms' field by field).

use std::time::Duration;

use fred::prelude::*;
use fred::types::config::Options;
use fred::util::redis_keyslot;
use tokio::time::Instant;

use super::super::connection::migration::{self, Migrations};
use super::super::durability::commit;
use super::super::durability::durable::{self, Wait};
use super::super::error::{classify, SOMEWHERE};
use crate::algorithm::concurrency::{Held, SlotId, Slots};
use crate::algorithm::fixed_window::Window;
use crate::algorithm::rule::ChargeOutcome;
use crate::algorithm::rule::Mode;
use crate::algorithm::rule::Role;
use crate::algorithm::sliding_window::Log;
use crate::algorithm::token_bucket::Tat;
use crate::algorithm::{Landing, State};
use crate::base::clock::{Clock, SystemClock};
use crate::limit::{Algorithm, LimitParams};
use crate::store::error::Cause;
use crate::store::error::StoreError;
use crate::store::placement::{Group, PlacedCharge};
use crate::store::protocol::{GroupAnswer, Refund};

/// The counts and codes of the script's argument and reply layout.
pub mod layout {
    /// Numbers of a call before its charges: now, the number of keys, mode, the request's
    /// quota descriptors, the number of charges, the request's id (two numbers), and a
    /// reservation record's time to live in ms (0 outside `RESERVE`).
    pub const CALL_NUMBERS: usize = 8;
    /// Per charge: key index, algorithm, limit, window, burst, overdraft, cost, role,
    /// max_wait (µs; a token bucket's, else 0), pool (a class's pool's key index, 1-based;
    /// else 0; a fair share's tenant's pool, too), borrow_until (a class's or a tenant's, else
    /// 0), fair (a fair share's tenant's floor; -1 for its pool's count of active tenants, the
    /// charge right after it; else 0).
    pub const CHARGE_NUMBERS: usize = 12;
    /// Per charge of a refund: allowed, kept, amount, mark1, mark2.
    pub const REFUND_NUMBERS: usize = 5;
    /// Per charge of a reply: allowed, remaining, wait, added, mark1, mark2.
    pub const ANSWER_NUMBERS: usize = 6;
    /// Algorithm codes.
    pub const FIXED_WINDOW: u64 = 0;
    pub const SLIDING_WINDOW: u64 = 1;
    pub const TOKEN_BUCKET: u64 = 2;
    pub const CONCURRENCY: u64 = 3;
    /// Role codes: a quota charge of request descriptor `d` is `QUOTA + d`.
    pub const ENFORCED: u64 = 0;
    pub const SHADOW: u64 = 1;
    pub const QUOTA: u64 = 2;
}

/// A script and the SHA1 `EVALSHA` names it by.
pub struct Script {
    pub lua: &'static str,
    pub sha: String,
}

impl Script {
    /// `lua/global.lua`: one limit across regions (`super::super::regional`).
    pub fn global() -> Script {
        let lua = include_str!("../../../../lua/global.lua");
        Script {
            lua,
            sha: fred::util::sha1_hash(lua),
        }
    }

    /// The decision script: `lua/decide/`'s parts as build.rs joins them.
    pub fn tollgate() -> Script {
        let lua = include_str!(concat!(env!("OUT_DIR"), "/tollgate.lua"));
        Script {
            lua,
            sha: fred::util::sha1_hash(lua),
        }
    }
}

/// Why a script call failed.
#[derive(Debug)]
pub enum EvalError {
    /// Redis refused it before running it (TRYAGAIN, CLUSTERDOWN, a redirect) and the call's
    /// time to retry is up: nothing of it ran.
    NotRun(StoreError),
    /// Anything else: it may have run.
    Failed(StoreError),
}

impl From<EvalError> for StoreError {
    fn from(e: EvalError) -> StoreError {
        match e {
            EvalError::NotRun(e) | EvalError::Failed(e) => e,
        }
    }
}

/// `EVALSHA` (then, with `wait`, `WAIT` on its connection: [`durable`]), loading the script on
/// every primary and retrying once on NOSCRIPT; retries
/// TRYAGAIN / CLUSTERDOWN (resharding, failover) until `retry_until`, and follows a hash slot that
/// is migrating to the node importing it ([`migration`]).
pub async fn eval<R: FromValue>(
    client: &Client,
    options: &Options,
    script: &Script,
    migrations: &Migrations,
    retry_until: Instant,
    wait: Option<Wait>,
    request: impl Fn() -> (Vec<Key>, Vec<Value>),
) -> Result<R, EvalError> {
    let mut loaded = false;
    // Where the hash slot is being imported, once its owner has redirected us.
    let mut asking: Option<(u16, Server)> = None;
    let mut redirects = 0u32;
    loop {
        // Built per attempt: a retry is rare, and the first attempt moves its buffers.
        let (keys, args) = request();
        let hash_slot = keys.first().map_or(0, |k| redis_keyslot(k.as_bytes()));
        let res: Result<R, Error> = match (&asking, &wait) {
            (None, None) => {
                client
                    .with_options(options)
                    .evalsha(&script.sha, keys, args)
                    .await
            }
            (Some((_, node)), None) => {
                migration::evalsha_asking(client, options, node, &script.sha, keys, args).await
            }
            (asking, Some(wait)) => {
                let asking = asking.as_ref().map(|(_, node)| node);
                let sent = (client, options, script.sha.as_str(), hash_slot);
                attempt_waiting(sent, asking, keys, args, wait).await?
            }
        };
        match res {
            Ok(v) => return Ok(v),
            Err(e) if e.details().starts_with("NOSCRIPT") && !loaded => {
                loaded = true;
                let load = match &asking {
                    // A node fred does not route this hash slot to may lack the script.
                    Some((_, node)) => {
                        client
                            .with_cluster_node(node.clone())
                            .script_load::<(), _>(script.lua)
                            .await
                    }
                    None => client.script_load_cluster::<(), _>(script.lua).await,
                };
                load.map_err(|e| EvalError::Failed(classify(&e, None, SOMEWHERE)))?;
            }
            Err(e)
                if (e.details().starts_with("TRYAGAIN")
                    || e.details().starts_with("CLUSTERDOWN"))
                    && Instant::now() < retry_until =>
            {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            Err(e) if migration::redirected(&e) && Instant::now() < retry_until => {
                // MOVED (fred has re-read the topology: the next try goes to the new owner)
                // or ASK (the hash slot is migrating: the next try goes to the importing node).
                // Redirected while already asking: the migration moved on; look again.
                if let Some((hash_slot, _)) = asking.take() {
                    migrations.forget(hash_slot);
                }
                asking = migrations
                    .importing_node(client, hash_slot)
                    .await
                    .map(|node| (hash_slot, node));
                redirects += 1;
                if redirects > 1 {
                    // The topology is still settling: do not hammer it.
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
            Err(e) => {
                let not_run = e.details().starts_with("TRYAGAIN")
                    || e.details().starts_with("CLUSTERDOWN")
                    || migration::redirected(&e);
                let e = classify(&e, None, SOMEWHERE);
                return Err(if not_run {
                    EvalError::NotRun(e)
                } else {
                    EvalError::Failed(e)
                });
            }
        }
    }
}

/// One attempt of a call that waits for replicas (`sent`: the client, its options, the script's
/// SHA, the hash slot): in this thread's next pipeline to the node with one `WAIT` behind every
/// call in it ([`commit`]), or, off a serving thread or while asking, `EVALSHA` then its own
/// `WAIT`. The script's reply; a short count is the outer error (the script ran: the failure
/// policy answers, nothing is retried).
async fn attempt_waiting<R: FromValue>(
    sent: (&Client, &Options, &str, u16),
    asking: Option<&Server>,
    keys: Vec<Key>,
    args: Vec<Value>,
    wait: &Wait,
) -> Result<Result<R, Error>, EvalError> {
    let (client, options, sha, hash_slot) = sent;
    let reply = if asking.is_none() && commit::thread_bound() {
        commit::evalsha_covered((client, options), hash_slot, sha, keys, args, wait).await
    } else {
        let call = (options, asking, hash_slot, sha);
        durable::evalsha_then_wait(client, call, keys, args, wait).await
    };
    match reply {
        Ok((reply, acked)) => {
            // Ran, and maybe lost: the failure policy answers. The node is looked up only
            // then, for the message.
            wait.check(acked, || {
                asking
                    .cloned()
                    .or_else(|| durable::owner(client, hash_slot))
            })
            .map_err(EvalError::Failed)?;
            Ok(reply.convert())
        }
        Err(e) => Ok(Err(e)),
    }
}

/// What a call says besides its group's charges: `now` (µs; `None`: the script reads Redis
/// `TIME`), the mode, the request's quota descriptors and slot id.
#[derive(Debug, Clone, Copy)]
pub struct CallHead {
    pub now: Option<i64>,
    pub mode: Mode,
    pub quota_descriptors: usize,
    pub slot: SlotId,
}

/// KEYS and the one argument of a group's call: every number packed (see the script), the
/// call's head first. `refunds` (refund mode) is per charge of the group; `record` is the
/// reservation record's key and time to live (ms) in the modes that have one, the key the
/// call's last. A calendar window
/// sends, in place of its window and burst, the two period ends around this instance's clock
/// ([`crate::limit::calendar::Calendar::choices`]); the script picks by its own.
pub fn args(
    g: &Group,
    specs: &[PlacedCharge<'_>],
    head: CallHead,
    refunds: &[Refund],
    record: Option<(&str, u64)>,
) -> (Vec<Key>, Value) {
    let CallHead {
        now,
        mode,
        quota_descriptors,
        slot,
    } = head;
    let keys: Vec<Key> = g
        .keys
        .iter()
        .map(|&s| Key::from(specs[s].key.as_ref()))
        .chain(record.map(|(key, _)| Key::from(key)))
        .collect();
    let n = g.charges.len();
    let mut packed = Packed::with_numbers(
        layout::CALL_NUMBERS + n * layout::CHARGE_NUMBERS + refunds.len() * layout::REFUND_NUMBERS,
    );
    packed.push_signed(now.unwrap_or(-1));
    packed.push(keys.len() as u64);
    packed.push(mode as u64);
    packed.push(quota_descriptors as u64);
    packed.push(n as u64);
    packed.push(slot.0);
    packed.push(slot.1);
    packed.push(record.map_or(0, |(_, ttl_ms)| ttl_ms));
    for (&ci, &key) in g.charges.iter().zip(&g.key_of) {
        let c = &specs[ci];
        let p = &c.params;
        packed.push(key as u64 + 1);
        packed.push(match p.algorithm {
            Algorithm::FixedWindow => layout::FIXED_WINDOW,
            Algorithm::SlidingWindow => layout::SLIDING_WINDOW,
            Algorithm::TokenBucket => layout::TOKEN_BUCKET,
            Algorithm::Concurrency => layout::CONCURRENCY,
        });
        packed.push(p.limit);
        match &p.calendar {
            // A given end: both choices are it (the script picks the first after its clock).
            None if p.ends_at_us > 0 => {
                packed.push_signed(-(p.ends_at_us as i64));
                packed.push(p.ends_at_us);
            }
            // A negative window: the script reads the two period ends (window and burst).
            Some(c) => {
                let clock = now.map_or_else(|| SystemClock.now_us(), |t| t.max(0) as u64);
                let (a, b) = c.choices(clock);
                packed.push_signed(-(a as i64));
                packed.push(b);
            }
            None => {
                packed.push(p.window_us);
                packed.push(p.burst);
            }
        }
        packed.push(p.overdraft as u64);
        packed.push(c.cost);
        packed.push(match c.role {
            Role::Enforced => layout::ENFORCED,
            Role::Shadow => layout::SHADOW,
            Role::Quota { descriptor } => layout::QUOTA + descriptor as u64,
        });
        packed.push(p.max_wait_us);
        match g.pool_of(specs, c) {
            Some(pool) => {
                packed.push(pool as u64 + 1);
                packed.push(p.borrow_until);
            }
            None => {
                packed.push(0);
                packed.push(0);
            }
        }
        // -1 marks the count of a fair share's active tenants.
        if p.fair_cap > 0 {
            packed.push_signed(-1);
        } else {
            packed.push(p.fair_floor);
        }
    }
    for u in refunds {
        packed.push(u.allowed as u64);
        packed.push(u.kept().added);
        packed.push(u.amount());
        packed.push(u.landing.mark.0);
        packed.push(u.landing.mark.1);
    }
    (keys, packed.into_value())
}

/// Numbers packed as the script unpacks them: little-endian doubles (`struct` format `<d`).
/// Every number is an integer below 2^53 (config validation and `--max-hits` bound them), so
/// each is exact.
struct Packed(Vec<u8>);

impl Packed {
    fn with_numbers(n: usize) -> Packed {
        Packed(Vec::with_capacity(n * 8))
    }

    fn push(&mut self, v: u64) {
        self.0.extend_from_slice(&(v as f64).to_le_bytes());
    }

    fn push_signed(&mut self, v: i64) {
        self.0.extend_from_slice(&(v as f64).to_le_bytes());
    }

    fn into_value(self) -> Value {
        Value::Bytes(self.0.into())
    }
}

/// The numbers of a script's reply: `"="` then packed little-endian doubles. Anything else is
/// the error a call of a batch failed with.
pub fn unpack(reply: &Value) -> Result<Vec<i64>, StoreError> {
    match reply.as_bytes().map(|b| b.split_first()) {
        Some(Some((b'=', numbers))) if numbers.len() % 8 == 0 => Ok(numbers
            .chunks_exact(8)
            .map(|d| f64::from_le_bytes(d.try_into().expect("8 bytes")) as i64)
            .collect()),
        Some(_) if !matches!(reply, Value::Bytes(_)) => {
            Err(unreadable(reply.as_str().unwrap_or_default().to_string()))
        }
        _ => Err(unreadable(format!("unexpected script reply {reply:?}"))),
    }
}

/// One group's answer.
pub struct Reply {
    /// The `now` the script decided at (µs); a refund answers at the same time.
    pub now: i64,
    pub answer: GroupAnswer,
}

/// Parses the numbers of a reply: `now`, then per charge allowed, remaining, wait_us (-1 =
/// never), added, mark1, mark2.
pub fn parse_reply(g: &Group, reply: &[i64]) -> Result<Reply, StoreError> {
    if reply.len() != 1 + layout::ANSWER_NUMBERS * g.charges.len() {
        return Err(unreadable(format!(
            "unexpected script reply of {} values",
            reply.len()
        )));
    }
    let answer = reply[1..]
        .chunks_exact(layout::ANSWER_NUMBERS)
        .map(|r| {
            let outcome = ChargeOutcome {
                allowed: r[0] == 1,
                remaining: r[1].max(0) as u64,
                wait_us: (r[2] >= 0).then_some(r[2] as u64),
            };
            let landing = Landing {
                added: r[3].max(0) as u64,
                mark: (r[4].max(0) as u64, r[5].max(0) as u64),
            };
            (outcome, landing)
        })
        .collect();
    Ok(Reply {
        now: reply[0],
        answer,
    })
}

/// A call's failure as the script answered it, or a reply it should never give.
pub fn unreadable(why: String) -> StoreError {
    StoreError::new(SOMEWHERE, Cause::Script(why))
}

/// The state the script keeps in a key, read back (see the script's header for the format):
/// `None` for bytes that hold no state of `params`' algorithm. A sliding window's forgotten
/// entries (before its head) are not state; expired state is left to
/// [`crate::algorithm::refresh`].
pub fn decode_state(params: &LimitParams, raw: &[u8]) -> Option<State> {
    if !raw.len().is_multiple_of(8) {
        return None;
    }
    let numbers: Vec<u64> = raw
        .chunks_exact(8)
        .map(|d| f64::from_le_bytes(d.try_into().expect("8 bytes")) as u64)
        .collect();
    match params.algorithm {
        Algorithm::FixedWindow => match numbers[..] {
            [count, end_us] => Some(State::Window(Window { count, end_us })),
            _ => None,
        },
        Algorithm::SlidingWindow => {
            let (&total, rest) = numbers.split_first()?;
            let (&head, _) = rest.split_first()?;
            let entries = numbers.get(head as usize / 8..)?;
            if !entries.len().is_multiple_of(2) || head < 16 {
                return None;
            }
            Some(State::Log(Log {
                entries: entries.chunks_exact(2).map(|e| (e[0], e[1])).collect(),
                total,
            }))
        }
        Algorithm::Concurrency => {
            if !numbers.len().is_multiple_of(4) {
                return None;
            }
            Some(State::Slots(Slots {
                held: numbers
                    .chunks_exact(4)
                    .map(|h| Held {
                        id: (h[0], h[1]),
                        units: h[2],
                        expires_us: h[3],
                    })
                    .collect(),
            }))
        }
        Algorithm::TokenBucket => {
            let (head, history) = (numbers.get(..5)?, &numbers[5..]);
            if !history.len().is_multiple_of(3) {
                return None;
            }
            let limit = params.limit as u128;
            Some(State::Tat(Tat {
                us: head[0],
                frac: head[1],
                born: head[2],
                seq: head[3],
                dropped: head[4],
                history: history
                    .chunks_exact(3)
                    .map(|h| (h[0], h[1] as u128 * limit + h[2] as u128))
                    .collect(),
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::layout;
    use crate::algorithm::rule::Mode;

    /// The numbers a line `local A, B = 1, 2` of the script gives its names.
    fn lua_locals(names: &str) -> Vec<String> {
        let lua = super::Script::tollgate().lua;
        let prefix = format!("local {names} = ");
        let line = lua
            .lines()
            .find(|l| l.trim_start().starts_with(&prefix))
            .unwrap_or_else(|| panic!("the decision script has no line `{prefix}...`"));
        line.trim_start()[prefix.len()..]
            .split(',')
            .map(|v| v.trim().to_string())
            .collect()
    }

    #[test]
    fn the_script_counts_the_layout_as_rust_does() {
        assert_eq!(
            lua_locals("CALL_NUMBERS, CHARGE_NUMBERS, REFUND_NUMBERS"),
            [
                layout::CALL_NUMBERS,
                layout::CHARGE_NUMBERS,
                layout::REFUND_NUMBERS
            ]
            .map(|n| n.to_string())
        );
        assert_eq!(
            lua_locals("FIRST, CHARGE, REFUNDED"),
            [
                "8 * CALL_NUMBERS + 1",
                "8 * CHARGE_NUMBERS",
                "8 * REFUND_NUMBERS"
            ]
        );
        // Answers are the script's widest packs: none is wider, and some are exactly as wide.
        let lua = super::Script::tollgate().lua;
        let widths: Vec<usize> = lua
            .split("struct.pack('<")
            .skip(1)
            .map(|rest| rest.chars().take_while(|&c| c == 'd').count())
            .collect();
        assert_eq!(widths.iter().max(), Some(&layout::ANSWER_NUMBERS));
    }

    #[test]
    fn the_script_numbers_modes_algorithms_and_roles_as_rust_does() {
        assert_eq!(
            lua_locals("DECIDE, COUNT_REJECTED, DRY_RUN, REFUND, RELEASE, RENEW"),
            [
                Mode::Decide,
                Mode::CountRejected,
                Mode::DryRun,
                Mode::Refund,
                Mode::Release,
                Mode::Renew
            ]
            .map(|m| (m as u64).to_string())
        );
        assert_eq!(
            lua_locals("RESERVE, SETTLE, UNRESERVE"),
            [Mode::Reserve, Mode::Settle, Mode::Unreserve].map(|m| (m as u64).to_string())
        );
        assert_eq!(
            lua_locals("FIXED_WINDOW, SLIDING_WINDOW, TOKEN_BUCKET, CONCURRENCY"),
            [
                layout::FIXED_WINDOW,
                layout::SLIDING_WINDOW,
                layout::TOKEN_BUCKET,
                layout::CONCURRENCY
            ]
            .map(|n| n.to_string())
        );
        assert_eq!(
            lua_locals("ENFORCED, SHADOW, QUOTA"),
            [layout::ENFORCED, layout::SHADOW, layout::QUOTA].map(|n| n.to_string())
        );
    }
}
