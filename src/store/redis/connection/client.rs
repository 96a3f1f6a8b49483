//! The store's fred clients: how they are configured from the options (URL, TLS, timeouts,
//! reconnection), the main client, and one client per serving thread.
//!
//! Every serving thread (see [`crate::serve::threads`]) gets a client of its own, whose connections'
//! I/O runs on that thread: a call's script goes out, and its reply comes back, without
//! waking another thread. Upkeep ([`super::health`]) probes and re-syncs every client, so
//! readiness covers them all.

use std::cell::RefCell;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::*;
use fred::types::config::{
    ClusterDiscoveryPolicy, Config, Options, ReconnectPolicy, ReplicaConfig,
};
use parking_lot::Mutex;

use super::super::error::{classify, ConnectError, SOMEWHERE};
use super::super::options::{RedisOptions, LATE_REPLY};
use super::{tls, url};
use crate::store::error::Cause;
use crate::store::error::StoreError;

/// How long a serving thread that stops waits to say QUIT on its connections.
const QUIT_WAIT: Duration = Duration::from_millis(500);

thread_local! {
    /// On a serving thread: its client of each Redis store (by store id; one in practice).
    static THREAD_CLIENTS: RefCell<Vec<(u64, Client)>> = const { RefCell::new(Vec::new()) };
}

static NEXT_STORE_ID: AtomicU64 = AtomicU64::new(0);

/// The settings a client is made from.
struct Recipe {
    config: Config,
    perf: PerformanceConfig,
    conn: ConnectionConfig,
    policy: ReconnectPolicy,
}

impl Recipe {
    fn client(&self) -> Client {
        Client::new(
            self.config.clone(),
            Some(self.perf.clone()),
            Some(self.conn.clone()),
            Some(self.policy.clone()),
        )
    }
}

/// One store's clients: the main one (upkeep's, and calls made off the serving threads) and
/// the serving threads'.
pub struct Clients {
    main: Client,
    recipe: Recipe,
    threads: Mutex<Vec<Client>>,
    /// Tells this store's clients (and script batches) apart on a thread.
    pub id: u64,
    /// A Redis Cluster.
    pub clustered: bool,
    /// The URL's first host, for messages (never the password).
    pub host: String,
    /// The last connection error fred reported (cleared once Redis answers).
    pub connection_error: Arc<Mutex<Option<StoreError>>>,
}

impl Clients {
    /// Configures the clients from `opts` and starts the main one connecting in the
    /// background (retrying with backoff while Redis does not answer).
    pub fn connect(opts: &RedisOptions) -> Result<Clients, ConnectError> {
        if opts.key_prefix.contains(['{', '}']) {
            return Err(ConnectError::Flags(
                "--redis-key-prefix must not contain '{' or '}'",
            ));
        }
        let mut config = url::fred_config(&opts.url)?;
        if let Some(p) = &opts.password {
            config.password = Some(p.clone());
        }
        let tls_wanted = opts.ca_file.is_some() || opts.client_cert.is_some();
        if tls_wanted {
            if config.tls.is_none() {
                return Err(ConnectError::Flags(
                    "--redis-ca-file and --redis-client-cert need a rediss:// URL",
                ));
            }
            config.tls = Some(
                tls::config(
                    opts.ca_file.as_deref(),
                    opts.client_cert
                        .as_ref()
                        .map(|(c, k)| (c.as_path(), k.as_path())),
                )?
                .into(),
            );
        }
        // Topology comes from every node fred has seen, not only the URL's seeds: a seed that
        // dies for good must not take the store down.
        if config.server.is_clustered() {
            config
                .server
                .set_cluster_discovery_policy(ClusterDiscoveryPolicy::UseCache)
                .map_err(|e| ConnectError::ClusterDiscovery(e.kind().clone()))?;
        }
        let host = url::first_host(&opts.url);
        let clustered = config.server.is_clustered();
        if opts.read_replicas && !clustered {
            return Err(ConnectError::Flags(
                "--read-replicas needs a redis-cluster:// URL (replicas are found from the cluster's topology)",
            ));
        }
        // fred's default `fail_fast` gives up on the first connection attempt and never
        // reconnects when Redis was down at start; commands fail fast per call instead.
        config.fail_fast = false;
        let perf = PerformanceConfig {
            default_command_timeout: LATE_REPLY,
            ..Default::default()
        };
        let conn = ConnectionConfig {
            connection_timeout: opts.connect_timeout,
            internal_command_timeout: opts.connect_timeout,
            max_command_attempts: 1,
            // fred follows no redirect: `script::eval` follows MOVED and ASK itself (fred's
            // ASK handling sends the command back to the source; see `migration`). fred still
            // re-reads the topology on MOVED. 0 here, since 0 per call means "the default".
            max_redirections: 0,
            // Replica connections open on first use; a replica that cannot be reached falls
            // back to its primary.
            replica: ReplicaConfig {
                lazy_connections: true,
                ignore_reconnection_errors: true,
                primary_fallback: true,
                ..Default::default()
            },
            ..Default::default()
        };
        let recipe = Recipe {
            config,
            perf,
            conn,
            // Backoff capped at 200 ms: every serving thread's client reconnects on its own,
            // and with a 1 s cap one could sit out most of a second after a failover that the
            // others had already followed (seen as calls failing after decisions resumed).
            policy: ReconnectPolicy::new_exponential(0, 50, 200, 2),
        };
        let main = recipe.client();
        main.connect();
        let connection_error = Arc::new(Mutex::new(None));
        let mut errors = main.error_rx();
        let (seen, fallback) = (connection_error.clone(), host.clone());
        tokio::spawn(async move {
            while let Ok((e, server)) = errors.recv().await {
                *seen.lock() = Some(classify(&e, server.as_ref(), &fallback));
            }
        });
        Ok(Clients {
            main,
            recipe,
            threads: Mutex::new(Vec::new()),
            id: NEXT_STORE_ID.fetch_add(1, Ordering::Relaxed),
            clustered,
            host,
            connection_error,
        })
    }

    /// The main client (upkeep's).
    pub fn main(&self) -> &Client {
        &self.main
    }

    /// The client for a call on this thread: the serving thread's own once it is connected,
    /// else the main one. (A thread's client connects in the background when its thread
    /// starts, and readiness follows the main client: a call that came before the thread's
    /// client had its cluster routing failed with "Missing cluster routing state".)
    pub fn for_call(&self) -> Client {
        THREAD_CLIENTS
            .with_borrow(|c| {
                c.iter()
                    .find(|(id, c)| *id == self.id && c.is_connected())
                    .map(|(_, c)| c.clone())
            })
            .unwrap_or_else(|| self.main.clone())
    }

    /// Every client: the main one first, then the serving threads'.
    pub fn all(&self) -> Vec<Client> {
        let mut all = vec![self.main.clone()];
        all.extend(self.threads.lock().iter().cloned());
        all
    }

    /// `e` as people should read it: placed at the URL's host when no node was named, and,
    /// for a call that timed out or lost its connection while fred reports a connection
    /// error (not cleared since Redis last answered), that error: a call on a connection
    /// that cannot be made waits for it until the deadline, or fails as "closed", while the
    /// cause is "refused".
    pub fn explain(&self, e: StoreError) -> StoreError {
        if e.is_connection() || matches!(e.cause, Cause::Timeout(_)) {
            if let Some(known) = self.connection_error.lock().clone() {
                return known;
            }
        }
        if e.place == SOMEWHERE {
            return e.at(format!("redis {}", self.host));
        }
        e
    }

    /// The primaries as fred last saw them (empty for a single node).
    pub fn primaries(&self) -> Vec<Server> {
        self.main
            .cached_cluster_state()
            .map(|s| s.unique_primary_nodes())
            .unwrap_or_default()
    }

    /// Runs a serving thread's `serve` with a client of the thread's own.
    pub async fn serve_thread<F: Future>(&self, serve: F) -> F::Output {
        let client = self.recipe.client();
        client.connect();
        THREAD_CLIENTS.with_borrow_mut(|c| c.push((self.id, client.clone())));
        self.threads.lock().push(client.clone());
        let out = serve.await;
        THREAD_CLIENTS.with_borrow_mut(|c| c.retain(|(id, _)| *id != self.id));
        self.threads.lock().retain(|c| c.id() != client.id());
        // A client still connecting would hold QUIT until it connected (or for LATE_REPLY):
        // dropping the thread's runtime, next, stops it all the same.
        if client.is_connected() {
            let _ = tokio::time::timeout(QUIT_WAIT, client.quit()).await;
        }
        out
    }
}

/// A script call may wait for its reply this long: past the caller's deadline, a late reply
/// still tells what to refund.
pub fn call_options() -> Options {
    Options {
        timeout: Some(LATE_REPLY),
        fail_fast: true,
        max_attempts: Some(1),
        ..Default::default()
    }
}
