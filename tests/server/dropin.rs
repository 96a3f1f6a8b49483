//! tollgate in envoyproxy/ratelimit's place: the binary run exactly as Istio's sample manifest
//! runs `/bin/ratelimit` (a symlink named `ratelimit`, no arguments, only that environment, a
//! real Redis) enforces the mounted config in that Redis; settings it cannot honour stop it
//! with their name; the kill switch, per-domain policy keys and unknown domains answer as
//! documented; gRPC serves TLS and mutual TLS.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use tollgate::pb::rls::rate_limit_response::rate_limit::Unit;
use tollgate::pb::rls::rate_limit_service_client::RateLimitServiceClient;
use tollgate::service::settings::Settings;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

use crate::metrics::{scrape_url, value};
use crate::support::binary::{ratelimit_symlink, Binary, Start, BIN};
use crate::support::pki::Pki;
use crate::support::redis::RedisServer;
use crate::support::server::*;

/// Istio's `samples/ratelimit` config (the ConfigMap mounted at
/// `/data/ratelimit/config/config.yaml`).
const ISTIO_CONFIG: &str = "\
domain: ratelimit
descriptors:
  - key: PATH
    value: \"/productpage\"
    rate_limit:
      unit: minute
      requests_per_unit: 1
  - key: PATH
    rate_limit:
      unit: minute
      requests_per_unit: 100
";

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_as_istios_manifest_runs_envoyproxy_ratelimit() {
    let redis = tokio::task::block_in_place(RedisServer::start);
    let scratch = TempConfig::new("");
    // RUNTIME_ROOT=/data, RUNTIME_SUBDIRECTORY=ratelimit: the config directory is
    // <root>/ratelimit/config. Every non-dot file there is loaded (not only *.yaml), and with
    // RUNTIME_IGNOREDOTFILES=true a broken dotfile is skipped.
    let root = scratch.dir.join("data");
    let config_dir = root.join("ratelimit").join("config");
    std::fs::create_dir_all(&config_dir).expect("config dir");
    std::fs::write(config_dir.join("config.yaml"), ISTIO_CONFIG).expect("config");
    std::fs::write(
        config_dir.join("tenants"),
        "domain: tenants\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: hour, requests_per_unit: 2}\n",
    )
    .expect("extensionless config");
    std::fs::write(config_dir.join(".swp"), "{{ not yaml").expect("dotfile");
    let program = ratelimit_symlink(&scratch.dir);
    let (http_port, grpc_port, debug_port) = (free_port(), free_port(), free_port());
    let redis_addr = format!("127.0.0.1:{}", redis.port());
    let root_text = root.display().to_string();
    let (http, grpc, debug) = (
        http_port.to_string(),
        grpc_port.to_string(),
        debug_port.to_string(),
    );
    // Istio's manifest, verbatim but for the paths and ports a test must choose.
    let binary = Binary::start(Start {
        program: &program,
        args: Vec::new(),
        env: env(&[
            ("LOG_LEVEL", "debug"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", &redis_addr),
            ("USE_STATSD", "false"),
            ("RUNTIME_ROOT", &root_text),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
            ("RUNTIME_WATCH_ROOT", "false"),
            ("RUNTIME_IGNOREDOTFILES", "true"),
            ("HOST", "::"),
            ("GRPC_HOST", "::"),
            ("PORT", &http),
            ("GRPC_PORT", &grpc),
            ("DEBUG_PORT", &debug),
        ]),
        clear_env: true,
        grpc_port,
        http_port,
        log_path: Some(scratch.dir.join("ratelimit.log")),
    })
    .await;
    let mut binary = binary;
    binary.wait_ready().await;

    let addr: SocketAddr = format!("127.0.0.1:{grpc_port}").parse().expect("addr");
    let mut client = RateLimitServiceClient::new(channel(addr).await);
    let product = || req("ratelimit", &[&[("PATH", "/productpage")]]);
    assert_eq!(call(&mut client, product()).await.overall_code, OK);
    let over = call(&mut client, product()).await;
    assert_eq!(over.overall_code, OVER_LIMIT, "{over:?}");
    assert_eq!(
        over.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| l.requests_per_unit),
        Some(1)
    );
    // Another path: the 100/minute catch-all.
    let other = call(&mut client, req("ratelimit", &[&[("PATH", "/reviews")]])).await;
    assert_eq!(other.statuses[0].limit_remaining, 99, "{other:?}");
    // The extensionless file is loaded too.
    for want in [OK, OK, OVER_LIMIT] {
        let r = call(&mut client, req("tenants", &[&[("tenant", "t1")]])).await;
        assert_eq!(r.overall_code, want, "{r:?}");
    }

    // The counters are in the Redis of REDIS_URL.
    let keys = tokio::task::block_in_place(|| redis.cli(&["--raw", "KEYS", "*"]));
    assert!(
        keys.contains("/productpage") && keys.contains("t1"),
        "no counters in the REDIS_URL Redis: {keys:?}; log: {}",
        binary.log()
    );

    // DEBUG_PORT serves /rlconfig (and the other admin routes).
    let rlconfig = http_client()
        .get(format!("http://127.0.0.1:{debug_port}/rlconfig"))
        .send()
        .await
        .expect("GET /rlconfig on DEBUG_PORT")
        .text()
        .await
        .expect("body");
    assert!(
        rlconfig.contains("ratelimit") && rlconfig.contains("tenants"),
        "{rlconfig}"
    );

    // A domain nobody configured is answered OK, but counted (as __unknown__) and logged.
    let unknown = call(&mut client, req("reviews", &[&[("PATH", "/x")]])).await;
    assert_eq!(unknown.overall_code, OK);
    let scrape = scrape_url(&format!("{}/metrics", binary.http_url)).await;
    assert_eq!(
        value(
            &scrape,
            "tollgate_requests_total",
            &[("domain", "__unknown__")]
        ),
        1.0
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let log = binary.log();
    assert!(
        log.contains("domain=reviews") && log.contains("not configured"),
        "the unknown domain is not logged: {log}"
    );
}

/// Runs the `ratelimit` entry point with `vars` (and nothing else) and `args`; returns its
/// exit code and stderr.
fn run_ratelimit(vars: &[(&str, &str)], args: &[&str]) -> (Option<i32>, String) {
    let scratch = TempConfig::new(ISTIO_CONFIG);
    let program = ratelimit_symlink(&scratch.dir);
    let mut command = Command::new(&program);
    command.env_clear().args(args);
    command.env("RUNTIME_ROOT", scratch.dir.display().to_string());
    command.env("RUNTIME_APPDIRECTORY", ".");
    for (k, v) in vars {
        command.env(k, v);
    }
    // Nothing here starts serving: every case fails during startup.
    command.env("PORT", free_port().to_string());
    command.env("GRPC_PORT", free_port().to_string());
    command.env("DEBUG_PORT", free_port().to_string());
    let out = bounded_output(command);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// The command's output, failing the test if it runs longer than 15 s.
fn bounded_output(mut command: Command) -> std::process::Output {
    use std::process::Stdio;
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = command.spawn().expect("start ratelimit");
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while child.try_wait().expect("wait").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("ratelimit did not stop within 15 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// Environment, arguments, and the name the startup error must contain.
type Refusal<'a> = (&'a [(&'a str, &'a str)], &'a [&'a str], &'a str);

#[test]
fn settings_it_cannot_honour_stop_it_by_name() {
    let cases: &[Refusal] = &[
        (&[("BACKEND_TYPE", "memcache")], &[], "BACKEND_TYPE"),
        (
            &[("REDIS_URL", "127.0.0.1:1"), ("REDIS_PERSECOND", "true")],
            &[],
            "REDIS_PERSECOND",
        ),
        (
            &[("REDIS_URL", "127.0.0.1:1"), ("SHADOW_MODE", "maybe")],
            &[],
            "SHADOW_MODE",
        ),
        (
            &[
                ("REDIS_URL", "127.0.0.1:1"),
                ("CONFIG_TYPE", "GRPC_XDS_DELTA"),
            ],
            &[],
            "CONFIG_TYPE",
        ),
        (&[("REDIS_URL", "127.0.0.1:1")], &["serve"], "argument"),
    ];
    for (vars, args, named) in cases {
        let (code, stderr) = run_ratelimit(vars, args);
        assert!(
            code.is_some_and(|c| c != 0),
            "{vars:?} {args:?} started: {code:?} {stderr}"
        );
        assert!(
            stderr.contains(named),
            "{vars:?} {args:?}: the error does not name {named}: {stderr}"
        );
    }
}

const KILL_CONFIG: &str = "\
domain: k
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 1}
";

#[tokio::test]
async fn the_kill_switch_answers_ok_without_touching_the_store() {
    let server = start(
        KILL_CONFIG,
        Settings {
            disabled: true,
            ..Settings::default()
        },
    )
    .await;
    let mut client = server.client().await;
    for _ in 0..3 {
        let r = call(&mut client, req("k", &[&[("a", "x")]])).await;
        assert_eq!(r.overall_code, OK, "{r:?}");
    }
    let scrape = scrape_url(&server.http_url("/metrics")).await;
    let counted = |code| {
        value(
            &scrape,
            "tollgate_requests_total",
            &[("domain", "k"), ("code", code)],
        )
    };
    assert_eq!(counted("DISABLED"), 3.0);
    assert_eq!(counted("OK"), 0.0);
    // No decision was made: no store operation was timed.
    assert_eq!(
        value(&scrape, "tollgate_store_duration_seconds_count", &[]),
        0.0
    );
    server.stop().await;
}

#[tokio::test]
async fn a_domain_disabled_by_reload_answers_ok_and_enabled_again_enforces() {
    let server = start(
        KILL_CONFIG,
        TestOptions {
            reload_interval: Some(Duration::from_millis(50)),
            ..TestOptions::default()
        },
    )
    .await;
    let mut client = server.client().await;
    let a = || req("k", &[&[("a", "x")]]);
    assert_eq!(call(&mut client, a()).await.overall_code, OK);
    assert_eq!(call(&mut client, a()).await.overall_code, OVER_LIMIT);
    server
        .config
        .write(&format!("disabled: true\n{KILL_CONFIG}"));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while call(&mut client, a()).await.overall_code != OK {
        assert!(tokio::time::Instant::now() < deadline, "never disabled");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.config.write(KILL_CONFIG);
    while call(&mut client, a()).await.overall_code != OVER_LIMIT {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never enabled again"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.stop().await;
}

#[tokio::test]
async fn domain_policy_keys_bound_what_callers_may_ask() {
    let config = "\
domain: strict
allow_overrides: false
max_hits: 10
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 5}
";
    let server = start(config, Settings::default()).await;
    let mut client = server.client().await;
    // An override asking for 1000/minute is ignored: the configured 5/minute answers.
    let overridden = request(
        "strict",
        vec![with_override(
            descriptor(&[("a", "x")]),
            1000,
            Unit::Minute as i32,
        )],
    );
    let r = call(&mut client, overridden).await;
    assert_eq!(
        r.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| l.requests_per_unit),
        Some(5),
        "{r:?}"
    );
    assert_eq!(r.statuses[0].limit_remaining, 4);
    // More hits than max_hits: INVALID_ARGUMENT naming the domain's bound.
    let mut big = req("strict", &[&[("a", "y")]]);
    big.hits_addend = 11;
    let message = call_invalid(&mut client, big).await;
    assert!(message.contains("max_hits: 10"), "{message}");
    let mut fits = req("strict", &[&[("a", "y")]]);
    fits.hits_addend = 5;
    assert_eq!(call(&mut client, fits).await.overall_code, OK);
    server.stop().await;
}

async fn tls_call(
    grpc_port: u16,
    tls: Option<ClientTlsConfig>,
) -> Result<tollgate::pb::rls::RateLimitResponse, String> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut endpoint = Endpoint::from_shared(format!("{scheme}://127.0.0.1:{grpc_port}"))
        .expect("endpoint")
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(5));
    if let Some(tls) = tls {
        endpoint = endpoint.tls_config(tls).map_err(|e| format!("{e:?}"))?;
    }
    let channel = endpoint.connect().await.map_err(|e| format!("{e:?}"))?;
    RateLimitServiceClient::new(channel)
        .should_rate_limit(req("k", &[&[("a", "x")]]))
        .await
        .map(tonic::Response::into_inner)
        .map_err(|e| format!("{e:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_serves_tls_and_mutual_tls() {
    let pki = tokio::task::block_in_place(Pki::make);
    let config = TempConfig::new(KILL_CONFIG);
    let start_tls = |client_ca: bool| {
        let (grpc_port, http_port) = (free_port(), free_port());
        let mut args: Vec<String> = [
            "serve",
            "--config",
            &config.path.display().to_string(),
            "--grpc-addr",
            &format!("127.0.0.1:{grpc_port}"),
            "--http-addr",
            &format!("127.0.0.1:{http_port}"),
            "--grpc-tls-cert",
            &pki.path("server.crt").display().to_string(),
            "--grpc-tls-key",
            &pki.path("server.key").display().to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if client_ca {
            args.extend([
                "--grpc-client-ca".to_string(),
                pki.path("ca.crt").display().to_string(),
            ]);
        }
        (grpc_port, http_port, args)
    };
    let ca = Certificate::from_pem(pki.read("ca.crt"));
    let server_only = ClientTlsConfig::new()
        .ca_certificate(ca.clone())
        .domain_name("localhost");
    let with_identity = server_only.clone().identity(Identity::from_pem(
        pki.read("client.crt"),
        pki.read("client.key"),
    ));

    // TLS: a client trusting the CA gets answers; plaintext does not.
    let (grpc_port, http_port, args) = start_tls(false);
    let tls = Binary::start(Start {
        program: Path::new(BIN),
        args,
        env: Vec::new(),
        clear_env: true,
        grpc_port,
        http_port,
        log_path: Some(config.dir.join("tls.log")),
    })
    .await;
    let answer = tls_call(grpc_port, Some(server_only.clone())).await;
    assert_eq!(
        answer.as_ref().map(|r| r.overall_code),
        Ok(OK),
        "{answer:?}; log: {}",
        tls.log()
    );
    assert!(
        tls_call(grpc_port, None).await.is_err(),
        "plaintext answered"
    );
    drop(tls);

    // Mutual TLS: only a client with a certificate from --grpc-client-ca gets answers.
    let (grpc_port, http_port, args) = start_tls(true);
    let mtls = Binary::start(Start {
        program: Path::new(BIN),
        args,
        env: Vec::new(),
        clear_env: true,
        grpc_port,
        http_port,
        log_path: Some(config.dir.join("mtls.log")),
    })
    .await;
    let answer = tls_call(grpc_port, Some(with_identity)).await;
    assert_eq!(
        answer.as_ref().map(|r| r.overall_code),
        Ok(OK),
        "{answer:?}; log: {}",
        mtls.log()
    );
    let anonymous = tls_call(grpc_port, Some(server_only)).await;
    assert!(anonymous.is_err(), "answered without a client certificate");
}
