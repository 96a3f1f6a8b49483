//! Following a hash slot while it moves between primaries (`redis-cli --cluster reshard`).
//!
//! While a hash slot migrates, its source primary answers `ASK <slot> <target>` for the keys that
//! already moved (or never existed): the client must send `ASKING` and then the command to the
//! target, back to back on one connection. fred 10.1 does not: it re-routes the command by the
//! hash slot's owner (the source again) and, once out of attempts, drops every connection it has.
//! So script calls go out with no redirection allowed (fred then answers "Too many
//! redirections.", after re-reading the topology when it was a MOVED), and this module finds
//! the node importing the hash slot in the owner's `CLUSTER NODES` and sends `ASKING` + `EVALSHA`
//! there as one pipeline.
//!
//! A redirect means the command did not run, so following it can never charge twice.

use std::collections::HashMap;
use std::time::Duration;

use fred::clients::Pipeline;
use fred::prelude::*;
use fred::types::config::Options;
use fred::types::{ClusterHash, CustomCommand};
use parking_lot::Mutex;
use tokio::time::Instant;

/// How long a hash slot's importing node is trusted without asking the owner again.
const REMEMBER: Duration = Duration::from_secs(1);

/// How long asking the owner for its view of the hash slot may take.
const LOOKUP_TIMEOUT: Duration = Duration::from_millis(200);

/// Hash slots seen migrating, and the node importing each.
#[derive(Default)]
pub struct Migrations {
    importing: Mutex<HashMap<u16, (Server, Instant)>>,
}

/// Whether fred gave up on a redirect (MOVED or ASK) because the call allowed none.
pub fn redirected(e: &Error) -> bool {
    *e.kind() == ErrorKind::Routing && e.details().contains("redirections")
}

impl Migrations {
    /// The node importing `hash_slot`, if the hash slot is migrating (remembered for a second).
    pub async fn importing_node(&self, client: &Client, hash_slot: u16) -> Option<Server> {
        if let Some((node, at)) = self.importing.lock().get(&hash_slot) {
            if at.elapsed() < REMEMBER {
                return Some(node.clone());
            }
        }
        let routing = client.cached_cluster_state()?;
        let owner = routing.get_server(hash_slot)?.clone();
        let options = Options {
            cluster_node: Some(owner),
            timeout: Some(LOOKUP_TIMEOUT),
            fail_fast: true,
            max_attempts: Some(1),
            ..Default::default()
        };
        let nodes: String = client.with_options(&options).cluster_nodes().await.ok()?;
        let (host, port) = importing_address(&nodes, hash_slot)?;
        // The server fred already holds a connection to (with its TLS name), by address.
        let node = routing
            .unique_primary_nodes()
            .into_iter()
            .find(|s| s.port == port && *s.host == *host)
            .unwrap_or_else(|| Server::new(host, port));
        self.importing
            .lock()
            .insert(hash_slot, (node.clone(), Instant::now()));
        Some(node)
    }

    /// Drops what is known of `hash_slot` (its migration ended or moved on).
    pub fn forget(&self, hash_slot: u16) {
        self.importing.lock().remove(&hash_slot);
    }
}

/// `ASKING` then `EVALSHA sha keys args` on `node`, as one pipeline: fred writes a pipeline's
/// commands back to back on the node's connection, so `ASKING` applies to this script.
pub async fn evalsha_asking<R: FromValue>(
    client: &Client,
    options: &Options,
    node: &Server,
    sha: &str,
    keys: Vec<Key>,
    args: Vec<Value>,
) -> Result<R, Error> {
    let options = Options {
        cluster_node: Some(node.clone()),
        ..options.clone()
    };
    let pipeline = Pipeline::from(client.with_options(&options));
    let asking = CustomCommand::new_static("ASKING", ClusterHash::Random, false);
    pipeline.custom::<(), Value>(asking, Vec::new()).await?;
    let evalsha = CustomCommand::new_static("EVALSHA", ClusterHash::FirstKey, false);
    pipeline
        .custom::<(), Value>(evalsha, evalsha_args(sha, keys, args))
        .await?;
    match pipeline.try_all::<Value>().await.pop() {
        Some(reply) => reply?.convert(),
        None => Err(Error::new(ErrorKind::Unknown, "empty pipeline reply")),
    }
}

/// `EVALSHA`'s arguments as a custom command (in a pipeline) takes them: the script's SHA1, the
/// number of keys, the keys, the arguments.
pub fn evalsha_args(sha: &str, keys: Vec<Key>, args: Vec<Value>) -> Vec<Value> {
    let mut command: Vec<Value> = Vec::with_capacity(2 + keys.len() + args.len());
    command.push(Value::from(sha));
    command.push(Value::Integer(keys.len() as i64));
    command.extend(keys.into_iter().map(Value::from));
    command.extend(args);
    command
}

/// The address of the node importing `hash_slot`, from `CLUSTER NODES` as the hash slot's owner sees
/// it: its own line (`myself`) marks the hash slot `[<slot>->-<target id>]`.
fn importing_address(nodes: &str, hash_slot: u16) -> Option<(String, u16)> {
    let mark = format!("[{hash_slot}->-");
    let target = nodes
        .lines()
        .filter(|line| line.split(' ').nth(2).is_some_and(|f| f.contains("myself")))
        .find_map(|line| {
            let at = line.find(&mark)? + mark.len();
            let id = &line[at..];
            id.find(']').map(|end| id[..end].to_string())
        })?;
    let line = nodes
        .lines()
        .find(|line| line.split(' ').next() == Some(target.as_str()))?;
    // `ip:port@cport[,hostname]`
    let address = line.split(' ').nth(1)?.split(['@', ',']).next()?;
    let (host, port) = address.rsplit_once(':')?;
    Some((host.to_string(), port.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::importing_address;

    const NODES: &str = "\
07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@40004 slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@40002,node-2 master - 0 1426238316232 2 connected 5461-10922
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:30003@40003 master - 0 1426238318243 3 connected 10923-16383
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@40001 myself,master - 0 0 1 connected 0-5460 [93->-67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1] [77-<-292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f]
";

    #[test]
    fn finds_the_node_importing_a_migrating_slot() {
        assert_eq!(
            importing_address(NODES, 93),
            Some(("127.0.0.1".to_string(), 30002))
        );
    }

    #[test]
    fn a_slot_that_is_not_migrating_out_has_no_importing_node() {
        // Hash slot 77 is being imported here, not migrated away; hash slot 9 is not moving at all.
        assert_eq!(importing_address(NODES, 77), None);
        assert_eq!(importing_address(NODES, 9), None);
        assert_eq!(importing_address(NODES, 930), None);
    }

    #[test]
    fn a_mark_on_another_nodes_line_is_not_the_owners_view() {
        let nodes = NODES.replace("myself,master", "master");
        assert_eq!(importing_address(&nodes, 93), None);
    }
}
