//! The replicas `--redis-wait-replicas N` counts on: refused at start when a primary has fewer
//! than `N` replicas at all (no decision that charges could ever be answered), and, while
//! running, a readiness warning and a metric when a primary has fewer than `N` connected
//! (decisions that charge on it are then answered by the failure policy).
//!
//! Readiness stays ready while replicas are short: every instance sees the same primaries, so
//! turning not ready would take the whole fleet out of service at once, and callers would
//! then get whatever their proxy does without a rate limit service; the failure policy is the
//! operator's answer for exactly this.

use std::time::Duration;

use fred::prelude::*;
use fred::types::config::Options;
use fred::types::{ClusterHash, CustomCommand};

use super::super::connection::client::Clients;

/// How long one `ROLE` or `CLUSTER NODES` may take.
const ASK_TIMEOUT: Duration = Duration::from_millis(500);

/// A setting no topology of this Redis can meet.
#[derive(Debug, thiserror::Error)]
#[error(
    "--redis-wait-replicas {wanted}: redis {primary} has {has} replica(s) (every primary needs at least {wanted}; 0 turns it off)"
)]
pub struct TooFewReplicas {
    pub wanted: u32,
    pub primary: String,
    pub has: usize,
}

/// Each primary (`host:port`, or the URL's host on a single node) and its replicas: those
/// connected now (`ROLE`), or, with `known`, on a cluster, every replica the cluster lists for
/// it, failing or not (`CLUSTER NODES`). A primary that did not answer is left out.
pub async fn replicas(clients: &Clients, known: bool) -> Vec<(String, usize)> {
    let client = clients.main();
    if !clients.clustered {
        return match role_replicas(client, None).await {
            Some(n) => vec![(clients.host.clone(), n)],
            None => Vec::new(),
        };
    }
    let listed = if known {
        cluster_replicas(client).await
    } else {
        None
    };
    let mut out = Vec::new();
    for primary in clients.primaries() {
        let name = format!("{}:{}", primary.host, primary.port);
        let n = match &listed {
            Some(listed) => listed
                .iter()
                .find(|(address, _)| *address == name)
                .map(|(_, n)| *n),
            None => role_replicas(client, Some(primary)).await,
        };
        if let Some(n) = n {
            out.push((name, n));
        }
    }
    out
}

/// Refuses `wanted` when a primary has fewer replicas than that at all (on a cluster, every
/// replica listed, failing or not; on a single node or behind Sentinel, those connected).
pub async fn check(clients: &Clients, wanted: u32) -> Result<(), TooFewReplicas> {
    match replicas(clients, true)
        .await
        .into_iter()
        .find(|(_, n)| *n < wanted as usize)
    {
        Some((primary, has)) => Err(TooFewReplicas {
            wanted,
            primary,
            has,
        }),
        None => Ok(()),
    }
}

/// The primaries with fewer than `wanted` replicas connected, as one line for `/readyz`.
pub fn shortfall(wanted: u32, replicas: &[(String, usize)]) -> Option<String> {
    let short: Vec<String> = replicas
        .iter()
        .filter(|(_, n)| *n < wanted as usize)
        .map(|(p, n)| format!("redis {p}: {n} of {wanted} replica(s) connected"))
        .collect();
    (!short.is_empty()).then(|| {
        format!(
            "{} (--redis-wait-replicas): decisions that charge there are answered by the failure policy",
            short.join("; ")
        )
    })
}

/// `ROLE` on `node`: the number of replicas connected to it (0 when it is not a primary).
async fn role_replicas(client: &Client, node: Option<Server>) -> Option<usize> {
    let opts = Options {
        timeout: Some(ASK_TIMEOUT),
        fail_fast: true,
        max_attempts: Some(1),
        cluster_node: node,
        ..Default::default()
    };
    let role = CustomCommand::new_static("ROLE", ClusterHash::Random, false);
    let reply: Value = client
        .with_options(&opts)
        .custom(role, Vec::<Value>::new())
        .await
        .ok()?;
    let Value::Array(fields) = reply else {
        return None;
    };
    match (fields.first().and_then(Value::as_str), fields.get(2)) {
        (Some(role), Some(Value::Array(replicas))) if role == "master" => Some(replicas.len()),
        (Some(_), _) => Some(0),
        _ => None,
    }
}

/// Every primary in `CLUSTER NODES` with the number of replicas listed for it.
async fn cluster_replicas(client: &Client) -> Option<Vec<(String, usize)>> {
    let opts = Options {
        timeout: Some(ASK_TIMEOUT),
        ..Default::default()
    };
    let nodes: String = client.with_options(&opts).cluster_nodes().await.ok()?;
    Some(count_replicas(&nodes))
}

/// `CLUSTER NODES` read: each primary's `host:port` and how many replicas name it.
fn count_replicas(nodes: &str) -> Vec<(String, usize)> {
    let lines: Vec<Vec<&str>> = nodes
        .lines()
        .map(|l| l.split_whitespace().collect())
        .filter(|f: &Vec<&str>| f.len() >= 8)
        .collect();
    let address = |f: &[&str]| f[1].split('@').next().unwrap_or_default().to_string();
    lines
        .iter()
        .filter(|f| f[2].split(',').any(|flag| flag == "master"))
        .map(|p| {
            let n = lines.iter().filter(|r| r[3] == p[0]).count();
            (address(p), n)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_every_replica_a_primary_has_failing_or_not() {
        let nodes = "\
a1 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460
a2 127.0.0.1:7002@17002 master - 0 0 2 connected 5461-10922
a3 127.0.0.1:7003@17003 master - 0 0 3 connected 10923-16383
b1 127.0.0.1:7004@17004 slave a1 0 0 1 connected
b2 127.0.0.1:7005@17005 slave,fail a2 0 0 2 disconnected
b3 127.0.0.1:7006@17006 slave a2 0 0 2 connected
";
        assert_eq!(
            count_replicas(nodes),
            [
                ("127.0.0.1:7001".to_string(), 1),
                ("127.0.0.1:7002".to_string(), 2),
                ("127.0.0.1:7003".to_string(), 0),
            ]
        );
    }

    #[test]
    fn a_short_primary_is_named() {
        let replicas = [("a:1".to_string(), 1), ("b:2".to_string(), 0)];
        let line = shortfall(1, &replicas).unwrap();
        assert!(
            line.starts_with("redis b:2: 0 of 1 replica(s) connected"),
            "{line}"
        );
        assert!(!line.contains("a:1"), "{line}");
        assert_eq!(shortfall(0, &replicas), None);
    }
}
