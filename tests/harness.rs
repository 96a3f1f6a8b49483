//! Tests of the Redis test harness itself (`tests/support/redis.rs`): that it starts real
//! `redis-server` processes, single and clustered, drives them through outages, and cleans up.

#[path = "support/mod.rs"]
mod support;

use std::path::Path;
use std::thread;

use support::redis::{RedisCluster, RedisServer};

fn process_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn single_server_starts_stops_restarts_and_cleans_up() {
    let mut server = RedisServer::start();
    let port = server.port();
    assert_eq!(server.url(), format!("redis://127.0.0.1:{port}"));
    assert_eq!(server.cli(&["PING"]), "PONG");
    assert_eq!(server.cli(&["SET", "greeting", "hello"]), "OK");

    server.stop();
    assert!(!server.is_running());
    assert_eq!(
        server.cli(&["PING"]),
        "",
        "a stopped server must not answer"
    );

    server.restart();
    assert_eq!(server.port(), port, "restart keeps the port");
    assert_eq!(server.cli(&["PING"]), "PONG");
    assert_eq!(
        server.cli(&["EXISTS", "greeting"]),
        "0",
        "persistence is off, so a restart loses data"
    );

    let pid = server.pid().expect("restarted server has a process");
    let dir = server.dir().to_path_buf();
    drop(server);
    assert!(!process_exists(pid), "drop must kill redis-server {pid}");
    assert!(!dir.exists(), "drop must remove {}", dir.display());
}

#[test]
fn servers_started_in_parallel_get_their_own_ports() {
    let servers: Vec<RedisServer> = (0..4)
        .map(|_| thread::spawn(RedisServer::start))
        .collect::<Vec<_>>()
        .into_iter()
        .map(|handle| handle.join().expect("server thread panicked"))
        .collect();
    let mut ports: Vec<u16> = servers.iter().map(RedisServer::port).collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), servers.len(), "ports collided: {ports:?}");
    for server in &servers {
        assert_eq!(server.cli(&["PING"]), "PONG");
    }
}

#[test]
fn cluster_forms_routes_hash_tags_fails_over_and_survives_a_full_outage() {
    let mut cluster = RedisCluster::start(3, 1);
    let nodes = cluster.nodes();
    assert_eq!(nodes.len(), 6);
    assert_eq!(cluster.masters().len(), 3);
    assert_eq!(cluster.replicas().len(), 3);
    for port in &nodes {
        assert!(cluster.seed_url().contains(&format!("127.0.0.1:{port}")));
    }
    assert!(cluster.seed_url().starts_with("redis-cluster://"));

    // Keys sharing a hash tag share a slot, so a multi-key command on them is allowed.
    let slot = cluster.slot_of("{tenant-7}:minute");
    assert_eq!(cluster.slot_of("{tenant-7}:hour"), slot);
    assert_ne!(
        cluster.slot_of("tenant-7:minute"),
        cluster.slot_of("tenant-7:hour")
    );
    let any = nodes[0];
    assert_eq!(
        cluster.cli(
            any,
            &[
                "-c",
                "MSET",
                "{tenant-7}:minute",
                "1",
                "{tenant-7}:hour",
                "2"
            ]
        ),
        "OK"
    );
    assert_eq!(
        cluster.cli(any, &["-c", "MGET", "{tenant-7}:minute", "{tenant-7}:hour"]),
        "1\n2"
    );

    let replica = cluster.replicas()[0];
    let old_master = cluster.master_of(replica);
    cluster.failover(replica);
    assert!(
        cluster.masters().contains(&replica),
        "replica was not promoted"
    );
    assert!(
        cluster.replicas().contains(&old_master),
        "old primary did not step down"
    );
    assert_eq!(cluster.masters().len(), 3);

    // A crashed primary is replaced by its replica, and comes back as a replica.
    let crashed = cluster.masters()[0];
    let heir = cluster
        .replicas()
        .into_iter()
        .find(|&replica| cluster.master_of(replica) == crashed)
        .expect("every primary has a replica");
    cluster.kill_node(crashed);
    cluster.wait_ready();
    assert!(
        cluster.masters().contains(&heir),
        "replica {heir} did not take over"
    );
    cluster.restart_node(crashed);
    assert_eq!(cluster.master_of(crashed), heir);

    let script = "return redis.call('PING')";
    let sha = cluster.cli(replica, &["SCRIPT", "LOAD", script]);
    assert_eq!(cluster.cli(replica, &["SCRIPT", "EXISTS", &sha]), "1");
    cluster.script_flush_all();
    assert_eq!(cluster.cli(replica, &["SCRIPT", "EXISTS", &sha]), "0");

    cluster.stop_all();
    assert!(
        cluster.masters().is_empty(),
        "no node may answer during an outage"
    );
    cluster.start_all();
    assert_eq!(cluster.nodes(), nodes, "the same nodes come back");
    assert_eq!(cluster.masters().len(), 3);
    assert_eq!(cluster.replicas().len(), 3);
    assert_eq!(
        cluster.cli(any, &["-c", "SET", "{tenant-7}:minute", "3"]),
        "OK",
        "the reformed cluster takes writes"
    );
}
