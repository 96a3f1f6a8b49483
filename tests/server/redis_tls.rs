//! Redis over TLS: the binary against a real TLS-enabled `redis-server` (certificates made by
//! the test), with `--redis-ca-file` and, for mutual TLS, `--redis-client-cert`/`--redis-client-key`.
//! Without a client certificate the server refuses the connection, and `/readyz` says why.

use std::net::SocketAddr;
use std::time::Duration;

use tollgate::pb::rls::rate_limit_service_client::RateLimitServiceClient;

use crate::support::binary::Binary;
use crate::support::pki::Pki;
use crate::support::redis::RedisServer;
use crate::support::server::*;

const CONFIG: &str = "\
domain: tls
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 2}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_go_over_mutual_tls_to_redis() {
    let pki = tokio::task::block_in_place(Pki::make);
    let tls_port = free_port();
    let path = |name: &str| pki.path(name).display().to_string();
    let (cert, key, ca) = (path("server.crt"), path("server.key"), path("ca.crt"));
    let redis = tokio::task::block_in_place(|| {
        RedisServer::start_with(
            &[
                "--tls-port",
                &tls_port.to_string(),
                "--tls-cert-file",
                &cert,
                "--tls-key-file",
                &key,
                "--tls-ca-cert-file",
                &ca,
                "--tls-auth-clients",
                "yes",
            ],
            false,
        )
    });
    let config = TempConfig::new(CONFIG);
    let url = format!("rediss://127.0.0.1:{tls_port}");

    // With the client certificate: decisions are made, and the counters are in that Redis.
    let ca = path("ca.crt");
    let redis_args = [
        "--redis-url",
        &url,
        "--redis-timeout",
        "500ms",
        "--redis-ca-file",
        &ca,
    ];
    let (cert, key) = (path("client.crt"), path("client.key"));
    let mut args = redis_args.to_vec();
    args.extend(["--redis-client-cert", &cert, "--redis-client-key", &key]);
    let log = Some(config.dir.join("mtls.log"));
    let mut mtls = Binary::serve(config.path(), &args, log).await;
    mtls.wait_ready().await;
    let addr: SocketAddr = format!("127.0.0.1:{}", mtls.grpc_port())
        .parse()
        .expect("addr");
    let mut client = RateLimitServiceClient::new(channel(addr).await);
    for want in [OK, OK, OVER_LIMIT] {
        let r = call(&mut client, req("tls", &[&[("tenant", "acme")]])).await;
        assert_eq!(r.overall_code, want, "{r:?}; log: {}", mtls.log());
    }
    let keys = tokio::task::block_in_place(|| redis.cli(&["--raw", "KEYS", "*acme*"]));
    assert!(!keys.trim().is_empty(), "no counter in the TLS Redis");
    drop(mtls);

    // Without it, Redis refuses the handshake: not ready, and /readyz names TLS.
    let log = Some(config.dir.join("anonymous.log"));
    let anonymous = Binary::serve(config.path(), &redis_args, log).await;
    let readyz = format!("{}/readyz", anonymous.http_url);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let reason = loop {
        let resp = http_client()
            .get(&readyz)
            .send()
            .await
            .expect("GET /readyz");
        let status = resp.status();
        let body = resp.text().await.unwrap_or_default();
        assert_ne!(status, 200, "ready without a client certificate: {body}");
        if body.to_ascii_lowercase().contains("tls") || body.contains("certificate") {
            break body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "/readyz never named the TLS failure: {body}; log: {}",
            anonymous.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    println!("readyz without a client certificate: {reason}");
}
