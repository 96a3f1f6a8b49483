//! One store type for the server. [`Store`] hands out `impl Future`s, so it is not
//! object-safe, and a server generic over its store is compiled again (in release builds) by
//! every crate that starts one: the binary twice, once per store, and each test binary once per
//! store it uses. [`AnyStore`] lets [`crate::serve::start`] be compiled once, here: the
//! built-in stores are called directly (one `match` per call, nothing boxed), and any other
//! store goes behind boxed futures ([`AnyStore::Other`]).

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::memory::MemoryStore;
use super::redis::RedisStore;
use super::{CounterReading, Store, Taken};
use crate::algorithm::rule::ChargeOutcome;
use crate::algorithm::rule::Mode;
use crate::plan::Plan;
use crate::store::error::StoreError;

type Boxed<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
type LocalBoxed<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// A store of any kind, cheap to clone.
#[derive(Clone)]
pub enum AnyStore {
    Memory(Arc<MemoryStore>),
    Redis(Arc<RedisStore>),
    /// A store of the embedder's (tests use stores that fail or stall on purpose).
    Other(Arc<dyn DynStore>),
}

impl AnyStore {
    /// `store` as an `AnyStore`: a built-in store (or an `AnyStore`) keeps its direct calls.
    pub fn new<S: Store>(store: Arc<S>) -> AnyStore {
        let store: Arc<dyn Any + Send + Sync> = store;
        let store = match store.downcast::<AnyStore>() {
            Ok(any) => return (*any).clone(),
            Err(other) => other,
        };
        let store = match store.downcast::<MemoryStore>() {
            Ok(memory) => return AnyStore::Memory(memory),
            Err(other) => other,
        };
        match store.downcast::<RedisStore>() {
            Ok(redis) => AnyStore::Redis(redis),
            Err(other) => {
                let other = other
                    .downcast::<S>()
                    .unwrap_or_else(|_| unreachable!("an Arc<S> downcasts to S"));
                AnyStore::Other(other)
            }
        }
    }
}

impl From<MemoryStore> for AnyStore {
    fn from(store: MemoryStore) -> AnyStore {
        AnyStore::Memory(Arc::new(store))
    }
}

impl From<RedisStore> for AnyStore {
    fn from(store: RedisStore) -> AnyStore {
        AnyStore::Redis(Arc::new(store))
    }
}

/// [`Store`] in object-safe form, for [`AnyStore::Other`]; every store has it.
pub trait DynStore: Send + Sync + 'static {
    fn apply_boxed<'a>(
        &'a self,
        plan: &'a Plan<'a>,
        mode: Mode,
    ) -> Boxed<'a, Result<Vec<ChargeOutcome>, StoreError>>;
    fn apply_taking_boxed<'a>(
        &'a self,
        plan: &'a Plan<'a>,
        mode: Mode,
    ) -> Boxed<'a, Result<(Vec<ChargeOutcome>, Taken), StoreError>>;
    fn give_back_boxed(&self, taken: Taken) -> Boxed<'_, ()>;
    fn name(&self) -> &'static str;
    fn is_ready(&self) -> bool;
    fn reason(&self) -> Option<StoreError>;
    fn warning(&self) -> Option<String>;
    fn leases(&self) -> Vec<super::LeaseReport>;
    fn maintain_boxed(&self) -> Boxed<'_, ()>;
    fn close_boxed(&self) -> Boxed<'_, ()>;
    fn serve_thread_boxed<'a>(&'a self, serve: LocalBoxed<'a, ()>) -> LocalBoxed<'a, ()>;
    fn read_boxed<'a>(
        &'a self,
        plan: &'a Plan<'a>,
    ) -> Boxed<'a, Result<Vec<CounterReading>, StoreError>>;
    fn reset_boxed<'a>(
        &'a self,
        plan: &'a Plan<'a>,
    ) -> Boxed<'a, Result<Vec<CounterReading>, StoreError>>;
}

impl<S: Store> DynStore for S {
    fn apply_boxed<'a>(
        &'a self,
        plan: &'a Plan<'a>,
        mode: Mode,
    ) -> Boxed<'a, Result<Vec<ChargeOutcome>, StoreError>> {
        Box::pin(self.apply(plan, mode))
    }
    fn apply_taking_boxed<'a>(
        &'a self,
        plan: &'a Plan<'a>,
        mode: Mode,
    ) -> Boxed<'a, Result<(Vec<ChargeOutcome>, Taken), StoreError>> {
        Box::pin(self.apply_taking(plan, mode))
    }
    fn give_back_boxed(&self, taken: Taken) -> Boxed<'_, ()> {
        Box::pin(self.give_back(taken))
    }
    fn name(&self) -> &'static str {
        Store::name(self)
    }
    fn is_ready(&self) -> bool {
        Store::is_ready(self)
    }
    fn reason(&self) -> Option<StoreError> {
        Store::reason(self)
    }
    fn warning(&self) -> Option<String> {
        Store::warning(self)
    }
    fn leases(&self) -> Vec<super::LeaseReport> {
        Store::leases(self)
    }
    fn maintain_boxed(&self) -> Boxed<'_, ()> {
        Box::pin(self.maintain())
    }
    fn close_boxed(&self) -> Boxed<'_, ()> {
        Box::pin(self.close())
    }
    fn serve_thread_boxed<'a>(&'a self, serve: LocalBoxed<'a, ()>) -> LocalBoxed<'a, ()> {
        Box::pin(self.serve_thread(serve))
    }
    fn read_boxed<'a>(
        &'a self,
        plan: &'a Plan<'a>,
    ) -> Boxed<'a, Result<Vec<CounterReading>, StoreError>> {
        Box::pin(self.read(plan))
    }
    fn reset_boxed<'a>(
        &'a self,
        plan: &'a Plan<'a>,
    ) -> Boxed<'a, Result<Vec<CounterReading>, StoreError>> {
        Box::pin(self.reset(plan))
    }
}

impl Store for AnyStore {
    async fn apply(&self, plan: &Plan<'_>, mode: Mode) -> Result<Vec<ChargeOutcome>, StoreError> {
        match self {
            AnyStore::Memory(s) => s.apply(plan, mode).await,
            AnyStore::Redis(s) => s.apply(plan, mode).await,
            AnyStore::Other(s) => s.apply_boxed(plan, mode).await,
        }
    }

    async fn apply_taking(
        &self,
        plan: &Plan<'_>,
        mode: Mode,
    ) -> Result<(Vec<ChargeOutcome>, Taken), StoreError> {
        match self {
            AnyStore::Memory(s) => s.apply_taking(plan, mode).await,
            AnyStore::Redis(s) => s.apply_taking(plan, mode).await,
            AnyStore::Other(s) => s.apply_taking_boxed(plan, mode).await,
        }
    }

    async fn give_back(&self, taken: Taken) {
        match self {
            AnyStore::Memory(s) => s.give_back(taken).await,
            AnyStore::Redis(s) => s.give_back(taken).await,
            AnyStore::Other(s) => s.give_back_boxed(taken).await,
        }
    }

    async fn read(&self, plan: &Plan<'_>) -> Result<Vec<CounterReading>, StoreError> {
        match self {
            AnyStore::Memory(s) => s.read(plan).await,
            AnyStore::Redis(s) => s.read(plan).await,
            AnyStore::Other(s) => s.read_boxed(plan).await,
        }
    }

    async fn reset(&self, plan: &Plan<'_>) -> Result<Vec<CounterReading>, StoreError> {
        match self {
            AnyStore::Memory(s) => s.reset(plan).await,
            AnyStore::Redis(s) => s.reset(plan).await,
            AnyStore::Other(s) => s.reset_boxed(plan).await,
        }
    }

    fn name(&self) -> &'static str {
        match self {
            AnyStore::Memory(s) => Store::name(&**s),
            AnyStore::Redis(s) => Store::name(&**s),
            AnyStore::Other(s) => s.name(),
        }
    }

    fn is_ready(&self) -> bool {
        match self {
            AnyStore::Memory(s) => Store::is_ready(&**s),
            AnyStore::Redis(s) => Store::is_ready(&**s),
            AnyStore::Other(s) => s.is_ready(),
        }
    }

    fn reason(&self) -> Option<StoreError> {
        match self {
            AnyStore::Memory(s) => Store::reason(&**s),
            AnyStore::Redis(s) => Store::reason(&**s),
            AnyStore::Other(s) => s.reason(),
        }
    }

    fn warning(&self) -> Option<String> {
        match self {
            AnyStore::Memory(s) => Store::warning(&**s),
            AnyStore::Redis(s) => Store::warning(&**s),
            AnyStore::Other(s) => s.warning(),
        }
    }

    fn leases(&self) -> Vec<super::LeaseReport> {
        match self {
            AnyStore::Memory(s) => Store::leases(&**s),
            AnyStore::Redis(s) => Store::leases(&**s),
            AnyStore::Other(s) => s.leases(),
        }
    }

    async fn maintain(&self) {
        match self {
            AnyStore::Memory(s) => s.maintain().await,
            AnyStore::Redis(s) => s.maintain().await,
            AnyStore::Other(s) => s.maintain_boxed().await,
        }
    }

    async fn close(&self) {
        match self {
            AnyStore::Memory(s) => s.close().await,
            AnyStore::Redis(s) => s.close().await,
            AnyStore::Other(s) => s.close_boxed().await,
        }
    }

    async fn serve_thread<F: Future>(&self, serve: F) -> F::Output {
        match self {
            AnyStore::Memory(s) => s.serve_thread(serve).await,
            AnyStore::Redis(s) => s.serve_thread(serve).await,
            AnyStore::Other(s) => {
                let mut out = None;
                s.serve_thread_boxed(Box::pin(async { out = Some(serve.await) }))
                    .await;
                match out {
                    Some(out) => out,
                    None => unreachable!("a store's serve_thread runs the future it is given"),
                }
            }
        }
    }
}
