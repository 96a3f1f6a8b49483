//! Real `redis-server` processes for integration tests: one node or a whole cluster.
//!
//! Tests talk to real Redis, never a mock. Each server runs in the foreground as a child of the
//! test process, on a free loopback port, with persistence off and its own temporary directory,
//! so tests can run in parallel threads and leave nothing behind: dropping a [`RedisServer`] or
//! [`RedisCluster`] kills its processes and removes its directories. Servers are spawned so that
//! they die with the test binary even when it is killed ([`super::process`]).
//!
//! Part of the shared test support (`tests/support`). Every wait is bounded and panics with
//! a message saying what did not happen.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long one server may take to answer after it is spawned.
const START_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a cluster may take to agree that every slot is served.
const CLUSTER_TIMEOUT: Duration = Duration::from_secs(20);
/// How long one `redis-cli` invocation may run.
const CLI_TIMEOUT: Duration = Duration::from_secs(15);
/// The cluster bus listens on the client port plus this offset.
const CLUSTER_BUS_OFFSET: u16 = 10_000;
/// Attempts at finding a port nobody else grabs before our server binds it.
const START_ATTEMPTS: usize = 10;
/// Redis abandons a manual failover it could not finish in this long (`CLUSTER_MF_TIMEOUT`).
const MANUAL_FAILOVER_TIMEOUT: Duration = Duration::from_secs(5);
const POLL_INTERVAL: Duration = Duration::from_millis(50);
const ALL_SLOTS: usize = 16_384;

/// Ports owned by live [`RedisServer`]s of this process (client and cluster-bus ports), kept
/// even while a server is stopped so a restart finds its port again. Holding the lock also
/// serialises "pick a free port, start a server on it", so two test threads never pick the same
/// port. Other processes are handled by retrying.
static RESERVED_PORTS: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
static DIR_COUNTER: AtomicU64 = AtomicU64::new(0);

fn reserved_ports() -> MutexGuard<'static, BTreeSet<u16>> {
    // A test that panicked while starting a server poisons the lock; the set is still valid.
    RESERVED_PORTS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One `redis-server` process on `127.0.0.1`, killed (and its directory removed) on drop.
pub struct RedisServer {
    port: u16,
    dir: PathBuf,
    extra_args: Vec<String>,
    /// Entries of [`RESERVED_PORTS`] this server gives back when dropped.
    reserved: Vec<u16>,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a standalone server on a free port and waits until it answers.
    pub fn start() -> RedisServer {
        Self::start_with(&[], false)
    }

    /// Starts a server with `extra_args` appended to the defaults; `{port}` in an argument is
    /// replaced by the chosen port. With `needs_bus_port`, the port is chosen so that
    /// port + 10000 is free too (for `--cluster-enabled yes`).
    pub fn start_with(extra_args: &[&str], needs_bus_port: bool) -> RedisServer {
        require_redis_binaries();
        let mut reserved = reserved_ports();
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let port = pick_free_port(&reserved, needs_bus_port);
            let extra_args: Vec<String> = extra_args
                .iter()
                .map(|arg| arg.replace("{port}", &port.to_string()))
                .collect();
            let mut server = RedisServer {
                port,
                dir: unique_temp_dir(),
                extra_args,
                reserved: Vec::new(),
                child: None,
            };
            match server.spawn_and_wait() {
                Ok(()) => {
                    server.reserved.push(port);
                    if needs_bus_port {
                        server.reserved.push(port + CLUSTER_BUS_OFFSET);
                    }
                    reserved.extend(&server.reserved);
                    return server;
                }
                // Another process took the port between our check and the server's bind.
                Err(why) => failures.push(format!("port {port}: {why}")),
            }
        }
        panic!(
            "could not start redis-server after {START_ATTEMPTS} attempts:\n{}",
            failures.join("\n")
        );
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's working directory (holds `redis.log` and, for cluster nodes, `nodes-P.conf`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The process id of the running server, if it is running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Runs `redis-cli -p PORT args...` and returns its stdout without the trailing newline.
    /// Output is redis-cli's raw format (no `(integer)` decorations); error replies are text.
    pub fn cli(&self, args: &[&str]) -> String {
        cli_on(self.port, args)
    }

    /// `EVALSHA` calls this server has run so far (`INFO commandstats`).
    pub fn evalsha_calls(&self) -> u64 {
        evalsha_calls_on(self.port)
    }

    /// Kills the server (SIGKILL: no shutdown save, like a crash) but keeps its port and
    /// directory so [`restart`](Self::restart) brings the same node back.
    pub fn stop(&mut self) {
        self.stop_child();
    }

    /// Starts the server again on the same port and directory (stopping it first if running).
    pub fn restart(&mut self) {
        self.stop();
        if let Err(why) = self.spawn_and_wait() {
            panic!(
                "could not restart redis-server on port {}: {why}",
                self.port
            );
        }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("redis.log")
    }

    fn spawn_and_wait(&mut self) -> Result<(), String> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(|err| format!("cannot open {}: {err}", self.log_path().display()))?;
        let log_err = log
            .try_clone()
            .map_err(|err| format!("cannot clone log file handle: {err}"))?;
        let port = self.port.to_string();
        let dir = self.dir.to_string_lossy().into_owned();
        let mut command = Command::new("redis-server");
        command
            .args(["--port", &port, "--bind", "127.0.0.1", "--save", ""])
            .args(["--appendonly", "no", "--dir", &dir, "--daemonize", "no"])
            .args(["--logfile", ""])
            .args(&self.extra_args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        let child = super::process::spawn(command)
            .map_err(|err| format!("cannot spawn redis-server: {err}"))?;
        let pid = child.id();
        self.child = Some(child);

        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                self.child = None;
                return Err(format!(
                    "redis-server exited with {status} before answering; log:\n{}",
                    self.log_tail()
                ));
            }
            // The pid check makes sure the answer came from our process, not a stranger that
            // already owned the port while ours was failing to bind it.
            if server_pid(self.port) == Some(pid) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                self.stop_child();
                return Err(format!(
                    "redis-server did not answer PING within {START_TIMEOUT:?}; log:\n{}",
                    self.log_tail()
                ));
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    fn stop_child(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn log_tail(&self) -> String {
        let text = fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop_child();
        let _ = fs::remove_dir_all(&self.dir);
        if !self.reserved.is_empty() {
            let mut reserved = reserved_ports();
            for port in &self.reserved {
                reserved.remove(port);
            }
        }
    }
}

/// Processes and directories of servers kept for the whole test binary, removed at exit.
static KEPT: Mutex<Vec<(Option<u32>, PathBuf)>> = Mutex::new(Vec::new());

extern "C" fn remove_kept() {
    let kept = KEPT.lock().unwrap_or_else(|p| p.into_inner());
    for (pid, dir) in kept.iter() {
        if let Some(pid) = pid {
            // SAFETY: kill(2) on a pid this process started.
            unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
        }
        let _ = fs::remove_dir_all(dir);
    }
}

/// Registers servers to stop at exit (statics are never dropped).
fn keep(servers: &[RedisServer]) {
    static REGISTER: std::sync::Once = std::sync::Once::new();
    REGISTER.call_once(|| {
        // SAFETY: registering a plain extern "C" function.
        unsafe { libc::atexit(remove_kept) };
    });
    let mut kept = KEPT.lock().unwrap_or_else(|p| p.into_inner());
    kept.extend(servers.iter().map(|s| (s.pid(), s.dir.clone())));
}

impl RedisServer {
    /// Keeps this server for the rest of the test binary (shared fixtures); it is stopped and
    /// its directory removed when the binary exits.
    pub fn keep_until_exit(self) -> &'static RedisServer {
        keep(std::slice::from_ref(&self));
        Box::leak(Box::new(self))
    }
}

/// A local Redis Cluster of `masters × (1 + replicas_per_master)` nodes.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts the nodes, joins them with `redis-cli --cluster create`, and waits until every
    /// node reports `cluster_state:ok` with all slots served and every replica in sync.
    pub fn start(masters: usize, replicas_per_master: usize) -> RedisCluster {
        assert!(
            masters >= 3,
            "redis-cli --cluster create needs at least 3 masters"
        );
        let total = masters * (1 + replicas_per_master);
        let nodes = (0..total)
            .map(|_| {
                RedisServer::start_with(
                    &[
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes-{port}.conf",
                        "--cluster-node-timeout",
                        "2000",
                        // Replicas sync at once instead of waiting 5 s for more replicas to
                        // share a diskless transfer.
                        "--repl-diskless-sync-delay",
                        "0",
                    ],
                    true,
                )
            })
            .collect();
        let cluster = RedisCluster { nodes };

        let mut args = vec!["--cluster".to_string(), "create".to_string()];
        args.extend(
            cluster
                .nodes()
                .iter()
                .map(|port| format!("127.0.0.1:{port}")),
        );
        args.extend([
            "--cluster-replicas".to_string(),
            replicas_per_master.to_string(),
            "--cluster-yes".to_string(),
        ]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = run_bounded(Command::new("redis-cli").args(&args), CLI_TIMEOUT);
        if !output.contains("[OK] All 16384 slots covered") {
            panic!("redis-cli --cluster create did not cover all slots:\n{output}");
        }
        cluster.wait_ready();
        cluster
    }

    /// Keeps this cluster for the rest of the test binary (shared fixtures); it is stopped and
    /// its directories removed when the binary exits.
    pub fn keep_until_exit(self) -> &'static RedisCluster {
        keep(&self.nodes);
        Box::leak(Box::new(self))
    }

    /// Every node as a seed, in the form `redis-cluster://127.0.0.1:P1,127.0.0.1:P2,...`.
    pub fn seed_url(&self) -> String {
        let seeds: Vec<String> = self
            .nodes()
            .iter()
            .map(|port| format!("127.0.0.1:{port}"))
            .collect();
        format!("redis-cluster://{}", seeds.join(","))
    }

    /// Ports of all nodes, running or not.
    pub fn nodes(&self) -> Vec<u16> {
        self.nodes.iter().map(RedisServer::port).collect()
    }

    /// Ports of the running nodes that call themselves primaries in `CLUSTER NODES`.
    pub fn masters(&self) -> Vec<u16> {
        self.running_with_role("master")
    }

    /// Ports of the running nodes that call themselves replicas in `CLUSTER NODES`.
    pub fn replicas(&self) -> Vec<u16> {
        self.running_with_role("slave")
    }

    /// The primary that `replica_port` replicates, from the replica's own `CLUSTER NODES`.
    pub fn master_of(&self, replica_port: u16) -> u16 {
        let view = cluster_view(&self.cli(replica_port, &["CLUSTER", "NODES"]));
        let myself = view
            .iter()
            .find(|node| node.is_myself())
            .unwrap_or_else(|| panic!("node {replica_port} has no 'myself' line"));
        view.iter()
            .find(|node| node.id == myself.master_id)
            .map(|node| node.port)
            .unwrap_or_else(|| panic!("node {replica_port} is not a replica of a known node"))
    }

    /// `redis-cli -p port args...` (stdout, trailing newline trimmed). Put `-c` first in `args`
    /// to have redis-cli follow MOVED/ASK redirections.
    pub fn cli(&self, port: u16, args: &[&str]) -> String {
        cli_on(port, args)
    }

    /// Kills one node (SIGKILL). Its port and `nodes-P.conf` stay for [`restart_node`].
    ///
    /// [`restart_node`]: Self::restart_node
    pub fn kill_node(&mut self, port: u16) {
        self.node_mut(port).stop();
    }

    /// Starts a killed node again on its port with its saved cluster config, and waits until the
    /// cluster has absorbed it.
    pub fn restart_node(&mut self, port: u16) {
        self.node_mut(port).restart();
        self.wait_ready();
    }

    /// Runs `CLUSTER FAILOVER` on a replica and waits until every running node sees it as the
    /// primary of its slots and the cluster is ready again. Redis drops a manual failover it
    /// could not finish in 5 s without telling the caller, so the request is repeated then.
    pub fn failover(&self, replica_port: u16) {
        let deadline = Instant::now() + CLUSTER_TIMEOUT;
        let promoted_everywhere = || {
            self.running_ports().iter().all(|&port| {
                cluster_view(&cli_on(port, &["CLUSTER", "NODES"]))
                    .iter()
                    .any(|node| node.port == replica_port && node.serves_slots())
            })
        };
        'attempts: loop {
            let reply = self.cli(replica_port, &["CLUSTER", "FAILOVER"]);
            assert_eq!(
                reply, "OK",
                "CLUSTER FAILOVER on {replica_port} was refused"
            );
            let attempt_deadline = Instant::now() + MANUAL_FAILOVER_TIMEOUT;
            while Instant::now() < attempt_deadline {
                if promoted_everywhere() {
                    break 'attempts;
                }
                if Instant::now() >= deadline {
                    panic!(
                        "timed out after {CLUSTER_TIMEOUT:?} waiting for replica {replica_port} \
                         to be promoted; views:\n{}",
                        self.describe_views()
                    );
                }
                thread::sleep(Duration::from_millis(100));
            }
        }
        self.wait_ready();
    }

    /// `SCRIPT FLUSH` on every running node, as happens to script caches after a restart.
    pub fn script_flush_all(&self) {
        for port in self.running_ports() {
            let reply = cli_on(port, &["SCRIPT", "FLUSH"]);
            assert_eq!(reply, "OK", "SCRIPT FLUSH on {port} failed");
        }
    }

    /// Kills every node: a full outage. Data is lost (no persistence); cluster configs stay.
    pub fn stop_all(&mut self) {
        for node in &mut self.nodes {
            node.stop();
        }
    }

    /// Starts every stopped node on its old port with its old `nodes-P.conf`, so the same cluster
    /// reforms, and waits until it is ready.
    pub fn start_all(&mut self) {
        for node in &mut self.nodes {
            if !node.is_running() {
                node.restart();
            }
        }
        self.wait_ready();
    }

    /// The hash slot of `key`, as the cluster computes it (`CLUSTER KEYSLOT`).
    /// The running primary that serves `key`'s slot, by its own `CLUSTER NODES` line.
    pub fn primary_for(&self, key: &str) -> u16 {
        let slot = self.slot_of(key);
        self.masters()
            .into_iter()
            .find(|&port| {
                let nodes = self.cli(port, &["CLUSTER", "NODES"]);
                let Some(myself) = nodes.lines().find(|l| l.contains("myself")) else {
                    return false;
                };
                myself.split_whitespace().skip(8).any(|range| {
                    let (a, b) = range.split_once('-').unwrap_or((range, range));
                    match (a.parse::<u16>(), b.parse::<u16>()) {
                        (Ok(a), Ok(b)) => (a..=b).contains(&slot),
                        _ => false,
                    }
                })
            })
            .unwrap_or_else(|| panic!("no running primary serves slot {slot} of {key:?}"))
    }

    pub fn slot_of(&self, key: &str) -> u16 {
        let port = *self
            .running_ports()
            .first()
            .expect("slot_of needs at least one running node");
        let reply = cli_on(port, &["CLUSTER", "KEYSLOT", key]);
        reply
            .parse()
            .unwrap_or_else(|_| panic!("CLUSTER KEYSLOT {key:?} answered {reply:?}"))
    }

    /// Waits until the cluster is settled: every running node reports `cluster_state:ok` with
    /// all 16384 slots served, every running node's `CLUSTER NODES` gives the same roles for
    /// all running nodes (so a primary knows its replicas before a manual failover), only
    /// running nodes serve slots, and every running replica's link to its primary is up.
    pub fn wait_ready(&self) {
        self.wait_for("the cluster to be ready", || {
            let running = self.running_ports();
            let mut agreed: Option<(u16, BTreeMap<u16, Role>)> = None;
            for &port in &running {
                let info = cli_on(port, &["CLUSTER", "INFO"]);
                let slots_ok = info_field(&info, "cluster_slots_ok").and_then(|n| n.parse().ok());
                let ok =
                    info_field(&info, "cluster_state") == Some("ok") && slots_ok == Some(ALL_SLOTS);
                if !ok {
                    return Err(format!("node {port}: CLUSTER INFO:\n{info}"));
                }
                let view = cluster_view(&cli_on(port, &["CLUSTER", "NODES"]));
                if let Some(stopped) = view
                    .iter()
                    .find(|node| node.serves_slots() && !running.contains(&node.port))
                {
                    return Err(format!(
                        "node {port} still routes slots to stopped node {}",
                        stopped.port
                    ));
                }
                let roles = roles_of(&view, &running);
                if roles.len() != running.len() {
                    return Err(format!("node {port} knows only {roles:?} of {running:?}"));
                }
                match &agreed {
                    None => agreed = Some((port, roles.clone())),
                    Some((first_port, first)) if *first != roles => {
                        return Err(format!(
                            "nodes disagree: {first_port} sees {first:?}, {port} sees {roles:?}"
                        ))
                    }
                    Some(_) => {}
                }
                if matches!(roles.get(&port), Some(Role::Replica { .. })) {
                    let replication = cli_on(port, &["INFO", "replication"]);
                    if info_field(&replication, "master_link_status") != Some("up") {
                        return Err(format!("replica {port}: link to its primary is not up"));
                    }
                }
            }
            Ok(())
        });
    }

    /// Every running node's `CLUSTER NODES`, for timeout messages.
    fn describe_views(&self) -> String {
        self.running_ports()
            .iter()
            .map(|&port| format!("node {port}:\n{}", cli_on(port, &["CLUSTER", "NODES"])))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn wait_for(&self, what: &str, mut check: impl FnMut() -> Result<(), String>) {
        let deadline = Instant::now() + CLUSTER_TIMEOUT;
        loop {
            let last = match check() {
                Ok(()) => return,
                Err(why) => why,
            };
            if Instant::now() >= deadline {
                panic!("timed out after {CLUSTER_TIMEOUT:?} waiting for {what}; last: {last}");
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    fn running_ports(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|node| node.child.is_some())
            .map(RedisServer::port)
            .collect()
    }

    fn running_with_role(&self, role: &str) -> Vec<u16> {
        self.running_ports()
            .into_iter()
            .filter(|&port| {
                cluster_view(&cli_on(port, &["CLUSTER", "NODES"]))
                    .iter()
                    .any(|node| node.is_myself() && node.flags.contains(role))
            })
            .collect()
    }

    fn node_mut(&mut self, port: u16) -> &mut RedisServer {
        self.nodes
            .iter_mut()
            .find(|node| node.port == port)
            .unwrap_or_else(|| panic!("port {port} is not a node of this cluster"))
    }
}

/// What one node believes another node is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Role {
    Primary { serves_slots: bool },
    Replica { of: Option<u16> },
    Failing,
}

/// The roles a `CLUSTER NODES` view gives the `running` nodes it knows.
fn roles_of(view: &[ClusterNode], running: &[u16]) -> BTreeMap<u16, Role> {
    view.iter()
        .filter(|node| running.contains(&node.port))
        .map(|node| {
            let role = if node.flags.contains("fail") || node.flags.contains("fail?") {
                Role::Failing
            } else if node.flags.contains("master") {
                Role::Primary {
                    serves_slots: node.has_slots,
                }
            } else {
                let of = view
                    .iter()
                    .find(|other| other.id == node.master_id)
                    .map(|other| other.port);
                Role::Replica { of }
            };
            (node.port, role)
        })
        .collect()
}

/// One line of `CLUSTER NODES`.
struct ClusterNode {
    id: String,
    port: u16,
    flags: BTreeSet<String>,
    master_id: String,
    has_slots: bool,
}

impl ClusterNode {
    fn is_myself(&self) -> bool {
        self.flags.contains("myself")
    }

    /// A healthy primary that owns slots.
    fn serves_slots(&self) -> bool {
        self.flags.contains("master")
            && !self.flags.contains("fail")
            && !self.flags.contains("fail?")
            && self.has_slots
    }
}

/// Parses `<id> <ip:port@cport> <flags> <master> <ping> <pong> <epoch> <link> [slots...]` lines.
fn cluster_view(nodes: &str) -> Vec<ClusterNode> {
    nodes
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 {
                return None;
            }
            let address = fields[1].split('@').next()?;
            let port = address.rsplit(':').next()?.parse().ok()?;
            Some(ClusterNode {
                id: fields[0].to_string(),
                port,
                flags: fields[2].split(',').map(str::to_string).collect(),
                master_id: fields[3].to_string(),
                has_slots: fields.len() > 8,
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

/// `EVALSHA` calls the server on `port` has run so far (`INFO commandstats`).
pub fn evalsha_calls_on(port: u16) -> u64 {
    let stats = cli_on(port, &["INFO", "commandstats"]);
    info_field(&stats, "cmdstat_evalsha")
        .and_then(|v| v.strip_prefix("calls="))
        .and_then(|v| v.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

pub fn cli_on(port: u16, args: &[&str]) -> String {
    let output = run_bounded(
        Command::new("redis-cli")
            .arg("-p")
            .arg(port.to_string())
            .args(args),
        CLI_TIMEOUT,
    );
    output.trim_end_matches('\n').to_string()
}

/// Runs a command with a deadline and returns its stdout; panics (with stderr) on timeout.
fn run_bounded(command: &mut Command, timeout: Duration) -> String {
    run_with_deadline(command, timeout).1
}

/// Runs a command with a deadline: (exited successfully, stdout, stderr). Panics (with stderr)
/// when it does not finish in time.
pub fn run_with_deadline(command: &mut Command, timeout: Duration) -> (bool, String, String) {
    let described = format!("{command:?}");
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|err| panic!("cannot run {described}: {err}"));
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            let stderr = stderr.join().unwrap_or_default();
            panic!("{described} did not finish within {timeout:?}; stderr: {stderr}");
        }
        thread::sleep(Duration::from_millis(5));
    };
    (
        status.success(),
        stdout.join().unwrap_or_default(),
        stderr.join().unwrap_or_default(),
    )
}

/// Reads a pipe to its end on a thread, so a chatty child never blocks on a full pipe.
fn drain(pipe: Option<impl Read + Send + 'static>) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_string(&mut text);
        }
        text
    })
}

/// The `process_id` of whatever Redis answers `INFO server` on `port`, if any.
fn server_pid(port: u16) -> Option<u32> {
    let address = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
    let mut stream =
        TcpStream::connect_timeout(&address.into(), Duration::from_millis(200)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    stream.write_all(b"INFO server\r\n").ok()?;
    let mut reader = BufReader::new(stream);
    let mut header = String::new();
    reader.read_line(&mut header).ok()?;
    let length: usize = header.strip_prefix('$')?.trim_end().parse().ok()?;
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    let body = String::from_utf8(body).ok()?;
    info_field(&body, "process_id")?.parse().ok()
}

/// A loopback port nobody listens on now and no server of ours owns (and, with
/// `needs_bus_port`, the same for port + 10000).
fn pick_free_port(reserved: &BTreeSet<u16>, needs_bus_port: bool) -> u16 {
    loop {
        let port = super::server::pick_port(needs_bus_port);
        let bus_taken = needs_bus_port && reserved.contains(&(port + CLUSTER_BUS_OFFSET));
        if !reserved.contains(&port) && !bus_taken {
            return port;
        }
    }
}

fn unique_temp_dir() -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.subsec_nanos())
        .unwrap_or(0);
    let name = format!(
        "tollgate-redis-{}-{}-{nanos}",
        std::process::id(),
        DIR_COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let dir = std::env::temp_dir().join(name);
    fs::create_dir_all(&dir).unwrap_or_else(|err| panic!("cannot create {}: {err}", dir.display()));
    dir
}

fn require_redis_binaries() {
    let on_path = |binary: &str| {
        std::env::var_os("PATH")
            .map(|path| std::env::split_paths(&path).any(|dir| dir.join(binary).is_file()))
            .unwrap_or(false)
    };
    if !on_path("redis-server") {
        panic!(
            "redis-server not found on PATH: the Redis tests start their own redis-server \
             processes; install redis-server (Debian: apt-get install redis-server)"
        );
    }
    if !on_path("redis-cli") {
        panic!(
            "redis-cli not found on PATH: the Redis tests drive their redis-server processes \
             with it; install redis-tools (Debian: apt-get install redis-server)"
        );
    }
}
