//! Many calls' scripts in one `EVALSHA`.
//!
//! fred flushes the socket after every `EVALSHA` (it never holds a script back for the next
//! command), so scripts sent one by one cost a write system call each, and Redis a read and a
//! command each. On a serving thread (a current-thread runtime, see [`crate::serve::threads`]) a
//! call's script instead joins the thread's open batch for its hash slot. The batch's first call
//! yields once and then sends it, so the batch leaves once every task that was ready on the
//! thread has run: the calls that arrived together leave together, and a lone call waits for
//! nothing. The decision script (`lua/decide/`) decides each call of a batch on its own (a call that fails does
//! not fail the others) and answers each, so a batch changes what Redis does per call, never
//! what it decides. A batch of one is sent as a plain call.
//!
//! A batch is sent by [`super::script::eval`] like any call ([`Inner::script_call`] joins or
//! sends one): its keys share one hash slot (one
//! batch per hash slot on a cluster), so NOSCRIPT, TRYAGAIN and redirects are handled for the
//! batch as a whole, and a redirect means none of it ran.

use std::cell::RefCell;
use std::sync::Arc;

use fred::prelude::*;
use fred::types::config::Options;
use fred::util::redis_keyslot;
use futures::future::join_all;
use parking_lot::Mutex;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::super::connection::client::call_options;
use super::super::durability::commit::thread_bound;
use super::super::durability::durable::Wait;
use super::super::error::SOMEWHERE;
use super::super::inner::Inner;
use super::script::{eval, unpack, unreadable, EvalError};
use crate::store::error::Cause;
use crate::store::error::StoreError;

/// A batch is closed to more calls once it holds this many.
const MAX_CALLS: usize = 64;

/// One script call waiting in a batch: its keys and its argument, where its reply goes, and
/// how long it may be retried.
pub struct Queued {
    pub keys: Vec<Key>,
    pub arg: Value,
    pub retry_until: Instant,
    /// `WAIT` after it ([`super::super::durability::durable`]).
    pub wait: Option<Wait>,
    reply: oneshot::Sender<Result<Vec<i64>, StoreError>>,
}

impl Queued {
    /// Hands this call its reply (the caller may have gone: then nobody hears it).
    pub fn answer(self, reply: Result<Vec<i64>, StoreError>) {
        let _ = self.reply.send(reply);
    }
}

/// The calls of one batch, taken by its first call when it sends them.
pub type Batch = Arc<Mutex<Vec<Queued>>>;

thread_local! {
    /// This thread's open batches: per store id and hash slot.
    static OPEN: RefCell<Vec<(u64, u16, Batch)>> = const { RefCell::new(Vec::new()) };
}

/// Adds a call to this thread's open batch for `store` and `hash_slot`. Returns where its reply
/// comes, and the batch if the call opened it: the caller then sends it, after letting the
/// other ready tasks run (sending starts with [`take`]).
pub fn join(
    store: u64,
    hash_slot: u16,
    keys: Vec<Key>,
    arg: Value,
    retry_until: Instant,
    wait: Option<Wait>,
) -> (
    oneshot::Receiver<Result<Vec<i64>, StoreError>>,
    Option<Batch>,
) {
    let (tx, rx) = oneshot::channel();
    let call = Queued {
        keys,
        arg,
        retry_until,
        wait,
        reply: tx,
    };
    let opened = OPEN.with_borrow_mut(|open| {
        if let Some(i) = open
            .iter()
            .position(|(s, k, _)| *s == store && *k == hash_slot)
        {
            let mut calls = open[i].2.lock();
            calls.push(call);
            if calls.len() >= MAX_CALLS {
                // Full: it leaves when its first call sends it; the next call opens another.
                drop(calls);
                open.swap_remove(i);
            }
            None
        } else {
            let batch: Batch = Arc::new(Mutex::new(vec![call]));
            open.push((store, hash_slot, batch.clone()));
            Some(batch)
        }
    });
    (rx, opened)
}

/// Closes `batch` (a later call opens a new one) and takes its calls.
pub fn take(batch: &Batch) -> Vec<Queued> {
    OPEN.with_borrow_mut(|open| open.retain(|(_, _, b)| !Arc::ptr_eq(b, batch)));
    std::mem::take(&mut *batch.lock())
}

/// KEYS and ARGV of a batch of (two or more) calls: every call's keys in order, and every
/// call's argument (which says how many keys it has).
pub fn combine(calls: &[Queued]) -> (Vec<Key>, Vec<Value>) {
    let nkeys = calls.iter().map(|c| c.keys.len()).sum();
    let mut keys = Vec::with_capacity(nkeys);
    for c in calls {
        keys.extend(c.keys.iter().cloned());
    }
    (keys, calls.iter().map(|c| c.arg.clone()).collect())
}

/// Hands each call its part of a batch's reply: one reply per call, each the call's numbers
/// or a string saying why that call failed.
pub fn answer(calls: Vec<Queued>, reply: Result<Vec<Value>, StoreError>) {
    let replies = match reply {
        Ok(r) if r.len() == calls.len() => r,
        Ok(r) => {
            let e = unreadable(format!(
                "unexpected batch reply: {} replies for {} calls",
                r.len(),
                calls.len()
            ));
            calls.into_iter().for_each(|c| c.answer(Err(e.clone())));
            return;
        }
        Err(e) => {
            calls.into_iter().for_each(|c| c.answer(Err(e.clone())));
            return;
        }
    };
    for (call, reply) in calls.into_iter().zip(replies) {
        call.answer(unpack(&reply));
    }
}

impl Inner {
    /// One script call: batched with the calls that arrive with it on a serving thread, else
    /// on its own.
    pub(in crate::store::redis) async fn script_call(
        &self,
        retry_until: Instant,
        wait: Option<Wait>,
        request: impl Fn() -> (Vec<Key>, Value),
    ) -> Result<Vec<i64>, StoreError> {
        if !thread_bound() {
            let (client, options) = (self.clients.for_call(), call_options());
            // Boxed: this rare path would otherwise size every call's future.
            let call = eval(
                &client,
                &options,
                &self.script,
                &self.migrations,
                retry_until,
                wait,
                || {
                    let (keys, arg) = request();
                    (keys, vec![arg])
                },
            );
            let reply: Value = Box::pin(call).await?;
            return unpack(&reply);
        }
        let (keys, arg) = request();
        let hash_slot = match keys.first() {
            Some(k) if self.clients.clustered => redis_keyslot(k.as_bytes()),
            _ => 0,
        };
        let (reply, opened) = join(self.clients.id, hash_slot, keys, arg, retry_until, wait);
        if let Some(opened) = opened {
            // This call sends the batch it opened, once every task ready on this thread has
            // run (and could join). A call is never cancelled halfway: a decision whose caller
            // stops waiting finishes on its own (see `Detach`). Boxed: the rare retry paths
            // would size every call.
            tokio::task::yield_now().await;
            Box::pin(self.send_batch(opened)).await;
        }
        reply.await.unwrap_or_else(|_| {
            Err(StoreError::new(
                SOMEWHERE,
                Cause::NotRun("the batch was dropped before it was sent".into()),
            ))
        })
    }

    /// Sends a batch of script calls once the calls ready on this thread have joined it.
    async fn send_batch(&self, batch: Batch) {
        let mut calls = take(&batch);
        let (client, options) = (self.clients.for_call(), call_options());
        if calls.len() == 1 {
            let call = calls.pop().expect("one call");
            return self.send_alone(&client, &options, call).await;
        }
        // Tried once (NOSCRIPT aside): on a cluster, a hash slot being migrated refuses a script
        // whose keys are only partly moved (TRYAGAIN), which a batch, with more keys, meets
        // more often than its calls would. Refused, nothing of it ran: its calls are then sent
        // on their own, each retried and redirected as usual.
        let (keys, args) = combine(&calls);
        let wait = calls.iter().fold(None, |w, c| Wait::later(w, c.wait));
        let reply = eval(
            &client,
            &options,
            &self.script,
            &self.migrations,
            Instant::now(),
            wait,
            || (keys.clone(), args.clone()),
        )
        .await;
        match reply {
            Err(EvalError::NotRun(_)) => {
                let alone = calls
                    .into_iter()
                    .map(|call| self.send_alone(&client, &options, call));
                join_all(alone).await;
            }
            reply => answer(calls, reply.map_err(StoreError::from)),
        }
    }

    /// Sends one call of a batch as a plain call, retried until its own deadline.
    async fn send_alone(&self, client: &Client, options: &Options, call: Queued) {
        let reply = eval(
            client,
            options,
            &self.script,
            &self.migrations,
            call.retry_until,
            call.wait,
            || (call.keys.clone(), vec![call.arg.clone()]),
        )
        .await;
        call.answer(
            reply
                .map_err(StoreError::from)
                .and_then(|r: Value| unpack(&r)),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(keys: &[&str], arg: i64) -> (Queued, oneshot::Receiver<Result<Vec<i64>, StoreError>>) {
        let (tx, rx) = oneshot::channel();
        let call = Queued {
            keys: keys.iter().map(|k| Key::from(*k)).collect(),
            arg: Value::Integer(arg),
            retry_until: Instant::now(),
            wait: None,
            reply: tx,
        };
        (call, rx)
    }

    /// A reply as the script packs it.
    fn packed(numbers: &[i64]) -> Value {
        let mut b = vec![b'='];
        numbers
            .iter()
            .for_each(|&n| b.extend_from_slice(&(n as f64).to_le_bytes()));
        Value::Bytes(b.into())
    }

    #[test]
    fn a_reply_that_is_not_packed_numbers_is_an_error() {
        let (a, mut ra) = call(&["k1"], 0);
        let (b, mut rb) = call(&["k2"], 0);
        let torn = Value::Bytes(vec![b'=', 0, 0, 0].into());
        answer(vec![a, b], Ok(vec![torn, Value::Integer(7)]));
        assert!(ra.try_recv().unwrap().is_err());
        assert!(rb.try_recv().unwrap().is_err());
    }

    #[test]
    fn a_batch_lays_out_every_calls_keys_then_every_calls_argument() {
        let (a, _ra) = call(&["k1"], 7);
        let (b, _rb) = call(&["k2", "k3"], 9);
        let (keys, args) = combine(&[a, b]);
        let keys: Vec<&str> = keys.iter().map(|k| k.as_str().unwrap()).collect();
        assert_eq!(keys, ["k1", "k2", "k3"]);
        let args: Vec<String> = args.iter().map(|v| v.as_string().unwrap()).collect();
        assert_eq!(args, ["7", "9"]);
    }

    #[test]
    fn each_call_gets_its_own_reply_and_a_failed_call_fails_alone() {
        let (a, mut ra) = call(&["k1"], 0);
        let (b, mut rb) = call(&["k2"], 0);
        let (c, mut rc) = call(&["k3"], 0);
        let replies = vec![
            packed(&[1, -1]),
            Value::from("WRONGTYPE Operation against a key holding the wrong kind of value"),
            packed(&[3]),
        ];
        answer(vec![a, b, c], Ok(replies));
        assert_eq!(ra.try_recv().unwrap().ok(), Some(vec![1, -1]));
        let e = rb.try_recv().unwrap().unwrap_err();
        assert!(e.to_string().contains("WRONGTYPE"), "{e}");
        assert_eq!(rc.try_recv().unwrap().ok(), Some(vec![3]));
    }

    #[test]
    fn a_reply_of_the_wrong_length_fails_every_call() {
        let (a, mut ra) = call(&["k1"], 0);
        let (b, mut rb) = call(&["k2"], 0);
        answer(vec![a, b], Ok(vec![packed(&[])]));
        assert!(ra.try_recv().unwrap().is_err());
        assert!(rb.try_recv().unwrap().is_err());
    }

    #[test]
    fn calls_on_one_thread_share_a_batch_per_store_and_slot() {
        let until = Instant::now();
        let (_r1, first) = join(1, 5, vec![], Value::Null, until, None);
        let (_r2, second) = join(1, 5, vec![], Value::Null, until, None);
        let (_r3, other_slot) = join(1, 6, vec![], Value::Null, until, None);
        let batch = first.expect("the first call opens the batch");
        assert!(second.is_none());
        let other = other_slot.expect("another hash slot opens its own");
        assert_eq!(take(&batch).len(), 2);
        let (_r4, reopened) = join(1, 5, vec![], Value::Null, until, None);
        assert!(reopened.is_some(), "a taken batch is closed");
        assert_eq!(take(&other).len(), 1);
        take(&reopened.unwrap());
    }

    #[test]
    fn a_full_batch_closes() {
        let until = Instant::now();
        let mut receivers = Vec::new();
        let (r, first) = join(2, 0, vec![], Value::Null, until, None);
        receivers.push(r);
        for _ in 1..MAX_CALLS {
            let (r, opened) = join(2, 0, vec![], Value::Null, until, None);
            assert!(opened.is_none());
            receivers.push(r);
        }
        let (_r, next) = join(2, 0, vec![], Value::Null, until, None);
        assert!(next.is_some(), "the next call opens a new batch");
        assert_eq!(take(&first.unwrap()).len(), MAX_CALLS);
        take(&next.unwrap());
    }
}
