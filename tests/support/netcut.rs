//! Network partitions on one machine: a Redis Cluster whose nodes each have a loopback address
//! of their own ([`LoopbackCluster`]), and an iptables chain of the test's own that cuts one
//! node off from the others ([`Netcut`]).
//!
//! Linux answers a connection to any 127.0.0.0/8 address from source 127.0.0.1. Each node is
//! started with `--bind A --bind-source-addr A`, so node-to-node traffic (replication and the
//! cluster bus) runs between the nodes' own addresses while tollgate, connecting from 127.0.0.1,
//! is never matched by a rule `-s NODE -d OTHER -j DROP`: a primary can be cut off from its
//! cluster while tollgate still reaches it, the case where Redis Cluster loses acknowledged
//! writes.
//!
//! Guard rails: every rule names only this test's own node addresses and lives in the chain
//! `TG-CUT-<pid>`; the only other change is one jump to it from INPUT and one from OUTPUT.
//! Dropping the [`Netcut`] (also while a panic unwinds) removes the jumps, flushes and deletes
//! the chain. Without root or without iptables, [`Netcut::new`] panics saying so. A test binary
//! killed outright (SIGKILL) skips `Drop`: its chain stays behind but only names addresses of
//! 127.77.0.0/16 that nothing else uses, and the next binary with the same pid removes it.

use std::fs::{self, File};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::redis::run_with_deadline;

/// A node as another node sees it: its address, whether it is a primary, its flags.
type Role = (Ipv4Addr, bool, String);

/// How long one node may take to answer after it is spawned.
const START_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one `redis-cli` or `iptables` invocation may run.
const CLI_TIMEOUT: Duration = Duration::from_secs(15);
/// The cluster bus listens on the client port plus this offset.
const CLUSTER_BUS_OFFSET: u16 = 10_000;
const ALL_SLOTS: usize = 16_384;
/// Clusters this process started (each gets addresses of its own).
static CLUSTERS: AtomicU32 = AtomicU32::new(0);

/// The message of every failure to partition for lack of privileges or tools.
const NEED_ROOT: &str = "partition tests need root and iptables (Debian package iptables)";

/// A chain of the test's own in the filter table, jumped to from INPUT and OUTPUT, holding DROP
/// rules between the test's own addresses. Removed on drop.
pub struct Netcut {
    iptables: String,
    chain: String,
}

impl Netcut {
    /// Creates chain `TG-CUT-<pid>` and the jumps to it from INPUT and OUTPUT, with the first of
    /// `iptables` (nf_tables on Debian) and `iptables-legacy` that works here. Panics without
    /// root or without either tool.
    pub fn new() -> Netcut {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            panic!("{NEED_ROOT}: this test runs as a user other than root");
        }
        let candidates: Vec<String> = ["iptables", "iptables-legacy"]
            .iter()
            .filter_map(|name| find_binary(name))
            .collect();
        if candidates.is_empty() {
            panic!(
                "{NEED_ROOT}: neither iptables nor iptables-legacy is on the PATH or in /usr/sbin"
            );
        }
        let chain = format!("TG-CUT-{}", std::process::id());
        let mut failures = Vec::new();
        for iptables in candidates {
            let cut = Netcut {
                iptables: iptables.clone(),
                chain: chain.clone(),
            };
            // A chain of this name is the leftover of a killed binary that had our pid.
            cut.remove_chain();
            cut.remove_orphans();
            match cut.install() {
                Ok(()) => return cut,
                Err(why) => {
                    cut.remove_chain();
                    // Nothing to remove any more: skip Drop's second attempt.
                    std::mem::forget(cut);
                    failures.push(format!("{iptables}: {why}"));
                }
            }
        }
        panic!(
            "{NEED_ROOT}: no iptables backend works here:\n{}",
            failures.join("\n")
        );
    }

    /// The iptables binary in use (`iptables` or `iptables-legacy`, with its backend).
    pub fn backend(&self) -> String {
        let version = self.run(&["--version"]).unwrap_or_default();
        format!("{} ({})", self.iptables, version.trim())
    }

    /// Drops every packet between `node` and each of `others`, both ways.
    pub fn cut(&self, node: Ipv4Addr, others: &[Ipv4Addr]) {
        for other in others {
            let (node, other) = (node.to_string(), other.to_string());
            for (src, dst) in [(&node, &other), (&other, &node)] {
                self.run(&["-A", &self.chain, "-s", src, "-d", dst, "-j", "DROP"])
                    .unwrap_or_else(|why| panic!("cannot add a DROP rule: {why}"));
            }
        }
    }

    /// Removes every rule of the chain (the chain and its jumps stay).
    pub fn heal(&self) {
        self.run(&["-F", &self.chain])
            .unwrap_or_else(|why| panic!("cannot flush chain {}: {why}", self.chain));
    }

    /// The chain's rules, as `iptables -S CHAIN` lists them.
    pub fn rules(&self) -> String {
        self.run(&["-S", &self.chain]).unwrap_or_default()
    }

    fn install(&self) -> Result<(), String> {
        self.run(&["-N", &self.chain])?;
        self.run(&["-I", "INPUT", "-j", &self.chain])?;
        self.run(&["-I", "OUTPUT", "-j", &self.chain])?;
        Ok(())
    }

    /// Removes the jumps (every copy), the rules and the chain; ignores what is not there.
    fn remove_chain(&self) {
        for hook in ["INPUT", "OUTPUT"] {
            while self.run(&["-D", hook, "-j", &self.chain]).is_ok() {}
        }
        let _ = self.run(&["-F", &self.chain]);
        let _ = self.run(&["-X", &self.chain]);
    }

    /// Removes the chains `TG-CUT-<pid>` of test binaries no longer running (killed before
    /// their `Drop` could run): they name only loopback addresses of 127.77.0.0/16, but should
    /// not pile up.
    fn remove_orphans(&self) {
        let listing = self.run(&["-S"]).unwrap_or_default();
        for line in listing.lines() {
            let Some(pid) = line.strip_prefix("-N TG-CUT-") else {
                continue;
            };
            let Ok(pid) = pid.trim().parse::<u32>() else {
                continue;
            };
            if pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists()
            {
                let orphan = Netcut {
                    iptables: self.iptables.clone(),
                    chain: format!("TG-CUT-{pid}"),
                };
                drop(orphan);
            }
        }
    }

    /// `iptables -w ARGS` (waiting for the xtables lock); stdout, or stderr as the error.
    fn run(&self, args: &[&str]) -> Result<String, String> {
        let mut command = Command::new(&self.iptables);
        if args != ["--version"] {
            command.arg("-w");
        }
        command.args(args);
        let (ok, stdout, stderr) = run_with_deadline(&mut command, CLI_TIMEOUT);
        if ok {
            Ok(stdout)
        } else {
            Err(format!(
                "{} {}: {}",
                self.iptables,
                args.join(" "),
                stderr.trim()
            ))
        }
    }
}

impl Drop for Netcut {
    fn drop(&mut self) {
        self.remove_chain();
    }
}

fn find_binary(name: &str) -> Option<String> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect())
        .unwrap_or_default();
    dirs.extend(["/usr/sbin", "/sbin"].map(PathBuf::from));
    dirs.into_iter()
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
        .map(|path| path.to_string_lossy().into_owned())
}

/// One `redis-server` of a [`LoopbackCluster`].
struct Node {
    addr: Ipv4Addr,
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl Node {
    fn cli(&self, args: &[&str]) -> String {
        cli_on(self.addr, self.port, args)
    }
}

/// A Redis Cluster (`--cluster-node-timeout 2000`) whose nodes listen on, and connect from,
/// loopback addresses of their own (`127.77.X.Y`, X from this process's id, Y from a counter
/// of this process). Nodes are killed and their directories removed on drop.
pub struct LoopbackCluster {
    nodes: Vec<Node>,
}

/// What `CLUSTER NODES` says of one node.
#[derive(Debug, Clone)]
pub struct NodeView {
    pub addr: Ipv4Addr,
    pub port: u16,
    pub id: String,
    pub flags: Vec<String>,
    pub master_id: String,
    /// Slot ranges served (primaries), inclusive.
    pub slots: Vec<(u16, u16)>,
}

impl NodeView {
    pub fn is_primary(&self) -> bool {
        self.flags.iter().any(|f| f == "master")
    }

    pub fn is_failing(&self) -> bool {
        self.flags.iter().any(|f| f == "fail" || f == "fail?")
    }

    pub fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(a, b)| (a..=b).contains(&slot))
    }
}

impl LoopbackCluster {
    /// Starts `masters × (1 + replicas_per_master)` nodes on addresses of their own, joins
    /// them with `redis-cli --cluster create`, and waits until the cluster is healthy.
    pub fn start(masters: usize, replicas_per_master: usize) -> LoopbackCluster {
        require_redis_binaries();
        let total = masters * (1 + replicas_per_master);
        let index = CLUSTERS.fetch_add(1, Ordering::SeqCst) as usize;
        assert!(
            (index + 1) * total <= 250,
            "too many loopback clusters in one process"
        );
        // 127.77.X.Y: X from the process id (parallel test binaries), Y from the cluster count.
        let x = (std::process::id() % 250 + 1) as u8;
        let mut cluster = LoopbackCluster { nodes: Vec::new() };
        for i in 0..total {
            let y = (index * total + i + 1) as u8;
            let node = start_node(Ipv4Addr::new(127, 77, x, y));
            cluster.nodes.push(node);
        }

        let mut command = Command::new("redis-cli");
        command.args(["--cluster", "create"]);
        command.args(
            cluster
                .nodes
                .iter()
                .map(|n| format!("{}:{}", n.addr, n.port)),
        );
        command.args(["--cluster-replicas", &replicas_per_master.to_string()]);
        command.arg("--cluster-yes");
        let (_, output, stderr) = run_with_deadline(&mut command, CLI_TIMEOUT);
        if !output.contains("[OK] All 16384 slots covered") {
            panic!("redis-cli --cluster create did not cover all slots:\n{output}\n{stderr}");
        }
        if let Err(why) = cluster.wait_healthy(Duration::from_secs(20)) {
            panic!("the new cluster did not become healthy: {why}");
        }
        cluster
    }

    /// Every node as a seed: `redis-cluster://A1:P1,A2:P2,...`.
    pub fn seed_url(&self) -> String {
        let seeds: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("{}:{}", n.addr, n.port))
            .collect();
        format!("redis-cluster://{}", seeds.join(","))
    }

    /// Every node's address.
    pub fn addrs(&self) -> Vec<Ipv4Addr> {
        self.nodes.iter().map(|n| n.addr).collect()
    }

    /// `redis-cli -h ADDR -p PORT args...` on the node at `addr`.
    pub fn cli(&self, addr: Ipv4Addr, args: &[&str]) -> String {
        self.node(addr).cli(args)
    }

    /// `CLUSTER NODES` as the node at `addr` sees it.
    pub fn view(&self, addr: Ipv4Addr) -> Vec<NodeView> {
        parse_nodes(&self.cli(addr, &["CLUSTER", "NODES"]))
    }

    /// The primaries serving slots, as the node at `from` sees them.
    pub fn primaries(&self, from: Ipv4Addr) -> Vec<NodeView> {
        self.view(from)
            .into_iter()
            .filter(|n| n.is_primary() && !n.is_failing() && !n.slots.is_empty())
            .collect()
    }

    /// Whether the cluster is healthy: every node says `cluster_state:ok` with all slots ok,
    /// all nodes give every node the same role, there are as many primaries serving slots as
    /// at the start, none failing, and every replica's link to its primary is up and synced.
    pub fn healthy(&self) -> Result<(), String> {
        let mut agreed: Option<(Ipv4Addr, Vec<Role>)> = None;
        for node in &self.nodes {
            let info = node.cli(&["CLUSTER", "INFO"]);
            if info_field(&info, "cluster_state") != Some("ok")
                || info_field(&info, "cluster_slots_ok") != Some(&ALL_SLOTS.to_string())
            {
                return Err(format!("node {}: {}", node.addr, info.replace('\n', " ")));
            }
            let view = parse_nodes(&node.cli(&["CLUSTER", "NODES"]));
            if view.len() != self.nodes.len() {
                return Err(format!("node {} knows {} nodes", node.addr, view.len()));
            }
            if let Some(failing) = view.iter().find(|n| n.is_failing()) {
                return Err(format!("node {} sees {} failing", node.addr, failing.addr));
            }
            let mut roles: Vec<(Ipv4Addr, bool, String)> = view
                .iter()
                .map(|n| (n.addr, n.is_primary(), n.master_id.clone()))
                .collect();
            roles.sort();
            match &agreed {
                None => agreed = Some((node.addr, roles)),
                Some((first, first_roles)) if *first_roles != roles => {
                    return Err(format!(
                        "nodes disagree on roles: {first} sees {first_roles:?}, {} sees {roles:?}",
                        node.addr
                    ))
                }
                Some(_) => {}
            }
            let myself = view
                .iter()
                .find(|n| n.flags.iter().any(|f| f == "myself"))
                .ok_or_else(|| format!("node {} has no 'myself' line", node.addr))?;
            if !myself.is_primary() {
                let replication = node.cli(&["INFO", "replication"]);
                if info_field(&replication, "master_link_status") != Some("up")
                    || info_field(&replication, "master_sync_in_progress") != Some("0")
                {
                    return Err(format!("replica {}: link not up or syncing", node.addr));
                }
            }
        }
        let primaries = self.primaries(self.nodes[0].addr);
        let replicas = self.nodes.len() - primaries.len();
        if replicas < primaries.len() {
            return Err(format!(
                "{} primaries serve slots but only {replicas} replicas",
                primaries.len()
            ));
        }
        Ok(())
    }

    /// Polls [`healthy`](Self::healthy) until it holds or `timeout` passes; returns how long
    /// it took, or the last reason with the views of every node.
    pub fn wait_healthy(&self, timeout: Duration) -> Result<Duration, String> {
        let start = Instant::now();
        loop {
            let why = match self.healthy() {
                Ok(()) => return Ok(start.elapsed()),
                Err(why) => why,
            };
            if start.elapsed() >= timeout {
                let views: Vec<String> = self
                    .nodes
                    .iter()
                    .map(|n| format!("{}:\n{}", n.addr, n.cli(&["CLUSTER", "NODES"])))
                    .collect();
                return Err(format!(
                    "not healthy after {timeout:?}: {why}\n{}",
                    views.join("\n")
                ));
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    fn node(&self, addr: Ipv4Addr) -> &Node {
        self.nodes
            .iter()
            .find(|n| n.addr == addr)
            .unwrap_or_else(|| panic!("{addr} is not a node of this cluster"))
    }

    fn node_mut(&mut self, addr: Ipv4Addr) -> &mut Node {
        self.nodes
            .iter_mut()
            .find(|n| n.addr == addr)
            .unwrap_or_else(|| panic!("{addr} is not a node of this cluster"))
    }

    /// The node's process id, while it runs.
    pub fn pid(&self, addr: Ipv4Addr) -> Option<u32> {
        self.node(addr).child.as_ref().map(Child::id)
    }

    /// Kills the node at `addr` (SIGKILL) and waits for it to be gone.
    pub fn kill(&mut self, addr: Ipv4Addr) {
        if let Some(mut child) = self.node_mut(addr).child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the node at `addr` again on its port and directory: it keeps its cluster
    /// identity (`nodes.conf`) and comes back without data (no persistence), so a primary
    /// restarted before its replica is promoted has lost every key it held.
    pub fn restart(&mut self, addr: Ipv4Addr) {
        let node = self.node_mut(addr);
        if node.child.is_some() {
            return;
        }
        if let Err(why) = spawn_and_wait(node) {
            panic!("restarting {addr}: {why}");
        }
    }

    /// `CONFIG SET name value` on every running node (a restarted node needs it again).
    pub fn config_set_all(&self, name: &str, value: &str) {
        for node in self.nodes.iter().filter(|n| n.child.is_some()) {
            node.cli(&["CONFIG", "SET", name, value]);
        }
    }
}

impl Drop for LoopbackCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
            let _ = fs::remove_dir_all(&node.dir);
        }
    }
}

/// The Redis Cluster hash slot of `key` (CRC16/XMODEM of its hash tag, or of the whole key).
pub fn key_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let hashed = match bytes.iter().position(|&b| b == b'{') {
        Some(open) => match bytes[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &bytes[open + 1..open + 1 + len],
            _ => bytes,
        },
        None => bytes,
    };
    let mut crc: u16 = 0;
    for &b in hashed {
        crc ^= (b as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % ALL_SLOTS as u16
}

/// Starts one cluster node on `addr` and a port free there (with port + 10000 free too).
fn start_node(addr: Ipv4Addr) -> Node {
    let mut failures = Vec::new();
    for _ in 0..10 {
        let port = free_port_on(addr);
        let dir = unique_temp_dir(addr);
        let mut node = Node {
            addr,
            port,
            dir,
            child: None,
        };
        match spawn_and_wait(&mut node) {
            Ok(()) => return node,
            Err(why) => {
                failures.push(format!("{addr}:{port}: {why}"));
                let _ = fs::remove_dir_all(&node.dir);
            }
        }
    }
    panic!(
        "could not start redis-server on {addr}:\n{}",
        failures.join("\n")
    );
}

fn spawn_and_wait(node: &mut Node) -> Result<(), String> {
    let log_path = node.dir.join("redis.log");
    let log = File::create(&log_path).map_err(|e| format!("cannot create the log: {e}"))?;
    let log_err = log
        .try_clone()
        .map_err(|e| format!("cannot clone the log: {e}"))?;
    let (addr, port) = (node.addr.to_string(), node.port.to_string());
    let dir = node.dir.to_string_lossy().into_owned();
    let mut command = Command::new("redis-server");
    command
        .args([
            "--port",
            &port,
            "--bind",
            &addr,
            "--bind-source-addr",
            &addr,
        ])
        .args(["--save", "", "--appendonly", "no", "--dir", &dir])
        .args(["--daemonize", "no", "--logfile", ""])
        // Protected mode takes only 127.0.0.1 for loopback and would refuse replicas
        // connecting from 127.77.X.Y; every address here is a loopback one anyway.
        .args(["--protected-mode", "no"])
        .args([
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
        ])
        .args(["--cluster-node-timeout", "2000"])
        // Replicas sync at once instead of waiting 5 s for more replicas to share a transfer.
        .args(["--repl-diskless-sync-delay", "0"])
        .current_dir(&node.dir)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err);
    let child =
        super::process::spawn(command).map_err(|e| format!("cannot spawn redis-server: {e}"))?;
    let pid = child.id().to_string();
    node.child = Some(child);
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Some(Ok(Some(status))) = node.child.as_mut().map(Child::try_wait) {
            node.child = None;
            let log = fs::read_to_string(&log_path).unwrap_or_default();
            return Err(format!("redis-server exited with {status}; log:\n{log}"));
        }
        // The pid makes sure the answer is our process's, not a stranger's on that port.
        let info = node.cli(&["INFO", "server"]);
        if info_field(&info, "process_id") == Some(pid.as_str()) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
            return Err(format!("no answer within {START_TIMEOUT:?}"));
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// A port on `addr` nobody listens on, with port + 10000 free too.
fn free_port_on(addr: Ipv4Addr) -> u16 {
    let bind = |port: u16| TcpListener::bind(SocketAddrV4::new(addr, port));
    for _ in 0..1000 {
        let listener = bind(0).unwrap_or_else(|e| panic!("cannot bind a port on {addr}: {e}"));
        let port = listener.local_addr().expect("a bound address").port();
        if port
            .checked_add(CLUSTER_BUS_OFFSET)
            .is_some_and(|bus| bind(bus).is_ok())
        {
            return port;
        }
    }
    panic!("found no port P on {addr} with P and P+{CLUSTER_BUS_OFFSET} both free");
}

fn unique_temp_dir(addr: Ipv4Addr) -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir = std::env::temp_dir().join(format!(
        "tollgate-netcut-{}-{addr}-{nanos}",
        std::process::id()
    ));
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

fn cli_on(addr: Ipv4Addr, port: u16, args: &[&str]) -> String {
    let mut command = Command::new("redis-cli");
    command
        .args(["-h", &addr.to_string(), "-p", &port.to_string()])
        .args(args);
    let (_, stdout, _) = run_with_deadline(&mut command, CLI_TIMEOUT);
    stdout.trim_end_matches('\n').to_string()
}

/// Parses `<id> <ip:port@cport> <flags> <master> <ping> <pong> <epoch> <link> [slots...]`.
fn parse_nodes(text: &str) -> Vec<NodeView> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 {
                return None;
            }
            let address = fields[1].split('@').next()?;
            let (ip, port) = address.rsplit_once(':')?;
            let slots = fields[8..]
                .iter()
                .filter(|range| !range.starts_with('['))
                .filter_map(|range| {
                    let (a, b) = range.split_once('-').unwrap_or((range, range));
                    Some((a.parse().ok()?, b.parse().ok()?))
                })
                .collect();
            Some(NodeView {
                addr: ip.parse().ok()?,
                port: port.parse().ok()?,
                id: fields[0].to_string(),
                flags: fields[2].split(',').map(str::to_string).collect(),
                master_id: fields[3].to_string(),
                slots,
            })
        })
        .collect()
}

fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        line.strip_prefix(name)?
            .strip_prefix(':')
            .map(str::trim_end)
    })
}

fn require_redis_binaries() {
    if find_binary("redis-server").is_none() {
        panic!(
            "redis-server not found on PATH: the partition tests start their own redis-server \
             processes; install redis-server (Debian: apt-get install redis-server)"
        );
    }
    if find_binary("redis-cli").is_none() {
        panic!(
            "redis-cli not found on PATH: the partition tests drive their redis-server \
             processes with it; install redis-tools (Debian: apt-get install redis-server)"
        );
    }
}
