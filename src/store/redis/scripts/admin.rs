//! The operator's reads and resets (`GET /counters`, `POST /counters/reset`): one call of
//! `lua/admin.lua` per placement group (one slot on a cluster, so a group's reset is atomic),
//! never on a decision's path. A reset also drops this instance's lease and over-limit cache
//! entry for the keys it cleared.

use fred::prelude::*;
use futures::future::join_all;
use tokio::time::Instant;

use super::super::connection::client::call_options;
use super::super::inner::Inner;
use super::script::{decode_state, eval, layout, unreadable, Script};
use crate::limit::Algorithm;
use crate::plan::Plan;
use crate::store::error::StoreError;
use crate::store::placement::{place, Group, Layout, Placed};
use crate::store::{CounterReading, GlobalHeld};

/// What a group's call does.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Operation {
    Read,
    Reset,
}

/// The script's algorithm code.
fn code(algorithm: Algorithm) -> u64 {
    match algorithm {
        Algorithm::FixedWindow => layout::FIXED_WINDOW,
        Algorithm::SlidingWindow => layout::SLIDING_WINDOW,
        Algorithm::TokenBucket => layout::TOKEN_BUCKET,
        Algorithm::Concurrency => layout::CONCURRENCY,
    }
}

impl Inner {
    fn layout(&self) -> Layout {
        if self.clients.clustered {
            Layout::ByTag
        } else {
            Layout::OneNode
        }
    }

    /// One `lua/admin.lua` call for group `g`: the script's now and its per-key values.
    async fn admin_call(
        &self,
        placed: &Placed<'_>,
        g: &Group,
        op: Operation,
    ) -> Result<(u64, Vec<Value>), StoreError> {
        let now = self.now_arg().map_or(String::new(), |n| n.to_string());
        let request = || {
            let keys: Vec<Key> = g
                .keys
                .iter()
                .map(|&ci| Key::from(placed.charges[ci].key.as_ref()))
                .collect();
            let mut args: Vec<Value> = vec![
                match op {
                    Operation::Read => "read".into(),
                    Operation::Reset => "reset".into(),
                },
                now.clone().into(),
            ];
            if op == Operation::Reset {
                args.extend(g.keys.iter().map(|&ci| {
                    let p = &placed.charges[ci].params;
                    Value::from(format!("{}:{}", code(p.algorithm), p.window_us))
                }));
            }
            (keys, args)
        };
        let client = self.clients.for_call();
        let retry_until = Instant::now() + self.opts.timeout;
        let reply: Value = eval(
            &client,
            &call_options(),
            &self.admin_script,
            &self.migrations,
            retry_until,
            None,
            request,
        )
        .await
        .map_err(|e| self.clients.explain(e.into()))?;
        let Value::Array(mut values) = reply else {
            return Err(unreadable(format!("admin script answered {reply:?}")));
        };
        if values.len() != g.keys.len() + 1 {
            return Err(unreadable(format!(
                "admin script answered {} values for {} keys",
                values.len(),
                g.keys.len()
            )));
        }
        let now = match values.remove(0) {
            Value::Integer(n) if n >= 0 => n as u64,
            v => return Err(unreadable(format!("admin script's now was {v:?}"))),
        };
        Ok((now, values))
    }

    /// One admin call per placement group (concurrently), each counter's bytes decoded: as
    /// they stand, or as a reset found them.
    async fn readings(
        &self,
        placed: &Placed<'_>,
        op: Operation,
    ) -> Result<Vec<CounterReading>, StoreError> {
        let calls = placed.groups.iter().map(|g| self.admin_call(placed, g, op));
        let replies = join_all(calls).await;
        let mut out: Vec<Option<CounterReading>> = vec![None; placed.charges.len()];
        let mut failure = None;
        for (g, reply) in placed.groups.iter().zip(replies) {
            // A reset's groups that answered are reset; the caller may run it again.
            let (now, values) = match reply {
                Ok(r) => r,
                Err(e) => {
                    failure = Some(e);
                    continue;
                }
            };
            for (&ci, &k) in g.charges.iter().zip(&g.key_of) {
                let spec = &placed.charges[ci];
                let state = match &values[k] {
                    Value::Null => None,
                    Value::Bytes(b) => Some(b.to_vec()),
                    Value::String(s) => Some(s.as_bytes().to_vec()),
                    v => return Err(unreadable(format!("admin script read {v:?}"))),
                }
                .map(|raw| {
                    decode_state(&spec.params, &raw).ok_or_else(|| {
                        unreadable(format!(
                            "{} holds {} bytes that are no state of its limit",
                            spec.key,
                            raw.len()
                        ))
                    })
                })
                .transpose()?;
                out[ci] = Some(CounterReading {
                    state,
                    now_us: now,
                    key: spec.key.to_string(),
                    lease: self.leases.held(&spec.key),
                    held: None,
                });
            }
        }
        if let Some(e) = failure {
            return Err(e);
        }
        out.into_iter()
            .map(|r| r.ok_or_else(|| unreadable("a charge in no placement group".into())))
            .collect()
    }

    /// A global limit reads its lease counter in this region: the current window's, its
    /// limit what the region holds (a reset leaves it alone: spent units stay spent).
    pub(in crate::store::redis) async fn read(
        &self,
        plan: &Plan<'_>,
    ) -> Result<Vec<CounterReading>, StoreError> {
        let mut placed = place(plan, &self.prefix, self.layout());
        let regional = self
            .regional
            .get()
            .filter(|_| super::super::regional::board::has_global(plan));
        let Some(r) = regional else {
            return self.readings(&placed, Operation::Read).await;
        };
        let wall_us = self.wall.now_us();
        let now = tokio::time::Instant::now();
        r.board.place(plan, &mut placed, wall_us);
        let mut readings = self.readings(&placed, Operation::Read).await?;
        for ((c, spec), reading) in plan.charges.iter().zip(&placed.charges).zip(&mut readings) {
            if let Some(g) = &c.limit.global {
                let window = r.board.get(&g.id).and_then(|l| l.spendable(now));
                reading.held = Some(GlobalHeld {
                    units: spec.params.limit,
                    back: window.map_or(0, |w| w.back),
                    reset_after_us: r.board.reset_after_us(&g.id, &c.limit.params, wall_us),
                });
            }
        }
        Ok(readings)
    }

    pub(in crate::store::redis) async fn reset(
        &self,
        plan: &Plan<'_>,
    ) -> Result<Vec<CounterReading>, StoreError> {
        let placed = place(plan, &self.prefix, self.layout());
        for spec in &placed.charges {
            self.leases.forget(&spec.key);
            self.cache.forget(&spec.key);
        }
        self.readings(&placed, Operation::Reset).await
    }
}

impl Script {
    pub fn admin() -> Script {
        let lua = include_str!("../../../../lua/admin.lua");
        Script {
            lua,
            sha: fred::util::sha1_hash(lua),
        }
    }
}
