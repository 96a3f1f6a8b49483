//! fred's router and a command it cannot route (vendor/README.md): a command named at a node
//! fred holds no connection to (`Options::cluster_node`, as tollgate's health probes name each
//! primary, when that primary has failed over and gone) must fail within its one attempt, and
//! the client must answer the next command. fred 10.1.0 as published put such a command back
//! into its retry buffer forever, spinning a runtime worker at 100% of a core and starving
//! every task queued behind it (the hour soak's instance X: its health probe and xDS client
//! stopped for good). The client runs on a runtime of its own and the test watches it from
//! this thread, so a spinning router fails the test instead of hanging it.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use fred::prelude::{
    Builder, Client, ClientLike, Config, KeysInterface, Options, ReconnectPolicy, Server,
};

use crate::support::redis::RedisCluster;
use crate::support::server::free_port;

/// This process's CPU time (user + system).
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // Fields after the command name (which ends at the last ')'): utime is the 12th, stime
    // the 13th, in clock ticks (100 a second on Linux).
    let after = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<u64> = after
        .split_whitespace()
        .skip(11)
        .take(2)
        .map(|f| f.parse().expect("a tick count"))
        .collect();
    Duration::from_millis((fields[0] + fields[1]) * 10)
}

/// Runs `f` on `rt`; its result, or `None` when it is not done within `within`.
fn run_for<T: Send + 'static>(
    rt: &tokio::runtime::Runtime,
    within: Duration,
    f: impl std::future::Future<Output = T> + Send + 'static,
) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    let task = rt.spawn(async move {
        let _ = tx.send(f.await);
    });
    let out = rx.recv_timeout(within).ok();
    task.abort();
    out
}

#[test]
fn a_command_named_at_a_node_that_is_gone_fails_and_the_client_goes_on() {
    let cluster = RedisCluster::start(3, 0);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("the client's runtime");
    // As tollgate's clients are made (src/store/redis/connection/client.rs): one attempt per
    // command, reconnection forever with a short backoff, no fred-side timeout here, so the
    // only end a stuck command gets is its caller giving up (dropping the future).
    let seed = format!("redis-cluster://127.0.0.1:{}", cluster.nodes()[0]);
    let config = Config::from_url(&seed).expect("the cluster's URL");
    let client: Client = Builder::from_config(config)
        .with_connection_config(|c| {
            c.max_command_attempts = 1;
            c.max_redirections = 0;
        })
        .with_performance_config(|p| p.default_command_timeout = Duration::ZERO)
        .set_policy(ReconnectPolicy::new_exponential(0, 50, 200, 2))
        .build()
        .expect("a client");
    let c = client.clone();
    let before = run_for(&rt, Duration::from_secs(10), async move {
        c.init().await?;
        c.get::<Option<String>, _>("before").await
    });
    assert!(
        matches!(before, Some(Ok(None))),
        "connecting and a GET: {before:?}"
    );

    // A node no cluster member listens on: gone, as a failed-over primary is to fred.
    let gone = Server::new("127.0.0.1", free_port());
    let named = Options {
        cluster_node: Some(gone.clone()),
        max_attempts: Some(1),
        ..Default::default()
    };
    let asked = Instant::now();
    let c = client.clone();
    let answer = run_for(&rt, Duration::from_millis(500), async move {
        c.with_options(&named).ping::<String>(None).await
    });
    println!(
        "PING named at {gone}: {answer:?} after {:?} (None: given up)",
        asked.elapsed()
    );
    // Whatever the answer (an error, or the caller giving up), nothing may spin afterwards.
    let cpu = cpu_time();
    let wall = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    let spent = cpu_time().saturating_sub(cpu);
    println!(
        "CPU in the {:?} after it: {spent:?} (a spinning router: about one core)",
        wall.elapsed()
    );
    // And the client answers the next command (after the reconnection the routing failure
    // asked for).
    let c = client.clone();
    let next = run_for(&rt, Duration::from_secs(3), async move {
        c.get::<Option<String>, _>("after").await
    });
    let c = client.clone();
    let _ = run_for(&rt, Duration::from_secs(1), async move { c.quit().await });
    // A spinning worker never stops: leave it behind rather than wait for it.
    rt.shutdown_background();
    assert!(
        spent < Duration::from_millis(400),
        "the client used {spent:?} of CPU in the second after a command it could not route: its router spins"
    );
    assert!(
        matches!(next, Some(Ok(None))),
        "the next GET: {next:?} (None: not answered within 3 s, the router is stuck)"
    );
}
